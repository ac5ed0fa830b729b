//! The `reproducer` command line: run a scenario once with a schedule, replay it N times,
//! profile it fault-free, diagnose dumps, search for a schedule, or run one run spec. Built
//! without the `testbed` feature it has `diagnose` alone.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use reproducer::analysis::diagnose::{self, diagnose, BaselineRates, Diagnosis};
use reproducer::analysis::profile;
use reproducer::analysis::timeline::Timeline;
use reproducer::model::scenario::Scenario;

#[cfg(feature = "testbed")]
mod runs;

#[derive(Parser)]
#[command(
    name = "reproducer",
    version,
    about = "Re-inject external faults at the points where they happened"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    #[cfg(feature = "testbed")]
    /// Run the scenario once, injecting the schedule's faults
    Run {
        #[arg(long, value_name = "FILE")]
        scenario: PathBuf,
        #[arg(long, value_name = "FILE")]
        schedule: Option<PathBuf>,
        /// Keep the run's directory (logs, trace)
        #[arg(long)]
        keep: bool,
    },
    #[cfg(feature = "testbed")]
    /// Run the scenario N times with the schedule and report the replay rate
    Replay {
        #[arg(long, value_name = "FILE")]
        scenario: PathBuf,
        #[arg(long, value_name = "FILE")]
        schedule: PathBuf,
        #[arg(long, default_value_t = 10)]
        runs: u32,
        /// Exit 0 only if bug runs / runs reaches this
        #[arg(long, default_value_t = 0.8)]
        target_rate: f64,
        #[arg(long)]
        keep: bool,
    },
    /// Read production dumps and list the faults that may have caused the failure (no runs)
    Diagnose {
        #[arg(long = "trace", value_name = "DUMP", required = true, num_args = 1..)]
        traces: Vec<PathBuf>,
        /// Map processes to this scenario's nodes
        #[arg(long, value_name = "FILE")]
        scenario: Option<PathBuf>,
        /// Fault-free profile: failures it shows at a similar rate are benign
        #[arg(long, value_name = "FILE")]
        profile: Option<PathBuf>,
        /// Print the diagnosis as JSON
        #[arg(long)]
        json: bool,
    },
    #[cfg(feature = "testbed")]
    /// Search for a schedule that reproduces the failure in the dumps at the target rate
    Reproduce {
        #[arg(long, value_name = "FILE")]
        scenario: PathBuf,
        #[arg(long = "trace", value_name = "DUMP", required = true, num_args = 1..)]
        traces: Vec<PathBuf>,
        #[arg(long, value_name = "FILE")]
        profile: Option<PathBuf>,
        #[arg(long, default_value_t = 0.8)]
        target_rate: f64,
        /// Give up after this many runs (confirmation and minimization runs included)
        #[arg(long, default_value_t = 150)]
        max_runs: u32,
        /// Give up after this much wall time with what was found (e.g. 30m, 2h; the replay
        /// of an accepted schedule still runs)
        #[arg(long, value_name = "DURATION", default_value = "1h")]
        max_time: humantime::Duration,
        /// Where schedule.toml, report.md and attempts/ go
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Byte budget for the kept run directories under attempts/
        #[arg(long, value_name = "BYTES", default_value_t = reproducer::search::retention::DEFAULT_KEEP_BYTES)]
        keep_bytes: u64,
        /// Runs side by side at most (default: half the cores, at least 1); the result is
        /// the same as with 1. A scenario with a node without an address runs one at a time
        #[arg(long, value_name = "N")]
        jobs: Option<usize>,
        /// Where each attempt runs: `local` (a process here), `slurm` (a batch job through
        /// sbatch), or a command template with {spec} and {dir} that runs `reproducer
        /// run-attempt --spec {spec} --dir {dir}` on another engine and returns when it has
        /// ended. With an engine, --out must be on a directory every node mounts at the same
        /// path, and --jobs is how many attempts are in the engine's queue at once
        #[arg(long, value_name = "ENGINE", default_value = "local")]
        runner: reproducer::search::engine::Engine,
    },
    #[cfg(feature = "testbed")]
    /// Run one run spec (an attempt.toml a search wrote) in DIR; print its report as JSON and
    /// write it to DIR/attempt-report.json
    RunAttempt {
        #[arg(long, value_name = "FILE")]
        spec: PathBuf,
        /// Where the run's directory goes
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    #[cfg(feature = "testbed")]
    /// Run the workload fault-free K times and write what is normal: benign failures,
    /// syscall frequencies, and calls per function (the infrequent ones into OUT's .functions)
    Profile {
        #[arg(long, value_name = "FILE")]
        scenario: PathBuf,
        #[arg(long, default_value_t = 3)]
        runs: u32,
        /// Only functions whose name or source file matches this glob (repeatable; default: all)
        #[arg(long = "functions-from", value_name = "PATTERN")]
        functions_from: Vec<String>,
        /// A function called less often than this (mean calls per second) is infrequent
        #[arg(long, value_name = "CALLS_PER_S", default_value_t = profile::DEFAULT_INFREQUENT_BELOW)]
        infrequent_below: f64,
        /// The profile (JSON); the infrequent functions go next to it, extension .functions
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Runs side by side at most after the first (default: half the cores, at least 1)
        #[arg(long, value_name = "N")]
        jobs: Option<usize>,
    },
}

fn main_inner(cli: Cli) -> Result<bool> {
    match cli.command {
        Command::Diagnose {
            traces,
            scenario,
            profile,
            json,
        } => diagnose_cmd(&traces, scenario.as_deref(), profile.as_deref(), json),
        #[cfg(feature = "testbed")]
        command => runs::main(command),
    }
}

fn diagnose_cmd(
    traces: &[PathBuf],
    scenario: Option<&Path>,
    profile: Option<&Path>,
    json: bool,
) -> Result<bool> {
    let sc = scenario.map(Scenario::load).transpose()?;
    let timeline = Timeline::load(traces, sc.as_ref())?;
    let baseline = profile.map(|p| BaselineRates::load(p, sc.as_ref())).transpose()?;
    let mut d = diagnose(&timeline, sc.as_ref(), baseline.as_ref());
    if let Some(sc) = &sc {
        note_missing_contexts(&mut d, &timeline, sc, profile)?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&d)?);
    } else {
        print!("{}", diagnose::render(&d, sc.as_ref()));
    }
    // the command ends here, and so does the process: handing a large dump's million events
    // back to the allocator one by one would cost a tenth of the command
    std::mem::forget(timeline);
    Ok(true)
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
