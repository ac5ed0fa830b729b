//! The profile: what a scenario's system does when nothing goes wrong (ROSE §4.2,
//! "Profiling"), aggregated from the traces of K fault-free runs (crate::profiling makes
//! them: every syscall counted per process, every call of every candidate function counted,
//! no function events), and written as `profile.json`:
//!
//! - the syscall failures that happen anyway (benign failure signatures: node, syscall,
//!   errno, normalized path), with their counts per run and per second,
//! - syscall frequencies per node,
//! - calls per candidate function, the infrequent ones (below a calls-per-second
//!   threshold) marked: they are the functions worth tracing in production,
//!
//! - how long each node pair's connections fall silent (per pair and service port), so
//!   that the diagnosis can tell an idle connection from a partition,
//! - the exits that would otherwise be symptoms (node, program, status or signal, phase:
//!   start-up or running) and how long each node's start-up takes, so that a helper's
//!   routine non-zero exit is a norm and not a symptom,
//! - each node's programs' builds, configuration files and limits as the first run started
//!   them, the testbed's side of the comparison with production (`drift`),
//!
//! plus `<stem>.functions`, the infrequent functions as `BINARY:SYMBOL` lines, which
//! production tracerd reads with its `functions` setting. Paths are normalized with
//! [`normalize_path`] (the run directory found with [`workdir_of`]) so that a test run and a
//! production host agree; the diagnosis uses the same functions.
//!
//! Where each part lives: the file format and its reading and writing here, the functions
//! and programs a profile counts in `candidates`, one run's trace mapped to nodes in `runs`,
//! the statistics over runs in `stats`, path signatures in `paths`.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

mod candidates;
pub mod exits;
mod paths;
mod runs;
mod stats;

pub use candidates::{candidate_functions, declared_programs, programs_after_run, Candidate, Program};
pub use paths::{normalize_path, path_glob, relaxed_forms, unanchored, workdir_of};
pub use runs::{exits_of, run_data, ExitKey, FailureKey, GapRun, RunData};
pub use stats::{aggregate, detach_after_calls};

/// `format` of every profile file.
pub const FORMAT: &str = "reproducer-profile";
/// The profile format version this code writes and reads.
pub const VERSION: u32 = 1;
/// Most candidate functions per binary: each costs a uprobe in every profile run.
pub const MAX_FUNCTIONS_PER_BINARY: usize = 20_000;
/// A function called at most this often per run (on average) is infrequent at any rate.
pub const FEW_CALLS_PER_RUN: f64 = 5.0;
/// Default threshold below which a function is infrequent, calls per second.
pub const DEFAULT_INFREQUENT_BELOW: f64 = 2.0;

/// The profile file (`profile.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    pub format: String,
    pub version: u32,
    pub scenario: String,
    /// node name -> its command (argv, placeholders unexpanded)
    pub scenario_nodes: BTreeMap<String, Vec<String>>,
    pub runs: u32,
    /// per run: seconds from the first node's start to the end of tracing
    pub run_seconds: Vec<f64>,
    pub infrequent_below_per_s: f64,
    pub failures: Vec<FailureStat>,
    pub syscalls: Vec<SyscallStat>,
    pub functions: Vec<FunctionStat>,
    /// silences of connections between nodes (absent in profiles written before they were recorded)
    #[serde(default)]
    pub gaps: Vec<GapStat>,
    /// deaths that would be symptoms, seen in fault-free runs (absent in profiles written
    /// before they were recorded: then every such death is a symptom)
    #[serde(default)]
    pub exits: Vec<ExitStat>,
    /// node name -> the longest time of any run from its first process's start until every
    /// node was ready, ms: what is start-up and what is running in a production timeline
    #[serde(default)]
    pub startup_ms: BTreeMap<String, u64>,
    pub dropped: Dropped,
    /// failed syscalls of processes that belong to no node (ignored)
    #[serde(default)]
    pub unmapped_events: u64,
    /// syscalls counted for processes that belong to no node (ignored)
    #[serde(default)]
    pub unmapped_syscalls: u64,
    /// candidate functions whose uprobe could not be attached, as BINARY:SYMBOL
    #[serde(default)]
    pub functions_not_attached: Vec<String>,
    /// candidate functions whose uprobe a run detached after `detach_after_calls` calls, as
    /// BINARY:SYMBOL: frequent, and their counts in `functions` are lower bounds
    #[serde(default)]
    pub functions_detached: Vec<String>,
    /// node name -> the programs whose functions were candidates (what its processes ran,
    /// wrappers left out)
    #[serde(default)]
    pub programs: BTreeMap<String, Vec<String>>,
    /// each node's programs as the first fault-free run started them (builds, configuration
    /// files, limits): the testbed's side of `diagnose`'s comparison with production (absent
    /// in profiles written before they were recorded)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environments: Vec<crate::analysis::drift::ProfiledProcess>,
}

