//! Syscall faults: one thread per launched node process tree answers its seccomp
//! notifications. A notified call fails only when the current fault is a syscall fault of
//! this node whose context is complete (read from the injector's state, which the node's
//! own thread advanced before making the call), the syscall and path match, and it is the
//! Nth such call; every other call continues untouched.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;
use libbpf_rs::MapHandle;
use tracedump::syscalls::{syscall_arg_kind, ArgKind};

use super::injector::{advance_past, boottime_ns, read_state};
use super::seccomp::{fd_path, read_string, Listener, Notification};
use crate::model::plan::{FaultPlan, Planned};

/// A syscall fault the supervisor injected.
#[derive(Clone, Debug)]
pub struct SyscallFired {
    pub fault: usize,
    pub ts_ns: u64,
    /// the process (thread group) of the thread that made the call
    pub pid: u32,
    pub tid: u32,
    pub path: Option<String>,
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

/// What all supervisor threads of a run share.
pub struct Shared {
    pub plan: FaultPlan,
    /// `path` globs with placeholders expanded
    pub patterns: Vec<Option<glob::Pattern>>,
    pub state: MapHandle,
    /// matching calls counted per fault, across restarts of its node
    pub counts: Mutex<Vec<u32>>,
    pub fired: Sender<SyscallFired>,
    pub stop: AtomicBool,
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

/// Decides one notification: Some(errno) to fail it.
fn decide(shared: &Shared, node: usize, n: &Notification) -> Option<(usize, i32, Option<String>)> {
    let (index, seen) = read_state(&shared.state).ok()?;
    let f = shared.plan.faults.get(index)?;
    let Planned::Syscall { nr, errno, nth, .. } = f.action else {
        return None;
    };
    if f.node != node || nr != n.nr || seen as usize != f.context().after_functions.len() {
        return None;
    }
    let path = call_path(n);
    if let Some(pattern) = &shared.patterns[index] {
        if !path.as_deref().is_some_and(|p| pattern.matches(p)) {
            return None;
        }
    }
    let mut counts = shared.counts.lock().unwrap_or_else(|e| e.into_inner());
    counts[index] += 1;
    if counts[index] != nth {
        return None;
    }
    Some((index, errno, path))
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
            Some((index, errno, path)) if listener.is_valid(n.id) => {
                let ts_ns = boottime_ns();
                // read while the caller still waits for the answer
                let pid = tgid_of(n.tid);
                if listener.fail(n.id, errno).is_ok() {
                    let _ = advance_past(&shared.state, index);
                    let _ = shared.fired.send(SyscallFired {
                        fault: index,
                        ts_ns,
                        pid,
                        tid: n.tid,
                        path,
                    });
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
