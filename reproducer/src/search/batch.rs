//! The machinery of the runs, apart from the search's choices: a `BatchRunner` makes the runs
//! one at a time or, with `--jobs` > 1, side by side, so that the strategy sees each result
//! as if its run had happened when its turn came. For the candidate due it takes the run
//! made ahead already, or makes it now with the next candidates beside it (`next`); for
//! the runs of one schedule (confirmation, replay) it makes them `--jobs` at a time and hands
//! them out in index order (`repeat`). Runs made but not needed are surplus: it removes
//! them and counts them, and says which ones for the attempt log. Plain scoped threads
//! rather than tokio: each job blocks on one run (a child process) and a batch holds at most
//! `--jobs` of them; there is nothing for an event loop to multiplex.
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::attempts::AttemptLog;
use super::runner::{Feedback, Runner};
use crate::model::plan::FaultPlan;
use crate::model::scenario::Scenario;
use crate::model::schedule::{Origin, Schedule};

/// A run made (or the reason it could not be): `ran` is false when no run happened (the
/// schedule did not resolve against the scenario), so that it does not count.
pub(super) struct RunResult {
    pub ran: bool,
    pub result: Result<Feedback>,
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

/// Runs of one schedule numbered from 1, each in `DIR/PREFIX-NN` (`confirm-NN` of an
/// attempt, `run-NN` of the replay), taken in index order from a `BatchRunner`.
pub(super) struct Repeats<'s> {
    pub schedule: &'s Schedule,
    dir: &'s Path,
    prefix: &'static str,
    /// runs made and not taken yet, with their index
    ready: VecDeque<(u32, RunResult)>,
}

impl<'s> Repeats<'s> {
    pub fn new(schedule: &'s Schedule, dir: &'s Path, prefix: &'static str) -> Repeats<'s> {
        Repeats {
            schedule,
            dir,
            prefix,
            ready: VecDeque::new(),
        }
    }

    pub fn dir_of(&self, k: u32) -> PathBuf {
        self.dir.join(format!("{}-{k:02}", self.prefix))
    }
}

pub(super) struct BatchRunner<'a> {
    runner: &'a dyn Runner,
    scenario: &'a Scenario,
    /// runs side by side at most (1: one at a time)
    jobs: usize,
    /// candidates' runs made ahead of their turn
    ahead: Vec<Ahead>,
    /// the last `ahead-N` directory's N
    ahead_seq: u32,
    /// runs made that the search did not need
    surplus_runs: u32,
}

impl<'a> BatchRunner<'a> {
    pub fn new(runner: &'a dyn Runner, scenario: &'a Scenario, jobs: usize) -> BatchRunner<'a> {
        BatchRunner {
            runner,
            scenario,
            jobs: jobs.max(1),
            ahead: Vec::new(),
            ahead_seq: 0,
            surplus_runs: 0,
        }
    }

    /// The run of `due`, the candidate whose turn it is, and its directory (that of the next
    /// attempt in `log`): made ahead already, or made now beside the first of `upcoming`
    /// (the candidates after it, in order, with their words) that are not `known` (run
    /// already), not made ahead, within `--jobs` and `budget` (the runs allowed after this
    /// one, less those made ahead and waiting).
    pub fn next<'u>(
        &mut self,
        log: &AttemptLog,
        due: &Schedule,
        upcoming: impl IntoIterator<Item = (Schedule, &'u str)>,
        budget: u32,
        known: impl Fn(&Schedule) -> bool,
    ) -> Result<(PathBuf, RunResult)> {
        if let Some(i) = self.ahead.iter().position(|a| &a.schedule == due) {
            let a = self.ahead.remove(i);
            return Ok((log.adopt(&a.dir)?, a.run));
        }
        let room = (self.jobs - 1).min((budget as usize).saturating_sub(self.ahead.len()));
        let mut extras: Vec<(Schedule, &str)> = Vec::new();
        for (s, what) in upcoming {
            if extras.len() >= room {
                break;
            }
            let taken = &s == due
                || known(&s)
                || self.ahead.iter().any(|a| a.schedule == s)
                || extras.iter().any(|(o, _)| o == &s);
            if !taken {
                extras.push((s, what));
            }
        }
        let dir = log.next_dir(due)?;
        let mut jobs = vec![(due.clone(), dir.clone())];
        for (s, _) in &extras {
            self.ahead_seq += 1;
            jobs.push((s.clone(), log.ahead_dir(self.ahead_seq, s)?));
        }
        let mut results = self.run_side_by_side(&jobs).into_iter();
        let Some(first) = results.next() else {
            bail!("a batch of runs gave no result");
        };
        let launched_by = log.next_number();
        for (((schedule, dir), run), (_, what)) in jobs.into_iter().skip(1).zip(results).zip(extras) {
            self.ahead.push(Ahead {
                schedule,
                what: what.to_string(),
                dir,
                run,
                launched_by,
            });
        }
        Ok((dir, first))
    }

    /// Run `k` of `repeats`: made already, or made now with the next ones beside it (up to
    /// `--jobs` of them, `left` at most, one at least). None if no run came back.
    pub fn repeat(&self, repeats: &mut Repeats, k: u32, left: u32) -> Result<Option<RunResult>> {
        if repeats.ready.front().is_none_or(|(j, _)| *j != k) {
            repeats.ready.clear();
            let n = (self.jobs as u32).min(left).max(1);
            let mut jobs = Vec::new();
            for j in k..k + n {
                let sub = repeats.dir_of(j);
                std::fs::create_dir_all(&sub)?;
                jobs.push((repeats.schedule.clone(), sub));
            }
            repeats.ready.extend((k..).zip(self.run_side_by_side(&jobs)));
        }
        Ok(repeats.ready.pop_front().map(|(_, run)| run))
    }

    /// `schedule` run once more in `dir`: a run that could not run (the runner's error) is
    /// tried again before the search gives up on it.
    pub fn rerun(&self, schedule: &Schedule, dir: &Path) -> RunResult {
        run_one(self.runner, self.scenario, schedule, dir)
    }

    /// Removes the runs of `repeats` made and not taken (surplus); their first and last
    /// index, if there were any.
    pub fn discard(&mut self, repeats: Repeats) -> Option<(u32, u32)> {
        let first = repeats.ready.front()?.0;
        let last = repeats.ready.back()?.0;
        for (k, run) in &repeats.ready {
            let _ = std::fs::remove_dir_all(repeats.dir_of(*k));
            self.surplus_runs += run.ran as u32;
        }
        Some((first, last))
    }

    /// Removes the runs made ahead that the search never came to, each listed in the attempt
    /// that launched it; returns the surplus runs of the whole search.
    pub fn finish(&mut self, log: &mut AttemptLog) -> Result<u32> {
        for a in std::mem::take(&mut self.ahead) {
            let _ = std::fs::remove_dir_all(&a.dir);
            if a.run.ran {
                self.surplus_runs += 1;
            }
            log.note_surplus(
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
        Ok(self.surplus_runs)
    }

    /// Runs `jobs` side by side; results in the order given.
    fn run_side_by_side(&self, jobs: &[(Schedule, PathBuf)]) -> Vec<RunResult> {
        let (runner, scenario) = (self.runner, self.scenario);
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
