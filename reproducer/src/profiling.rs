//! `reproducer profile`: runs the workload fault-free K times on the testbed under tracing
//! that counts every syscall per process and every call of every candidate function
//! (function events off, so a hot function cannot flood the trace), and aggregates the
//! traces with `analysis::profile`.
use anyhow::{bail, Context, Result};

use crate::analysis::profile::{aggregate, candidate_functions, run_data, Profile, ProfileOptions};
use crate::model::plan::FaultPlan;
use crate::model::scenario::Scenario;
use crate::testbed::executor::{self, RunOptions};

/// Runs the scenario fault-free `opts.runs` times and profiles it. Refuses when the
/// oracle fires in a fault-free run.
pub fn profile(scenario: &Scenario, opts: &ProfileOptions) -> Result<(Profile, usize)> {
    if opts.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if !opts.infrequent_below_per_s.is_finite() || opts.infrequent_below_per_s < 0.0 {
        bail!("--infrequent-below must be a number of calls per second, 0 or more");
    }
    let candidates = candidate_functions(scenario, &opts.function_patterns)?;
    let base = tempfile::Builder::new().prefix("reproducer-profile-").tempdir().context("profile scratch directory")?;
    let run_opts = RunOptions {
        keep: true,
        base_dir: Some(base.path().to_path_buf()),
        trace_functions: candidates.iter().map(|c| (c.node_index, format!("{}:{}", c.binary, c.symbol))).collect(),
        profiling: true,
    };
    let mut runs = Vec::new();
    for i in 1..=opts.runs {
        let report = executor::run(scenario, &FaultPlan::default(), &run_opts)?;
        if report.bug {
            bail!(
                "oracle fired in fault-free run {i} of {}: the oracle must be false without faults, or the profile would count the bug's symptoms as normal (oracle: {})",
                opts.runs,
                scenario.oracle.command.join(" ")
            );
        }
        if report.timed_out {
            eprintln!("reproducer: warning: fault-free run {i} hit run_timeout_s; its workload was stopped");
        }
        let trace = report.trace.as_ref().context("the run kept no trace")?;
        let data = run_data(scenario, trace, &report.launched, report.duration_ms)?;
        println!("profile run {i}/{}: {:.2} s, {} failed syscalls", opts.runs, data.seconds, data.failures.values().sum::<u64>());
        let _ = std::fs::remove_dir_all(&report.workdir);
        runs.push(data);
    }
    Ok((aggregate(scenario, &candidates, &runs, opts.infrequent_below_per_s), candidates.len()))
}
