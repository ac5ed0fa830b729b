//! The profile of K runs: per signature, syscall, function and node pair, the counts of
//! each run and the mean rate; which functions are infrequent, and the call limit past
//! which a profile run detaches a function as frequent.
use std::collections::{BTreeMap, BTreeSet};

use super::{
    Candidate, Dropped, ExitKey, ExitStat, FailureKey, FailureStat, FunctionStat, GapStat, Profile,
    ProfileOptions, RunData, SyscallStat, FEW_CALLS_PER_RUN, FORMAT, VERSION,
};
use crate::model::scenario::Scenario;

pub(super) fn gap_stats(runs: &[RunData]) -> Vec<GapStat> {
    let keys: BTreeSet<&(String, String, u16)> = runs.iter().flat_map(|r| r.gaps.keys()).collect();
    keys.into_iter()
        .map(|k| GapStat {
            node: k.0.clone(),
            peer: k.1.clone(),
            port: k.2,
            per_run: runs
                .iter()
                .map(|r| r.gaps.get(k).map(|g| g.silences).unwrap_or(0))
                .collect(),
            longest_ms: runs
                .iter()
                .filter_map(|r| r.gaps.get(k))
                .map(|g| g.longest_ms)
                .max()
                .unwrap_or(0),
            after_busy: runs
                .iter()
                .filter_map(|r| r.gaps.get(k))
                .flat_map(|g| &g.after_busy)
                .fold(Vec::new(), |mut f, &[busy, silence]| {
                    super::add_after_busy(&mut f, busy, silence);
                    f
                }),
        })
        .collect()
}

fn exit_stats(runs: &[RunData]) -> Vec<ExitStat> {
    let keys: BTreeSet<&ExitKey> = runs.iter().flat_map(|r| r.exits.keys()).collect();
    keys.into_iter()
        .map(|k| ExitStat {
            node: k.node.clone(),
            program: k.program.clone(),
            status: k.status.clone(),
            phase: k.phase.clone(),
            per_run: runs
                .iter()
                .map(|r| r.exits.get(k).copied().unwrap_or(0))
                .collect(),
        })
        .collect()
}

/// Per node, the longest start-up of any run.
fn startup_ms(runs: &[RunData]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (node, &ms) in runs.iter().flat_map(|r| r.startup_ms.iter()) {
        let e = out.entry(node.clone()).or_insert(0);
        *e = ms.max(*e);
    }
    out
}

/// Mean over runs of count / seconds.
fn per_second(per_run: &[u64], runs: &[RunData]) -> f64 {
    if runs.is_empty() {
        return 0.0;
    }
    let sum: f64 = per_run
        .iter()
        .zip(runs)
        .map(|(&n, r)| n as f64 / r.seconds.max(1e-3))
        .sum();
    sum / runs.len() as f64
}

fn failure_stats(runs: &[RunData]) -> Vec<FailureStat> {
    let keys: BTreeSet<&FailureKey> = runs.iter().flat_map(|r| r.failures.keys()).collect();
    let mut out: Vec<FailureStat> = keys
        .into_iter()
        .map(|k| {
            let per_run: Vec<u64> = runs
                .iter()
                .map(|r| r.failures.get(k).copied().unwrap_or(0))
                .collect();
            FailureStat {
                node: k.node.clone(),
                syscall: k.syscall.clone(),
                errno: k.errno.clone(),
                path: k.path.clone(),
                per_second: per_second(&per_run, runs),
                per_run,
            }
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node).then(b.per_second.total_cmp(&a.per_second)));
    out
}

fn syscall_stats(runs: &[RunData]) -> Vec<SyscallStat> {
    let keys: BTreeSet<&(String, String)> = runs.iter().flat_map(|r| r.syscalls.keys()).collect();
    let mut out: Vec<SyscallStat> = keys
        .into_iter()
        .map(|k| {
            let per_run: Vec<u64> = runs
                .iter()
                .map(|r| r.syscalls.get(k).copied().unwrap_or(0))
                .collect();
            SyscallStat {
                node: k.0.clone(),
                syscall: k.1.clone(),
                per_second: per_second(&per_run, runs),
                per_run,
            }
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node).then(b.per_second.total_cmp(&a.per_second)));
    out
}

/// Below the rate threshold, or called only a handful of times per run: a workload of a
/// few seconds makes one call look like "12 per second", yet a call per run is the rarest
/// kind of event there is.
fn is_infrequent(per_run: &[u64], rate: f64, threshold: f64) -> bool {
    let mean = per_run.iter().sum::<u64>() as f64 / per_run.len().max(1) as f64;
    rate < threshold || mean <= FEW_CALLS_PER_RUN
}

