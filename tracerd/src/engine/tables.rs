//! What the kernel's maps say now: counters, per-syscall counts, open files, connections,
//! pauses and how many targets there are. Read by the dump, the metrics and `status`.
use std::collections::HashMap;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use tracedump::abi::{c_bytes, read_struct};
use tracedump::dump::{KernelCounters, OpenFile, SyscallCount};
use tracedump::syscalls::syscall_name;

use super::{sum_per_cpu, Engine};
use crate::bpf::types::{
    tracerd_conn, tracerd_counter, tracerd_open_file, tracerd_pause, tracerd_syscall_key,
};
use crate::mapdump::for_each_entry;

impl Engine {
    /// Syscalls counted per (process, syscall) so far (empty unless `count_syscalls`),
    /// ordered by pid and syscall number.
    pub fn syscall_counts(&self) -> Result<Vec<SyscallCount>> {
        let map = &self.skel.maps.syscall_counts;
        let mut counted: Vec<(u32, u32, u64)> = Vec::new();
        for key in map.keys() {
            let Some(k) = read_struct::<tracerd_syscall_key>(&key) else {
                continue;
            };
            // a key can vanish between the walk and the lookup only if the map were pruned; it is not
            if let Some(per_cpu) = map.lookup_percpu(&key, MapFlags::ANY)? {
                counted.push((k.tgid, k.nr, sum_per_cpu(&per_cpu)));
            }
        }
        counted.sort_unstable();
        Ok(counted
            .into_iter()
            .map(|(pid, nr, count)| SyscallCount {
                pid,
                syscall: syscall_name(nr),
                count,
            })
            .collect())
    }

    pub fn kernel_counters(&self) -> Result<KernelCounters> {
        let mut sums = [0u64; tracerd_counter::TRACERD_CNT_MAX.0 as usize];
        for (i, sum) in sums.iter_mut().enumerate() {
            let key = (i as u32).to_ne_bytes();
            if let Some(per_cpu) = self.skel.maps.counters.lookup_percpu(&key, MapFlags::ANY)? {
                *sum = sum_per_cpu(&per_cpu);
            }
        }
        Ok(KernelCounters {
            buffer_full_syscall: sums[tracerd_counter::TRACERD_CNT_RINGBUF_FULL_SYSCALL.0 as usize],
            buffer_full_function: sums[tracerd_counter::TRACERD_CNT_RINGBUF_FULL_FUNCTION.0 as usize],
            buffer_full_network: sums[tracerd_counter::TRACERD_CNT_RINGBUF_FULL_GAP.0 as usize],
            buffer_full_process: sums[tracerd_counter::TRACERD_CNT_RINGBUF_FULL_PROCESS.0 as usize],
            buffer_full_process_start: sums[tracerd_counter::TRACERD_CNT_RINGBUF_FULL_START.0 as usize],
            path_unreadable: sums[tracerd_counter::TRACERD_CNT_PATH_UNREADABLE.0 as usize],
            targets_full: sums[tracerd_counter::TRACERD_CNT_TARGETS_FULL.0 as usize],
            pauses_full: sums[tracerd_counter::TRACERD_CNT_PAUSES_FULL.0 as usize],
            connections_full: sums[tracerd_counter::TRACERD_CNT_CONNS_FULL.0 as usize],
            syscall_counts_full: sums[tracerd_counter::TRACERD_CNT_SYSCALL_COUNTS_FULL.0 as usize],
            fds_unnamed: sums[tracerd_counter::TRACERD_CNT_FD_UNNAMED.0 as usize],
            buffer_full_config: sums[tracerd_counter::TRACERD_CNT_RINGBUF_FULL_CONFIG.0 as usize],
            flows_full: sums[tracerd_counter::TRACERD_CNT_FLOWS_FULL.0 as usize],
        })
    }

    /// The kernel's open-file table (the targets' cwds), by open id (every entry: see `mapdump`).
    pub fn open_files(&self) -> Result<HashMap<u64, OpenFile>> {
        let mut out = HashMap::new();
        for_each_entry(&self.skel.maps.open_files, |_, value| {
            let Some(o) = read_struct::<tracerd_open_file>(value) else {
                return;
            };
            let path = c_bytes(&o.path, o.path_len as usize);
            out.insert(
                o.open_id,
                OpenFile {
                    open_id: o.open_id,
                    dir_open_id: o.dir_open_id,
                    tgid: o.tgid,
                    path: String::from_utf8_lossy(path).into_owned(),
                },
            );
        })?;
        Ok(out)
    }

    /// Reads every watched connection's receive counter and time stamp in the kernel:
    /// records the silences that ended since the previous look and refreshes what
    /// `connections` returns. Nothing runs per packet; this is the whole cost of gaps.
    pub fn look_at_connections(&self) -> Result<()> {
        self.skel
            .progs
            .look_connections
            .test_run(libbpf_rs::ProgramInput::default())
            .context("reading the watched connections")?;
        Ok(())
    }

    /// Watched connections as of the last look (for gaps still open at dump time).
    pub fn connections(&self) -> Result<Vec<tracerd_conn>> {
        let mut out = Vec::new();
        for_each_entry(&self.skel.maps.conn_slots, |_, v| {
            out.extend(read_struct::<tracerd_conn>(v).filter(|c| c.sock != 0))
        })?;
        Ok(out)
    }

    /// Whether any target thread may be paused now: the kernel's count of entries in the
    /// pauses map, read from the program's memory without a system call.
    pub fn any_paused(&self) -> bool {
        match self.skel.maps.bss_data.as_deref() {
            Some(bss) => {
                // SAFETY: a u64 in the BPF program's mmapped .bss, written by the kernel at
                // any time: read once, as a volatile load.
                let pending = unsafe { std::ptr::read_volatile(&bss.pending_pauses) };
                pending != 0
            }
            None => true,
        }
    }

    /// Processes in the target set now: the sum of the kernel's per-slot target counts, read
    /// from the program's memory (0 when every process is traced: there is no set).
    pub fn targets_now(&self) -> u64 {
        let Some(bss) = self.skel.maps.bss_data.as_deref() else {
            return 0;
        };
        bss.target_slots
            .iter()
            // SAFETY: u32s in the BPF program's mmapped .bss, changed by the kernel at any
            // time: each read once, as a volatile load.
            .map(|slot| unsafe { std::ptr::read_volatile(slot) } as u64)
            .sum()
    }

    /// Threads paused now (for pauses still going on at dump time), with their tids.
    pub fn pauses(&self) -> Result<Vec<(u32, tracerd_pause)>> {
        let mut out = Vec::new();
        for_each_entry(&self.skel.maps.pauses, |k, v| {
            let Some(tid) = k.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes) else {
                return;
            };
            out.extend(read_struct::<tracerd_pause>(v).map(|p| (tid, p)));
        })?;
        Ok(out)
    }
}
