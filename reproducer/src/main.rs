//! The `reproducer` command line: run a scenario once with a schedule, replay it N times,
//! or profile it fault-free.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};

use reproducer::executor::{run, RunOptions, RunReport};
use reproducer::scenario::Scenario;
use reproducer::schedule::{ResolvedFault, Schedule};

#[derive(Parser)]
#[command(name = "reproducer", version, about = "Re-inject external faults at the points where they happened")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
        #[arg(long, value_name = "CALLS_PER_S", default_value_t = reproducer::profile::DEFAULT_INFREQUENT_BELOW)]
        infrequent_below: f64,
        /// The profile (JSON); the infrequent functions go next to it, extension .functions
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

fn load(scenario: &Path, schedule: Option<&Path>) -> Result<(Scenario, Vec<ResolvedFault>)> {
    let sc = Scenario::load(scenario)?;
    let faults = match schedule {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("schedule {}: {e}", path.display()))?;
            let origin = path.display().to_string();
            Schedule::parse(&text, &origin)?.resolve(&sc, &text, &origin)?
        }
        None => Vec::new(),
    };
    Ok((sc, faults))
}

fn print_report(r: &RunReport) {
    println!("bug: {}", if r.bug { "yes (the oracle fired)" } else { "no" });
    if r.timed_out {
        println!("the workload hit run_timeout_s and was stopped");
    }
    println!("faults fired: {}/{}", r.fired.len(), r.faults);
    for f in &r.fired {
        println!("  fault {} {} on {} at +{} ms, pid {} tid {} {}", f.fault, f.kind, f.node, f.at_ms, f.pid, f.tid, f.detail);
    }
    if r.kept {
        println!("run directory: {}", r.workdir.display());
        if let Some(t) = &r.trace {
            println!("trace: {}", t.display());
        }
    }
}

fn main_inner(cli: Cli) -> Result<bool> {
    if !nix::unistd::geteuid().is_root() {
        bail!("reproducer must run as root (it loads BPF programs and creates network namespaces)");
    }
    match cli.command {
        Command::Run { scenario, schedule, keep } => {
            let (sc, faults) = load(&scenario, schedule.as_deref())?;
            let r = run(&sc, &faults, &RunOptions { keep, ..Default::default() })?;
            print_report(&r);
            Ok(true)
        }
        Command::Replay { scenario, schedule, runs, target_rate, keep } => {
            if runs == 0 || !(0.0..=1.0).contains(&target_rate) {
                bail!("--runs must be positive and --target-rate between 0 and 1");
            }
            let (sc, faults) = load(&scenario, Some(&schedule))?;
            let mut bugs = 0;
            for i in 1..=runs {
                let r = run(&sc, &faults, &RunOptions { keep, ..Default::default() })?;
                bugs += r.bug as u32;
                println!("run {i}/{runs}: bug {}, faults fired {}/{}{}", if r.bug { "yes" } else { "no" }, r.fired.len(), r.faults,
                    if keep { format!(", kept in {}", r.workdir.display()) } else { String::new() });
            }
            println!("replay rate: {bugs}/{runs}");
            Ok(bugs as f64 / runs as f64 >= target_rate)
        }
        Command::Profile { scenario, runs, functions_from, infrequent_below, out } => {
            use reproducer::profile;
            let sc = Scenario::load(&scenario)?;
            profile::check_output(&out)?;
            let opts = profile::ProfileOptions { runs, function_patterns: functions_from, infrequent_below_per_s: infrequent_below };
            let (p, candidates) = profile::profile(&sc, &opts)?;
            let list = profile::write(&p, &out)?;
            println!("{}", profile::summary(&p, candidates));
            println!("profile: {}", out.display());
            println!("infrequent functions: {}", list.display());
            Ok(true)
        }
    }
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
