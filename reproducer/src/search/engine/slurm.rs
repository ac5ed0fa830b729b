//! Attempts as Slurm batch jobs: `sbatch` of `reproducer run-attempt` (this executable, at
//! the same path on the nodes), the job's output and errors in the run's directory, the job
//! watched with `squeue` until it has ended, and `scancel` on Ctrl-C or SIGTERM and whenever
//! the wait ends early (an error, a panic): no job outlives its search. Polling rather than
//! `sbatch --wait`, whose waits grow to half a minute: an attempt lasts seconds. sbatch's
//! own input variables choose the partition, account, time limit and resources
//! (`SBATCH_PARTITION`, `SBATCH_CPUS_PER_TASK`...), `SLURM_CONF` the cluster. The Slurm
//! commands run in a process group of their own, so that a Ctrl-C at the terminal cannot
//! stop one half-way (a job submitted whose number never came back could not be cancelled).
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{shell_word, Ended};

/// The job's stdout and stderr, in the run's directory.
pub const JOB_OUTPUT: &str = "slurm-job.out";
pub const JOB_ERRORS: &str = "slurm-job.err";

/// How often a job's state is asked for.
const POLL: Duration = Duration::from_secs(1);
/// Queries that may fail in a row (the controller restarting) before the wait gives up.
const MAX_FAILED_QUERIES: u32 = 60;

/// States in which a job has ended (squeue's `%T`); COMPLETED is the only good one.
const ENDED: &[&str] = &[
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
    "SPECIAL_EXIT",
    "REVOKED",
];

/// Runs the attempt of `spec` as a batch job, its run directory under `dir`, until it has
/// ended.
pub(super) fn run_job(exe: &Path, spec: &Path, dir: &Path) -> Result<Ended> {
    if crate::interrupt::requested() {
        bail!("interrupted before its job was submitted");
    }
    let mut job = Job::submit(exe, spec, dir)?;
    let state = job.wait()?;
    let messages = std::fs::read_to_string(dir.join(JOB_ERRORS)).unwrap_or_default();
    Ok(Ended {
        // a job gone from the queue before its end was seen: its report says
        success: state.as_deref().is_none_or(|s| s == "COMPLETED"),
        how: format!(
            "Slurm job {} ended {} (its output: {})",
            job.id,
            state.as_deref().unwrap_or("(no longer in the queue)"),
            dir.join(JOB_ERRORS).display()
        ),
        messages,
    })
}

/// A submitted job; cancelled when dropped before its end was seen.
struct Job {
    id: String,
    ended: bool,
}

impl Job {
    fn submit(exe: &Path, spec: &Path, dir: &Path) -> Result<Job> {
        let dir_text = dir.display().to_string();
        if dir_text.contains('%') || dir_text.contains('\\') {
            // sbatch reads % and \ in --output as its filename patterns
            bail!("--runner slurm: the run directory {dir_text} has a % or \\ (sbatch's filename patterns): choose another --out");
        }
        let script = format!(
            "exec {} run-attempt --spec {} --dir {}",
            shell_word(exe)?,
            shell_word(spec)?,
            shell_word(dir)?
        );
        let out = slurm_command("sbatch", |c| {
            c.arg("--parsable")
                .arg("--job-name=reproducer-attempt")
                .arg(format!("--output={}", dir.join(JOB_OUTPUT).display()))
                .arg(format!("--error={}", dir.join(JOB_ERRORS).display()))
                .arg(format!("--wrap={script}"))
        })?;
        if !out.status.success() {
            bail!("sbatch of {}: {}", spec.display(), first_line(&out.stderr));
        }
        // "ID" or "ID;CLUSTER"
        let printed = String::from_utf8_lossy(&out.stdout);
        let id = printed.trim().split(';').next().unwrap_or_default().to_string();
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            bail!("sbatch of {}: no job number in {printed:?}", spec.display());
        }
        Ok(Job { id, ended: false })
    }

    /// Waits until the job has ended; its last state, None when it left the queue unseen.
    /// Ctrl-C or SIGTERM cancels it and waits for it to end.
    fn wait(&mut self) -> Result<Option<String>> {
        let mut cancelled = false;
        let mut failed_queries = 0;
        let mut next_query = Instant::now();
        loop {
            if crate::interrupt::requested() && !cancelled {
                self.cancel();
                cancelled = true;
            }
            if Instant::now() >= next_query {
                match self.state() {
                    Ok(Some(state)) if !ENDED.contains(&state.as_str()) => failed_queries = 0,
                    Ok(state) => {
                        self.ended = true;
                        return Ok(state);
                    }
                    Err(e) => {
                        failed_queries += 1;
                        if failed_queries >= MAX_FAILED_QUERIES {
                            return Err(e.context(format!(
                                "Slurm job {}: no state for {MAX_FAILED_QUERIES} s",
                                self.id
                            )));
                        }
                    }
                }
                next_query = Instant::now() + POLL;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The job's state; None when the controller no longer knows it.
    fn state(&self) -> Result<Option<String>> {
        let out = slurm_command("squeue", |c| {
            c.args(["--noheader", "--states=all", "--format=%T", "--jobs"])
                .arg(&self.id)
        })?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            if stderr.contains("Invalid job id") {
                return Ok(None);
            }
            bail!("squeue: {}", first_line(&out.stderr));
        }
        let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok((!state.is_empty()).then_some(state))
    }

    fn cancel(&self) {
        match slurm_command("scancel", |c| c.arg(&self.id)) {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!("reproducer: scancel {}: {}", self.id, first_line(&out.stderr)),
            Err(e) => eprintln!("reproducer: scancel {}: {e:#}", self.id),
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if !self.ended {
            self.cancel();
        }
    }
}

/// Runs Slurm's `name` with the arguments `args` adds, in its own process group.
fn slurm_command(name: &str, args: impl FnOnce(&mut Command) -> &mut Command) -> Result<Output> {
    let mut cmd = Command::new(name);
    args(&mut cmd);
    cmd.stdin(Stdio::null()).process_group(0);
    cmd.output()
        .with_context(|| format!("running {name} (--runner slurm needs Slurm's client commands on PATH)"))
}

fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}
