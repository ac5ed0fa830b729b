//! Turns kernel records into window entries: decodes each ring-buffer record (layout from
//! bpf/events.h via the skeleton), keeps the window, the blob arena and the process table,
//! hands what processes start with to their environments (environment/), and counts
//! everything it receives or drops.
use tracedump::abi::{c_bytes, comm_bytes, read_struct, EventKind, ProcessState};
use tracedump::addr::{encode_flow_trailer, FlowTrailer, ENCODED_ADDR_LEN, FLOW_ENDPOINTS_LEN, IPPROTO_TCP};
pub use tracedump::counters::RecorderCounters;
use tracedump::process::{split_argv, ProcInfo};
use tracedump::record::{BlobArena, BlobRef, EventRing, Payload, Record};

use crate::bpf::types::{
    tracerd_addr, tracerd_config_open, tracerd_function_hit, tracerd_header, tracerd_network_gap,
    tracerd_process_rename, tracerd_process_start, tracerd_process_state_event, tracerd_syscall_failure,
};
use crate::config::Config;
use crate::environment::Environments;
use crate::procs::ProcTable;
use crate::triggers::Triggers;

fn encode_addr(a: &tracerd_addr, out: &mut [u8]) {
    tracedump::addr::encode_addr(a.family, a.port, &a.addr, out);
}

pub struct Recorder {
    pub ring: EventRing,
    pub blobs: BlobArena,
    pub procs: ProcTable,
    /// what the processes of the table were built from and configured with
    pub environments: Environments,
    /// rules that make the daemon dump by itself (None in embedded sessions)
    pub triggers: Option<Triggers>,
    received: u64,
    malformed: u64,
    /// records received per kind (`tracerd_event_kind`), for metrics
    by_kind: [u64; 8],
    /// network gaps received per IP protocol, for metrics (a few protocols: a short list)
    gaps_by_protocol: Vec<(u16, u64)>,
    /// targets that exec'd since the engine last looked (for the function list's binaries in
    /// their file systems); at most [`MAX_EXECS_QUEUED`], filled only with `watch_execs`
    pub execs: Vec<u32>,
    pub watch_execs: bool,
}

/// Execs queued between two looks of the engine (a 100-ms poll); more are not looked at.
pub const MAX_EXECS_QUEUED: usize = 4096;

impl Recorder {
    pub fn new(config: &Config) -> Self {
        Recorder {
            ring: EventRing::new(config.ring_events),
            blobs: BlobArena::new(config.blob_bytes),
            procs: ProcTable::new(config.processes),
            environments: Environments::new(config),
            triggers: None,
            received: 0,
            malformed: 0,
            by_kind: [0; 8],
            gaps_by_protocol: Vec::new(),
            execs: Vec::new(),
            watch_execs: false,
        }
    }

    pub fn add_processes(&mut self, procs: Vec<ProcInfo>) {
        for p in procs {
            self.environments.learn(&p, true);
            self.procs.insert(p);
        }
    }

    pub fn counters(&self) -> RecorderCounters {
        RecorderCounters {
            received: self.received,
            malformed: self.malformed,
            ring_overwritten: self.ring.overwritten(),
            process_table_evicted: self.procs.evicted(),
            environment_lost: self.environments.lost(),
        }
    }

    /// Records received per kind (index: `tracerd_event_kind`).
    pub fn received_by_kind(&self) -> &[u64; 8] {
        &self.by_kind
    }

