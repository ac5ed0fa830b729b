//! Turns a dump's raw records into typed [`Event`]s: syscall and errno names, paths through
//! the open-file table and each process's cwd, addresses and names from the blobs, functions
//! from `DumpMeta::functions`, wall time from the clock pair.
use std::collections::HashMap;
use std::sync::Arc;

use super::{Dump, OpenFile};
use crate::abi::{PauseCause, ProcessState};
use crate::addr::{decode_addr, decode_gap_endpoints, IPPROTO_TCP};
use crate::event::{
    Event, FunctionHit, NetworkGap, ProcessChange, Sender, ShortIo, State, SyscallFailure, What,
};
use crate::record::{BlobRef, Payload, Record};
use crate::syscalls::{errno_name, syscall_arg_kind, syscall_name, ArgKind};

impl Dump {
    /// Every event, resolved and ordered by time.
    pub fn events(&self) -> Vec<Event> {
        let mut events: Vec<Event> = self.resolved().collect();
        events.sort_by_key(|e| e.ts_ns);
        events
    }

    /// Every event, resolved and ordered by time, with how long the gaps and pauses lasted
    /// in ns (the events themselves say it to the millisecond).
    pub fn events_with_spans(&self) -> Vec<(Event, Option<u64>)> {
        let mut events: Vec<(Event, Option<u64>)> = self
            .records
            .iter()
            .zip(self.resolved())
            .map(|(r, event)| {
                let span = match (&r.payload, &event.what) {
                    (Payload::NetworkGap { gap_ns, .. }, _) => Some(*gap_ns),
                    (Payload::ProcessState { duration_ns, .. }, What::ProcessState(p))
                        if matches!(p.state, State::Paused { .. }) =>
                    {
                        Some(*duration_ns)
                    }
                    _ => None,
                };
                (event, span)
            })
            .collect();
        events.sort_by_key(|(e, _)| e.ts_ns);
        events
    }

    /// Every event, resolved, in the order of the records (not quite time order: a gap or
    /// a pause is recorded when it ends, stamped when it began). For readers that order
    /// events themselves and need not hold a sorted copy.
    pub fn resolved(&self) -> impl Iterator<Item = Event> + '_ {
        let mut resolver = Resolver::new(self);
        self.records.iter().map(move |r| resolver.event(r))
    }
}

struct Resolver<'a> {
    dump: &'a Dump,
    opens: HashMap<u64, &'a OpenFile>,
    cwd: HashMap<u32, &'a str>,
    /// each function's binary as text, made once: a dump holds many hits of few functions
    binaries: Vec<String>,
    host: Arc<str>,
    /// each process name once, shared by its events
    comms: HashMap<[u8; 16], Arc<str>>,
    last_comm: Option<([u8; 16], Arc<str>)>,
}

impl<'a> Resolver<'a> {
    fn new(dump: &'a Dump) -> Self {
        let opens = dump.meta.open_files.iter().map(|o| (o.open_id, o)).collect();
        let cwd = dump
            .meta
            .processes
            .iter()
            .filter_map(|p| Some((p.pid, p.cwd.as_deref()?)))
            .collect();
        let binaries = dump
            .meta
            .functions
            .iter()
            .map(|f| f.binary.display().to_string())
            .collect();
        Resolver {
            dump,
            opens,
            cwd,
            binaries,
            host: dump.meta.host.as_str().into(),
            comms: HashMap::new(),
            last_comm: None,
        }
    }

    fn join(base: &str, rel: &str) -> String {
        let rel = rel.strip_prefix("./").unwrap_or(rel);
        if base.ends_with('/') {
            format!("{base}{rel}")
        } else {
            format!("{base}/{rel}")
        }
    }

    fn open_path(&self, open_id: u64, depth: u32) -> Option<String> {
        let o = self.opens.get(&open_id)?;
        if o.path.starts_with('/') || depth > 8 {
            return Some(o.path.clone());
        }
        let base = if o.dir_open_id != 0 {
            self.open_path(o.dir_open_id, depth + 1)
        } else {
            self.cwd.get(&o.tgid).map(|s| s.to_string())
        };
        Some(match base {
            Some(b) => Self::join(&b, &o.path),
            None => o.path.clone(),
        })
    }

    fn path_arg(&self, pid: u32, path: &str, dir_open_id: u64) -> String {
        if path.starts_with('/') {
            return path.to_string();
        }
        let base = if dir_open_id != 0 {
            self.open_path(dir_open_id, 0)
        } else {
            self.cwd.get(&pid).map(|s| s.to_string())
        };
        match base {
            Some(b) => Self::join(&b, path),
            None => path.to_string(),
        }
    }

