//! Taking a dump of a live engine: gathers the window, the intervals still open (silent
//! connections and datagram flows, paused threads), the host description, the process and open-file tables and
//! every loss counter, and hands them to the dump writer.
use std::path::{Path, PathBuf};

use anyhow::Result;

use tracedump::abi::{comm_bytes, ProcessState};
use tracedump::dump::{
    write_dump, ClockPair, Counters, DumpContents, DumpMeta, Interface, TriggerInfo, FORMAT_VERSION,
};
use tracedump::record::{Payload, Record};

use crate::config::Config;
use crate::engine::Engine;
use crate::recorder::{busy_ms, Recorder};
use tracedump::redact::{redact_paths, Redactor};

/// Gaps and pauses that have lasted past their threshold and are still going on.
fn ongoing_records(
    engine: &Engine,
    rec: &mut Recorder,
    config: &Config,
    now_boot: u64,
) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    let gap_ns = config.gap_ms * 1_000_000;
    for c in engine.connections()? {
        if now_boot.saturating_sub(c.last_ns) <= gap_ns && !config.dump_every_connection {
            continue;
        }
        let endpoints = rec.endpoints_blob(&c.local, &c.peer, None);
        out.push(Record {
            ts_ns: c.last_ns,
            pid: c.pid,
            tid: c.pid,
            comm: comm_bytes(&c.comm),
            payload: Payload::NetworkGap {
                gap_ns: now_boot - c.last_ns,
                packets: c.packets,
                endpoints,
                ongoing: true,
                busy_ms: busy_ms(c.last_ns.saturating_sub(c.busy_ns)),
                busy_packets: c.busy_packets.min(u16::MAX as u32) as u16,
            },
        });
    }
    out.extend(crate::flows::ongoing_silences(
        engine,
        rec,
        config.gap_ms,
        config.dump_every_connection,
        now_boot,
    )?);
    let pause_ns = config.pause_ms * 1_000_000;
    for (tid, p) in engine.pauses()? {
        if now_boot.saturating_sub(p.start_ns) < pause_ns {
            continue;
        }
        out.push(Record {
            ts_ns: p.start_ns,
            pid: p.tgid,
            tid,
            comm: comm_bytes(&p.comm),
            payload: Payload::ProcessState {
                state: ProcessState::Paused as u8,
                cause: p.cause as u8,
                signal: 0,
                core_dumped: false,
                ongoing: true,
                exit_code: 0,
                sender_pid: 0,
                duration_ns: now_boot - p.start_ns,
                sender_comm: Default::default(),
            },
        });
    }
    Ok(out)
}

fn interfaces() -> Vec<Interface> {
    let mut out: Vec<Interface> = Vec::new();
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return out;
    };
    for a in addrs {
        let Some(addr) = a.address else { continue };
        let text = if let Some(v4) = addr.as_sockaddr_in() {
            v4.ip().to_string()
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            v6.ip().to_string()
        } else {
            continue;
        };
        match out.iter_mut().find(|i| i.name == a.interface_name) {
            Some(i) => i.addresses.push(text),
            None => out.push(Interface {
                name: a.interface_name.clone(),
                addresses: vec![text],
            }),
        }
    }
    out
}

fn host_meta() -> (String, String, String) {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .to_string();
    let kernel = nix::sys::utsname::uname()
        .map(|u| {
            format!(
                "{} {} {}",
                u.release().to_string_lossy(),
                u.version().to_string_lossy(),
                u.machine().to_string_lossy()
            )
        })
        .unwrap_or_default();
    (host, boot_id, kernel)
}

/// A file name that sorts by time and does not collide within one daemon.
pub fn dump_file_name(host: &str, realtime_ns: u64, seq: u64) -> String {
    let secs = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(realtime_ns);
    let stamp = humantime::format_rfc3339_seconds(secs)
        .to_string()
        .replace([':', '-'], "");
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("tracerd-{host}-{stamp}-{}-{seq}.tdump", std::process::id())
}

/// Writes the current window of `engine`/`rec` into `dir`; returns the file's path.
pub fn take_dump(
    engine: &Engine,
    rec: &mut Recorder,
    config: &Config,
    dir: &Path,
    seq: u64,
) -> Result<PathBuf> {
    take_dump_with(engine, rec, config, dir, seq, None)
}

