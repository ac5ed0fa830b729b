//! Silences between nodes: a network gap of an idle connection (silent as long in
//! fault-free runs) or of one that never carried a packet is set aside, a connection of a
//! node to itself ignored; the others, merged per node pair while they overlap, are a
//! partition when corroborated (traffic resumed, a connection torn down, or several
//! connections silent together). Also the map of production's addresses to nodes.
use std::net::SocketAddr;

use tracedump::event::What;

use super::{node_name, Builder, Candidate, FaultGuess, PeerMap, Scenario, TimedEvent, Timeline, Verdict};
use crate::analysis::profile::service_port;

/// A gap no longer than this many times the longest silence the profile saw on the same
/// node pair and port is that connection idling.
const IDLE_SLACK: f64 = 1.5;
/// How close to the dump a silent connection's end must be to have lasted until the dump.
const AT_DUMP_NS: u64 = 1_000_000_000;

impl Builder<'_> {
    /// The node of one of production's addresses.
    fn node_of_address(&self, addr: SocketAddr) -> Option<usize> {
        self.peers.node(self.scenario?, addr)
    }

    /// The longest silence the profile saw from `a` to `b` on `port`, if it saw one.
    fn idle_norm(&self, a: usize, b: usize, port: u16) -> Option<u64> {
        self.baseline?
            .gaps
            .get(&(node_name(self.scenario, a), node_name(self.scenario, b), port))
            .copied()
    }

    /// Network gaps between two nodes: idle connections (the profile sees them as silent)
    /// and connections that never carried a packet are set aside, self-connections ignored;
    /// the rest, merged per node pair while they overlap, is a partition when corroborated.
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
            let port = service_port(local, peer);
            let d = g.duration_ms;
            // the event's time stamp is when the silence began
            let (start, end) = (t.at_ns, t.at_ns + d * 1_000_000);
            let norm = self.idle_norm(a, b, port);
            let reason = if g.packets == 0 {
                Some("the connection never carried a packet (a connect that did not complete, or a peer that never spoke)".to_string())
            } else {
                norm.filter(|&longest| d as f64 <= longest as f64 * IDLE_SLACK).map(|longest| {
                    let (from, to) = (node_name(self.scenario, a), node_name(self.scenario, b));
                    format!(
                        "an idle connection: fault-free runs see {from}→{to} port {port} silent for up to {longest} ms"
                    )
                })
            };
            if let Some(reason) = reason {
                let mut c = self.candidate(
                    t,
                    FaultGuess::Partition {
                        peer: b,
                        duration_ms: d,
                    },
                    start,
                    reason,
                );
                c.who = node_name(self.scenario, a);
                fold_aside(&mut aside, c, a);
                continue;
            }
            let conn = if local < peer {
                (local, peer)
            } else {
                (peer, local)
            };
            silences.push(Silence {
                event: t,
                pair: (a.min(b), a.max(b)),
                conn,
                start,
                end,
                resumed: !g.ongoing,
                packets: g.packets,
                torn_down: g.ongoing && end + AT_DUMP_NS < taken,
                beyond_norm: norm,
            });
        }
        for group in overlapping(silences) {
            let c = self.partition(&group);
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
    /// connection was silent (`partition_span`), a cause only when corroborated.
    fn partition(&self, group: &[Silence]) -> Candidate {
        let (lo, hi) = group[0].pair;
        let (start, end) = partition_span(group);
        let duration_ms = (end - start) / 1_000_000;
        let mut c = self.candidate(
            group[0].event,
            FaultGuess::Partition {
                peer: hi,
                duration_ms,
            },
            start,
            String::new(),
        );
        c.node = Some(lo);
        c.who = node_name(self.scenario, lo);
        c.occurrences = group.len() as u32;
        let mut conns: Vec<(SocketAddr, SocketAddr)> = group.iter().map(|s| s.conn).collect();
        conns.sort();
        conns.dedup();
        let mut evidence = Vec::new();
        if group.iter().any(|s| s.resumed) {
            evidence.push("traffic resumed after it".to_string());
        }
        if group.iter().any(|s| s.torn_down) {
            evidence.push("a connection was torn down while silent".to_string());
        }
        if conns.len() > 1 {
            evidence.push(format!("{} connections silent together", conns.len()));
        }
        if let Some(longest) = group.iter().filter_map(|s| s.beyond_norm).max() {
            evidence.push(format!(
                "fault-free runs never see these connections silent over {longest} ms"
            ));
        }
        let base = format!(
            "no packets between {} and {} for {duration_ms} ms ({} silent connection(s))",
            node_name(self.scenario, lo),
            node_name(self.scenario, hi),
            conns.len()
        );
        if evidence.is_empty() {
            c.verdict = Verdict::Benign;
            c.why = format!("{base}; one connection silent until the dump, as an idle connection also is");
        } else {
            c.why = format!("{base}; {}", evidence.join(", "));
        }
        c
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

/// One connection's silence between two scenario nodes.
struct Silence<'e> {
    event: &'e TimedEvent,
    /// the two nodes, lower index first
    pair: (usize, usize),
    /// the connection's endpoints, ordered (both ends of one connection are one connection)
    conn: (SocketAddr, SocketAddr),
    start: u64,
    end: u64,
    /// a packet ended it
    resumed: bool,
    /// packets the connection carried before it went silent
    packets: u64,
    /// the connection closed while silent, before the dump
    torn_down: bool,
    /// the profile knows this pair and port, silent at most this long (ms) without faults
    beyond_norm: Option<u64>,
}

/// A connection that had carried no more packets than this when it went silent may have
/// been opened just then (a handshake and a message or two).
const YOUNG_PACKETS: u64 = 4;

/// When a pair's overlapping silences say no packet passed between the nodes: the longest
/// stretch between two moments of traffic (a silence's start is its connection's last
/// packet, a resumed silence's end its next one) that every connection spent silent — or
/// had not opened yet, for a connection with a few packets whose silence begins after it
/// (opened during the heal: it does not shorten the partition to its own overlap). Falls
/// back to the latest start and earliest resumption when no stretch qualifies.
fn partition_span(group: &[Silence]) -> (u64, u64) {
    let mut moments: Vec<u64> = group.iter().map(|s| s.start).collect();
    moments.extend(group.iter().filter(|s| s.resumed).map(|s| s.end));
    moments.extend(group.iter().map(|s| s.end).max());
    moments.sort_unstable();
    moments.dedup();
    let silent_throughout = |a: u64, b: u64| {
        group
            .iter()
            .all(|s| (s.start <= a && s.end >= b) || (s.packets <= YOUNG_PACKETS && s.start >= b))
    };
    let best = moments
        .windows(2)
        .map(|w| (w[0], w[1]))
        .filter(|&(a, b)| silent_throughout(a, b))
        .max_by_key(|&(a, b)| (b - a, std::cmp::Reverse(a)));
    best.unwrap_or_else(|| {
        let start = group.iter().map(|s| s.start).max().unwrap_or(0);
        let resumed_end = group.iter().filter(|s| s.resumed).map(|s| s.end).min();
        let end = resumed_end
            .filter(|&e| e > start)
            .unwrap_or_else(|| group.iter().map(|s| s.end).max().unwrap_or(start));
        (start, end)
    })
}

/// Groups of silences of the same node pair that overlap in time (touching is not
/// overlapping: an idle connection's back-to-back gaps stay apart).
fn overlapping(mut silences: Vec<Silence>) -> Vec<Vec<Silence>> {
    silences.sort_by_key(|s| (s.pair, s.start));
    let mut groups: Vec<Vec<Silence>> = Vec::new();
    let mut group_end = 0;
    for s in silences {
        match groups.last_mut() {
            Some(g) if g[0].pair == s.pair && s.start < group_end => {
                group_end = group_end.max(s.end);
                g.push(s);
            }
            _ => {
                group_end = s.end;
                groups.push(vec![s]);
            }
        }
    }
    groups
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
        };
        return;
    }
    aside.push(c);
}
