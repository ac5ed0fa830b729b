//! The search's `Runner` on the testbed: each run a `reproducer run-attempt` on its spec
//! file, a process here or a job of a batch engine (`search::engine`), its trace read back
//! and mapped to nodes for the search's feedback.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use tracedump::event::What;

use crate::analysis::nodemap::NodeMap;
use crate::model::local_spec;
use crate::model::plan::FaultPlan;
use crate::model::scenario::Scenario;
use crate::model::schedule::Schedule;
use crate::search::engine::Engine;
use crate::search::runner::{Feedback, Runner};
use crate::testbed::executor::RunReport;
use crate::testbed::spec::{RunSpec, SpecOptions, TraceFunction};

/// Runs plans on the local testbed, tracing the functions production traced.
pub struct TestbedRunner<'a> {
    scenario: &'a Scenario,
    /// where the scenario was read from, for the run specs
    scenario_file: PathBuf,
    trace_functions: Vec<(usize, String)>,
    /// where each run happens
    engine: Engine,
}

impl<'a> TestbedRunner<'a> {
    /// `production_functions`: BINARY:SYMBOL per node, as production traced them.
    pub fn new(
        scenario: &'a Scenario,
        scenario_file: &Path,
        production_functions: &[(Option<usize>, String)],
    ) -> Self {
        let mut trace_functions = Vec::new();
        for (node, spec) in production_functions {
            let Some(n) = *node else { continue };
            let f = (n, local_spec(scenario, n, spec));
            if !trace_functions.contains(&f) {
                trace_functions.push(f);
            }
        }
        TestbedRunner {
            scenario,
            scenario_file: scenario_file.to_path_buf(),
            trace_functions,
            engine: Engine::Local,
        }
    }

    /// Runs each run on `engine` rather than in a process here.
    pub fn on(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    fn feedback(&self, r: &RunReport) -> Result<Feedback> {
        let fired = (0..r.faults)
            .map(|i| r.fired.iter().any(|f| f.fault == i + 1))
            .collect();
        let mut functions = vec![Vec::new(); self.scenario.nodes.len()];
        if let Some(trace) = &r.trace {
            let dump = tracedump::dump::Dump::read(trace)
                .with_context(|| format!("trace of run {}", r.workdir.display()))?;
            let launched: Vec<(usize, u32)> = r
                .launched
                .iter()
                .filter_map(|(n, pid)| Some((self.scenario.node_index(n)?, *pid)))
                .collect();
            let map = NodeMap::build_for(self.scenario, &dump.meta, &launched);
            for e in dump.events() {
                if let (Some(n), What::Function(hit)) = (map.node(e.pid), e.what) {
                    functions[n].extend(hit.function);
                }
            }
        }
        Ok(Feedback {
            bug: r.bug && r.not_started.is_none(),
            fired,
            matched: r.matched.clone(),
            matched_before_ready: r.matched_at_ready.clone(),
            functions,
            not_started: r.not_started.clone(),
        })
    }
}

impl Runner for TestbedRunner<'_> {
    /// Writes the run's spec into `dir` and runs it in a process of its own, here or on the
    /// engine.
    fn run(&self, plan: &FaultPlan, dir: &Path) -> Result<Feedback> {
        let spec = RunSpec {
            scenario_file: self.scenario_file.display().to_string(),
            scenario: self.scenario.clone(),
            schedule: Schedule {
                faults: plan.faults.iter().map(|f| f.fault.clone()).collect(),
            },
            options: SpecOptions {
                keep: true,
                profiling: false,
                detach_functions_after_calls: 0,
                trace_functions: self
                    .trace_functions
                    .iter()
                    .map(|(node, function)| TraceFunction {
                        node: *node,
                        function: function.clone(),
                    })
                    .collect(),
            },
        };
        let path = spec.write(dir)?;
        let report: RunReport = self.engine.run_attempt(&path, dir)?;
        self.feedback(&report)
    }
}
