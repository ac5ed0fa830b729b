//! The reproduction search: from the diagnosis's candidates to a schedule that makes the bug
//! happen at the target rate. Level 1 injects the candidates in production order with their
//! inputs; level 2 moves syscall faults to the Nth call and gives process and network faults
//! the functions that preceded them in production (the paper's Algorithm 1, with amplification
//! to the node that really ran the function); level 3 moves a process fault to the call sites
//! inside the last of those functions. Every run's report and trace feed the next choice; a
//! bug is confirmed at once by the sequential test; the winner is then minimized, and the
//! minimized schedule replayed afresh: after dozens of schedules, the one that passed the
//! sequential test may have passed by luck, so the result is the rate of that independent
//! replay. A fault that stops a node from starting is a result of its attempt, not an error;
//! Ctrl-C ends the search with what it has.
//!
//! With `jobs` > 1 runs go side by side, and the search reaches the same schedules and the
//! same result as with one: where a loop knows its next candidates (level 1's list, the
//! Nth-call search, level 3's sites) the candidate due and the next ones run as one batch,
//! and the results are consumed strictly in candidate order, as if each ran when its turn
//! came (a later candidate's result waits, and is dropped when an earlier one ends the
//! loop); confirmation runs go in batches and are fed to the sequential test in run-index
//! order until it decides; the replay's runs are independent. Runs made but not needed are
//! surplus: removed, not counted, listed in the attempt log. Level 2's context growth stays
//! one run at a time: each trial depends on the last one's result.
use std::ops::ControlFlow::{self, Break, Continue};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};

pub mod attempts;
pub mod confirm;
pub mod retention;
pub mod runner;

use crate::analysis::diagnose::{Candidate, Diagnosis, FaultGuess};
use crate::model::plan::FaultPlan;
use crate::model::scenario::Scenario;
use crate::model::schedule::{Action, Context, Direction, Fault, FaultKind, Origin, Schedule, Until};
use crate::model::{local_spec, resolve_binary};
use attempts::{Attempt, AttemptLog};
use confirm::Confirmation;
use runner::{Feedback, Runner};

/// Level-2 syscall faults try the 2nd..Nth matching call at most up to this N.
const MAX_NTH: u32 = 50;
/// A failure production saw this many times in a row at most is also tried as many times.
const MAX_REPEAT: u32 = 4;
/// Level-1 and level-2 syscall candidates tried, best ranked first.
const MAX_SYSCALL_CANDIDATES: usize = 8;
const MAX_SITES: usize = 40;
/// Network faults tried one at a time at level 1 (best ranked first) when all of them
/// together did not show the bug: each costs a run before any syscall candidate is tried,
/// and the diagnosis ranks the partitions that matter first, so a few are enough.
const MAX_LONE_NETWORK_FAULTS: usize = 4;
/// Runs of the independent replay of the accepted schedule (the paper's confirmation size).
pub const REPLAY_RUNS: u32 = 10;

#[derive(Clone, Debug)]
pub struct SearchConfig {
    pub target_rate: f64,
    pub max_runs: u32,
    pub out: PathBuf,
    /// byte budget for kept run directories (`--keep-bytes`)
    pub keep_bytes: u64,
    /// runs side by side at most (`--jobs`; 1: one at a time)
    pub jobs: usize,
}

/// One fault of a plan, with the candidate it came from.
#[derive(Clone, Debug, PartialEq)]
struct Planned {
    candidate: usize,
    fault: Fault,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Plan {
    faults: Vec<Planned>,
}

impl Plan {
    fn schedule(&self) -> Schedule {
        Schedule {
            faults: self.faults.iter().map(|p| p.fault.clone()).collect(),
        }
    }
}

/// A run made (or the reason it could not be): `ran` is false when no run happened (the
/// schedule did not resolve against the scenario), so that it does not count.
struct RunResult {
    ran: bool,
    result: Result<Feedback>,
}

/// A candidate's run made ahead of its turn, waiting in its `ahead-N` directory.
struct Ahead {
    schedule: Schedule,
    what: String,
    dir: PathBuf,
    run: RunResult,
    /// the attempt whose batch made it
    launched_by: u32,
}

/// Runs `schedule` once on `runner`, in `dir`.
fn run_one(runner: &dyn Runner, scenario: &Scenario, schedule: &Schedule, dir: &Path) -> RunResult {
    let origin = Origin {
        name: dir.join("schedule.toml").display().to_string(),
        text: None,
    };
    match FaultPlan::new(schedule, scenario, &origin) {
        Ok(plan) => RunResult {
            ran: true,
            result: runner.run(&plan, dir),
        },
        Err(e) => RunResult {
            ran: false,
            result: Err(e),
        },
    }
}

/// Runs `jobs` side by side; results in the order given. Plain scoped threads rather than
/// tokio: each job blocks on one run (a child process) and a batch holds at most `--jobs`
/// of them; there is nothing for an event loop to multiplex.
fn run_side_by_side(
    runner: &dyn Runner,
    scenario: &Scenario,
    jobs: &[(Schedule, PathBuf)],
) -> Vec<RunResult> {
    if let [(schedule, dir)] = jobs {
        return vec![run_one(runner, scenario, schedule, dir)];
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|(schedule, dir)| scope.spawn(move || run_one(runner, scenario, schedule, dir)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| RunResult {
                    ran: true,
                    result: Err(anyhow::anyhow!("the run's thread panicked")),
                })
            })
            .collect()
    })
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Reproduced,
    Missed(String),
}

