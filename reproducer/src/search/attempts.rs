//! The attempt log: every schedule the search tried, in `OUT/attempts.json` (rewritten
//! atomically after each attempt, so an interrupted search leaves a readable log) and one
//! directory per attempt, `OUT/attempts/NNN/` with its `schedule.toml` and its runs.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use tracedump::atomic;

use super::confirm::Confirmation;
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
}

pub struct AttemptLog {
    out: PathBuf,
    attempts: Vec<Attempt>,
}

impl AttemptLog {
    pub fn create(out: &Path) -> Result<AttemptLog> {
        std::fs::create_dir_all(out.join("attempts")).with_context(|| format!("output directory {}", out.display()))?;
        Ok(AttemptLog { out: out.to_path_buf(), attempts: Vec::new() })
    }

    /// The directory of the next attempt, created, with `schedule` in it.
    pub fn next_dir(&self, schedule: &Schedule) -> Result<PathBuf> {
        let dir = self.out.join("attempts").join(format!("{:03}", self.attempts.len() + 1));
        std::fs::create_dir_all(&dir).with_context(|| format!("attempt directory {}", dir.display()))?;
        atomic::write_bytes(&dir.join("schedule.toml"), atomic::SHARED, schedule.to_toml().as_bytes())?;
        Ok(dir)
    }

    pub fn next_number(&self) -> u32 {
        self.attempts.len() as u32 + 1
    }

    pub fn push(&mut self, attempt: Attempt) -> Result<()> {
        self.attempts.push(attempt);
        let json = serde_json::to_vec_pretty(&self.attempts)?;
        atomic::write_bytes(&self.out.join("attempts.json"), atomic::SHARED, &json)
    }

    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    pub fn into_attempts(self) -> Vec<Attempt> {
        self.attempts
    }
}
