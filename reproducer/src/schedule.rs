//! The fault schedule file (TOML): which faults to inject, in which order, in which
//! context. Parsing checks every name (node, syscall, errno, signal) and reports mistakes
//! as "FILE, line L: field F: ...".
use std::path::Path;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use tracerd::syscalls::{errno_number, signal_number, syscall_number};

use crate::scenario::Scenario;
use crate::toml_error::{line_of_key, toml_error};

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    Syscall,
    Crash,
    Pause,
    Partition,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Both,
    Out,
    In,
}

/// One fault as written in the file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    pub node: String,
    pub kind: FaultKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<String>,
    /// glob over the path the call names (its argument or its fd's file)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// the Nth matching invocation since the previous fault
    #[serde(default = "one")]
    pub nth: u32,
    /// functions entered, in this order, since the previous fault
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_functions: Vec<String>,
    /// bytes into the last of after_functions
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
}

fn one() -> u32 {
    1
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    #[serde(default)]
    pub faults: Vec<Fault>,
}

/// A fault checked against the scenario, with names resolved to numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedFault {
    pub fault: Fault,
    pub node_index: usize,
    pub syscall_nr: Option<u32>,
    pub errno: Option<i64>,
    pub signal: u32,
    pub peer_indexes: Vec<usize>,
}

impl Schedule {
    pub fn load(path: &Path) -> Result<Schedule> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("schedule {}: {e}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<Schedule> {
        toml::from_str(text).map_err(|e| toml_error(&e, text, &format!("schedule {origin}")))
    }

    pub fn to_toml(&self) -> Result<String> {
        Ok(toml::to_string(self)?)
    }

    /// Checks every fault against `scenario`; `text` (the file) locates errors.
    pub fn resolve(&self, scenario: &Scenario, text: &str, origin: &str) -> Result<Vec<ResolvedFault>> {
        self.faults
            .iter()
            .enumerate()
            .map(|(i, f)| resolve_fault(f, i, scenario, text, origin))
            .collect()
    }
}

fn resolve_fault(f: &Fault, index: usize, scenario: &Scenario, text: &str, origin: &str) -> Result<ResolvedFault> {
    let at = |field: &str| {
        let line = line_of_key(text, "faults", index, field);
        match line {
            Some(l) => format!("schedule {origin}, line {l}: fault {} field {field}", index + 1),
            None => format!("schedule {origin}: fault {} field {field}", index + 1),
        }
    };
    let node_index = scenario
        .node_index(&f.node)
        .ok_or_else(|| anyhow::anyhow!("{}: no node '{}' in scenario {}", at("node"), f.node, scenario.name))?;
    let mut r = ResolvedFault { fault: f.clone(), node_index, syscall_nr: None, errno: None, signal: 0, peer_indexes: Vec::new() };
    if f.nth == 0 {
        bail!("{}: nth counts from 1", at("nth"));
    }
    if f.offset.is_some() && f.after_functions.is_empty() {
        bail!("{}: an offset needs after_functions (it is an offset into the last one)", at("offset"));
    }
    match f.kind {
        FaultKind::Syscall => {
            let name = f.syscall.as_deref().ok_or_else(|| anyhow::anyhow!("{}: a syscall fault needs syscall", at("syscall")))?;
            r.syscall_nr = Some(syscall_number(name).ok_or_else(|| anyhow::anyhow!("{}: unknown syscall '{name}'", at("syscall")))?);
            let errno = f.errno.as_deref().ok_or_else(|| anyhow::anyhow!("{}: a syscall fault needs errno", at("errno")))?;
            r.errno = Some(errno_number(errno).ok_or_else(|| anyhow::anyhow!("{}: unknown errno '{errno}'", at("errno")))?);
            if f.offset.is_some() {
                bail!("{}: syscall faults fire at the call itself; offset is for crash and pause", at("offset"));
            }
        }
        FaultKind::Crash | FaultKind::Pause => {
            let default = if f.kind == FaultKind::Crash { "SIGKILL" } else { "SIGSTOP" };
            let name = f.signal.as_deref().unwrap_or(default);
            r.signal = signal_number(name).ok_or_else(|| anyhow::anyhow!("{}: unknown signal '{name}'", at("signal")))?;
            if f.kind == FaultKind::Pause && f.duration_ms.is_none() {
                bail!("{}: a pause needs duration_ms", at("duration_ms"));
            }
        }
        FaultKind::Partition => {
            if f.duration_ms.is_none() {
                bail!("{}: a partition needs duration_ms", at("duration_ms"));
            }
            if f.peers.is_empty() {
                bail!("{}: a partition needs peers", at("peers"));
            }
            for p in &f.peers {
                let i = scenario.node_index(p).ok_or_else(|| anyhow::anyhow!("{}: no node '{p}' in scenario {}", at("peers"), scenario.name))?;
                if scenario.nodes[i].address.is_none() || scenario.nodes[node_index].address.is_none() {
                    bail!("{}: partitions need both nodes to have an address (their own network namespace)", at("peers"));
                }
                r.peer_indexes.push(i);
            }
        }
    }
    if f.kind != FaultKind::Syscall && (f.syscall.is_some() || f.errno.is_some() || f.path.is_some()) {
        bail!("{}: syscall, errno and path apply to syscall faults only", at("kind"));
    }
    check_functions(f, &scenario.nodes[node_index].command[0]).map_err(|e| anyhow::anyhow!("{}: {e:#}", at("after_functions")))?;
    Ok(r)
}

/// Refuses a context function the binary does not define, before any run starts: a name is
/// looked up in the node's program, or in BINARY for `BINARY:SYMBOL`.
fn check_functions(f: &Fault, program: &str) -> Result<()> {
    let mut known: std::collections::HashMap<std::path::PathBuf, std::collections::HashSet<String>> = Default::default();
    for func in &f.after_functions {
        let (binary, symbol) = match func.rsplit_once(':') {
            Some((b, s)) if !b.is_empty() => (std::path::PathBuf::from(b), s),
            // a program named through a placeholder is only known at run time
            _ if program.contains('{') => continue,
            _ => (crate::executor::resolve_binary(program), func.as_str()),
        };
        if !known.contains_key(&binary) {
            let names = crate::binary::function_names(&binary)?;
            known.insert(binary.clone(), names);
        }
        if !known[&binary].contains(symbol) {
            let hint = if crate::programs::is_wrapper(&binary) { "; the node's program is a wrapper: write BINARY:SYMBOL" } else { "" };
            bail!("no function '{symbol}' in {} ({} functions){hint}", binary.display(), known[&binary].len());
        }
    }
    Ok(())
}
