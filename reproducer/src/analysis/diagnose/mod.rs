//! Diagnosis without runs: from the production timeline to ranked fault candidates.
//! Failed syscalls are grouped by signature and dropped as benign when the fault-free
//! profile shows them at a comparable rate; deaths by the process's own fatal signal and
//! non-zero exits are symptoms, unless fault-free runs show the same (node, program, status,
//! phase); SIGKILLs from outside, stops and partitions that no pause
//! or crash explains are faults. A network gap is a partition only when it is abnormal:
//! longer than the profile saw on the same node pair and port, and corroborated (traffic
//! resumed after it, the connection was torn down, or several connections of the pair went
//! silent together). Failures after the first symptom are its consequences, and failures
//! that are part of normal operation (EAGAIN, EINPROGRESS, ...) are ranked last. Nothing is
//! dropped: every candidate, set aside or not, gets a score from its evidence (`score.rs`),
//! and the ranking is the causes, then what was set aside, each by score.
//!
//! This file holds the types, the `Builder` the rules add to, and the passes in the order
//! `diagnose_with` runs them; each rule family is a file of its own: `process.rs`,
//! `crash.rs`, `network.rs`, `syscalls.rs`, `storage.rs`, `explain.rs`, `preceding.rs`,
//! `score.rs`, and `render.rs` for the text.
use std::collections::HashMap;

use serde::Serialize;

use super::contexts::{self, ContextQuery};
use super::nodemap::PeerMap;
use super::profile::normalize_path;
use super::timeline::{TimedEvent, Timeline};
use crate::model::scenario::Scenario;

mod crash;
mod explain;
mod flows;
mod network;
mod pair;
mod preceding;
mod process;
mod render;
mod score;
mod silence;
mod storage;
mod syscalls;
#[cfg(test)]
mod tests;

pub use network::peer_map;
pub use render::render;
pub use score::{number, Evidence, Factor, Score};
pub use silence::SilenceEvidence;

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
        /// only the candidate's node's packets to `peer` were lost, the other way kept
        /// arriving (datagram flows, whose two directions are seen apart): a partition of
        /// that direction
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        one_way: bool,
    },
}

impl FaultGuess {
    /// A failed call whose errno no process ever sees (ERESTARTSYS and the like: the kernel
    /// restarts the call or turns it into EINTR). Explained by a signal; never injected.
    pub fn kernel_internal(&self) -> bool {
        matches!(self, FaultGuess::Syscall { errno, .. } if syscalls::kernel_internal(errno))
    }
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
    /// what the rules saw of it: the inputs of its score
    pub evidence: Evidence,
    /// its score from that evidence, with the reasons (score.rs); the ranking's order
    pub score: Score,
    /// silences (partitions and idle connections): the per-connection evidence
    #[serde(skip_serializing_if = "Option::is_none")]
    pub silence: Option<SilenceEvidence>,
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
    pub failures: HashMap<FailureSig, f64>,
    /// (node, syscall, errno, normalized path) -> the most occurrences in one fault-free run
    pub failures_most_in_a_run: HashMap<FailureSig, u64>,
    /// (node, peer, service port) -> the longest silence of fault-free runs, ms
    pub gaps: HashMap<(String, String, u16), u64>,
    /// (node, syscall) -> calls per second, failed or not
    pub calls: HashMap<(String, String), f64>,
    /// the longest fault-free run, s
    pub longest_run_s: f64,
    /// (node, peer, service port) -> `[busy_ms, silence_ms]`: how long such connections
    /// fell silent after how long a busy stretch (profile's `after_busy`; empty: unknown)
    pub gaps_after_busy: HashMap<(String, String, u16), Vec<[u64; 2]>>,
    /// (node, program, status, phase) of the deaths fault-free runs show: norms, not symptoms
    pub exits: std::collections::HashSet<(String, String, String, String)>,
    /// node -> the longest start-up of fault-free runs (its first process's start until
    /// every node was ready), ms
    pub startup_ms: HashMap<String, u64>,
}

/// A failure's signature as the profile keys it: node, syscall, errno, normalized path.
pub type FailureSig = (String, String, String, Option<String>);

