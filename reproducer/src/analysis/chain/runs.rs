//! The inputs of the chain: the runs a search kept (`OUT/attempts/NNN/` with their
//! confirmation runs, and the replay's `OUT/replay/run-NN/`), each read from its `run.json`
//! and its trace; production's events; the profile's fault-free counts. A run's events are
//! mapped to nodes like the search's feedback does (launched pids, `match`), peers by the
//! scenario's addresses (the test bed's).
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;
use tracedump::event::{State, What};
use tracedump::merge::Merged;

use super::{signature, FaultFree, RunEvent, Sign, Signature, TracedRun};
use crate::analysis::nodemap::{NodeMap, PeerMap};
use crate::analysis::profile::Profile;
use crate::analysis::timeline::Timeline;
use crate::model::scenario::Scenario;
use crate::model::schedule::{Action, Fault, Schedule};

/// The file of a run's Perfetto timeline, in its trace directory.
const TIMELINE_FILE: &str = "trace.perfetto";

/// What the chain needs of a run's `run.json`.
#[derive(Deserialize)]
struct RunFile {
    bug: bool,
    #[serde(default)]
    fired: Vec<FiredFile>,
    #[serde(default)]
    launched: Vec<(String, u32)>,
    #[serde(default)]
    not_started: Option<String>,
}

#[derive(Deserialize)]
struct FiredFile {
    fault: usize,
    node: String,
    pid: u32,
    tid: u32,
}

/// Whether `schedule` has a fault that is `f` (node, kind and what it does: the syscall, the
/// signal, the peers; not where it goes, nor how long): minimization drops whole faults.
pub(super) fn has_fault(schedule: &Schedule, f: &Fault) -> bool {
    let what = |f: &Fault| match &f.action {
        Action::Syscall { syscall, errno, .. } => format!("{syscall} {errno:?}"),
        Action::Crash { signal } => format!("{signal:?}"),
        Action::Pause { .. } => String::new(),
        Action::Partition { peers, .. } => peers.join(","),
    };
    schedule
        .faults
        .iter()
        .any(|g| g.node == f.node && g.kind() == f.kind() && what(g) == what(f))
}

/// The kept runs under `out` (a search's output directory): the runs of `accepted` where
/// the bug happened, and every run where it did not (a control of each fault of `accepted`
/// its schedule did not have). Runs that did not start or whose trace cannot be read are
/// left out.
pub fn load_runs(out: &Path, accepted: &Schedule, scenario: &Scenario) -> Vec<TracedRun> {
    let text = accepted.to_toml();
    let mut tops: Vec<PathBuf> = std::fs::read_dir(out.join("attempts"))
        .map(|it| it.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    tops.retain(|p| {
        p.file_name()
            .is_some_and(|n| !n.to_string_lossy().starts_with("ahead-"))
    });
    tops.sort();
    tops.push(out.join("replay"));
    let mut runs = Vec::new();
    for top in tops {
        let own = std::fs::read_to_string(top.join("schedule.toml")).ok();
        let same = own.as_deref() == Some(text.as_str());
        let schedule = same.then_some(accepted);
        // an unreadable schedule counts as having every fault: no control of any
        let own = own.and_then(|t| Schedule::parse(&t, "schedule.toml").ok());
        let controls: Vec<bool> = accepted
            .faults
            .iter()
            .map(|f| own.as_ref().is_some_and(|s| !has_fault(s, f)))
            .collect();
        let mut dirs = Vec::new();
        run_dirs(&top, 0, &mut dirs);
        dirs.sort();
        for dir in dirs {
            let label = dir.strip_prefix(out).unwrap_or(&dir).display().to_string();
            match read_run(&dir, label, scenario, schedule) {
                Ok(Some(mut run)) if !run.bug || same => {
                    run.controls = match run.bug {
                        true => vec![false; controls.len()],
                        false => controls.clone(),
                    };
                    runs.push(run)
                }
                _ => {}
            }
        }
    }
    runs
}

/// Directories holding a `run.json` under `dir` (the run's own, and one level of
/// `confirm-NN`/`run-NN` below).
fn run_dirs(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if !path.is_dir() {
            continue;
        }
        if path.join("run.json").is_file() {
            out.push(path);
        } else if depth < 2 {
            run_dirs(&path, depth + 1, out);
        }
    }
}

