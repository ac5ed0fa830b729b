//! How the faults led to the failure: a causal chain per fault of the accepted schedule,
//! built by comparing runs (CSNAKE's idea: what follows a fault in the runs where the bug
//! happened, and not in the runs without it). Each kept run's trace becomes a list of event
//! signatures — node, kind, syscall, errno, normalized path or peer node, function, exit
//! code or signal; never pids, fds or raw paths, so that runs and production compare (a path
//! is compared with the profile's as the diagnosis compares it: anchored in the run
//! directory on one side and not on the other, by its unanchored form). A signature is a
//! link when it follows the fault in at least half the reproduced runs (and did not happen
//! before it there) and is at most a quarter as frequent in the fault's controls — the kept
//! runs without the bug that did not have that fault (the fault-free check, minimization's
//! runs that dropped it; a run that had it but not another fault the bug needs is no
//! control of it) and the profile's fault-free runs — and the profile does not show it at a
//! comparable rate (a quarter of its rate after the fault or more). Links are ordered by
//! their median time after the fault; production's dump is searched for the same signatures
//! after its own fault event, which shows whether the reproduction is the production incident.
//!
//! Reading a search's run directories is `runs.rs`; the report's section `render.rs`.
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;

use serde::Serialize;
use tracedump::event::{Event, State, What};
use tracedump::syscalls::signal_name;

use super::profile::normalize_path;
use crate::model::scenario::Scenario;

mod render;
pub mod runs;
#[cfg(test)]
mod tests;

pub use render::{section, TITLE};
pub use runs::{fault_free_of, load_runs, of_search, production_events, write_timelines};

/// Most links shown after the fault.
pub const MAX_LINKS: usize = 12;

/// What an event is, apart from when, where (node) and which process.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Sign {
    Failure {
        syscall: String,
        errno: String,
        /// normalized path (see `normalize_path`)
        path: Option<String>,
        /// the node the call's peer address is (or `host:port` when no node)
        peer: Option<String>,
    },
    Short {
        syscall: String,
        path: Option<String>,
    },
    Function {
        symbol: String,
    },
    Gap {
        peer: Option<String>,
        port: u16,
    },
    Exited {
        code: i32,
    },
    Killed {
        signal: String,
    },
    Paused {
        cause: String,
    },
}

/// An event's signature: its node and what it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Signature {
    pub node: usize,
    #[serde(flatten)]
    pub sign: Sign,
}

impl std::fmt::Display for Sign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sign::Failure {
                syscall,
                errno,
                path,
                peer,
            } => {
                write!(f, "{syscall} failed with {errno}")?;
                match (path, peer) {
                    (Some(p), _) => write!(f, " on {p}"),
                    (None, Some(p)) => write!(f, " (peer {p})"),
                    _ => Ok(()),
                }
            }
            Sign::Short { syscall, path } => {
                write!(f, "short {syscall}")?;
                path.iter().try_for_each(|p| write!(f, " on {p}"))
            }
            Sign::Function { symbol } => write!(f, "entered {symbol}"),
            Sign::Gap { peer, port } => {
                let peer = peer.as_deref().unwrap_or("?");
                write!(f, "connection to {peer} (port {port}) fell silent")
            }
            Sign::Exited { code } => write!(f, "exited with code {code}"),
            Sign::Killed { signal } => write!(f, "killed by {signal}"),
            Sign::Paused { cause } => write!(f, "paused ({cause})"),
        }
    }
}

/// How to name the node of a peer address.
pub type PeerOf<'a> = &'a dyn Fn(SocketAddr) -> Option<usize>;

/// The signature of `e` on `node`; `peer_of` names a peer address's node.
pub fn signature(scenario: &Scenario, node: usize, e: &Event, peer_of: PeerOf) -> Signature {
    let peer_name = |a: SocketAddr| match peer_of(a) {
        Some(n) => scenario.nodes[n].name.clone(),
        None => format!("{a}"),
    };
    let sign = match &e.what {
        What::SyscallFailure(s) => Sign::Failure {
            syscall: s.syscall.clone(),
            errno: s.errno.clone().unwrap_or_else(|| s.ret.to_string()),
            path: s.path.as_deref().map(|p| normalize_path(p, None)),
            peer: s.peer.map(peer_name),
        },
        What::ShortIo(s) => Sign::Short {
            syscall: s.syscall.clone(),
            path: s.path.as_deref().map(|p| normalize_path(p, None)),
        },
        What::Function(h) => Sign::Function {
            symbol: h.function.clone().unwrap_or_else(|| "?".into()),
        },
        What::NetworkGap(g) => Sign::Gap {
            peer: g
                .peer
                .map(|p| peer_of(p).map_or_else(|| p.ip().to_string(), |n| scenario.nodes[n].name.clone())),
            port: match (g.local, g.peer) {
                (Some(a), Some(b)) => super::profile::service_port(a, b),
                _ => 0,
            },
        },
        What::ProcessState(p) => match p.state {
            State::Exited { code } => Sign::Exited { code },
            State::Killed { .. } => Sign::Killed {
                signal: p.signal.map(signal_name).unwrap_or_else(|| "a signal".into()),
            },
            State::Paused { cause, .. } => Sign::Paused {
                cause: cause.name().into(),
            },
        },
    };
    Signature { node, sign }
}

