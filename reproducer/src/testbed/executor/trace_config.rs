//! The tracing session of a run: which functions it probes (the faults' contexts and the
//! functions asked for) and how it traces a fault run or a profile run.
use std::collections::BTreeSet;

use super::RunOptions;
use crate::model::plan::FaultPlan;
use crate::testbed::injector::NodeInfo;

fn function_spec(func: &str, node: &NodeInfo) -> String {
    if func.contains(':') {
        func.to_string()
    } else {
        format!("{}:{func}", node.binary.display())
    }
}

/// The gap threshold of profile runs: low enough that every connection between nodes that
/// pauses at all is recorded with its longest silence.
pub const PROFILE_GAP_MS: u64 = 200;

/// Bytes of each configuration file a run records (the testbed's files are the scenario's
/// own, so no secret is at stake; 64 KiB holds any ordinary configuration file).
pub const TESTBED_CAPTURE_CONFIG_FILES: u64 = 64 << 10;

pub(super) fn trace_config(
    plan: &FaultPlan,
    infos: &[NodeInfo],
    opts: &RunOptions,
) -> tracerd::config::Config {
    let extra = &opts.trace_functions;
    let mut functions = BTreeSet::new();
    for f in &plan.faults {
        for func in &f.context().after_functions {
            functions.insert(function_spec(func, &infos[f.node]));
        }
    }
    for (node, func) in extra {
        if let Some(info) = infos.get(*node) {
            functions.insert(function_spec(func, info));
        }
    }
    tracerd::config::Config {
        targets_added_later: true,
        ring_events: 200_000,
        blob_bytes: 4 << 20,
        // profile runs see shorter silences too: how long each connection normally idles
        gap_ms: if opts.profiling { PROFILE_GAP_MS } else { 1000 },
        pause_ms: 1000,
        kernel_buffer_bytes: 4 << 20,
        uprobe: functions.into_iter().collect(),
        count_syscalls: opts.profiling,
        // a run's trace is compared with production: every failure counts, whatever it costs
        syscall_hook: tracerd::config::SyscallHook::Tracepoint,
        function_events: !opts.profiling,
        detach_functions_after_calls: opts.detach_functions_after_calls,
        tolerate_unattachable_functions: opts.profiling,
        dump_every_connection: opts.profiling,
        // the run's environment is compared with production's (drift): with the contents of
        // its configuration files, so that a difference can name the differing lines
        capture_config_files: TESTBED_CAPTURE_CONFIG_FILES,
        ..Default::default()
    }
}
