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
//! Ctrl-C ends the search with what it has. After level 1's causes, each group of trials
//! (the candidates set aside, each level-2 and level-3 draft) gets a share of what is left
//! of the budget and hands over to the next when it is spent (`coverage`).
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
//!
//! The files: this one has the public types and `Search::run`, the order of the stages;
//! `levels` the choices of levels 1–3, `minimize` the minimization, `evaluate` one
//! candidate's turn (its run, attempt, confirmation) and the replay, `draft` the schedules in
//! the making and their words, `nth` where the Nth-call search starts, `relax` the looser
//! paths of a fault whose path matched no call, `coverage` the groups'
//! shares and what the search tried. `batch` is the machinery of the runs made ahead and side by
//! side: the strategy names the candidate due and those that come after it, and gets the
//! due one's run. What the search is doing goes to a `Progress` sink, a line at a time.
use std::collections::HashMap;
use std::ops::ControlFlow::{self, Break, Continue};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};

/// Goes on with the value, or returns the search's outcome from the enclosing function.
macro_rules! go {
    ($e:expr) => {
        match $e? {
            Continue(v) => v,
            Break(outcome) => return Ok(Break(outcome)),
        }
    };
}

pub mod attempts;
mod batch;
pub mod confirm;
pub mod coverage;
mod draft;
pub mod engine;
mod evaluate;
mod levels;
mod minimize;
mod nth;
mod relax;
pub mod retention;
pub mod runner;

use crate::analysis::diagnose::{Candidate, Diagnosis, Verdict};
use crate::model::scenario::Scenario;
use crate::model::schedule::{Action, Fault, Schedule};
use attempts::{Attempt, AttemptLog};
use batch::BatchRunner;
use confirm::Confirmation;
use draft::Draft;
use runner::{Feedback, Runner};

/// Runs of the independent replay of the accepted schedule (the paper's confirmation size).
pub const REPLAY_RUNS: u32 = 10;

#[derive(Clone, Debug)]
pub struct SearchConfig {
    pub target_rate: f64,
    pub max_runs: u32,
    /// wall time the search may take before it stops with what it has (`--max-time`);
    /// the replay of an accepted schedule is not cut short
    pub max_time: std::time::Duration,
    pub out: PathBuf,
    /// byte budget for kept run directories (`--keep-bytes`)
    pub keep_bytes: u64,
    /// runs side by side at most (`--jobs`; 1: one at a time)
    pub jobs: usize,
}

/// Where the search says what it is doing, a line at a time (each attempt, confirmation
/// run, replay run, and what it skipped): the CLI prints the lines to stderr, the unit
/// tests collect them.
pub trait Progress {
    fn line(&self, text: &str);
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Reproduced,
    Missed(String),
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
    /// the level of the attempt that first showed the bug (a minimal schedule of a lower
    /// level found later than its level's round is a search that wasted runs)
    pub first_bug_level: Option<u8>,
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
    /// the candidates in the search's order, with the attempts that held each
    pub ranking: Vec<coverage::CandidateTried>,
    /// the groups of trials and why each stopped
    pub groups: Vec<coverage::GroupStop>,
    /// the search stopped on a run that could not run, twice: its error (an attempt that did
    /// not run is an error, never a result)
    pub error: Option<String>,
}

impl SearchResult {
    /// The rate the result stands on: the independent replay's, else the search's own.
    pub fn rate(&self) -> Option<Confirmation> {
        self.replay.or(self.confirmation)
    }
}

/// The level a schedule needs: 3 with an offset inside a function, 2 with a context
/// function, an Nth call or calls counted once every node is ready, else 1.
pub fn level_of(schedule: &Schedule) -> u8 {
    let level = |f: &Fault| {
        if f.context.offset.is_some() {
            3
        } else if !f.context.after_functions.is_empty()
            || f.context.after_ready
            || matches!(f.action, Action::Syscall { nth, .. } if nth > 1)
        {
            2
        } else {
            1
        }
    };
    schedule.faults.iter().map(level).max().unwrap_or(0)
}

