//! The dump file: its format (version 1, documented in docs/dump-format.md) and the types
//! of its meta section. The one writer is in `write` (through the atomic writer, mode 0600),
//! the one reader in `read`, which `resolve` completes by turning raw records into typed
//! [`Event`](crate::event::Event)s; `codec` lays out one event record for both.
//!
//! Layout: 8 bytes magic "TRCRDUMP", u32 LE format version, u32 LE reserved (0), then one
//! zstd frame (with checksum) holding sections `tag u32 LE, length u64 LE, payload`:
//! 1 = meta (JSON, `DumpMeta`), 2 = blobs (u64 LE base offset + bytes), 3 = events (u32 LE
//! record size = 64, u64 LE count, records), 0xFFFF_FFFF = end (length 0). Readers skip
//! unknown tags; a file without the end section is truncated.
mod codec;
mod read;
mod resolve;
mod write;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::counters::{Counters, KernelCounters, RecorderCounters};
pub use crate::process::ProcInfo;
pub use read::Dump;
pub use write::{write_dump, DumpContents};

pub const MAGIC: &[u8; 8] = b"TRCRDUMP";
pub const FORMAT_VERSION: u32 = 1;
pub const RECORD_SIZE: usize = 64;
const SECTION_META: u32 = 1;
const SECTION_BLOBS: u32 = 2;
const SECTION_EVENTS: u32 = 3;
const SECTION_END: u32 = 0xFFFF_FFFF;

/// Simultaneous readings of three clocks, to map event times (CLOCK_BOOTTIME) to wall time.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClockPair {
    pub boottime_ns: u64,
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
}

impl ClockPair {
    pub fn now() -> ClockPair {
        use nix::time::{clock_gettime, ClockId};
        let ns = |c| {
            clock_gettime(c)
                .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
                .unwrap_or(0)
        };
        let b1 = ns(ClockId::CLOCK_BOOTTIME);
        let monotonic_ns = ns(ClockId::CLOCK_MONOTONIC);
        let realtime_ns = ns(ClockId::CLOCK_REALTIME);
        let b2 = ns(ClockId::CLOCK_BOOTTIME);
        ClockPair {
            boottime_ns: b1 + (b2 - b1) / 2,
            monotonic_ns,
            realtime_ns,
        }
    }

    /// Wall-clock time of a CLOCK_BOOTTIME timestamp.
    pub fn realtime_of(&self, boot_ns: u64) -> u64 {
        (self.realtime_ns as i128 + boot_ns as i128 - self.boottime_ns as i128).max(0) as u64
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub addresses: Vec<String>,
}

/// One uprobe target (index in `DumpMeta::functions` = function id).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FunctionSpec {
    pub binary: PathBuf,
    pub symbol: String,
}

/// Calls of one syscall by one process, counted in the kernel (config `count_syscalls`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SyscallCount {
    pub pid: u32,
    pub syscall: String,
    pub count: u64,
}

/// One entry of the kernel's open-file table, for resolving fds to paths.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OpenFile {
    pub open_id: u64,
    pub dir_open_id: u64,
    pub tgid: u32,
    pub path: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DumpMeta {
    pub format: String,
    pub version: u32,
    pub tracerd_version: String,
    pub host: String,
    pub boot_id: String,
    pub kernel: String,
    pub clock: ClockPair,
    pub interfaces: Vec<Interface>,
    /// the effective configuration (kept as JSON so that old dumps stay readable)
    pub config: serde_json::Value,
    pub counters: Counters,
    pub functions: Vec<FunctionSpec>,
    pub processes: Vec<ProcInfo>,
    pub open_files: Vec<OpenFile>,
    pub event_count: u64,
    /// calls of each function since tracing started, index = `functions` index (added in
    /// version 1 later: absent in older dumps, read as empty)
    #[serde(default)]
    pub function_calls: Vec<u64>,
    /// `functions` indexes whose uprobe could not be attached (never counted)
    #[serde(default)]
    pub unattached_functions: Vec<usize>,
    /// `functions` indexes detached at `detach_functions_after_calls`: counted up to then
    #[serde(default)]
    pub detached_functions: Vec<usize>,
    /// `functions` indexes a reload took off the list: counted up to then, no longer probed
    /// (they keep their index, which events in the window carry)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_functions: Vec<usize>,
    /// calls per (process, syscall) since tracing started; empty unless `count_syscalls`
    #[serde(default)]
    pub syscall_counts: Vec<SyscallCount>,
    /// why the dump wrote itself; absent when it was asked for
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerInfo>,
    /// the targets' datagram flows when the dump was taken (tracerd's flow table); absent in
    /// dumps written before flows were recorded
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<FlowInfo>,
}