/// A run's events; with its `schedule`, where its first fault is.
fn read_run(
    dir: &Path,
    label: String,
    scenario: &Scenario,
    schedule: Option<&Schedule>,
) -> Result<Option<TracedRun>> {
    let file = dir.join("run.json");
    let text = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let run: RunFile =
        serde_json::from_slice(&text).with_context(|| format!("parsing {}", file.display()))?;
    if run.not_started.is_some() {
        return Ok(None);
    }
    let trace_dir = dir.join("trace");
    let dumps = run_dumps(&trace_dir);
    if dumps.is_empty() {
        return Ok(None);
    }
    let merged = Merged::read(&dumps)?;
    let launched: Vec<(usize, u32)> = run
        .launched
        .iter()
        .filter_map(|(n, pid)| Some((scenario.node_index(n)?, *pid)))
        .collect();
    let maps: Vec<NodeMap> = merged
        .dumps
        .iter()
        .map(|d| NodeMap::build_for(scenario, &d.meta, &launched))
        .collect();
    let peer_of = |a: std::net::SocketAddr| scenario.node_at(a.ip());
    // each fault of the schedule that fired, with how it fired
    let faults = schedule.map_or(0, |s| s.faults.len());
    let fired: Vec<(&FiredFile, &Fault)> = run
        .fired
        .iter()
        .filter_map(|f| Some((f, schedule?.faults.get(f.fault.checked_sub(1)?)?)))
        .collect();
    let mut events = Vec::new();
    let mut anchors: Vec<Option<usize>> = vec![None; faults];
    for (index, m) in merged.events.iter().enumerate() {
        let Some(node) = maps[m.dump].node(m.event.pid) else {
            continue;
        };
        for (f, fault) in &fired {
            let slot = &mut anchors[f.fault - 1];
            if slot.is_none() && is_fault_event(f, fault, scenario, node, &m.event) {
                *slot = Some(events.len());
            }
        }
        events.push(RunEvent {
            at_ns: m.at_ns,
            sig: signature(scenario, node, &m.event, &peer_of),
            index,
        });
    }
    let timeline = trace_dir.join(TIMELINE_FILE);
    Ok(Some(TracedRun {
        label,
        bug: run.bug,
        events,
        anchors,
        controls: Vec::new(),
        timeline: timeline.is_file().then_some(timeline),
    }))
}

/// Whether `e` (of `node`) is the event of the injected `fault` as it fired (`f`): the
/// failed (or short) call of its syscall in its thread, the kill or pause of its process, a
/// silence of its node.
fn is_fault_event(
    f: &FiredFile,
    fault: &Fault,
    scenario: &Scenario,
    node: usize,
    e: &tracedump::event::Event,
) -> bool {
    if scenario.node_index(&f.node) != Some(node) {
        return false;
    }
    match (&fault.action, &e.what) {
        (Action::Syscall { syscall, errno, .. }, What::SyscallFailure(s)) => {
            e.tid == f.tid && s.syscall == *syscall && (errno.is_none() || s.errno == *errno)
        }
        (
            Action::Syscall {
                syscall,
                short: Some(_),
                ..
            },
            What::ShortIo(s),
        ) => e.tid == f.tid && s.syscall == *syscall,
        (Action::Crash { .. }, What::ProcessState(p)) => {
            e.pid == f.pid && matches!(p.state, State::Killed { .. })
        }
        (Action::Pause { .. }, What::ProcessState(p)) => {
            e.pid == f.pid && matches!(p.state, State::Paused { .. })
        }
        (Action::Partition { .. }, What::NetworkGap(_)) => true,
        _ => false,
    }
}

/// Production's events on scenario nodes, reduced to signatures, in time order; `peers`
/// names production's peer addresses (the diagnosis's peer map).
pub fn production_events(timeline: &Timeline, scenario: &Scenario, peers: &PeerMap) -> Vec<RunEvent> {
    let peer_of = |a: std::net::SocketAddr| peers.node(scenario, a);
    timeline
        .events
        .iter()
        .enumerate()
        .filter_map(|(index, e)| {
            Some(RunEvent {
                at_ns: e.at_ns,
                sig: signature(scenario, e.node?, &e.event, &peer_of),
                index,
            })
        })
        .collect()
}

/// Whether a profile's path signature and a chain's (unanchored) one name the same file, as
/// the diagnosis compares them: equal, or equal once the profile's is unanchored.
fn same_path(profile: &Option<String>, chain: &Option<String>) -> bool {
    profile == chain
        || profile
            .as_deref()
            .and_then(crate::analysis::profile::unanchored)
            .is_some_and(|p| chain.as_deref() == Some(p.as_str()))
}