/// Goes on with the value, or returns the search's outcome from the enclosing function.
macro_rules! go {
    ($e:expr) => {
        match $e? {
            Continue(v) => v,
            Break(outcome) => return Ok(Break(outcome)),
        }
    };
}

/// Where the search goes next: on with a value, or stopped with its outcome.
type Step<T> = Result<ControlFlow<Outcome, T>>;

pub struct SearchResult {
    pub outcome: Outcome,
    pub schedule: Option<Schedule>,
    pub confirmation: Option<Confirmation>,
    pub level: u8,
    pub attempts: Vec<Attempt>,
    pub runs: u32,
    pub schedules_tried: u32,
    pub runs_to_first: Option<u32>,
    /// runs until a schedule met the target (minimization runs come after)
    pub runs_to_confirmed: Option<u32>,
    pub minimized: Vec<String>,
    /// per fault of the schedule: what production showed and what context it got
    pub chosen: Vec<String>,
    pub seconds: f64,
    /// the accepted schedule replayed afresh (REPLAY_RUNS runs, not counted in `runs`): the
    /// result; None when nothing was accepted
    pub replay: Option<Confirmation>,
    /// Ctrl-C or SIGTERM ended the search
    pub interrupted: bool,
    /// attempts whose run directories were removed, and the bytes that freed
    pub pruned: retention::Pruned,
    /// runs made side by side that the search did not need (not in `runs`)
    pub surplus_runs: u32,
    pub jobs: usize,
}

impl SearchResult {
    /// The rate the result stands on: the independent replay's, else the search's own.
    pub fn rate(&self) -> Option<Confirmation> {
        self.replay.or(self.confirmation)
    }
}

/// The level a schedule needs: 3 with an offset inside a function, 2 with a context
/// function or an Nth call, else 1.
pub fn level_of(schedule: &Schedule) -> u8 {
    let level = |f: &Fault| {
        if f.context.offset.is_some() {
            3
        } else if !f.context.after_functions.is_empty()
            || matches!(f.action, Action::Syscall { nth, .. } if nth > 1)
        {
            2
        } else {
            1
        }
    };
    schedule.faults.iter().map(level).max().unwrap_or(0)
}

pub struct Search<'a> {
    scenario: &'a Scenario,
    causes: Vec<&'a Candidate>,
    cfg: SearchConfig,
    runner: &'a dyn Runner,
    log: AttemptLog,
    runs: u32,
    best: Option<(Plan, Confirmation, u8)>,
    runs_to_first: Option<u32>,
    level: u8,
    started: Instant,
    /// schedules already run, so no two attempts run the same schedule
    seen: std::collections::HashMap<Schedule, Feedback>,
    interrupted: bool,
    /// attempts whose runs are kept whatever their age
    best_attempt: Option<u32>,
    first_bug_attempt: Option<u32>,
    /// the candidates the current loop will evaluate, in order (what may run ahead)
    ahead: Vec<(Schedule, String)>,
    /// candidates' runs made ahead of their turn
    prefetched: Vec<Ahead>,
    ahead_seq: u32,
    surplus_runs: u32,
    /// surplus confirmation runs of the confirmation just made, for its attempt
    pending_surplus: Vec<String>,
}

fn symbol_of(spec: &str) -> &str {
    spec.rsplit(':').next().unwrap_or(spec)
}

fn names_last(functions: &[String]) -> &str {
    functions.last().map(|s| symbol_of(s)).unwrap_or("")
}

