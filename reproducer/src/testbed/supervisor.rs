//! Syscall faults: one thread per launched node process tree answers its seccomp
//! notifications. A notified call is faulted only when the current fault is a syscall fault
//! of this node whose context is complete (read from the injector's state, which the node's
//! own thread advanced before making the call), the syscall and path match, and it is the
//! Nth such call (counted from the node's start, or once every node is ready for a fault
//! `after_ready`): it fails with the errno, or (a short fault) the supervisor writes the
//! first bytes itself and answers with that count. A persistent fault (`until`) then goes
//! on failing every matching call of its node until its end, as a full or dead disk does.
//! Every other call continues untouched.
use std::cell::OnceCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use libbpf_rs::MapHandle;
use tracedump::syscalls::{syscall_arg_kind, ArgKind};

use super::injector::{advance_past, boottime_ns, read_state};
use super::seccomp::{fd_path, read_string, write_part, Listener, Notification};
use crate::model::plan::{FaultPlan, Planned};
use crate::model::schedule::Until;

/// A syscall fault the supervisor injected.
#[derive(Clone, Debug)]
pub struct SyscallFired {
    pub fault: usize,
    pub ts_ns: u64,
    /// the process (thread group) of the thread that made the call
    pub pid: u32,
    pub tid: u32,
    pub path: Option<String>,
    /// a short fault: (bytes written, bytes the call asked for)
    pub short: Option<(u64, u64)>,
}

/// The process a thread belongs to (its Tgid); the thread itself when /proc cannot tell.
/// A notification names the calling thread only.
fn tgid_of(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:").and_then(|v| v.trim().parse().ok()))
        })
        .unwrap_or(tid)
}

/// A persistent fault that fired: it fails every matching call of its node until `until`
/// (None: the end of the run).
struct Persisting {
    fault: usize,
    until: Option<Instant>,
}

/// What all supervisor threads of a run share.
pub struct Shared {
    pub plan: FaultPlan,
    /// `path` globs with placeholders expanded
    pub patterns: Vec<Option<glob::Pattern>>,
    pub state: MapHandle,
    /// matching calls counted per fault, across restarts of its node
    pub counts: Mutex<Vec<u32>>,
    /// per fault: the later calls a persistent fault failed after the one it fired at
    pub failed_after: Mutex<Vec<u32>>,
    persisting: Mutex<Vec<Persisting>>,
    pub fired: Sender<SyscallFired>,
    pub stop: AtomicBool,
    /// every node is ready: faults counted `after_ready` count from now on
    pub ready: AtomicBool,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new(
        plan: FaultPlan,
        patterns: Vec<Option<glob::Pattern>>,
        state: MapHandle,
        fired: Sender<SyscallFired>,
    ) -> Shared {
        let n = plan.len();
        Shared {
            plan,
            patterns,
            state,
            counts: Mutex::new(vec![0; n]),
            failed_after: Mutex::new(vec![0; n]),
            persisting: Mutex::new(Vec::new()),
            fired,
            stop: AtomicBool::new(false),
            ready: AtomicBool::new(false),
        }
    }

    /// Whether fault `index` (a syscall fault) names this call of node `node`; `path` is
    /// read only when the syscall and node match (it costs reads of /proc).
    fn names_call(
        &self,
        index: usize,
        node: usize,
        n: &Notification,
        path: &OnceCell<Option<String>>,
    ) -> bool {
        let f = &self.plan.faults[index];
        let Planned::Syscall { nr, .. } = f.action else {
            return false;
        };
        if f.node != node || nr != n.nr {
            return false;
        }
        match &self.patterns[index] {
            Some(pattern) => path
                .get_or_init(|| call_path(n))
                .as_deref()
                .is_some_and(|p| pattern.matches(p)),
            None => true,
        }
    }

    /// The persistent fault that fails this call, with its errno.
    fn persisting_fault(
        &self,
        node: usize,
        n: &Notification,
        path: &OnceCell<Option<String>>,
    ) -> Option<(usize, i32)> {
        let now = Instant::now();
        let persisting = locked(&self.persisting);
        let p = persisting
            .iter()
            .filter(|p| p.until.is_none_or(|t| now < t))
            .find(|p| self.names_call(p.fault, node, n, path))?;
        match self.plan.faults[p.fault].action {
            Planned::Syscall {
                errno: Some(errno), ..
            } => Some((p.fault, errno)),
            _ => None,
        }
    }

    /// Fault `index` fired: with `until`, it fails every later matching call from now on.
    fn start_persisting(&self, index: usize) {
        if let Planned::Syscall {
            until: Some(until), ..
        } = self.plan.faults[index].action
        {
            let until = match until {
                Until::End => None,
                Until::For(d) => Instant::now().checked_add(d),
            };
            locked(&self.persisting).push(Persisting { fault: index, until });
        }
    }
}

