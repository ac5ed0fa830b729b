//! The attempt log: every schedule the search tried, in `OUT/attempts.json` (rewritten
//! atomically after each attempt, so an interrupted search leaves a readable log) and one
//! directory per attempt, `OUT/attempts/NNN/` with its `schedule.toml` and its runs (only
//! the runs that matter stay: see `retention`). When the search ends, each run that stayed
//! gets its trace as a Perfetto timeline beside its dumps (`trace/trace.perfetto`). With
//! `--jobs`, a schedule run ahead of need waits in `OUT/attempts/ahead-N/` until the search
//! comes to it (then it becomes the next `NNN`); runs made side by side that the search did
//! not need are removed and listed in the attempt that started them (`surplus`).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use tracedump::atomic;
use tracedump::merge::Merged;

use super::confirm::Confirmation;
use super::retention::{self, AttemptRuns, Pruned};
use super::Progress;
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
    /// the Perfetto timelines of its kept runs (its own run first, then its confirmation
    /// runs), written when the search ends
    pub timelines: Vec<PathBuf>,
    /// runs made side by side with this attempt's that the search did not use (`--jobs`):
    /// removed, not counted in the runs
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub surplus: Vec<String>,
}

/// The timeline of a run, in its trace directory beside the dumps.
pub const TIMELINE_FILE: &str = "trace.perfetto";

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
        self.schedule_dir(&format!("{:03}", self.attempts.len() + 1), schedule)
    }

    /// A directory for a schedule run ahead of need, created, with `schedule` in it.
    pub fn ahead_dir(&self, seq: u32, schedule: &Schedule) -> Result<PathBuf> {
        self.schedule_dir(&format!("ahead-{seq}"), schedule)
    }

    fn schedule_dir(&self, name: &str, schedule: &Schedule) -> Result<PathBuf> {
        let dir = self.out.join("attempts").join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("attempt directory {}", dir.display()))?;
        atomic::write_bytes(
            &dir.join("schedule.toml"),
            atomic::SHARED,
            schedule.to_toml().as_bytes(),
        )?;
        Ok(dir)
    }

    /// Makes a directory run ahead of need that of the next attempt (renamed).
    pub fn adopt(&self, ahead: &Path) -> Result<PathBuf> {
        let dir = self
            .out
            .join("attempts")
            .join(format!("{:03}", self.attempts.len() + 1));
        std::fs::rename(ahead, &dir)
            .with_context(|| format!("renaming {} to {}", ahead.display(), dir.display()))?;
        repoint_run_files(&dir, ahead, &dir)?;
        Ok(dir)
    }

    /// Adds a line about surplus runs to attempt `number` (the last one if it is not there).
    pub fn note_surplus(&mut self, number: u32, text: String) -> Result<()> {
        let found = self.attempts.iter().position(|a| a.number == number);
        let Some(i) = found.or(self.attempts.len().checked_sub(1)) else {
            return Ok(());
        };
        self.attempts[i].surplus.push(text);
        let json = serde_json::to_vec_pretty(&self.attempts)?;
        atomic::write_bytes(&self.out.join("attempts.json"), atomic::SHARED, &json)
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

    /// Writes the timelines of the runs that stayed (a trace that cannot be read gets a line
    /// in `progress`); returns the attempts, and what pruning removed.
    pub fn finish(mut self, progress: &dyn Progress) -> Result<(Vec<Attempt>, Pruned)> {
        for runs in &self.kept_runs {
            let timelines = export_timelines(runs, progress);
            if let Some(a) = self.attempts.iter_mut().find(|a| a.number == runs.number) {
                a.timelines = timelines;
            }
        }
        let json = serde_json::to_vec_pretty(&self.attempts)?;
        atomic::write_bytes(&self.out.join("attempts.json"), atomic::SHARED, &json)?;
        Ok((self.attempts, self.pruned))
    }
}

/// Writes each run's trace (`trace/*.tdump`) as one Perfetto timeline beside it; returns the
/// files written, the attempt's own run first. A run without a trace gets none; a trace
/// that cannot be read gets none and a warning: the search's result does not depend on it.
fn export_timelines(runs: &AttemptRuns, progress: &dyn Progress) -> Vec<PathBuf> {
    let mut dirs = runs.dirs.clone();
    // the attempt's run is right under its directory, confirmation runs one level deeper
    dirs.sort_by_key(|d| (d.components().count(), d.clone()));
    let mut written = Vec::new();
    for dir in dirs {
        let trace_dir = dir.join("trace");
        let dumps = crate::analysis::chain::runs::run_dumps(&trace_dir);
        if dumps.is_empty() {
            continue;
        }
        let file = trace_dir.join(TIMELINE_FILE);
        match Merged::read(&dumps).and_then(|m| tracedump::perfetto::write(&m, &file)) {
            Ok(_) => written.push(file),
            Err(e) => progress.line(&format!("    no timeline for run {}: {e:#}", dir.display())),
        }
    }
    written
}