    fn blob(&self, r: BlobRef) -> Option<&'a [u8]> {
        self.dump.blobs.get(r)
    }

    fn comm(&mut self, comm: &[u8; 16]) -> Arc<str> {
        // a process's events come in runs: most events name the process the last one named
        if let Some((bytes, name)) = &self.last_comm {
            if bytes == comm {
                return Arc::clone(name);
            }
        }
        let name = self.comms.entry(*comm).or_insert_with(|| {
            let end = comm.iter().position(|&b| b == 0).unwrap_or(16);
            String::from_utf8_lossy(&comm[..end]).into()
        });
        self.last_comm = Some((*comm, Arc::clone(name)));
        Arc::clone(name)
    }

    fn event(&mut self, r: &Record) -> Event {
        let what = match r.payload {
            Payload::SyscallFailure {
                nr,
                ret,
                fd,
                open_id,
                requested,
                blob,
                ..
            } if requested != 0 => What::ShortIo(ShortIo {
                syscall: syscall_name(nr as u32),
                fd,
                // the fd's name, read at the call; older dumps name the open instead
                path: match self.blob(blob) {
                    Some(b) => Some(String::from_utf8_lossy(b).into_owned()),
                    None => self.open_path(open_id, 0),
                },
                requested: requested as u64,
                done: ret.max(0) as u64,
            }),
            Payload::SyscallFailure {
                nr,
                ret,
                fd,
                open_id,
                blob,
                ..
            } => {
                let (mut path, mut peer) = (None, None);
                match self.blob(blob) {
                    Some(b) if b.first() == Some(&0) => peer = decode_addr(b),
                    // the file behind the fd, named as it is (pipe:[ino] is no relative path)
                    Some(b) if matches!(syscall_arg_kind(nr as u32), Some((ArgKind::Fd, _))) => {
                        path = Some(String::from_utf8_lossy(b).into_owned())
                    }
                    Some(b) => path = Some(self.path_arg(r.pid, &String::from_utf8_lossy(b), open_id)),
                    None if open_id != 0 => path = self.open_path(open_id, 0),
                    None => {}
                }
                What::SyscallFailure(SyscallFailure {
                    syscall: syscall_name(nr as u32),
                    ret: ret as i64,
                    errno: (ret < 0).then(|| errno_name(-(ret as i64))),
                    fd: (fd >= 0).then_some(fd),
                    path,
                    peer,
                })
            }
            Payload::Function { function_id } => {
                let id = function_id as usize;
                What::Function(FunctionHit {
                    binary: self.binaries.get(id).cloned(),
                    function: self.dump.meta.functions.get(id).map(|f| f.symbol.clone()),
                })
            }
            Payload::NetworkGap {
                gap_ns,
                packets,
                endpoints,
                ongoing,
                busy_ms,
                busy_packets,
            } => {
                let (local, peer, flow) = self.blob(endpoints).map(decode_gap_endpoints).unwrap_or_default();
                What::NetworkGap(NetworkGap {
                    local,
                    peer,
                    duration_ms: gap_ns / 1_000_000,
                    packets,
                    ongoing,
                    busy_ms: busy_ms as u64,
                    busy_packets: busy_packets as u64,
                    protocol: flow.map_or(IPPROTO_TCP, |f| f.protocol),
                    sent: flow.map(|f| f.sent as u64),
                    sent_before: flow.map(|f| f.sent_before as u64),
                })
            }
            Payload::ProcessState {
                state,
                cause,
                signal,
                core_dumped,
                ongoing,
                exit_code,
                sender_pid,
                duration_ns,
                sender_comm,
            } => {
                // unknown values read as the last state and the D-state cause, as version 1 always did
                let state = match ProcessState::from_raw(state as u32) {
                    Some(ProcessState::Paused) => State::Paused {
                        cause: PauseCause::from_raw(cause as u32).unwrap_or(PauseCause::Uninterruptible),
                        duration_ms: duration_ns / 1_000_000,
                    },
                    Some(ProcessState::Exited) => State::Exited { code: exit_code },
                    Some(ProcessState::Killed) | None => State::Killed { core_dumped },
                };
                let sender = (sender_pid != 0).then(|| Sender {
                    pid: sender_pid,
                    comm: self
                        .blob(sender_comm)
                        .map(|b| String::from_utf8_lossy(b).into_owned()),
                });
                What::ProcessState(ProcessChange {
                    state,
                    signal: (signal != 0).then_some(signal as u32),
                    sender,
                    ongoing,
                })
            }
        };
        Event {
            ts_ns: r.ts_ns,
            realtime_ns: self.dump.meta.clock.realtime_of(r.ts_ns),
            host: Arc::clone(&self.host),
            pid: r.pid,
            tid: r.tid,
            comm: self.comm(&r.comm),
            what,
        }
    }
}
