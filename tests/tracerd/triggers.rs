//! Dumps that trigger themselves: a fatal signal (on by default), a non-zero exit, a pause
//! that has lasted its threshold, a matching failed syscall, an OOM kill; in a crash storm,
//! one dump per interval with the rest counted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// The trigger recorded in a dump's header.
fn trigger_of(dump: &Path) -> serde_json::Value {
    let meta = inspect_meta(dump);
    assert!(
        meta["trigger"].is_object(),
        "{} has no trigger: {}",
        dump.display(),
        meta["trigger"]
    );
    meta["trigger"].clone()
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn trigger_fatal_signal_is_on_by_default_and_ignores_kills_from_outside() {
    require_root();
    let prog = program_as("crasher", "cr_segv");
    let d = Daemon::start(&["--target-comm", "cr_segv", "--trigger-settle-ms", "300"]);
    // a SIGSEGV sent by another process is not a crash of the target's own
    let mut victim = Command::new(&prog).args(["sleep", "5000"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(victim.id() as i32, libc::SIGSEGV) };
    let _ = victim.wait();
    std::thread::sleep(Duration::from_millis(800));
    assert!(dumps_in(&d).is_empty(), "a kill from outside does not trigger");
    let pid = run_to_end(&prog, &["segv"]);
    let dump = wait_for_dumps(&d, 1, Duration::from_secs(10)).remove(0);
    let t = trigger_of(&dump);
    assert_eq!(t["rule"], "fatal_signal");
    assert_eq!(t["pid"], pid);
    assert_eq!(t["event"], "killed by SIGSEGV");
    let events = inspect_json(&dump);
    assert!(
        events.iter().any(|e| e["pid"] == pid && e["signal"] == "SIGSEGV"),
        "the crash is in the dump"
    );
    let abort_pid = run_to_end(&prog, &["abort"]);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        dumps_in(&d).len(),
        1,
        "the next crash within a minute is suppressed (pid {abort_pid})"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn trigger_nonzero_exit() {
    require_root();
    let prog = program_as("crasher", "cr_exit");
    let d = Daemon::start(&[
        "--target-comm",
        "cr_exit",
        "--trigger-nonzero-exit",
        "--trigger-settle-ms",
        "200",
    ]);
    run_to_end(&prog, &["exit", "0"]);
    std::thread::sleep(Duration::from_millis(600));
    assert!(dumps_in(&d).is_empty(), "exit 0 does not trigger");
    let pid = run_to_end(&prog, &["exit", "3"]);
    let t = trigger_of(&wait_for_dumps(&d, 1, Duration::from_secs(10))[0]);
    assert_eq!(
        (t["rule"].as_str(), t["pid"].as_u64(), t["event"].as_str()),
        (Some("nonzero_exit"), Some(pid as u64), Some("exited with code 3"))
    );
}

/// The state letter of /proc/PID/stat ('T' stopped).
fn proc_state(pid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .unwrap_or('?')
}

/// The operator wants the dump while the service is still stuck: the pause rule fires once
/// a pause has lasted its threshold, not when it ends, and the pause's end fires nothing more.
#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn trigger_pause_dumps_while_the_process_is_still_stopped() {
    require_root();
    let prog = program_as("crasher", "cr_pause");
    let d = Daemon::start(&[
        "--target-comm",
        "cr_pause",
        "--pause-ms",
        "100",
        "--trigger-pause-ms",
        "400",
        "--trigger-settle-ms",
        "200",
        // no rate limit: a second firing for the same pause would be a second dump
        "--trigger-min-interval-ms",
        "0",
    ]);
    let mut sleeper = Command::new(&prog).args(["sleep", "20000"]).spawn().unwrap();
    let pid = sleeper.id() as i32;
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(200));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(700));
    assert!(dumps_in(&d).is_empty(), "a pause of 200 ms does not trigger");

    let stopped_at = std::time::Instant::now();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // only SIGCONT ends the pause, and it is sent after the dump: a rule that fires when a
    // pause ends never dumps here
    let dump = wait_for_dumps(&d, 1, Duration::from_secs(5)).remove(0);
    let waited = stopped_at.elapsed();
    assert_eq!(proc_state(pid), 'T', "the process is still stopped");
    assert!(
        waited >= Duration::from_millis(550) && waited < Duration::from_millis(2500),
        "dump after the 400 ms threshold and the 200 ms settle, got {waited:?}"
    );
    let t = trigger_of(&dump);
    assert_eq!(t["rule"], "pause");
    assert_eq!(t["pid"], pid);
    assert!(t["event"].as_str().unwrap().ends_with("ms, still paused"), "{t}");
    let events = inspect_json(&dump);
    assert!(
        events.iter().any(|e| e["pid"] == pid
            && e["state"] == "paused"
            && e["ongoing"] == true
            && e["duration_ms"].as_u64().unwrap() >= 400),
        "the dump holds the pause going on"
    );

    unsafe { libc::kill(pid, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(800));
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = sleeper.wait();
    assert_eq!(dumps_in(&d).len(), 1, "the end of the pause fires nothing more");
    let ended = inspect_json(&d.dump())
        .iter()
        .filter(|e| e["pid"] == pid && e["state"] == "paused" && e["ongoing"] == false)
        .count();
    assert_eq!(ended, 2, "both pauses are still recorded as they ended");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn trigger_failed_syscall_matching_syscall_errno_and_path() {
    require_root();
    let prog = program_as("crasher", "cr_sys");
    let dir = tempfile::tempdir().unwrap();
    let glob = format!("openat:ENOENT:{}/data/*.db", dir.path().display());
    let d = Daemon::start(&[
        "--target-comm",
        "cr_sys",
        "--trigger-syscall",
        &glob,
        "--trigger-settle-ms",
        "200",
    ]);
    run_to_end(&prog, &["fail", &format!("{}/data/x.log", dir.path().display())]);
    run_to_end(&prog, &["fail", &format!("{}/other/x.db", dir.path().display())]);
    std::thread::sleep(Duration::from_millis(600));
    assert!(dumps_in(&d).is_empty(), "paths outside the glob do not trigger");
    let path = format!("{}/data/x.db", dir.path().display());
    let pid = run_to_end(&prog, &["fail", &path]);
    let t = trigger_of(&wait_for_dumps(&d, 1, Duration::from_secs(10))[0]);
    assert_eq!(
        t["rule"],
        format!("syscall(openat ENOENT {}/data/*.db)", dir.path().display())
    );
    assert_eq!(t["pid"], pid);
    assert_eq!(t["event"], format!("openat({path}) = ENOENT"));
}

/// A memory cgroup (v1 or v2) limited to `limit` bytes without swap; removed on drop.
struct MemCgroup(PathBuf);

impl MemCgroup {
    fn new(name: &str, limit: u64) -> MemCgroup {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let dir = if v2 {
            Path::new("/sys/fs/cgroup").join(name)
        } else {
            Path::new("/sys/fs/cgroup/memory").join(name)
        };
        std::fs::create_dir_all(&dir).expect("creating a memory cgroup");
        let g = MemCgroup(dir);
        let files: &[(&str, String)] = if v2 {
            &[("memory.max", limit.to_string()), ("memory.swap.max", "0".into())]
        } else {
            &[
                ("memory.limit_in_bytes", limit.to_string()),
                ("memory.memsw.limit_in_bytes", limit.to_string()),
            ]
        };
        for (i, (file, value)) in files.iter().enumerate() {
            let path = g.0.join(file);
            // the limit must hold (else the test would eat the host's memory); no swap
            // accounting is fine on a host without swap
            if i == 0 || path.exists() {
                std::fs::write(&path, value)
                    .unwrap_or_else(|e| panic!("{}: {e} (memory controller enabled?)", path.display()));
            }
        }
        g
    }

    fn procs(&self) -> PathBuf {
        self.0.join("cgroup.procs")
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn trigger_oom_kill() {
    require_root();
    let prog = program_as("crasher", "cr_oom");
    let cg = MemCgroup::new(&format!("tracerd-oom-{}", std::process::id()), 64 << 20);
    let d = Daemon::start(&[
        "--target-comm",
        "cr_oom",
        "--trigger-oom-kill",
        "--no-trigger-fatal-signal",
        "--trigger-settle-ms",
        "200",
    ]);
    // a plain SIGKILL from a process is not an OOM kill
    let mut victim = Command::new(&prog).args(["sleep", "5000"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(victim.id() as i32, libc::SIGKILL) };
    let _ = victim.wait();
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        dumps_in(&d).is_empty(),
        "a SIGKILL from a process does not trigger"
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("echo $$ > {} && exec \"$0\" oom", cg.procs().display()))
        .arg(&prog)
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the OOM killer ended it");
    let t = trigger_of(&wait_for_dumps(&d, 1, Duration::from_secs(10))[0]);
    assert_eq!(t["rule"], "oom_kill");
    assert_eq!(t["pid"], child.id());
    assert_eq!(t["event"], "killed by SIGKILL");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn crash_storm_writes_one_dump_per_interval_and_counts_the_rest() {
    require_root();
    let prog = program_as("crasher", "cr_storm");
    let d = Daemon::start(&[
        "--target-comm",
        "cr_storm",
        "--trigger-min-interval-ms",
        "2000",
        "--trigger-settle-ms",
        "100",
    ]);
    const CRASHES: usize = 25;
    for _ in 0..CRASHES {
        run_to_end(&prog, &["segv"]);
        std::thread::sleep(Duration::from_millis(150));
    }
    // crashes spaced ~150 ms over ~3.7 s: one at the start and one ~2 s later fire
    let storm = wait_for_dumps(&d, 2, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(2200));
    run_to_end(&prog, &["segv"]);
    let all = wait_for_dumps(&d, 3, Duration::from_secs(10));
    assert_eq!(storm.len(), 2, "two dumps during the storm: {storm:?}");
    assert_eq!(all.len(), 3);
    let counted: u64 = all
        .iter()
        .map(|p| 1 + trigger_of(p)["suppressed_before"].as_u64().unwrap())
        .sum();
    assert_eq!(
        counted,
        CRASHES as u64 + 1,
        "every crash either fired or was counted as suppressed"
    );
    assert_eq!(trigger_of(&all[0])["suppressed_before"], 0);
}
