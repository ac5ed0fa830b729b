//! What the user writes and what the reproducer works with: the scenario (nodes, workload,
//! oracle), the schedule of typed faults, and the fault plan (a schedule resolved against a
//! scenario, built once and handed to every mechanism of a run).
use std::path::{Path, PathBuf};

use scenario::Scenario;

pub mod address;
pub mod plan;
pub mod scenario;
pub mod schedule;
pub(crate) mod toml_error;

/// The program a command's first word runs: itself when it holds a '/', else the first
/// match on PATH (unchanged when there is none).
pub fn resolve_binary(cmd: &str) -> PathBuf {
    if cmd.contains('/') {
        return PathBuf::from(cmd);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(cmd))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from(cmd))
}

fn file_name(s: &str) -> &str {
    Path::new(s).file_name().and_then(|n| n.to_str()).unwrap_or(s)
}

/// A production BINARY:SYMBOL as the test bed names it: the symbol alone when it is node
/// `node`'s own program (paths differ between hosts), else the spec as it was.
pub fn local_spec(scenario: &Scenario, node: usize, spec: &str) -> String {
    match spec.rsplit_once(':') {
        Some((binary, symbol))
            if file_name(binary) == file_name(&scenario.nodes[node].command[0])
                || !Path::new(binary).exists() =>
        {
            symbol.to_string()
        }
        _ => spec.to_string(),
    }
}
