//! The `reproducer` command line: run a scenario once with a schedule, replay it N times,
//! profile it fault-free, diagnose dumps, search for a schedule, or run one run spec. Built
//! without the `testbed` feature it has `diagnose` alone.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use reproducer::analysis::diagnose::{self, diagnose, BaselineRates, Diagnosis};
use reproducer::analysis::drift;
use reproducer::analysis::profile;
use reproducer::analysis::timeline::Timeline;
use reproducer::cli::{Cli, Command};
use reproducer::model::scenario::Scenario;

#[cfg(feature = "testbed")]
mod runs;

fn main_inner(cli: Cli) -> Result<bool> {
    match cli.command {
        Command::Diagnose {
            traces,
            scenario,
            profile,
            testbed_trace,
            json,
        } => diagnose_cmd(
            &traces,
            scenario.as_deref(),
            profile.as_deref(),
            testbed_trace.as_deref(),
            json,
        ),
        #[cfg(feature = "testbed")]
        command => runs::main(command),
    }
}

fn diagnose_cmd(
    traces: &[PathBuf],
    scenario: Option<&Path>,
    profile: Option<&Path>,
    testbed_trace: Option<&Path>,
    json: bool,
) -> Result<bool> {
    let sc = scenario.map(Scenario::load).transpose()?;
    if testbed_trace.is_some() && sc.is_none() {
        anyhow::bail!(
            "--testbed-trace needs --scenario: the two sides' processes are paired through its nodes"
        );
    }
    let timeline = Timeline::load(traces, sc.as_ref())?;
    let baseline = profile.map(|p| BaselineRates::load(p, sc.as_ref())).transpose()?;
    let mut d = diagnose(&timeline, sc.as_ref(), baseline.as_ref());
    let mut testbed = None;
    if let Some(sc) = &sc {
        note_missing_contexts(&mut d, &timeline, sc, profile)?;
        let side = match testbed_trace {
            Some(dir) => Some((dir.display().to_string(), drift::load_testbed(dir, sc)?)),
            None => profiled_testbed(profile, sc)?,
        };
        testbed = side.map(|(label, side)| drift::compare(&timeline.environments, &side, sc, &label));
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&with_drift(&d, testbed.as_ref())?)?
        );
    } else {
        print!("{}", diagnose::render(&d, sc.as_ref()));
        if let Some(t) = &testbed {
            print!("{}", drift::text(t));
        }
    }
    // the command ends here, and so does the process: handing a large dump's million events
    // back to the allocator one by one would cost a tenth of the command
    std::mem::forget(timeline);
    Ok(true)
}

/// The testbed's side a profile kept (its first fault-free run), when it has one.
pub(crate) fn profiled_testbed(
    profile: Option<&Path>,
    sc: &Scenario,
) -> Result<Option<(String, Vec<drift::Sample>)>> {
    let Some(path) = profile else {
        return Ok(None);
    };
    let kept = profile::load(path)?.environments;
    let label = format!("profile {} (its first fault-free run)", path.display());
    Ok((!kept.is_empty()).then(|| (label, drift::from_profile(&kept, sc))))
}

/// The diagnosis as JSON, with the comparison of the testbed with production under
/// `testbed_drift` when there is one.
pub(crate) fn with_drift(d: &Diagnosis, drift: Option<&drift::Drift>) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(d)?;
    if let (Some(drift), Some(map)) = (drift, v.as_object_mut()) {
        map.insert("testbed_drift".into(), serde_json::to_value(drift)?);
    }
    Ok(v)
}

/// Adds to the diagnosis's notes why a node's faults have no function context.
pub(crate) fn note_missing_contexts(
    d: &mut Diagnosis,
    t: &Timeline,
    sc: &Scenario,
    profile: Option<&Path>,
) -> Result<()> {
    let profile = profile.map(profile::load).transpose()?;
    let notes = reproducer::analysis::context::why_no_functions(t, d, sc, profile.as_ref());
    d.notes.extend(notes);
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match main_inner(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("reproducer: error: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::from(2)
        }
    }
}