/// Calls after which a profile run detaches a function's uprobe: more than `runs` runs of
/// the longest a run may take (every node's ready wait and `run_timeout_s`, doubled for the
/// oracle and the teardown) hold at `threshold` calls per second, and more than a handful
/// per run — so a detached function is frequent in the profile, whatever it did later.
pub fn detach_after_calls(scenario: &Scenario, opts: &ProfileOptions) -> u64 {
    let longest_s = 2 * (scenario.run_timeout_s + scenario.nodes.len() as u64 * scenario.ready_timeout_s());
    let runs = opts.runs.max(1) as f64;
    let at_threshold = opts.infrequent_below_per_s * longest_s as f64 * runs;
    at_threshold.max(FEW_CALLS_PER_RUN * runs).ceil() as u64 + 1
}

/// Calls per candidate (attached in every run), the candidates that were not attached, and
/// those a run detached as frequent.
fn function_stats(
    candidates: &[Candidate],
    runs: &[RunData],
    threshold: f64,
) -> (Vec<FunctionStat>, Vec<String>, Vec<String>) {
    let mut stats = Vec::new();
    let mut not_attached = Vec::new();
    let mut detached = Vec::new();
    for c in candidates {
        let key = (c.binary.clone(), c.symbol.clone());
        if runs.iter().any(|r| r.unattached.contains(&key)) {
            not_attached.push(format!("{}:{}", c.binary, c.symbol));
            continue;
        }
        let per_run: Vec<u64> = runs
            .iter()
            .map(|r| r.function_calls.get(&key).copied().unwrap_or(0))
            .collect();
        let rate = per_second(&per_run, runs);
        let was_detached = runs.iter().any(|r| r.detached.contains(&key));
        if was_detached {
            detached.push(format!("{}:{}", c.binary, c.symbol));
        }
        let infrequent = !was_detached && is_infrequent(&per_run, rate, threshold);
        stats.push(FunctionStat {
            node: c.nodes.first().cloned().unwrap_or_default(),
            shared_with: c.nodes.iter().skip(1).cloned().collect(),
            binary: c.binary.clone(),
            symbol: c.symbol.clone(),
            source_file: c.source_file.clone(),
            per_run,
            per_second: rate,
            infrequent,
        });
    }
    (stats, not_attached, detached)
}