/// The run.json files under `dir` name the run's own directory (`workdir`, `trace`); after
/// a rename from `old` to `new` they are rewritten to name it where it now is.
fn repoint_run_files(dir: &Path, old: &Path, new: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            repoint_run_files(&path, old, new)?;
        } else if path.file_name().is_some_and(|n| n == "run.json") {
            let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let mut run: serde_json::Value =
                serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))?;
            for key in ["workdir", "trace"] {
                if let Some(p) = run.get(key).and_then(|v| v.as_str()) {
                    if let Ok(rest) = Path::new(p).strip_prefix(old) {
                        run[key] = new.join(rest).display().to_string().into();
                    }
                }
            }
            let json = serde_json::to_vec_pretty(&run)?;
            atomic::write_bytes(&path, atomic::SHARED, &json)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracedump::dump::{write_dump, DumpContents, DumpMeta};
    use tracedump::record::{Payload, Record};

    struct NoProgress;

    impl Progress for NoProgress {
        fn line(&self, text: &str) {
            panic!("no progress line expected: {text}");
        }
    }

    fn attempt(number: u32, dir: PathBuf) -> Attempt {
        Attempt {
            number,
            level: 1,
            what: "crash".into(),
            schedule: String::new(),
            bug: false,
            fired: String::new(),
            confirmation: None,
            dir,
            note: None,
            runs_pruned: false,
            timelines: Vec::new(),
            surplus: Vec::new(),
        }
    }

    /// A run directory as the executor leaves it: its trace dump in `trace/`.
    fn run_with_trace(dir: &Path) {
        let trace = dir.join("trace");
        std::fs::create_dir_all(&trace).unwrap();
        let record = Record {
            ts_ns: 5,
            pid: 1,
            tid: 1,
            comm: [b'a'; 16],
            payload: Payload::Function { function_id: 0 },
        };
        let contents = DumpContents {
            meta: DumpMeta::default(),
            records: [record],
            blobs: (0, Vec::new()),
        };
        write_dump(&trace, "run.tdump", contents).unwrap();
    }

    #[test]
    fn the_runs_that_stay_get_their_timelines_when_the_search_ends() {
        let out = tempfile::tempdir().unwrap();
        let mut log = AttemptLog::create(out.path(), u64::MAX).unwrap();
        let dir = log.next_dir(&Schedule::default()).unwrap();
        run_with_trace(&dir.join("reproducer-run-a"));
        run_with_trace(&dir.join("confirm-01/reproducer-run-b"));
        // a run that failed before its trace was taken
        std::fs::create_dir_all(dir.join("confirm-02/reproducer-run-c")).unwrap();
        log.push(attempt(1, dir.clone()), &BTreeSet::new(), None).unwrap();
        let (attempts, _) = log.finish(&NoProgress).unwrap();
        assert_eq!(
            attempts[0].timelines,
            vec![
                dir.join("reproducer-run-a/trace").join(TIMELINE_FILE),
                dir.join("confirm-01/reproducer-run-b/trace").join(TIMELINE_FILE),
            ],
            "the attempt's run first, then its confirmation runs"
        );
        assert!(attempts[0].timelines.iter().all(|t| t.is_file()));
        let json = std::fs::read_to_string(out.path().join("attempts.json")).unwrap();
        assert!(json.contains("trace.perfetto"), "{json}");
    }

    #[test]
    fn a_run_made_ahead_names_its_new_directory_once_adopted() {
        let out = tempfile::tempdir().unwrap();
        let log = AttemptLog::create(out.path(), u64::MAX).unwrap();
        let ahead = log.ahead_dir(3, &Schedule::default()).unwrap();
        let run = ahead.join("reproducer-run-7");
        std::fs::create_dir_all(&run).unwrap();
        let elsewhere = "/elsewhere/reproducer-run-7";
        let json = serde_json::json!({
            "workdir": run, "trace": run.join("trace"), "bug": true, "kept": true,
        });
        std::fs::write(run.join("run.json"), json.to_string()).unwrap();
        std::fs::create_dir_all(ahead.join("confirm-01")).unwrap();
        let other = serde_json::json!({ "workdir": elsewhere, "trace": null });
        std::fs::write(ahead.join("confirm-01/run.json"), other.to_string()).unwrap();

        let dir = log.adopt(&ahead).unwrap();
        assert_eq!(dir, out.path().join("attempts/001"));
        let read =
            |p: PathBuf| -> serde_json::Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
        let moved = read(dir.join("reproducer-run-7/run.json"));
        let now = dir.join("reproducer-run-7");
        assert_eq!(moved["workdir"], now.display().to_string());
        assert_eq!(moved["trace"], now.join("trace").display().to_string());
        assert_eq!(moved["bug"], true, "other fields stay");
        let untouched = read(dir.join("confirm-01/run.json"));
        assert_eq!(
            untouched["workdir"], elsewhere,
            "a path outside the old directory stays"
        );
        assert!(untouched["trace"].is_null());
    }
}
