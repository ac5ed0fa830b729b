//! One fault-free run's trace mapped to nodes: its failure signatures, syscall and function
//! counts, silences between nodes, exits, and what the tracing lost.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Result;
use tracedump::event::{Event, What};

use super::exits::{symptom_status, RUNNING, STARTUP};
use super::{normalize_path, service_port, workdir_of, Dropped};
use crate::analysis::nodemap::NodeMap;
use crate::model::scenario::Scenario;

/// A failure signature.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FailureKey {
    pub node: String,
    pub syscall: String,
    pub errno: String,
    pub path: Option<String>,
}

/// An exit signature: a death that would be a symptom (see `exits`), by node, program (the
/// process's comm), status ("status 1", or the signal's name) and phase of the run.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExitKey {
    pub node: String,
    pub program: String,
    pub status: String,
    pub phase: String,
}

/// What one fault-free run contributed, mapped to nodes.
#[derive(Clone, Debug, Default)]
pub struct RunData {
    pub seconds: f64,
    pub failures: BTreeMap<FailureKey, u64>,
    /// (node, syscall) -> calls
    pub syscalls: BTreeMap<(String, String), u64>,
    /// (binary, symbol) -> calls
    pub function_calls: BTreeMap<(String, String), u64>,
    /// (node, peer, service port) -> the silences of such connections
    pub gaps: BTreeMap<(String, String, u16), GapRun>,
    /// exits that would be symptoms, and how many
    pub exits: BTreeMap<ExitKey, u64>,
    /// node -> ms from its first process's start until every node was ready
    pub startup_ms: BTreeMap<String, u64>,
    /// (binary, symbol) of functions that were not attached
    pub unattached: BTreeSet<(String, String)>,
    /// (binary, symbol) of functions detached at the call limit (counted up to it)
    pub detached: BTreeSet<(String, String)>,
    pub dropped: Dropped,
    pub unmapped_events: u64,
    pub unmapped_syscalls: u64,
    /// the nodes' processes with their environments (builds, configuration, limits)
    pub environments: Vec<crate::analysis::drift::Sample>,
}

/// One node pair and port's silences in one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GapRun {
    pub silences: u64,
    pub longest_ms: u64,
    /// `[busy_ms, silence_ms]`: see [`super::GapStat::after_busy`]
    pub after_busy: Vec<[u64; 2]>,
}

/// One run's trace, mapped to nodes (also what `reproduce` learns from its fault-free
/// check run when it has no profile); `launched` are the (node, pid) pairs the run started,
/// `duration_ms` the span the trace's counts cover, `ready_ns` when every node was ready
/// (CLOCK_BOOTTIME; exits before it are of the start-up phase).
pub fn run_data(
    scenario: &Scenario,
    trace: &Path,
    launched: &[(String, u32)],
    duration_ms: u64,
    ready_ns: Option<u64>,
) -> Result<RunData> {
    let dump = tracedump::dump::Dump::read(trace)?;
    let launched: Vec<(usize, u32)> = launched
        .iter()
        .filter_map(|(name, pid)| Some((scenario.node_index(name)?, *pid)))
        .collect();
    let map = NodeMap::build_for(scenario, &dump.meta, &launched);
    let mut data = RunData {
        seconds: duration_ms as f64 / 1000.0,
        ..Default::default()
    };
    let node_name = |pid: u32| map.node(pid).map(|i| scenario.nodes[i].name.clone());
    if let Some(ready) = ready_ns {
        for p in &dump.meta.processes {
            let Some(node) = node_name(p.pid) else { continue };
            let ms = ready.saturating_sub(p.start_ns) / 1_000_000;
            let e = data.startup_ms.entry(node).or_insert(0);
            *e = (*e).max(ms);
        }
    }
    data.environments = crate::analysis::drift::samples(&dump.meta, &map);
    let events = dump.events();
    let workdir = workdir_of(scenario, &dump.meta.processes, |pid| map.node(pid));
    data.exits = exits_of(scenario, &events, |pid| map.node(pid), ready_ns);
    for e in events {
        if let What::NetworkGap(g) = &e.what {
            add_gap(&mut data, scenario, g, map.node(e.pid));
            continue;
        }
        let What::SyscallFailure(f) = e.what else { continue };
        let Some(node) = node_name(e.pid) else {
            data.unmapped_events += 1;
            continue;
        };
        let key = FailureKey {
            node,
            syscall: f.syscall,
            errno: f.errno.unwrap_or_default(),
            path: f.path.as_deref().map(|p| normalize_path(p, workdir.as_deref())),
        };
        *data.failures.entry(key).or_default() += 1;
    }
    for c in &dump.meta.syscall_counts {
        match node_name(c.pid) {
            Some(node) => *data.syscalls.entry((node, c.syscall.clone())).or_default() += c.count,
            None => data.unmapped_syscalls += c.count,
        }
    }
    let meta = &dump.meta;
    for (i, f) in meta.functions.iter().enumerate() {
        let key = (f.binary.display().to_string(), f.symbol.clone());
        if meta.unattached_functions.contains(&i) {
            data.unattached.insert(key);
        } else {
            if meta.detached_functions.contains(&i) {
                data.detached.insert(key.clone());
            }
            *data.function_calls.entry(key).or_default() += meta.function_calls.get(i).copied().unwrap_or(0);
        }
    }
    let k = &meta.counters;
    data.dropped.events = k.kernel.buffer_full_syscall + k.recorder.ring_overwritten;
    data.dropped.counters = k.kernel.syscall_counts_full;
    Ok(data)
}

