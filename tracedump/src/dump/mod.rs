//! The dump file: its format (version 1, documented in docs/dump-format.md), the one
//! writer (through the atomic writer, mode 0600) and the one reader, which also resolves
//! raw records into typed [`Event`]s.
//!
//! Layout: 8 bytes magic "TRCRDUMP", u32 LE format version, u32 LE reserved (0), then one
//! zstd frame (with checksum) holding sections `tag u32 LE, length u64 LE, payload`:
//! 1 = meta (JSON, `DumpMeta`), 2 = blobs (u64 LE base offset + bytes), 3 = events (u32 LE
//! record size = 64, u64 LE count, records), 0xFFFF_FFFF = end (length 0). Readers skip
//! unknown tags; a file without the end section is truncated.
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::abi::{EventKind, PauseCause, ProcessState};
use crate::addr::{decode_addr, ENCODED_ADDR_LEN};
pub use crate::counters::{Counters, KernelCounters, RecorderCounters};
use crate::event::{
    Event, FunctionHit, NetworkGap, ProcessChange, Sender, ShortIo, State, SyscallFailure, What,
};
pub use crate::process::ProcInfo;
use crate::record::{BlobRef, BlobWindow, Payload, Record};
use crate::syscalls::{errno_name, syscall_name};

pub const MAGIC: &[u8; 8] = b"TRCRDUMP";
pub const FORMAT_VERSION: u32 = 1;
pub const RECORD_SIZE: usize = 64;
const SECTION_META: u32 = 1;
const SECTION_BLOBS: u32 = 2;
const SECTION_EVENTS: u32 = 3;
const SECTION_END: u32 = 0xFFFF_FFFF;
/// Largest section the reader accepts; guards allocations against a corrupt length.
const MAX_SECTION: u64 = 8 << 30;
/// Largest zstd window the reader accepts (8 MiB: compression levels up to 19 stay below).
const MAX_WINDOW_LOG: u32 = 23;

const KIND_SYSCALL: u8 = EventKind::SyscallFailure as u8;
const KIND_FUNCTION: u8 = EventKind::Function as u8;
const KIND_GAP: u8 = EventKind::NetworkGap as u8;
const KIND_PROCESS: u8 = EventKind::ProcessState as u8;
const FLAG_ONGOING: u8 = 1;
const FLAG_CORE: u8 = 2;

/// Simultaneous readings of three clocks, to map event times (CLOCK_BOOTTIME) to wall time.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClockPair {
    pub boottime_ns: u64,
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
}

impl ClockPair {
    pub fn now() -> ClockPair {
        use nix::time::{clock_gettime, ClockId};
        let ns = |c| {
            clock_gettime(c)
                .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
                .unwrap_or(0)
        };
        let b1 = ns(ClockId::CLOCK_BOOTTIME);
        let monotonic_ns = ns(ClockId::CLOCK_MONOTONIC);
        let realtime_ns = ns(ClockId::CLOCK_REALTIME);
        let b2 = ns(ClockId::CLOCK_BOOTTIME);
        ClockPair {
            boottime_ns: b1 + (b2 - b1) / 2,
            monotonic_ns,
            realtime_ns,
        }
    }

    /// Wall-clock time of a CLOCK_BOOTTIME timestamp.
    pub fn realtime_of(&self, boot_ns: u64) -> u64 {
        (self.realtime_ns as i128 + boot_ns as i128 - self.boottime_ns as i128).max(0) as u64
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub addresses: Vec<String>,
}

/// One uprobe target (index in `DumpMeta::functions` = function id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionSpec {
    pub binary: PathBuf,
    pub symbol: String,
}

/// Calls of one syscall by one process, counted in the kernel (config `count_syscalls`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SyscallCount {
    pub pid: u32,
    pub syscall: String,
    pub count: u64,
}

/// One entry of the kernel's open-file table, for resolving fds to paths.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OpenFile {
    pub open_id: u64,
    pub dir_open_id: u64,
    pub tgid: u32,
    pub path: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DumpMeta {
    pub format: String,
    pub version: u32,
    pub tracerd_version: String,
    pub host: String,
    pub boot_id: String,
    pub kernel: String,
    pub clock: ClockPair,
    pub interfaces: Vec<Interface>,
    /// the effective configuration (kept as JSON so that old dumps stay readable)
    pub config: serde_json::Value,
    pub counters: Counters,
    pub functions: Vec<FunctionSpec>,
    pub processes: Vec<ProcInfo>,
    pub open_files: Vec<OpenFile>,
    pub event_count: u64,
    /// calls of each function since tracing started, index = `functions` index (added in
    /// version 1 later: absent in older dumps, read as empty)
    #[serde(default)]
    pub function_calls: Vec<u64>,
    /// `functions` indexes whose uprobe could not be attached (never counted)
    #[serde(default)]
    pub unattached_functions: Vec<usize>,
    /// `functions` indexes detached at `detach_functions_after_calls`: counted up to then
    #[serde(default)]
    pub detached_functions: Vec<usize>,
    /// calls per (process, syscall) since tracing started; empty unless `count_syscalls`
    #[serde(default)]
    pub syscall_counts: Vec<SyscallCount>,
    /// why the dump wrote itself; absent when it was asked for
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerInfo>,
}

