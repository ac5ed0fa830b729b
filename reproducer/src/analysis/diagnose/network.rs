//! Silences between nodes, each judged per connection (silence.rs): a silence of a
//! connection that never carried a packet, or of one that behaved like the pair's idle
//! connections in fault-free runs and was no longer silent than they are, is set aside; a
//! connection of a node to itself is ignored; the others, merged per node pair while they
//! overlap, are a partition when corroborated (traffic resumed, a connection torn down,
//! several connections silent together, a steady connection silent far beyond its own
//! traffic) and not contradicted (another connection of the pair talking meanwhile, or only
//! one direction silent). Also the map of production's addresses to nodes.
use std::net::SocketAddr;

use tracedump::event::What;

use super::flows::{FlowSides, FLOW_SILENT_RATIO};
use super::pair::{evidence, overlapping, partition_span, reconnects, unanswered_connect, Silence};
use super::silence::{self, IdleNorm, NotIdle, OwnTraffic, SilenceEvidence, SILENT_RATIO};
use super::{node_name, BaselineRates, Builder, Candidate, FaultGuess, PeerMap, Scenario, Timeline, Verdict};
use crate::analysis::profile::service_port;

/// How close to the dump a silent connection's end must be to have lasted until the dump.
const AT_DUMP_NS: u64 = 1_000_000_000;

/// The profile's norm for silences from `a` to `b` on `port`, if it saw any.
fn idle_norm<'b>(
    baseline: Option<&'b BaselineRates>,
    scenario: Option<&Scenario>,
    a: usize,
    b: usize,
    port: u16,
) -> Option<IdleNorm<'b>> {
    let baseline = baseline?;
    let key = (node_name(scenario, a), node_name(scenario, b), port);
    Some(IdleNorm {
        longest_ms: *baseline.gaps.get(&key)?,
        after_busy: baseline
            .gaps_after_busy
            .get(&key)
            .map(Vec::as_slice)
            .unwrap_or(&[]),
    })
}