/// The path a notified call names: its path argument (made absolute with the caller's cwd)
/// or the file behind its fd argument.
fn call_path(n: &Notification) -> Option<String> {
    let (kind, index) = syscall_arg_kind(n.nr)?;
    let arg = n.args.get(index as usize).copied()?;
    match kind {
        ArgKind::Path | ArgKind::PathAt => {
            let raw = read_string(n.tid, arg, 4096).ok()?;
            let path = String::from_utf8_lossy(&raw).into_owned();
            if path.starts_with('/') {
                return Some(path);
            }
            let base = if kind == ArgKind::PathAt && n.args[0] as i32 != libc::AT_FDCWD {
                fd_path(n.tid, n.args[0] as i32)?
            } else {
                std::fs::read_link(format!("/proc/{}/cwd", n.tid))
                    .ok()?
                    .display()
                    .to_string()
            };
            Some(format!(
                "{}/{}",
                base.trim_end_matches('/'),
                path.trim_start_matches("./")
            ))
        }
        ArgKind::Fd => fd_path(n.tid, arg as i32),
        ArgKind::Sockaddr => None,
    }
}

/// What to do with one notified call.
enum Answer {
    Allow,
    /// the current fault fires at this call: it fails with `errno`, or (short) the
    /// supervisor writes the first `short` bytes and answers with that count
    Fire {
        fault: usize,
        errno: Option<i32>,
        short: Option<u64>,
        path: Option<String>,
    },
    /// a persistent fault that fired earlier fails it
    Persist {
        fault: usize,
        errno: i32,
    },
}

/// Decides one notification: the current fault first (it counts its matching calls), then
/// the persistent faults that fired before.
fn decide(shared: &Shared, node: usize, n: &Notification) -> Answer {
    let path = OnceCell::new();
    if let Some(answer) = current_fault(shared, node, n, &path) {
        return answer;
    }
    match shared.persisting_fault(node, n, &path) {
        Some((fault, errno)) => Answer::Persist { fault, errno },
        None => Answer::Allow,
    }
}

fn current_fault(
    shared: &Shared,
    node: usize,
    n: &Notification,
    path: &OnceCell<Option<String>>,
) -> Option<Answer> {
    let (index, seen) = read_state(&shared.state).ok()?;
    let f = shared.plan.faults.get(index)?;
    let Planned::Syscall {
        errno, nth, short, ..
    } = f.action
    else {
        return None;
    };
    if seen as usize != f.context().after_functions.len() || !shared.names_call(index, node, n, path) {
        return None;
    }
    // counted among the calls made once every node is ready: start-up's are not its
    if f.context().after_ready && !shared.ready.load(Ordering::SeqCst) {
        return None;
    }
    // a write of at most `short` bytes cannot be cut short: not a matching call
    if short.is_some_and(|bytes| n.args[2] <= bytes) {
        return None;
    }
    let mut counts = locked(&shared.counts);
    counts[index] += 1;
    if counts[index] != nth {
        return None;
    }
    Some(Answer::Fire {
        fault: index,
        errno,
        short,
        path: path.get().cloned().flatten().or_else(|| call_path(n)),
    })
}

/// Answers the call the current fault fires at; the short write's (done, asked) when it was
/// one, None when the call could not be answered as planned.
fn fire(
    listener: &Listener,
    n: &Notification,
    pid: u32,
    errno: Option<i32>,
    short: Option<u64>,
) -> Option<Option<(u64, u64)>> {
    match (short, errno) {
        (Some(bytes), _) => match write_part(n, pid, bytes as usize) {
            Ok(done) => {
                listener.succeed(n.id, done as i64).ok()?;
                Some(Some((done as u64, n.args[2])))
            }
            Err(e) => {
                log::warn!("short write of {bytes} bytes for pid {pid} failed ({e}); the call runs whole");
                let _ = listener.allow(n.id);
                None
            }
        },
        (None, Some(errno)) => listener.fail(n.id, errno).ok().map(|()| None),
        (None, None) => None,
    }
}

fn serve(shared: &Shared, node: usize, listener: &Listener) {
    while !shared.stop.load(Ordering::Relaxed) {
        let n = match listener.recv(Duration::from_millis(50)) {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(e) => {
                log::debug!("seccomp listener of node {node} closed: {e}");
                return;
            }
        };
        match decide(shared, node, &n) {
            Answer::Fire {
                fault,
                errno,
                short,
                path,
            } if listener.is_valid(n.id) => {
                let ts_ns = boottime_ns();
                // read while the caller still waits for the answer
                let pid = tgid_of(n.tid);
                if let Some(short) = fire(listener, &n, pid, errno, short) {
                    shared.start_persisting(fault);
                    let _ = advance_past(&shared.state, fault);
                    let _ = shared.fired.send(SyscallFired {
                        fault,
                        ts_ns,
                        pid,
                        tid: n.tid,
                        path,
                        short,
                    });
                }
            }
            Answer::Persist { fault, errno } if listener.is_valid(n.id) => {
                if listener.fail(n.id, errno).is_ok() {
                    locked(&shared.failed_after)[fault] += 1;
                }
            }
            _ => {
                let _ = listener.allow(n.id);
            }
        }
    }
}

/// Receives the seccomp listener of one launch of node `node` on `channel`, then serves it
/// until stopped or until every process under it is gone. Started before the node: the
/// node's very first notified call (even its execve) must find someone answering.
pub fn spawn(
    shared: Arc<Shared>,
    node: usize,
    channel: std::os::unix::net::UnixStream,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("seccomp-{node}"))
        .spawn(move || match super::seccomp::receive_listener(&channel) {
            Ok(listener) => serve(&shared, node, &listener),
            Err(e) => log::warn!("node {node}: no seccomp listener arrived: {e}"),
        })
}
