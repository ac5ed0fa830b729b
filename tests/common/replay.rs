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
    reproducer_cmd().args(args).output().expect("running reproducer")
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

/// The run ids this test process's reproducers take (`REPRODUCER_RUN_ID_BASE`): a block of
/// 100 from its pid, far above the ids a reproducer takes by default (the lowest free from
/// 100000), so that the names of namespaces and bridges say whose they are.
pub fn own_run_ids() -> std::ops::Range<u32> {
    let base = 500_000 + (std::process::id() % 4000) * 100;
    base..base + 100
}

/// `reproducer` with this test process's run ids.
pub fn reproducer_cmd() -> Command {
    let mut cmd = Command::new(reproducer_bin());
    cmd.env("REPRODUCER_RUN_ID_BASE", own_run_ids().start.to_string());
    cmd
}

/// Whether `name` (a namespace or an interface) is one of a run of this test process:
/// `rp{id}-NODE`, `rpr{id}`, `rpb{id}`, `rp{id}nI`.
pub fn is_own_run_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("rp") else {
        return false;
    };
    let rest = rest
        .strip_prefix('r')
        .or_else(|| rest.strip_prefix('b'))
        .unwrap_or(rest);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.len() == 6 && digits.parse().is_ok_and(|id: u32| own_run_ids().contains(&id))
}

/// Pids of this test process and its descendants.
fn own_pids() -> std::collections::BTreeSet<u32> {
    let mut parent = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent.insert(pid, ppid);
        }
    }
    let me = std::process::id();
    parent
        .keys()
        .copied()
        .filter(|&pid| {
            let mut cur = pid;
            for _ in 0..64 {
                if cur == me {
                    return true;
                }
                match parent.get(&cur) {
                    Some(&p) if p != 0 && p != cur => cur = p,
                    _ => return false,
                }
            }
            false
        })
        .chain([me])
        .collect()
}

/// Ids of the BPF links held by this test process or its descendants (`bpftool link` names
/// each link's holders); links of other processes on the host are not the test's.
pub fn own_links() -> std::collections::BTreeSet<u64> {
    let out = Command::new("bpftool")
        .args(["-j", "link", "list"])
        .output()
        .expect("bpftool");
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let ours = own_pids();
    links
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| {
            l["pids"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["pid"].as_u64().is_some_and(|pid| ours.contains(&(pid as u32))))
        })
        .filter_map(|l| l["id"].as_u64())
        .collect()
}

/// Nothing a run of this test left: no namespace or interface named from its run ids, no
/// `faulty` process, no BPF link its processes hold beyond `links_before` (own_links()).
pub fn assert_clean(links_before: &std::collections::BTreeSet<u64>) {
    let netns = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    let stray: Vec<&str> = netns
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| is_own_run_name(n))
        .collect();
    assert!(stray.is_empty(), "stray network namespaces: {stray:?}");
    let links = String::from_utf8_lossy(&Command::new("ip").args(["-o", "link"]).output().unwrap().stdout)
        .to_string();
    let stray: Vec<&str> = links
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n))
        .filter(|n| is_own_run_name(n))
        .collect();
    assert!(stray.is_empty(), "stray interfaces: {stray:?}");
    let procs = Command::new("pgrep").args(["-x", "faulty"]).output().unwrap();
    assert!(
        procs.stdout.is_empty(),
        "stray processes: {}",
        String::from_utf8_lossy(&procs.stdout)
    );
    // links are released asynchronously after the process exits
    let mut left = Vec::new();
    for _ in 0..50 {
        left = own_links().difference(links_before).copied().collect();
        if left.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("stray BPF links held by this test's processes: {left:?}");
}

/// Replays 10 times (asserting 10/10), then one kept run; returns that run's output and dir.
/// REPRODUCER_TEST_RUNS replaces the 10 (scripts/test-kernels: fewer runs in emulated guests).
pub fn replay_and_keep(scenario: &str, schedule: &str) -> (String, PathBuf) {
    require_root();
    let runs: u32 = std::env::var("REPRODUCER_TEST_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let links = own_links();
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
    assert_clean(&links);
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
    assert_clean(&links);
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