/// The candidates the diagnosis set aside (benign, explained, late) on a scenario node, in
/// its order (by score): nothing is thrown away, level 1 tries each alone after the causes,
/// as far as its share of the budget goes — a rule that excused a silence is what misses
/// real partitions, and a failed call the profile saw at its rate may still matter.
fn set_aside(diagnosis: &Diagnosis) -> Vec<&Candidate> {
    diagnosis
        .candidates
        .iter()
        .filter(|c| c.verdict != Verdict::Cause && c.node.is_some())
        .collect()
}

pub struct Search<'a> {
    scenario: &'a Scenario,
    /// the diagnosis's causes on a scenario node in rank order, then (from `causes_end`)
    /// the candidates it set aside that level 1 tries last (`set_aside`)
    candidates: Vec<&'a Candidate>,
    causes_end: usize,
    cfg: SearchConfig,
    runner: &'a dyn Runner,
    /// the runs, made one at a time or side by side
    batch: BatchRunner<'a>,
    progress: &'a dyn Progress,
    log: AttemptLog,
    /// runs counted against the budget
    runs: u32,
    /// the best schedule so far, and its confirmation
    best: Option<(Draft, Confirmation)>,
    runs_to_first: Option<u32>,
    first_bug_level: Option<u8>,
    /// the level being searched (0: the fault-free check, minimization)
    level: u8,
    started: Instant,
    /// schedules already run, so no two attempts run the same schedule
    seen: HashMap<Schedule, Feedback>,
    interrupted: bool,
    /// attempts whose runs are kept whatever their age
    best_attempt: Option<u32>,
    first_bug_attempt: Option<u32>,
    /// per candidate: the attempts that held it
    tried: Vec<u32>,
    /// the limits of the group of trials under way (coverage.rs), and why it handed over
    share: Option<coverage::Share>,
    handover: Option<String>,
    groups: Vec<coverage::GroupStop>,
    /// the fault-free check's attempt: a run without the bug that the causal chain
    /// compares with (kept within the byte budget)
    fault_free_attempt: Option<u32>,
    /// a run could not run, twice: the search stops with this error
    failed: Option<String>,
}