/// A target's datagram flow (its UDP or raw IP traffic with one peer) as tracerd's table held it
/// when the dump was taken: what it received and sent, and since when each direction had been
/// steady, so that one end's dump can say whether it kept sending while the other end heard
/// nothing. Times are CLOCK_BOOTTIME; 0 = never.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FlowInfo {
    pub pid: u32,
    pub comm: String,
    /// the IP protocol: 17 UDP, a raw socket's own
    pub protocol: u16,
    /// the socket's own address as bound (an unspecified address when bound to any)
    pub local: Option<std::net::SocketAddr>,
    pub peer: std::net::SocketAddr,
    /// datagrams received from the peer, and sent to it
    pub received: u64,
    pub sent: u64,
    /// the last one received, and the first of the stretch that ended with it (no silence
    /// longer than the gap threshold in between)
    pub last_received_ns: u64,
    pub receiving_since_ns: u64,
    /// the same for sending
    pub last_sent_ns: u64,
    pub sending_since_ns: u64,
}

/// Why a dump wrote itself (`[triggers]`): absent in dumps that were asked for.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TriggerInfo {
    /// the rule that fired: fatal_signal, nonzero_exit, oom_kill, pause, syscall(...)
    pub rule: String,
    /// the event that fired it (CLOCK_BOOTTIME, process, thread, and what happened)
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub event: String,
    /// triggers of this rule suppressed by its rate limit since it last fired
    pub suppressed_before: u64,
    /// other rules that fired while this dump was settling
    pub joined: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::ProcessState;
    use crate::record::{BlobRef, Payload, Record};

    /// Records of each kind, for the tests of the codec, the writer and the reader.
    pub(super) fn sample() -> Vec<Record> {
        vec![
            Record {
                ts_ns: 5,
                pid: 1,
                tid: 2,
                comm: *b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0",
                payload: Payload::SyscallFailure {
                    nr: 1,
                    ret: -28,
                    fd: 3,
                    open_id: 7,
                    blob: BlobRef::NONE,
                    requested: 0,
                },
            },
            Record {
                ts_ns: 6,
                pid: 1,
                tid: 1,
                comm: [0; 16],
                payload: Payload::ProcessState {
                    state: ProcessState::Killed as u8,
                    cause: 0,
                    signal: 9,
                    core_dumped: false,
                    ongoing: false,
                    exit_code: 0,
                    sender_pid: 44,
                    duration_ns: 0,
                    sender_comm: BlobRef::NONE,
                },
            },
            Record {
                ts_ns: 7,
                pid: 1,
                tid: 1,
                comm: [0; 16],
                payload: Payload::NetworkGap {
                    gap_ns: 6_000_000_000,
                    packets: 9,
                    endpoints: BlobRef::NONE,
                    ongoing: true,
                    busy_ms: 9_800,
                    busy_packets: 98,
                },
            },
            Record {
                ts_ns: 8,
                pid: 1,
                tid: 2,
                comm: *b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0",
                payload: Payload::SyscallFailure {
                    nr: 18,
                    ret: 480,
                    fd: 3,
                    open_id: 7,
                    blob: BlobRef::NONE,
                    requested: 1064,
                },
            },
        ]
    }

    #[test]
    fn meta_without_count_fields_still_reads() {
        let mut old = serde_json::to_value(DumpMeta::default()).unwrap();
        let obj = old.as_object_mut().unwrap();
        for k in ["function_calls", "unattached_functions", "syscall_counts"] {
            obj.remove(k).expect("the field is written");
        }
        obj["counters"]["kernel"]
            .as_object_mut()
            .unwrap()
            .remove("syscall_counts_full");
        let meta: DumpMeta = serde_json::from_value(old).unwrap();
        assert!(
            meta.function_calls.is_empty()
                && meta.syscall_counts.is_empty()
                && meta.unattached_functions.is_empty()
        );
    }
}