    /// Network gaps received per IP protocol (6 TCP, 17 UDP, a raw socket's own).
    pub fn gaps_by_protocol(&self) -> &[(u16, u64)] {
        &self.gaps_by_protocol
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
        if let Some(n) = self.by_kind.get_mut(h.kind as usize) {
            *n += 1;
        }
        let mut path = None;
        let payload = match EventKind::from_raw(h.kind)? {
            EventKind::SyscallFailure => {
                let e: tracerd_syscall_failure = read_struct(data)?;
                if e.path_len > 0 && self.triggers.as_ref().is_some_and(Triggers::wants_paths) {
                    path = Some(e.path);
                }
                self.syscall_failure(e)
            }
            EventKind::Function => {
                let e: tracerd_function_hit = read_struct(data)?;
                Payload::Function {
                    function_id: e.function_id,
                }
            }
            EventKind::NetworkGap => self.network_gap(&read_struct(data)?),
            EventKind::ProcessState => self.process_state(&h, &read_struct(data)?),
            EventKind::ProcessStart => {
                self.process_start(&read_struct(data)?);
                return Some(());
            }
            EventKind::ConfigOpen => {
                self.config_open(&read_struct(data)?);
                return Some(());
            }
            EventKind::ProcessRename => {
                let e: tracerd_process_rename = read_struct(data)?;
                let comm = String::from_utf8_lossy(c_bytes(&e.h.comm, 0)).into_owned();
                self.procs.on_rename(e.h.pid, &comm, argv_of(&e.args, e.args_len));
                return Some(());
            }
        };
        let record = Record {
            ts_ns: h.ts_ns,
            pid: h.pid,
            tid: h.tid,
            comm: comm_bytes(&h.comm),
            payload,
        };
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
            // at most MAX_RW_COUNT (the kernel side clamps it)
            requested: e.requested.min(u32::MAX as u64) as u32,
        }
    }

    /// Encodes a gap's endpoints into the arena: a TCP connection's, or a datagram flow's
    /// with its trailer (`flow`: its protocol and the datagrams sent during the silence).
    pub fn endpoints_blob(
        &mut self,
        local: &tracerd_addr,
        peer: &tracerd_addr,
        flow: Option<FlowTrailer>,
    ) -> BlobRef {
        let mut buf = [0u8; FLOW_ENDPOINTS_LEN];
        encode_addr(local, &mut buf[..ENCODED_ADDR_LEN]);
        encode_addr(peer, &mut buf[ENCODED_ADDR_LEN..]);
        let len = match flow {
            Some(t) => {
                encode_flow_trailer(t, &mut buf);
                FLOW_ENDPOINTS_LEN
            }
            None => 2 * ENCODED_ADDR_LEN,
        };
        self.blobs.put(&buf[..len])
    }

    fn count_gap(&mut self, protocol: u16) {
        match self.gaps_by_protocol.iter_mut().find(|(p, _)| *p == protocol) {
            Some((_, n)) => *n += 1,
            None => self.gaps_by_protocol.push((protocol, 1)),
        }
    }

    fn network_gap(&mut self, e: &tracerd_network_gap) -> Payload {
        let protocol = e.protocol.min(u16::MAX as u32) as u16;
        self.count_gap(protocol);
        let flow = (protocol != IPPROTO_TCP).then_some(FlowTrailer {
            protocol,
            sent: e.sent,
            sent_before: e.sent_before.min(u32::MAX as u64) as u32,
        });
        Payload::NetworkGap {
            gap_ns: e.gap_ns,
            packets: e.packets,
            endpoints: self.endpoints_blob(&e.local, &e.peer, flow),
            ongoing: e.ongoing != 0,
            busy_ms: busy_ms(e.busy_ns),
            busy_packets: e.busy_packets.min(u16::MAX as u32) as u16,
        }
    }

    fn process_state(&mut self, h: &tracerd_header, e: &tracerd_process_state_event) -> Payload {
        if matches!(
            ProcessState::from_raw(e.state),
            Some(ProcessState::Exited | ProcessState::Killed)
        ) {
            self.procs.on_exit(h.pid, h.ts_ns);
            self.environments.exited(h.pid);
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
            let exe = String::from_utf8_lossy(c_bytes(&e.exe, 0)).into_owned();
            self.procs.on_exec(
                e.h.pid,
                e.ppid,
                &comm,
                e.h.ts_ns,
                argv_of(&e.args, e.args_len),
                (!exe.is_empty()).then_some(exe),
            );
            if let Some(p) = self.procs.get(e.h.pid) {
                self.environments.learn(p, false);
            }
            if self.watch_execs && self.execs.len() < MAX_EXECS_QUEUED {
                self.execs.push(e.h.pid);
            }
        } else {
            self.procs.on_fork(e.h.pid, e.ppid, &comm, e.h.ts_ns);
            self.environments.fork(e.h.pid, e.ppid);
        }
    }

    /// A target opened a configuration file at its start: when, counted from its exec or fork.
    fn config_open(&mut self, e: &tracerd_config_open) {
        let path = String::from_utf8_lossy(c_bytes(&e.path, e.path_len as usize)).into_owned();
        let started = self.procs.get(e.h.pid).map_or(e.h.ts_ns, |p| p.start_ns);
        self.environments
            .config_open(e.h.pid, path, e.h.ts_ns.saturating_sub(started));
    }
}

/// A busy stretch's length in the record's milliseconds (saturating at 49 days).
pub fn busy_ms(busy_ns: u64) -> u32 {
    (busy_ns / 1_000_000).min(u32::MAX as u64) as u32
}

/// The arguments in the first `len` bytes of a record's argv copy (None: none copied).
fn argv_of(args: &[i8], len: u32) -> Option<Vec<String>> {
    let bytes: Vec<u8> = args[..(len as usize).min(args.len())]
        .iter()
        .map(|&c| c as u8)
        .collect();
    Some(split_argv(&bytes)).filter(|a| !a.is_empty())
}
