//! One candidate's turn: its run (from the batch runner: made ahead or made now), its
//! progress line and attempt, and, when it shows the bug, the sequential test that confirms
//! it; the accepted schedule's independent replay. The budget, Ctrl-C and the schedules
//! already run are checked here, so that the levels only choose.
use std::ops::ControlFlow::{self, Break, Continue};
use std::path::Path;

use anyhow::Result;

use super::attempts::Attempt;
use super::batch::{Repeats, RunResult};
use super::confirm::{self, Confirmation};
use super::draft::Draft;
use super::runner::Feedback;
use super::{Outcome, Search, Step, REPLAY_RUNS};
use crate::model::schedule::Schedule;

impl Search<'_> {
    /// Evaluates `trials` in order, each as if its run happened when its turn came (with
    /// `--jobs`, the next ones run beside it), until `each` (its index, its feedback) says
    /// stop or the search stops.
    pub(super) fn evaluate_in_order(
        &mut self,
        trials: &[(Draft, String)],
        mut each: impl FnMut(usize, &Feedback) -> ControlFlow<()>,
    ) -> Step<()> {
        for (i, (trial, what)) in trials.iter().enumerate() {
            if self.share_spent() {
                break; // the group hands over (coverage.rs)
            }
            let fb = go!(self.evaluate(trial, what.clone(), &trials[i + 1..]));
            if each(i, &fb).is_break() {
                break;
            }
        }
        Ok(Continue(()))
    }

    /// The search has taken its `--max-time`.
    fn out_of_time(&self) -> bool {
        self.started.elapsed() >= self.cfg.max_time
    }

    /// Runs `trial` once, `next` being the trials known to come after it (they may run
    /// beside it); a bug is confirmed at once. Stops the search when the target is met or
    /// the run budget is spent.
    pub(super) fn evaluate(
        &mut self,
        trial: &Draft,
        what: String,
        next: &[(Draft, String)],
    ) -> Step<Feedback> {
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
        if self.out_of_time() {
            return Ok(Break(Outcome::Missed(format!(
                "the time budget (--max-time {}) is spent after {} runs; {}",
                humantime::format_duration(self.cfg.max_time),
                self.runs,
                self.best_words()
            ))));
        }
        // the group's share is spent: the trial is not made (coverage.rs)
        if self.share_spent() {
            return Ok(Continue(super::coverage::not_run(trial.faults.len())));
        }
        for f in &trial.faults {
            self.tried[f.candidate] += 1;
        }
        let schedule = trial.schedule();
        if let Some(fb) = self.seen.get(&schedule) {
            return Ok(Continue(fb.clone()));
        }
        let seen = &self.seen;
        let upcoming = next.iter().map(|(d, w)| (d.schedule(), w.as_str()));
        let budget = self.cfg.max_runs.saturating_sub(self.runs + 1);
        let (dir, run) = self
            .batch
            .next(&self.log, &schedule, upcoming, budget, |s| seen.contains_key(s))?;
        let run = self.once_more(&schedule, &dir, run, "the attempt");
        self.runs += self.counted(&run) as u32;
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
            Err(e) if trial.faults.is_empty() => return Err(e),
            Err(e) => {
                let n = trial.faults.len();
                let note = match run.ran {
                    // an attempt that did not run is an error, never a result
                    true => {
                        let error = format!("attempt {} could not run, twice: {e:#}", self.log.next_number());
                        self.failed = Some(error.clone());
                        format!("not run: {error}")
                    }
                    false => format!("the run failed: {e:#}"),
                };
                // nothing is known of the run: as many matching calls as any, so that the
                // Nth-call search does not take it for "no more calls"
                (
                    Feedback {
                        fired: vec![false; n],
                        matched: vec![u32::MAX; n],
                        ..Default::default()
                    },
                    Some(note),
                )
            }
        };
        self.seen.insert(schedule.clone(), fb.clone());
        let fired = format!("{}/{}", fb.fired.iter().filter(|&&f| f).count(), fb.fired.len());
        if fb.bug && !trial.faults.is_empty() && self.runs_to_first.is_none() {
            self.runs_to_first = Some(self.runs);
            self.first_bug_level = Some(self.level);
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
        if trial.faults.is_empty() {
            self.fault_free_attempt.get_or_insert(number);
        }
        if let Some(error) = self.failed.clone() {
            self.push_attempt(attempt)?;
            return Ok(Break(Outcome::Missed(error)));
        }
        if fb.bug && !trial.faults.is_empty() {
            let (conf, surplus) = self.confirm(&schedule, &dir)?;
            attempt.confirmation = Some(conf);
            attempt.surplus = surplus.into_iter().collect();
            self.first_bug_attempt.get_or_insert(number);
            if conf.runs > 0 && self.best.as_ref().is_none_or(|(_, b)| conf.rate() > b.rate()) {
                self.best = Some((trial.clone(), conf));
                self.best_attempt = Some(number);
            }
            self.push_attempt(attempt)?;
            if self.interrupted {
                return Ok(Break(Outcome::Missed("interrupted".into())));
            }
            if let Some(error) = self.failed.clone() {
                return Ok(Break(Outcome::Missed(error)));
            }
            self.progress.line(&format!(
                "    confirmation: {} ({}); best so far {}",
                conf.summary(),
                if conf.met {
                    "target met"
                } else {
                    "below the target"
                },
                self.best_short()
            ));
            if conf.met {
                return Ok(Break(Outcome::Reproduced));
            }
            return Ok(Continue(fb));
        }
        self.push_attempt(attempt)?;
        Ok(Continue(fb))
    }

    /// `run` (of `schedule` in `dir`, for `what`), or, when it could not run (the runner's
    /// error: a binary that cannot start, a test bed that failed to set up), the same run
    /// made once more. What still fails then is the caller's to stop on.
    fn once_more(&mut self, schedule: &Schedule, dir: &Path, run: RunResult, what: &str) -> RunResult {
        match &run.result {
            Err(e) if run.ran && !self.runner.interrupted() => {
                self.progress
                    .line(&format!("    {what} could not run ({e:#}): running it once more"));
                self.batch.rerun(schedule, dir)
            }
            _ => run,
        }
    }

    /// Whether `run` counts against the budget: it ran, and did not fail to run (one that
    /// Ctrl-C cut short ran).
    fn counted(&self, run: &RunResult) -> bool {
        run.ran && (run.result.is_ok() || self.runner.interrupted())
    }

    /// Records an attempt; the runs of the best, of the first bug and of the fault-free
    /// check stay (see retention; the last is what the causal chain compares with).
    pub(super) fn push_attempt(&mut self, attempt: Attempt) -> Result<()> {
        let protected = self
            .best_attempt
            .iter()
            .chain(&self.first_bug_attempt)
            .chain(&self.fault_free_attempt)
            .copied()
            .collect();
        self.log.push(attempt, &protected, self.best_attempt)
    }

    pub(super) fn best_words(&self) -> String {
        match &self.best {
            Some((_, c)) => format!("best schedule so far: {}", c.summary()),
            None => "no schedule made the bug happen".into(),
        }
    }

    /// The best so far, as runs with the bug of runs: "3/5", "1/1 (confirming)" right
    /// after the first run that showed it.
    pub(super) fn best_short(&self) -> String {
        match &self.best {
            Some((_, c)) => format!("{}/{}", c.bugs, c.runs),
            None if self.runs_to_first.is_some() => "1/1 (confirming)".into(),
            None => "-".into(),
        }
    }

    fn progress_line(&self, what: &str, fb: &Feedback, fired: &str, note: Option<&str>) {
        let best = match (&self.best, fb.bug) {
            (Some((_, c)), true) => format!("{}/{}, this one confirming", c.bugs, c.runs),
            _ => self.best_short(),
        };
        let (level, runs, max) = (self.level, self.runs, self.cfg.max_runs);
        let attempt = self.log.next_number();
        let bug = match note {
            Some(n) => format!("no — {n}"),
            None => (if fb.bug { "YES" } else { "no" }).to_string(),
        };
        self.progress.line(&format!(
            "[level {level} | attempt {attempt} | run {runs}/{max} | best {best}] {what}: bug {bug}, fired {fired}"
        ));
    }

    /// The sequential test on `schedule` (its runs in `dir/confirm-NN`); when the run budget
    /// ends first, the rate of the runs made so far (not met). With `--jobs` the runs go in
    /// batches, fed to the test in run-index order; those made after its decision are
    /// surplus, and the second value says so for the attempt log.
    pub(super) fn confirm(
        &mut self,
        schedule: &Schedule,
        dir: &Path,
    ) -> Result<(Confirmation, Option<String>)> {
        let target = self.cfg.target_rate;
        let (mut bugs, mut runs) = (0u32, 0u32);
        let mut repeats = Repeats::new(schedule, dir, "confirm");
        let outcome = confirm::confirm(target, |k| {
            self.interrupted |= self.runner.interrupted();
            if self.runs >= self.cfg.max_runs || self.interrupted || self.out_of_time() {
                return Ok(None);
            }
            let left = (self.cfg.max_runs - self.runs).min(confirm::MAX_RUNS.saturating_sub(k - 1));
            let Some(run) = self.batch.repeat(&mut repeats, k, left)? else {
                return Ok(None);
            };
            let run = self.once_more(repeats.schedule, &repeats.dir_of(k), run, "a confirmation run");
            self.runs += self.counted(&run) as u32;
            let fb = match run.result {
                Ok(fb) => fb,
                Err(_) if self.runner.interrupted() => {
                    self.interrupted = true;
                    return Ok(None);
                }
                // a run that did not run is no "bug no": the test stops, and the search
                Err(e) => {
                    let error = format!(
                        "confirmation run {k} of {} could not run, twice: {e:#}",
                        dir.display()
                    );
                    self.progress.line(&format!("    confirming: {error}"));
                    self.failed = Some(error);
                    return Ok(None);
                }
            };
            self.progress.line(&format!(
                "    confirming: run {k}: bug {}",
                if fb.bug { "yes" } else { "no" }
            ));
            bugs += fb.bug as u32;
            runs += 1;
            Ok(Some(fb.bug))
        })?;
        let surplus = self.batch.discard(repeats).map(|(first, last)| {
            let which = if first == last {
                format!("confirmation run {first}")
            } else {
                format!("confirmation runs {first}–{last}")
            };
            format!("{which} ran side by side after the sequential test had decided: removed")
        });
        let conf = outcome.unwrap_or_else(|| {
            let (low, high) = confirm::wilson(bugs, runs);
            Confirmation {
                bugs,
                runs,
                met: false,
                low,
                high,
            }
        });
        Ok((conf, surplus))
    }

    /// The accepted schedule replayed REPLAY_RUNS times afresh, in OUT/replay/: its own
    /// runs, outside the search's budget and its selection.
    pub(super) fn replay(&mut self, schedule: &Schedule, name: &str) -> Result<Confirmation> {
        let dir = self.cfg.out.join(name);
        std::fs::create_dir_all(&dir)?;
        tracedump::atomic::write_bytes(
            &dir.join("schedule.toml"),
            tracedump::atomic::SHARED,
            schedule.to_toml().as_bytes(),
        )?;
        let (mut bugs, mut runs) = (0, 0);
        // interrupted, the runs of the batch not taken yet are left as they are
        let mut repeats = Repeats::new(schedule, &dir, "run");
        for k in 1..=REPLAY_RUNS {
            let Some(run) = self.batch.repeat(&mut repeats, k, REPLAY_RUNS - k + 1)? else {
                break;
            };
            let run = self.once_more(schedule, &repeats.dir_of(k), run, "a replay run");
            let bug = match run.result {
                Ok(fb) => fb.bug,
                Err(_) if self.runner.interrupted() => {
                    self.interrupted = true;
                    break;
                }
                // counted neither way: the replay stops short, and the search with it
                Err(e) => {
                    let error = format!("replay run {k} of {} could not run, twice: {e:#}", dir.display());
                    self.progress.line(&format!("    replay: {error}"));
                    self.failed = Some(error);
                    break;
                }
            };
            bugs += bug as u32;
            runs += 1;
            self.progress.line(&format!(
                "[replay | run {k}/{REPLAY_RUNS}] the accepted schedule afresh: bug {}",
                if bug { "yes" } else { "no" }
            ));
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
}
