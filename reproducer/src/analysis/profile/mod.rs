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
//!
//! plus `<stem>.functions`, the infrequent functions as `BINARY:SYMBOL` lines, which
//! production tracerd reads with its `functions` setting. Paths are normalized with
//! [`normalize_path`] so that a test run and a production host agree; the diagnosis uses
//! the same function.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};
use tracedump::event::What;

use super::binary;
use super::nodemap::NodeMap;
use crate::model::resolve_binary;
use crate::model::scenario::{Node, Scenario};

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

/// A function the profile counts: a symbol of a node's binary.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// names of the nodes that run the binary, in scenario order
    pub nodes: Vec<String>,
    /// index of the first of them
    pub node_index: usize,
    pub binary: String,
    pub symbol: String,
    pub source_file: Option<String>,
}

/// A failure signature.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FailureKey {
    pub node: String,
    pub syscall: String,
    pub errno: String,
    pub path: Option<String>,
}

/// What one fault-free run contributed, mapped to nodes.
#[derive(Clone, Debug, Default)]
pub struct RunData {
    pub seconds: f64,
    pub failures: BTreeMap<FailureKey, u64>,
    /// (node, syscall) -> calls
    pub syscalls: BTreeMap<(String, String), u64>,
    /// (binary, symbol) -> calls
    pub function_calls: BTreeMap<(String, String), u64>,
    /// (node, peer, service port) -> (silences, longest ms)
    pub gaps: BTreeMap<(String, String, u16), (u64, u64)>,
    /// (binary, symbol) of functions that were not attached
    pub unattached: BTreeSet<(String, String)>,
    /// (binary, symbol) of functions detached at the call limit (counted up to it)
    pub detached: BTreeSet<(String, String)>,
    pub dropped: Dropped,
    pub unmapped_events: u64,
    pub unmapped_syscalls: u64,
}

/// A path as test runs and production hosts both see it, as a glob: "*/" and the last
/// component, with what differs from run to run replaced by "*" — every run of ASCII digits
/// and a random temporary-name suffix ("/srv/x/temp-4123.rdb" -> "*/temp-*.rdb",
/// "/tmp/reproducer-run-UF3ENM" -> "*/reproducer-run-*"). A component left with nothing
/// literal keeps its parent ("/proc/15881" -> "*/proc/*"), so that a signature never
/// matches every path.
pub fn normalize_path(path: &str) -> String {
    let mut kept = Vec::new();
    for part in path.split('/').rev().filter(|p| !p.is_empty()) {
        let part = normalize_component(part);
        let literal = part.chars().any(|c| c != '*');
        kept.push(part);
        if literal {
            break;
        }
    }
    kept.reverse();
    format!("*/{}", kept.join("/"))
}

/// Shortest random suffix taken for a temporary name's (mkstemp's and mkdtemp's are 6).
const RANDOM_SUFFIX_MIN: usize = 6;

/// Whether `s` looks like the random part of a temporary name: letters and digits of at
/// least two kinds (upper, lower, digit), as mkstemp draws them.
fn looks_random(s: &str) -> bool {
    let kinds = [
        s.bytes().any(|b| b.is_ascii_uppercase()),
        s.bytes().any(|b| b.is_ascii_lowercase()),
        s.bytes().any(|b| b.is_ascii_digit()),
    ];
    s.len() >= RANDOM_SUFFIX_MIN
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
        && kinds.iter().filter(|&&k| k).count() >= 2
}

fn normalize_component(part: &str) -> String {
    let (stem, random) = match part.rfind(['.', '-', '_']) {
        Some(i) if looks_random(&part[i + 1..]) => (&part[..=i], true),
        _ => match part.strip_prefix("tmp") {
            // Python's tempfile: "tmp" and 8 of [a-z0-9_]
            Some(rest)
                if rest.len() >= 8
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
            {
                ("tmp", true)
            }
            _ => (part, false),
        },
    };
    let mut out = String::with_capacity(part.len());
    let mut in_digits = false;
    for c in stem.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('*');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    if random {
        out.push('*');
    }
    out
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

/// The binary a node runs: its absolute path as named (the directory resolved, a symlinked
/// program kept under its own name: /usr/bin/redis-server), and the file it really is.
fn node_binary(node: &Node) -> Result<(PathBuf, PathBuf)> {
    let program = &node.command[0];
    if program.contains('{') {
        bail!("node {}: its program {program} has a placeholder; a profile needs the program's path before any run", node.name);
    }
    let resolved = resolve_binary(program);
    let not_found = |e: std::io::Error| {
        anyhow!(
            "node {}: program {program} ({}): {e}",
            node.name,
            resolved.display()
        )
    };
    let dir = match resolved.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = resolved
        .file_name()
        .ok_or_else(|| anyhow!("node {}: program {program} is not a file name", node.name))?;
    let named = std::fs::canonicalize(dir).map_err(not_found)?.join(name);
    let real = std::fs::canonicalize(&named).map_err(not_found)?;
    Ok((named, real))
}

/// A program whose functions are candidates: the node that runs it, its path as named
/// (see [`node_binary`]) and the file it really is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    pub node: usize,
    pub named: PathBuf,
    pub real: PathBuf,
}

