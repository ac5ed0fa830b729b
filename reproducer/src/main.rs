//! The `reproducer` command line: run a scenario once with a schedule, replay it N times,
//! profile it fault-free, diagnose dumps, search for a schedule, or run one run spec.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};

use reproducer::analysis::diagnose::{self, diagnose, BaselineRates, Diagnosis};
use reproducer::analysis::profile;
use reproducer::analysis::timeline::Timeline;
use reproducer::model::plan::FaultPlan;
use reproducer::model::scenario::Scenario;
use reproducer::model::schedule::Schedule;
use reproducer::report;
use reproducer::search::runner::TestbedRunner;
use reproducer::search::{Outcome, Search, SearchConfig};
use reproducer::testbed::executor::{run, RunOptions, RunReport};
use reproducer::testbed::netbed;
use reproducer::testbed::spec::RunSpec;

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
    },
    /// Run one run spec (an attempt.toml a search wrote) in DIR; print its report as JSON
    RunAttempt {
        #[arg(long, value_name = "FILE")]
        spec: PathBuf,
        /// Where the run's directory goes
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
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

fn load(scenario: &Path, schedule: Option<&Path>) -> Result<(Scenario, FaultPlan)> {
    let sc = Scenario::load(scenario)?;
    let plan = match schedule {
        Some(path) => {
            let (schedule, origin) = Schedule::load(path)?;
            let plan = FaultPlan::new(&schedule, &sc, &origin)?;
            plan.check_functions(&sc, &origin)?;
            plan
        }
        None => FaultPlan::default(),
    };
    Ok((sc, plan))
}

fn print_report(r: &RunReport) {
    match &r.not_started {
        Some(why) => println!("bug: no — {why}"),
        None => println!("bug: {}", if r.bug { "yes (the oracle fired)" } else { "no" }),
    }
    if r.timed_out {
        println!("the workload hit run_timeout_s and was stopped");
    }
    println!("faults fired: {}/{}", r.fired.len(), r.faults);
    for f in &r.fired {
        println!(
            "  fault {} {} on {} at +{} ms, pid {} tid {} {}",
            f.fault, f.kind, f.node, f.at_ms, f.pid, f.tid, f.detail
        );
        if let Some(&n) = r.failed_after.get(f.fault - 1).filter(|&&n| n > 0) {
            println!("  fault {} then failed {n} more matching call(s)", f.fault);
        }
    }
    if r.kept {
        println!("run directory: {}", r.workdir.display());
        if let Some(t) = &r.trace {
            println!("trace: {}", t.display());
        }
    }
}

fn main_inner(cli: Cli) -> Result<bool> {
    if let Command::Diagnose {
        traces,
        scenario,
        profile,
        json,
    } = &cli.command
    {
        return diagnose_cmd(traces, scenario.as_deref(), profile.as_deref(), *json);
    }
    if !nix::unistd::geteuid().is_root() {
        bail!("reproducer must run as root (it loads BPF programs and creates network namespaces)");
    }
    match cli.command {
        Command::Run {
            scenario,
            schedule,
            keep,
        } => {
            let (sc, faults) = load(&scenario, schedule.as_deref())?;
            let r = run(
                &sc,
                &faults,
                &RunOptions {
                    keep,
                    ..Default::default()
                },
            )?;
            print_report(&r);
            Ok(true)
        }
        Command::Replay {
            scenario,
            schedule,
            runs,
            target_rate,
            keep,
        } => {
            if runs == 0 || !(0.0..=1.0).contains(&target_rate) {
                bail!("--runs must be positive and --target-rate between 0 and 1");
            }
            let (sc, faults) = load(&scenario, Some(&schedule))?;
            let mut bugs = 0;
            for i in 1..=runs {
                let r = run(
                    &sc,
                    &faults,
                    &RunOptions {
                        keep,
                        ..Default::default()
                    },
                )?;
                bugs += r.bug as u32;
                let bug = match &r.not_started {
                    Some(why) => format!("no — {why}"),
                    None => (if r.bug { "yes" } else { "no" }).to_string(),
                };
                println!(
                    "run {i}/{runs}: bug {bug}, faults fired {}/{}{}",
                    r.fired.len(),
                    r.faults,
                    if keep {
                        format!(", kept in {}", r.workdir.display())
                    } else {
                        String::new()
                    }
                );
            }
            println!("replay rate: {bugs}/{runs}");
            Ok(bugs as f64 / runs as f64 >= target_rate)
        }
        Command::Diagnose { .. } => unreachable!("handled above"),
        Command::RunAttempt { spec, dir } => {
            let report = RunSpec::load(&spec)?.run(&spec, &dir)?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(true)
        }
        Command::Reproduce {
            scenario,
            traces,
            profile,
            target_rate,
            max_runs,
            out,
            keep_bytes,
            jobs,
        } => reproduce_cmd(ReproduceArgs {
            scenario,
            traces,
            profile,
            target_rate,
            max_runs,
            out,
            keep_bytes,
            jobs,
        }),
        Command::Profile {
            scenario,
            runs,
            functions_from,
            infrequent_below,
            out,
            jobs,
        } => {
            let sc = Scenario::load(&scenario)?;
            let jobs = jobs_for(&sc, jobs)?;
            let scenario_file = std::fs::canonicalize(&scenario).unwrap_or(scenario);
            profile::check_output(&out)?;
            let opts = profile::ProfileOptions {
                runs,
                function_patterns: functions_from,
                infrequent_below_per_s: infrequent_below,
            };
            let (p, candidates) = reproducer::profiling::profile(&sc, &scenario_file, &opts, jobs)?;
            let list = profile::write(&p, &out)?;
            println!("{}", profile::summary(&p, candidates));
            println!("profile: {}", out.display());
            println!("infrequent functions: {}", list.display());
            Ok(true)
        }
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
fn note_missing_contexts(
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

struct ReproduceArgs {
    scenario: PathBuf,
    traces: Vec<PathBuf>,
    profile: Option<PathBuf>,
    target_rate: f64,
    max_runs: u32,
    out: PathBuf,
    keep_bytes: u64,
    jobs: Option<usize>,
}

/// `--jobs`, or half the cores (at least 1); 1 when the scenario's runs cannot go side by
/// side (a node on the host network), which is said.
fn jobs_for(sc: &Scenario, asked: Option<usize>) -> Result<usize> {
    if asked == Some(0) {
        bail!("--jobs must be at least 1");
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let jobs = asked.unwrap_or((cores / 2).max(1));
    if jobs > 1 && !netbed::runs_side_by_side(sc) {
        eprintln!(
            "reproducer: scenario {} has a node without an address (on the host network, its ports shared with other runs): its runs go one at a time, not {jobs} side by side",
            sc.name
        );
        return Ok(1);
    }
    Ok(jobs)
}

fn reproduce_cmd(a: ReproduceArgs) -> Result<bool> {
    if !(0.0..=1.0).contains(&a.target_rate) || a.target_rate == 0.0 || a.max_runs == 0 {
        bail!("--target-rate must be in (0, 1] and --max-runs positive");
    }
    let sc = Scenario::load(&a.scenario)?;
    let jobs = jobs_for(&sc, a.jobs)?;
    let timeline = Timeline::load(&a.traces, Some(&sc))?;
    let baseline = a
        .profile
        .as_deref()
        .map(|p| BaselineRates::load(p, Some(&sc)))
        .transpose()?;
    let mut d = diagnose(&timeline, Some(&sc), baseline.as_ref());
    note_missing_contexts(&mut d, &timeline, &sc, a.profile.as_deref())?;
    eprint!("{}", diagnose::render(&d, Some(&sc)));
    std::fs::create_dir_all(&a.out).map_err(|e| anyhow::anyhow!("--out {}: {e}", a.out.display()))?;
    write_shared(&a.out.join("diagnosis.json"), &serde_json::to_vec_pretty(&d)?)?;
    let cfg = SearchConfig {
        target_rate: a.target_rate,
        max_runs: a.max_runs,
        out: a.out.clone(),
        keep_bytes: a.keep_bytes,
        jobs,
    };
    // the runs' specs name the scenario file; a relative name would not survive a job
    // runner's other working directory
    let scenario_file = std::fs::canonicalize(&a.scenario).unwrap_or_else(|_| a.scenario.clone());
    let runner = TestbedRunner::new(&sc, &scenario_file, &timeline.functions);
    let result = Search::new(&sc, &d, cfg, &runner)?.run()?;
    if let Some(text) = report::schedule_text(&sc, &result) {
        write_shared(&a.out.join("schedule.toml"), text.as_bytes())?;
    }
    write_shared(
        &a.out.join("report.md"),
        report::render(&sc, &timeline, &d, &result, &a.out).as_bytes(),
    )?;
    write_shared(
        &a.out.join("result.json"),
        &serde_json::to_vec_pretty(&report::summary(&d, &result))?,
    )?;
    let rate = result
        .rate()
        .map(|c| c.summary())
        .unwrap_or_else(|| "never".into());
    match &result.outcome {
        Outcome::Reproduced => println!(
            "reproduced: {rate} in an independent replay, at level {}, {} schedules, {} runs (+{} replay runs), {:.0} s{}",
            result.level,
            result.schedules_tried,
            result.runs,
            result.replay.map(|r| r.runs).unwrap_or(0),
            result.seconds,
            side_by_side(&result)
        ),
        Outcome::Missed(why) => println!("not reproduced at the target: {why}"),
    }
    println!(
        "schedule: {}\nreport: {}",
        a.out.join("schedule.toml").display(),
        a.out.join("report.md").display()
    );
    if result.interrupted {
        bail!(
            "interrupted: what the search found so far is in {}",
            a.out.display()
        );
    }
    Ok(matches!(result.outcome, Outcome::Reproduced))
}

/// ", --jobs N (K surplus runs)" when runs went side by side.
fn side_by_side(r: &reproducer::search::SearchResult) -> String {
    if r.jobs > 1 {
        format!(", --jobs {} ({} surplus runs)", r.jobs, r.surplus_runs)
    } else {
        String::new()
    }
}

/// Results are meant to be read and shared: mode 0644.
fn write_shared(path: &Path, bytes: &[u8]) -> Result<()> {
    tracedump::atomic::write_bytes(path, tracedump::atomic::SHARED, bytes)
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
