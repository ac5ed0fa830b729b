//! What the search experiments on, behind one small trait: run a fault plan once and say
//! what happened. `testbed::runner::TestbedRunner` runs it for real (each run a
//! `reproducer run-attempt` process on its spec file, trace read back and mapped to nodes);
//! the unit tests answer with a fake system. A runner is shared by the runs of a batch
//! going side by side.
use std::path::Path;

use anyhow::Result;

use crate::analysis::binary::{self, Site};
use crate::model::plan::FaultPlan;

/// What one run tells the search.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Feedback {
    /// the oracle fired
    pub bug: bool,
    /// per fault of the plan: it was injected
    pub fired: Vec<bool>,
    /// per fault: matching calls seen while it was current (syscall faults)
    pub matched: Vec<u32>,
    /// per fault: of those, the ones seen before every node was ready (start-up); empty
    /// when no node got ready or the runner does not tell
    pub matched_before_ready: Vec<u32>,
    /// per node: the function symbols it entered, in order
    pub functions: Vec<Vec<String>>,
    /// a node did not start under the plan's faults: the run ended there (no workload, no
    /// oracle); which node, why, and what had fired
    pub not_started: Option<String>,
}

pub trait Runner: Sync {
    /// Runs the scenario once with `plan`, keeping the run's files under `dir` (a directory
    /// of its own: runs of a batch call this at the same time, each with its own `dir`).
    fn run(&self, plan: &FaultPlan, dir: &Path) -> Result<Feedback>;

    /// Where inside `symbol` of `binary` a process fault can be placed (level 3).
    fn injection_sites(&self, binary: &Path, symbol: &str) -> Result<Vec<Site>> {
        binary::injection_sites(binary, symbol)
    }

    /// The user asked to stop (Ctrl-C, SIGTERM): the search ends with what it has.
    fn interrupted(&self) -> bool {
        crate::interrupt::requested()
    }
}