impl Builder<'_> {
    /// The node of one of production's addresses.
    pub(super) fn node_of_address(&self, addr: SocketAddr) -> Option<usize> {
        self.peers.node(self.scenario?, addr)
    }

    /// Network gaps between two nodes, judged per connection: set aside when the connection
    /// never carried a packet or idles like this in fault-free runs, self-connections
    /// ignored; the rest, merged per node pair while they overlap, is a partition when
    /// corroborated.
    pub(super) fn gaps(&mut self) {
        let mut silences: Vec<Silence> = Vec::new();
        let mut aside: Vec<Candidate> = Vec::new();
        let mut self_connections = 0;
        let mut impossible = 0;
        for t in &self.timeline.events {
            let What::NetworkGap(g) = &t.event.what else {
                continue;
            };
            let (Some(local), Some(peer)) = (g.local, g.peer) else {
                continue;
            };
            let local = if g.is_datagram() {
                self.flow_local(local, t.node)
            } else {
                local
            };
            // 0 when unknown (then a close cannot be told from the dump)
            let taken = self.timeline.dumps.get(t.dump).map(|d| d.taken_ns).unwrap_or(0);
            // a silence that would end after its dump was taken is a clock error (a tracerd
            // before the fix of its jiffies stamps recorded minus 2^32 ticks as 584 years)
            let end_ns = t.at_ns.saturating_add(g.duration_ms.saturating_mul(1_000_000));
            if taken > 0 && end_ns > taken.saturating_add(AT_DUMP_NS) {
                impossible += 1;
                continue;
            }
            let (a, b) = (self.node_of_address(local).or(t.node), self.node_of_address(peer));
            if local.ip() == peer.ip() || (a.is_some() && a == b) {
                self_connections += 1;
                continue;
            }
            let (Some(a), Some(b)) = (a, b) else { continue };
            let d = g.duration_ms;
            // the event's time stamp is when the silence began
            let (start, end) = (t.at_ns, t.at_ns + d * 1_000_000);
            let own = OwnTraffic {
                busy_ms: g.busy_ms,
                busy_packets: g.busy_packets,
            };
            let conn = if local < peer {
                (local, peer)
            } else {
                (peer, local)
            };
            let norm = idle_norm(self.baseline, self.scenario, a, b, service_port(local, peer));
            let judged = norm.as_ref().map(|n| n.excuses(own, d));
            let flow = g.is_datagram().then(|| self.flow_sides(g, a, b, (start, end)));
            let idle = match (g.packets, &judged) {
                (0, _) => Some("the connection never carried a packet (a connect that did not complete, or a peer that never spoke)".to_string()),
                _ if flow.is_some_and(|f| f.between_requests()) => {
                    flow.as_ref().and_then(|f| self.between_requests(f, a, b))
                }
                (_, Some(Ok(()))) => norm.as_ref().map(|n| {
                    let (from, to) = (node_name(self.scenario, a), node_name(self.scenario, b));
                    format!(
                        "an idle connection: fault-free runs see {from}→{to} port {} silent for up to {} ms",
                        service_port(local, peer),
                        n.longest_ms
                    )
                }),
                _ => None,
            };
            let s = Silence {
                event: t,
                pair: (a.min(b), a.max(b)),
                end_node: a,
                conn,
                start,
                end,
                resumed: !g.ongoing,
                packets: g.packets,
                own,
                torn_down: g.ongoing && end + AT_DUMP_NS < taken,
                not_idle: judged.and_then(Result::err),
                idle: idle.is_some(),
                flow,
            };
            if let Some(reason) = idle {
                let mut c = self.candidate(
                    t,
                    FaultGuess::Partition {
                        peer: b,
                        duration_ms: d,
                        one_way: false,
                    },
                    start,
                    reason,
                );
                c.who = node_name(self.scenario, a);
                // score.rs: what the silence was set aside for
                (c.evidence.norm_ms, c.evidence.never_carried) =
                    (norm.as_ref().map(|n| n.longest_ms), g.packets == 0);
                c.evidence.connections = 1;
                c.silence = Some(SilenceEvidence {
                    silence_ms: d,
                    silence_ratio: own.ratio(d),
                    own_gap_ms: own.typical_gap_ms(),
                    idle_norm_ms: norm.map(|n| n.longest_ms),
                    silent_connections: vec![silence::connection_name(conn)],
                    resumed: s.resumed,
                    reason: c.why.clone(),
                    ..Default::default()
                });
                fold_aside(&mut aside, c, a);
            }
            silences.push(s);
        }
        let kept: Vec<&Silence> = silences.iter().filter(|s| !s.idle).collect();
        for group in overlapping(kept) {
            let c = self.partition(&group, &silences);
            self.candidates.push(c);
        }
        for c in &mut aside {
            c.why = format!("{} ({} time(s))", c.why, c.occurrences);
        }
        self.candidates.extend(aside);
        if self_connections > 0 {
            self.notes.push(format!("{self_connections} gap(s) of connections of a node to itself were ignored (never a partition)"));
        }
        if impossible > 0 {
            self.notes.push(format!("{impossible} gap(s) that would end after their dump was taken were ignored (a tracer clock error)"));
        }
    }

    /// One node pair's overlapping silences as a partition candidate: the time every
    /// connection was silent (`partition_span`), a cause when corroborated and not
    /// contradicted by the pair's other connections or by the other direction of the same
    /// connections (`all`: every silence between nodes).
    fn partition(&self, group: &[&Silence], all: &[Silence]) -> Candidate {
        let (lo, hi) = group[0].pair;
        let reconnects = reconnects(group, all);
        let (start, end) = partition_span(group, &reconnects);
        let duration_ms = (end - start) / 1_000_000;
        let flows: Vec<&FlowSides> = group.iter().filter_map(|s| s.flow.as_ref()).collect();
        let datagrams = flows.len() == group.len();
        // a datagram flow heard at one end only, whose peer kept hearing it: the peer's
        // datagrams were lost, its own way out is the fault
        let heard_at = group[0].end_node;
        let one_way =
            datagrams && group.iter().all(|s| s.end_node == heard_at) && flows.iter().any(|f| f.one_way());
        let sender = if heard_at == lo { hi } else { lo };
        let (node, peer) = if one_way { (sender, heard_at) } else { (lo, hi) };
        let mut c = self.candidate(
            group[0].event,
            FaultGuess::Partition {
                peer,
                duration_ms,
                one_way,
            },
            start,
            String::new(),
        );
        c.node = Some(node);
        c.who = node_name(self.scenario, node);
        c.occurrences = group.len() as u32;
        let ev = evidence(group, all, &reconnects, (start, end));
        let mut support = self.flow_support(group);
        if ev.resumed {
            support.push("traffic resumed after it".to_string());
        }
        if group.iter().any(|s| s.torn_down) {
            support.push("a connection was torn down while silent".to_string());
        }
        let unanswered = unanswered_connect(all, group[0].pair, (start, end));
        if unanswered {
            support.push("a connect between them meanwhile never carried a packet".to_string());
        }
        let together = ev.silent_connections.len() + ev.also_silent.len();
        if together > 1 {
            support.push(format!("{together} connections silent together"));
        }
        if let (Some(ratio), Some(gap)) = (ev.silence_ratio, ev.own_gap_ms) {
            if datagrams && ratio >= FLOW_SILENT_RATIO {
                support.push(format!(
                    "a flow that carried a datagram every {gap:.0} ms went silent {ratio:.1}× as long"
                ));
            } else if ratio >= SILENT_RATIO {
                support.push(format!(
                    "a connection that carried a packet every {gap:.0} ms went silent {ratio:.0}× as long"
                ));
            }
        }
        let mut not_idle: Vec<&NotIdle> = group.iter().filter_map(|s| s.not_idle.as_ref()).collect();
        not_idle.sort_by_key(|n| match n {
            NotIdle::Longer(ms) => (1, std::cmp::Reverse(*ms)),
            NotIdle::Busier(ms) => (0, std::cmp::Reverse(*ms)),
        });
        if let Some(n) = not_idle.first() {
            support.push(n.describe());
        }
        let (from, to) = (node_name(self.scenario, lo), node_name(self.scenario, hi));
        // score.rs: the evidence, as numbers; a connection busier than the pair's idle ones is
        // measured against its own traffic, not the idle norm
        c.evidence.resumed = ev.resumed;
        c.evidence.torn_down = group.iter().any(|s| s.torn_down);
        c.evidence.unanswered_connect = unanswered;
        c.evidence.connections = together as u32;
        c.evidence.kept_sending = flows.iter().any(|f| f.kept_sending());
        c.evidence.peer_kept_sending = flows.iter().any(|f| f.peer_kept_sending);
        if datagrams {
            c.evidence.cadence = ev.silence_ratio.zip(ev.own_gap_ms);
        } else if not_idle.iter().any(|n| matches!(n, NotIdle::Busier(_))) {
            c.evidence.own_ratio = ev.silence_ratio.zip(ev.own_gap_ms);
        } else {
            c.evidence.norm_ms = not_idle.iter().find_map(|n| match n {
                NotIdle::Longer(ms) => Some(*ms),
                NotIdle::Busier(_) => None,
            });
        }
        let base = format!(
            "no packets between {from} and {to} for {duration_ms} ms ({} silent connection(s))",
            ev.silent_connections.len()
        );
        let against = if !ev.talking_connections.is_empty() {
            Some(format!(
                "but {} carried packets meanwhile: the pair could talk",
                ev.talking_connections.join(", ")
            ))
        } else if ev.both_directions == Some(false) && !datagrams {
            let end_node = node_name(self.scenario, group[0].end_node);
            Some(format!(
                "but only {end_node}'s end saw it: the other direction kept carrying packets"
            ))
        } else if support.is_empty() {
            Some("one connection silent until the dump, as an idle connection also is".to_string())
        } else {
            None
        };
        c.why = match &against {
            Some(a) if support.is_empty() => format!("{base}; {a}"),
            Some(a) => format!("{base}; {}; {a}", support.join(", ")),
            None => format!("{base}; {}", support.join(", ")),
        };
        if against.is_some() {
            c.verdict = Verdict::Benign;
        }
        c.silence = Some(SilenceEvidence {
            silence_ms: duration_ms,
            reason: c.why.clone(),
            ..ev
        });
        c
    }
}

