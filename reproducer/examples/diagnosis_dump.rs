//! Writes a large, realistic production dump for timing `reproducer diagnose`
//! (scripts/bench-diagnose): three nodes with threads and a forked child, a process that is
//! no node, a minute of function hits and failed syscalls with hundreds of failure
//! signatures (syscall × errno × path), idle connections, a partition, a pause, a crash
//! from outside and a node that exits. Next to the dump it writes the scenario and a
//! fault-free profile that knows about half of the signatures and the idle connections.
//!
//! Usage: diagnosis_dump OUT_DIR [EVENTS]   (EVENTS defaults to 1,000,000)
//! Writes OUT_DIR/prod.tdump, OUT_DIR/scenario.toml, OUT_DIR/profile.json. Deterministic:
//! the same EVENTS gives the same files.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use reproducer::analysis::profile::{self, Dropped, FailureStat, GapStat, Profile};
use tracedump::abi::{PauseCause, ProcessState};
use tracedump::addr::{encode_addr, ENCODED_ADDR_LEN};
use tracedump::dump::{write_dump, ClockPair, DumpContents, DumpMeta, OpenFile, ProcInfo, FORMAT_VERSION};
use tracedump::record::{BlobArena, BlobRef, Payload, Record};
use tracedump::syscalls::{errno_number, syscall_number};

const SEC: u64 = 1_000_000_000;
const WINDOW_NS: u64 = 60 * SEC;
/// CLOCK_BOOTTIME of the dump (a host up for a day)
const DUMP_BOOT_NS: u64 = 86_400 * SEC;
/// wall-clock time of the dump (2026-11-20)
const DUMP_REAL_NS: u64 = 1_795_000_000 * SEC;
const NODES: usize = 3;
const SERVICE_PORT: u16 = 7000;
/// the bug: db3 is killed from outside 50 s into the window, db1 exits 5 s later
const CRASH_AT: u64 = 50 * SEC;
const EXIT_AT: u64 = 55 * SEC;

/// SplitMix64: a tiny deterministic generator (the dump must be the same every time).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An index in 0..n, small ones far more often (a few hot signatures, a long tail).
    fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((n as f64).powf(u) - 1.0) as usize % n
    }
}

struct Node {
    pid: u32,
    child: u32,
    address: [u8; 4],
}

fn nodes() -> Vec<Node> {
    (0..NODES)
        .map(|i| Node {
            pid: 1000 + 100 * i as u32,
            child: 1050 + 100 * i as u32,
            address: [10, 77, 0, 1 + i as u8],
        })
        .collect()
}

/// One failure signature a node hits: syscall, errno, and a path, a file the fd came
/// from (open id), or a peer.
#[derive(Clone)]
struct Signature {
    node: usize,
    syscall: &'static str,
    errno: &'static str,
    target: Target,
}

#[derive(Clone)]
enum Target {
    Path(String),
    Open(u64),
    Peer(usize),
    Nothing,
}

const PATH_CALLS: [&str; 6] = [
    "openat",
    "newfstatat",
    "unlinkat",
    "mkdirat",
    "renameat2",
    "readlinkat",
];
const PATH_ERRNOS: [&str; 5] = ["ENOENT", "EACCES", "EEXIST", "ENOTDIR", "EROFS"];
const FD_CALLS: [&str; 5] = ["read", "write", "fsync", "pread64", "ftruncate"];
const FD_ERRNOS: [&str; 4] = ["EIO", "ENOSPC", "EBADF", "EAGAIN"];
const FILES: [&str; 24] = [
    "wal",
    "snap",
    "index",
    "meta",
    "lock",
    "manifest",
    "journal",
    "segment",
    "bloom",
    "cache",
    "conf",
    "peers",
    "term",
    "vote",
    "compact",
    "checkpoint",
    "hint",
    "offsets",
    "tmp",
    "keys",
    "ttl",
    "stats",
    "log",
    "db",
];
const EXTENSIONS: [&str; 4] = ["", ".dat", ".log", ".json"];

