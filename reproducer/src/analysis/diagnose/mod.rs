//! Diagnosis without runs: from the production timeline to ranked fault candidates.
//! Failed syscalls are grouped by signature and dropped as benign when the fault-free
//! profile shows them at a comparable rate; deaths by the process's own fatal signal and
//! non-zero exits are symptoms; SIGKILLs from outside, stops and partitions that no pause
//! or crash explains are faults. A network gap is a partition only when it is abnormal:
//! longer than the profile saw on the same node pair and port, and corroborated (traffic
//! resumed after it, the connection was torn down, or several connections of the pair went
//! silent together). Failures after the first symptom are its consequences, and failures
//! that are part of normal operation (EAGAIN, EINPROGRESS, ...) are ranked last.
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;

use serde::Serialize;
use tracedump::event::{State, What};
use tracedump::syscalls::signal_name;

use super::contexts::{self, ContextQuery};
use super::nodemap::PeerMap;
use super::profile::normalize_path;
use super::timeline::{TimedEvent, Timeline};
use crate::model::scenario::Scenario;

mod storage;

/// Burst windows over which a failure's production rate is compared with the profile.
const BURST_WINDOW_NS: u64 = 2_000_000_000;
/// A process killed inside a blocking call sees the call fail with EINTR on its way out: an
/// EINTR this shortly before its process's death by a signal is that signal's doing.
const KILLED_IN_CALL_NS: u64 = 10_000_000;
/// A failure is benign unless its production burst is this unlikely under the profile's rate.
const ANOMALY_P: f64 = 1e-4;
/// errnos that fault-free code hits and handles routinely, whatever the call
const ROUTINE_ERRNOS: [&str; 8] = [
    "EAGAIN",
    "EWOULDBLOCK",
    "EINPROGRESS",
    "EALREADY",
    "EINTR",
    "ERESTARTSYS",
    "ENOTTY",
    "ENOSYS",
];
/// (syscall, errno) pairs that are part of normal operation of that call
const ROUTINE_FAILURES: [(&str, &str); 6] = [
    ("futex", "ETIMEDOUT"),
    ("epoll_ctl", "EPERM"),
    ("epoll_ctl", "EEXIST"),
    ("epoll_ctl", "ENOENT"),
    ("wait4", "ECHILD"),
    ("waitid", "ECHILD"),
];
/// Paths the dynamic loader and libc probe along search paths (shared libraries, hardware
/// capability directories, locales and message catalogs, iconv modules): a missing one is
/// how the probe works.
const PROBED_PATHS: [&str; 8] = [
    ".so",
    "/tls/",
    "glibc-hwcaps",
    "/locale/",
    "locale.alias",
    ".mo",
    "/gconv",
    "/ld.so",
];
/// A gap no longer than this many times the longest silence the profile saw on the same
/// node pair and port is that connection idling.
const IDLE_SLACK: f64 = 1.5;
/// How far around a pause (before it, after it ends) a silence may start and be its doing.
const EXPLAIN_SLACK_NS: u64 = 1_500_000_000;
/// How long before a crash a silence may start and still be the crash's doing.
const CRASH_SLACK_NS: u64 = 300_000_000;
/// How close to the dump a silent connection's end must be to have lasted until the dump.
const AT_DUMP_NS: u64 = 1_000_000_000;
/// errnos of calls a peer's crash, pause or a partition makes fail
const NETWORK_ERRNOS: [&str; 7] = [
    "ECONNRESET",
    "EPIPE",
    "ECONNREFUSED",
    "ETIMEDOUT",
    "EHOSTUNREACH",
    "ENETUNREACH",
    "ECONNABORTED",
];
/// How long after a crash (or the end of a pause or partition) its peers' calls still fail.
const AFTERMATH_NS: u64 = 5_000_000_000;
/// Signals a process raises on itself (a crash of its own making, not an injected one).
const SELF_SIGNALS: [i32; 6] = [
    libc::SIGSEGV,
    libc::SIGABRT,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGSYS,
];

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum FaultGuess {
    Syscall {
        syscall: String,
        errno: String,
        path: Option<String>,
        raw_path: Option<String>,
        /// production's first call of the fault did only this many bytes (a short write)
        #[serde(skip_serializing_if = "Option::is_none")]
        short: Option<u64>,
        /// from the fault on, every matching call failed (a full or dead disk)
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        persistent: bool,
    },
    Crash {
        signal: String,
        sender: String,
    },
    Pause {
        duration_ms: u64,
        cause: String,
    },
    Partition {
        peer: usize,
        duration_ms: u64,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct Candidate {
    pub guess: FaultGuess,
    pub node: Option<usize>,
    pub who: String,
    pub pid: u32,
    /// the host whose dump shows it, and that dump's place among the dumps given
    pub host: String,
    pub dump: usize,
    /// wall-clock start of the fault (a pause or gap starts `duration` before its event)
    pub at_ns: u64,
    /// how many times production saw this signature
    pub occurrences: u32,
    /// the fault-free profile's rate of this signature (calls/s), when known
    pub profile_per_s: Option<f64>,
    /// the production burst: most occurrences within BURST_WINDOW_NS
    pub burst: u32,
    /// functions the node entered before the fault, nearest first, each once
    pub preceding_functions: Vec<String>,
    /// a failure that is part of normal operation (EAGAIN, EINPROGRESS, futex ETIMEDOUT, ...):
    /// a raised rate is load, not a fault, so it ranks after every other cause
    pub routine: bool,
    pub verdict: Verdict,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Cause,
    Benign,
    /// explained by another fault (a gap during a pause or after a crash of its peer)
    Explained,
    /// after the first symptom (failures) or the last (other faults): a consequence
    Late,
}

#[derive(Clone, Debug, Serialize)]
pub struct Symptom {
    pub at_ns: u64,
    pub node: Option<usize>,
    pub who: String,
    /// the host whose dump shows it
    pub host: String,
    pub what: String,
}

/// One of the production dumps: its host and the scenario nodes it holds.
#[derive(Clone, Debug, Serialize)]
pub struct DumpSummary {
    pub path: std::path::PathBuf,
    pub host: String,
    pub events: usize,
    pub nodes: Vec<String>,
}

/// Fault-free rates of failure signatures, from a profile.
#[derive(Clone, Debug, Default)]
pub struct BaselineRates {
    pub scenario: String,
    /// (node, syscall, errno, normalized path) -> calls per second
    pub failures: HashMap<(String, String, String, Option<String>), f64>,
    /// (node, syscall, errno, normalized path) -> the most occurrences in one fault-free run
    pub failures_most_in_a_run: HashMap<(String, String, String, Option<String>), u64>,
    /// (node, peer, service port) -> the longest silence of fault-free runs, ms
    pub gaps: HashMap<(String, String, u16), u64>,
}

impl BaselineRates {
    /// The failure rates of a `reproducer profile` file made for `scenario`.
    pub fn load(path: &std::path::Path, scenario: Option<&Scenario>) -> anyhow::Result<BaselineRates> {
        let p = super::profile::load(path)?;
        if let Some(s) = scenario {
            if p.scenario != s.name {
                anyhow::bail!("profile {} was made for scenario '{}', not '{}': profile this scenario first (reproducer profile)", path.display(), p.scenario, s.name);
            }
            if let Some(n) = p.scenario_nodes.keys().find(|n| s.node_index(n).is_none()) {
                anyhow::bail!("profile {} names node '{n}', which scenario '{}' does not have: profile the scenario again", path.display(), s.name);
            }
        }
        Ok(BaselineRates::from_profile(p))
    }

    pub fn from_profile(p: super::profile::Profile) -> BaselineRates {
        let failures_most_in_a_run = p
            .failures
            .iter()
            .map(|f| {
                let key = (f.node.clone(), f.syscall.clone(), f.errno.clone(), f.path.clone());
                (key, f.per_run.iter().copied().max().unwrap_or(0))
            })
            .collect();
        let failures = p
            .failures
            .into_iter()
            .map(|f| ((f.node, f.syscall, f.errno, f.path), f.per_second))
            .collect();
        let gaps = p
            .gaps
            .into_iter()
            .map(|g| ((g.node, g.peer, g.port), g.longest_ms))
            .collect();
        BaselineRates {
            scenario: p.scenario,
            failures,
            failures_most_in_a_run,
            gaps,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Diagnosis {
    pub candidates: Vec<Candidate>,
    pub symptoms: Vec<Symptom>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub unmapped_events: usize,
    pub notes: Vec<String>,
    /// the dumps, in the order given (several: one per host)
    pub dumps: Vec<DumpSummary>,
}

impl Diagnosis {
    pub fn causes(&self) -> impl Iterator<Item = &Candidate> {
        self.candidates.iter().filter(|c| c.verdict == Verdict::Cause)
    }
}

fn who(t: &TimedEvent, scenario: Option<&Scenario>) -> String {
    match (t.node, scenario) {
        (Some(n), Some(s)) => s.nodes[n].name.clone(),
        _ => format!("{}/{}", t.event.comm, t.event.pid),
    }
}

/// P(X >= k) for X ~ Poisson(lambda).
fn poisson_tail(lambda: f64, k: u32) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if lambda <= 0.0 {
        return 0.0;
    }
    let mut term = (-lambda).exp();
    let mut below = 0.0;
    for i in 0..k {
        below += term;
        term *= lambda / (i + 1) as f64;
    }
    (1.0 - below).max(0.0)
}

fn max_burst(times: &[u64]) -> u32 {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] > BURST_WINDOW_NS {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u32
}

struct Builder<'a> {
    t: &'a Timeline,
    scenario: Option<&'a Scenario>,
    baseline: Option<&'a BaselineRates>,
    candidates: Vec<Candidate>,
    symptoms: Vec<Symptom>,
    notes: Vec<String>,
    /// the nodes each signal sender's events belong to, found when a death needs them
    nodes_of_pid: HashMap<(usize, u32), Vec<usize>>,
    /// the nodes of production's addresses
    peers: PeerMap,
}

impl Builder<'_> {
    fn candidate(&self, t: &TimedEvent, guess: FaultGuess, at_ns: u64, why: String) -> Candidate {
        Candidate {
            guess,
            node: t.node,
            who: who(t, self.scenario),
            pid: t.event.pid,
            host: t.event.host.to_string(),
            dump: t.dump,
            at_ns,
            occurrences: 1,
            profile_per_s: None,
            burst: 1,
            preceding_functions: Vec::new(),
            routine: false,
            verdict: Verdict::Cause,
            why,
        }
    }

    fn process_states(&mut self) {
        let mut seen_deaths = HashSet::new();
        let timeline = self.t;
        for t in &timeline.events {
            let What::ProcessState(p) = &t.event.what else {
                continue;
            };
            if self.scenario.is_some() && t.node.is_none() {
                continue;
            }
            let pid = t.event.pid;
            let sender_comm = p.sender.as_ref().and_then(|s| s.comm.clone());
            match p.state {
                State::Paused {
                    cause,
                    duration_ms: d,
                } => {
                    let cause = cause.name().to_string();
                    let why = format!(
                        "stopped ({cause}) for {d} ms{}",
                        sender_comm
                            .map(|c| format!(" after a signal from {c}"))
                            .unwrap_or_default()
                    );
                    // the event's time stamp is when the pause began
                    let c = self.candidate(
                        t,
                        FaultGuess::Pause {
                            duration_ms: d,
                            cause,
                        },
                        t.at_ns,
                        why,
                    );
                    self.candidates.push(c);
                }
                // a pid names a process only within its dump (host)
                State::Killed { core_dumped } if seen_deaths.insert((t.dump, pid)) => {
                    let signo = p.signal.unwrap_or(libc::SIGKILL as u32);
                    let signal = signal_name(signo);
                    let sender_pid = p.sender.as_ref().map(|s| s.pid);
                    let from_outside =
                        sender_pid.is_some_and(|s| s != pid && !self.same_node(s, t.dump, t.node));
                    if from_outside && !SELF_SIGNALS.contains(&(signo as i32)) {
                        let sender = format!(
                            "{} (pid {})",
                            sender_comm.unwrap_or_default(),
                            sender_pid.unwrap_or(0)
                        );
                        let why = format!("killed by {signal} from {sender}");
                        let c = self.candidate(t, FaultGuess::Crash { signal, sender }, t.at_ns, why);
                        self.candidates.push(c);
                    } else {
                        let what = format!(
                            "died of {signal}{}",
                            if core_dumped { " (core dumped)" } else { "" }
                        );
                        self.symptoms.push(Symptom {
                            at_ns: t.at_ns,
                            node: t.node,
                            who: who(t, self.scenario),
                            host: t.event.host.to_string(),
                            what,
                        });
                    }
                }
                State::Exited { code } if code != 0 && seen_deaths.insert((t.dump, pid)) => {
                    let what = format!("exited with status {code}");
                    self.symptoms.push(Symptom {
                        at_ns: t.at_ns,
                        node: t.node,
                        who: who(t, self.scenario),
                        host: t.event.host.to_string(),
                        what,
                    });
                }
                _ => {}
            }
        }
    }

    /// Whether process `pid` of dump `dump` (a signal's sender is on the receiver's host) has
    /// events as `node` (a signal from a process of the same node is the node's own doing).
    fn same_node(&mut self, pid: u32, dump: usize, node: Option<usize>) -> bool {
        let Some(node) = node else { return false };
        // one pass over the timeline per sender, not per death
        let t = self.t;
        let nodes = self.nodes_of_pid.entry((dump, pid)).or_insert_with(|| {
            let mut nodes: Vec<usize> = t
                .events
                .iter()
                .filter(|e| e.event.pid == pid && e.dump == dump)
                .filter_map(|e| e.node)
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            nodes
        });
        nodes.contains(&node)
    }

    fn node_of_address(&self, addr: SocketAddr) -> Option<usize> {
        self.peers.node(self.scenario?, addr)
    }

    fn name(&self, node: usize) -> String {
        self.scenario
            .map(|s| s.nodes[node].name.clone())
            .unwrap_or_else(|| node.to_string())
    }

    /// The longest silence the profile saw from `a` to `b` on `port`, if it saw one.
    fn idle_norm(&self, a: usize, b: usize, port: u16) -> Option<u64> {
        self.baseline?
            .gaps
            .get(&(self.name(a), self.name(b), port))
            .copied()
    }

    /// Network gaps between two nodes: idle connections (the profile sees them as silent)
    /// and connections that never carried a packet are set aside, self-connections ignored;
    /// the rest, merged per node pair while they overlap, is a partition when corroborated.
    fn gaps(&mut self) {
        let mut silences: Vec<Silence> = Vec::new();
        let mut aside: Vec<Candidate> = Vec::new();
        let mut self_connections = 0;
        let mut impossible = 0;
        for t in &self.t.events {
            let What::NetworkGap(g) = &t.event.what else {
                continue;
            };
            let (Some(local), Some(peer)) = (g.local, g.peer) else {
                continue;
            };
            let taken = self.t.dumps.get(t.dump).map(|d| d.taken_ns).unwrap_or(0); // unknown: cannot tell a close from the dump
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
            let port = super::profile::service_port(local, peer);
            let d = g.duration_ms;
            // the event's time stamp is when the silence began
            let (start, end) = (t.at_ns, t.at_ns + d * 1_000_000);
            let norm = self.idle_norm(a, b, port);
            let reason = if g.packets == 0 {
                Some("the connection never carried a packet (a connect that did not complete, or a peer that never spoke)".to_string())
            } else {
                norm.filter(|&longest| d as f64 <= longest as f64 * IDLE_SLACK)
                    .map(|longest| format!("an idle connection: fault-free runs see {}→{} port {port} silent for up to {longest} ms", self.name(a), self.name(b)))
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
                c.who = self.name(a);
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
    /// connection was silent (from the latest start to the earliest resumption), a cause only
    /// when corroborated.
    fn partition(&self, group: &[Silence]) -> Candidate {
        let (lo, hi) = group[0].pair;
        let start = group.iter().map(|s| s.start).max().unwrap_or(0);
        let resumed_end = group.iter().filter(|s| s.resumed).map(|s| s.end).min();
        let end = resumed_end
            .filter(|&e| e > start)
            .unwrap_or_else(|| group.iter().map(|s| s.end).max().unwrap_or(start));
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
        c.who = self.name(lo);
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
            self.name(lo),
            self.name(hi),
            conns.len()
        );
        let abnormal = "";
        if evidence.is_empty() {
            c.verdict = Verdict::Benign;
            c.why = format!("{base}; one connection silent until the dump, as an idle connection also is");
        } else {
            c.why = format!("{base}; {abnormal}{}", evidence.join(", "));
        }
        c
    }

    /// A gap while one side was paused, or starting after one side was killed, is that
    /// fault's consequence.
    fn explain_gaps(&mut self) {
        // (what, earliest and latest start of a silence it explains, node): a paused node's
        // peer hears its last packet up to a heartbeat before the pause; a crash closes the
        // node's connections, so a silence it causes starts at the crash, not before
        let process_faults: Vec<(String, u64, u64, Option<usize>)> = self
            .candidates
            .iter()
            .filter_map(|c| match c.guess {
                FaultGuess::Pause { duration_ms, .. } => Some((
                    label(c),
                    c.at_ns.saturating_sub(EXPLAIN_SLACK_NS),
                    c.at_ns + duration_ms * 1_000_000 + EXPLAIN_SLACK_NS,
                    c.node,
                )),
                FaultGuess::Crash { .. } => Some((
                    label(c),
                    c.at_ns.saturating_sub(CRASH_SLACK_NS),
                    c.at_ns + EXPLAIN_SLACK_NS,
                    c.node,
                )),
                _ => None,
            })
            .collect();
        for c in &mut self.candidates {
            if !matches!(c.guess, FaultGuess::Partition { .. }) || c.verdict != Verdict::Cause {
                continue;
            }
            let ends = [c.node, Some(peer_of(c))];
            if let Some((what, _, _, _)) = process_faults
                .iter()
                .find(|(_, from, to, n)| ends.contains(n) && (*from..=*to).contains(&c.at_ns))
            {
                c.verdict = Verdict::Explained;
                c.why = format!("{}; explained by {what}", c.why);
            }
        }
    }

    fn syscall_failures(&mut self) {
        let deaths = self.deaths_by_signal();
        let killed_in_call = |e: &TimedEvent| {
            matches!(&e.event.what, What::SyscallFailure(f) if f.errno.as_deref() == Some("EINTR"))
                && deaths
                    .get(&(e.dump, e.event.pid))
                    .is_some_and(|&d| d >= e.at_ns && d - e.at_ns <= KILLED_IN_CALL_NS)
        };
        let groups = failure_groups(&self.t.events, self.scenario.is_some(), killed_in_call);
        // the rate is judged on what happened before the first symptom, not on its aftermath
        let first_symptom = self.symptoms.iter().map(|s| s.at_ns).min().unwrap_or(u64::MAX);
        for FailureGroup {
            first,
            times: all,
            path,
            killed_in_call,
        } in groups
        {
            let What::SyscallFailure(f) = &first.event.what else {
                continue;
            };
            let (who_, syscall) = (who(first, self.scenario), f.syscall.clone());
            let errno = f.errno.clone().unwrap_or_default();
            let before = all.partition_point(|&t| t <= first_symptom);
            let times = if before == 0 { &all[..] } else { &all[..before] };
            let raw_path = f.path.clone();
            let guess = FaultGuess::Syscall {
                syscall: syscall.clone(),
                errno: errno.clone(),
                path: path.clone(),
                raw_path,
                short: None,
                persistent: false,
            };
            let mut c = self.candidate(first, guess, first.at_ns, String::new());
            c.occurrences = all.len() as u32;
            c.burst = max_burst(times);
            c.profile_per_s = self.baseline.and_then(|b| {
                b.failures
                    .get(&(who_, syscall.clone(), errno.clone(), path.clone()))
                    .copied()
            });
            c.routine = is_routine(&syscall, &errno, first_path(first));
            let (verdict, why) = if killed_in_call {
                let seen = format!("{} time(s), at most {} within 2 s", c.occurrences, c.burst);
                (
                    Verdict::Explained,
                    format!("{seen}; cut short by the signal that killed the process right after"),
                )
            } else {
                self.judge_failure(&c, &errno)
            };
            c.verdict = verdict;
            c.why = why;
            self.candidates.push(c);
        }
    }

    /// When each process that died of a signal died ((dump, pid) → time).
    fn deaths_by_signal(&self) -> HashMap<(usize, u32), u64> {
        let mut out = HashMap::new();
        for t in &self.t.events {
            if let What::ProcessState(p) = &t.event.what {
                if matches!(p.state, State::Killed { .. }) {
                    out.entry((t.dump, t.event.pid)).or_insert(t.at_ns);
                }
            }
        }
        out
    }

    fn judge_failure(&self, c: &Candidate, errno: &str) -> (Verdict, String) {
        let seen = format!("{} time(s), at most {} within 2 s", c.occurrences, c.burst);
        if errno.starts_with("ERESTART") || errno == "ENOIOCTLCMD" {
            return (Verdict::Explained, format!("{seen}; interrupted by a signal ({errno} is kernel-internal: the call is restarted or ends in EINTR)"));
        }
        // a burst no larger than what one fault-free run saw in all is no anomaly, however
        // short that run's burst was (start-up probes of a runtime, against a long run's rate)
        let most_in_a_run = match (&c.guess, self.baseline) {
            (FaultGuess::Syscall { syscall, path, .. }, Some(b)) => b
                .failures_most_in_a_run
                .get(&(c.who.clone(), syscall.clone(), errno.to_string(), path.clone()))
                .copied(),
            _ => None,
        };
        if let (Some(most), Some(rate)) = (most_in_a_run, c.profile_per_s) {
            if c.burst as u64 <= most {
                return (
                    Verdict::Benign,
                    format!("{seen}; fault-free runs see it too at {rate:.2}/s, up to {most} in one run"),
                );
            }
        }
        match c.profile_per_s {
            Some(rate) => {
                let expected = rate * BURST_WINDOW_NS as f64 / 1e9;
                let p = poisson_tail(expected, c.burst);
                if p < ANOMALY_P {
                    let routine = if c.routine {
                        "; part of normal operation, so a raised rate is more likely load than a fault (ranked last)"
                    } else {
                        ""
                    };
                    (Verdict::Cause, format!("{seen}; fault-free runs see {rate:.2}/s ({expected:.1} per 2 s): far above (p={p:.1e}){routine}"))
                } else {
                    (
                        Verdict::Benign,
                        format!("{seen}; fault-free runs see it too at {rate:.2}/s (p={p:.2})"),
                    )
                }
            }
            None if c.routine => (
                Verdict::Cause,
                format!("{seen}; part of normal operation (ranked last, tried after every other candidate)"),
            ),
            None if self.baseline.is_some() => {
                (Verdict::Cause, format!("{seen}; never seen in fault-free runs"))
            }
            None => (Verdict::Cause, format!("{seen}; no profile to compare with")),
        }
    }

    /// A connection reset, refused or timed out while (or shortly after) another node was
    /// crashed, paused or cut off is that fault's consequence.
    fn explain_network_failures(&mut self) {
        // (what, node, peer, from, to): when another fault's aftermath lasts
        type Window = (String, Option<usize>, Option<usize>, u64, u64);
        let windows: Vec<Window> = self
            .candidates
            .iter()
            .filter(|c| c.verdict == Verdict::Cause)
            .filter_map(|c| match c.guess {
                FaultGuess::Crash { .. } => Some((label(c), c.node, None, c.at_ns, c.at_ns + AFTERMATH_NS)),
                FaultGuess::Pause { duration_ms, .. } => Some((
                    label(c),
                    c.node,
                    None,
                    c.at_ns,
                    c.at_ns + duration_ms * 1_000_000 + AFTERMATH_NS,
                )),
                FaultGuess::Partition { peer, duration_ms } => Some((
                    label(c),
                    c.node,
                    Some(peer),
                    c.at_ns,
                    c.at_ns + duration_ms * 1_000_000 + AFTERMATH_NS,
                )),
                _ => None,
            })
            .collect();
        for c in &mut self.candidates {
            let FaultGuess::Syscall { errno, .. } = &c.guess else {
                continue;
            };
            if c.verdict != Verdict::Cause || !NETWORK_ERRNOS.contains(&errno.as_str()) {
                continue;
            }
            let hit = windows.iter().find(|(_, node, peer, from, to)| {
                let involves_other = *node != c.node || peer.is_some();
                involves_other && c.at_ns >= *from && c.at_ns <= *to
            });
            if let Some((what, ..)) = hit {
                c.verdict = Verdict::Explained;
                c.why = format!("{}; during or right after {what}", c.why);
            }
        }
    }

    /// Failed syscalls after the first symptom are its consequences (recovery, error
    /// reporting, a dying process's calls); other faults after the last symptom cannot have
    /// caused it. Either is shown, never tried.
    fn mark_late(&mut self) {
        let Some(first) = self.symptoms.iter().map(|s| s.at_ns).min() else {
            return;
        };
        let last = self.symptoms.iter().map(|s| s.at_ns).max().unwrap_or(first);
        for c in &mut self.candidates {
            let failure = matches!(c.guess, FaultGuess::Syscall { .. });
            if c.verdict != Verdict::Cause || c.at_ns <= if failure { first } else { last } {
                continue;
            }
            c.verdict = Verdict::Late;
            c.why = format!(
                "{}; after the {} symptom: a consequence",
                c.why,
                if failure { "first" } else { "last" }
            );
        }
    }

    /// Each candidate's production context: the functions its node entered since the
    /// previous fault on the same node, all asked of `preceding` at once.
    fn contexts(&mut self, preceding: Preceding) {
        let mut order: Vec<usize> = (0..self.candidates.len()).collect();
        order.sort_by_key(|&i| self.candidates[i].at_ns);
        // the previous cause seen on each node, walking in time order
        let mut previous: HashMap<Option<usize>, u64> = HashMap::new();
        let queries: Vec<ContextQuery> = order
            .iter()
            .map(|&i| {
                let c = &self.candidates[i];
                let since_ns = previous.get(&c.node).copied().unwrap_or(0);
                if c.verdict == Verdict::Cause {
                    previous.insert(c.node, c.at_ns);
                }
                // the signal of a crash or pause lands in the process that completes its
                // context: the context is what the killed or stopped process itself ran (a
                // forked worker's functions, not its master's)
                let process_fault = matches!(c.guess, FaultGuess::Crash { .. } | FaultGuess::Pause { .. });
                ContextQuery {
                    node: if process_fault { None } else { c.node },
                    dump: c.dump,
                    pid: c.pid,
                    since_ns,
                    before_ns: c.at_ns,
                }
            })
            .collect();
        for (&i, fns) in order.iter().zip(preceding(self.t, &queries)) {
            self.candidates[i].preceding_functions = fns;
        }
    }
}

/// The failed syscalls of one signature: node, who (the node, or the process when no node
/// names it), syscall, errno and normalized path.
struct FailureGroup<'e> {
    first: &'e TimedEvent,
    /// the times of its events, in time order
    times: Vec<u64>,
    /// the normalized path, when the calls named one
    path: Option<String>,
    /// every one of its calls was cut short by the signal that killed its process
    killed_in_call: bool,
}

/// A failure's signature as borrowed from its event: node, the process when no node names
/// it (comm, pid), syscall, errno, and the path (exact or normalized).
type FailureKey<'e, P> = (Option<usize>, Option<(&'e str, u32)>, &'e str, &'e str, Option<P>);

fn failure_key<'e, P>(
    t: &'e TimedEvent,
    scenario: bool,
    path: impl FnOnce(&'e str) -> P,
) -> Option<FailureKey<'e, P>> {
    let What::SyscallFailure(f) = &t.event.what else {
        return None;
    };
    // who() names the node, or the process when there is no node to name
    let process = (t.node.is_none() || !scenario).then_some((&*t.event.comm, t.event.pid));
    let errno = f.errno.as_deref().unwrap_or_default();
    Some((
        t.node,
        process,
        f.syscall.as_str(),
        errno,
        f.path.as_deref().map(path),
    ))
}

