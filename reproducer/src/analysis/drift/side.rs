//! Each side's processes, as the comparison needs them: production's from the dumps the
//! timeline read, the testbed's from a run's trace (`--testbed-trace`, or a run a search
//! kept under its output directory, or what a profile kept of its first fault-free run),
//! both mapped to scenario nodes.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tracedump::dump::{Dump, DumpMeta};
use tracedump::environment::ProcEnvironment;

use crate::analysis::nodemap::{program_of, NodeMap};
use crate::model::scenario::Scenario;

/// One process of a node, with what tracerd recorded of its environment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub node: usize,
    pub host: String,
    /// the kernel of the dump's host
    pub kernel: String,
    pub pid: u32,
    /// CLOCK_BOOTTIME of its start (only compared within one side)
    pub start_ns: u64,
    /// its exe's file name
    pub program: String,
    pub cmdline: Vec<String>,
    pub environment: ProcEnvironment,
    /// the container runtime it ran in ("docker", "podman", ...), none outside containers
    pub container: Option<String>,
}

/// The processes of one dump that are nodes and have an environment.
pub fn samples(meta: &DumpMeta, map: &NodeMap) -> Vec<Sample> {
    meta.processes
        .iter()
        .filter_map(|p| {
            Some(Sample {
                node: map.node(p.pid)?,
                host: meta.host.clone(),
                kernel: meta.kernel.clone(),
                pid: p.pid,
                start_ns: p.start_ns,
                program: program_of(p),
                cmdline: p.cmdline.clone().unwrap_or_default(),
                environment: p.environment.clone()?,
                container: p.container_runtime.clone(),
            })
        })
        .collect()
}

/// What the comparison needs of a run's `run.json`: the pids it launched as nodes.
#[derive(Deserialize)]
struct RunFile {
    #[serde(default)]
    launched: Vec<(String, u32)>,
    #[serde(default)]
    not_started: Option<String>,
}

/// The testbed side of `path`: a run directory (`run.json` and `trace/`, as `reproducer run
/// --keep` and a search's attempts keep them), a trace directory, or one dump.
pub fn load_testbed(path: &Path, scenario: &Scenario) -> Result<Vec<Sample>> {
    let origin = format!("--testbed-trace {}", path.display());
    if !path.exists() {
        bail!("{origin}: does not exist");
    }
    let mut launched = Vec::new();
    let dumps = if path.is_file() {
        vec![path.to_path_buf()]
    } else {
        let run = path.join("run.json");
        if run.is_file() {
            let text = std::fs::read(&run).with_context(|| format!("{origin}: reading {}", run.display()))?;
            let file: RunFile = serde_json::from_slice(&text)
                .with_context(|| format!("{origin}: {} is not a run's run.json", run.display()))?;
            launched = file.launched;
        }
        let mut dumps = crate::analysis::chain::runs::run_dumps(path);
        if dumps.is_empty() {
            dumps = crate::analysis::chain::runs::run_dumps(&path.join("trace"));
        }
        dumps
    };
    if dumps.is_empty() {
        bail!("{origin}: no tracerd dump (*.tdump) in it or in its trace/ (give a run directory that `reproducer run --keep` kept, or its trace directory)");
    }
    read_side(&dumps, &launched, scenario).with_context(|| origin.clone())
}

fn read_side(dumps: &[PathBuf], launched: &[(String, u32)], scenario: &Scenario) -> Result<Vec<Sample>> {
    let launched: Vec<(usize, u32)> = launched
        .iter()
        .filter_map(|(n, pid)| Some((scenario.node_index(n)?, *pid)))
        .collect();
    let mut out = Vec::new();
    for d in dumps {
        let dump = Dump::read(d)?;
        let map = NodeMap::build_for(scenario, &dump.meta, &launched);
        out.extend(samples(&dump.meta, &map));
    }
    Ok(out)
}

/// The testbed side from the runs a search kept under `out` (`attempts/*/` and their
/// confirmation runs, then `replay/run-*`): the first run that started and whose trace
/// recorded environments; with the run directory's name for the report.
pub fn from_search(out: &Path, scenario: &Scenario) -> Option<(String, Vec<Sample>)> {
    let mut dirs = Vec::new();
    for top in [out.join("attempts"), out.join("replay")] {
        run_dirs(&top, 0, &mut dirs);
    }
    dirs.sort();
    for dir in dirs {
        let Ok(text) = std::fs::read(dir.join("run.json")) else {
            continue;
        };
        let Ok(run) = serde_json::from_slice::<RunFile>(&text) else {
            continue;
        };
        if run.not_started.is_some() {
            continue;
        }
        let dumps = crate::analysis::chain::runs::run_dumps(&dir.join("trace"));
        match read_side(&dumps, &run.launched, scenario) {
            Ok(side) if !side.is_empty() => {
                let label = dir.strip_prefix(out).unwrap_or(&dir).display().to_string();
                return Some((label, side));
            }
            _ => continue,
        }
    }
    None
}

/// Directories holding a `run.json` under `dir`, two levels down at most.
fn run_dirs(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for path in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
        if path.join("run.json").is_file() {
            out.push(path);
        } else if depth < 2 {
            run_dirs(&path, depth + 1, out);
        }
    }
}

/// A node's program as a profile keeps it (`Profile::environments`): the testbed's side when
/// no run is named.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfiledProcess {
    pub node: String,
    pub program: String,
    pub kernel: String,
    #[serde(default)]
    pub cmdline: Vec<String>,
    pub environment: ProcEnvironment,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

/// What a profile keeps of a run's samples: each node's program's first process.
pub fn to_profile(samples: &[Sample], scenario: &Scenario) -> Vec<ProfiledProcess> {
    super::by_program(samples)
        .into_values()
        .map(|s| ProfiledProcess {
            node: scenario.nodes[s.node].name.clone(),
            program: s.program.clone(),
            kernel: s.kernel.clone(),
            cmdline: s.cmdline.clone(),
            environment: s.environment.clone(),
            container: s.container.clone(),
        })
        .collect()
}

/// The samples a profile kept, for the nodes `scenario` has.
pub fn from_profile(kept: &[ProfiledProcess], scenario: &Scenario) -> Vec<Sample> {
    kept.iter()
        .filter_map(|p| {
            Some(Sample {
                node: scenario.node_index(&p.node)?,
                kernel: p.kernel.clone(),
                program: p.program.clone(),
                cmdline: p.cmdline.clone(),
                environment: p.environment.clone(),
                container: p.container.clone(),
                ..Default::default()
            })
        })
        .collect()
}
