//! What the search covered: the groups of trials it made (level 1's causes, the set-aside
//! round, each level-2 draft, each level-3 draft), each within its share of the budget and
//! with why it stopped (found, the runs or the time spent, its share handed over, done), and
//! which candidates of the ranking it tried and which the budget never reached.
//!
//! A group's share is what is left of `--max-runs` and `--max-time` divided by the groups
//! still to come (itself included), so that one group cannot spend a quarter of an hour
//! walking Nth calls while the next candidates wait: when its share is spent it hands over,
//! and what it did not use goes to the groups after it.
use std::fmt::Write as _;
use std::ops::ControlFlow::{Break, Continue};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::runner::Feedback;
use super::{Outcome, Search, Step};
use crate::analysis::diagnose::{number, Verdict};

/// A group of trials and why it stopped.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupStop {
    pub level: u8,
    pub what: String,
    /// runs it made (confirmations included)
    pub runs: u32,
    pub seconds: f64,
    pub stopped: String,
}

/// One candidate of the ranking, and how many attempts held it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CandidateTried {
    /// its place in the search's order (1: first)
    pub rank: usize,
    pub what: String,
    /// why the diagnosis set it aside (benign, explained, late), if it did
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_aside: Option<String>,
    pub score: f64,
    pub attempts: u32,
    /// why no attempt ever holds it, whatever the budget
    #[serde(skip_serializing_if = "Option::is_none")]
    pub never_injected: Option<String>,
}

/// The limits of the group under way.
#[derive(Clone, Copy, Debug)]
pub(super) struct Share {
    runs: u32,
    until_runs: u32,
    time: Duration,
    deadline: Instant,
}

impl Search<'_> {
    /// Runs `trials` as one group: within its share of what is left of the budget, `groups_left`
    /// being the groups still to come (itself included; 0: no share, only the budget), and
    /// records why it stopped.
    pub(super) fn group<T>(
        &mut self,
        what: String,
        groups_left: usize,
        trials: impl FnOnce(&mut Self) -> Step<T>,
    ) -> Step<T> {
        let (runs_before, started) = (self.runs, Instant::now());
        self.share = (groups_left > 0).then(|| {
            let runs = self.cfg.max_runs.saturating_sub(self.runs) / groups_left as u32;
            let time = self.cfg.max_time.saturating_sub(self.started.elapsed()) / groups_left as u32;
            Share {
                runs,
                until_runs: self.runs + runs.max(1),
                time,
                deadline: started + time,
            }
        });
        self.handover = None;
        let result = trials(self);
        let stopped = match &result {
            Ok(Break(Outcome::Reproduced)) => "found: a schedule met the target".to_string(),
            Ok(Break(Outcome::Missed(why))) => why.clone(),
            Ok(Continue(_)) => match self.handover.take() {
                Some(why) => format!("handed over to the next group: {why}"),
                None => "done: every trial made".to_string(),
            },
            Err(e) => format!("the search failed: {e:#}"),
        };
        self.groups.push(GroupStop {
            level: self.level,
            what,
            runs: self.runs - runs_before,
            seconds: started.elapsed().as_secs_f64(),
            stopped,
        });
        self.share = None;
        result
    }

    /// Why the group under way must hand over (its share of the runs or of the time is
    /// spent), if it must; remembered for the group's record.
    pub(super) fn share_spent(&mut self) -> bool {
        if self.handover.is_some() {
            return true;
        }
        let Some(s) = self.share else { return false };
        let why = if self.runs >= s.until_runs {
            format!("its share of the runs ({}) is spent", s.runs)
        } else if Instant::now() >= s.deadline {
            format!(
                "its share of the time ({}) is spent",
                humantime::format_duration(Duration::from_secs(s.time.as_secs()))
            )
        } else {
            return false;
        };
        self.handover = Some(why);
        true
    }

    /// The ranking with the attempts each candidate was in.
    pub(super) fn ranking(&self) -> Vec<CandidateTried> {
        (0..self.candidates.len())
            .map(|i| {
                let c = self.candidates[i];
                CandidateTried {
                    rank: i + 1,
                    what: self.describe(i),
                    set_aside: (c.verdict != Verdict::Cause).then(|| format!("{:?}", c.verdict)),
                    score: c.score.value,
                    attempts: self.tried[i],
                    never_injected: c
                        .guess
                        .kernel_internal()
                        .then(|| "a kernel-internal errno: no process sees it".to_string()),
                }
            })
            .collect()
    }
}

/// What a trial the group's share did not reach tells the levels: nothing fired, no call
/// matched (so the Nth-call search stops), no bug.
pub(super) fn not_run(faults: usize) -> Feedback {
    Feedback {
        fired: vec![false; faults],
        matched: vec![0; faults],
        ..Default::default()
    }
}

/// Candidates listed by name in the report before the rest are counted.
const LISTED: usize = 30;

/// The report's section: the groups and why each stopped, the candidates tried and those
/// the budget never reached.
pub fn markdown(ranking: &[CandidateTried], groups: &[GroupStop]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Search coverage\n");
    if !groups.is_empty() {
        let _ = writeln!(out, "Groups of trials, each within its share of what was left of the budget (`--max-runs`, `--max-time`, divided by the groups still to come):\n");
        let _ = writeln!(out, "| level | group | runs | s | stopped |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        for g in groups {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.0} | {} |",
                g.level,
                g.what.replace('|', "/"),
                g.runs,
                g.seconds,
                g.stopped.replace('|', "/")
            );
        }
        out.push('\n');
    }
    let (tried, never): (Vec<&CandidateTried>, Vec<&CandidateTried>) =
        ranking.iter().partition(|c| c.attempts > 0);
    let line = |c: &CandidateTried| {
        let aside = c
            .set_aside
            .as_ref()
            .map(|v| format!(", set aside: {v}"))
            .unwrap_or_default();
        format!("{}. {} (score {}{aside})", c.rank, c.what, number(c.score))
    };
    let _ = writeln!(
        out,
        "Candidates tried ({} of {}), in the search's order, with the attempts that held each:\n",
        tried.len(),
        ranking.len()
    );
    for c in tried.iter().take(LISTED) {
        let _ = writeln!(out, "- {}: {} attempt(s)", line(c), c.attempts);
    }
    if tried.len() > LISTED {
        let _ = writeln!(out, "- ... and {} more", tried.len() - LISTED);
    }
    let (excluded, never): (Vec<&CandidateTried>, Vec<&CandidateTried>) =
        never.into_iter().partition(|c| c.never_injected.is_some());
    if !excluded.is_empty() {
        let _ = writeln!(out, "\nNever injected ({}):\n", excluded.len());
        for c in excluded.iter().take(LISTED) {
            let why = c.never_injected.as_deref().unwrap_or_default();
            let _ = writeln!(out, "- {}: {why}", line(c));
        }
        if excluded.len() > LISTED {
            let _ = writeln!(out, "- ... and {} more", excluded.len() - LISTED);
        }
    }
    if never.is_empty() {
        let other = if excluded.is_empty() { "" } else { " other" };
        let _ = writeln!(out, "\nThe budget reached every{other} candidate.\n");
        return out;
    }
    let _ = writeln!(out, "\nNever reached by the budget ({}):\n", never.len());
    for c in never.iter().take(LISTED) {
        let _ = writeln!(out, "- {}", line(c));
    }
    if never.len() > LISTED {
        let _ = writeln!(out, "- ... and {} more", never.len() - LISTED);
    }
    out.push('\n');
    out
}
