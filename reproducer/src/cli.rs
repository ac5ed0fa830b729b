//! The `reproducer` command line's definition (clap): the binary parses it, and the packaging
//! generator (`xtask`) renders man pages and shell completions from the same `command()`.
//! Built without the `testbed` feature it has `diagnose` alone.
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

/// The command line as clap sees it, for man pages and completions.
pub fn command() -> clap::Command {
    Cli::command()
}

#[derive(Parser)]
#[command(
    name = "reproducer",
    version,
    about = "Re-inject external faults at the points where they happened"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
        /// Compare production's builds, configuration files, kernel and limits with those of
        /// this testbed run: a run directory (`reproducer run --keep`, a search's
        /// attempts/NNN/...), its trace directory, or one dump; needs --scenario
        #[arg(long, value_name = "DIR")]
        testbed_trace: Option<PathBuf>,
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
        #[arg(long, value_name = "BYTES", default_value_t = crate::search::retention::DEFAULT_KEEP_BYTES)]
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
        runner: crate::search::engine::Engine,
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
        #[arg(long, value_name = "CALLS_PER_S", default_value_t = crate::analysis::profile::DEFAULT_INFREQUENT_BELOW)]
        infrequent_below: f64,
        /// The profile (JSON); the infrequent functions go next to it, extension .functions
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Runs side by side at most after the first (default: half the cores, at least 1)
        #[arg(long, value_name = "N")]
        jobs: Option<usize>,
    },
}

#[cfg(test)]
mod tests {
    /// clap's own check of the definitions (conflicting names, bad defaults), which otherwise
    /// only fails when the faulty subcommand is parsed.
    #[test]
    fn definitions_are_consistent() {
        super::command().debug_assert();
    }
}