/// The profile of `runs` (pure: the unit tests feed it synthetic runs).
pub fn aggregate(scenario: &Scenario, candidates: &[Candidate], runs: &[RunData], threshold: f64) -> Profile {
    let (functions, functions_not_attached, functions_detached) = function_stats(candidates, runs, threshold);
    let mut dropped = Dropped::default();
    for r in runs {
        dropped.events += r.dropped.events;
        dropped.counters += r.dropped.counters;
    }
    Profile {
        format: FORMAT.into(),
        version: VERSION,
        scenario: scenario.name.clone(),
        scenario_nodes: scenario
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.command.clone()))
            .collect(),
        runs: runs.len() as u32,
        run_seconds: runs.iter().map(|r| r.seconds).collect(),
        infrequent_below_per_s: threshold,
        failures: failure_stats(runs),
        syscalls: syscall_stats(runs),
        functions,
        gaps: gap_stats(runs),
        exits: exit_stats(runs),
        startup_ms: startup_ms(runs),
        dropped,
        unmapped_events: runs.iter().map(|r| r.unmapped_events).sum(),
        unmapped_syscalls: runs.iter().map(|r| r.unmapped_syscalls).sum(),
        functions_not_attached,
        functions_detached,
        programs: BTreeMap::new(),
        environments: runs
            .iter()
            .map(|r| &r.environments)
            .find(|e| !e.is_empty())
            .map(|e| crate::analysis::drift::to_profile(e, scenario))
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::profile::fixture::{candidate, run, SCENARIO};
    use crate::analysis::profile::{functions_list, summary};

    #[test]
    fn aggregates_runs() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let candidates = vec![
            candidate("store_snapshot"),
            candidate("event_loop"),
            candidate("never_called"),
            candidate("ambiguous"),
        ];
        let mut second = run(2.0, 12, 98, 1, 4000);
        second.failures.insert(
            FailureKey {
                node: "db2".into(),
                syscall: "connect".into(),
                errno: "ECONNREFUSED".into(),
                path: None,
            },
            4,
        );
        let runs = vec![run(1.0, 12, 100, 1, 1000), second];
        let p = aggregate(&s, &candidates, &runs, 2.0);
        assert_eq!((p.format.as_str(), p.version, p.runs), (FORMAT, VERSION, 2));
        assert_eq!(p.run_seconds, vec![1.0, 2.0]);
        assert_eq!(p.scenario_nodes["db2"], vec!["kvnode".to_string(), "2".into()]);

        assert_eq!(p.failures.len(), 2);
        let enoent = &p.failures[0];
        assert_eq!(
            (
                enoent.node.as_str(),
                enoent.errno.as_str(),
                enoent.path.as_deref()
            ),
            ("db1", "ENOENT", Some("*/optional.conf"))
        );
        assert_eq!(enoent.per_run, vec![12, 12]);
        assert!(
            (enoent.per_second - 9.0).abs() < 1e-9,
            "mean of 12/1 and 12/2: {}",
            enoent.per_second
        );
        let refused = &p.failures[1];
        assert_eq!(
            (refused.per_run.clone(), refused.path.clone()),
            (vec![0, 4], None),
            "a signature missing from a run counts 0 there"
        );
        assert!((refused.per_second - 1.0).abs() < 1e-9);

        assert_eq!(p.syscalls.len(), 1);
        assert_eq!(p.syscalls[0].per_run, vec![100, 98]);
        assert!((p.syscalls[0].per_second - 74.5).abs() < 1e-9);

        let f = |name: &str| {
            p.functions
                .iter()
                .find(|f| f.symbol == name)
                .unwrap_or_else(|| panic!("{name} listed"))
        };
        assert!(f("store_snapshot").infrequent && (f("store_snapshot").per_second - 0.75).abs() < 1e-9);
        assert!(!f("event_loop").infrequent);
        assert_eq!(f("never_called").per_run, vec![0, 0]);
        assert!(f("never_called").infrequent, "never called counts as infrequent");
        assert_eq!(f("store_snapshot").shared_with, vec!["db2".to_string()]);
        assert!(
            p.functions.iter().all(|f| f.symbol != "ambiguous"),
            "a function never attached is not measured"
        );
        assert_eq!(
            p.functions_not_attached,
            vec!["/opt/kvnode:ambiguous".to_string()]
        );
        assert_eq!(
            p.dropped,
            Dropped {
                events: 2,
                counters: 4
            }
        );
        assert_eq!(p.unmapped_events, 6);

        let list = functions_list(&p);
        assert!(
            list.contains("\n/opt/kvnode:store_snapshot\n") && list.contains("\n/opt/kvnode:never_called\n"),
            "{list}"
        );
        assert!(
            !list.contains("event_loop") && !list.contains("ambiguous"),
            "{list}"
        );
        let parsed: Vec<&str> = list.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(parsed.len(), 2);
    }

    #[test]
    fn a_function_detached_at_the_call_limit_is_listed_and_never_infrequent() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let opts = ProfileOptions {
            runs: 3,
            function_patterns: Vec::new(),
            infrequent_below_per_s: 2.0,
        };
        let limit = detach_after_calls(&s, &opts);
        // 3 runs of at most 2 × (60 + 2 nodes × 60) s at 2 calls/s
        assert_eq!(limit, 2 * 360 * 3 + 1);
        // a run that detached it holds at least `limit` calls, which no run length can make
        // infrequent: the other runs may even have none
        let detached = run(2.0 * 360.0, 0, 0, 0, limit);
        let mut runs = vec![run(1.0, 0, 0, 0, 0), run(1.0, 0, 0, 0, 0), detached];
        runs[2]
            .detached
            .insert(("/opt/kvnode".into(), "event_loop".into()));
        let p = aggregate(&s, &[candidate("event_loop")], &runs, 2.0);
        assert_eq!(p.functions_detached, ["/opt/kvnode:event_loop"]);
        assert!(!p.functions[0].infrequent);
        assert!(
            p.functions[0].per_second * 3.0 >= 2.0,
            "{}",
            p.functions[0].per_second
        );
        assert!(
            summary(&p, 1).contains("1 detached as frequent"),
            "{}",
            summary(&p, 1)
        );
    }

    #[test]
    fn threshold_is_exclusive() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let p = aggregate(&s, &[candidate("store_snapshot")], &[run(10.0, 0, 0, 20, 0)], 2.0);
        assert!(!p.functions[0].infrequent, "2 calls/s is not below 2");
    }

    #[test]
    fn a_few_calls_per_run_are_infrequent_in_a_short_run() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let p = aggregate(&s, &[candidate("store_snapshot")], &[run(0.1, 0, 0, 1, 0)], 2.0);
        assert!(
            p.functions[0].infrequent,
            "once per run is rare, whatever the run's length"
        );
        let p = aggregate(&s, &[candidate("store_snapshot")], &[run(0.1, 0, 0, 6, 0)], 2.0);
        assert!(!p.functions[0].infrequent);
    }
}