impl Builder<'_> {
    /// What a group's datagram flows add: the silent end kept sending, the sender's own dump
    /// says it kept sending all along, only one direction was lost. Each is said of the
    /// silence that shows it, with that silence's own ends: a pair's silences are seen from
    /// either end.
    fn flow_support(&self, group: &[&Silence]) -> Vec<String> {
        let (lo, hi) = group[0].pair;
        let ends = |s: &Silence| {
            let from = if s.end_node == lo { hi } else { lo };
            (
                node_name(self.scenario, s.end_node),
                node_name(self.scenario, from),
            )
        };
        let flows = || group.iter().filter_map(|s| Some((*s, s.flow.as_ref()?)));
        let mut support = Vec::new();
        if let Some((s, f)) = flows()
            .filter(|(_, f)| f.kept_sending())
            .max_by_key(|(_, f)| f.sent)
        {
            let (end, from) = ends(s);
            support.push(format!(
                "{end} kept sending to {from} ({} datagrams) while it heard nothing",
                f.sent
            ));
        }
        if let Some((s, _)) = flows().find(|(_, f)| f.peer_kept_sending) {
            let (end, from) = ends(s);
            support.push(format!("{from}'s flow table: it kept sending to {end} all along"));
        }
        if let Some((s, _)) = flows().find(|(_, f)| f.one_way()) {
            let (end, from) = ends(s);
            support.push(format!(
                "only {from}→{end} was lost: {end}'s datagrams kept reaching {from}"
            ));
        }
        support
    }
}