/// Every signature of every node, hot ones first: about 200 per node.
fn signatures(rng: &mut Rng) -> Vec<Signature> {
    let mut out = Vec::new();
    for node in 0..NODES {
        // routine failures first: they are the hot ones
        out.push(Signature {
            node,
            syscall: "futex",
            errno: "ETIMEDOUT",
            target: Target::Nothing,
        });
        out.push(Signature {
            node,
            syscall: "read",
            errno: "EAGAIN",
            target: Target::Nothing,
        });
        out.push(Signature {
            node,
            syscall: "epoll_ctl",
            errno: "EEXIST",
            target: Target::Nothing,
        });
        for peer in (0..NODES).filter(|&p| p != node) {
            for errno in ["ECONNREFUSED", "ETIMEDOUT", "ECONNRESET"] {
                out.push(Signature {
                    node,
                    syscall: "connect",
                    errno,
                    target: Target::Peer(peer),
                });
            }
        }
        for _ in 0..150 {
            let file = FILES[rng.below(FILES.len() as u64) as usize];
            let ext = EXTENSIONS[rng.below(EXTENSIONS.len() as u64) as usize];
            let dir = ["data", "tmp", "conf"][rng.below(3) as usize];
            // digit runs differ between occurrences in production; the signature does not
            let path = format!("/var/lib/kv/{dir}/{file}-{}{ext}", rng.below(100_000));
            out.push(Signature {
                node,
                syscall: PATH_CALLS[rng.below(PATH_CALLS.len() as u64) as usize],
                errno: PATH_ERRNOS[rng.below(PATH_ERRNOS.len() as u64) as usize],
                target: Target::Path(path),
            });
        }
        for _ in 0..40 {
            out.push(Signature {
                node,
                syscall: FD_CALLS[rng.below(FD_CALLS.len() as u64) as usize],
                errno: FD_ERRNOS[rng.below(FD_ERRNOS.len() as u64) as usize],
                target: Target::Open(1 + rng.below(64)),
            });
        }
    }
    out
}

struct Writer {
    rng: Rng,
    blobs: BlobArena,
    records: Vec<Record>,
    nodes: Vec<Node>,
}

fn comm(name: &str) -> [u8; 16] {
    let mut c = [0u8; 16];
    let n = name.len().min(15);
    c[..n].copy_from_slice(&name.as_bytes()[..n]);
    c
}

fn addr_bytes(ip: [u8; 4], port: u16) -> [u8; ENCODED_ADDR_LEN] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&ip);
    let mut out = [0u8; ENCODED_ADDR_LEN];
    encode_addr(libc::AF_INET as u16, port, &a, &mut out);
    out
}

impl Writer {
    fn push(&mut self, at: u64, pid: u32, tid: u32, payload: Payload) {
        self.records.push(Record {
            ts_ns: DUMP_BOOT_NS - WINDOW_NS + at,
            pid,
            tid,
            comm: comm(if pid >= 5000 { "shipper" } else { "kvd" }),
            payload,
        });
    }

    /// A thread of node `n` (the main pid's threads, or the forked child).
    fn thread(&mut self, n: usize) -> (u32, u32) {
        let node = &self.nodes[n];
        match self.rng.below(10) {
            0 => (node.child, node.child),
            t => (node.pid, node.pid + t as u32),
        }
    }

    fn failure(&mut self, at: u64, pid: u32, tid: u32, s: &Signature) -> Result<()> {
        let nr = syscall_number(s.syscall).with_context(|| format!("syscall {}", s.syscall))?;
        let errno = errno_number(s.errno).with_context(|| format!("errno {}", s.errno))?;
        let (fd, open_id, blob) = match &s.target {
            Target::Path(p) => (-100, 0, self.blobs.put(p.as_bytes())),
            Target::Open(id) => (10 + *id as i32, *id, BlobRef::NONE),
            Target::Peer(p) => {
                let a = addr_bytes(self.nodes[*p].address, SERVICE_PORT);
                (20, 0, self.blobs.put(&a))
            }
            Target::Nothing => (-1, 0, BlobRef::NONE),
        };
        self.push(
            at,
            pid,
            tid,
            Payload::SyscallFailure {
                nr: nr as u16,
                ret: -(errno as i32),
                fd,
                open_id,
                blob,
                requested: 0,
            },
        );
        Ok(())
    }