impl<'a> Search<'a> {
    /// A search that keeps its attempts under `cfg.out` (created) and runs on `runner`.
    pub fn new(
        scenario: &'a Scenario,
        diagnosis: &'a Diagnosis,
        cfg: SearchConfig,
        runner: &'a dyn Runner,
    ) -> Result<Search<'a>> {
        let causes: Vec<&Candidate> = diagnosis.causes().filter(|c| c.node.is_some()).collect();
        let log = AttemptLog::create(&cfg.out, cfg.keep_bytes)?;
        Ok(Search {
            scenario,
            causes,
            cfg,
            runner,
            log,
            runs: 0,
            best: None,
            runs_to_first: None,
            level: 0,
            started: Instant::now(),
            seen: Default::default(),
            interrupted: false,
            best_attempt: None,
            first_bug_attempt: None,
            ahead: Vec::new(),
            prefetched: Vec::new(),
            ahead_seq: 0,
            surplus_runs: 0,
            pending_surplus: Vec::new(),
        })
    }

    fn node_name(&self, i: usize) -> String {
        self.scenario.nodes[i].name.clone()
    }

    /// The level-1 fault for candidate `c`: its kind and inputs, no context.
    fn fault_of(&self, c: &Candidate) -> Option<Fault> {
        let node = self.node_name(c.node?);
        let action = match &c.guess {
            FaultGuess::Syscall {
                syscall,
                errno,
                path,
                short,
                persistent,
                ..
            } => Action::Syscall {
                syscall: syscall.clone(),
                errno: Some(errno.clone()),
                path: path.clone(),
                nth: 1,
                short: *short,
                until: persistent.then_some(Until::End),
            },
            FaultGuess::Crash { signal, .. } => Action::Crash {
                signal: Some(signal.clone()),
            },
            FaultGuess::Pause { duration_ms, .. } => Action::Pause {
                signal: None,
                duration_ms: (*duration_ms).max(1),
            },
            FaultGuess::Partition { peer, duration_ms } => {
                let has_addresses = self.scenario.nodes[c.node?].address.is_some()
                    && self.scenario.nodes[*peer].address.is_some();
                if !has_addresses {
                    return None;
                }
                Action::Partition {
                    peers: vec![self.node_name(*peer)],
                    direction: Direction::Both,
                    duration_ms: (*duration_ms).max(1),
                }
            }
        };
        Some(Fault {
            node,
            context: Context::default(),
            action,
        })
    }

    /// Candidates `members` (indexes into causes) as a plan in production order.
    fn plan_of(&self, members: &[usize]) -> Plan {
        let mut idx: Vec<usize> = members.to_vec();
        idx.sort_by_key(|&i| self.causes[i].at_ns);
        Plan {
            faults: idx
                .into_iter()
                .filter_map(|i| {
                    Some(Planned {
                        candidate: i,
                        fault: self.fault_of(self.causes[i])?,
                    })
                })
                .collect(),
        }
    }

    fn is_syscall(&self, i: usize) -> bool {
        matches!(self.causes[i].guess, FaultGuess::Syscall { .. })
    }

    pub fn run(mut self) -> Result<SearchResult> {
        if self.causes.is_empty() {
            bail!("the dumps show no fault to inject on a scenario node (see `reproducer diagnose`): nothing to search");
        }
        let outcome = match self.levels()? {
            Break(outcome) => outcome,
            Continue(()) => Outcome::Missed(self.exhausted_reason()),
        };
        let mut outcome = outcome;
        let mut minimized = Vec::new();
        let runs_to_confirmed = matches!(outcome, Outcome::Reproduced).then_some(self.runs);
        let mut replay = None;
        let (plan, confirmation) = match self.best.clone() {
            Some((plan, conf, _)) if matches!(outcome, Outcome::Reproduced) => {
                let (plan, conf) = self.minimize(plan, conf, &mut minimized)?;
                if !self.interrupted {
                    let r = self.replay(&plan.schedule())?;
                    if !r.met {
                        outcome = Outcome::Missed(format!(
                            "the accepted schedule passed the search's test ({}) but its independent replay reproduced the bug {} only, below the target",
                            conf.summary(),
                            r.summary()
                        ));
                    }
                    replay = Some(r);
                }
                (Some(plan), Some(conf))
            }
            Some((plan, conf, _)) => (Some(plan), Some(conf)),
            None => (None, None),
        };
        if self.interrupted {
            outcome = Outcome::Missed(format!(
                "interrupted (Ctrl-C) after {} runs; {}",
                self.runs,
                self.best_words()
            ));
        }
        let chosen = plan
            .iter()
            .flat_map(|p| &p.faults)
            .map(|p| self.explain(p))
            .collect();
        let schedule = plan.map(|p| p.schedule());
        let level = schedule.as_ref().map(level_of).unwrap_or(self.level);
        self.discard_ahead()?;
        let keep_bytes = self.log.keep_bytes();
        let (attempts, pruned) = self.log.finish()?;
        if !pruned.attempts.is_empty() {
            eprintln!(
                "run directories of {} attempts removed ({:.1} MB) to bound the disk; kept: the best, the first bug, the last {}, within --keep-bytes {keep_bytes}",
                pruned.attempts.len(),
                pruned.bytes as f64 / 1e6,
                retention::KEEP_LAST,
            );
        }
        let schedules_tried = attempts
            .iter()
            .filter(|a| !a.what.starts_with("minimize") && a.level > 0)
            .count() as u32;
        Ok(SearchResult {
            outcome,
            schedule,
            confirmation,
            level,
            attempts,
            runs: self.runs,
            schedules_tried,
            runs_to_first: self.runs_to_first,
            runs_to_confirmed,
            minimized,
            chosen,
            seconds: self.started.elapsed().as_secs_f64(),
            replay,
            interrupted: self.interrupted,
            pruned,
            surplus_runs: self.surplus_runs,
            jobs: self.cfg.jobs.max(1),
        })
    }

    /// Removes the runs made ahead that the search never came to, and says so in the log.
    fn discard_ahead(&mut self) -> Result<()> {
        for a in std::mem::take(&mut self.prefetched) {
            let _ = std::fs::remove_dir_all(&a.dir);
            if a.run.ran {
                self.surplus_runs += 1;
            }
            self.log.note_surplus(
                a.launched_by,
                format!(
                    "{} ({}) ran side by side with this attempt; the search did not come to it: removed",
                    a.what,
                    a.schedule
                        .to_toml()
                        .lines()
                        .filter(|l| !l.is_empty())
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            )?;
        }
        Ok(())
    }

    fn jobs(&self) -> usize {
        self.cfg.jobs.max(1)
    }

    /// Runs `jobs` side by side (see [`run_side_by_side`]).
    fn run_batch(&self, jobs: &[(Schedule, PathBuf)]) -> Vec<RunResult> {
        run_side_by_side(self.runner, self.scenario, jobs)
    }

    /// The loop about to run sets the candidates it will evaluate, in order.
    fn expect(&mut self, plans: &[(Plan, String)]) {
        self.ahead = plans.iter().map(|(p, w)| (p.schedule(), w.clone())).collect();
    }

    /// The candidates to run beside `schedule`: those after it in the current loop's list,
    /// not run yet, within `--jobs` and the run budget; none outside such a loop.
    fn next_ahead(&self, schedule: &Schedule) -> Vec<(Schedule, String)> {
        let Some(at) = self.ahead.iter().position(|(s, _)| s == schedule) else {
            return Vec::new();
        };
        let budget =
            (self.cfg.max_runs.saturating_sub(self.runs + 1) as usize).saturating_sub(self.prefetched.len());
        let room = (self.jobs() - 1).min(budget);
        let mut out: Vec<(Schedule, String)> = Vec::new();
        for (s, what) in &self.ahead[at + 1..] {
            if out.len() >= room || self.interrupted {
                break;
            }
            let taken = s == schedule
                || self.seen.contains_key(s)
                || self.prefetched.iter().any(|a| &a.schedule == s)
                || out.iter().any(|(o, _)| o == s);
            if !taken {
                out.push((s.clone(), what.clone()));
            }
        }
        out
    }

    /// The run of the candidate due: made ahead already (its directory becomes the next
    /// attempt's), or made now with the next candidates beside it.
    fn run_or_take(&mut self, schedule: &Schedule) -> Result<(PathBuf, RunResult)> {
        if let Some(i) = self.prefetched.iter().position(|a| &a.schedule == schedule) {
            let a = self.prefetched.remove(i);
            return Ok((self.log.adopt(&a.dir)?, a.run));
        }
        let dir = self.log.next_dir(schedule)?;
        let mut jobs = vec![(schedule.clone(), dir.clone())];
        let extras = self.next_ahead(schedule);
        for (s, _) in &extras {
            self.ahead_seq += 1;
            jobs.push((s.clone(), self.log.ahead_dir(self.ahead_seq, s)?));
        }
        let mut results = self.run_batch(&jobs).into_iter();
        let Some(first) = results.next() else {
            bail!("a batch of runs gave no result");
        };
        let launched_by = self.log.next_number();
        for (((schedule, dir), run), (_, what)) in jobs.into_iter().skip(1).zip(results).zip(extras) {
            self.prefetched.push(Ahead {
                schedule,
                what,
                dir,
                run,
                launched_by,
            });
        }
        Ok((dir, first))
    }

    /// The accepted schedule replayed REPLAY_RUNS times afresh, in OUT/replay/: its own
    /// runs, outside the search's budget and its selection.
    fn replay(&mut self, schedule: &Schedule) -> Result<Confirmation> {
        let dir = self.cfg.out.join("replay");
        std::fs::create_dir_all(&dir)?;
        tracedump::atomic::write_bytes(
            &dir.join("schedule.toml"),
            tracedump::atomic::SHARED,
            schedule.to_toml().as_bytes(),
        )?;
        let (mut bugs, mut runs) = (0, 0);
        let mut next = 1;
        'batches: while next <= REPLAY_RUNS {
            let n = (self.jobs() as u32).min(REPLAY_RUNS - next + 1);
            let mut jobs = Vec::new();
            for k in next..next + n {
                let sub = dir.join(format!("run-{k:02}"));
                std::fs::create_dir_all(&sub)?;
                jobs.push((schedule.clone(), sub));
            }
            for (k, run) in (next..).zip(self.run_batch(&jobs)) {
                let bug = match run.result {
                    Ok(fb) => fb.bug,
                    Err(_) if self.runner.interrupted() => {
                        self.interrupted = true;
                        break 'batches;
                    }
                    Err(e) => {
                        eprintln!("    replay: run {k}: the run failed: {e:#}");
                        false
                    }
                };
                bugs += bug as u32;
                runs += 1;
                eprintln!(
                    "[replay | run {k}/{REPLAY_RUNS}] the accepted schedule afresh: bug {}",
                    if bug { "yes" } else { "no" }
                );
            }
            next += n;
        }
        let (low, high) = confirm::wilson(bugs, runs);
        let met = runs == REPLAY_RUNS && bugs as f64 >= self.cfg.target_rate * runs as f64;
        Ok(Confirmation {
            bugs,
            runs,
            met,
            low,
            high,
        })
    }

    fn explain(&self, p: &Planned) -> String {
        let c = self.causes[p.candidate];
        let f = &p.fault;
        let mut context = Vec::new();
        if let Action::Syscall { nth, .. } = f.action {
            if nth > 1 {
                context.push(format!("at the matching call #{nth}"));
            }
        }
        let functions = &f.context.after_functions;
        if !functions.is_empty() {
            let names: Vec<&str> = functions.iter().map(|s| symbol_of(s)).collect();
            context.push(format!("after {}", names.join(" → ")));
        }
        if let Some(off) = f.context.offset {
            context.push(format!("at +{off:#x} inside {}", names_last(functions)));
        }
        if c.node.map(|n| self.node_name(n)).as_deref() != Some(f.node.as_str()) {
            context.push(format!(
                "moved to {} (it ran the context there: roles differ between runs)",
                f.node
            ));
        }
        let context = if context.is_empty() {
            "as soon as it is due (no context needed)".to_string()
        } else {
            context.join(", ")
        };
        format!(
            "{} — {context}. Production: {}.",
            self.describe(p.candidate),
            c.why
        )
    }

    fn exhausted_reason(&self) -> String {
        match &self.best {
            Some((_, c, _)) => format!(
                "every level was tried; the best schedule reproduced the bug {} (below the target)",
                c.summary()
            ),
            None => "every level was tried and no schedule made the bug happen".into(),
        }
    }

    fn levels(&mut self) -> Step<()> {
        go!(self.check_oracle());
        let backbone: Vec<usize> = (0..self.causes.len()).filter(|&i| !self.is_syscall(i)).collect();
        let syscalls: Vec<usize> = (0..self.causes.len())
            .filter(|&i| self.is_syscall(i))
            .take(MAX_SYSCALL_CANDIDATES)
            .collect();
        self.level = 1;
        let mut bases = Vec::new();
        let with_syscall: Vec<(Plan, String)> = syscalls
            .iter()
            .map(|&s| {
                let mut members = backbone.clone();
                members.push(s);
                let what = format!("{} with its production inputs", self.describe(s));
                (self.plan_of(&members), what)
            })
            .collect();
        if !backbone.is_empty() {
            let plan = self.plan_of(&backbone);
            let what = "the process and network faults in production order".to_string();
            let mut expected = vec![(plan.clone(), what.clone())];
            expected.extend(with_syscall.iter().cloned());
            self.expect(&expected);
            let whole = go!(self.evaluate(&plan, what));
            if !whole.bug {
                // the subsets that showed the bug are refined first at level 2
                bases.extend(go!(self.one_network_fault_at_a_time(&backbone)));
            }
            bases.push(plan);
        }
        self.expect(&with_syscall);
        for (plan, what) in with_syscall {
            go!(self.evaluate(&plan, what));
            bases.push(plan);
        }
        self.expect(&[]);
        self.level = 2;
        let mut refined = Vec::new();
        for base in bases {
            refined.push(go!(self.level2(base)));
        }
        self.level = 3;
        for plan in refined {
            go!(self.level3(plan));
        }
        Ok(Continue(()))
    }

    /// Level 1 when all of the backbone together did not show the bug and it holds several
    /// network faults: each of them alone with the process faults, best ranked first.
    /// Diagnosed partitions injected together can cut off every member, so that the system
    /// stops instead of misbehaving; production's failure may have needed only one of them.
    /// Returns the plans that showed the bug.
    fn one_network_fault_at_a_time(&mut self, backbone: &[usize]) -> Step<Vec<Plan>> {
        let is_network = |i: &usize| matches!(self.causes[*i].guess, FaultGuess::Partition { .. });
        let network: Vec<usize> = backbone.iter().copied().filter(is_network).collect();
        let process: Vec<usize> = backbone.iter().copied().filter(|i| !is_network(i)).collect();
        let mut showed_bug = Vec::new();
        if network.len() < 2 {
            return Ok(Continue(showed_bug));
        }
        // causes are in rank order, so the first ones are the best ranked
        let lone: Vec<(Plan, String)> = network
            .iter()
            .take(MAX_LONE_NETWORK_FAULTS)
            .map(|&n| {
                let mut members = process.clone();
                members.push(n);
                let what = format!("{} alone with the process faults", self.describe(n));
                (self.plan_of(&members), what)
            })
            .collect();
        self.expect(&lone);
        for (plan, what) in lone {
            if go!(self.evaluate(&plan, what)).bug {
                showed_bug.push(plan);
            }
        }
        Ok(Continue(showed_bug))
    }

    fn describe(&self, i: usize) -> String {
        let c = self.causes[i];
        match &c.guess {
            FaultGuess::Syscall {
                syscall,
                errno,
                path,
                short,
                persistent,
                ..
            } => format!(
                "{}{syscall} failing with {errno}{}{} on {}",
                short
                    .map(|b| format!("a short {syscall} of {b} bytes, then "))
                    .unwrap_or_default(),
                if *persistent { " from then on" } else { "" },
                path.as_ref().map(|p| format!(" ({p})")).unwrap_or_default(),
                c.who
            ),
            FaultGuess::Crash { signal, .. } => format!("crash ({signal}) of {}", c.who),
            FaultGuess::Pause { duration_ms, .. } => format!("pause of {} for {duration_ms} ms", c.who),
            FaultGuess::Partition { peer, duration_ms } => format!(
                "partition {}–{} for {duration_ms} ms",
                c.who,
                self.node_name(*peer)
            ),
        }
    }

    fn check_oracle(&mut self) -> Step<()> {
        let fb = go!(self.evaluate(
            &Plan::default(),
            "fault-free run: the oracle must not fire".into()
        ));
        if fb.bug {
            let dir = self.log.attempts()[0].dir.display().to_string();
            bail!("the oracle fires in a fault-free run (attempt dir {dir}): it must exit 0 only when the bug happened; fix the scenario's [oracle] before searching");
        }
        Ok(Continue(()))
    }

    /// Level 2 for one level-1 plan: the Nth call for its syscall fault, then the functions
    /// that preceded each fault in production, nearest fault to the failure first.
    fn level2(&mut self, mut plan: Plan) -> Step<Plan> {
        if let Some(k) = plan.faults.iter().position(|p| self.is_syscall(p.candidate)) {
            plan = go!(self.nth_search(plan, k));
            plan = go!(self.repeat_search(plan, k));
        }
        for k in (0..plan.faults.len()).rev() {
            plan = go!(self.find_context(plan, k));
        }
        // a later fault's context may only be reachable once an earlier fault has its own
        // (a crash in the right place makes the restarted node run its recovery code)
        for k in (0..plan.faults.len()).rev() {
            if plan.faults[k].fault.context.after_functions.is_empty() {
                plan = go!(self.find_context(plan, k));
            }
        }
        Ok(Continue(plan))
    }

    fn nth_search(&mut self, plan: Plan, k: usize) -> Step<Plan> {
        let what = self.describe(plan.faults[k].candidate);
        let trials: Vec<(Plan, String)> = (2..=MAX_NTH)
            .map(|nth| {
                let mut trial = plan.clone();
                if let Action::Syscall { nth: n, .. } = &mut trial.faults[k].fault.action {
                    *n = nth;
                }
                (trial, format!("{what}, call #{nth}"))
            })
            .collect();
        self.expect(&trials);
        for (nth, (trial, what)) in (2..).zip(trials) {
            let fb = go!(self.evaluate(&trial, what));
            if !fb.fired[k] && fb.matched.get(k).copied().unwrap_or(0) < nth {
                break; // there were fewer matching calls: later ones do not exist either
            }
        }
        self.expect(&[]);
        Ok(Continue(plan))
    }

    /// A failure that persisted in production (a disk that stays full fails the write and
    /// the flush at close) may matter only when it persists: the same fault again for each
    /// further occurrence of its production burst, on consecutive matching calls.
    fn repeat_search(&mut self, plan: Plan, k: usize) -> Step<Plan> {
        let times = self.causes[plan.faults[k].candidate].burst.min(MAX_REPEAT);
        if times < 2 {
            return Ok(Continue(plan));
        }
        let mut trial = plan.clone();
        for _ in 1..times {
            trial.faults.insert(k + 1, plan.faults[k].clone());
        }
        let what = format!(
            "{}, {times} matching calls in a row",
            self.describe(plan.faults[k].candidate)
        );
        go!(self.evaluate(&trial, what));
        Ok(Continue(plan))
    }

    /// Algorithm 1: grow the context of fault `k` with the unique functions that preceded it
    /// in production, nearest first, while the run still reaches the fault.
    fn find_context(&mut self, mut plan: Plan, k: usize) -> Step<Plan> {
        let cand = self.causes[plan.faults[k].candidate];
        if matches!(cand.guess, FaultGuess::Partition { .. }) && cand.preceding_functions.is_empty() {
            return Ok(Continue(plan));
        }
        let node = cand.node.unwrap_or(0);
        let mut context: Vec<String> = Vec::new();
        for spec in &cand.preceding_functions {
            let f = local_spec(self.scenario, node, spec);
            if context.contains(&f) {
                break;
            }
            let mut trial = plan.clone();
            trial.faults[k].fault.context.after_functions = std::iter::once(f.clone())
                .chain(context.iter().cloned())
                .collect();
            let names: Vec<&str> = trial.faults[k]
                .fault
                .context
                .after_functions
                .iter()
                .map(|s| symbol_of(s))
                .collect();
            let what = format!(
                "{} after {}",
                self.describe(plan.faults[k].candidate),
                names.join(" → ")
            );
            let fb = go!(self.evaluate(&trial, what));
            if fb.fired[k] {
                context.insert(0, f);
                plan = trial;
                continue;
            }
            match go!(self.amplify(&trial, k, &fb)) {
                Some(moved) => {
                    context.insert(0, f);
                    plan = moved;
                }
                None => break,
            }
        }
        Ok(Continue(plan))
    }

    /// The context did not complete on the production node: if another node ran its first
    /// function in this run (roles differ between runs), try the fault there.
    fn amplify(&mut self, trial: &Plan, k: usize, fb: &Feedback) -> Step<Option<Plan>> {
        let fault = &trial.faults[k].fault;
        if matches!(fault.kind(), FaultKind::Partition | FaultKind::Syscall) {
            return Ok(Continue(None));
        }
        let first = symbol_of(&fault.context.after_functions[0]).to_string();
        let here = self.scenario.node_index(&fault.node).unwrap_or(0);
        let Some(other) = (0..self.scenario.nodes.len())
            .find(|&n| n != here && fb.functions.get(n).is_some_and(|f| f.contains(&first)))
        else {
            return Ok(Continue(None));
        };
        let mut moved = trial.clone();
        moved.faults[k].fault.node = self.node_name(other);
        let fb2 = go!(self.evaluate(
            &moved,
            format!(
                "amplification: the same fault on {} (it ran {first})",
                self.node_name(other)
            )
        ));
        Ok(Continue(fb2.fired[k].then_some(moved)))
    }

    /// Level 3: process faults at call sites inside the last function of their context.
    fn level3(&mut self, plan: Plan) -> Step<()> {
        for k in (0..plan.faults.len()).rev() {
            let fault = &plan.faults[k].fault;
            if !matches!(fault.kind(), FaultKind::Crash | FaultKind::Pause)
                || fault.context.after_functions.is_empty()
            {
                continue;
            }
            let last = fault.context.after_functions.last().cloned().unwrap_or_default();
            let node = self.scenario.node_index(&fault.node).unwrap_or(0);
            let (binary, symbol) = match last.rsplit_once(':') {
                Some((b, s)) => (PathBuf::from(b), s.to_string()),
                None => (
                    resolve_binary(&self.scenario.nodes[node].command[0]),
                    last.clone(),
                ),
            };
            let sites = match self.runner.injection_sites(&binary, &symbol) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("reproduce: level 3 skips {symbol}: {e:#}");
                    continue;
                }
            };
            let trials: Vec<(Plan, String)> = sites
                .into_iter()
                .take(MAX_SITES)
                .map(|site| {
                    let mut trial = plan.clone();
                    trial.faults[k].fault.context.offset = Some(site.offset);
                    let what = format!(
                        "{} at {symbol}+{:#x} ({:?}: {})",
                        self.describe(plan.faults[k].candidate),
                        site.offset,
                        site.kind,
                        site.instruction
                    );
                    (trial, what)
                })
                .collect();
            self.expect(&trials);
            for (trial, what) in trials {
                go!(self.evaluate(&trial, what));
            }
            self.expect(&[]);
        }
        Ok(Continue(()))
    }

    /// Runs `plan` once; a bug is confirmed at once. Stops the search when the target is
    /// met or the run budget is spent.
    fn evaluate(&mut self, plan: &Plan, what: String) -> Step<Feedback> {
        if self.interrupted || self.runner.interrupted() {
            self.interrupted = true;
            return Ok(Break(Outcome::Missed("interrupted".into())));
        }
        if self.runs >= self.cfg.max_runs {
            return Ok(Break(Outcome::Missed(format!(
                "the run budget (--max-runs {}) is spent; {}",
                self.cfg.max_runs,
                self.best_words()
            ))));
        }
        let schedule = plan.schedule();
        if let Some(fb) = self.seen.get(&schedule) {
            return Ok(Continue(fb.clone()));
        }
        let (dir, run) = self.run_or_take(&schedule)?;
        self.runs += run.ran as u32;
        let (fb, note) = match run.result {
            Ok(fb) => {
                let note = fb.not_started.clone();
                (fb, note)
            }
            Err(_) if self.runner.interrupted() => {
                self.interrupted = true;
                return Ok(Break(Outcome::Missed("interrupted".into())));
            }
            // the fault-free check runs first: what fails there is the scenario's fault
            Err(e) if plan.faults.is_empty() => return Err(e),
            Err(e) => {
                let n = plan.faults.len();
                // nothing is known of the run: as many matching calls as any, so that the
                // Nth-call search does not take it for "no more calls"
                (
                    Feedback {
                        fired: vec![false; n],
                        matched: vec![u32::MAX; n],
                        ..Default::default()
                    },
                    Some(format!("the run failed: {e:#}")),
                )
            }
        };
        self.seen.insert(schedule.clone(), fb.clone());
        let fired = format!("{}/{}", fb.fired.iter().filter(|&&f| f).count(), fb.fired.len());
        if fb.bug && !plan.faults.is_empty() {
            self.runs_to_first.get_or_insert(self.runs);
        }
        self.progress_line(&what, &fb, &fired, note.as_deref());
        let number = self.log.next_number();
        let mut attempt = Attempt {
            number,
            level: self.level,
            what,
            schedule: schedule.to_toml(),
            bug: fb.bug,
            fired,
            confirmation: None,
            dir: dir.clone(),
            note,
            runs_pruned: false,
            timelines: Vec::new(),
            surplus: Vec::new(),
        };
        if fb.bug && !plan.faults.is_empty() {
            let conf = self.confirm(&schedule, &dir)?;
            attempt.confirmation = Some(conf);
            attempt.surplus = std::mem::take(&mut self.pending_surplus);
            self.first_bug_attempt.get_or_insert(number);
            if self.best.as_ref().is_none_or(|(_, b, _)| conf.rate() > b.rate()) {
                self.best = Some((plan.clone(), conf, self.level));
                self.best_attempt = Some(number);
            }
            self.push_attempt(attempt)?;
            if self.interrupted {
                return Ok(Break(Outcome::Missed("interrupted".into())));
            }
            eprintln!(
                "    confirmation: {} ({}); best so far {}",
                conf.summary(),
                if conf.met {
                    "target met"
                } else {
                    "below the target"
                },
                self.best_short()
            );
            if conf.met {
                return Ok(Break(Outcome::Reproduced));
            }
            return Ok(Continue(fb));
        }
        self.push_attempt(attempt)?;
        Ok(Continue(fb))
    }

    /// Records an attempt; the runs of the best and of the first bug stay (see retention).
    fn push_attempt(&mut self, attempt: Attempt) -> Result<()> {
        let protected = self
            .best_attempt
            .iter()
            .chain(&self.first_bug_attempt)
            .copied()
            .collect();
        self.log.push(attempt, &protected, self.best_attempt)
    }

    fn best_words(&self) -> String {
        match &self.best {
            Some((_, c, _)) => format!("best schedule so far: {}", c.summary()),
            None => "no schedule made the bug happen".into(),
        }
    }

    /// The best so far, as runs with the bug of runs: "3/5", "1/1 (confirming)" right
    /// after the first run that showed it.
    fn best_short(&self) -> String {
        match &self.best {
            Some((_, c, _)) => format!("{}/{}", c.bugs, c.runs),
            None if self.runs_to_first.is_some() => "1/1 (confirming)".into(),
            None => "-".into(),
        }
    }

    fn progress_line(&mut self, what: &str, fb: &Feedback, fired: &str, note: Option<&str>) {
        let best = match (&self.best, fb.bug) {
            (Some((_, c, _)), true) => format!("{}/{}, this one confirming", c.bugs, c.runs),
            _ => self.best_short(),
        };
        let (level, runs, max) = (self.level, self.runs, self.cfg.max_runs);
        let attempt = self.log.next_number();
        let bug = match note {
            Some(n) => format!("no — {n}"),
            None => (if fb.bug { "YES" } else { "no" }).to_string(),
        };
        eprintln!("[level {level} | attempt {attempt} | run {runs}/{max} | best {best}] {what}: bug {bug}, fired {fired}");
    }

    /// The sequential test on `schedule`; when the run budget ends first, the rate of the
    /// runs made so far (not met). Runs go in batches of `--jobs`, fed to the test in
    /// run-index order; those after its decision are surplus (in `pending_surplus`).
    fn confirm(&mut self, schedule: &Schedule, dir: &Path) -> Result<Confirmation> {
        let target = self.cfg.target_rate;
        let (mut bugs, mut runs) = (0u32, 0u32);
        let mut ready: std::collections::VecDeque<(u32, RunResult)> = Default::default();
        let outcome = confirm::confirm(target, |k| {
            self.interrupted |= self.runner.interrupted();
            if self.runs >= self.cfg.max_runs || self.interrupted {
                return Ok(None);
            }
            if ready.front().is_none_or(|(j, _)| *j != k) {
                ready.clear();
                let left = (self.cfg.max_runs - self.runs).min(confirm::MAX_RUNS.saturating_sub(k - 1));
                let n = (self.jobs() as u32).min(left).max(1);
                let mut jobs = Vec::new();
                for j in k..k + n {
                    let sub = dir.join(format!("confirm-{j:02}"));
                    std::fs::create_dir_all(&sub)?;
                    jobs.push((schedule.clone(), sub));
                }
                ready.extend((k..).zip(self.run_batch(&jobs)));
            }
            let Some((_, run)) = ready.pop_front() else {
                return Ok(None);
            };
            self.runs += run.ran as u32;
            let fb = match run.result {
                Ok(fb) => fb,
                Err(_) if self.runner.interrupted() => {
                    self.interrupted = true;
                    return Ok(None);
                }
                Err(e) => {
                    eprintln!("    confirming: run {k}: the run failed: {e:#}");
                    Feedback::default()
                }
            };
            eprintln!(
                "    confirming: run {k}: bug {}",
                if fb.bug { "yes" } else { "no" }
            );
            bugs += fb.bug as u32;
            runs += 1;
            Ok(Some(fb.bug))
        })?;
        self.drop_surplus_confirmations(dir, ready.into_iter().map(|(k, run)| (k, run.ran)).collect());
        Ok(outcome.unwrap_or_else(|| {
            let (low, high) = confirm::wilson(bugs, runs);
            Confirmation {
                bugs,
                runs,
                met: false,
                low,
                high,
            }
        }))
    }

    /// Removes the confirmation runs made after the test decided (`left`: index, ran).
    fn drop_surplus_confirmations(&mut self, dir: &Path, left: Vec<(u32, bool)>) {
        let (Some(first), Some(last)) = (left.first(), left.last()) else {
            return;
        };
        for (k, ran) in &left {
            let _ = std::fs::remove_dir_all(dir.join(format!("confirm-{k:02}")));
            self.surplus_runs += *ran as u32;
        }
        let which = if first.0 == last.0 {
            format!("confirmation run {}", first.0)
        } else {
            format!("confirmation runs {}–{}", first.0, last.0)
        };
        self.pending_surplus.push(format!(
            "{which} ran side by side after the sequential test had decided: removed"
        ));
    }

    /// Drops faults, then context functions, while the schedule still meets the target
    /// without a single miss.
    fn minimize(
        &mut self,
        mut plan: Plan,
        mut conf: Confirmation,
        log: &mut Vec<String>,
    ) -> Result<(Plan, Confirmation)> {
        self.level = 0;
        let mut k = plan.faults.len();
        while k > 0 && plan.faults.len() > 1 {
            k -= 1;
            let mut trial = plan.clone();
            let gone = trial.faults.remove(k);
            let what = format!(
                "minimize: without fault {} ({})",
                k + 1,
                self.describe(gone.candidate)
            );
            if let Some(c) = self.try_minimal(&trial, what.clone())? {
                log.push(what);
                plan = trial;
                conf = c;
            }
        }
        for k in 0..plan.faults.len() {
            let n = plan.faults[k].fault.context.after_functions.len();
            if n > 2 {
                let mut trial = plan.clone();
                trial.faults[k].fault.context.after_functions.drain(..n - 1);
                let what = format!("minimize: fault {} with only its last context function", k + 1);
                if let Some(c) = self.try_minimal(&trial, what.clone())? {
                    log.push(what);
                    plan = trial;
                    conf = c;
                    continue;
                }
            }
            while plan.faults[k].fault.context.after_functions.len() > 1 {
                let mut trial = plan.clone();
                let dropped = trial.faults[k].fault.context.after_functions.remove(0);
                let what = format!(
                    "minimize: fault {} without the context function {}",
                    k + 1,
                    symbol_of(&dropped)
                );
                match self.try_minimal(&trial, what.clone())? {
                    Some(c) => {
                        log.push(what);
                        plan = trial;
                        conf = c;
                    }
                    None => break,
                }
            }
        }
        Ok((plan, conf))
    }

    /// Confirms `trial` with the sequential test; None when it does not meet the target.
    fn try_minimal(&mut self, trial: &Plan, what: String) -> Result<Option<Confirmation>> {
        let schedule = trial.schedule();
        let dir = self.log.next_dir(&schedule)?;
        let conf = self.confirm(&schedule, &dir)?;
        eprintln!(
            "[minimize | run {}/{}] {what}: {}",
            self.runs,
            self.cfg.max_runs,
            if conf.met { "not needed" } else { "needed" }
        );
        let number = self.log.next_number();
        if conf.met {
            // the minimized schedule is the one that will be reported: keep its runs
            self.best_attempt = Some(number);
        }
        let attempt = Attempt {
            number,
            level: 0,
            what,
            schedule: schedule.to_toml(),
            bug: conf.bugs > 0,
            fired: String::new(),
            confirmation: Some(conf),
            dir,
            note: None,
            runs_pruned: false,
            timelines: Vec::new(),
            surplus: std::mem::take(&mut self.pending_surplus),
        };
        self.push_attempt(attempt)?;
        Ok(conf.met.then_some(conf))
    }
}

#[cfg(test)]
mod tests;
