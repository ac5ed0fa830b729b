//! `tracerd inspect`: a dump as a readable summary and event list, or as JSON lines.
use std::io::Write;

use anyhow::Result;

use crate::dump::{Dump, Event, KIND_NAMES};

fn wall_time(realtime_ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(realtime_ns);
    humantime::format_rfc3339_micros(t).to_string()
}

fn or_dash<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// One line describing what happened.
pub fn describe(e: &Event) -> String {
    match e.kind.as_str() {
        "syscall_failure" => {
            let target = e.path.clone().or_else(|| e.dst.clone()).unwrap_or_default();
            let fd = e.fd.map(|f| format!("fd {f} ")).unwrap_or_default();
            format!("{}({fd}{target}) = {} {}", or_dash(&e.syscall), or_dash(&e.ret), or_dash(&e.errno))
        }
        "function" => format!("{} in {}", or_dash(&e.function), or_dash(&e.binary)),
        "network_gap" => format!(
            "{} -> {} silent {} ms after {} packets{}",
            or_dash(&e.src),
            or_dash(&e.dst),
            or_dash(&e.duration_ms),
            or_dash(&e.packets),
            if e.ongoing == Some(true) { " (still silent at dump)" } else { "" }
        ),
        _ => {
            let mut s = or_dash(&e.state);
            if let Some(c) = &e.cause {
                s += &format!(" ({c}) {} ms", or_dash(&e.duration_ms));
            }
            if let Some(code) = e.exit_code {
                s += &format!(" with code {code}");
            }
            if let Some(sig) = &e.signal {
                s += &format!(" by {sig}");
            }
            if let Some(pid) = e.sender_pid {
                s += &format!(" from pid {pid} ({})", e.sender_comm.clone().unwrap_or_default());
            }
            if e.ongoing == Some(true) {
                s += " (ongoing at dump)";
            }
            s
        }
    }
}

/// "counted: ..." for dumps that carry call counts; None for dumps without them.
fn counted_line(m: &crate::dump::DumpMeta) -> Option<String> {
    if m.function_calls.is_empty() && m.syscall_counts.is_empty() {
        return None;
    }
    let calls: u64 = m.function_calls.iter().sum();
    let called = m.function_calls.iter().filter(|&&c| c > 0).count();
    let syscalls: u64 = m.syscall_counts.iter().map(|c| c.count).sum();
    Some(format!(
        "counted: {calls} calls of {called}/{} functions, {syscalls} syscalls in {} (process, syscall) pairs (inspect --meta lists them)",
        m.function_calls.len(),
        m.syscall_counts.len()
    ))
}

pub fn print_text(dump: &Dump, out: &mut impl Write) -> Result<()> {
    let m = &dump.meta;
    let events = dump.events();
    writeln!(out, "tracerd dump (format {}) from {} ({}), kernel {}", m.version, m.host, m.boot_id, m.kernel)?;
    writeln!(out, "taken at {} by tracerd {}", wall_time(m.clock.realtime_ns), m.tracerd_version)?;
    let counts: Vec<String> = KIND_NAMES
        .iter()
        .map(|k| format!("{k} {}", events.iter().filter(|e| e.kind == *k).count()))
        .collect();
    writeln!(out, "events: {} ({})", events.len(), counts.join(", "))?;
    let c = &m.counters;
    writeln!(
        out,
        "lost: kernel buffer full {} / {} / {} / {} / {} (syscall/function/network/process/start), overwritten in window {}, \
         paths unreadable {}, blobs lost {}, unresolved fds {}, uprobe attach failures {}, malformed {}, \
         syscall counters full {}",
        c.kernel.buffer_full_syscall,
        c.kernel.buffer_full_function,
        c.kernel.buffer_full_network,
        c.kernel.buffer_full_process,
        c.kernel.buffer_full_process_start,
        c.recorder.ring_overwritten,
        c.kernel.path_unreadable,
        c.blobs_lost,
        c.open_files_unresolved,
        c.uprobe_attach_failed,
        c.recorder.malformed,
        c.kernel.syscall_counts_full
    )?;
    if let Some(line) = counted_line(m) {
        writeln!(out, "{line}")?;
    }
    writeln!(out, "processes: {}, open files known: {}", m.processes.len(), m.open_files.len())?;
    for e in &events {
        writeln!(out, "{}  {:>7}/{:<7} {:<15} {:<15} {}", wall_time(e.realtime_ns), e.pid, e.tid, e.comm, e.kind, describe(e))?;
    }
    Ok(())
}

pub fn print_json(dump: &Dump, out: &mut impl Write) -> Result<()> {
    for e in dump.events() {
        serde_json::to_writer(&mut *out, &e)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