/// Per process, the directories of the files its failed calls and short writes in `records`
/// named (a path argument, a relative one against its cwd, or the file behind its fd), each
/// once: where the environment worker looks up their filesystems.
fn touched_dirs<'r>(
    records: impl Iterator<Item = &'r Record>,
    open_files: &[tracedump::dump::OpenFile],
    blobs: &tracedump::record::BlobArena,
    processes: &[tracedump::process::ProcInfo],
) -> std::collections::HashMap<u32, Vec<String>> {
    let cwd_of: std::collections::HashMap<u32, &str> = processes
        .iter()
        .filter_map(|p| Some((p.pid, p.cwd.as_deref()?)))
        .collect();
    let by_open: std::collections::HashMap<u64, &str> =
        open_files.iter().map(|o| (o.open_id, o.path.as_str())).collect();
    let mut touched: std::collections::HashMap<u32, Vec<String>> = Default::default();
    for r in records {
        let Payload::SyscallFailure { blob, open_id, .. } = r.payload else {
            continue;
        };
        let named = match (by_open.get(&open_id), blob.is_none()) {
            (Some(path), _) => Some(path.to_string()),
            (None, false) => blobs.get(blob).map(|b| String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        };
        let absolute = named.and_then(|p| match p.starts_with('/') {
            true => Some(p),
            false => cwd_of
                .get(&r.pid)
                .map(|cwd| format!("{}/{p}", cwd.trim_end_matches('/'))),
        });
        let Some(dir) = absolute.and_then(|p| Path::new(&p).parent().map(|d| d.display().to_string())) else {
            continue;
        };
        let dirs = touched.entry(r.pid).or_default();
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    touched
}

/// `take_dump`, recording why the dump wrote itself.
pub fn take_dump_with(
    engine: &Engine,
    rec: &mut Recorder,
    config: &Config,
    dir: &Path,
    seq: u64,
    trigger: Option<TriggerInfo>,
) -> Result<PathBuf> {
    let clock = ClockPair::now();
    let ongoing = ongoing_records(engine, rec, config, clock.boottime_ns)?;
    let open_files: Vec<_> = engine.open_files()?.into_values().collect();
    let known_opens: std::collections::HashSet<u64> = open_files.iter().map(|o| o.open_id).collect();
    let (host, boot_id, kernel) = host_meta();
    let mut counters = Counters {
        kernel: engine.kernel_counters()?,
        recorder: rec.counters(),
        uprobe_attach_failed: engine.uprobe_attach_failed(),
        ..Counters::default()
    };
    let mut blobs = rec.blobs.live_bytes();
    for r in rec.ring.iter().chain(ongoing.iter()) {
        let (blob, open_id) = match r.payload {
            Payload::SyscallFailure { blob, open_id, .. } => (blob, open_id),
            Payload::NetworkGap { endpoints, .. } => (endpoints, 0),
            Payload::ProcessState { sender_comm, .. } => (sender_comm, 0),
            Payload::Function { .. } => (Default::default(), 0),
        };
        if !blob.is_none() && rec.blobs.get(blob).is_none() {
            counters.blobs_lost += 1;
        }
        if open_id != 0 && !known_opens.contains(&open_id) {
            counters.open_files_unresolved += 1;
        }
    }
    // the config was validated at start, so its rules compile
    let redactor = Redactor::new(&config.redact, "redact").unwrap_or_default();
    let moved = redact_paths(&redactor, rec.ring.iter().chain(ongoing.iter()), &mut blobs);
    let mut processes = rec.procs.snapshot();
    let touched = touched_dirs(
        rec.ring.iter().chain(ongoing.iter()),
        &open_files,
        &rec.blobs,
        &processes,
    );
    rec.environments.fill(&mut processes, touched);
    processes.iter_mut().for_each(|p| redactor.process(p));
    let mut open_files = open_files;
    open_files
        .iter_mut()
        .for_each(|o| redactor.apply_in_place(&mut o.path));
    let mut trigger = trigger;
    if let Some(t) = &mut trigger {
        redactor.apply_in_place(&mut t.event);
    }
    let meta = DumpMeta {
        format: "tracerd-dump".into(),
        version: FORMAT_VERSION,
        tracerd_version: env!("CARGO_PKG_VERSION").into(),
        host: host.clone(),
        boot_id,
        kernel,
        clock,
        interfaces: interfaces(),
        config: serde_json::to_value(config)?,
        counters,
        functions: engine.functions().to_vec(),
        processes,
        open_files,
        event_count: (rec.ring.len() + ongoing.len()) as u64,
        function_calls: engine.function_calls()?,
        unattached_functions: engine.unattached_functions().to_vec(),
        detached_functions: engine.detached_functions().to_vec(),
        removed_functions: engine.removed_functions().to_vec(),
        syscall_counts: engine.syscall_counts()?,
        trigger,
        flows: crate::flows::flow_table(engine)?,
    };
    let ring = &rec.ring;
    let records = (0..ring.len() + ongoing.len()).map(|i| {
        let r = ring.get(i).unwrap_or_else(|| &ongoing[i - ring.len()]);
        moved.apply(*r)
    });
    let name = dump_file_name(&host, clock.realtime_ns, seq);
    write_dump(dir, &name, DumpContents { meta, records, blobs })
}
