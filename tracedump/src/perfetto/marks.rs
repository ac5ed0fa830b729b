//! Each event kind as a mark of the trace: its name, category and the arguments Perfetto
//! shows for it.
use super::flows::Flows;
use super::{arg, Mark, Value};
use crate::event::{FunctionHit, NetworkGap, ProcessChange, ShortIo, State, SyscallFailure};
use crate::syscalls::signal_name;

pub(super) fn syscall_mark(track: u64, at_ns: u64, s: &SyscallFailure) -> Mark {
    let mut args = vec![
        arg("syscall", Value::Str(s.syscall.clone())),
        arg("ret", Value::Int(s.ret)),
    ];
    if let Some(errno) = &s.errno {
        args.push(arg("errno", Value::Str(errno.clone())));
    }
    if let Some(fd) = s.fd {
        args.push(arg("fd", Value::Int(fd as i64)));
    }
    if let Some(path) = &s.path {
        args.push(arg("path", Value::Str(path.clone())));
    }
    if let Some(peer) = s.peer {
        args.push(arg("peer", Value::Str(peer.to_string())));
    }
    let result = s.errno.clone().unwrap_or_else(|| s.ret.to_string());
    Mark {
        track,
        at_ns,
        end_ns: None,
        name: format!("{} {result}", s.syscall),
        category: "syscall_failure",
        args,
        flows: Flows::default(),
    }
}

pub(super) fn short_io_mark(track: u64, at_ns: u64, io: &ShortIo) -> Mark {
    let mut args = vec![
        arg("syscall", Value::Str(io.syscall.clone())),
        arg("fd", Value::Int(io.fd as i64)),
        arg("requested", Value::Int(io.requested as i64)),
        arg("done", Value::Int(io.done as i64)),
    ];
    if let Some(path) = &io.path {
        args.push(arg("path", Value::Str(path.clone())));
    }
    Mark {
        track,
        at_ns,
        end_ns: None,
        name: format!("{} short {} of {}", io.syscall, io.done, io.requested),
        category: "short_io",
        args,
        flows: Flows::default(),
    }
}

pub(super) fn function_mark(track: u64, at_ns: u64, f: &FunctionHit) -> Mark {
    let mut args = Vec::new();
    if let Some(function) = &f.function {
        args.push(arg("function", Value::Str(function.clone())));
    }
    if let Some(binary) = &f.binary {
        args.push(arg("binary", Value::Str(binary.clone())));
    }
    Mark {
        track,
        at_ns,
        end_ns: None,
        name: f.function.clone().unwrap_or_else(|| "unknown function".into()),
        category: "function",
        args,
        flows: Flows::default(),
    }
}

pub(super) fn gap_mark(track: u64, at_ns: u64, end_ns: u64, g: &NetworkGap) -> Mark {
    let mut args = Vec::new();
    if let Some(local) = g.local {
        args.push(arg("local", Value::Str(local.to_string())));
    }
    if let Some(peer) = g.peer {
        args.push(arg("peer", Value::Str(peer.to_string())));
    }
    args.push(arg("packets_before", Value::Uint(g.packets)));
    args.push(arg(
        "protocol",
        Value::Str(crate::addr::protocol_name(g.protocol)),
    ));
    if let Some(sent) = g.sent {
        args.push(arg("sent_during", Value::Uint(sent)));
    }
    args.push(arg("ongoing", Value::Bool(g.ongoing)));
    Mark {
        track,
        at_ns,
        end_ns: Some(end_ns),
        name: "network gap".into(),
        category: "network_gap",
        args,
        flows: Flows::default(),
    }
}

/// A pause (a slice: `end_ns` given), an exit or a kill.
pub(super) fn process_mark(track: u64, at_ns: u64, end_ns: Option<u64>, p: &ProcessChange) -> Mark {
    let mut args = Vec::new();
    let name = match p.state {
        State::Paused { cause, .. } => {
            args.push(arg("cause", Value::Str(cause.name().into())));
            args.push(arg("ongoing", Value::Bool(p.ongoing)));
            format!("paused ({})", cause.name())
        }
        State::Exited { code } => {
            args.push(arg("exit_code", Value::Int(code as i64)));
            format!("exited (code {code})")
        }
        State::Killed { core_dumped } => {
            args.push(arg("core_dumped", Value::Bool(core_dumped)));
            match p.signal {
                Some(sig) => format!("killed by {}", signal_name(sig)),
                None => "killed".to_string(),
            }
        }
    };
    if let Some(sig) = p.signal {
        args.push(arg("signal", Value::Str(signal_name(sig))));
    }
    if let Some(sender) = &p.sender {
        args.push(arg("sender_pid", Value::Uint(sender.pid as u64)));
        if let Some(comm) = &sender.comm {
            args.push(arg("sender_comm", Value::Str(comm.clone())));
        }
    }
    Mark {
        track,
        at_ns,
        end_ns,
        name,
        category: "process_state",
        args,
        flows: Flows::default(),
    }
}