/// A failure signature seen in fault-free runs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FailureStat {
    pub node: String,
    pub syscall: String,
    pub errno: String,
    /// normalized path (see [`normalize_path`]); absent when the call names no path
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub per_run: Vec<u64>,
    pub per_second: f64,
}

/// Silences longer than the tracer's `gap_ms` on connections from `node` to `peer` whose
/// service port is `port`: how idle such connections are when nothing goes wrong.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GapStat {
    pub node: String,
    pub peer: String,
    pub port: u16,
    /// silences per run
    pub per_run: Vec<u64>,
    /// the longest silence of any run, including one still going on when the run ended
    pub longest_ms: u64,
    /// `[busy_ms, silence_ms]` pairs: after a busy stretch of up to `busy_ms` (how long a
    /// connection carried packets since its previous silence), such connections fell
    /// silent for up to `silence_ms`; only the pairs no other one exceeds in both. The
    /// diagnosis applies the pair's idle norm only to a connection whose busy stretch one of
    /// them covers (absent in older profiles and for dumps without busy stretches)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_busy: Vec<[u64; 2]>,
}

/// Most `[busy_ms, silence_ms]` pairs kept per node pair and port.
const MAX_AFTER_BUSY: usize = 16;

/// Adds a (busy stretch, silence) pair to `frontier`, kept sorted by busy stretch with only
/// the pairs that no other one exceeds in both (at most [`MAX_AFTER_BUSY`], the longest
/// silences kept).
pub fn add_after_busy(frontier: &mut Vec<[u64; 2]>, busy_ms: u64, silence_ms: u64) {
    if frontier.iter().any(|&[b, s]| b >= busy_ms && s >= silence_ms) {
        return;
    }
    frontier.retain(|&[b, s]| !(busy_ms >= b && silence_ms >= s));
    frontier.push([busy_ms, silence_ms]);
    if frontier.len() > MAX_AFTER_BUSY {
        frontier.sort_by_key(|&[_, s]| std::cmp::Reverse(s));
        frontier.truncate(MAX_AFTER_BUSY);
    }
    frontier.sort_unstable();
}

/// A death that would be a symptom (a non-zero exit status, a death by the process's own
/// signal), seen in fault-free runs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ExitStat {
    pub node: String,
    /// the process's name (its comm)
    pub program: String,
    /// "status N", or the signal's name
    pub status: String,
    /// "start-up" (before every node was ready) or "running"
    pub phase: String,
    pub per_run: Vec<u64>,
}

/// A connection's service port, the same on a test bed and in production: the lower of its
/// two ports (the other is the client's ephemeral port).
pub fn service_port(a: std::net::SocketAddr, b: std::net::SocketAddr) -> u16 {
    a.port().min(b.port())
}

/// Calls of one syscall by one node's processes, failed or not.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SyscallStat {
    pub node: String,
    pub syscall: String,
    pub per_run: Vec<u64>,
    pub per_second: f64,
}

/// Calls of one candidate function.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FunctionStat {
    /// the first node that runs the binary
    pub node: String,
    /// other nodes that run the same binary (calls are counted over all of them)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_with: Vec<String>,
    pub binary: String,
    pub symbol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_file: Option<String>,
    pub per_run: Vec<u64>,
    pub per_second: f64,
    pub infrequent: bool,
}

/// What the tracing could not keep, summed over runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Dropped {
    /// failure events lost (kernel buffer full, or overwritten in the window)
    pub events: u64,
    /// (process, syscall) pairs that did not fit in the kernel's counters
    pub counters: u64,
}

/// What `reproducer profile` was asked for.
#[derive(Clone, Debug)]
pub struct ProfileOptions {
    pub runs: u32,
    /// globs over function names or source files (all functions when empty)
    pub function_patterns: Vec<String>,
    pub infrequent_below_per_s: f64,
}