/// One event of a run, reduced to what runs compare.
#[derive(Clone, Debug)]
pub struct RunEvent {
    pub at_ns: u64,
    pub sig: Signature,
    /// its index in the run's merged events (for the flow arrows of its timeline)
    pub index: usize,
}

/// One kept run: its events (in time order) and where the accepted schedule's faults are.
#[derive(Clone, Debug)]
pub struct TracedRun {
    /// its directory, relative to the search's output
    pub label: String,
    pub bug: bool,
    pub events: Vec<RunEvent>,
    /// per fault of the accepted schedule: the position in `events` of its own event (a run
    /// of the accepted schedule that injected it)
    pub anchors: Vec<Option<usize>>,
    /// per fault of the accepted schedule: the run is its control (no bug, and its schedule
    /// did not have the fault)
    pub controls: Vec<bool>,
    /// the Perfetto timeline the search wrote of it, if any
    pub timeline: Option<std::path::PathBuf>,
}

impl TracedRun {
    fn anchor(&self, fault: usize) -> Option<usize> {
        self.anchors.get(fault).copied().flatten()
    }
}

/// The fault-free profile runs: how many, in how many of them a signature happened, and
/// its rate there (per second; 0 when the profile has none).
pub struct FaultFree<'a> {
    pub runs: u32,
    pub seen_in: Box<dyn Fn(&Signature) -> u32 + 'a>,
    pub per_second: Box<dyn Fn(&Signature) -> f64 + 'a>,
}

/// One link of the chain.
#[derive(Clone, Debug, Serialize)]
pub struct Link {
    pub sig: Signature,
    /// the first injected fault itself
    pub fault: bool,
    /// median over the reproduced runs of the time from the fault to its first occurrence
    pub after_ns: u64,
    /// reproduced runs it followed the fault in
    pub in_reproduced: u32,
    /// kept runs without the bug it happened in
    pub in_other: u32,
    /// fault-free profile runs it happened in
    pub in_fault_free: u32,
    /// the time from production's fault to its first occurrence there; None: not seen
    pub production_after_ns: Option<u64>,
}

/// The chain from one fault of the accepted schedule to the failure.
#[derive(Clone, Debug, Serialize)]
pub struct Chain {
    /// the fault's place in the accepted schedule (0: its first)
    pub fault: usize,
    /// the fault first, then the links in time order
    pub links: Vec<Link>,
    pub reproduced_runs: u32,
    pub other_runs: u32,
    pub fault_free_runs: u32,
    /// production's dump shows the fault's event
    pub production_fault: bool,
    /// signatures that followed the fault in most reproduced runs but were left out: as
    /// frequent where the bug did not happen
    pub left_out: Vec<Signature>,
    /// ... or as frequent in the profile's fault-free runs
    pub routine: Vec<Signature>,
    /// per reproduced run with a timeline: its events of the chain, in time order
    #[serde(skip)]
    pub flows: Vec<(std::path::PathBuf, Vec<usize>)>,
}

/// A signature's first time at or after `from_ns` in `events` (sorted by time).
fn first_after<'e>(events: &'e [RunEvent], sig: &Signature, from_ns: u64) -> Option<&'e RunEvent> {
    events.iter().find(|e| e.at_ns >= from_ns && e.sig == *sig)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Per signature: the reproduced runs it followed fault `fault` in (run, event), never
/// before it.
fn after_fault(runs: &[&TracedRun], fault: usize) -> BTreeMap<Signature, Vec<(usize, usize)>> {
    let mut out: BTreeMap<Signature, Vec<(usize, usize)>> = BTreeMap::new();
    for (r, run) in runs.iter().enumerate() {
        let Some(a) = run.anchor(fault) else { continue };
        let before: HashSet<&Signature> = run.events[..a].iter().map(|e| &e.sig).collect();
        let mut seen = HashSet::new();
        for (i, e) in run.events.iter().enumerate().skip(a + 1) {
            if !before.contains(&e.sig) && seen.insert(&e.sig) {
                out.entry(e.sig.clone()).or_default().push((r, i));
            }
        }
    }
    out
}

/// How often `sig` followed fault `fault` in the reproduced runs, per second: its
/// occurrences after the fault over the time from the fault to the run's last event (at
/// least a second), averaged over the runs.
fn rate_after(runs: &[&TracedRun], fault: usize, sig: &Signature) -> f64 {
    let rates: Vec<f64> = runs
        .iter()
        .filter_map(|r| {
            let a = r.anchor(fault)?;
            let from = r.events[a].at_ns;
            let to = r.events.last().map_or(from, |e| e.at_ns);
            let n = r.events[a + 1..].iter().filter(|e| e.sig == *sig).count();
            Some(n as f64 / ((to - from) as f64 / 1e9).max(1.0))
        })
        .collect();
    rates.iter().sum::<f64>() / rates.len().max(1) as f64
}