/// Production's addresses of the nodes: each connection's local end is its process's node's,
/// and so are the addresses of a host whose dump holds one node only.
pub fn peer_map(timeline: &Timeline, scenario: &Scenario) -> PeerMap {
    let owned = timeline
        .events
        .iter()
        .filter_map(|e| match (&e.event.what, e.node) {
            (What::NetworkGap(g), Some(n)) => Some((g.local?, n)),
            _ => None,
        });
    let mut nodes_of_dump: Vec<Vec<usize>> = vec![Vec::new(); timeline.dumps.len()];
    for e in &timeline.events {
        if let (Some(n), Some(nodes)) = (e.node, nodes_of_dump.get_mut(e.dump)) {
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
    }
    let hosts = timeline.dumps.iter().zip(&nodes_of_dump).flat_map(|(d, nodes)| {
        let node = match nodes.as_slice() {
            [one] => Some(*one),
            _ => None,
        };
        d.interfaces
            .iter()
            .flat_map(|i| &i.addresses)
            .filter_map(move |a| Some((a.parse().ok()?, node?)))
    });
    PeerMap::new(scenario, owned, hosts)
}

/// A partition's duration (ms); 0 for other guesses.
pub(super) fn partition_ms(c: &Candidate) -> u64 {
    match c.guess {
        FaultGuess::Partition { duration_ms, .. } => duration_ms,
        _ => 0,
    }
}

/// A partition's far end; `usize::MAX` (no node) for other guesses.
pub(super) fn peer_of(c: &Candidate) -> usize {
    match c.guess {
        FaultGuess::Partition { peer, .. } => peer,
        _ => usize::MAX,
    }
}

/// Adds a set-aside gap of node `a`, folded with earlier ones of the same pair and reason.
fn fold_aside(aside: &mut Vec<Candidate>, mut c: Candidate, a: usize) {
    c.verdict = Verdict::Benign;
    c.node = Some(a);
    if let Some(p) = aside
        .iter_mut()
        .find(|p| p.node == c.node && peer_of(p) == peer_of(&c) && p.why == c.why)
    {
        p.occurrences += 1;
        let longest = partition_ms(p).max(partition_ms(&c));
        p.guess = FaultGuess::Partition {
            peer: peer_of(&c),
            duration_ms: longest,
            one_way: false,
        };
        return;
    }
    aside.push(c);
}
