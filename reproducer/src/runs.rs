//! The commands that run the scenario on the test bed (`run`, `replay`, `reproduce`,
//! `profile`, `run-attempt`): root, the accounts the scenario names, then one function each.
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use reproducer::analysis::chain;
use reproducer::analysis::diagnose::{self, diagnose, BaselineRates};
use reproducer::analysis::drift;
use reproducer::analysis::profile;
use reproducer::analysis::timeline::Timeline;
use reproducer::model::plan::FaultPlan;
use reproducer::model::scenario::Scenario;
use reproducer::model::schedule::Schedule;
use reproducer::report;
use reproducer::search::engine::{Engine, REPORT_FILE};
use reproducer::search::{Outcome, Progress, Search, SearchConfig};
use reproducer::testbed::executor::{run, RunOptions, RunReport};
use reproducer::testbed::netbed;
use reproducer::testbed::runas::check_accounts;
use reproducer::testbed::runner::TestbedRunner;
use reproducer::testbed::spec::RunSpec;

use crate::{note_missing_contexts, Command};

pub(crate) fn main(command: Command) -> Result<bool> {
    if !nix::unistd::geteuid().is_root() {
        bail!("reproducer must run as root (it loads BPF programs and creates network namespaces)");
    }
    match command {
        Command::Run {
            scenario,
            schedule,
            keep,
        } => run_cmd(&scenario, schedule.as_deref(), keep),
        Command::Replay {
            scenario,
            schedule,
            runs,
            target_rate,
            keep,
        } => replay_cmd(&scenario, &schedule, runs, target_rate, keep),
        Command::RunAttempt { spec, dir } => {
            let report = RunSpec::load(&spec)?.run(&spec, &dir)?;
            let json = serde_json::to_string(&report)?;
            // where a search on another host reads it back (search::engine)
            write_shared(&dir.join(REPORT_FILE), json.as_bytes())?;
            println!("{json}");
            Ok(true)
        }
        Command::Reproduce {
            scenario,
            traces,
            profile,
            target_rate,
            max_runs,
            max_time,
            out,
            keep_bytes,
            jobs,
            runner,
        } => reproduce_cmd(ReproduceArgs {
            scenario,
            traces,
            profile,
            target_rate,
            max_runs,
            max_time: max_time.into(),
            out,
            keep_bytes,
            jobs,
            runner,
        }),
        Command::Profile {
            scenario,
            runs,
            functions_from,
            infrequent_below,
            out,
            jobs,
        } => profile_cmd(
            &scenario,
            &out,
            jobs,
            profile::ProfileOptions {
                runs,
                function_patterns: functions_from,
                infrequent_below_per_s: infrequent_below,
            },
        ),
        Command::Diagnose { .. } => unreachable!("main_inner runs diagnose itself"),
    }
}

/// The scenario, checked for what a run needs beyond its text: the accounts it names.
fn load_scenario(path: &Path) -> Result<Scenario> {
    let sc = Scenario::load(path)?;
    check_accounts(&sc)?;
    Ok(sc)
}

