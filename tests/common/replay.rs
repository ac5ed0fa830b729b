//! Running the reproducer on scenario and schedule files (the reproducer's system tests
//! include it beside common): files in a temp dir, replays that must reproduce every time
//! and one kept run, the logs and trace of that run, and the check that a run left no
//! process, network namespace, interface or BPF link behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::*;

pub fn reproducer_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_reproducer"))
}

pub fn faulty() -> String {
    program("faulty").display().to_string()
}

/// Writes the scenario and schedule into a temp dir.
pub fn files(scenario: &str, schedule: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let sc = dir.path().join("scenario.toml");
    let sch = dir.path().join("schedule.toml");
    std::fs::write(&sc, scenario.replace("FAULTY", &faulty())).unwrap();
    std::fs::write(&sch, schedule).unwrap();
    (dir, sc, sch)
}

pub fn reproducer(args: &[&str]) -> Output {
    Command::new(reproducer_bin())
        .args(args)
        .output()
        .expect("running reproducer")
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// How much later than on a real machine a timed event may come: 1, or REPRODUCER_TEST_SLACK
/// (scripts/test-kernels sets it for emulated guests, where time runs 10-50x slower).
pub fn timing_slack() -> u64 {
    std::env::var("REPRODUCER_TEST_SLACK")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&s| s >= 1)
        .unwrap_or(1)
}

pub fn link_count() -> usize {
    let out = Command::new("bpftool")
        .args(["link", "list"])
        .output()
        .expect("bpftool");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.is_empty())
        .count()
}

pub fn assert_clean(links_before: usize) {
    let netns = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    assert!(
        !netns.lines().any(|l| l.starts_with("rp")),
        "stray network namespaces: {netns}"
    );
    let links = String::from_utf8_lossy(&Command::new("ip").args(["-o", "link"]).output().unwrap().stdout)
        .to_string();
    assert!(
        !links.lines().any(|l| l.contains(": rpb") || l.contains(": rp")),
        "stray interfaces: {links}"
    );
    let procs = Command::new("pgrep").args(["-x", "faulty"]).output().unwrap();
    assert!(
        procs.stdout.is_empty(),
        "stray processes: {}",
        String::from_utf8_lossy(&procs.stdout)
    );
    // links are released asynchronously after the process exits
    for _ in 0..50 {
        if link_count() <= links_before {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(link_count() <= links_before, "stray BPF links");
}

/// Replays 10 times (asserting 10/10), then one kept run; returns that run's output and dir.
/// REPRODUCER_TEST_RUNS replaces the 10 (scripts/test-kernels: fewer runs in emulated guests).
pub fn replay_and_keep(scenario: &str, schedule: &str) -> (String, PathBuf) {
    require_root();
    let runs: u32 = std::env::var("REPRODUCER_TEST_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let links = link_count();
    let (_dir, sc, sch) = files(scenario, schedule);
    let out = reproducer(&[
        "replay",
        "--scenario",
        sc.to_str().unwrap(),
        "--schedule",
        sch.to_str().unwrap(),
        "--runs",
        &runs.to_string(),
    ]);
    let t = text(&out);
    assert!(t.contains(&format!("replay rate: {runs}/{runs}")), "{t}");
    assert!(out.status.success());
    assert_clean(links);
    let out = reproducer(&[
        "run",
        "--scenario",
        sc.to_str().unwrap(),
        "--schedule",
        sch.to_str().unwrap(),
        "--keep",
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let workdir = t
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .map(PathBuf::from)
        .expect("run directory printed");
    assert_clean(links);
    (t, workdir)
}

pub fn log(workdir: &Path, node: &str) -> String {
    std::fs::read_to_string(workdir.join(format!("{node}.log"))).unwrap_or_default()
}

pub fn trace_events(workdir: &Path) -> Vec<serde_json::Value> {
    let dir = workdir.join("trace");
    let dump = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    inspect_json(&dump)
}

/// A workload that waits until NODE's log contains TEXT (at most 10 s).
pub fn wait_for(node: &str, needle: &str) -> String {
    format!(
        r#"["sh", "-c", "for i in $(seq 200); do grep -q '{needle}' {{workdir}}/{node}.log && exit 0; sleep 0.05; done; exit 1"]"#
    )
}