impl<'a> Search<'a> {
    /// A search that keeps its attempts under `cfg.out` (created), runs on `runner` and says
    /// what it is doing to `progress`.
    pub fn new(
        scenario: &'a Scenario,
        diagnosis: &'a Diagnosis,
        cfg: SearchConfig,
        runner: &'a dyn Runner,
        progress: &'a dyn Progress,
    ) -> Result<Search<'a>> {
        let mut candidates: Vec<&Candidate> = diagnosis.causes().filter(|c| c.node.is_some()).collect();
        let causes_end = candidates.len();
        candidates.extend(set_aside(diagnosis));
        let candidates_len = candidates.len();
        let log = AttemptLog::create(&cfg.out, cfg.keep_bytes)?;
        Ok(Search {
            scenario,
            candidates,
            causes_end,
            batch: BatchRunner::new(runner, scenario, cfg.jobs),
            cfg,
            runner,
            progress,
            log,
            runs: 0,
            best: None,
            runs_to_first: None,
            first_bug_level: None,
            level: 0,
            started: Instant::now(),
            seen: Default::default(),
            interrupted: false,
            best_attempt: None,
            first_bug_attempt: None,
            tried: vec![0; candidates_len],
            share: None,
            handover: None,
            groups: Vec::new(),
            fault_free_attempt: None,
            failed: None,
        })
    }

    /// When the minimized schedule's replay missed the target: the schedule before
    /// minimization replayed afresh too, and returned when it does better. The sequential
    /// test that let minimization drop a fault decides on a few runs: a fault the bug needs
    /// in most runs but not all (a partition from one of two peers, after which RabbitMQ
    /// pauses the cut-off node in about 6 runs of 10) can pass it by luck; ten fresh runs
    /// show it. `minimized` then says what was put back, and why.
    fn replay_unminimized(
        &mut self,
        accepted: &Draft,
        minimized_replay: &Confirmation,
        minimized: &mut Vec<String>,
    ) -> Result<Option<Confirmation>> {
        let whole = self.replay(&accepted.schedule(), "replay-unminimized")?;
        if whole.bugs <= minimized_replay.bugs || whole.runs < minimized_replay.runs {
            return Ok(None);
        }
        let dropped = std::mem::take(minimized).join("; ");
        minimized.push(format!(
            "nothing: the schedule without what minimization dropped ({}) reproduced the bug {} in its replay, the schedule with it {}: kept whole",
            dropped.trim_start_matches("minimize: "),
            minimized_replay.summary(),
            whole.summary()
        ));
        Ok(Some(whole))
    }

    /// The levels until one meets the target, then the winner minimized and replayed afresh.
    pub fn run(mut self) -> Result<SearchResult> {
        if self.candidates.is_empty() {
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
        let (draft, confirmation) = match self.best.clone() {
            Some((accepted, accepted_conf)) if matches!(outcome, Outcome::Reproduced) => {
                let (mut draft, mut conf) = self.minimize(accepted.clone(), accepted_conf, &mut minimized)?;
                if !self.interrupted && self.failed.is_none() {
                    let mut r = self.replay(&draft.schedule(), "replay")?;
                    if !r.met && !minimized.is_empty() && !self.interrupted && self.failed.is_none() {
                        if let Some(whole) = self.replay_unminimized(&accepted, &r, &mut minimized)? {
                            (draft, conf, r) = (accepted, accepted_conf, whole);
                        }
                    }
                    if !r.met {
                        outcome = Outcome::Missed(format!(
                            "the accepted schedule passed the search's test ({}) but its independent replay reproduced the bug {} only, below the target",
                            conf.summary(),
                            r.summary()
                        ));
                    }
                    replay = Some(r);
                }
                (Some(draft), Some(conf))
            }
            Some((draft, conf)) => (Some(draft), Some(conf)),
            None => (None, None),
        };
        if self.interrupted {
            outcome = Outcome::Missed(format!(
                "interrupted (Ctrl-C) after {} runs; {}",
                self.runs,
                self.best_words()
            ));
        } else if let Some(e) = &self.failed {
            outcome = Outcome::Missed(format!("stopped: {e}; {}", self.best_words()));
        }
        let chosen = draft
            .iter()
            .flat_map(|d| &d.faults)
            .map(|f| self.explain(f))
            .collect();
        let schedule = draft.map(|d| d.schedule());
        let level = schedule.as_ref().map(level_of).unwrap_or(self.level);
        let surplus_runs = self.batch.finish(&mut self.log)?;
        let ranking = self.ranking();
        let keep_bytes = self.log.keep_bytes();
        let (attempts, pruned) = self.log.finish(self.progress)?;
        if !pruned.attempts.is_empty() {
            self.progress.line(&format!(
                "run directories of {} attempts removed ({:.1} MB) to bound the disk; kept: the best, the first bug, the fault-free check, the last {}, within --keep-bytes {keep_bytes}",
                pruned.attempts.len(),
                pruned.bytes as f64 / 1e6,
                retention::KEEP_LAST,
            ));
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
            first_bug_level: self.first_bug_level,
            runs_to_confirmed,
            minimized,
            chosen,
            seconds: self.started.elapsed().as_secs_f64(),
            replay,
            interrupted: self.interrupted,
            pruned,
            surplus_runs,
            jobs: self.cfg.jobs.max(1),
            ranking,
            groups: std::mem::take(&mut self.groups),
            error: self.failed.take(),
        })
    }

    fn exhausted_reason(&self) -> String {
        match &self.best {
            Some((_, c)) => format!(
                "every level was tried; the best schedule reproduced the bug {} (below the target)",
                c.summary()
            ),
            None => "every level was tried and no schedule made the bug happen".into(),
        }
    }
}

#[cfg(test)]
mod tests;