/// The failed syscalls grouped by signature, in the order of each signature's first event
/// (so that equal ranks keep one order). With a scenario, failures of no node are left out.
/// Events group first by exact path (one look-up per event), and those groups merge by
/// normalized path (one normalization per distinct path).
/// The failures of `events` grouped by signature; `killed_in_call` tells an event cut short
/// by its process's death.
fn failure_groups(
    events: &[TimedEvent],
    scenario: bool,
    killed_in_call: impl Fn(&TimedEvent) -> bool,
) -> Vec<FailureGroup<'_>> {
    let mut exact: Vec<(&TimedEvent, Vec<u64>, bool)> = Vec::new();
    let mut exact_of: HashMap<FailureKey<&str>, usize> = HashMap::new();
    for t in events {
        if scenario && t.node.is_none() {
            continue;
        }
        let Some(key) = failure_key(t, scenario, |p| p) else {
            continue;
        };
        let next = exact.len();
        let g = *exact_of.entry(key).or_insert_with(|| {
            exact.push((t, Vec::new(), true));
            next
        });
        exact[g].1.push(t.at_ns);
        exact[g].2 &= killed_in_call(t);
    }
    let mut groups: Vec<FailureGroup> = Vec::new();
    let mut group_of: HashMap<FailureKey<String>, usize> = HashMap::new();
    let mut merged = vec![false; exact.len()];
    for (first, times, killed) in exact {
        let Some(key) = failure_key(first, scenario, normalize_path) else {
            continue;
        };
        if let Some(&g) = group_of.get(&key) {
            groups[g].times.extend(times);
            groups[g].killed_in_call &= killed;
            merged[g] = true;
            continue;
        }
        let path = key.4.clone();
        group_of.insert(key, groups.len());
        groups.push(FailureGroup {
            first,
            times,
            path,
            killed_in_call: killed,
        });
    }
    for (g, _) in groups.iter_mut().zip(&merged).filter(|(_, &m)| m) {
        g.times.sort_unstable();
    }
    groups
}