/// Before any run: each node's `command[0]`, unless it is a wrapper (a shell, setpriv,
/// runuser, ...), whose own functions are never the server's.
pub fn declared_programs(scenario: &Scenario) -> Result<Vec<Program>> {
    let mut out = Vec::new();
    for (node, n) in scenario.nodes.iter().enumerate() {
        let (named, real) = node_binary(n)?;
        if !super::programs::is_wrapper(&real) && !super::programs::is_wrapper(&named) {
            out.push(Program { node, named, real });
        }
    }
    Ok(out)
}

/// The programs after a fault-free run: what each node's processes executed (`ran`), a
/// node's declared program keeping its name; a node whose processes the trace did not show
/// keeps what was declared.
pub fn programs_after_run(
    declared: &[Program],
    ran: &BTreeMap<usize, BTreeSet<PathBuf>>,
    nodes: usize,
) -> Vec<Program> {
    let mut out = Vec::new();
    for node in 0..nodes {
        let mine: Vec<&Program> = declared.iter().filter(|p| p.node == node).collect();
        match ran.get(&node) {
            Some(exes) if !exes.is_empty() => out.extend(exes.iter().map(|real| {
                let named = mine
                    .iter()
                    .find(|p| p.real == *real)
                    .map_or_else(|| real.clone(), |p| p.named.clone());
                Program {
                    node,
                    named,
                    real: real.clone(),
                }
            })),
            _ => out.extend(mine.into_iter().cloned()),
        }
    }
    out
}

/// The functions to count: every defined function of every program that matches
/// `patterns` (all when empty), once per file; and, for every program or node that
/// contributes none, why (for the warning when there are none at all).
pub fn candidate_functions(
    scenario: &Scenario,
    programs: &[Program],
    patterns: &[String],
) -> Result<(Vec<Candidate>, Vec<String>)> {
    // (path as the first node names it, the real file, nodes): nodes sharing a file share it
    let mut binaries: Vec<(PathBuf, PathBuf, Vec<usize>)> = Vec::new();
    let mut why_none = Vec::new();
    for (i, node) in scenario.nodes.iter().enumerate() {
        if !programs.iter().any(|p| p.node == i) {
            why_none.push(format!(
                "node {} runs only wrappers ({})",
                node.name, node.command[0]
            ));
        }
    }
    for p in programs {
        match binaries.iter_mut().find(|(_, r, _)| *r == p.real) {
            Some((_, _, nodes)) if nodes.contains(&p.node) => {}
            Some((_, _, nodes)) => nodes.push(p.node),
            None => binaries.push((p.named.clone(), p.real.clone(), vec![p.node])),
        }
    }
    let mut out = Vec::new();
    for (bin, _, nodes) in binaries {
        let names: Vec<String> = nodes.iter().map(|&i| scenario.nodes[i].name.clone()).collect();
        let symbols = match binary::function_symbols(&bin) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "reproducer: warning: no functions profiled for node {}: {e:#}",
                    names.join(", ")
                );
                why_none.push(format!("{}: {e:#}", bin.display()));
                continue;
            }
        };
        let total = symbols.len();
        let mut seen = BTreeSet::new();
        // a symbol with ':' cannot be written as BINARY:SYMBOL
        let chosen: Vec<_> = binary::filter_symbols(symbols, patterns)?
            .into_iter()
            .filter(|s| !s.name.is_empty() && !s.name.contains(':') && seen.insert(s.name.clone()))
            .collect();
        if chosen.is_empty() {
            why_none.push(if total == 0 {
                format!(
                    "{} defines no functions (stripped, and not a Go program)",
                    bin.display()
                )
            } else {
                format!(
                    "--functions-from matched none of the {total} functions of {}",
                    bin.display()
                )
            });
        }
        if chosen.len() > MAX_FUNCTIONS_PER_BINARY {
            bail!(
                "{}: {} candidate functions, more than {MAX_FUNCTIONS_PER_BINARY} (one uprobe each); narrow them with --functions-from PATTERN (a glob over function names or source files)",
                bin.display(),
                chosen.len()
            );
        }
        let binary = bin.display().to_string();
        out.extend(chosen.into_iter().map(|s| Candidate {
            nodes: names.clone(),
            node_index: nodes[0],
            binary: binary.clone(),
            symbol: s.name,
            source_file: s.source_file,
        }));
    }
    Ok((out, why_none))
}

