//! The typed event model: what a dump's records mean once resolved (names, paths, endpoints,
//! process changes). Code matches on [`What`]; the JSON of `tracerd inspect --json` and the
//! one-line text of `inspect` are views of it ([`EventJson`], [`Event::describe`]).
use std::net::SocketAddr;
use std::sync::Arc;

use serde::{Serialize, Serializer};

pub use crate::abi::PauseCause;
use crate::syscalls::signal_name;

/// One resolved event. `host` and `comm` are shared between the events that have the same
/// one (a dump has a million events and a few hosts and process names).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// CLOCK_BOOTTIME; for gaps and pauses, when the interval began
    pub ts_ns: u64,
    pub realtime_ns: u64,
    pub host: Arc<str>,
    pub pid: u32,
    pub tid: u32,
    pub comm: Arc<str>,
    pub what: What,
}

/// What happened, by kind.
#[derive(Clone, Debug, PartialEq)]
pub enum What {
    SyscallFailure(SyscallFailure),
    /// a read or write on a regular file that did less than it asked (not a failure)
    ShortIo(ShortIo),
    Function(FunctionHit),
    NetworkGap(NetworkGap),
    ProcessState(ProcessChange),
}

/// The kinds of events, for counting and naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    SyscallFailure,
    Function,
    NetworkGap,
    ProcessState,
    ShortIo,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::SyscallFailure,
        Kind::Function,
        Kind::NetworkGap,
        Kind::ProcessState,
        Kind::ShortIo,
    ];

    /// The name in JSON and in `inspect`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::SyscallFailure => "syscall_failure",
            Kind::Function => "function",
            Kind::NetworkGap => "network_gap",
            Kind::ProcessState => "process_state",
            Kind::ShortIo => "short_io",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SyscallFailure {
    pub syscall: String,
    /// raw return value
    pub ret: i64,
    /// errno name ("ENOENT"); None when the call did not return a negative value
    pub errno: Option<String>,
    /// the fd argument (for *at calls the dirfd)
    pub fd: Option<i32>,
    /// the path argument, or the file the fd was opened from, made absolute where possible
    pub path: Option<String>,
    /// the socket's peer, or the address argument of connect/bind
    pub peer: Option<SocketAddr>,
}

/// A read/write/pread64/pwrite64 on a regular file that returned fewer bytes than it asked
/// for: a write on a full disk, a read that stopped before the end of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct ShortIo {
    pub syscall: String,
    pub fd: i32,
    /// the file the fd was opened from, when the dump knows it
    pub path: Option<String>,
    /// bytes the call asked for
    pub requested: u64,
    /// bytes it read or wrote (its return value)
    pub done: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FunctionHit {
    /// None when the dump does not know the function id
    pub binary: Option<String>,
    pub function: Option<String>,
}

