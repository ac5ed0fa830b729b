//! `reproducer profile`: runs the workload fault-free K times on the testbed under tracing
//! that counts every syscall per process and every call of every candidate function
//! (function events off, so a hot function cannot flood the trace), and aggregates the
//! traces with `analysis::profile`. The candidates are the functions of the programs the
//! nodes really run: the first run shows them behind wrappers, and is repeated when they
//! differ from the declared ones. With `jobs` > 1 the runs after the first go side by side,
//! each a `reproducer run-attempt` process on its spec (see `testbed::spec`).
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::analysis::profile::{
    aggregate, candidate_functions, declared_programs, detach_after_calls, programs_after_run, run_data,
    Candidate, Profile, ProfileOptions, Program,
};
use crate::analysis::programs;
use crate::model::plan::FaultPlan;
use crate::model::scenario::Scenario;
use crate::model::schedule::Schedule;
use crate::testbed::executor::{self, RunOptions, RunReport};
use crate::testbed::spec::{self, RunSpec, SpecOptions, TraceFunction};

/// Fault-free profile runs side by side, each in `base/run-K/`, reports in order. Plain
/// scoped threads: each waits on one child process.
fn runs_side_by_side(
    scenario: &Scenario,
    scenario_file: &Path,
    options: &SpecOptions,
    base: &Path,
    first: usize,
    n: usize,
) -> Vec<Result<RunReport>> {
    let one = |k: usize| -> Result<RunReport> {
        let dir = base.join(format!("run-{k}"));
        std::fs::create_dir_all(&dir)?;
        let spec = RunSpec {
            scenario_file: scenario_file.display().to_string(),
            scenario: scenario.clone(),
            schedule: Schedule::default(),
            options: options.clone(),
        };
        let path = spec.write(&dir)?;
        spec::run_in_child(&path, &dir)
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (first..first + n).map(|k| scope.spawn(move || one(k))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a profile run's thread panicked")))
            })
            .collect()
    })
}

/// Runs the scenario fault-free `opts.runs` times and profiles it, up to `jobs` runs side
/// by side after the first. Refuses when the oracle fires in a fault-free run.
pub fn profile(
    scenario: &Scenario,
    scenario_file: &Path,
    opts: &ProfileOptions,
    jobs: usize,
) -> Result<(Profile, usize)> {
    if opts.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if !opts.infrequent_below_per_s.is_finite() || opts.infrequent_below_per_s < 0.0 {
        bail!("--infrequent-below must be a number of calls per second, 0 or more");
    }
    let mut programs = declared_programs(scenario)?;
    let (mut candidates, mut why_none) = candidate_functions(scenario, &programs, &opts.function_patterns)?;
    let base = tempfile::Builder::new()
        .prefix("reproducer-profile-")
        .tempdir()
        .context("profile scratch directory")?;
    if scenario.has_users() {
        // a node's account must be able to enter its run directory
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o711))?;
    }
    let run_opts = |candidates: &[Candidate]| RunOptions {
        keep: true,
        base_dir: Some(base.path().to_path_buf()),
        trace_functions: candidates
            .iter()
            .map(|c| (c.node_index, format!("{}:{}", c.binary, c.symbol)))
            .collect(),
        profiling: true,
        detach_functions_after_calls: detach_after_calls(scenario, opts),
    };
    let mut runs = Vec::new();
    let mut programs_checked = false;
    while runs.len() < opts.runs as usize {
        // the first run alone: it may change the candidates of the others
        let n = if programs_checked {
            jobs.max(1).min(opts.runs as usize - runs.len())
        } else {
            1
        };
        let reports = if n == 1 {
            vec![executor::run(
                scenario,
                &FaultPlan::default(),
                &run_opts(&candidates),
            )]
        } else {
            let o = run_opts(&candidates);
            let options = SpecOptions {
                keep: true,
                profiling: true,
                detach_functions_after_calls: o.detach_functions_after_calls,
                trace_functions: o
                    .trace_functions
                    .into_iter()
                    .map(|(node, function)| TraceFunction { node, function })
                    .collect(),
            };
            runs_side_by_side(scenario, scenario_file, &options, base.path(), runs.len() + 1, n)
        };
        for report in reports {
            let i = runs.len() + 1;
            let report = report?;
            if report.bug {
                let _ = std::fs::remove_dir_all(&report.workdir);
                bail!(
                "oracle fired in fault-free run {i} of {}: the oracle must be false without faults, or the profile would count the bug's symptoms as normal (oracle: {})",
                opts.runs,
                scenario.oracle.command.join(" ")
            );
            }
            if report.timed_out {
                eprintln!(
                    "reproducer: warning: fault-free run {i} hit run_timeout_s; its workload was stopped"
                );
            }
            let trace = report.trace.as_ref().context("the run kept no trace")?;
            if !programs_checked {
                // the first run shows what the nodes really execute behind their wrappers
                programs_checked = true;
                let ran = programs::executed(scenario, trace, &report.launched)?;
                let found = programs_after_run(&programs, &ran, scenario.nodes.len());
                let reals = |ps: &[Program]| {
                    ps.iter()
                        .map(|p| (p.node, p.real.clone()))
                        .collect::<BTreeSet<_>>()
                };
                if reals(&found) != reals(&programs) {
                    for p in found
                        .iter()
                        .filter(|p| !programs.iter().any(|q| q.node == p.node && q.real == p.real))
                    {
                        let node = &scenario.nodes[p.node];
                        println!(
                            "profile: node {} runs {} (its command: {})",
                            node.name,
                            p.named.display(),
                            node.command[0]
                        );
                    }
                    println!(
                    "profile run {i}/{}: repeated with the functions of the programs the nodes really run",
                    opts.runs
                );
                    programs = found;
                    (candidates, why_none) =
                        candidate_functions(scenario, &programs, &opts.function_patterns)?;
                    let _ = std::fs::remove_dir_all(&report.workdir);
                    continue;
                }
            }
            let data = run_data(
                scenario,
                trace,
                &report.launched,
                report.duration_ms,
                report.ready_ns,
            )?;
            println!(
                "profile run {i}/{}: {:.2} s, {} failed syscalls",
                opts.runs,
                data.seconds,
                data.failures.values().sum::<u64>()
            );
            let _ = std::fs::remove_dir_all(&report.workdir);
            runs.push(data);
        }
    }
    if candidates.is_empty() {
        eprintln!(
            "reproducer: WARNING: 0 candidate functions, so the profile lists no infrequent functions for tracerd and a diagnosis has no function context: {}",
            why_none.join("; ")
        );
    }
    let mut profile = aggregate(scenario, &candidates, &runs, opts.infrequent_below_per_s);
    for p in &programs {
        profile
            .programs
            .entry(scenario.nodes[p.node].name.clone())
            .or_default()
            .push(p.named.display().to_string());
    }
    Ok((profile, candidates.len()))
}