/// One run's trace, mapped to nodes (also what `reproduce` learns from its fault-free
/// check run when it has no profile); `launched` are the (node, pid) pairs the run started,
/// `duration_ms` the span the trace's counts cover.
pub fn run_data(
    scenario: &Scenario,
    trace: &Path,
    launched: &[(String, u32)],
    duration_ms: u64,
) -> Result<RunData> {
    let dump = tracedump::dump::Dump::read(trace)?;
    let launched: Vec<(usize, u32)> = launched
        .iter()
        .filter_map(|(name, pid)| Some((scenario.node_index(name)?, *pid)))
        .collect();
    let map = NodeMap::build_for(scenario, &dump.meta, &launched);
    let mut data = RunData {
        seconds: duration_ms as f64 / 1000.0,
        ..Default::default()
    };
    let node_name = |pid: u32| map.node(pid).map(|i| scenario.nodes[i].name.clone());
    for e in dump.events() {
        if let What::NetworkGap(g) = &e.what {
            add_gap(&mut data, scenario, g);
            continue;
        }
        let What::SyscallFailure(f) = e.what else { continue };
        let Some(node) = node_name(e.pid) else {
            data.unmapped_events += 1;
            continue;
        };
        let key = FailureKey {
            node,
            syscall: f.syscall,
            errno: f.errno.unwrap_or_default(),
            path: f.path.as_deref().map(normalize_path),
        };
        *data.failures.entry(key).or_default() += 1;
    }
    for c in &dump.meta.syscall_counts {
        match node_name(c.pid) {
            Some(node) => *data.syscalls.entry((node, c.syscall.clone())).or_default() += c.count,
            None => data.unmapped_syscalls += c.count,
        }
    }
    let meta = &dump.meta;
    for (i, f) in meta.functions.iter().enumerate() {
        let key = (f.binary.display().to_string(), f.symbol.clone());
        if meta.unattached_functions.contains(&i) {
            data.unattached.insert(key);
        } else {
            if meta.detached_functions.contains(&i) {
                data.detached.insert(key.clone());
            }
            *data.function_calls.entry(key).or_default() += meta.function_calls.get(i).copied().unwrap_or(0);
        }
    }
    let k = &meta.counters;
    data.dropped.events = k.kernel.buffer_full_syscall + k.recorder.ring_overwritten;
    data.dropped.counters = k.kernel.syscall_counts_full;
    Ok(data)
}

/// A silence between two nodes' addresses (self-connections and other ends are not pairs).
/// A silence longer than the run itself is a clock error, not a norm: taken as the longest
/// silence of a pair, it would let every later partition of that pair pass as idle (a
/// tracerd before the fix of its jiffies stamps recorded silences of 584 years).
fn add_gap(data: &mut RunData, scenario: &Scenario, g: &tracedump::event::NetworkGap) {
    let (Some(local), Some(peer)) = (g.local, g.peer) else {
        return;
    };
    if g.duration_ms as f64 > data.seconds * 1000.0 {
        log::warn!(
            "profile: a silence of {} ms between {local} and {peer} in a run of {:.1} s: ignored (impossible)",
            g.duration_ms,
            data.seconds
        );
        return;
    }
    let (Some(a), Some(b)) = (scenario.node_at(local.ip()), scenario.node_at(peer.ip())) else {
        return;
    };
    if a == b {
        return;
    }
    let key = (
        scenario.nodes[a].name.clone(),
        scenario.nodes[b].name.clone(),
        service_port(local, peer),
    );
    let e = data.gaps.entry(key).or_default();
    e.0 += 1;
    e.1 = e.1.max(g.duration_ms);
}