    fn gap(&mut self, at: u64, from: usize, to: usize, local_port: u16, ms: u64, ongoing: bool) {
        let mut ends = Vec::with_capacity(2 * ENCODED_ADDR_LEN);
        ends.extend_from_slice(&addr_bytes(self.nodes[from].address, local_port));
        ends.extend_from_slice(&addr_bytes(self.nodes[to].address, SERVICE_PORT));
        let endpoints = self.blobs.put(&ends);
        let pid = self.nodes[from].pid;
        self.push(
            at,
            pid,
            pid,
            Payload::NetworkGap {
                gap_ns: ms * 1_000_000,
                packets: 100 + at / SEC,
                endpoints,
                ongoing,
                busy_ms: 0,
                busy_packets: 0,
            },
        );
    }

    fn process(&mut self, at: u64, pid: u32, state: ProcessState, payload: (u8, i32, u64, u32, &str)) {
        let (signal, exit_code, duration_ns, sender_pid, sender) = payload;
        let sender_comm = if sender.is_empty() {
            BlobRef::NONE
        } else {
            self.blobs.put(sender.as_bytes())
        };
        self.push(
            at,
            pid,
            pid,
            Payload::ProcessState {
                state: state as u8,
                cause: PauseCause::Stopped as u8,
                signal,
                core_dumped: false,
                ongoing: false,
                exit_code,
                sender_pid,
                duration_ns,
                sender_comm,
            },
        );
    }
}

/// The incident: idle connections every few seconds, a partition between db1 and db3 at
/// 20 s, a pause of db2 at 30 s, db3 killed from outside at 50 s, db1 exits at 55 s.
fn incident(w: &mut Writer) {
    for (i, t) in (0..WINDOW_NS).step_by(3 * SEC as usize).enumerate() {
        let (a, b) = [(0, 1), (1, 2), (2, 0)][i % 3];
        w.gap(t, a, b, 41_000 + i as u16, 1000 + (i as u64 * 7) % 90, false);
    }
    w.gap(20 * SEC, 0, 2, 42_001, 4200, false);
    w.gap(20 * SEC + SEC / 10, 2, 0, 42_002, 4100, false);
    let stopped = (libc::SIGSTOP as u8, 0, 1500 * 1_000_000, 0, "");
    w.process(30 * SEC, w.nodes[1].pid, ProcessState::Paused, stopped);
    let killed = (libc::SIGKILL as u8, 0, 0, 6000, "kvctl");
    w.process(CRASH_AT, w.nodes[2].pid, ProcessState::Killed, killed);
    w.process(EXIT_AT, w.nodes[0].pid, ProcessState::Exited, (0, 1, 0, 0, ""));
}

/// Whether node `n` is still alive at `at` (db3 dies at CRASH_AT, db1 at EXIT_AT).
fn alive(n: usize, at: u64) -> bool {
    match n {
        2 => at < CRASH_AT,
        0 => at < EXIT_AT,
        _ => true,
    }
}

/// What the dump holds: its records and blob bytes, and the failure signatures they use.
struct Generated {
    records: Vec<Record>,
    blobs: (u64, Vec<u8>),
    signatures: Vec<Signature>,
}

fn generate(events: usize) -> Result<Generated> {
    let mut rng = Rng(0x5eed);
    let sigs = signatures(&mut rng);
    let mut w = Writer {
        rng,
        blobs: BlobArena::new(4 << 20),
        records: Vec::with_capacity(events),
        nodes: nodes(),
    };
    incident(&mut w);
    let fixed = w.records.len();
    let step = WINDOW_NS / events.max(1) as u64;
    let per_node = sigs.len() / NODES;
    for i in 0..events.saturating_sub(fixed) {
        let at = i as u64 * step + w.rng.below(step.max(1));
        let n = w.rng.below(NODES as u64) as usize;
        if !alive(n, at) {
            // the dead node's share goes to the process that is no node (a log shipper)
            let path = format!("/var/log/ship-{}.gz", w.rng.below(1000));
            let blob = w.blobs.put(path.as_bytes());
            let nr = syscall_number("openat").unwrap_or(257) as u16;
            let payload = Payload::SyscallFailure {
                nr,
                ret: -2,
                fd: -100,
                open_id: 0,
                blob,
                requested: 0,
            };
            w.push(at, 5000, 5000, payload);
            continue;
        }
        let (pid, tid) = w.thread(n);
        if w.rng.below(100) < 55 {
            let function_id = w.rng.skewed(FUNCTIONS.len()) as u64;
            w.push(at, pid, tid, Payload::Function { function_id });
        } else {
            let s = sigs[n * per_node + w.rng.skewed(per_node)].clone();
            w.failure(at, pid, tid, &s)?;
        }
    }
    w.records.sort_by_key(|r| r.ts_ns);
    Ok(Generated {
        blobs: w.blobs.live_bytes(),
        records: w.records,
        signatures: sigs,
    })
}

