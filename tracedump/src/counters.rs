//! Loss counters: everything tracing dropped, and where. The kernel side counts in a
//! per-CPU array (enum tracerd_counter in bpf/events.h), the recorder in user space; a dump
//! carries both, so a reader knows how complete its window is.
use serde::{Deserialize, Serialize};

/// Drops counted in the kernel, summed over CPUs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct KernelCounters {
    pub buffer_full_syscall: u64,
    pub buffer_full_function: u64,
    pub buffer_full_network: u64,
    pub buffer_full_process: u64,
    pub buffer_full_process_start: u64,
    pub path_unreadable: u64,
    pub targets_full: u64,
    pub pauses_full: u64,
    pub connections_full: u64,
    /// (process, syscall) pairs that did not fit in the syscall counters (count_syscalls)
    #[serde(default)]
    pub syscall_counts_full: u64,
    /// failed calls on an open fd whose file could not be named (a path deeper or longer
    /// than the kernel's buffer); with `open_files_unresolved`, inspect's "unresolved fds"
    #[serde(default)]
    pub fds_unnamed: u64,
    /// opens of configuration files (under /etc, at a target's start) that found the kernel
    /// buffer full: missing from their process's `environment.config_files`
    #[serde(default)]
    pub buffer_full_config: u64,
    /// datagrams whose flow found no room (its process held `flows_per_process`, or the flow
    /// table, `flows`, was full): counted per datagram, not per flow
    #[serde(default)]
    pub flows_full: u64,
}

/// Counters of the user-space side.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecorderCounters {
    pub received: u64,
    pub malformed: u64,
    pub ring_overwritten: u64,
    pub process_table_evicted: u64,
    /// processes, configuration opens and looks the environment worker never got (its queue
    /// was full): their `environment` is missing or incomplete
    #[serde(default)]
    pub environment_lost: u64,
}

/// Everything that was lost, and where.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Counters {
    pub kernel: KernelCounters,
    pub recorder: RecorderCounters,
    pub uprobe_attach_failed: u64,
    /// events in the window whose path or address had been overwritten in the blob arena
    pub blobs_lost: u64,
    /// events in the window whose path is relative to a cwd entry that had left the
    /// kernel's open-file table before the dump (in dumps of tracerd before fds were named
    /// at the failure: also fd events whose open had left it)
    pub open_files_unresolved: u64,
}

impl Counters {
    /// Failed calls whose fd or cwd could not be named: inspect's "unresolved fds".
    pub fn unresolved_fds(&self) -> u64 {
        self.open_files_unresolved + self.kernel.fds_unnamed
    }
}

impl Counters {
    /// Events of the window's kinds that never made it into the window (kernel buffer
    /// full, or overwritten by newer ones): the window is incomplete when this is not 0.
    pub fn lost_events(&self) -> u64 {
        let k = &self.kernel;
        self.recorder.ring_overwritten
            + k.buffer_full_syscall
            + k.buffer_full_function
            + k.buffer_full_network
            + k.buffer_full_process
    }
}