/// Production's addresses of the nodes: each connection's local end is its process's node's,
/// and so are the addresses of a host whose dump holds one node only.
fn peer_map(t: &Timeline, scenario: &Scenario) -> PeerMap {
    let owned = t.events.iter().filter_map(|e| match (&e.event.what, e.node) {
        (What::NetworkGap(g), Some(n)) => Some((g.local?, n)),
        _ => None,
    });
    let mut nodes_of_dump: Vec<Vec<usize>> = vec![Vec::new(); t.dumps.len()];
    for e in &t.events {
        if let (Some(n), Some(nodes)) = (e.node, nodes_of_dump.get_mut(e.dump)) {
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
    }
    let hosts = t.dumps.iter().zip(&nodes_of_dump).flat_map(|(d, nodes)| {
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

/// "the crash of leader": how other candidates refer to this one.
fn label(c: &Candidate) -> String {
    let kind = match c.guess {
        FaultGuess::Crash { .. } => "crash",
        FaultGuess::Pause { .. } => "pause",
        FaultGuess::Partition { .. } => "partition",
        FaultGuess::Syscall { .. } => "failure",
    };
    format!("the {kind} of {}", c.who)
}

fn partition_ms(c: &Candidate) -> u64 {
    match c.guess {
        FaultGuess::Partition { duration_ms, .. } => duration_ms,
        _ => 0,
    }
}

fn peer_of(c: &Candidate) -> usize {
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
    /// the connection closed while silent, before the dump
    torn_down: bool,
    /// the profile knows this pair and port, silent at most this long (ms) without faults
    beyond_norm: Option<u64>,
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

/// A failure that is part of normal operation by its nature: its errno, its call and errno,
/// or a loader/libc probe of a path that may not exist.
fn is_routine(syscall: &str, errno: &str, path: Option<&str>) -> bool {
    let probe = matches!(errno, "ENOENT" | "ENOTDIR")
        && path.is_some_and(|p| PROBED_PATHS.iter().any(|m| p.contains(m)));
    ROUTINE_ERRNOS.contains(&errno) || ROUTINE_FAILURES.contains(&(syscall, errno)) || probe
}

fn first_path(t: &TimedEvent) -> Option<&str> {
    match &t.event.what {
        What::SyscallFailure(f) => f.path.as_deref(),
        _ => None,
    }
}

/// Ranks causes: process faults, then partitions, then failed syscalls (the paper's
/// order), failures that are part of normal operation after all of them; production order
/// within a kind.
fn rank(c: &Candidate) -> (u8, bool, u8, u64) {
    let kind = match c.guess {
        FaultGuess::Crash { .. } | FaultGuess::Pause { .. } => 0,
        FaultGuess::Partition { .. } => 1,
        FaultGuess::Syscall { .. } => 2,
    };
    let verdict = match c.verdict {
        Verdict::Cause => 0,
        Verdict::Late => 1,
        Verdict::Explained => 2,
        Verdict::Benign => 3,
    };
    (verdict, c.routine, kind, c.at_ns)
}

/// How the candidates' contexts are found: [`contexts::preceding_functions`]; the unit tests
/// compare it with a walk over the whole timeline per candidate.
type Preceding = fn(&Timeline, &[ContextQuery]) -> Vec<Vec<String>>;

pub fn diagnose(t: &Timeline, scenario: Option<&Scenario>, baseline: Option<&BaselineRates>) -> Diagnosis {
    diagnose_with(t, scenario, baseline, contexts::preceding_functions)
}

fn diagnose_with(
    t: &Timeline,
    scenario: Option<&Scenario>,
    baseline: Option<&BaselineRates>,
    preceding: Preceding,
) -> Diagnosis {
    let mut b = Builder {
        t,
        scenario,
        baseline,
        candidates: Vec::new(),
        symptoms: Vec::new(),
        notes: Vec::new(),
        nodes_of_pid: HashMap::new(),
        peers: scenario.map(|s| peer_map(t, s)).unwrap_or_default(),
    };
    b.process_states();
    b.gaps();
    b.explain_gaps();
    b.syscall_failures();
    b.short_then_persistent();
    b.explain_network_failures();
    b.mark_late();
    b.contexts(preceding);
    b.candidates.sort_by_key(rank);
    let unmapped_events = if scenario.is_some() {
        t.events.iter().filter(|e| e.node.is_none()).count()
    } else {
        0
    };
    if baseline.is_none() {
        b.notes
            .push("no --profile: failed syscalls could not be compared with fault-free runs".into());
    }
    for d in &t.dumps {
        if d.lost_events > 0 {
            b.notes.push(format!(
                "dump {}: {} events were lost before the dump (the window is incomplete)",
                d.path.display(),
                d.lost_events
            ));
        }
    }
    let dumps = t
        .dumps
        .iter()
        .map(|d| DumpSummary {
            path: d.path.clone(),
            host: d.host.clone(),
            events: d.events,
            nodes: d
                .nodes
                .iter()
                .map(|&n| {
                    scenario
                        .map(|s| s.nodes[n].name.clone())
                        .unwrap_or_else(|| n.to_string())
                })
                .collect(),
        })
        .collect();
    Diagnosis {
        candidates: b.candidates,
        symptoms: b.symptoms,
        start_ns: t.start_ns(),
        end_ns: t.end_ns(),
        unmapped_events,
        notes: b.notes,
        dumps,
    }
}

/// `who`, and with dumps of several hosts the host whose dump showed it: "replica@db2".
fn placed(d: &Diagnosis, who: &str, host: &str) -> String {
    if d.dumps.len() > 1 {
        format!("{who}@{host}")
    } else {
        who.to_string()
    }
}

fn describe(g: &FaultGuess, scenario: Option<&Scenario>) -> String {
    match g {
        FaultGuess::Syscall {
            syscall,
            errno,
            raw_path,
            short,
            persistent,
            ..
        } => format!(
            "{}{syscall} failed with {errno}{}{}",
            short
                .map(|b| format!("a short {syscall} ({b} bytes), then "))
                .unwrap_or_default(),
            if *persistent { " on every later call" } else { "" },
            raw_path.as_ref().map(|p| format!(" on {p}")).unwrap_or_default()
        ),
        FaultGuess::Crash { signal, .. } => format!("crash ({signal})"),
        FaultGuess::Pause { duration_ms, .. } => format!("pause of {duration_ms} ms"),
        FaultGuess::Partition { peer, duration_ms } => {
            let name = scenario
                .map(|s| s.nodes[*peer].name.clone())
                .unwrap_or_else(|| peer.to_string());
            format!("partition from {name} for {duration_ms} ms")
        }
    }
}

fn rel(at_ns: u64, end_ns: u64) -> String {
    format!("-{:.3} s", end_ns.saturating_sub(at_ns) as f64 / 1e9)
}

/// The human-readable diagnosis (also the top of report.md).
pub fn render(d: &Diagnosis, scenario: Option<&Scenario>) -> String {
    let mut out = String::new();
    let span = (d.end_ns.saturating_sub(d.start_ns)) as f64 / 1e9;
    let _ = writeln!(
        out,
        "window: {span:.1} s of events; times are relative to the end of the window (the dump)"
    );
    if d.dumps.len() > 1 {
        let _ = writeln!(
            out,
            "dumps ({}), merged on wall-clock time (each dump's clock pair):",
            d.dumps.len()
        );
        for dump in &d.dumps {
            let nodes = match dump.nodes.is_empty() {
                true => String::new(),
                false => format!(", nodes: {}", dump.nodes.join(", ")),
            };
            let _ = writeln!(
                out,
                "  {}: {} — {} events{nodes}",
                dump.host,
                dump.path.display(),
                dump.events
            );
        }
    }
    let _ = writeln!(out, "symptoms ({}):", d.symptoms.len());
    for s in &d.symptoms {
        let _ = writeln!(
            out,
            "  {:>10}  {}: {}",
            rel(s.at_ns, d.end_ns),
            placed(d, &s.who, &s.host),
            s.what
        );
    }
    let causes: Vec<&Candidate> = d.causes().collect();
    let _ = writeln!(out, "fault candidates ({}), most likely first:", causes.len());
    for (i, c) in causes.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {:>2}. {:>10}  {}: {} — {}",
            i + 1,
            rel(c.at_ns, d.end_ns),
            placed(d, &c.who, &c.host),
            describe(&c.guess, scenario),
            c.why
        );
        if !c.preceding_functions.is_empty() {
            let names: Vec<&str> = c
                .preceding_functions
                .iter()
                .take(5)
                .map(|f| f.rsplit(':').next().unwrap_or(f))
                .collect();
            let _ = writeln!(out, "      after: {} (nearest first)", names.join(" <- "));
        }
    }
    let others: Vec<&Candidate> = d
        .candidates
        .iter()
        .filter(|c| c.verdict != Verdict::Cause)
        .collect();
    if !others.is_empty() {
        let _ = writeln!(out, "set aside ({}):", others.len());
        for c in others {
            let what = match &c.guess {
                FaultGuess::Partition { peer, duration_ms } => {
                    format!(
                        "silence with {} for {duration_ms} ms",
                        scenario
                            .map(|s| s.nodes[*peer].name.clone())
                            .unwrap_or_else(|| peer.to_string())
                    )
                }
                g => describe(g, scenario),
            };
            let _ = writeln!(
                out,
                "      {:>10}  {}: {what} — {:?}: {}",
                rel(c.at_ns, d.end_ns),
                placed(d, &c.who, &c.host),
                c.verdict,
                c.why
            );
        }
    }
    if d.unmapped_events > 0 {
        let _ = writeln!(
            out,
            "{} events of processes that are not scenario nodes were ignored",
            d.unmapped_events
        );
    }
    for n in &d.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_tail_matches_known_values() {
        assert!((poisson_tail(1.0, 1) - (1.0 - (-1.0f64).exp())).abs() < 1e-12);
        assert!(
            poisson_tail(10.0, 40) < 1e-9,
            "40 in a window that expects 10 is an anomaly"
        );
        assert!(
            poisson_tail(60.0, 40) > 0.9,
            "40 in a window that expects 60 is not"
        );
        assert_eq!(poisson_tail(0.0, 1), 0.0);
    }

    /// Gap, consequence and routine-failure rules on timelines with a dump time and three nodes.
    mod judged {
        use super::super::*;
        use tracedump::event::{Event, NetworkGap, PauseCause, ProcessChange, SyscallFailure};

        use crate::analysis::timeline::DumpInfo;

        const S: u64 = 1_000_000_000;
        const DUMP_AT: u64 = 200 * S;

        fn scenario() -> Scenario {
            let node = |n: &str, i: u8| {
                format!("[[nodes]]\nname = \"{n}\"\ncommand = [\"srv\", \"{n}\"]\naddress = \"10.9.0.{i}\"\nmatch = \"{n}\"\n")
            };
            let text = format!(
                "name = \"t\"\n{}{}{}[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n",
                node("a", 1),
                node("b", 2),
                node("c", 3)
            );
            Scenario::parse(&text, "t").unwrap()
        }

        fn event(at_ns: u64, node: usize, what: What) -> TimedEvent {
            let pid = 100 + node as u32;
            TimedEvent {
                at_ns,
                node: Some(node),
                dump: 0,
                event: Event {
                    ts_ns: at_ns,
                    realtime_ns: at_ns,
                    host: "h".into(),
                    pid,
                    tid: pid,
                    comm: "srv".into(),
                    what,
                },
            }
        }

        fn gap(
            at_ns: u64,
            node: usize,
            local: &str,
            peer: &str,
            ms: u64,
            packets: u64,
            ongoing: bool,
        ) -> TimedEvent {
            let g = NetworkGap {
                local: Some(local.parse().unwrap()),
                peer: Some(peer.parse().unwrap()),
                duration_ms: ms,
                packets,
                ongoing,
            };
            event(at_ns, node, What::NetworkGap(g))
        }

        fn failure(at_ns: u64, node: usize, syscall: &str, errno: &str, path: Option<&str>) -> TimedEvent {
            let f = SyscallFailure {
                syscall: syscall.into(),
                ret: -1,
                errno: Some(errno.into()),
                fd: None,
                path: path.map(String::from),
                peer: None,
            };
            event(at_ns, node, What::SyscallFailure(f))
        }

        fn state(at_ns: u64, node: usize, state: State) -> TimedEvent {
            event(
                at_ns,
                node,
                What::ProcessState(ProcessChange {
                    state,
                    signal: None,
                    sender: None,
                    ongoing: false,
                }),
            )
        }

        fn timeline(mut events: Vec<TimedEvent>) -> Timeline {
            events.sort_by_key(|e| e.at_ns);
            let dump = DumpInfo {
                path: "d.tdump".into(),
                host: "h".into(),
                events: events.len(),
                mapped_processes: 3,
                processes: 3,
                nodes: Vec::new(),
                interfaces: Vec::new(),
                taken_ns: DUMP_AT,
                lost_events: 0,
            };
            Timeline {
                events,
                dumps: vec![dump],
                functions: Vec::new(),
            }
        }

        fn partitions(d: &Diagnosis, verdict: Verdict) -> Vec<&Candidate> {
            d.candidates
                .iter()
                .filter(|c| matches!(c.guess, FaultGuess::Partition { .. }) && c.verdict == verdict)
                .collect()
        }

        #[test]
        fn gaps_and_pauses_start_at_their_time_stamp() {
            let s = scenario();
            // a known silence: a and b hear nothing from each other from 100 s to 104 s
            let t = timeline(vec![
                gap(100 * S, 0, "10.9.0.1:41000", "10.9.0.2:7000", 4000, 50, false),
                gap(
                    100 * S + S / 10,
                    1,
                    "10.9.0.2:7000",
                    "10.9.0.1:41000",
                    3900,
                    48,
                    false,
                ),
                // ongoing at the dump: silent for the last 9.6 s of the window, on two connections
                gap(
                    DUMP_AT - 9600 * 1_000_000,
                    0,
                    "10.9.0.1:41001",
                    "10.9.0.3:7000",
                    9600,
                    10,
                    true,
                ),
                gap(
                    DUMP_AT - 9500 * 1_000_000,
                    2,
                    "10.9.0.3:41002",
                    "10.9.0.1:7001",
                    9500,
                    10,
                    true,
                ),
                state(
                    50 * S,
                    2,
                    State::Paused {
                        cause: PauseCause::Stopped,
                        duration_ms: 2000,
                    },
                ),
            ]);
            let d = diagnose(&t, Some(&s), None);
            let cut = partitions(&d, Verdict::Cause);
            assert_eq!(cut.len(), 2, "{:#?}", d.candidates);
            assert_eq!(
                (cut[0].at_ns, cut[0].guess.clone()),
                (
                    100 * S + S / 10,
                    FaultGuess::Partition {
                        peer: 1,
                        duration_ms: 3900
                    }
                ),
                "the time every connection was silent"
            );
            assert_eq!(
                cut[1].at_ns,
                DUMP_AT - 9500 * 1_000_000,
                "an ongoing gap starts 9.5 s before the dump, not 19 s"
            );
            let pause = d
                .candidates
                .iter()
                .find(|c| matches!(c.guess, FaultGuess::Pause { .. }))
                .unwrap();
            assert_eq!(pause.at_ns, 50 * S);
        }

        #[test]
        fn gaps_that_would_end_after_the_dump_are_ignored() {
            let s = scenario();
            let t = timeline(vec![
                // a real cut of a from b, seen on two connections
                gap(100 * S, 0, "10.9.0.1:41000", "10.9.0.2:7000", 4000, 50, false),
                gap(100 * S, 0, "10.9.0.1:41001", "10.9.0.2:7001", 4000, 50, false),
                // a and c: what a wrapped jiffies difference made of a short silence
                gap(
                    110 * S,
                    0,
                    "10.9.0.1:41002",
                    "10.9.0.3:7000",
                    18_429_563_939_213,
                    50,
                    false,
                ),
                gap(
                    110 * S,
                    2,
                    "10.9.0.3:7000",
                    "10.9.0.1:41002",
                    18_429_563_939_213,
                    50,
                    false,
                ),
            ]);
            let d = diagnose(&t, Some(&s), None);
            let cut = partitions(&d, Verdict::Cause);
            assert_eq!(cut.len(), 1, "{:#?}", d.candidates);
            assert_eq!(peer_of(cut[0]), 1);
            assert!(
                d.candidates.iter().all(|c| peer_of(c) != 2 && c.node != Some(2)),
                "{:#?}",
                d.candidates
            );
            assert!(
                d.notes
                    .iter()
                    .any(|n| n.starts_with("2 gap(s) that would end after their dump")),
                "{:?}",
                d.notes
            );
        }

        #[test]
        fn idle_connections_are_not_partitions() {
            let s = scenario();
            let mut events: Vec<TimedEvent> = (0..20)
                .map(|i| {
                    gap(
                        (100 + i) * S,
                        1,
                        "10.9.0.2:41000",
                        "10.9.0.1:6380",
                        1000,
                        10 + i,
                        false,
                    )
                })
                .collect();
            events.push(gap(
                130 * S,
                1,
                "10.9.0.2:41000",
                "10.9.0.1:6380",
                4067,
                40,
                false,
            ));
            // a keep-alive connection to c, silent until the dump: idle or cut, nothing says which
            events.push(gap(
                150 * S,
                0,
                "10.9.0.1:41005",
                "10.9.0.3:2379",
                50_000,
                3,
                true,
            ));
            let t = timeline(events);
            let mut baseline = BaselineRates::default();
            baseline.gaps.insert(("b".into(), "a".into(), 6380), 1050);
            let d = diagnose(&t, Some(&s), Some(&baseline));
            let cut = partitions(&d, Verdict::Cause);
            assert_eq!(cut.len(), 1, "{:#?}", d.candidates);
            assert_eq!(
                (cut[0].at_ns, cut[0].guess.clone()),
                (
                    130 * S,
                    FaultGuess::Partition {
                        peer: 1,
                        duration_ms: 4067
                    }
                )
            );
            let idle = partitions(&d, Verdict::Benign);
            assert_eq!(
                idle.len(),
                2,
                "the idle gaps folded into one, the keep-alive apart: {idle:#?}"
            );
            assert_eq!(idle.iter().map(|c| c.occurrences).max(), Some(20));
            // without the profile, the idle pings are not chained into one long partition
            let d = diagnose(&t, Some(&s), None);
            assert!(
                partitions(&d, Verdict::Cause)
                    .iter()
                    .all(|c| partition_ms(c) <= 4067),
                "{:#?}",
                d.candidates
            );
        }

        #[test]
        fn a_partition_needs_corroboration() {
            let s = scenario();
            let torn = timeline(vec![gap(
                100 * S,
                0,
                "10.9.0.1:41000",
                "10.9.0.2:7000",
                5000,
                9,
                true,
            )]);
            let d = diagnose(&torn, Some(&s), None);
            assert_eq!(
                partitions(&d, Verdict::Cause).len(),
                1,
                "closed while silent, long before the dump: {:#?}",
                d.candidates
            );
            let together = timeline(vec![
                gap(
                    DUMP_AT - 8 * S,
                    0,
                    "10.9.0.1:41000",
                    "10.9.0.2:7000",
                    8000,
                    9,
                    true,
                ),
                gap(
                    DUMP_AT - 8 * S,
                    1,
                    "10.9.0.2:7000",
                    "10.9.0.1:41000",
                    8000,
                    9,
                    true,
                ),
            ]);
            let d = diagnose(&together, Some(&s), None);
            assert_eq!(
                partitions(&d, Verdict::Benign).len(),
                1,
                "both ends of one idle connection are one connection: {:#?}",
                d.candidates
            );
            let mut events = together.events.clone();
            events.push(gap(
                DUMP_AT - 7 * S,
                1,
                "10.9.0.2:41009",
                "10.9.0.1:7001",
                7000,
                9,
                true,
            ));
            let d = diagnose(&timeline(events), Some(&s), None);
            assert_eq!(
                partitions(&d, Verdict::Cause).len(),
                1,
                "two connections silent together: {:#?}",
                d.candidates
            );
        }

        #[test]
        fn production_addresses_that_are_not_the_scenario_s_are_mapped_to_nodes() {
            // the scenario names the test bed (10.9.0.x, nodes listening on 700N); production
            // ran on 192.168.3.x
            let text = (1..=3)
                .map(|i| {
                    format!("[[nodes]]\nname = \"n{i}\"\ncommand = [\"srv\", \"--port\", \"700{i}\"]\naddress = \"10.9.0.{i}\"\nmatch = \"700{i}\"\n")
                })
                .collect::<String>();
            let s = Scenario::parse(
                &format!(
                    "name = \"t\"\n{text}[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n"
                ),
                "t",
            )
            .unwrap();
            let t = timeline(vec![
                // both ends of n1-n2 traced, silent together, traffic resumed
                gap(
                    100 * S,
                    0,
                    "192.168.3.1:41000",
                    "192.168.3.2:7002",
                    5000,
                    50,
                    false,
                ),
                gap(
                    100 * S,
                    1,
                    "192.168.3.2:7002",
                    "192.168.3.1:41000",
                    5000,
                    50,
                    false,
                ),
                // n1's connection to n3's service on an untraced host, torn down while silent
                gap(
                    150 * S,
                    0,
                    "192.168.3.1:41001",
                    "192.168.3.9:7003",
                    6000,
                    50,
                    true,
                ),
            ]);
            let d = diagnose(&t, Some(&s), None);
            let cut: Vec<(Option<usize>, u64)> = partitions(&d, Verdict::Cause)
                .iter()
                .map(|c| (c.node, peer_of(c) as u64))
                .collect();
            assert_eq!(cut, [(Some(0), 1), (Some(0), 2)], "{:#?}", d.candidates);
        }

        #[test]
        fn self_connections_and_connects_that_never_completed_are_not_partitions() {
            let s = scenario();
            let t = timeline(vec![
                gap(100 * S, 0, "10.9.0.1:2379", "10.9.0.1:41000", 9000, 30, false),
                gap(100 * S, 0, "10.9.0.1:41001", "10.9.0.2:2380", 9565, 0, true),
                gap(120 * S, 0, "10.9.0.1:41002", "10.9.0.2:2380", 9565, 0, false),
            ]);
            let d = diagnose(&t, Some(&s), None);
            assert!(partitions(&d, Verdict::Cause).is_empty(), "{:#?}", d.candidates);
            assert!(d.notes.iter().any(|n| n.contains("to itself")), "{:?}", d.notes);
        }

        #[test]
        fn failures_after_the_first_symptom_are_consequences() {
            let s = scenario();
            let t = timeline(vec![
                failure(5 * S, 0, "read", "EIO", Some("/data/snap.1")),
                state(10 * S, 0, State::Exited { code: 1 }),
                failure(11 * S, 1, "epoll_wait", "EINTR", None),
                failure(
                    12 * S,
                    1,
                    "openat",
                    "ENOENT",
                    Some("/usr/share/locale/de/LC_MESSAGES/libc.mo"),
                ),
                failure(13 * S, 2, "mkdir", "EEXIST", Some("/data/recovery")),
                state(14 * S, 1, State::Exited { code: 1 }),
            ]);
            let d = diagnose(&t, Some(&s), None);
            let causes: Vec<&Candidate> = d.causes().collect();
            assert_eq!(causes.len(), 1, "{causes:#?}");
            assert!(matches!(&causes[0].guess, FaultGuess::Syscall { syscall, .. } if syscall == "read"));
            let late = d.candidates.iter().filter(|c| c.verdict == Verdict::Late).count();
            assert_eq!(late, 3, "shown, set aside: {:#?}", d.candidates);
            assert!(render(&d, Some(&s)).contains("after the first symptom"));
        }

        #[test]
        fn failures_of_normal_operation_rank_last() {
            let s = scenario();
            let mut events = Vec::new();
            for i in 0..40 {
                events.push(failure(10 * S + i * S / 40, 0, "epoll_ctl", "EPERM", None));
                events.push(failure(10 * S + i * S / 40, 0, "connect", "EINPROGRESS", None));
                events.push(failure(10 * S + i * S / 40, 0, "futex", "ETIMEDOUT", None));
            }
            events.push(failure(30 * S, 1, "fsync", "EIO", Some("/data/wal.3")));
            events.push(failure(31 * S, 1, "read", "EAGAIN", None));
            let t = timeline(events);
            let mut baseline = BaselineRates::default();
            for (sys, errno) in [
                ("epoll_ctl", "EPERM"),
                ("connect", "EINPROGRESS"),
                ("futex", "ETIMEDOUT"),
            ] {
                baseline
                    .failures
                    .insert(("a".into(), sys.into(), errno.into(), None), 0.5);
            }
            for b in [Some(&baseline), None] {
                let d = diagnose(&t, Some(&s), b);
                let causes: Vec<&Candidate> = d.causes().collect();
                assert!(
                    matches!(&causes[0].guess, FaultGuess::Syscall { syscall, .. } if syscall == "fsync"),
                    "{causes:#?}"
                );
                assert!(causes[1..].iter().all(|c| c.routine), "{causes:#?}");
                assert_eq!(
                    causes.len(),
                    5,
                    "a raised rate still makes them candidates, after the others: {causes:#?}"
                );
            }
        }
    }

    #[test]
    fn a_connection_the_profile_knows_as_busy_is_a_partition_when_long_silent() {
        // the replication link: pings every second fault-free; cut, it stays silent until the dump
        let t = timeline(vec![
            at(
                5.0,
                Some(1),
                20,
                What::NetworkGap(NetworkGap {
                    local: Some("10.7.0.2:44792".parse().unwrap()),
                    peer: Some("10.7.0.1:6380".parse().unwrap()),
                    duration_ms: 4071,
                    packets: 18,
                    ongoing: true,
                }),
            ),
            at(9.5, Some(1), 20, exited(1)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        assert!(
            d.causes().next().is_none(),
            "no profile: one silent connection is not enough: {:#?}",
            d.candidates
        );
        let mut baseline = BaselineRates::default();
        baseline.gaps.insert(("db2".into(), "db1".into(), 6380), 1020);
        let d = diagnose(&t, Some(&scenario()), Some(&baseline));
        let p = d.causes().next().expect("a partition");
        assert!(
            p.why.contains("never see these connections silent over 1020 ms"),
            "{}",
            p.why
        );
    }

    #[test]
    fn a_partition_that_began_before_a_crash_is_not_explained_by_it() {
        let t = timeline(vec![
            at(5.0, Some(0), 10, gap("10.7.0.1:4000", "10.7.0.2:6379", 3000)),
            at(5.1, Some(1), 20, gap("10.7.0.2:6379", "10.7.0.1:4000", 2900)),
            at(6.2, Some(0), 10, killed(libc::SIGKILL, Some(999))),
            at(9.0, Some(0), 11, exited(1)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        assert_eq!(
            d.causes().count(),
            2,
            "the partition and the crash: {:#?}",
            d.candidates
        );
    }

    #[test]
    fn without_a_profile_loader_and_locale_probes_rank_after_the_real_fault() {
        let probes = [
            "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libpthread.so.0",
            "/usr/lib/locale/C.UTF-8/LC_MESSAGES/libc.mo",
            "/usr/share/locale/en/LC_MESSAGES/postgres-16.mo",
            "/usr/lib/x86_64-linux-gnu/gconv/gconv-modules.d",
        ];
        let mut events: Vec<TimedEvent> = probes
            .iter()
            .enumerate()
            .map(|(i, p)| at(0.1 * i as f64, Some(0), 10, failure("openat", "ENOENT", Some(p))))
            .collect();
        events.push(at(
            3.0,
            Some(0),
            10,
            failure("openat", "ENOENT", Some("/srv/db/base/1/pg_filenode.map")),
        ));
        events.push(at(5.0, Some(0), 10, exited(1)));
        let d = diagnose(&timeline(events), Some(&scenario()), None);
        let first = d.causes().next().unwrap();
        assert!(
            matches!(&first.guess, FaultGuess::Syscall { raw_path: Some(p), .. } if p.ends_with("pg_filenode.map")),
            "{:#?}",
            d.candidates
        );
        assert_eq!(d.causes().filter(|c| c.routine).count(), 4);
    }

    #[test]
    fn bursts_count_within_two_seconds() {
        let s = 1_000_000_000;
        assert_eq!(max_burst(&[0, s, 2 * s, 10 * s]), 3);
        assert_eq!(max_burst(&[0, 3 * s, 6 * s]), 1);
    }

    // Synthetic timelines: the diagnosis is pure, so every rule is checked without root.
    use crate::analysis::timeline::{DumpInfo, TimedEvent};
    use tracedump::event::{
        Event, FunctionHit, NetworkGap, PauseCause, ProcessChange, Sender, SyscallFailure,
    };

    const SEC: u64 = 1_000_000_000;
    const SCENARIO: &str = "name = \"kv\"\n\
        [[nodes]]\nname = \"db1\"\ncommand = [\"kv\"]\naddress = \"10.7.0.1\"\n\
        [[nodes]]\nname = \"db2\"\ncommand = [\"kv\"]\naddress = \"10.7.0.2\"\n\
        [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";

    fn scenario() -> Scenario {
        Scenario::parse(SCENARIO, "t").unwrap()
    }

    fn at(secs: f64, node: Option<usize>, pid: u32, what: What) -> TimedEvent {
        let at_ns = (secs * SEC as f64) as u64;
        let event = Event {
            ts_ns: at_ns,
            realtime_ns: at_ns,
            host: "h".into(),
            pid,
            tid: pid,
            comm: "kv".into(),
            what,
        };
        TimedEvent {
            at_ns,
            node,
            dump: 0,
            event,
        }
    }

    fn failure(syscall: &str, errno: &str, path: Option<&str>) -> What {
        What::SyscallFailure(SyscallFailure {
            syscall: syscall.into(),
            ret: -1,
            errno: Some(errno.into()),
            fd: None,
            path: path.map(String::from),
            peer: None,
        })
    }

    fn killed(signal: i32, sender: Option<u32>) -> What {
        What::ProcessState(ProcessChange {
            state: State::Killed { core_dumped: false },
            signal: Some(signal as u32),
            sender: sender.map(|pid| Sender {
                pid,
                comm: Some("killer".into()),
            }),
            ongoing: false,
        })
    }

    fn exited(code: i32) -> What {
        What::ProcessState(ProcessChange {
            state: State::Exited { code },
            signal: None,
            sender: None,
            ongoing: false,
        })
    }

    fn paused(ms: u64) -> What {
        What::ProcessState(ProcessChange {
            state: State::Paused {
                cause: PauseCause::Stopped,
                duration_ms: ms,
            },
            signal: Some(libc::SIGSTOP as u32),
            sender: None,
            ongoing: false,
        })
    }

    fn gap(local: &str, peer: &str, ms: u64) -> What {
        What::NetworkGap(NetworkGap {
            local: Some(local.parse().unwrap()),
            peer: Some(peer.parse().unwrap()),
            duration_ms: ms,
            packets: 9,
            ongoing: false,
        })
    }

    fn function(name: &str) -> What {
        What::Function(FunctionHit {
            binary: Some("/opt/kv".into()),
            function: Some(name.into()),
        })
    }

    fn timeline(mut events: Vec<TimedEvent>) -> Timeline {
        events.sort_by_key(|e| e.at_ns);
        Timeline {
            events,
            dumps: Vec::new(),
            functions: Vec::new(),
        }
    }

    fn causes(d: &Diagnosis) -> Vec<&FaultGuess> {
        d.causes().map(|c| &c.guess).collect()
    }

    #[test]
    fn outside_kills_are_faults_own_deaths_and_exits_are_symptoms() {
        let t = timeline(vec![
            at(1.0, Some(0), 10, killed(libc::SIGKILL, Some(999))),
            at(2.0, Some(1), 20, killed(libc::SIGSEGV, Some(999))),
            at(3.0, Some(1), 21, exited(3)),
            at(3.5, Some(1), 22, exited(0)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        assert_eq!(
            causes(&d),
            [&FaultGuess::Crash {
                signal: "SIGKILL".into(),
                sender: "killer (pid 999)".into()
            }]
        );
        assert_eq!(d.candidates[0].who, "db1");
        let symptoms: Vec<&str> = d.symptoms.iter().map(|s| s.what.as_str()).collect();
        assert_eq!(symptoms, ["died of SIGSEGV", "exited with status 3"]);
    }

    #[test]
    fn an_eintr_right_before_its_process_is_killed_is_the_kill_not_a_fault() {
        let t = timeline(vec![
            at(0.5, Some(0), 10, function("serve")),
            at(1.0, Some(0), 10, failure("epoll_wait", "EINTR", None)),
            at(1.000_01, Some(0), 10, killed(libc::SIGKILL, Some(999))),
            // the same EINTR in a process that lives on is not explained by the kill
            at(1.0, Some(1), 20, failure("poll", "EINTR", None)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        let eintr = |syscall: &str| {
            d.candidates
                .iter()
                .find(|c| matches!(&c.guess, FaultGuess::Syscall { syscall: s, .. } if s == syscall))
                .unwrap()
        };
        assert_eq!(eintr("epoll_wait").verdict, Verdict::Explained);
        assert_eq!(eintr("poll").verdict, Verdict::Cause);
        // the crash's context reaches back past the EINTR
        let crash = d
            .causes()
            .find(|c| matches!(c.guess, FaultGuess::Crash { .. }))
            .unwrap();
        assert_eq!(crash.preceding_functions, ["/opt/kv:serve"]);
    }

    #[test]
    fn a_burst_one_fault_free_run_saw_in_all_is_benign_whatever_the_mean_rate() {
        // a runtime's start-up: 16 readlink EINVAL within 10 ms; fault-free runs see 16 per
        // run too, but their runs last 12 s (1.3/s)
        let mut events = vec![at(9.0, Some(0), 10, exited(1))];
        events.extend((0..16).map(|i| {
            at(
                1.0 + i as f64 * 0.000_5,
                Some(0),
                10,
                failure("readlink", "EINVAL", Some("/usr")),
            )
        }));
        let key = (
            "db1".to_string(),
            "readlink".to_string(),
            "EINVAL".to_string(),
            Some("*/usr".to_string()),
        );
        let mut baseline = BaselineRates {
            scenario: "kv".into(),
            failures: [(key.clone(), 1.3)].into_iter().collect(),
            failures_most_in_a_run: [(key.clone(), 16)].into_iter().collect(),
            ..Default::default()
        };
        let verdict = |b: &BaselineRates| {
            let d = diagnose(&timeline(events.clone()), Some(&scenario()), Some(b));
            d.candidates
                .iter()
                .find(|c| matches!(c.guess, FaultGuess::Syscall { .. }))
                .unwrap()
                .verdict
                .clone()
        };
        assert_eq!(verdict(&baseline), Verdict::Benign);
        // one more than any fault-free run saw: judged by the rate (far above it)
        baseline.failures_most_in_a_run.insert(key, 15);
        assert_eq!(verdict(&baseline), Verdict::Cause);
    }

    #[test]
    fn a_kill_from_the_same_node_is_a_symptom() {
        let t = timeline(vec![
            at(0.5, Some(0), 11, function("main")),
            at(1.0, Some(0), 10, killed(libc::SIGKILL, Some(11))),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        assert!(d.causes().next().is_none(), "{:?}", d.candidates);
        assert_eq!(d.symptoms.len(), 1);
    }

    #[test]
    fn failures_are_benign_at_their_profile_rate_and_causes_far_above_it() {
        let mut events = vec![at(9.0, Some(0), 10, exited(1))];
        // 3 ENOENT within 2 s (profile: 2/s) and 30 EIO within 2 s (profile: 0.1/s)
        events.extend((0..3).map(|i| {
            at(
                1.0 + i as f64 * 0.5,
                Some(0),
                10,
                failure("openat", "ENOENT", Some("/srv/x/opt-12.conf")),
            )
        }));
        events.extend((0..30).map(|i| {
            at(
                2.0 + i as f64 * 0.05,
                Some(0),
                10,
                failure("read", "EIO", Some("/srv/data")),
            )
        }));
        events.push(at(4.0, Some(1), 20, failure("write", "ENOSPC", None)));
        let baseline = BaselineRates {
            scenario: "kv".into(),
            failures: [
                (
                    (
                        "db1".into(),
                        "openat".into(),
                        "ENOENT".into(),
                        Some("*/opt-*.conf".into()),
                    ),
                    2.0,
                ),
                (
                    ("db1".into(), "read".into(), "EIO".into(), Some("*/data".into())),
                    0.1,
                ),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let d = diagnose(&timeline(events), Some(&scenario()), Some(&baseline));
        let verdict = |syscall: &str| {
            d.candidates
                .iter()
                .find(|c| matches!(&c.guess, FaultGuess::Syscall { syscall: s, .. } if s == syscall))
                .unwrap()
        };
        assert_eq!(
            verdict("openat").verdict,
            Verdict::Benign,
            "{}",
            verdict("openat").why
        );
        assert_eq!(verdict("read").verdict, Verdict::Cause, "{}", verdict("read").why);
        assert_eq!((verdict("read").occurrences, verdict("read").burst), (30, 30));
        assert_eq!(verdict("write").verdict, Verdict::Cause, "never seen fault-free");
        assert!(verdict("write").why.contains("never seen in fault-free runs"));
        assert!(d.notes.is_empty(), "{:?}", d.notes);
    }

    #[test]
    fn without_a_profile_routine_errnos_rank_last_and_kernel_internal_ones_are_explained() {
        let t = timeline(vec![
            at(1.0, Some(0), 10, failure("read", "EAGAIN", None)),
            at(1.5, Some(0), 10, failure("read", "ERESTARTSYS", None)),
            at(2.0, Some(0), 10, failure("fsync", "EIO", None)),
            at(5.0, Some(0), 10, exited(1)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        let verdicts: Vec<(&str, &Verdict)> = d
            .candidates
            .iter()
            .map(|c| match &c.guess {
                FaultGuess::Syscall { errno, .. } => (errno.as_str(), &c.verdict),
                _ => ("?", &c.verdict),
            })
            .collect();
        assert!(verdicts.contains(&("EAGAIN", &Verdict::Cause)), "{verdicts:?}");
        assert!(
            matches!(causes(&d)[..], [FaultGuess::Syscall { errno: a, .. }, FaultGuess::Syscall { errno: b, .. }] if a == "EIO" && b == "EAGAIN"),
            "{verdicts:?}"
        );
        assert!(
            verdicts.contains(&("ERESTARTSYS", &Verdict::Explained)),
            "{verdicts:?}"
        );
        assert!(verdicts.contains(&("EIO", &Verdict::Cause)), "{verdicts:?}");
        assert!(d.notes.iter().any(|n| n.contains("no --profile")));
    }

    #[test]
    fn gaps_between_node_addresses_are_one_partition_unless_a_pause_explains_them() {
        let t = timeline(vec![
            // two silent connections between db1 and db2, overlapping: one partition
            at(5.0, Some(0), 10, gap("10.7.0.1:4000", "10.7.0.2:6379", 3000)),
            at(5.5, Some(1), 20, gap("10.7.0.2:6379", "10.7.0.1:4000", 3000)),
            at(9.0, Some(0), 10, exited(1)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        let parts: Vec<&Candidate> = d
            .candidates
            .iter()
            .filter(|c| matches!(c.guess, FaultGuess::Partition { .. }))
            .collect();
        assert_eq!(parts.len(), 1, "{:?}", d.candidates);
        let p = parts[0];
        assert_eq!((p.node, p.occurrences, &p.verdict), (Some(0), 2, &Verdict::Cause));
        assert_eq!(
            p.guess,
            FaultGuess::Partition {
                peer: 1,
                duration_ms: 2500
            },
            "the time both ends were silent"
        );
        assert_eq!(p.at_ns, 5 * SEC + SEC / 2, "a gap's time stamp is when it began");
        assert!(p.why.contains("between db1 and db2"), "{}", p.why);

        let t = timeline(vec![
            at(4.5, Some(1), 20, paused(3000)),
            at(5.0, Some(0), 10, gap("10.7.0.1:4000", "10.7.0.2:6379", 3000)),
            at(9.0, Some(0), 10, exited(1)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        assert_eq!(
            causes(&d),
            [&FaultGuess::Pause {
                duration_ms: 3000,
                cause: "stopped".into()
            }]
        );
        let part = d
            .candidates
            .iter()
            .find(|c| matches!(c.guess, FaultGuess::Partition { .. }))
            .unwrap();
        assert_eq!(part.verdict, Verdict::Explained);
        assert!(part.why.contains("explained by the pause of db2"), "{}", part.why);
    }

    #[test]
    fn network_errors_after_a_crash_are_explained_and_faults_after_the_last_symptom_late() {
        let t = timeline(vec![
            at(1.0, Some(1), 20, killed(libc::SIGKILL, Some(999))),
            at(2.0, Some(0), 10, failure("connect", "ECONNREFUSED", None)),
            at(3.0, Some(0), 10, exited(2)),
            at(4.0, Some(0), 11, failure("fsync", "EIO", None)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        let by = |errno: &str| {
            d.candidates
                .iter()
                .find(|c| matches!(&c.guess, FaultGuess::Syscall { errno: e, .. } if e == errno))
                .unwrap()
        };
        assert_eq!(by("ECONNREFUSED").verdict, Verdict::Explained);
        assert!(
            by("ECONNREFUSED").why.contains("the crash of db2"),
            "{}",
            by("ECONNREFUSED").why
        );
        assert_eq!(by("EIO").verdict, Verdict::Late);
        assert_eq!(
            causes(&d),
            [&FaultGuess::Crash {
                signal: "SIGKILL".into(),
                sender: "killer (pid 999)".into()
            }]
        );
    }

    #[test]
    fn unmapped_processes_are_ignored_and_counted_with_a_scenario() {
        let t = timeline(vec![
            at(1.0, None, 99, killed(libc::SIGKILL, Some(1))),
            at(2.0, Some(0), 10, exited(1)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        assert!(d.candidates.is_empty());
        assert_eq!(d.unmapped_events, 1);
        let d = diagnose(&t, None, None);
        assert_eq!(d.candidates.len(), 1, "without a scenario every process counts");
        assert_eq!(d.candidates[0].who, "kv/99");
    }

    #[test]
    fn context_is_the_functions_since_the_previous_fault_nearest_first() {
        let t = timeline(vec![
            at(0.5, Some(1), 20, function("boot")),
            at(1.0, Some(1), 20, killed(libc::SIGKILL, Some(999))),
            at(1.5, Some(1), 21, function("recover")),
            at(1.6, Some(0), 10, function("elsewhere")),
            at(1.7, Some(1), 21, function("load")),
            at(1.8, Some(1), 21, function("recover")),
            at(1.9, Some(1), 22, function("supervise")),
            at(2.0, Some(1), 21, killed(libc::SIGKILL, Some(999))),
            at(3.0, Some(0), 10, exited(1)),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        let crashes: Vec<&Vec<String>> = d.causes().map(|c| &c.preceding_functions).collect();
        assert_eq!(crashes[0], &vec!["/opt/kv:boot".to_string()]);
        assert_eq!(
            crashes[1],
            &vec!["/opt/kv:recover".to_string(), "/opt/kv:load".into()],
            "since the previous fault on db2, each once, only what the killed process ran"
        );
    }

    #[test]
    fn lost_events_are_a_note_and_render_lists_every_part() {
        let mut t = timeline(vec![
            at(1.0, Some(0), 10, killed(libc::SIGKILL, Some(999))),
            at(2.0, Some(1), 20, exited(1)),
        ]);
        t.dumps.push(DumpInfo {
            path: "/d/x.tdump".into(),
            host: "h".into(),
            events: 2,
            mapped_processes: 2,
            processes: 2,
            nodes: Vec::new(),
            interfaces: Vec::new(),
            taken_ns: 3 * SEC,
            lost_events: 7,
        });
        let d = diagnose(&t, Some(&scenario()), None);
        assert!(
            d.notes.iter().any(|n| n.contains("7 events were lost")),
            "{:?}",
            d.notes
        );
        let text = render(&d, Some(&scenario()));
        for needle in [
            "symptoms (1):",
            "db2: exited with status 1",
            "fault candidates (1)",
            "db1: crash (SIGKILL)",
            "note: dump /d/x.tdump: 7 events",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
    }

    /// A busy timeline: two nodes and a process that is none, each with several pids;
    /// function hits, failures of many signatures (paths that normalize alike), kills, a
    /// pause, gaps and an exit, on a coarse clock so that many events share a time stamp.
    fn busy_timeline(seed: u64, events: usize) -> Timeline {
        let mut x = seed;
        let mut below = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut out = Vec::new();
        for _ in 0..events {
            let secs = below(300) as f64 / 10.0;
            let pid = 10 + below(6) as u32;
            let node = (pid < 15).then_some(pid as usize % 2);
            let what = match below(20) {
                0..=9 => {
                    function(["boot", "load", "recover", "flush", "sync", "elect", "step"][below(7) as usize])
                }
                10..=16 => {
                    let path = format!(
                        "/srv/{}-{}.log",
                        ["wal", "snap", "meta"][below(3) as usize],
                        below(4)
                    );
                    let syscall = ["openat", "read", "fsync"][below(3) as usize];
                    let errno = ["EIO", "ENOENT", "EAGAIN", "ECONNREFUSED"][below(4) as usize];
                    failure(syscall, errno, (below(3) > 0).then_some(path.as_str()))
                }
                17 => killed(
                    libc::SIGKILL,
                    Some(if below(2) == 0 { 99 } else { 10 + below(6) as u32 }),
                ),
                18 => paused(500 + below(3000)),
                _ => gap("10.7.0.1:4000", "10.7.0.2:6379", 1000 + below(4000)),
            };
            out.push(at(secs, node, pid, what));
        }
        out.push(at(25.0, Some(0), 10, exited(1)));
        timeline(out)
    }

    #[test]
    fn the_indexed_contexts_leave_the_diagnosis_as_the_walk_per_candidate_made_it() {
        let baseline = BaselineRates {
            scenario: "kv".into(),
            failures: [(
                (
                    "db1".into(),
                    "read".into(),
                    "EIO".into(),
                    Some("*/wal-*.log".into()),
                ),
                50.0,
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let s = scenario();
        for seed in 1..=12 {
            let t = busy_timeline(0x9e37_79b9 * seed, 200 + 60 * seed as usize);
            for (scenario, baseline) in [(Some(&s), Some(&baseline)), (Some(&s), None), (None, None)] {
                let fast = diagnose(&t, scenario, baseline);
                let walked = diagnose_with(&t, scenario, baseline, contexts::walk_per_query);
                assert!(
                    fast.candidates.iter().any(|c| !c.preceding_functions.is_empty()),
                    "the timeline gives candidates a context"
                );
                assert_eq!(
                    serde_json::to_string(&fast).unwrap(),
                    serde_json::to_string(&walked).unwrap(),
                    "seed {seed}, scenario {}",
                    scenario.is_some()
                );
                assert_eq!(render(&fast, scenario), render(&walked, scenario));
            }
        }
    }
}
