//! Under load: a storm of failures keeps the daemon's memory bounded and counts what the
//! window overwrote, a storm of SIGUSR1 writes only complete dumps, and a session stops
//! cleanly while events pour in.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn storm_keeps_memory_bounded_and_counts_overwrites() {
    require_root();
    let prog = eventgen_as("eg_storm");
    let mut d = Daemon::start(&["--target-comm", "eg_storm", "--ring-events", "10000"]);
    run_prog(&prog, &["storm", "2000000"]);
    let rss_kib = d.rss_kib();
    let started = Instant::now();
    let dump = d.dump();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the daemon answers during a storm"
    );
    assert!(d.is_alive());
    let meta = inspect_meta(&dump);
    let c = &meta["counters"];
    let overwritten = c["recorder"]["ring_overwritten"].as_u64().unwrap();
    let kernel_full = c["kernel"]["buffer_full_syscall"].as_u64().unwrap();
    let received = c["recorder"]["received"].as_u64().unwrap();
    assert!(overwritten > 0, "overwrites are counted: {c}");
    assert!(
        received + kernel_full >= 2_000_000,
        "every failure was received or counted as dropped: {c}"
    );
    assert!(
        meta["event_count"].as_u64().unwrap() <= 10_010,
        "the window holds N events"
    );
    assert!(rss_kib < 96 * 1024, "daemon RSS stays bounded: {rss_kib} KiB");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn sigusr1_storm_only_produces_complete_dumps() {
    require_root();
    let prog = eventgen_as("eg_usr1");
    let mut d = Daemon::start(&["--target-comm", "eg_usr1"]);
    run_prog(&prog, &["storm", "20000"]);
    for _ in 0..100 {
        d.signal(libc::SIGUSR1);
        std::thread::sleep(Duration::from_millis(2));
    }
    // the daemon still answers, so every signal before this request has been handled
    let last = d.dump();
    assert!(d.is_alive());
    let files: Vec<PathBuf> = std::fs::read_dir(d.dump_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files.len() >= 2, "SIGUSR1 wrote dumps: {files:?}");
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        assert!(!name.starts_with('.'), "no temporary file is left behind: {name}");
        assert!(name.ends_with(".tdump"));
        let meta = inspect_meta(f);
        assert!(meta["event_count"].as_u64().unwrap() > 0);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert!(files.contains(&last));
}

/// A session stopped while events pour in drains the ring one last time: that drain must not
/// meet the recorder still borrowed by the stop (it panicked in libbpf's callback, which
/// aborts the process -- seen when a JVM's threads failed calls as its run ended). The race
/// window is short: several floods, many stops.
#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_session_stops_cleanly_while_events_pour_in() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    for round in 0..10 {
        let mut floods: Vec<std::process::Child> = (0..4)
            .map(|_| {
                let mut cmd = Command::new("sh");
                cmd.args(["-c", "while :; do true < /nonexistent/tracerd-flood; done"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                // the floods die with the test, even when a panic aborts it
                // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
                unsafe {
                    std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                cmd.spawn().expect("spawn sh")
            })
            .collect();
        let config = tracerd::config::Config {
            dump_dir: dir.path().join(format!("dumps-{round}")),
            control_socket: dir.path().join("control.sock"),
            ..Default::default()
        };
        let session = tracerd::session::TraceSession::start(config).expect("session starts");
        for f in &floods {
            session.add_target(f.id()).expect("target added");
        }
        std::thread::sleep(Duration::from_millis(100));
        drop(session); // stops and joins the session thread while the floods go on
        for f in &mut floods {
            let _ = f.kill();
            let _ = f.wait();
        }
    }
}
