//! The bug benchmark's fast cases (tests/bugbench, `fast = true`) end to end, as root on the
//! real kernel: profile the scenario, produce the production dump with tracerd while an
//! independent mechanism causes the ground-truth fault, and `reproducer reproduce` from that
//! dump alone. Each case must be reproduced at >= 80%, with the faults and at the diagnosis
//! level its case.toml states; nothing may be left behind.

use std::path::PathBuf;
use std::process::Command;

use crate::common::*;
use crate::replay::*;

fn case_value(case: &str, key: &str) -> String {
    let text = std::fs::read_to_string(
        workspace_root()
            .join("tests/bugbench")
            .join(case)
            .join("case.toml"),
    )
    .expect("case.toml");
    let line = text
        .lines()
        .find(|l| l.split('=').next().map(str::trim) == Some(key))
        .unwrap_or_else(|| panic!("{case}: no {key}"));
    line.split_once('=')
        .unwrap()
        .1
        .trim()
        .trim_matches('"')
        .to_string()
}

/// The bug benchmark's network namespaces (`bb{tag}-{node}`, fixed names per case) and the
/// mounts its and the reproducer's runs make, as they are now.
fn bench_resources() -> std::collections::BTreeSet<String> {
    let netns = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    netns
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("bb"))
        .map(|n| format!("network namespace {n}"))
        .chain(
            mounts
                .lines()
                .filter(|l| l.contains("/tmp/bb-") || l.contains("reproducer-run-"))
                .map(|l| format!("mount {l}")),
        )
        .collect()
}

/// Nothing of this test's left: no namespace or interface of its runs (by their run ids),
/// and no bug-benchmark namespace or mount that was not there before it (`before`).
fn assert_nothing_left(before: &std::collections::BTreeSet<String>) {
    assert_clean(&std::collections::BTreeSet::new());
    let stray: Vec<String> = bench_resources().difference(before).cloned().collect();
    assert!(stray.is_empty(), "stray: {stray:?}");
}

/// Runs `scripts/bench-repro CASE` and checks its result; returns report.md, the
/// production dumps' file names and the output directory (removed when dropped).
fn reproduce_case(case: &str) -> (String, Vec<String>, tempfile::TempDir) {
    require_root();
    let out = tempfile::tempdir().unwrap();
    let before = bench_resources();
    let status = Command::new(workspace_root().join("scripts/bench-repro"))
        .env("REPRODUCER_RUN_ID_BASE", own_run_ids().start.to_string())
        .env("BENCH_NO_BUILD", "1")
        .env("TRACERD", tracerd_bin())
        .args(["--out", out.path().to_str().unwrap(), case])
        .status()
        .expect("running scripts/bench-repro");
    let result_path: PathBuf = out.path().join(case).join("out/result.json");
    let result: serde_json::Value = match std::fs::read(&result_path) {
        Ok(b) => serde_json::from_slice(&b).unwrap(),
        Err(e) => panic!("{case}: no result ({e}); bench-repro exited {status}"),
    };
    assert!(
        status.success(),
        "{case}: bench-repro exited {status}: {result:#}"
    );
    assert_eq!(result["reproduced"], true, "{result:#}");
    let (bugs, runs) = (
        result["bugs"].as_u64().unwrap(),
        result["confirm_runs"].as_u64().unwrap(),
    );
    assert!(
        runs > 0 && bugs as f64 / runs as f64 >= 0.8,
        "{case}: rate {bugs}/{runs}"
    );
    assert_eq!(
        result["faults"],
        case_value(case, "faults"),
        "{case}: faults injected"
    );
    assert_eq!(
        result["level"].as_u64().unwrap().to_string(),
        case_value(case, "level"),
        "{case}: diagnosis level"
    );
    let report = std::fs::read_to_string(out.path().join(case).join("out/report.md")).unwrap();
    assert!(report.contains("**Reproduced**"), "{report}");
    check_kept_runs(&out.path().join(case).join("out"), &report);
    assert_nothing_left(&before);
    let mut dumps: Vec<String> = std::fs::read_dir(out.path().join(case).join("dumps"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dumps.sort();
    (report, dumps, out)
}

/// The runs of the attempts that matter stay (with `"kept": true`), the others are removed;
/// each run that stays has its trace as a timeline beside its dumps, linked from the report.
fn check_kept_runs(out: &std::path::Path, report: &str) {
    let attempts: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(out.join("attempts.json")).unwrap()).unwrap();
    let runs_under = |dir: &std::path::Path| -> Vec<PathBuf> {
        let mut found = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with("reproducer-run-") {
                found.push(p);
            } else if p.is_dir() {
                found.extend(
                    std::fs::read_dir(&p)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| {
                            p.file_name()
                                .unwrap()
                                .to_string_lossy()
                                .starts_with("reproducer-run-")
                        }),
                );
            }
        }
        found
    };
    for a in &attempts {
        let dir = PathBuf::from(a["dir"].as_str().unwrap());
        let runs = runs_under(&dir);
        if a["runs_pruned"] == true {
            assert!(runs.is_empty(), "attempt {}: pruned, yet {runs:?}", a["number"]);
        } else {
            assert!(!runs.is_empty(), "attempt {} keeps its runs", a["number"]);
            let timelines: Vec<PathBuf> = a["timelines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| PathBuf::from(t.as_str().unwrap()))
                .collect();
            for r in runs {
                let run: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(r.join("run.json")).unwrap()).unwrap();
                assert_eq!(run["kept"], true, "{}", r.display());
                if run["trace"].is_string() {
                    let timeline = r.join("trace/trace.perfetto");
                    assert!(
                        timelines.contains(&timeline) && timeline.metadata().unwrap().len() > 0,
                        "{} has its timeline: {timelines:?}",
                        r.display()
                    );
                    let link = format!("]({})", timeline.strip_prefix(out).unwrap().display());
                    assert!(report.contains(&link), "the report links {link}");
                }
            }
        }
    }
    let last = attempts.last().unwrap();
    assert_eq!(last["runs_pruned"], false, "the last attempt keeps its runs");
    if attempts.len() > 7 {
        assert!(
            attempts.iter().any(|a| a["runs_pruned"] == true),
            "older attempts are pruned"
        );
    }
}

