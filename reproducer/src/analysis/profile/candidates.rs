//! The functions a profile counts: the programs each node runs (declared before any run,
//! then what its processes executed) and the defined functions of those programs.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};

use super::MAX_FUNCTIONS_PER_BINARY;
use crate::analysis::{binary, programs};
use crate::model::resolve_binary;
use crate::model::scenario::{Node, Scenario};

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
        if !programs::is_wrapper(&real) && !programs::is_wrapper(&named) {
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