const FUNCTIONS: [&str; 48] = [
    "kv::raft::step",
    "kv::raft::tick",
    "kv::net::poll",
    "kv::store::get",
    "kv::store::put",
    "kv::raft::append_entries",
    "kv::raft::handle_vote",
    "kv::wal::append",
    "kv::wal::sync",
    "kv::store::flush_memtable",
    "kv::net::accept",
    "kv::net::dial",
    "kv::raft::become_candidate",
    "kv::raft::become_leader",
    "kv::raft::become_follower",
    "kv::snapshot::begin",
    "kv::snapshot::write_chunk",
    "kv::snapshot::finish",
    "kv::snapshot::install",
    "kv::compaction::pick",
    "kv::compaction::run",
    "kv::compaction::finish",
    "kv::wal::rotate",
    "kv::wal::truncate",
    "kv::store::open",
    "kv::store::recover",
    "kv::store::checkpoint",
    "kv::membership::add_peer",
    "kv::membership::remove_peer",
    "kv::membership::commit",
    "kv::lease::renew",
    "kv::lease::expire",
    "kv::txn::begin",
    "kv::txn::commit",
    "kv::txn::abort",
    "kv::gc::sweep",
    "kv::gc::mark",
    "kv::metrics::flush",
    "kv::config::reload",
    "kv::admin::handle",
    "kv::raft::read_index",
    "kv::raft::transfer_leader",
    "kv::raft::pre_vote",
    "kv::store::scan",
    "kv::store::delete_range",
    "kv::index::rebuild",
    "kv::index::verify",
    "kv::main::shutdown",
];

fn meta(events: usize) -> Result<DumpMeta> {
    let ns = nodes();
    let mut processes = Vec::new();
    for (i, n) in ns.iter().enumerate() {
        let cmdline = format!("/opt/kv/bin/kvd --id {} --data /var/lib/kv", i + 1);
        processes.push(ProcInfo {
            pid: n.pid,
            ppid: 1,
            comm: "kvd".into(),
            exe: Some("/opt/kv/bin/kvd".into()),
            cmdline: Some(cmdline.split(' ').map(String::from).collect()),
            cwd: Some("/var/lib/kv".into()),
            ..Default::default()
        });
        processes.push(ProcInfo {
            pid: n.child,
            ppid: n.pid,
            comm: "kvd".into(),
            exe: Some("/opt/kv/bin/kvd".into()),
            cmdline: Some(vec!["kvd-snapshotter".into()]),
            cwd: Some("/var/lib/kv".into()),
            ..Default::default()
        });
    }
    for (pid, comm, exe) in [
        (5000, "shipper", "/usr/bin/shipper"),
        (6000, "kvctl", "/usr/bin/kvctl"),
    ] {
        processes.push(ProcInfo {
            pid,
            ppid: 1,
            comm: comm.into(),
            exe: Some(exe.into()),
            cmdline: Some(vec![exe.into()]),
            ..Default::default()
        });
    }
    let open_files = (1..=64u64)
        .flat_map(|id| {
            ns.iter().map(move |n| OpenFile {
                open_id: id,
                dir_open_id: 0,
                tgid: n.pid,
                path: format!("/var/lib/kv/data/{}-{id}.dat", FILES[id as usize % FILES.len()]),
            })
        })
        .take(64)
        .collect();
    Ok(DumpMeta {
        format: "tracerd-dump".into(),
        version: FORMAT_VERSION,
        tracerd_version: "bench".into(),
        host: "prod-1".into(),
        boot_id: "00000000-0000-0000-0000-000000000001".into(),
        kernel: "6.18".into(),
        clock: ClockPair {
            boottime_ns: DUMP_BOOT_NS,
            monotonic_ns: DUMP_BOOT_NS,
            realtime_ns: DUMP_REAL_NS,
        },
        config: serde_json::json!({ "redact": tracedump::redact::default_rules() }),
        functions: FUNCTIONS
            .iter()
            .map(|f| tracedump::dump::FunctionSpec {
                binary: PathBuf::from("/opt/kv/bin/kvd"),
                symbol: f.to_string(),
            })
            .collect(),
        processes,
        open_files,
        event_count: events as u64,
        ..Default::default()
    })
}