/// Every fast case has its test below.
const FAST_CASES: &[&str] = &[
    "snapshot-read",
    "nth-connect",
    "torn-snapshot",
    "wal-disk-full",
    "journal-gap-two-hosts",
    "store-abort-cascade",
];

#[test]
fn every_fast_case_is_tested() {
    let mut fast: Vec<String> = std::fs::read_dir(workspace_root().join("tests/bugbench"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("case.toml").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|c| case_value(c, "fast") == "true")
        .collect();
    fast.sort();
    let mut listed: Vec<String> = FAST_CASES.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(
        fast, listed,
        "add a test for each fast case (and list it in FAST_CASES)"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn snapshot_read() {
    reproduce_case("snapshot-read");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn nth_connect() {
    reproduce_case("nth-connect");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn torn_snapshot() {
    reproduce_case("torn-snapshot");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn wal_disk_full() {
    reproduce_case("wal-disk-full");
}

/// Two hosts, each with its own tracerd: the cause (the primary's failed journal write) is
/// only in host-a's dump, the symptom (the replica's exit) only in host-b's; the diagnosis
/// merges both and names each with its host.
#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn journal_gap_two_hosts() {
    let (report, dumps, out) = reproduce_case("journal-gap-two-hosts");
    assert_eq!(dumps.len(), 2, "one dump per host: {dumps:?}");
    assert!(
        dumps[0].starts_with("tracerd-host_a-") && dumps[1].starts_with("tracerd-host_b-"),
        "{dumps:?}"
    );
    for want in [
        "dumps (2), merged on wall-clock time",
        "nodes: primary\n",
        "nodes: replica\n",
        "replica@host-b: exited with status 1",
        "primary@host-a: write failed with ENOSPC on ",
    ] {
        assert!(
            report.contains(want),
            "{want:?} missing from the report:\n{report}"
        );
    }
    let cause = report.lines().find(|l| l.contains("  1. ")).unwrap_or_default();
    assert!(
        cause.contains("primary@host-a: write failed with ENOSPC"),
        "the first candidate is host-a's failed write: {cause}\n{report}"
    );
    let chain = chain_rows(&report);
    assert_eq!(
        chain
            .iter()
            .map(|(node, event, _)| (node.as_str(), event.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("primary", "write failed with ENOSPC on */journal (the fault)"),
            ("replica", "exited with code 1"),
            ("primary", "sendto failed with EPIPE (peer replica)"),
        ],
        "the chain from the primary's failed write to the replica's exit:\n{report}"
    );
    check_chain_flows(&out.path().join("journal-gap-two-hosts/out"), chain.len());
    for (node, event, production) in &chain {
        assert!(
            production == "0" || production.starts_with('+'),
            "{node} {event}: production's dump shows it after its fault ({production})\n{report}"
        );
    }
}

/// A fault that travels across three nodes: the store's failed journal write stops it, the
/// API server aborts after its reconnects to the store are refused, the client gives up after
/// its reconnects to the API server are refused. The report's chain shows each of these
/// steps in that order, each also in production's dump after its own fault.
#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn store_abort_cascade() {
    let (report, dumps, out) = reproduce_case("store-abort-cascade");
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    let chain = chain_rows(&report);
    assert_eq!(
        chain
            .first()
            .map(|(node, event, _)| (node.as_str(), event.as_str())),
        Some(("store", "write failed with ENOSPC on */journal (the fault)")),
        "{report}"
    );
    // the externally visible steps, in time order; function hits may come between them
    let steps = [
        ("store", "exited with code 1"),
        ("api", "connect failed with ECONNREFUSED (peer store)"),
        ("api", "exited with code 1"),
        ("client", "connect failed with ECONNREFUSED (peer api)"),
        ("client", "exited with code 3"),
    ];
    let at: Vec<Option<usize>> = steps
        .iter()
        .map(|(n, e)| chain.iter().position(|(node, event, _)| node == n && event == e))
        .collect();
    assert!(
        at.iter().all(Option::is_some) && at.windows(2).all(|w| w[0] < w[1]),
        "the chain from the store's failed write through the API server to the client, in \
         order ({at:?}):\n{report}"
    );
    check_chain_flows(&out.path().join("store-abort-cascade/out"), chain.len());
    for (node, event, production) in &chain {
        assert!(
            production == "0" || production.starts_with('+'),
            "{node} {event}: production's dump shows it after its fault ({production})\n{report}"
        );
    }
}

/// The chain's flow arrows in a reproduced run's timeline, read with Perfetto's schema: the
/// events they pass through, in time order, the last where they end (at most `links`).
fn check_chain_flows(out: &std::path::Path, links: usize) {
    let attempts: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(out.join("attempts.json")).unwrap()).unwrap();
    let timeline = attempts
        .iter()
        .filter(|a| a["bug"] == true)
        .flat_map(|a| a["timelines"].as_array().unwrap())
        .map(|t| PathBuf::from(t.as_str().unwrap()))
        .next()
        .expect("a reproduced run's timeline");
    let trace = perfetto_decode(&timeline);
    let on_flow: Vec<(&str, bool)> = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["flow_ids"] != serde_json::json!([]) || e["terminating_flow_ids"] != serde_json::json!([])
        })
        .map(|e| {
            (
                e["name"].as_str().unwrap_or(""),
                e["terminating_flow_ids"] != serde_json::json!([]),
            )
        })
        .collect();
    // a run may lack a link seen in most others (the table's counts say how many)
    assert!(
        (2..=links).contains(&on_flow.len()),
        "{}: {on_flow:?}",
        timeline.display()
    );
    let ends: Vec<bool> = on_flow.iter().map(|(_, end)| *end).collect();
    let mut want = vec![false; ends.len()];
    want[ends.len() - 1] = true;
    assert_eq!(
        ends, want,
        "the flow passes through every link and ends at the last: {on_flow:?}"
    );
}

/// The rows of report.md's "How the fault led to the failure" table: node, event, and the
/// time after production's fault.
fn chain_rows(report: &str) -> Vec<(String, String, String)> {
    let section = report
        .split("## How the fault led to the failure")
        .nth(1)
        .unwrap_or_else(|| panic!("no chain section in the report:\n{report}"));
    section
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with("| ") && !l.starts_with("| #"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            // "", #, node, event, after, reproduced, without, production, ""
            (cells[2].to_string(), cells[3].to_string(), cells[7].to_string())
        })
        .collect()
}