fn gap_stats(runs: &[RunData]) -> Vec<GapStat> {
    let keys: BTreeSet<&(String, String, u16)> = runs.iter().flat_map(|r| r.gaps.keys()).collect();
    keys.into_iter()
        .map(|k| GapStat {
            node: k.0.clone(),
            peer: k.1.clone(),
            port: k.2,
            per_run: runs
                .iter()
                .map(|r| r.gaps.get(k).map(|g| g.0).unwrap_or(0))
                .collect(),
            longest_ms: runs
                .iter()
                .filter_map(|r| r.gaps.get(k))
                .map(|g| g.1)
                .max()
                .unwrap_or(0),
        })
        .collect()
}

/// Mean over runs of count / seconds.
fn per_second(per_run: &[u64], runs: &[RunData]) -> f64 {
    if runs.is_empty() {
        return 0.0;
    }
    let sum: f64 = per_run
        .iter()
        .zip(runs)
        .map(|(&n, r)| n as f64 / r.seconds.max(1e-3))
        .sum();
    sum / runs.len() as f64
}

fn failure_stats(runs: &[RunData]) -> Vec<FailureStat> {
    let keys: BTreeSet<&FailureKey> = runs.iter().flat_map(|r| r.failures.keys()).collect();
    let mut out: Vec<FailureStat> = keys
        .into_iter()
        .map(|k| {
            let per_run: Vec<u64> = runs
                .iter()
                .map(|r| r.failures.get(k).copied().unwrap_or(0))
                .collect();
            FailureStat {
                node: k.node.clone(),
                syscall: k.syscall.clone(),
                errno: k.errno.clone(),
                path: k.path.clone(),
                per_second: per_second(&per_run, runs),
                per_run,
            }
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node).then(b.per_second.total_cmp(&a.per_second)));
    out
}

fn syscall_stats(runs: &[RunData]) -> Vec<SyscallStat> {
    let keys: BTreeSet<&(String, String)> = runs.iter().flat_map(|r| r.syscalls.keys()).collect();
    let mut out: Vec<SyscallStat> = keys
        .into_iter()
        .map(|k| {
            let per_run: Vec<u64> = runs
                .iter()
                .map(|r| r.syscalls.get(k).copied().unwrap_or(0))
                .collect();
            SyscallStat {
                node: k.0.clone(),
                syscall: k.1.clone(),
                per_second: per_second(&per_run, runs),
                per_run,
            }
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node).then(b.per_second.total_cmp(&a.per_second)));
    out
}

/// Below the rate threshold, or called only a handful of times per run: a workload of a
/// few seconds makes one call look like "12 per second", yet a call per run is the rarest
/// kind of event there is.
fn is_infrequent(per_run: &[u64], rate: f64, threshold: f64) -> bool {
    let mean = per_run.iter().sum::<u64>() as f64 / per_run.len().max(1) as f64;
    rate < threshold || mean <= FEW_CALLS_PER_RUN
}

/// Calls after which a profile run detaches a function's uprobe: more than `runs` runs of
/// the longest a run may take (every node's ready wait and `run_timeout_s`, doubled for the
/// oracle and the teardown) hold at `threshold` calls per second, and more than a handful
/// per run — so a detached function is frequent in the profile, whatever it did later.
pub fn detach_after_calls(scenario: &Scenario, opts: &ProfileOptions) -> u64 {
    let longest_s = 2 * (scenario.run_timeout_s + scenario.nodes.len() as u64 * scenario.ready_timeout_s());
    let runs = opts.runs.max(1) as f64;
    let at_threshold = opts.infrequent_below_per_s * longest_s as f64 * runs;
    at_threshold.max(FEW_CALLS_PER_RUN * runs).ceil() as u64 + 1
}

