//! `tracerd inspect`: a dump as a readable summary and event list, or as JSON lines.
use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;

use tracedump::dump::{Dump, DumpMeta};
use tracedump::event::{EventJson, Kind};
use tracedump::process::ProcInfo;

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
         syscall counters full {}, configuration opens {} and environment messages {} lost, \
         connections {} and datagram flows {} unwatched (tables full)",
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
        c.kernel.syscall_counts_full,
        c.kernel.buffer_full_config,
        c.recorder.environment_lost,
        c.kernel.connections_full,
        c.kernel.flows_full
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
    print_containers(&m.processes, out)?;
    print_environments(&m.processes, out)?;
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
    let procs = by_pid(&dump.meta.processes);
    for e in dump.events() {
        let json = EventJson::from(&e).with_process(procs.get(&e.pid).copied());
        serde_json::to_writer(&mut *out, &json)?;
        out.write_all(b"\n")?;
    }
    // then one line per process with an environment, the whole struct
    for p in &dump.meta.processes {
        if let Some(env) = &p.environment {
            let line = serde_json::json!({
                "kind": "environment",
                "host": dump.meta.host,
                "pid": p.pid,
                "comm": p.comm,
                "environment": env,
            });
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// The process table by pid; the last entry of a pid is its latest process.
fn by_pid(procs: &[ProcInfo]) -> HashMap<u32, &ProcInfo> {
    procs.iter().map(|p| (p.pid, p)).collect()
}

/// One line per process with an environment: "  4312 redis-server  exe /usr/bin/redis-server
/// build 1a2b…  14 libraries  config /etc/redis/redis.conf (argument 1), /etc/hosts (etc)".
fn print_environments(procs: &[ProcInfo], out: &mut impl Write) -> Result<()> {
    let with: Vec<&ProcInfo> = procs.iter().filter(|p| p.environment.is_some()).collect();
    if with.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "environments (inspect --json has them whole): {}",
        with.len()
    )?;
    for p in with {
        let Some(env) = &p.environment else { continue };
        writeln!(out, "  {:>7} {}  {}", p.pid, p.comm, environment_summary(env))?;
    }
    Ok(())
}

/// The executable and its build id, the number of libraries, the configuration files.
pub fn environment_summary(env: &tracedump::environment::ProcEnvironment) -> String {
    let mut line = match &env.executable {
        Some(exe) => format!(
            "exe {} build {}",
            exe.path,
            exe.build_id.as_deref().unwrap_or("none")
        ),
        None => "exe unknown".to_string(),
    };
    line += &format!("  {} libraries", env.libraries.len());
    let configs: Vec<String> = env
        .config_files
        .iter()
        .map(|c| match c.argument {
            Some(i) => format!("{} ({} {i})", c.file.path, c.source),
            None => format!("{} ({})", c.file.path, c.source),
        })
        .collect();
    if !configs.is_empty() {
        line += &format!("  config {}", configs.join(", "));
    }
    if env.dropped_files > 0 {
        line += &format!("  ({} files over the bound)", env.dropped_files);
    }
    line
}

/// One line per process in a container or a pid namespace of its own:
/// "  4312 (pid 1 inside) redis-server  docker 3f2a1b0c9d8e  pod <uid>  cgroup /system.slice/...".
fn print_containers(procs: &[ProcInfo], out: &mut impl Write) -> Result<()> {
    let contained: Vec<&ProcInfo> = procs
        .iter()
        .filter(|p| p.container_id.is_some() || p.pod_uid.is_some() || p.ns_pid.is_some())
        .collect();
    if contained.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "processes in containers or pid namespaces: {}",
        contained.len()
    )?;
    for p in contained {
        let mut line = format!("  {:>7}", p.pid);
        if let Some(ns_pid) = p.ns_pid {
            line += &format!(" (pid {ns_pid} inside)");
        }
        line += &format!(" {}", p.comm);
        if let (Some(rt), Some(id)) = (&p.container_runtime, &p.container_id) {
            line += &format!("  {rt} {id}");
        } else if let Some(id) = &p.container_id {
            line += &format!("  container {id}");
        }
        if let Some(pod) = &p.pod_uid {
            line += &format!("  pod {pod}");
        }
        if let Some(cgroup) = &p.cgroup {
            line += &format!("  cgroup {cgroup}");
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}