/// The deaths of `events` that would be symptoms (one per process), by signature;
/// `node_of` maps a pid to its node, `ready_ns` is when every node was ready.
pub fn exits_of(
    scenario: &Scenario,
    events: &[Event],
    node_of: impl Fn(u32) -> Option<usize>,
    ready_ns: Option<u64>,
) -> BTreeMap<ExitKey, u64> {
    let mut out = BTreeMap::new();
    let mut dead = BTreeSet::new();
    for e in events {
        let What::ProcessState(p) = &e.what else {
            continue;
        };
        let Some(node) = node_of(e.pid) else { continue };
        let sender = p.sender.as_ref().map(|s| s.pid);
        let from_outside = sender.is_some_and(|s| s != e.pid && node_of(s) != Some(node));
        let Some(status) = symptom_status(p, from_outside) else {
            continue;
        };
        if !dead.insert(e.pid) {
            continue;
        }
        let phase = match ready_ns {
            Some(ready) if e.ts_ns <= ready => STARTUP,
            _ => RUNNING,
        };
        let key = ExitKey {
            node: scenario.nodes[node].name.clone(),
            program: e.comm.to_string(),
            status,
            phase: phase.into(),
        };
        *out.entry(key).or_default() += 1;
    }
    out
}

/// A silence between two nodes' addresses (self-connections and other ends are not pairs); a
/// datagram flow's socket bound to any address is its process's node's (`node`).
/// A silence longer than the run itself is a clock error, not a norm: taken as the longest
/// silence of a pair, it would let every later partition of that pair pass as idle (a
/// tracerd before the fix of its jiffies stamps recorded silences of 584 years).
fn add_gap(data: &mut RunData, scenario: &Scenario, g: &tracedump::event::NetworkGap, node: Option<usize>) {
    let (Some(local), Some(peer)) = (g.local, g.peer) else {
        return;
    };
    if g.duration_ms as f64 > data.seconds * 1000.0 {
        log::warn!(
            "profile: a silence of {} ms between {local} and {peer} in a run of {:.1} s: ignored (impossible)",
            g.duration_ms,
            data.seconds
        );
        return;
    }
    let a = scenario
        .node_at(local.ip())
        .or(node.filter(|_| local.ip().is_unspecified()));
    let (Some(a), Some(b)) = (a, scenario.node_at(peer.ip())) else {
        return;
    };
    if a == b {
        return;
    }
    let key = (
        scenario.nodes[a].name.clone(),
        scenario.nodes[b].name.clone(),
        service_port(local, peer),
    );
    let e = data.gaps.entry(key).or_default();
    e.silences += 1;
    e.longest_ms = e.longest_ms.max(g.duration_ms);
    if g.busy_packets > 0 {
        super::add_after_busy(&mut e.after_busy, g.busy_ms, g.duration_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::profile::stats::gap_stats;

    #[test]
    fn silences_longer_than_the_run_are_not_norms() {
        let scenario = Scenario::parse(
            "name = \"kv\"\n[[nodes]]\nname = \"db1\"\ncommand = [\"kvnode\"]\naddress = \"10.9.0.1\"\n\
             [[nodes]]\nname = \"db2\"\ncommand = [\"kvnode\"]\naddress = \"10.9.0.2\"\n\
             [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n",
            "t",
        )
        .expect("scenario");
        let gap = |ms: u64| tracedump::event::NetworkGap {
            local: Some("10.9.0.1:40000".parse().expect("address")),
            peer: Some("10.9.0.2:7000".parse().expect("address")),
            duration_ms: ms,
            packets: 10,
            ongoing: false,
            busy_ms: 0,
            busy_packets: 0,
            protocol: 6,
            sent: None,
            sent_before: None,
        };
        let mut data = RunData {
            seconds: 8.0,
            ..Default::default()
        };
        add_gap(&mut data, &scenario, &gap(1054), Some(0));
        // what a wrapped jiffies difference made of a silence: minus 2^32 ticks
        add_gap(&mut data, &scenario, &gap(18_429_563_939_213), Some(0));
        add_gap(&mut data, &scenario, &gap(8001), Some(0));
        let key = ("db1".to_string(), "db2".to_string(), 7000);
        assert_eq!(
            data.gaps.get(&key).map(|g| (g.silences, g.longest_ms)),
            Some((1, 1054))
        );
        let stats = gap_stats(&[data]);
        assert_eq!(stats.len(), 1);
        assert_eq!(stats[0].longest_ms, 1054);
    }
}