/// Calls per candidate (attached in every run), the candidates that were not attached, and
/// those a run detached as frequent.
fn function_stats(
    candidates: &[Candidate],
    runs: &[RunData],
    threshold: f64,
) -> (Vec<FunctionStat>, Vec<String>, Vec<String>) {
    let mut stats = Vec::new();
    let mut not_attached = Vec::new();
    let mut detached = Vec::new();
    for c in candidates {
        let key = (c.binary.clone(), c.symbol.clone());
        if runs.iter().any(|r| r.unattached.contains(&key)) {
            not_attached.push(format!("{}:{}", c.binary, c.symbol));
            continue;
        }
        let per_run: Vec<u64> = runs
            .iter()
            .map(|r| r.function_calls.get(&key).copied().unwrap_or(0))
            .collect();
        let rate = per_second(&per_run, runs);
        let was_detached = runs.iter().any(|r| r.detached.contains(&key));
        if was_detached {
            detached.push(format!("{}:{}", c.binary, c.symbol));
        }
        let infrequent = !was_detached && is_infrequent(&per_run, rate, threshold);
        stats.push(FunctionStat {
            node: c.nodes.first().cloned().unwrap_or_default(),
            shared_with: c.nodes.iter().skip(1).cloned().collect(),
            binary: c.binary.clone(),
            symbol: c.symbol.clone(),
            source_file: c.source_file.clone(),
            per_run,
            per_second: rate,
            infrequent,
        });
    }
    (stats, not_attached, detached)
}

/// The profile of `runs` (pure: the unit tests feed it synthetic runs).
pub fn aggregate(scenario: &Scenario, candidates: &[Candidate], runs: &[RunData], threshold: f64) -> Profile {
    let (functions, functions_not_attached, functions_detached) = function_stats(candidates, runs, threshold);
    let mut dropped = Dropped::default();
    for r in runs {
        dropped.events += r.dropped.events;
        dropped.counters += r.dropped.counters;
    }
    Profile {
        format: FORMAT.into(),
        version: VERSION,
        scenario: scenario.name.clone(),
        scenario_nodes: scenario
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.command.clone()))
            .collect(),
        runs: runs.len() as u32,
        run_seconds: runs.iter().map(|r| r.seconds).collect(),
        infrequent_below_per_s: threshold,
        failures: failure_stats(runs),
        syscalls: syscall_stats(runs),
        functions,
        gaps: gap_stats(runs),
        dropped,
        unmapped_events: runs.iter().map(|r| r.unmapped_events).sum(),
        unmapped_syscalls: runs.iter().map(|r| r.unmapped_syscalls).sum(),
        functions_not_attached,
        functions_detached,
        programs: BTreeMap::new(),
    }
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
mod tests {
    use super::*;

    #[test]
    fn normalizes_paths() {
        assert_eq!(normalize_path("/srv/x/temp-4123.rdb"), "*/temp-*.rdb");
        assert_eq!(
            normalize_path("appendonly.aof.1.incr.aof"),
            "*/appendonly.aof.*.incr.aof"
        );
        assert_eq!(normalize_path("/var/lib/db/"), "*/db");
        assert_eq!(normalize_path("/a/b/12345"), "*/b/*");
        assert_eq!(normalize_path("/tmp/run-42/node1/log"), "*/log");
        assert_eq!(normalize_path("x1y22z333"), "*/x*y*z*");
        assert_eq!(normalize_path("/"), "*/");
        // what differs between runs: the run directory's random name, /proc/PID, temp names
        assert_eq!(normalize_path("/tmp/reproducer-run-UF3ENM"), "*/reproducer-run-*");
        assert_eq!(
            normalize_path("/tmp/reproducer-run-cdVApe/"),
            "*/reproducer-run-*"
        );
        assert_eq!(normalize_path("/proc/15881"), "*/proc/*");
        assert_eq!(normalize_path("/proc/15881/task/15882"), "*/task/*");
        assert_eq!(normalize_path("/tmp/tmpa8xk2p_q"), "*/tmp*");
        assert_eq!(normalize_path("/tmp/tracerd-demo.W0PtLV"), "*/tracerd-demo.*");
        // names that only look alike keep their text
        assert_eq!(normalize_path("/usr/bin/redis-server"), "*/redis-server");
        assert_eq!(normalize_path("/lib/libc.so.6"), "*/libc.so.*");
    }

    #[test]
    fn a_signature_matches_the_same_file_in_another_run_and_never_every_path() {
        let matches = |sig: &str, path: &str| glob::Pattern::new(sig).unwrap().matches(path);
        for (a, b) in [
            ("/tmp/reproducer-run-UF3ENM", "/var/tmp/reproducer-run-x9QpLm"),
            (
                "/tmp/reproducer-run-UF3ENM/db1/temp-41.rdb",
                "/srv/w/db1/temp-7.rdb",
            ),
            ("/proc/15881", "/proc/2"),
        ] {
            assert!(
                matches(&normalize_path(a), b),
                "{a} -> {} vs {b}",
                normalize_path(a)
            );
        }
        for p in ["/proc/15881", "/a/b/12345", "/tmp/tmpa8xk2p_q", "/tmp/x.AbC123"] {
            let sig = normalize_path(p);
            assert!(
                !matches(&sig, "/usr/lib/x86_64-linux-gnu/libssl.so.3"),
                "{p}: {sig} matches anything"
            );
        }
    }

