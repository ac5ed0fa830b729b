//! The attempt log: every schedule the search tried, in `OUT/attempts.json` (rewritten
//! atomically after each attempt, so an interrupted search leaves a readable log) and one
//! directory per attempt, `OUT/attempts/NNN/` with its `schedule.toml` and its runs (only
//! the runs that matter stay: see `retention`).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use tracedump::atomic;

use super::confirm::Confirmation;
use super::retention::{self, AttemptRuns, Pruned};
use crate::model::schedule::Schedule;

#[derive(Clone, Debug, Serialize)]
pub struct Attempt {
    pub number: u32,
    /// 0: minimization (or the fault-free check)
    pub level: u8,
    pub what: String,
    pub schedule: String,
    pub bug: bool,
    pub fired: String,
    pub confirmation: Option<Confirmation>,
    pub dir: PathBuf,
    /// why the run gave no verdict of the oracle: a node did not start under the faults, or
    /// the run failed
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// its run directories were removed to bound the disk (see retention)
    pub runs_pruned: bool,
}

pub struct AttemptLog {
    out: PathBuf,
    attempts: Vec<Attempt>,
    /// byte budget for the kept run directories (`--keep-bytes`)
    keep_bytes: u64,
    /// attempts whose run directories are still there
    kept_runs: Vec<AttemptRuns>,
    pruned: Pruned,
}

impl AttemptLog {
    pub fn create(out: &Path, keep_bytes: u64) -> Result<AttemptLog> {
        std::fs::create_dir_all(out.join("attempts"))
            .with_context(|| format!("output directory {}", out.display()))?;
        Ok(AttemptLog {
            out: out.to_path_buf(),
            attempts: Vec::new(),
            keep_bytes,
            kept_runs: Vec::new(),
            pruned: Pruned::default(),
        })
    }

    /// The directory of the next attempt, created, with `schedule` in it.
    pub fn next_dir(&self, schedule: &Schedule) -> Result<PathBuf> {
        let dir = self
            .out
            .join("attempts")
            .join(format!("{:03}", self.attempts.len() + 1));
        std::fs::create_dir_all(&dir).with_context(|| format!("attempt directory {}", dir.display()))?;
        atomic::write_bytes(
            &dir.join("schedule.toml"),
            atomic::SHARED,
            schedule.to_toml().as_bytes(),
        )?;
        Ok(dir)
    }

    pub fn next_number(&self) -> u32 {
        self.attempts.len() as u32 + 1
    }

    /// Records an attempt, then removes the run directories that no longer matter: all but
    /// those of the attempts `protected` (the best, the first bug) and the last few, within
    /// the byte budget, where only `best` is never removed.
    pub fn push(&mut self, attempt: Attempt, protected: &BTreeSet<u32>, best: Option<u32>) -> Result<()> {
        self.kept_runs
            .push(retention::attempt_runs(attempt.number, &attempt.dir));
        self.attempts.push(attempt);
        let before = self.pruned.attempts.len();
        retention::prune(
            &mut self.kept_runs,
            protected,
            best,
            self.keep_bytes,
            &mut self.pruned,
        );
        if self.pruned.attempts.len() != before {
            for a in self
                .attempts
                .iter_mut()
                .filter(|a| self.pruned.attempts.binary_search(&a.number).is_ok())
            {
                a.runs_pruned = true;
            }
        }
        let json = serde_json::to_vec_pretty(&self.attempts)?;
        atomic::write_bytes(&self.out.join("attempts.json"), atomic::SHARED, &json)
    }

    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    pub fn keep_bytes(&self) -> u64 {
        self.keep_bytes
    }

    /// The attempts, and what pruning removed.
    pub fn finish(self) -> (Vec<Attempt>, Pruned) {
        (self.attempts, self.pruned)
    }
}