/// Why a dump wrote itself (`[triggers]`): absent in dumps that were asked for.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TriggerInfo {
    /// the rule that fired: fatal_signal, nonzero_exit, oom_kill, pause, syscall(...)
    pub rule: String,
    /// the event that fired it (CLOCK_BOOTTIME, process, thread, and what happened)
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub event: String,
    /// triggers of this rule suppressed by its rate limit since it last fired
    pub suppressed_before: u64,
    /// other rules that fired while this dump was settling
    pub joined: Vec<String>,
}

/// A dump as read back.
pub struct Dump {
    pub meta: DumpMeta,
    pub records: Vec<Record>,
    pub blobs: BlobWindow,
}

/// What the writer needs; `records` are written in the order given. An iterator rather than
/// a list: a daemon's window is a million records, and a list of references to them would
/// cost it 8 MiB more at every dump.
pub struct DumpContents<R> {
    pub meta: DumpMeta,
    pub records: R,
    pub blobs: (u64, Vec<u8>),
}

fn encode_record(r: &Record, out: &mut [u8; RECORD_SIZE]) {
    out.fill(0);
    out[0..8].copy_from_slice(&r.ts_ns.to_le_bytes());
    out[8..12].copy_from_slice(&r.pid.to_le_bytes());
    out[12..16].copy_from_slice(&r.tid.to_le_bytes());
    out[16..32].copy_from_slice(&r.comm);
    match r.payload {
        Payload::SyscallFailure {
            nr,
            ret,
            fd,
            open_id,
            blob,
            requested,
        } => {
            out[32] = KIND_SYSCALL;
            out[34..36].copy_from_slice(&nr.to_le_bytes());
            out[36..40].copy_from_slice(&ret.to_le_bytes());
            out[40..44].copy_from_slice(&fd.to_le_bytes());
            out[44..48].copy_from_slice(&requested.to_le_bytes());
            out[48..56].copy_from_slice(&open_id.to_le_bytes());
            out[56..64].copy_from_slice(&blob.raw().to_le_bytes());
        }
        Payload::Function { function_id } => {
            out[32] = KIND_FUNCTION;
            out[48..56].copy_from_slice(&function_id.to_le_bytes());
        }
        Payload::NetworkGap {
            gap_ns,
            packets,
            endpoints,
            ongoing,
        } => {
            out[32] = KIND_GAP;
            out[33] = if ongoing { FLAG_ONGOING } else { 0 };
            out[40..48].copy_from_slice(&gap_ns.to_le_bytes());
            out[48..56].copy_from_slice(&packets.to_le_bytes());
            out[56..64].copy_from_slice(&endpoints.raw().to_le_bytes());
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
            out[32] = KIND_PROCESS;
            out[33] = (if ongoing { FLAG_ONGOING } else { 0 }) | (if core_dumped { FLAG_CORE } else { 0 });
            out[34] = state;
            out[35] = cause;
            out[36..40].copy_from_slice(&exit_code.to_le_bytes());
            out[40..48].copy_from_slice(&duration_ns.to_le_bytes());
            out[48..52].copy_from_slice(&sender_pid.to_le_bytes());
            out[52] = signal;
            out[56..64].copy_from_slice(&sender_comm.raw().to_le_bytes());
        }
    }
}

fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
}
fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().unwrap_or([0; 4]))
}

