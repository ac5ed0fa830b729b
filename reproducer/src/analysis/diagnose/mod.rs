//! Diagnosis without runs: from the production timeline to ranked fault candidates.
//! Failed syscalls are grouped by signature and dropped as benign when the fault-free
//! profile shows them at a comparable rate; deaths by the process's own fatal signal and
//! non-zero exits are symptoms; SIGKILLs from outside, stops and partitions that no pause
//! or crash explains are faults. A network gap is a partition only when it is abnormal:
//! longer than the profile saw on the same node pair and port, and corroborated (traffic
//! resumed after it, the connection was torn down, or several connections of the pair went
//! silent together). Failures after the first symptom are its consequences, and failures
//! that are part of normal operation (EAGAIN, EINPROGRESS, ...) are ranked last.
//!
//! This file holds the types, the `Builder` the rules add to, and the passes in the order
//! `diagnose_with` runs them; each rule family is a file of its own: `process.rs`,
//! `network.rs`, `syscalls.rs`, `storage.rs`, `explain.rs`, `preceding.rs`, and `render.rs`
//! for the text.
use std::collections::HashMap;

use serde::Serialize;

use super::contexts::{self, ContextQuery};
use super::nodemap::PeerMap;
use super::profile::normalize_path;
use super::timeline::{TimedEvent, Timeline};
use crate::model::scenario::Scenario;

mod explain;
mod network;
mod preceding;
mod process;
mod render;
mod storage;
mod syscalls;
#[cfg(test)]
mod tests;

pub use network::peer_map;
pub use render::render;

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
    /// the production burst: most occurrences within BURST_WINDOW_NS (syscalls.rs)
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

/// Who an event is: its node's name, or "comm/pid" when no node names it.
fn who(t: &TimedEvent, scenario: Option<&Scenario>) -> String {
    match (t.node, scenario) {
        (Some(n), Some(s)) => s.nodes[n].name.clone(),
        _ => format!("{}/{}", t.event.comm, t.event.pid),
    }
}

/// A node's name in the scenario, or its index without one.
fn node_name(scenario: Option<&Scenario>, node: usize) -> String {
    scenario
        .map(|s| s.nodes[node].name.clone())
        .unwrap_or_else(|| node.to_string())
}

/// The diagnosis under construction: each rule family adds its candidates, symptoms and
/// notes in an `impl Builder<'_>` of its own file.
struct Builder<'a> {
    timeline: &'a Timeline,
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
    /// A cause of one occurrence, of the process of event `t`, with no context yet.
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

pub fn diagnose(
    timeline: &Timeline,
    scenario: Option<&Scenario>,
    baseline: Option<&BaselineRates>,
) -> Diagnosis {
    diagnose_with(timeline, scenario, baseline, contexts::preceding_functions)
}

/// The passes, in order: each sees what the ones before it found.
fn diagnose_with(
    timeline: &Timeline,
    scenario: Option<&Scenario>,
    baseline: Option<&BaselineRates>,
    preceding: Preceding,
) -> Diagnosis {
    let mut b = Builder {
        timeline,
        scenario,
        baseline,
        candidates: Vec::new(),
        symptoms: Vec::new(),
        notes: Vec::new(),
        nodes_of_pid: HashMap::new(),
        peers: scenario
            .map(|s| network::peer_map(timeline, s))
            .unwrap_or_default(),
    };
    // process.rs: pauses and kills from outside are faults, own deaths and exits symptoms
    b.process_states();
    // network.rs: silences between nodes, set aside as idle or merged into partitions
    b.gaps();
    // explain.rs: a partition during a pause or right after a crash of one end is its doing
    b.explain_gaps();
    // syscalls.rs: failures grouped by signature, judged against the profile's rates
    b.syscall_failures();
    // storage.rs: a short write, then failures of the same call on the file
    b.short_then_persistent();
    // explain.rs: network errors during or right after a crash, pause or partition
    b.explain_network_failures();
    // explain.rs: what comes after the symptoms is their consequence
    b.mark_late();
    // preceding.rs: the functions each candidate's node ran before it
    b.contexts(preceding);
    b.candidates.sort_by_key(rank);
    b.finish()
}

impl Builder<'_> {
    /// The diagnosis of the candidates and symptoms found, with notes on what it could not see.
    fn finish(mut self) -> Diagnosis {
        let (timeline, scenario) = (self.timeline, self.scenario);
        let unmapped_events = if scenario.is_some() {
            timeline.events.iter().filter(|e| e.node.is_none()).count()
        } else {
            0
        };
        if self.baseline.is_none() {
            self.notes
                .push("no --profile: failed syscalls could not be compared with fault-free runs".into());
        }
        for d in &timeline.dumps {
            if d.lost_events > 0 {
                self.notes.push(format!(
                    "dump {}: {} events were lost before the dump (the window is incomplete)",
                    d.path.display(),
                    d.lost_events
                ));
            }
        }
        let dumps = timeline
            .dumps
            .iter()
            .map(|d| DumpSummary {
                path: d.path.clone(),
                host: d.host.clone(),
                events: d.events,
                nodes: d.nodes.iter().map(|&n| node_name(scenario, n)).collect(),
            })
            .collect();
        Diagnosis {
            candidates: self.candidates,
            symptoms: self.symptoms,
            start_ns: timeline.start_ns(),
            end_ns: timeline.end_ns(),
            unmapped_events,
            notes: self.notes,
            dumps,
        }
    }
}
