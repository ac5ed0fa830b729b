//! `tracerd inspect`: a dump as a readable summary and event list, or as JSON lines.
use std::io::Write;

use anyhow::Result;

use tracedump::dump::{Dump, DumpMeta};
use tracedump::event::Kind;

fn wall_time(realtime_ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(realtime_ns);
    humantime::format_rfc3339_micros(t).to_string()
}

/// "counted: ..." for dumps that carry call counts; None for dumps without them.
fn counted_line(m: &DumpMeta) -> Option<String> {
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
    writeln!(
        out,
        "tracerd dump (format {}) from {} ({}), kernel {}",
        m.version, m.host, m.boot_id, m.kernel
    )?;
    writeln!(
        out,
        "taken at {} by tracerd {}",
        wall_time(m.clock.realtime_ns),
        m.tracerd_version
    )?;
    let counts: Vec<String> = Kind::ALL
        .iter()
        .map(|&k| format!("{} {}", k.name(), events.iter().filter(|e| e.kind() == k).count()))
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
        c.unresolved_fds(),
        c.uprobe_attach_failed,
        c.recorder.malformed,
        c.kernel.syscall_counts_full
    )?;
    if let Some(line) = counted_line(m) {
        writeln!(out, "{line}")?;
    }
    writeln!(
        out,
        "processes: {}, open files known: {}",
        m.processes.len(),
        m.open_files.len()
    )?;
    for e in &events {
        writeln!(
            out,
            "{}  {:>7}/{:<7} {:<15} {:<15} {}",
            wall_time(e.realtime_ns),
            e.pid,
            e.tid,
            e.comm,
            e.kind().name(),
            e.describe()
        )?;
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