impl FunctionHit {
    /// "BINARY:SYMBOL", when both are known.
    pub fn spec(&self) -> Option<String> {
        Some(format!("{}:{}", self.binary.as_ref()?, self.function.as_ref()?))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct NetworkGap {
    pub local: Option<SocketAddr>,
    pub peer: Option<SocketAddr>,
    pub duration_ms: u64,
    /// packets received on the connection before the gap
    pub packets: u64,
    /// still silent when the dump was taken, or closed while silent
    pub ongoing: bool,
    /// the connection's busy stretch before the gap (since its previous gap, or its start):
    /// how long it lasted and the packets it carried (at most 65535); 0 and 0 = unknown (a
    /// dump written before they were recorded)
    pub busy_ms: u64,
    pub busy_packets: u64,
    /// the IP protocol: 6 for a TCP connection; for a datagram flow (a UDP socket's traffic
    /// with one peer, or a raw IP socket's) 17 for UDP, else the raw socket's
    pub protocol: u16,
    /// datagram flows: datagrams the process sent to the peer during the silence (it kept
    /// talking while it heard nothing); None for TCP
    pub sent: Option<u64>,
    /// datagram flows: datagrams it sent to the peer before the silence (0: it only listens
    /// to that peer); None for TCP
    pub sent_before: Option<u64>,
}

impl NetworkGap {
    /// A datagram flow's silence, not a TCP connection's.
    pub fn is_datagram(&self) -> bool {
        self.protocol != crate::addr::IPPROTO_TCP
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProcessChange {
    pub state: State,
    /// killed: the fatal signal; paused: the stop signal, if known
    pub signal: Option<u32>,
    /// who sent the signal, when a process did
    pub sender: Option<Sender>,
    /// a pause still going on when the dump was taken
    pub ongoing: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum State {
    Paused { cause: PauseCause, duration_ms: u64 },
    Exited { code: i32 },
    Killed { core_dumped: bool },
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::Paused { .. } => "paused",
            State::Exited { .. } => "exited",
            State::Killed { .. } => "killed",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sender {
    pub pid: u32,
    pub comm: Option<String>,
}

impl Event {
    pub fn kind(&self) -> Kind {
        match self.what {
            What::SyscallFailure(_) => Kind::SyscallFailure,
            What::ShortIo(_) => Kind::ShortIo,
            What::Function(_) => Kind::Function,
            What::NetworkGap(_) => Kind::NetworkGap,
            What::ProcessState(_) => Kind::ProcessState,
        }
    }

    /// One line saying what happened (the text view of `inspect` and of reports).
    pub fn describe(&self) -> String {
        fn or_dash<T: ToString>(v: &Option<T>) -> String {
            v.as_ref().map(|x| x.to_string()).unwrap_or_else(|| "-".into())
        }
        match &self.what {
            What::SyscallFailure(s) => {
                let target = s
                    .path
                    .clone()
                    .or_else(|| s.peer.map(|p| p.to_string()))
                    .unwrap_or_default();
                let fd = s.fd.map(|f| format!("fd {f} ")).unwrap_or_default();
                format!("{}({fd}{target}) = {} {}", s.syscall, s.ret, or_dash(&s.errno))
            }
            What::ShortIo(s) => format!(
                "{}(fd {} {}) = {} of {} (short)",
                s.syscall,
                s.fd,
                s.path.as_deref().unwrap_or("-"),
                s.done,
                s.requested
            ),
            What::Function(f) => format!("{} in {}", or_dash(&f.function), or_dash(&f.binary)),
            What::NetworkGap(g) => format!(
                "{}{} -> {} silent {} ms after {} packets{}{}",
                if g.is_datagram() {
                    format!("{} ", crate::addr::protocol_name(g.protocol))
                } else {
                    String::new()
                },
                or_dash(&g.local),
                or_dash(&g.peer),
                g.duration_ms,
                g.packets,
                g.sent
                    .map(|n| format!(", {n} sent meanwhile"))
                    .unwrap_or_default(),
                if g.ongoing { " (still silent at dump)" } else { "" }
            ),
            What::ProcessState(p) => {
                let mut s = p.state.name().to_string();
                match p.state {
                    State::Paused { cause, duration_ms } => {
                        s += &format!(" ({}) {duration_ms} ms", cause.name())
                    }
                    State::Exited { code } => s += &format!(" with code {code}"),
                    State::Killed { .. } => {}
                }
                if let Some(sig) = p.signal {
                    s += &format!(" by {}", signal_name(sig));
                }
                if let Some(sender) = &p.sender {
                    s += &format!(
                        " from pid {} ({})",
                        sender.pid,
                        sender.comm.clone().unwrap_or_default()
                    );
                }
                if p.ongoing {
                    s += " (ongoing at dump)";
                }
                s
            }
        }
    }
}

/// The JSON view of an event: the schema of `tracerd inspect --json` (docs/dump-format.md). Every key is
/// present; values that do not apply or are unknown are null.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EventJson {
    pub ts_ns: u64,
    pub realtime_ns: u64,
    pub host: String,
    pub kind: &'static str,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub syscall: Option<String>,
    pub errno: Option<String>,
    pub ret: Option<i64>,
    /// short reads and writes: the byte count asked for (`ret` is what was done)
    pub requested: Option<u64>,
    pub fd: Option<i32>,
    pub path: Option<String>,
    pub binary: Option<String>,
    pub function: Option<String>,
    pub src: Option<String>,
    pub dst: Option<String>,
    pub duration_ms: Option<u64>,
    pub packets: Option<u64>,
    /// network gaps: the busy stretch before the silence, ms and packets
    pub busy_ms: Option<u64>,
    pub busy_packets: Option<u64>,
    /// network gaps: the IP protocol by name (`tcp`, `udp`, `vrrp`, ..., `ip-N`)
    pub protocol: Option<String>,
    /// datagram flows' gaps: datagrams sent to the peer during the silence, and before it
    pub sent: Option<u64>,
    pub sent_before: Option<u64>,
    pub state: Option<&'static str>,
    pub cause: Option<&'static str>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub sender_pid: Option<u32>,
    pub sender_comm: Option<String>,
    pub core_dumped: Option<bool>,
    pub ongoing: Option<bool>,
    /// the process's cgroup and container, from the dump's process table (null when not known)
    pub cgroup: Option<String>,
    pub container_runtime: Option<String>,
    pub container_id: Option<String>,
    pub pod_uid: Option<String>,
    /// the pid as the process's own pid namespace sees it, when that is not the host's
    pub ns_pid: Option<u32>,
}

impl EventJson {
    /// Adds what the process table says about the event's process.
    pub fn with_process(mut self, p: Option<&crate::process::ProcInfo>) -> EventJson {
        if let Some(p) = p {
            self.cgroup = p.cgroup.clone();
            self.container_runtime = p.container_runtime.clone();
            self.container_id = p.container_id.clone();
            self.pod_uid = p.pod_uid.clone();
            self.ns_pid = p.ns_pid;
        }
        self
    }
}

impl From<&Event> for EventJson {
    fn from(e: &Event) -> EventJson {
        let mut j = EventJson {
            ts_ns: e.ts_ns,
            realtime_ns: e.realtime_ns,
            host: e.host.to_string(),
            kind: e.kind().name(),
            pid: e.pid,
            tid: e.tid,
            comm: e.comm.to_string(),
            syscall: None,
            errno: None,
            ret: None,
            requested: None,
            fd: None,
            path: None,
            binary: None,
            function: None,
            src: None,
            dst: None,
            duration_ms: None,
            packets: None,
            busy_ms: None,
            busy_packets: None,
            protocol: None,
            sent: None,
            sent_before: None,
            state: None,
            cause: None,
            exit_code: None,
            signal: None,
            sender_pid: None,
            sender_comm: None,
            core_dumped: None,
            ongoing: None,
            cgroup: None,
            container_runtime: None,
            container_id: None,
            pod_uid: None,
            ns_pid: None,
        };
        match &e.what {
            What::SyscallFailure(s) => {
                j.syscall = Some(s.syscall.clone());
                j.ret = Some(s.ret);
                j.errno = s.errno.clone();
                j.fd = s.fd;
                j.path = s.path.clone();
                j.dst = s.peer.map(|p| p.to_string());
            }
            What::ShortIo(s) => {
                j.syscall = Some(s.syscall.clone());
                j.ret = Some(s.done as i64);
                j.requested = Some(s.requested);
                j.fd = Some(s.fd);
                j.path = s.path.clone();
            }
            What::Function(f) => {
                j.binary = f.binary.clone();
                j.function = f.function.clone();
            }
            What::NetworkGap(g) => {
                j.src = g.local.map(|a| a.to_string());
                j.dst = g.peer.map(|a| a.to_string());
                j.duration_ms = Some(g.duration_ms);
                j.packets = Some(g.packets);
                j.busy_ms = Some(g.busy_ms);
                j.busy_packets = Some(g.busy_packets);
                j.protocol = Some(crate::addr::protocol_name(g.protocol));
                j.sent = g.sent;
                j.sent_before = g.sent_before;
                j.ongoing = Some(g.ongoing);
            }
            What::ProcessState(p) => {
                j.state = Some(p.state.name());
                j.ongoing = Some(p.ongoing);
                match p.state {
                    State::Paused { cause, duration_ms } => {
                        j.duration_ms = Some(duration_ms);
                        j.cause = Some(cause.name());
                    }
                    State::Exited { code } => j.exit_code = Some(code),
                    State::Killed { core_dumped } => j.core_dumped = Some(core_dumped),
                }
                j.signal = p.signal.map(signal_name);
                if let Some(s) = &p.sender {
                    j.sender_pid = Some(s.pid);
                    j.sender_comm = s.comm.clone();
                }
            }
        }
        j
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        EventJson::from(self).serialize(s)
    }
}