fn decode_record(b: &[u8]) -> Option<Record> {
    let mut comm = [0u8; 16];
    comm.copy_from_slice(&b[16..32]);
    let ongoing = b[33] & FLAG_ONGOING != 0;
    let payload = match b[32] {
        KIND_SYSCALL => Payload::SyscallFailure {
            nr: u16::from_le_bytes([b[34], b[35]]),
            ret: le_u32(&b[36..40]) as i32,
            fd: le_u32(&b[40..44]) as i32,
            open_id: le_u64(&b[48..56]),
            blob: BlobRef::from_raw(le_u64(&b[56..64])),
            // zero in dumps written before short I/O was recorded: failures only
            requested: le_u32(&b[44..48]),
        },
        KIND_FUNCTION => Payload::Function {
            function_id: le_u64(&b[48..56]),
        },
        KIND_GAP => Payload::NetworkGap {
            gap_ns: le_u64(&b[40..48]),
            packets: le_u64(&b[48..56]),
            endpoints: BlobRef::from_raw(le_u64(&b[56..64])),
            ongoing,
        },
        KIND_PROCESS => Payload::ProcessState {
            state: b[34],
            cause: b[35],
            exit_code: le_u32(&b[36..40]) as i32,
            duration_ns: le_u64(&b[40..48]),
            sender_pid: le_u32(&b[48..52]),
            signal: b[52],
            core_dumped: b[33] & FLAG_CORE != 0,
            ongoing,
            sender_comm: BlobRef::from_raw(le_u64(&b[56..64])),
        },
        _ => return None,
    };
    Some(Record {
        ts_ns: le_u64(&b[0..8]),
        pid: le_u32(&b[8..12]),
        tid: le_u32(&b[12..16]),
        comm,
        payload,
    })
}

fn write_section_header(w: &mut impl Write, tag: u32, len: u64) -> std::io::Result<()> {
    w.write_all(&tag.to_le_bytes())?;
    w.write_all(&len.to_le_bytes())
}

fn write_section(w: &mut impl Write, tag: u32, payload: &[u8]) -> std::io::Result<()> {
    write_section_header(w, tag, payload.len() as u64)?;
    w.write_all(payload)
}

fn write_body<R>(w: impl Write, contents: DumpContents<R>) -> Result<()>
where
    R: IntoIterator<Item = Record>,
    R::IntoIter: ExactSizeIterator,
{
    let mut z = zstd::Encoder::new(w, 3)?;
    z.include_checksum(true)?;
    write_section(&mut z, SECTION_META, &serde_json::to_vec(&contents.meta)?)?;
    let (base, bytes) = &contents.blobs;
    write_section_header(&mut z, SECTION_BLOBS, 8 + bytes.len() as u64)?;
    z.write_all(&base.to_le_bytes())?;
    z.write_all(bytes)?;
    let records = contents.records.into_iter();
    let count = records.len() as u64;
    write_section_header(&mut z, SECTION_EVENTS, 12 + count * RECORD_SIZE as u64)?;
    z.write_all(&(RECORD_SIZE as u32).to_le_bytes())?;
    z.write_all(&count.to_le_bytes())?;
    let mut buf = [0u8; RECORD_SIZE];
    let mut written = 0u64;
    for r in records {
        encode_record(&r, &mut buf);
        z.write_all(&buf)?;
        written += 1;
    }
    // the section's length is already written: a short count would misframe the file
    if written != count {
        bail!("the dump's records iterator gave {written} records, not the {count} it announced");
    }
    write_section(&mut z, SECTION_END, &[])?;
    z.finish()?.flush()?;
    Ok(())
}

/// Writes `contents` as `dir/name` atomically (mode 0600) and returns the final path.
pub fn write_dump<R>(dir: &Path, name: &str, contents: DumpContents<R>) -> Result<PathBuf>
where
    R: IntoIterator<Item = Record>,
    R::IntoIter: ExactSizeIterator,
{
    let final_path = dir.join(name);
    crate::atomic::write_with(&final_path, crate::atomic::PRIVATE, |w| {
        w.write_all(MAGIC)?;
        w.write_all(&FORMAT_VERSION.to_le_bytes())?;
        w.write_all(&0u32.to_le_bytes())?;
        write_body(w, contents)
    })?;
    Ok(final_path)
}

fn read_exact_or(r: &mut impl Read, buf: &mut [u8], what: &str) -> Result<()> {
    r.read_exact(buf)
        .with_context(|| format!("truncated or corrupt ({what})"))
}

impl Dump {
    /// Reads and validates a dump file.
    pub fn read(path: &Path) -> Result<Dump> {
        Self::read_inner(path).with_context(|| format!("dump {}", path.display()))
    }