    const SCENARIO: &str = "name = \"kv\"\n[[nodes]]\nname = \"db1\"\ncommand = [\"kvnode\", \"1\"]\n\
        [[nodes]]\nname = \"db2\"\ncommand = [\"kvnode\", \"2\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n";

    fn candidate(symbol: &str) -> Candidate {
        Candidate {
            nodes: vec!["db1".into(), "db2".into()],
            node_index: 0,
            binary: "/opt/kvnode".into(),
            symbol: symbol.into(),
            source_file: Some("kvnode.c".into()),
        }
    }

    fn run(seconds: f64, enoent: u64, writes: u64, snapshot: u64, loop_calls: u64) -> RunData {
        let mut r = RunData {
            seconds,
            ..Default::default()
        };
        let key = FailureKey {
            node: "db1".into(),
            syscall: "openat".into(),
            errno: "ENOENT".into(),
            path: Some("*/optional.conf".into()),
        };
        r.failures.insert(key, enoent);
        r.syscalls.insert(("db1".into(), "write".into()), writes);
        r.function_calls
            .insert(("/opt/kvnode".into(), "store_snapshot".into()), snapshot);
        r.function_calls
            .insert(("/opt/kvnode".into(), "event_loop".into()), loop_calls);
        r.unattached.insert(("/opt/kvnode".into(), "ambiguous".into()));
        r.dropped = Dropped {
            events: 1,
            counters: 2,
        };
        r.unmapped_events = 3;
        r
    }

    #[test]
    fn aggregates_runs() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let candidates = vec![
            candidate("store_snapshot"),
            candidate("event_loop"),
            candidate("never_called"),
            candidate("ambiguous"),
        ];
        let mut second = run(2.0, 12, 98, 1, 4000);
        second.failures.insert(
            FailureKey {
                node: "db2".into(),
                syscall: "connect".into(),
                errno: "ECONNREFUSED".into(),
                path: None,
            },
            4,
        );
        let runs = vec![run(1.0, 12, 100, 1, 1000), second];
        let p = aggregate(&s, &candidates, &runs, 2.0);
        assert_eq!((p.format.as_str(), p.version, p.runs), (FORMAT, VERSION, 2));
        assert_eq!(p.run_seconds, vec![1.0, 2.0]);
        assert_eq!(p.scenario_nodes["db2"], vec!["kvnode".to_string(), "2".into()]);

        assert_eq!(p.failures.len(), 2);
        let enoent = &p.failures[0];
        assert_eq!(
            (
                enoent.node.as_str(),
                enoent.errno.as_str(),
                enoent.path.as_deref()
            ),
            ("db1", "ENOENT", Some("*/optional.conf"))
        );
        assert_eq!(enoent.per_run, vec![12, 12]);
        assert!(
            (enoent.per_second - 9.0).abs() < 1e-9,
            "mean of 12/1 and 12/2: {}",
            enoent.per_second
        );
        let refused = &p.failures[1];
        assert_eq!(
            (refused.per_run.clone(), refused.path.clone()),
            (vec![0, 4], None),
            "a signature missing from a run counts 0 there"
        );
        assert!((refused.per_second - 1.0).abs() < 1e-9);

        assert_eq!(p.syscalls.len(), 1);
        assert_eq!(p.syscalls[0].per_run, vec![100, 98]);
        assert!((p.syscalls[0].per_second - 74.5).abs() < 1e-9);

        let f = |name: &str| {
            p.functions
                .iter()
                .find(|f| f.symbol == name)
                .unwrap_or_else(|| panic!("{name} listed"))
        };
        assert!(f("store_snapshot").infrequent && (f("store_snapshot").per_second - 0.75).abs() < 1e-9);
        assert!(!f("event_loop").infrequent);
        assert_eq!(f("never_called").per_run, vec![0, 0]);
        assert!(f("never_called").infrequent, "never called counts as infrequent");
        assert_eq!(f("store_snapshot").shared_with, vec!["db2".to_string()]);
        assert!(
            p.functions.iter().all(|f| f.symbol != "ambiguous"),
            "a function never attached is not measured"
        );
        assert_eq!(
            p.functions_not_attached,
            vec!["/opt/kvnode:ambiguous".to_string()]
        );
        assert_eq!(
            p.dropped,
            Dropped {
                events: 2,
                counters: 4
            }
        );
        assert_eq!(p.unmapped_events, 6);

