//! Turns kernel records into window entries: decodes each ring-buffer record (layout from
//! bpf/events.h via the skeleton), keeps the window, the blob arena and the process table,
//! and counts everything it receives or drops.
use crate::bpf::types::{
    tracerd_addr, tracerd_event_kind, tracerd_function_hit, tracerd_header, tracerd_network_gap,
    tracerd_process_start, tracerd_process_state, tracerd_process_state_event, tracerd_syscall_failure,
};
use crate::config::Config;
use crate::engine::c_bytes;
use crate::procs::{ProcInfo, ProcTable};
use crate::record::{BlobArena, BlobRef, EventRing, Payload, Record};
use crate::triggers::Triggers;

/// Copies a plain-old-data struct out of a byte buffer; None if the buffer is too short.
pub fn read_struct<T: Copy>(data: &[u8]) -> Option<T> {
    if data.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: the length is checked; T is a #[repr(C)] struct generated from events.h whose
    // fields are integers and byte arrays, valid for any bit pattern.
    Some(unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<T>()) })
}

/// Address as stored in a blob: a 0 marker byte (paths never start with NUL), family and
/// port little-endian, then 16 address bytes.
pub const ENCODED_ADDR_LEN: usize = 21;

pub fn encode_addr(a: &tracerd_addr, out: &mut [u8]) {
    out[0] = 0;
    out[1..3].copy_from_slice(&a.family.to_le_bytes());
    out[3..5].copy_from_slice(&a.port.to_le_bytes());
    out[5..21].copy_from_slice(&a.addr);
}

/// Counters of the user-space side.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct RecorderCounters {
    pub received: u64,
    pub malformed: u64,
    pub ring_overwritten: u64,
    pub process_table_evicted: u64,
}

pub struct Recorder {
    pub ring: EventRing,
    pub blobs: BlobArena,
    pub procs: ProcTable,
    /// rules that make the daemon dump by itself (None in embedded sessions)
    pub triggers: Option<Triggers>,
    received: u64,
    malformed: u64,
    /// records received per kind (`tracerd_event_kind`), for metrics
    by_kind: [u64; 8],
}

impl Recorder {
    pub fn new(config: &Config) -> Self {
        Recorder {
            ring: EventRing::new(config.ring_events),
            blobs: BlobArena::new(config.blob_bytes),
            procs: ProcTable::new(config.processes),
            triggers: None,
            received: 0,
            malformed: 0,
            by_kind: [0; 8],
        }
    }

    pub fn add_processes(&mut self, procs: Vec<ProcInfo>) {
        for p in procs {
            self.procs.insert(p);
        }
    }

    pub fn counters(&self) -> RecorderCounters {
        RecorderCounters {
            received: self.received,
            malformed: self.malformed,
            ring_overwritten: self.ring.overwritten(),
            process_table_evicted: self.procs.evicted(),
        }
    }

    /// Records received per kind (index: `tracerd_event_kind`).
    pub fn received_by_kind(&self) -> &[u64; 8] {
        &self.by_kind
    }

    /// Handles one ring-buffer record.
    pub fn ingest(&mut self, data: &[u8]) {
        self.received += 1;
        if self.decode(data).is_none() {
            self.malformed += 1;
        }
    }

    fn decode(&mut self, data: &[u8]) -> Option<()> {
        let h: tracerd_header = read_struct(data)?;
        let kind = tracerd_event_kind(h.kind);
        if let Some(n) = self.by_kind.get_mut(h.kind as usize) {
            *n += 1;
        }
        let mut path = None;
        let payload = match kind {
            tracerd_event_kind::TRACERD_EV_SYSCALL_FAILURE => {
                let e: tracerd_syscall_failure = read_struct(data)?;
                if e.path_len > 0 && self.triggers.as_ref().is_some_and(Triggers::wants_paths) {
                    path = Some(e.path);
                }
                self.syscall_failure(e)
            }
            tracerd_event_kind::TRACERD_EV_FUNCTION => {
                let e: tracerd_function_hit = read_struct(data)?;
                Payload::Function { function_id: e.function_id }
            }
            tracerd_event_kind::TRACERD_EV_NETWORK_GAP => self.network_gap(&read_struct(data)?),
            tracerd_event_kind::TRACERD_EV_PROCESS_STATE => self.process_state(&h, &read_struct(data)?),
            tracerd_event_kind::TRACERD_EV_PROCESS_START => {
                self.process_start(&read_struct(data)?);
                return Some(());
            }
            _ => return None,
        };
        let record = Record { ts_ns: h.ts_ns, pid: h.pid, tid: h.tid, comm: comm_bytes(&h.comm), payload };
        if let Some(t) = &mut self.triggers {
            t.check(&record, path.as_ref().map(|p| c_bytes(p, 0)));
        }
        self.ring.push(record);
        Some(())
    }

