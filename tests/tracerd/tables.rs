//! Complete dumps of full kernel tables: every silent connection and stopped process is in
//! the dump, far beyond one batch of a map lookup. (Files behind fds are named when a call
//! fails, not from a table: fds.rs.)

use std::collections::BTreeSet;
use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// A target program in its own process group; the whole group is killed on drop.
struct Group {
    child: Child,
    lines: Vec<String>,
}

impl Group {
    /// Starts `prog args` and reads its stdout up to the line "ready".
    fn start(prog: &Path, args: &[&str]) -> Group {
        let mut child = Command::new(prog)
            .args(args)
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut g = Group {
            child,
            lines: Vec::new(),
        };
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("reading the program's output");
            if line == "ready" {
                return g;
            }
            g.lines.push(line);
        }
        let status = g.child.wait();
        panic!(
            "{} {args:?} ended before it was ready: {status:?}",
            prog.display()
        );
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this test created.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn dump_holds_every_silent_connection_far_beyond_one_batch() {
    require_root();
    const N: usize = 5_000;
    let prog = program_as("fillmaps", "fm_conns");
    let d = Daemon::start(&["--target-comm", "fm_conns", "--gap-ms", "1000"]);
    let g = Group::start(&prog, &["conns", &N.to_string()]);
    std::thread::sleep(Duration::from_millis(1600));
    assert_eq!(
        ongoing_gaps(&d.dump(), g.pid()).len(),
        2 * N,
        "both ends of every silent connection are an ongoing gap"
    );
}

/// The (local, peer) pairs of `pid`'s ongoing gaps in `dump`.
fn ongoing_gaps(dump: &Path, pid: u32) -> BTreeSet<(String, String)> {
    inspect_json(dump)
        .iter()
        .filter(|e| e["kind"] == "network_gap" && e["pid"] == pid && e["ongoing"] == true)
        .map(|e| (e["src"].to_string(), e["dst"].to_string()))
        .collect()
}

fn connections_full(dump: &Path) -> u64 {
    inspect_meta(dump)["counters"]["kernel"]["connections_full"]
        .as_u64()
        .expect("counters.kernel.connections_full")
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn closed_connections_free_their_slots_and_a_full_table_is_counted() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tracerd.toml");
    std::fs::write(&config, "connections = 64\n").expect("writing the config");
    let prog = program_as("fillmaps", "fm_slots");
    let d = Daemon::start(&[
        "--config",
        config.to_str().expect("utf-8 path"),
        "--target-comm",
        "fm_slots",
        "--gap-ms",
        "1000",
    ]);
    // 5 rounds of 40 watched ends, 200 in all, through a table of 64: only reuse fits them
    let cycled = Group::start(&prog, &["cycle", "20", "5"]);
    std::thread::sleep(Duration::from_millis(1600));
    let dump = d.dump();
    assert_eq!(
        connections_full(&dump),
        0,
        "closed connections gave back their slots"
    );
    assert_eq!(
        ongoing_gaps(&dump, cycled.pid()).len(),
        40,
        "both ends of each connection of the last round are watched"
    );
    // 40 more ends, 24 slots left
    let more = Group::start(&prog, &["conns", "20"]);
    std::thread::sleep(Duration::from_millis(1600));
    let dump = d.dump();
    assert_eq!(
        connections_full(&dump),
        16,
        "ends past the table's 64 are counted"
    );
    assert_eq!(ongoing_gaps(&dump, more.pid()).len(), 24);
    assert_eq!(ongoing_gaps(&dump, cycled.pid()).len(), 40);
    // a byte each way ends the last round's silences: only the looks, which walk the
    // (reused) slots, see those segments arrive
    // SAFETY: kill(2) on the process this test started.
    unsafe { libc::kill(cycled.pid() as i32, libc::SIGUSR1) };
    std::thread::sleep(Duration::from_millis(600));
    let ended = inspect_json(&d.dump())
        .iter()
        .filter(|e| {
            e["kind"] == "network_gap"
                && e["pid"] == cycled.pid()
                && e["ongoing"] == false
                && e["duration_ms"].as_u64().unwrap_or(0) >= 1000
        })
        .count();
    assert_eq!(ended, 40, "a look saw the byte end each silence");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn dump_holds_every_stopped_process_far_beyond_one_batch() {
    require_root();
    const N: usize = 1_000;
    let prog = program_as("fillmaps", "fm_stop");
    let d = Daemon::start(&["--target-comm", "fm_stop", "--pause-ms", "500"]);
    let g = Group::start(&prog, &["stop", &N.to_string()]);
    let children: BTreeSet<u32> = g.lines.iter().map(|l| l.parse().expect("a child pid")).collect();
    assert_eq!(children.len(), N);
    std::thread::sleep(Duration::from_millis(800));
    let events = inspect_json(&d.dump());
    let paused: BTreeSet<u32> = events
        .iter()
        .filter(|e| e["kind"] == "process_state" && e["state"] == "paused" && e["ongoing"] == true)
        .map(|e| e["pid"].as_u64().unwrap() as u32)
        .collect();
    let missing: Vec<&u32> = children.iter().filter(|p| !paused.contains(p)).collect();
    assert!(
        missing.is_empty(),
        "{} of {N} stopped processes missing from the dump",
        missing.len()
    );
}
