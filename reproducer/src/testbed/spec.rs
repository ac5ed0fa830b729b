//! One run's whole input as a file, `attempt.toml` in the run's directory: a copy of the
//! scenario, the schedule and the run options. It is what a search hands to a run: `reproducer
//! run-attempt --spec FILE --dir DIR` runs it in a process of its own and prints the run's
//! report (JSON) on stdout and into DIR (`search::engine::REPORT_FILE`, where whoever
//! started it reads it back). A process per run is what lets runs go side by side: what the
//! test bed keeps per process (the subreaper role and the final sweep of every descendant,
//! the interrupt flag) then belongs to one run. The same file is what a batch engine's job
//! runs on another host (`reproduce --runner`).
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tracedump::atomic;

use super::executor::{self, RunOptions, RunReport};
use crate::model::plan::FaultPlan;
use crate::model::scenario::Scenario;
use crate::model::schedule::{Origin, Schedule};
use crate::search::engine::Engine;

/// The spec's name in a run's directory.
pub const SPEC_FILE: &str = "attempt.toml";

/// A function to trace besides the schedule's contexts (see `RunOptions::trace_functions`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceFunction {
    /// index of the node in the scenario
    pub node: usize,
    /// BINARY:SYMBOL, or SYMBOL of the node's own binary
    pub function: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpecOptions {
    /// keep the run's directory (logs, trace)
    #[serde(default)]
    pub keep: bool,
    /// a profile run (see `RunOptions::profiling`)
    #[serde(default)]
    pub profiling: bool,
    /// see `RunOptions::detach_functions_after_calls`
    #[serde(default)]
    pub detach_functions_after_calls: u64,
    #[serde(default)]
    pub trace_functions: Vec<TraceFunction>,
}

/// What is written: plain values before tables, as TOML wants them.
#[derive(Serialize)]
struct SpecOut<'a> {
    scenario_file: &'a str,
    schedule: &'a str,
    options: &'a SpecOptions,
    scenario: &'a Scenario,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecIn {
    scenario_file: String,
    schedule: String,
    #[serde(default)]
    options: SpecOptions,
    scenario: toml::Table,
}

/// One run's input.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSpec {
    /// where the scenario was read from (for people: the copy is what runs)
    pub scenario_file: String,
    pub scenario: Scenario,
    pub schedule: Schedule,
    pub options: SpecOptions,
}

impl RunSpec {
    /// Writes the spec to `dir/attempt.toml` (atomically); returns its path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(SPEC_FILE);
        let out = SpecOut {
            scenario_file: &self.scenario_file,
            schedule: &self.schedule.to_toml(),
            options: &self.options,
            scenario: &self.scenario,
        };
        let text = format!(
            "# one run of reproducer: `reproducer run-attempt --spec {SPEC_FILE} --dir DIR` runs it\n{}",
            toml::to_string(&out).context("writing a run spec")?
        );
        atomic::write_bytes(&path, atomic::SHARED, text.as_bytes())?;
        Ok(path)
    }

    pub fn load(path: &Path) -> Result<RunSpec> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(|| format!("run spec {name}"))?;
        let raw: SpecIn = toml::from_str(&text)
            .map_err(|e| crate::model::toml_error::toml_error(&e, &text, &format!("run spec {name}")))?;
        let scenario_text = toml::to_string(&raw.scenario).context("run spec: [scenario]")?;
        let scenario = Scenario::parse(&scenario_text, &format!("{name} [scenario]"))?;
        let schedule = Schedule::parse(&raw.schedule, &format!("{name} (schedule)"))?;
        for f in &raw.options.trace_functions {
            if f.node >= scenario.nodes.len() {
                bail!(
                    "run spec {name}: trace_functions: node {} (the scenario has {} nodes)",
                    f.node,
                    scenario.nodes.len()
                );
            }
        }
        Ok(RunSpec {
            scenario_file: raw.scenario_file,
            scenario,
            schedule,
            options: raw.options,
        })
    }

    /// Runs the spec here, its run directory under `dir`.
    pub fn run(&self, spec_path: &Path, dir: &Path) -> Result<RunReport> {
        let origin = Origin::file(
            &format!("{} (schedule)", spec_path.display()),
            &self.schedule.to_toml(),
        );
        let plan = FaultPlan::new(&self.schedule, &self.scenario, &origin)?;
        let opts = RunOptions {
            keep: self.options.keep,
            base_dir: Some(dir.to_path_buf()),
            trace_functions: self
                .options
                .trace_functions
                .iter()
                .map(|f| (f.node, f.function.clone()))
                .collect(),
            profiling: self.options.profiling,
            detach_functions_after_calls: self.options.detach_functions_after_calls,
        };
        executor::run(&self.scenario, &plan, &opts)
    }
}

/// Runs the spec at `spec` in a child process (`reproducer run-attempt`, this executable),
/// its run directory under `dir`; its report is read back from `dir` (see
/// `search::engine`). Ctrl-C reaches the child from the terminal; a SIGTERM to this process
/// is passed on. What the child said on stderr besides its error is shown.
pub fn run_in_child(spec: &Path, dir: &Path) -> Result<RunReport> {
    Engine::Local.run_attempt(spec, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCENARIO: &str = "name = \"kv\"\n\
        [[nodes]]\nname = \"db1\"\ncommand = [\"kv\", \"--port\", \"1\"]\naddress = \"10.8.0.1\"\nmatch = \"kv\"\n\
        [[nodes]]\nname = \"db2\"\ncommand = [\"kv\"]\nready = [\"true\"]\n\
        [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n";

    #[test]
    fn a_spec_reads_back_as_written() {
        let scenario = Scenario::parse(SCENARIO, "t").unwrap();
        let schedule = Schedule::parse(
            "[[faults]]\nnode = \"db1\"\nkind = \"crash\"\nafter_functions = [\"f\"]\n",
            "s",
        )
        .unwrap();
        let spec = RunSpec {
            scenario_file: "/x/scenario.toml".into(),
            scenario,
            schedule,
            options: SpecOptions {
                keep: true,
                profiling: false,
                detach_functions_after_calls: 0,
                trace_functions: vec![TraceFunction {
                    node: 1,
                    function: "/opt/kv:g".into(),
                }],
            },
        };
        let dir = tempfile::tempdir().unwrap();
        let path = spec.write(dir.path()).unwrap();
        assert_eq!(path, dir.path().join(SPEC_FILE));
        assert_eq!(RunSpec::load(&path).unwrap(), spec);
    }

    #[test]
    fn a_bad_spec_names_the_file_and_what() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SPEC_FILE);
        std::fs::write(
            &path,
            "scenario_file = \"x\"\nschedule = \"\"\n[scenario]\nname = \"a\"\n",
        )
        .unwrap();
        let e = format!("{:#}", RunSpec::load(&path).unwrap_err());
        assert!(e.contains(SPEC_FILE) && e.contains("nodes"), "{e}");
    }
}