fn load(scenario: &Path, schedule: Option<&Path>) -> Result<(Scenario, FaultPlan)> {
    let sc = load_scenario(scenario)?;
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

fn run_cmd(scenario: &Path, schedule: Option<&Path>, keep: bool) -> Result<bool> {
    let (sc, faults) = load(scenario, schedule)?;
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

fn replay_cmd(scenario: &Path, schedule: &Path, runs: u32, target_rate: f64, keep: bool) -> Result<bool> {
    if runs == 0 || !(0.0..=1.0).contains(&target_rate) {
        bail!("--runs must be positive and --target-rate between 0 and 1");
    }
    let (sc, faults) = load(scenario, Some(schedule))?;
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

fn profile_cmd(
    scenario: &Path,
    out: &Path,
    jobs: Option<usize>,
    opts: profile::ProfileOptions,
) -> Result<bool> {
    let sc = load_scenario(scenario)?;
    let jobs = jobs_for(&sc, jobs)?;
    let scenario_file = std::fs::canonicalize(scenario).unwrap_or_else(|_| scenario.to_path_buf());
    profile::check_output(out)?;
    let (p, candidates) = reproducer::testbed::profiling::profile(&sc, &scenario_file, &opts, jobs)?;
    let list = profile::write(&p, out)?;
    println!("{}", profile::summary(&p, candidates));
    println!("profile: {}", out.display());
    println!("infrequent functions: {}", list.display());
    Ok(true)
}

struct ReproduceArgs {
    scenario: PathBuf,
    traces: Vec<PathBuf>,
    profile: Option<PathBuf>,
    target_rate: f64,
    max_runs: u32,
    max_time: std::time::Duration,
    out: PathBuf,
    keep_bytes: u64,
    jobs: Option<usize>,
    runner: Engine,
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

fn reproduce_cmd(mut a: ReproduceArgs) -> Result<bool> {
    if !(0.0..=1.0).contains(&a.target_rate) || a.target_rate == 0.0 || a.max_runs == 0 {
        bail!("--target-rate must be in (0, 1] and --max-runs positive");
    }
    let sc = load_scenario(&a.scenario)?;
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
    if !a.runner.is_local() {
        // the runs' specs and directories are named by their paths on the engine's nodes
        a.out =
            std::fs::canonicalize(&a.out).map_err(|e| anyhow::anyhow!("--out {}: {e}", a.out.display()))?;
        eprintln!(
            "reproducer: attempts run on {}, up to {jobs} at once, their specs and run directories in {} (every node must see it at that path)",
            a.runner,
            a.out.display()
        );
    }
    write_shared(&a.out.join("diagnosis.json"), &serde_json::to_vec_pretty(&d)?)?;
    let cfg = SearchConfig {
        target_rate: a.target_rate,
        max_runs: a.max_runs,
        max_time: a.max_time,
        out: a.out.clone(),
        keep_bytes: a.keep_bytes,
        jobs,
    };
    // the runs' specs name the scenario file; a relative name would not survive a job
    // runner's other working directory
    let scenario_file = std::fs::canonicalize(&a.scenario).unwrap_or_else(|_| a.scenario.clone());
    let runner = TestbedRunner::new(&sc, &scenario_file, &timeline.functions).on(a.runner.clone());
    let result = Search::new(&sc, &d, cfg, &runner, &Stderr)?.run()?;
    let chain = causal_chain(&sc, &timeline, &result, &a.out, a.profile.as_deref())?;
    let drift = testbed_drift(&sc, &timeline, &result, &a.out, a.profile.as_deref())?;
    if drift.is_some() {
        write_shared(
            &a.out.join("diagnosis.json"),
            &serde_json::to_vec_pretty(&crate::with_drift(&d, drift.as_ref())?)?,
        )?;
    }
    if let Some(text) = report::schedule_text(&sc, &result) {
        write_shared(&a.out.join("schedule.toml"), text.as_bytes())?;
    }
    write_shared(
        &a.out.join("report.md"),
        report::render(&sc, &timeline, &d, &result, &a.out, &chain, drift.as_ref()).as_bytes(),
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
    if let Some(error) = &result.error {
        bail!(
            "the search stopped: {error}; what it found so far is in {}",
            a.out.display()
        );
    }
    Ok(matches!(result.outcome, Outcome::Reproduced))
}

/// The chains from the accepted schedule's faults to the failure (none without one), and
/// their flow arrows drawn into the timelines of the reproduced runs.
fn causal_chain(
    sc: &Scenario,
    timeline: &Timeline,
    result: &reproducer::search::SearchResult,
    out: &Path,
    profile_file: Option<&Path>,
) -> Result<Vec<chain::Chain>> {
    let Some(schedule) = &result.schedule else {
        return Ok(Vec::new());
    };
    let profile = profile_file.map(profile::load).transpose()?;
    let found = chain::of_search(out, schedule, sc, timeline, profile.as_ref());
    let flows: Vec<(PathBuf, Vec<usize>)> = found.iter().flat_map(|c| c.flows.clone()).collect();
    for problem in chain::write_timelines(&flows) {
        eprintln!("    no chain arrows: {problem}");
    }
    Ok(found)
}

/// The testbed's side (a run the search kept, else what the profile kept of its first
/// fault-free run) compared with production's; when no schedule was found, its differences
/// go to stderr first: the testbed is the first suspect.
fn testbed_drift(
    sc: &Scenario,
    timeline: &Timeline,
    result: &reproducer::search::SearchResult,
    out: &Path,
    profile_file: Option<&Path>,
) -> Result<Option<drift::Drift>> {
    let side = match drift::from_search(out, sc) {
        Some(side) => Some(side),
        None => crate::profiled_testbed(profile_file, sc)?,
    };
    let Some((label, side)) = side else {
        return Ok(None);
    };
    let found = drift::compare(&timeline.environments, &side, sc, &label);
    if result.schedule.is_none() {
        for line in drift::headlines(&found) {
            eprintln!("reproducer: {line}");
        }
    }
    Ok(Some(found))
}

/// The search's progress, a line at a time on stderr.
struct Stderr;

impl Progress for Stderr {
    fn line(&self, text: &str) {
        eprintln!("{text}");
    }
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