/// Where the `.functions` list goes: next to `out`, with the extension replaced.
pub fn functions_path(out: &Path) -> PathBuf {
    out.with_extension("functions")
}

/// Checks, before any run, that `out` can be written: its directory exists and it is not
/// a directory itself.
pub fn check_output(out: &Path) -> Result<()> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "--out {}: directory {} does not exist",
            out.display(),
            dir.display()
        );
    }
    if out.is_dir() || out.file_name().is_none() {
        bail!(
            "--out {}: is a directory; name the profile file (e.g. profile.json)",
            out.display()
        );
    }
    Ok(())
}

/// Reads a profile written by `reproducer profile`.
pub fn load(path: &Path) -> Result<Profile> {
    let origin = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("profile {origin}: {e}"))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow!("profile {origin}: not a reproducer profile (not JSON: {e})"))?;
    if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        bail!("profile {origin}: not a reproducer profile (its \"format\" is not \"{FORMAT}\"; write one with `reproducer profile`)");
    }
    match value.get("version").and_then(|v| v.as_u64()) {
        Some(v) if v == VERSION as u64 => {}
        Some(v) => {
            bail!("profile {origin}: version {v} is not supported (this reproducer reads version {VERSION})")
        }
        None => bail!("profile {origin}: damaged (no \"version\")"),
    }
    serde_json::from_value(value).map_err(|e| anyhow!("profile {origin}: damaged ({e})"))
}

/// The `.functions` file: the infrequent functions, one BINARY:SYMBOL line each.
pub fn functions_list(profile: &Profile) -> String {
    let mut text = format!(
        "# infrequent functions (< {} calls/s in {} fault-free runs of scenario {}), written by reproducer profile;\n\
         # the list for tracerd's `functions` setting\n",
        profile.infrequent_below_per_s, profile.runs, profile.scenario
    );
    let lines: BTreeSet<String> = profile
        .functions
        .iter()
        .filter(|f| f.infrequent)
        .map(|f| format!("{}:{}", f.binary, f.symbol))
        .collect();
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// Writes `profile` to `out` and its infrequent functions next to it; returns the
/// `.functions` path.
pub fn write(profile: &Profile, out: &Path) -> Result<PathBuf> {
    let mut json = serde_json::to_vec_pretty(profile)?;
    json.push(b'\n');
    tracedump::atomic::write_bytes(out, tracedump::atomic::SHARED, &json)?;
    let list = functions_path(out);
    tracedump::atomic::write_bytes(
        &list,
        tracedump::atomic::SHARED,
        functions_list(profile).as_bytes(),
    )?;
    Ok(list)
}

/// The one-line summary printed after a profile.
pub fn summary(profile: &Profile, candidates: usize) -> String {
    let infrequent = profile.functions.iter().filter(|f| f.infrequent).count();
    format!(
        "profile: {} runs, {} failure signatures, {} candidate functions ({} not attachable, {} detached as frequent), {} infrequent (< {} calls/s)",
        profile.runs,
        profile.failures.len(),
        candidates,
        profile.functions_not_attached.len(),
        profile.functions_detached.len(),
        infrequent,
        profile.infrequent_below_per_s
    )
}

#[cfg(test)]
mod fixture;

#[cfg(test)]
mod tests {
    use super::fixture::{candidate, run, SCENARIO};
    use super::*;
    use crate::model::scenario::Scenario;

    #[test]
    fn writes_and_loads() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let p = aggregate(&s, &[candidate("store_snapshot")], &[run(1.0, 1, 2, 1, 0)], 2.0);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("profile.json");
        let list = write(&p, &out).unwrap();
        assert_eq!(list, dir.path().join("profile.functions"));
        assert_eq!(load(&out).unwrap(), p);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "no temp files left");

        let other = dir.path().join("other.json");
        std::fs::write(&other, "{\"format\": \"tracerd-dump\", \"version\": 1}").unwrap();
        let e = format!("{:#}", load(&other).unwrap_err());
        assert!(
            e.contains("other.json") && e.contains("not a reproducer profile"),
            "{e}"
        );
        std::fs::write(&other, "not json").unwrap();
        assert!(format!("{:#}", load(&other).unwrap_err()).contains("not a reproducer profile"));
        std::fs::write(&other, "{\"format\": \"reproducer-profile\", \"version\": 2}").unwrap();
        assert!(format!("{:#}", load(&other).unwrap_err()).contains("version 2"));
    }
}