const SCENARIO: &str = r#"name = "kv-bench"
[[nodes]]
name = "db1"
command = ["/opt/kv/bin/kvd", "--id", "1"]
address = "10.77.0.1"
match = "--id 1"
[[nodes]]
name = "db2"
command = ["/opt/kv/bin/kvd", "--id", "2"]
address = "10.77.0.2"
match = "--id 2"
[[nodes]]
name = "db3"
command = ["/opt/kv/bin/kvd", "--id", "3"]
address = "10.77.0.3"
match = "--id 3"
[workload]
command = ["true"]
[oracle]
command = ["true"]
"#;

/// A fault-free profile that knows every other signature, at a rate near production's,
/// and the idle connections.
fn profile_of(sigs: &[Signature]) -> Profile {
    let name = |n: usize| format!("db{}", n + 1);
    let failures = sigs
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(i, s)| FailureStat {
            node: name(s.node),
            syscall: s.syscall.into(),
            errno: s.errno.into(),
            path: match &s.target {
                Target::Path(p) => Some(profile::normalize_path(p, None)),
                Target::Open(id) => Some(profile::normalize_path(
                    &format!("/var/lib/kv/data/{}-{id}.dat", FILES[*id as usize % FILES.len()]),
                    None,
                )),
                _ => None,
            },
            per_run: vec![10, 12, 11],
            per_second: if i % 4 == 0 { 50.0 } else { 0.05 },
        })
        .collect();
    let gaps = [(0, 1), (1, 2), (2, 0)]
        .iter()
        .map(|&(a, b)| GapStat {
            node: name(a),
            peer: name(b),
            port: SERVICE_PORT,
            per_run: vec![20, 20, 20],
            longest_ms: 1100,
            after_busy: Vec::new(),
        })
        .collect();
    Profile {
        format: profile::FORMAT.into(),
        version: profile::VERSION,
        scenario: "kv-bench".into(),
        scenario_nodes: (0..NODES)
            .map(|n| {
                let cmd = vec!["/opt/kv/bin/kvd".into(), "--id".into(), (n + 1).to_string()];
                (name(n), cmd)
            })
            .collect(),
        runs: 3,
        run_seconds: vec![60.0; 3],
        infrequent_below_per_s: profile::DEFAULT_INFREQUENT_BELOW,
        failures,
        syscalls: Vec::new(),
        functions: Vec::new(),
        gaps,
        exits: Vec::new(),
        startup_ms: BTreeMap::new(),
        dropped: Dropped::default(),
        unmapped_events: 0,
        unmapped_syscalls: 0,
        functions_not_attached: Vec::new(),
        functions_detached: Vec::new(),
        programs: BTreeMap::new(),
        environments: Vec::new(),
    }
}

fn run(out: &Path, events: usize) -> Result<()> {
    let Generated {
        records,
        blobs,
        signatures: sigs,
    } = generate(events)?;
    let contents = DumpContents {
        meta: meta(records.len())?,
        records: records.iter().copied(),
        blobs,
    };
    let dump = write_dump(out, "prod.tdump", contents)?;
    tracedump::atomic::write_bytes(
        &out.join("scenario.toml"),
        tracedump::atomic::SHARED,
        SCENARIO.as_bytes(),
    )?;
    profile::write(&profile_of(&sigs), &out.join("profile.json"))?;
    println!(
        "{}: {} events, {} failure signatures",
        dump.display(),
        records.len(),
        sigs.len()
    );
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (out, events) = match args.as_slice() {
        [out] => (PathBuf::from(out), 1_000_000),
        [out, n] => (
            PathBuf::from(out),
            n.parse()
                .with_context(|| format!("EVENTS '{n}' is not a number"))?,
        ),
        _ => bail!("usage: diagnosis_dump OUT_DIR [EVENTS]"),
    };
    if !out.is_dir() {
        bail!("OUT_DIR {}: not a directory", out.display());
    }
    run(&out, events)
}