    fn read_inner(path: &Path) -> Result<Dump> {
        let file = File::open(path)?;
        let mut r = BufReader::new(file);
        let mut head = [0u8; 16];
        r.read_exact(&mut head)
            .map_err(|_| anyhow::anyhow!("not a tracerd dump (file too short)"))?;
        if &head[..8] != MAGIC {
            bail!("not a tracerd dump (bad magic)");
        }
        let version = le_u32(&head[8..12]);
        if version != FORMAT_VERSION {
            bail!(
                "dump format version {version} is not supported (this reader knows version {FORMAT_VERSION})"
            );
        }
        let mut z = zstd::Decoder::new(r)?;
        // a corrupt frame header must not make the decoder allocate a huge window
        z.window_log_max(MAX_WINDOW_LOG)?;
        let mut meta: Option<DumpMeta> = None;
        let mut blobs = BlobWindow {
            base: 0,
            bytes: Vec::new(),
        };
        let mut records = Vec::new();
        loop {
            let mut sh = [0u8; 12];
            read_exact_or(&mut z, &mut sh, "section header; the end marker is missing")?;
            let (tag, len) = (le_u32(&sh[..4]), le_u64(&sh[4..]));
            if tag == SECTION_END {
                // read the frame to its end so that its checksum is verified
                let mut rest = Vec::new();
                z.read_to_end(&mut rest)
                    .context("truncated or corrupt (frame end)")?;
                if !rest.is_empty() {
                    bail!("corrupt: data after the end marker");
                }
                break;
            }
            if len > MAX_SECTION {
                bail!("corrupt: section {tag} claims {len} bytes");
            }
            // grows with the bytes that really arrive, never to a corrupt claimed length
            let mut payload = Vec::new();
            (&mut z)
                .take(len)
                .read_to_end(&mut payload)
                .context("truncated or corrupt (section payload)")?;
            if payload.len() as u64 != len {
                bail!("truncated or corrupt (section {tag} is shorter than its header says)");
            }
            match tag {
                SECTION_META => {
                    meta = Some(serde_json::from_slice(&payload).context("corrupt meta section")?)
                }
                SECTION_BLOBS => {
                    if payload.len() < 8 {
                        bail!("corrupt blob section");
                    }
                    blobs = BlobWindow {
                        base: le_u64(&payload[..8]),
                        bytes: payload[8..].to_vec(),
                    };
                }
                SECTION_EVENTS => records = decode_events(&payload)?,
                _ => {}
            }
        }
        let meta = meta.context("corrupt: no meta section")?;
        Ok(Dump { meta, records, blobs })
    }

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

fn decode_events(payload: &[u8]) -> Result<Vec<Record>> {
    if payload.len() < 12 {
        bail!("corrupt events section");
    }
    let size = le_u32(&payload[..4]) as usize;
    let count = le_u64(&payload[4..12]) as usize;
    if size != RECORD_SIZE || payload.len() != 12 + count.saturating_mul(size) {
        bail!("corrupt events section (record size {size}, count {count})");
    }
    // `count` is known to fit in the payload at hand, so it is safe to allocate for
    let mut records = Vec::with_capacity(count);
    for (i, b) in payload[12..].chunks_exact(size).enumerate() {
        records.push(decode_record(b).with_context(|| format!("corrupt event record {i}"))?);
    }
    Ok(records)
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
                ..
            } if requested != 0 => What::ShortIo(ShortIo {
                syscall: syscall_name(nr as u32),
                fd,
                path: self.open_path(open_id, 0),
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
            } => {
                let b = self.blob(endpoints);
                What::NetworkGap(NetworkGap {
                    local: b.and_then(decode_addr),
                    peer: b.and_then(|b| b.get(ENCODED_ADDR_LEN..)).and_then(decode_addr),
                    duration_ms: gap_ns / 1_000_000,
                    packets,
                    ongoing,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record {
                ts_ns: 5,
                pid: 1,
                tid: 2,
                comm: *b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0",
                payload: Payload::SyscallFailure {
                    nr: 1,
                    ret: -28,
                    fd: 3,
                    open_id: 7,
                    blob: BlobRef::NONE,
                    requested: 0,
                },
            },
            Record {
                ts_ns: 6,
                pid: 1,
                tid: 1,
                comm: [0; 16],
                payload: Payload::ProcessState {
                    state: ProcessState::Killed as u8,
                    cause: 0,
                    signal: 9,
                    core_dumped: false,
                    ongoing: false,
                    exit_code: 0,
                    sender_pid: 44,
                    duration_ns: 0,
                    sender_comm: BlobRef::NONE,
                },
            },
            Record {
                ts_ns: 7,
                pid: 1,
                tid: 1,
                comm: [0; 16],
                payload: Payload::NetworkGap {
                    gap_ns: 6_000_000_000,
                    packets: 9,
                    endpoints: BlobRef::NONE,
                    ongoing: true,
                },
            },
            Record {
                ts_ns: 8,
                pid: 1,
                tid: 2,
                comm: *b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0",
                payload: Payload::SyscallFailure {
                    nr: 18,
                    ret: 480,
                    fd: 3,
                    open_id: 7,
                    blob: BlobRef::NONE,
                    requested: 1064,
                },
            },
        ]
    }

    #[test]
    fn records_round_trip() {
        let mut buf = [0u8; RECORD_SIZE];
        for r in sample() {
            encode_record(&r, &mut buf);
            assert_eq!(decode_record(&buf), Some(r));
        }
    }

    #[test]
    fn meta_without_count_fields_still_reads() {
        let mut old = serde_json::to_value(DumpMeta::default()).unwrap();
        let obj = old.as_object_mut().unwrap();
        for k in ["function_calls", "unattached_functions", "syscall_counts"] {
            obj.remove(k).expect("the field is written");
        }
        obj["counters"]["kernel"]
            .as_object_mut()
            .unwrap()
            .remove("syscall_counts_full");
        let meta: DumpMeta = serde_json::from_value(old).unwrap();
        assert!(
            meta.function_calls.is_empty()
                && meta.syscall_counts.is_empty()
                && meta.unattached_functions.is_empty()
        );
    }

    /// An iterator that announces more records than it gives.
    struct ShortOfItsWord(std::vec::IntoIter<Record>, usize);

    impl Iterator for ShortOfItsWord {
        type Item = Record;
        fn next(&mut self) -> Option<Record> {
            self.0.next()
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            (self.1, Some(self.1))
        }
    }

    impl ExactSizeIterator for ShortOfItsWord {}

    #[test]
    fn a_record_count_that_does_not_hold_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let recs = sample();
        let n = recs.len();
        let contents = DumpContents {
            meta: DumpMeta::default(),
            records: ShortOfItsWord(recs.into_iter(), n + 1),
            blobs: (0, Vec::new()),
        };
        let e = write_dump(dir.path(), "d.tdump", contents).unwrap_err();
        assert!(format!("{e:#}").contains("not the"), "{e:#}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn file_round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let recs = sample();
        let meta = DumpMeta {
            format: "tracerd-dump".into(),
            version: FORMAT_VERSION,
            open_files: vec![OpenFile {
                open_id: 7,
                dir_open_id: 0,
                tgid: 1,
                path: "/data/aof".into(),
            }],
            function_calls: vec![3, 0],
            syscall_counts: vec![SyscallCount {
                pid: 1,
                syscall: "getppid".into(),
                count: 9,
            }],
            ..DumpMeta::default()
        };
        let contents = DumpContents {
            meta,
            records: recs.iter().copied(),
            blobs: (0, Vec::new()),
        };
        let path = write_dump(dir.path(), "d.tdump", contents).unwrap();
        let dump = Dump::read(&path).unwrap();
        assert_eq!(dump.records, recs);
        assert_eq!(dump.meta.function_calls, vec![3, 0]);
        assert_eq!(dump.meta.syscall_counts[0].count, 9);
        let events = dump.events();
        let json: Vec<crate::event::EventJson> = events.iter().map(Into::into).collect();
        assert_eq!(json[0].errno.as_deref(), Some("ENOSPC"));
        assert_eq!(json[0].path.as_deref(), Some("/data/aof"));
        assert_eq!(json[1].signal.as_deref(), Some("SIGKILL"));
        assert_eq!(json[2].duration_ms, Some(6000));
        assert_eq!(
            (
                json[3].kind,
                json[3].ret,
                json[3].requested,
                json[3].errno.as_deref()
            ),
            ("short_io", Some(480), Some(1064), None)
        );
        assert_eq!(
            events[3].describe(),
            "pwrite64(fd 3 /data/aof) = 480 of 1064 (short)"
        );
        assert_eq!(json[0].requested, None);
        assert!(
            matches!(&events[1].what, What::ProcessState(p) if p.state == State::Killed { core_dumped: false })
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );

        let bytes = std::fs::read(&path).unwrap();
        let cut = dir.path().join("cut.tdump");
        for len in [0, 10, 17, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&cut, &bytes[..len]).unwrap();
            let err = Dump::read(&cut)
                .err()
                .expect("a truncated dump must not read")
                .to_string();
            assert!(err.contains("cut.tdump"), "{err}");
        }
        let mut bad = bytes.clone();
        bad[0] = b'X';
        std::fs::write(&cut, &bad).unwrap();
        assert!(format!("{:#}", Dump::read(&cut).err().unwrap()).contains("bad magic"));
        let mut flipped = bytes.clone();
        let mid = 16 + (bytes.len() - 16) / 2;
        flipped[mid] ^= 0xff;
        std::fs::write(&cut, &flipped).unwrap();
        assert!(Dump::read(&cut).is_err(), "a corrupted frame fails its checksum");
    }
}