impl BaselineRates {
    /// The fault-free rate (calls/s) and the most in one run of failure signature `key`.
    /// A path anchored on one side and not on the other (the run directory known in the
    /// profile's runs but not in production's dump, or the reverse) is compared by its
    /// unanchored form, so that the same file has the same signature on both sides.
    pub fn failure(&self, key: &FailureSig) -> (Option<f64>, Option<u64>) {
        let exact = |k: &FailureSig| {
            let found = (
                self.failures.get(k).copied(),
                self.failures_most_in_a_run.get(k).copied(),
            );
            (found != (None, None)).then_some(found)
        };
        let unanchored = || {
            let tail = key.3.as_deref().and_then(super::profile::unanchored)?;
            exact(&(key.0.clone(), key.1.clone(), key.2.clone(), Some(tail)))
        };
        exact(key).or_else(unanchored).unwrap_or_default()
    }

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
        let mut failures_most_in_a_run: HashMap<_, u64> = HashMap::new();
        let mut failures: HashMap<_, f64> = HashMap::new();
        for f in &p.failures {
            let most = f.per_run.iter().copied().max().unwrap_or(0);
            let key = (f.node.clone(), f.syscall.clone(), f.errno.clone(), f.path.clone());
            failures_most_in_a_run.insert(key.clone(), most);
            failures.insert(key, f.per_second);
        }
        // a production path tracerd could only give relative (or a dump whose run directory
        // is not known) has the unanchored signature: it finds the anchored one's numbers
        // under that too, summed over the anchored signatures that share it
        for f in &p.failures {
            let Some(tail) = f.path.as_deref().and_then(super::profile::unanchored) else {
                continue;
            };
            let key = (f.node.clone(), f.syscall.clone(), f.errno.clone(), Some(tail));
            if p.failures
                .iter()
                .any(|g| (&g.node, &g.syscall, &g.errno, &g.path) == (&key.0, &key.1, &key.2, &key.3))
            {
                continue;
            }
            *failures.entry(key.clone()).or_default() += f.per_second;
            *failures_most_in_a_run.entry(key).or_default() += f.per_run.iter().copied().max().unwrap_or(0);
        }
        let gaps_after_busy = p
            .gaps
            .iter()
            .filter(|g| !g.after_busy.is_empty())
            .map(|g| ((g.node.clone(), g.peer.clone(), g.port), g.after_busy.clone()))
            .collect();
        let gaps = p
            .gaps
            .into_iter()
            .map(|g| ((g.node, g.peer, g.port), g.longest_ms))
            .collect();
        let calls = p
            .syscalls
            .iter()
            .map(|s| ((s.node.clone(), s.syscall.clone()), s.per_second))
            .collect();
        let longest_run_s = p.run_seconds.iter().copied().fold(0.0, f64::max);
        let exits = p
            .exits
            .into_iter()
            .map(|e| (e.node, e.program, e.status, e.phase))
            .collect();
        BaselineRates {
            scenario: p.scenario,
            failures,
            failures_most_in_a_run,
            gaps,
            calls,
            longest_run_s,
            gaps_after_busy,
            exits,
            startup_ms: p.startup_ms.into_iter().collect(),
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
    /// deaths taken as norms (fault-free runs show them): (who, program, status, phase) -> how many
    routine_exits: std::collections::BTreeMap<(String, String, String, String), u32>,
    /// what the crashes' handling did (crash.rs): neither symptoms nor causes
    crash: crash::Crashes,
}

impl Builder<'_> {
    /// The run directory of event `t`'s dump, for its path signatures.
    fn workdir_of(&self, t: &TimedEvent) -> Option<&str> {
        self.timeline.dumps.get(t.dump).and_then(|d| d.workdir.as_deref())
    }

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
            evidence: Evidence::default(),
            score: Score::default(),
            silence: None,
        }
    }
}

/// The ranking: the causes, then what the rules set aside (benign, explained, late), each
/// by score, highest first (score.rs); production order between equal scores.
fn rank(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    let tier = |c: &Candidate| c.verdict != Verdict::Cause;
    tier(a)
        .cmp(&tier(b))
        .then(b.score.value.total_cmp(&a.score.value))
        .then(a.at_ns.cmp(&b.at_ns))
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
        routine_exits: Default::default(),
        crash: Default::default(),
        peers: scenario
            .map(|s| network::peer_map(timeline, s))
            .unwrap_or_default(),
    };
    // crash.rs: what a crashing process forked while dying is part of its crash
    b.crashes();
    // process.rs: pauses and kills from outside are faults, own deaths and exits symptoms
    // (those fault-free runs show too are norms)
    b.process_states();
    b.note_routine_exits();
    b.note_crash_parts();
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
    // a candidate is its node's, whichever dump showed it
    b.place_on_node_hosts();
    // score.rs: every candidate's score from its evidence, with the reasons
    b.score();
    b.candidates.sort_by(rank);
    b.finish()
}

impl Builder<'_> {
    /// Labels every candidate with the host its node ran on: a silence is seen from either
    /// end, in either host's dump (a standby's dump shows its primary's silence), and a
    /// candidate named after one node takes the host of the dump that holds that node's
    /// processes, not of the dump that showed it.
    fn place_on_node_hosts(&mut self) {
        let dumps = &self.timeline.dumps;
        for c in &mut self.candidates {
            let Some(node) = c.node else { continue };
            if dumps.get(c.dump).is_none_or(|d| d.nodes.contains(&node)) {
                continue;
            }
            if let Some((i, d)) = dumps.iter().enumerate().find(|(_, d)| d.nodes.contains(&node)) {
                (c.dump, c.host) = (i, d.host.clone());
            }
        }
    }

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
