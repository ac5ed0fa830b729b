//! The dump directory as operators meet it: a full disk (a small tmpfs mounted over it) makes
//! `tracerd dump` fail in one line naming the directory and ENOSPC, leaves no file, is
//! counted, and the next dump after space is freed holds the events from before; a trigger's
//! dump that failed is retried at the rule's next event. The cap on the directory removes the
//! oldest of tracerd's own dumps, counted, and nothing else.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn metric(file: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_default()
        .to_string()
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, mounts a tmpfs); scripts/test runs it"]
fn a_full_dump_directory_fails_in_one_line_and_the_next_dump_has_everything() {
    require_root();
    let prog = eventgen_as("eg_full");
    let metrics = tempfile::tempdir().unwrap();
    let prom = metrics.path().join("tracerd.prom");
    let d = Daemon::start(&[
        "--target-comm",
        "eg_full",
        "--metrics-textfile",
        prom.to_str().unwrap(),
        "--metrics-interval-ms",
        "100",
        "--trigger-syscall",
        "openat:ENOENT:/nonexistent/full-trigger*",
        "--trigger-settle-ms",
        "100",
    ]);
    let dir = d.dump_dir();
    let disk = Tmpfs::mount_on(&dir, "size=256k,mode=0700");
    disk.fill();
    let before = run_prog(&prog, &["fail-path", "/nonexistent/full-before"]);
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(tracerd_bin())
        .arg("dump")
        .arg("--control-socket")
        .arg(d.socket())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!(
            "dump directory {}: No space left on device (ENOSPC)",
            dir.display()
        )),
        "{err}"
    );
    // a trigger's dump fails the same way ...
    run_prog(&prog, &["fail-path", "/nonexistent/full-trigger-1"]);
    d.wait_for_log("trigger syscall", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(names_in(&dir), ["filler"], "no partial or temporary file is left");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        metric(&prom, "tracerd_dumps_failed_total"),
        "tracerd_dumps_failed_total 2"
    );

    std::fs::remove_file(dir.join("filler")).unwrap();
    let path = d.dump();
    let events = inspect_json(&path);
    only(
        failures_on(&events, before, "/nonexistent/full-before"),
        "the failure from before the full disk",
    );
    // ... and is retried at the rule's next event, not a minute (min_interval_ms) later
    run_prog(&prog, &["fail-path", "/nonexistent/full-trigger-2"]);
    let dumps = wait_for_dumps(&d, 2, Duration::from_secs(10));
    let meta = inspect_meta(&dumps[1]);
    assert_eq!(
        meta["trigger"]["event"], "openat(/nonexistent/full-trigger-2) = ENOENT",
        "{}",
        meta["trigger"]
    );
    drop(disk);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn the_cap_removes_the_oldest_own_dumps_and_counts_them() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tracerd.toml");
    let prom = dir.path().join("tracerd.prom");
    std::fs::write(
        &config,
        format!(
            "target_comm = [\"eg_cap\"]\ndump_dir_max_files = 3\nmetrics_textfile = \"{}\"\nmetrics_interval_ms = 100\n",
            prom.display()
        ),
    )
    .unwrap();
    let d = Daemon::start(&["--config", config.to_str().unwrap()]);
    std::fs::write(d.dump_dir().join("notes.txt"), "an operator's file").unwrap();
    let written: Vec<PathBuf> = (0..5).map(|_| d.dump()).collect();
    let mut kept = names_in(&d.dump_dir());
    kept.retain(|n| n.ends_with(".tdump"));
    let newest: Vec<String> = written[2..]
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(kept, newest, "the three newest");
    assert!(
        d.dump_dir().join("notes.txt").exists(),
        "not tracerd's: never removed"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        metric(&prom, "tracerd_dumps_removed_total"),
        "tracerd_dumps_removed_total 2"
    );
    // a byte cap below one dump keeps the newest alone
    std::fs::write(&config, "target_comm = [\"eg_cap\"]\ndump_dir_max_bytes = 1\n").unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log("reloaded", Duration::from_secs(10));
    let last = d.dump();
    let mut kept = names_in(&d.dump_dir());
    kept.retain(|n| n.ends_with(".tdump"));
    assert_eq!(kept, [last.file_name().unwrap().to_string_lossy().into_owned()]);
}