        let list = functions_list(&p);
        assert!(
            list.contains("\n/opt/kvnode:store_snapshot\n") && list.contains("\n/opt/kvnode:never_called\n"),
            "{list}"
        );
        assert!(
            !list.contains("event_loop") && !list.contains("ambiguous"),
            "{list}"
        );
        let parsed: Vec<&str> = list.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(parsed.len(), 2);
    }

    #[test]
    fn a_function_detached_at_the_call_limit_is_listed_and_never_infrequent() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let opts = ProfileOptions {
            runs: 3,
            function_patterns: Vec::new(),
            infrequent_below_per_s: 2.0,
        };
        let limit = detach_after_calls(&s, &opts);
        // 3 runs of at most 2 × (60 + 2 nodes × 60) s at 2 calls/s
        assert_eq!(limit, 2 * 360 * 3 + 1);
        // a run that detached it holds at least `limit` calls, which no run length can make
        // infrequent: the other runs may even have none
        let detached = run(2.0 * 360.0, 0, 0, 0, limit);
        let mut runs = vec![run(1.0, 0, 0, 0, 0), run(1.0, 0, 0, 0, 0), detached];
        runs[2]
            .detached
            .insert(("/opt/kvnode".into(), "event_loop".into()));
        let p = aggregate(&s, &[candidate("event_loop")], &runs, 2.0);
        assert_eq!(p.functions_detached, ["/opt/kvnode:event_loop"]);
        assert!(!p.functions[0].infrequent);
        assert!(
            p.functions[0].per_second * 3.0 >= 2.0,
            "{}",
            p.functions[0].per_second
        );
        assert!(
            summary(&p, 1).contains("1 detached as frequent"),
            "{}",
            summary(&p, 1)
        );
    }

    #[test]
    fn silences_longer_than_the_run_are_not_norms() {
        let scenario = Scenario::parse(
            "name = \"kv\"\n[[nodes]]\nname = \"db1\"\ncommand = [\"kvnode\"]\naddress = \"10.9.0.1\"\n\
             [[nodes]]\nname = \"db2\"\ncommand = [\"kvnode\"]\naddress = \"10.9.0.2\"\n\
             [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n",
            "t",
        )
        .expect("scenario");
        let gap = |ms: u64| tracedump::event::NetworkGap {
            local: Some("10.9.0.1:40000".parse().expect("address")),
            peer: Some("10.9.0.2:7000".parse().expect("address")),
            duration_ms: ms,
            packets: 10,
            ongoing: false,
        };
        let mut data = RunData {
            seconds: 8.0,
            ..Default::default()
        };
        add_gap(&mut data, &scenario, &gap(1054));
        // what a wrapped jiffies difference made of a silence: minus 2^32 ticks
        add_gap(&mut data, &scenario, &gap(18_429_563_939_213));
        add_gap(&mut data, &scenario, &gap(8001));
        let key = ("db1".to_string(), "db2".to_string(), 7000);
        assert_eq!(data.gaps.get(&key), Some(&(1, 1054)));
        let stats = gap_stats(&[data]);
        assert_eq!(stats.len(), 1);
        assert_eq!(stats[0].longest_ms, 1054);
    }

    #[test]
    fn threshold_is_exclusive() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let p = aggregate(&s, &[candidate("store_snapshot")], &[run(10.0, 0, 0, 20, 0)], 2.0);
        assert!(!p.functions[0].infrequent, "2 calls/s is not below 2");
    }

    #[test]
    fn a_few_calls_per_run_are_infrequent_in_a_short_run() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let p = aggregate(&s, &[candidate("store_snapshot")], &[run(0.1, 0, 0, 1, 0)], 2.0);
        assert!(
            p.functions[0].infrequent,
            "once per run is rare, whatever the run's length"
        );
        let p = aggregate(&s, &[candidate("store_snapshot")], &[run(0.1, 0, 0, 6, 0)], 2.0);
        assert!(!p.functions[0].infrequent);
    }

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