/// The fault-free runs of `profile` (none without one): failures by node, syscall, errno and
/// path; function calls by node and symbol; silences by node, peer and port. Exits, kills
/// and pauses are not in a profile (a fault-free run has none but its teardown).
pub fn fault_free_of<'a>(profile: Option<&'a Profile>, scenario: &'a Scenario) -> FaultFree<'a> {
    let Some(p) = profile else {
        return FaultFree {
            runs: 0,
            seen_in: Box::new(|_| 0),
            per_second: Box::new(|_| 0.0),
        };
    };
    let runs_with = |per_run: &[u64]| per_run.iter().filter(|&&n| n > 0).count() as u32;
    let per_second = move |sig: &Signature| {
        let node = scenario.nodes[sig.node].name.as_str();
        match &sig.sign {
            Sign::Failure {
                syscall, errno, path, ..
            } => p
                .failures
                .iter()
                .filter(|f| {
                    f.node == node && f.syscall == *syscall && f.errno == *errno && same_path(&f.path, path)
                })
                .map(|f| f.per_second)
                .sum(),
            Sign::Function { symbol } => p
                .functions
                .iter()
                .filter(|f| {
                    f.symbol == *symbol && (f.node == node || f.shared_with.iter().any(|s| s == node))
                })
                .map(|f| f.per_second)
                .fold(0.0, f64::max),
            _ => 0.0,
        }
    };
    let seen_in = move |sig: &Signature| {
        let node = scenario.nodes[sig.node].name.as_str();
        match &sig.sign {
            Sign::Failure {
                syscall, errno, path, ..
            } => p
                .failures
                .iter()
                .filter(|f| {
                    f.node == node && f.syscall == *syscall && f.errno == *errno && same_path(&f.path, path)
                })
                .map(|f| runs_with(&f.per_run))
                .max(),
            Sign::Function { symbol } => p
                .functions
                .iter()
                .filter(|f| {
                    f.symbol == *symbol && (f.node == node || f.shared_with.iter().any(|s| s == node))
                })
                .map(|f| runs_with(&f.per_run))
                .max(),
            Sign::Gap { peer, port } => p
                .gaps
                .iter()
                .filter(|g| g.node == node && Some(&g.peer) == peer.as_ref() && g.port == *port)
                .map(|g| runs_with(&g.per_run))
                .max(),
            _ => None,
        }
        .unwrap_or(0)
    };
    FaultFree {
        runs: p.runs,
        seen_in: Box::new(seen_in),
        per_second: Box::new(per_second),
    }
}

/// Rewrites the timelines of the chains' runs with each chain drawn as flow arrows; returns
/// a line per timeline that could not be rewritten (the report does not depend on them).
pub fn write_timelines(flows: &[(PathBuf, Vec<usize>)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_timeline: std::collections::BTreeMap<&PathBuf, Vec<Vec<usize>>> = Default::default();
    for (timeline, chain) in flows {
        by_timeline.entry(timeline).or_default().push(chain.clone());
    }
    for (timeline, chains) in by_timeline {
        let Some(trace_dir) = timeline.parent() else {
            continue;
        };
        let dumps = run_dumps(trace_dir);
        let written =
            Merged::read(&dumps).and_then(|m| tracedump::perfetto::write_with_flows(&m, timeline, &chains));
        if let Err(e) = written {
            problems.push(format!("timeline {}: {e:#}", timeline.display()));
        }
    }
    problems
}

/// The chains of a search's accepted schedule, one per fault that a reproduced run shows,
/// from the runs kept under `out`, the profile and production's timeline.
pub fn of_search(
    out: &Path,
    accepted: &Schedule,
    scenario: &Scenario,
    timeline: &Timeline,
    profile: Option<&Profile>,
) -> Vec<super::Chain> {
    let runs = load_runs(out, accepted, scenario);
    let peers = crate::analysis::diagnose::peer_map(timeline, scenario);
    let production = production_events(timeline, scenario, &peers);
    let fault_free = fault_free_of(profile, scenario);
    (0..accepted.faults.len())
        .filter_map(|fault| super::build(&runs, fault, &fault_free, &production))
        .collect()
}

/// The dumps of a run's trace directory, sorted by name (none when it cannot be read).
pub fn run_dumps(trace_dir: &Path) -> Vec<PathBuf> {
    let mut dumps: Vec<PathBuf> = std::fs::read_dir(trace_dir)
        .map(|it| {
            it.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "tdump"))
                .collect()
        })
        .unwrap_or_default();
    dumps.sort();
    dumps
}
