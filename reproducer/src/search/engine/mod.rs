//! Where each attempt runs (`--runner`): a `reproducer run-attempt` process on this host
//! (`local`, the default), a Slurm batch job (`slurm`), or any other engine behind a command
//! template (`'COMMAND {spec} {dir}'`, e.g. a script that creates a Kubernetes Job and waits
//! for it). Whatever the engine, an attempt is its spec file and its run directory, both in
//! the search's `--out` (with an engine: a directory every node mounts at the same path), and
//! its result is the report `run-attempt` leaves in that directory (`attempt-report.json`),
//! read back the same way for every engine: the search, its runs side by side (`--jobs`) and
//! its report do not depend on where the runs happen.
use std::io::{Read, Seek};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;

mod slurm;

/// The report `reproducer run-attempt --dir DIR` leaves in DIR (also printed on its stdout).
pub const REPORT_FILE: &str = "attempt-report.json";

/// How long a report that an engine says was written may take to show on the shared
/// directory (a network filesystem's cache of a missing name).
const REPORT_GRACE: Duration = Duration::from_secs(5);

/// Where the attempts run.
#[derive(Clone, Debug, PartialEq)]
pub enum Engine {
    /// a `reproducer run-attempt` child process on this host
    Local,
    /// a Slurm batch job per attempt (`sbatch`, watched with `squeue`, `scancel` on Ctrl-C)
    Slurm,
    /// a command per attempt, its words with `{spec}`, `{dir}` and `{reproducer}` replaced:
    /// it runs the attempt somewhere and returns when the attempt has ended
    Command(Vec<String>),
}

impl std::str::FromStr for Engine {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Engine, String> {
        match text.trim() {
            "local" => Ok(Engine::Local),
            "slurm" => Ok(Engine::Slurm),
            template => {
                let words =
                    shlex::split(template).ok_or_else(|| format!("{template:?}: unbalanced quotes"))?;
                if words.is_empty() {
                    return Err("`local`, `slurm`, or a command with {spec} and {dir}".into());
                }
                for placeholder in ["{spec}", "{dir}"] {
                    if !words.iter().any(|w| w.contains(placeholder)) {
                        return Err(format!(
                            "{template:?} has no {placeholder}: `local`, `slurm`, or a command with {{spec}} and {{dir}}"
                        ));
                    }
                }
                Ok(Engine::Command(words))
            }
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Engine::Local => f.write_str("local"),
            Engine::Slurm => f.write_str("slurm"),
            Engine::Command(words) => {
                f.write_str(&shlex::try_join(words.iter().map(String::as_str)).unwrap_or_default())
            }
        }
    }
}

/// How an attempt's process or job ended: whether it says it succeeded, in words, and what
/// it said on stderr.
pub(super) struct Ended {
    success: bool,
    how: String,
    messages: String,
}

impl Engine {
    pub fn is_local(&self) -> bool {
        *self == Engine::Local
    }

    /// Runs the attempt whose spec is `spec`, its run directory under `dir`, with
    /// `reproducer run-attempt` (this executable) where the engine puts it; returns the
    /// report the attempt left in `dir`. What it said on stderr is shown, indented; a failed
    /// attempt's error is its own `reproducer: error:` line when it has one.
    pub fn run_attempt<T: DeserializeOwned>(&self, spec: &Path, dir: &Path) -> Result<T> {
        crate::interrupt::install()?;
        let report = dir.join(REPORT_FILE);
        match std::fs::remove_file(&report) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing an old {}", report.display())),
        }
        let exe = this_program()?;
        let ended = match self {
            Engine::Local => {
                // the binary this process runs, even when a rebuild or an upgrade has
                // replaced its file since (its path then names the new one, or nothing)
                let mut cmd = Command::new(SELF_EXE);
                cmd.arg("run-attempt")
                    .arg("--spec")
                    .arg(spec)
                    .arg("--dir")
                    .arg(dir);
                run_process(cmd, &exe.display().to_string())?
            }
            Engine::Command(words) => {
                let words: Vec<String> = words
                    .iter()
                    .map(|w| {
                        w.replace("{spec}", &spec.display().to_string())
                            .replace("{dir}", &dir.display().to_string())
                            .replace("{reproducer}", &exe.display().to_string())
                    })
                    .collect();
                let Some((program, args)) = words.split_first() else {
                    bail!("--runner: an empty command");
                };
                let mut cmd = Command::new(program);
                cmd.args(args);
                run_process(cmd, program)?
            }
            Engine::Slurm => slurm::run_job(&exe, spec, dir)?,
        };
        // a local file is there when its writer has ended; a shared one may take a moment
        let grace = if self.is_local() {
            Duration::ZERO
        } else {
            REPORT_GRACE
        };
        read_back(&report, ended, spec, grace)
    }
}

/// The running program's own file, whatever has happened to its path since it started.
const SELF_EXE: &str = "/proc/self/exe";

/// This program's path, for the attempts an engine runs elsewhere (its file there is the
/// one now at that path): the kernel's name for it without the " (deleted)" it gets when
/// the file was replaced.
fn this_program() -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe().context("this program's path")?;
    let text = exe.to_string_lossy();
    Ok(match text.strip_suffix(" (deleted)") {
        Some(path) => path.into(),
        None => exe,
    })
}

/// Runs `cmd` (named `what` in errors) to its end, its stderr collected; a Ctrl-C reaches
/// it from the terminal, a SIGTERM to this process is passed on.
fn run_process(mut cmd: Command, what: &str) -> Result<Ended> {
    let mut stderr = tempfile::tempfile().context("a file for the run's messages")?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr.try_clone()?)
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let mut passed_on = false;
    let status: ExitStatus = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if crate::interrupt::requested() && !passed_on {
            // SAFETY: kill(2) of our own child; it tears its run down and exits
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            passed_on = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut messages = String::new();
    stderr.rewind()?;
    stderr.read_to_string(&mut messages)?;
    Ok(Ended {
        success: status.success(),
        how: format!("{what} ended with {status}"),
        messages,
    })
}

/// The attempt's report at `report`, once it `ended`.
fn read_back<T: DeserializeOwned>(report: &Path, ended: Ended, spec: &Path, grace: Duration) -> Result<T> {
    let error_prefix = "reproducer: error: ";
    let error = ended
        .messages
        .lines()
        .find_map(|l| l.strip_prefix(error_prefix))
        .map(String::from);
    for line in ended.messages.lines().filter(|l| !l.starts_with(error_prefix)) {
        eprintln!("    {line}");
    }
    if !ended.success {
        bail!(
            "{}",
            error.unwrap_or_else(|| format!("run-attempt {}: {}", spec.display(), ended.how))
        );
    }
    let text = read_when_there(report, grace).with_context(|| {
        format!(
            "run-attempt {}: {} without its report (is the directory shared with where it ran?)",
            spec.display(),
            ended.how
        )
    })?;
    serde_json::from_slice(&text).with_context(|| format!("the report of run-attempt {}", spec.display()))
}

/// The file at `path`, waiting up to `grace` for it to appear.
fn read_when_there(path: &Path, grace: Duration) -> Result<Vec<u8>> {
    let deadline = Instant::now() + grace;
    loop {
        match std::fs::read(path) {
            Ok(bytes) => return Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
}

/// `path` as one word of a shell command line.
fn shell_word(path: &Path) -> Result<String> {
    let text = path.display().to_string();
    Ok(shlex::try_quote(&text)
        .with_context(|| format!("{text:?}"))?
        .into_owned())
}

#[cfg(test)]
mod tests;