/// The chain of the accepted schedule's fault `fault`, from the kept runs (`runs`), the
/// profile's fault-free runs and production's events (time order); None when no reproduced
/// run shows the fault's event.
pub fn build(
    runs: &[TracedRun],
    fault: usize,
    fault_free: &FaultFree,
    production: &[RunEvent],
) -> Option<Chain> {
    let reproduced: Vec<&TracedRun> = runs
        .iter()
        .filter(|r| r.bug && r.anchor(fault).is_some())
        .collect();
    let others: Vec<&TracedRun> = runs
        .iter()
        .filter(|r| r.controls.get(fault) == Some(&true))
        .collect();
    let (rep, oth) = (reproduced.len() as u32, others.len() as u32);
    // the fault's signature: the most common anchor event of the reproduced runs
    let mut anchors: BTreeMap<&Signature, u32> = BTreeMap::new();
    for r in &reproduced {
        *anchors.entry(&r.events[r.anchor(fault)?].sig).or_default() += 1;
    }
    let fault_sig = anchors
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(s, _)| (*s).clone())?;
    let prod_anchor = production.iter().find(|e| e.sig == fault_sig).map(|e| e.at_ns);
    let prod_after = |sig: &Signature| {
        let from = prod_anchor?;
        first_after(production, sig, from).map(|e| e.at_ns - from)
    };
    let mut links = vec![Link {
        sig: fault_sig.clone(),
        fault: true,
        after_ns: 0,
        in_reproduced: rep,
        in_other: others
            .iter()
            .filter(|r| r.events.iter().any(|e| e.sig == fault_sig))
            .count() as u32,
        in_fault_free: (fault_free.seen_in)(&fault_sig),
        production_after_ns: prod_anchor.map(|_| 0),
    }];
    let (mut left_out, mut routine) = (Vec::new(), Vec::new());
    let mut occurrences: Vec<(Link, Vec<(usize, usize)>)> = Vec::new();
    for (sig, seen) in after_fault(&reproduced, fault) {
        if sig == fault_sig || (seen.len() as u32) * 2 < rep {
            continue;
        }
        let in_other = others
            .iter()
            .filter(|r| r.events.iter().any(|e| e.sig == sig))
            .count() as u32;
        let in_fault_free = (fault_free.seen_in)(&sig);
        // at most a quarter as frequent where the bug did not happen
        let without = (oth + fault_free.runs).max(1) as u64;
        if (in_other + in_fault_free) as u64 * rep as u64 * 4 > seen.len() as u64 * without {
            left_out.push(sig);
            continue;
        }
        // a routine event of the node: the profile's rate is a quarter of its rate here or more
        let fault_free_rate = (fault_free.per_second)(&sig);
        if fault_free_rate > 0.0 && fault_free_rate * 4.0 >= rate_after(&reproduced, fault, &sig) {
            routine.push(sig);
            continue;
        }
        let times = seen
            .iter()
            .map(|&(r, i)| {
                let run = reproduced[r];
                run.events[i].at_ns - run.events[run.anchor(fault).unwrap_or(0)].at_ns
            })
            .collect();
        let link = Link {
            production_after_ns: prod_after(&sig),
            after_ns: median(times),
            in_reproduced: seen.len() as u32,
            in_other,
            in_fault_free,
            fault: false,
            sig,
        };
        occurrences.push((link, seen));
    }
    occurrences.sort_by_key(|(l, _)| (l.after_ns, l.sig.clone()));
    occurrences.truncate(MAX_LINKS);
    let flows = flows(&reproduced, fault, &occurrences);
    links.extend(occurrences.into_iter().map(|(l, _)| l));
    Some(Chain {
        fault,
        links,
        reproduced_runs: rep,
        other_runs: oth,
        fault_free_runs: fault_free.runs,
        production_fault: prod_anchor.is_some(),
        left_out,
        routine,
        flows,
    })
}

/// Per reproduced run with a timeline: the merged-event indexes of its fault and links, in
/// time order.
fn flows(
    reproduced: &[&TracedRun],
    fault: usize,
    occurrences: &[(Link, Vec<(usize, usize)>)],
) -> Vec<(std::path::PathBuf, Vec<usize>)> {
    let mut out = Vec::new();
    for (r, run) in reproduced.iter().enumerate() {
        let (Some(timeline), Some(a)) = (&run.timeline, run.anchor(fault)) else {
            continue;
        };
        let mut at: Vec<usize> = vec![a];
        at.extend(
            occurrences
                .iter()
                .flat_map(|(_, seen)| seen.iter().filter(|(rr, _)| *rr == r).map(|(_, i)| *i)),
        );
        at.sort_unstable();
        out.push((
            timeline.clone(),
            at.iter().map(|&i| run.events[i].index).collect(),
        ));
    }
    out
}