    fn syscall_failure(&mut self, e: tracerd_syscall_failure) -> Payload {
        let blob = if e.path_len > 0 {
            self.blobs.put(c_bytes(&e.path, e.path_len as usize))
        } else if e.peer.family != 0 {
            let mut buf = [0u8; ENCODED_ADDR_LEN];
            encode_addr(&e.peer, &mut buf);
            self.blobs.put(&buf)
        } else {
            BlobRef::NONE
        };
        Payload::SyscallFailure {
            nr: e.syscall_nr.min(u16::MAX as u32) as u16,
            ret: e.ret.clamp(i32::MIN as i64, i32::MAX as i64) as i32,
            fd: e.fd,
            open_id: e.open_id,
            blob,
        }
    }

    /// Encodes a connection's endpoints into the arena.
    pub fn endpoints_blob(&mut self, local: &tracerd_addr, peer: &tracerd_addr) -> BlobRef {
        let mut buf = [0u8; 2 * ENCODED_ADDR_LEN];
        encode_addr(local, &mut buf[..ENCODED_ADDR_LEN]);
        encode_addr(peer, &mut buf[ENCODED_ADDR_LEN..]);
        self.blobs.put(&buf)
    }

    fn network_gap(&mut self, e: &tracerd_network_gap) -> Payload {
        Payload::NetworkGap {
            gap_ns: e.gap_ns,
            packets: e.packets,
            endpoints: self.endpoints_blob(&e.local, &e.peer),
            ongoing: e.ongoing != 0,
        }
    }

    fn process_state(&mut self, h: &tracerd_header, e: &tracerd_process_state_event) -> Payload {
        let state = tracerd_process_state(e.state);
        if state == tracerd_process_state::TRACERD_PS_EXITED || state == tracerd_process_state::TRACERD_PS_KILLED {
            self.procs.on_exit(h.pid, h.ts_ns);
        }
        let sender = c_bytes(&e.sender_comm, 0);
        Payload::ProcessState {
            state: e.state as u8,
            cause: e.cause as u8,
            signal: e.signal.min(255) as u8,
            core_dumped: e.core_dumped != 0,
            ongoing: false,
            exit_code: e.exit_code,
            sender_pid: e.sender_pid,
            duration_ns: e.duration_ns,
            sender_comm: self.blobs.put(sender),
        }
    }

    fn process_start(&mut self, e: &tracerd_process_start) {
        let comm = String::from_utf8_lossy(c_bytes(&e.h.comm, 0)).into_owned();
        if e.is_exec != 0 {
            let args = &e.args[..(e.args_len as usize).min(e.args.len())];
            let args = args.strip_suffix(&[0]).unwrap_or(args);
            let argv: Vec<String> = if args.is_empty() { Vec::new() } else { args.split(|&b| b == 0).map(|a| String::from_utf8_lossy(&comm_bytes_of(a)).into_owned()).collect() };
            let exe = String::from_utf8_lossy(c_bytes(&e.exe, 0)).into_owned();
            self.procs.on_exec(e.h.pid, e.ppid, &comm, e.h.ts_ns, (!argv.is_empty()).then_some(argv), (!exe.is_empty()).then_some(exe));
        } else {
            self.procs.on_fork(e.h.pid, e.ppid, &comm, e.h.ts_ns);
        }
    }
}

fn comm_bytes_of(chars: &[i8]) -> Vec<u8> {
    chars.iter().map(|&c| c as u8).collect()
}

pub fn comm_bytes(comm: &[i8; 16]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, c) in out.iter_mut().zip(comm.iter()) {
        *o = *c as u8;
    }
    out
}
