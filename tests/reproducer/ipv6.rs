//! Nodes on IPv6 addresses (and on both families): a scenario runs, a partition of two nodes
//! drops their datagrams both ways for its duration and nothing between other pairs, and a
//! fault-free run shows no silence. The nodes run tests/programs/udpbeat.c, which sends a
//! datagram to each peer every 100 ms and reports, per peer, the longest silence between two
//! arrivals; the run's trace must say the same (tracerd's datagram flows).

use std::path::{Path, PathBuf};

use crate::common::*;
use crate::replay::*;

/// How long each node beats (ms): the partition starts about a second after the last node
/// started, and ends well inside it.
const BEAT_MS: u64 = 6000;
const PARTITION_MS: u64 = 2500;
/// A partition's silence is at least this long (its 2.5 s less a beat and some slack); a
/// pair it does not cut never gets near it (udpbeat reports silences from 1 s).
const CUT_MS: u64 = 2000;
const QUIET_MS: u64 = 1000;

/// One node of a scenario: its name, `address` field, peers (placeholders) and `match` ("":
/// none; the diagnosis needs one for each node, as they all run udpbeat).
type BeatNode<'a> = (&'a str, &'a str, &'a [&'a str], &'a str);

/// A scenario whose nodes beat at each other; the oracle holds when each (node, peer) of
/// `oracle` heard nothing from the other for CUT_MS.
fn scenario(name: &str, nodes: &[BeatNode], oracle: &[(&str, &str)]) -> String {
    let beat = program("udpbeat").display().to_string();
    let mut s = format!("name = \"{name}\"\nrun_timeout_s = 30\n");
    for (node, address, peers, match_) in nodes {
        if !match_.is_empty() {
            s += &format!("[[nodes]]\nmatch = \"{match_}\"\n");
        } else {
            s += "[[nodes]]\n";
        }
        let peers: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
        s += &format!(
            "name = \"{node}\"\ncommand = [\"{beat}\", \"{}\", \"7100\", {}]\naddress = {address}\n\
             ready = [\"sh\", \"-c\", \"grep -q listening {{workdir}}/{node}.log\"]\n",
            BEAT_MS * timing_slack(),
            peers.join(", ")
        );
    }
    let logs: Vec<String> = nodes
        .iter()
        .map(|(n, _, _, _)| format!("{{workdir}}/{n}.log"))
        .collect();
    s += &format!(
        "[workload]\ncommand = [\"sh\", \"-c\", \"for i in $(seq 300); do [ $(cat {} | grep -c '^done') = {} ] && exit 0; sleep 0.05; done; exit 1\"]\n",
        logs.join(" "),
        nodes.len()
    );
    let checks: Vec<String> = oracle
        .iter()
        .map(|(node, peer)| {
            format!("[ \\\"$(sed -n 's/^from {peer}: .*longest silence \\\\([0-9]*\\\\) ms$/\\\\1/p' {{workdir}}/{node}.log)\\\" -ge {CUT_MS} ]")
        })
        .collect();
    s += &format!(
        "[oracle]\ncommand = [\"sh\", \"-c\", \"{}\"]\n",
        checks.join(" && ")
    );
    s
}

/// Per peer as written in `node`'s report: (beats received, longest silence in ms).
fn heard(workdir: &Path, node: &str) -> Vec<(String, u64, u64)> {
    log(workdir, node)
        .lines()
        .filter_map(|l| {
            let (peer, rest) = l.strip_prefix("from ")?.split_once(": ")?;
            let (beats, rest) = rest.split_once(" beats, longest silence ")?;
            let longest = rest.strip_suffix(" ms")?;
            Some((peer.to_string(), beats.parse().ok()?, longest.parse().ok()?))
        })
        .collect()
}

/// Checks one run's reports: the `cut` pairs (node, peer as it names it) silent for at least
/// CUT_MS, every other pair never silent for QUIET_MS (times the slack of an emulated
/// guest), and every pair heard.
fn check_run(workdir: &Path, nodes: &[&str], cut: &[(&str, &str)]) {
    let quiet_ms = QUIET_MS * timing_slack();
    for node in nodes {
        let reports = heard(workdir, node);
        assert!(
            !reports.is_empty(),
            "{node} reported nothing: {}",
            log(workdir, node)
        );
        for (peer, beats, longest) in reports {
            let is_cut = cut.contains(&(node, peer.as_str()));
            assert!(
                beats >= 10,
                "{node} heard {beats} beats from {peer}: {}",
                log(workdir, node)
            );
            if is_cut {
                assert!(
                    (CUT_MS..PARTITION_MS + quiet_ms).contains(&longest),
                    "{node} from {peer}: longest silence {longest} ms, not the partition's {PARTITION_MS} ms"
                );
            } else {
                assert!(
                    longest < quiet_ms,
                    "{node} from {peer}: silent {longest} ms, though not cut off"
                );
            }
        }
    }
}

/// The datagram silences of a run's trace: (the far end, ms).
fn udp_gaps(workdir: &Path) -> Vec<(String, u64)> {
    trace_events(workdir)
        .into_iter()
        .filter(|e| e["kind"] == "network_gap" && e["protocol"] == "udp")
        .map(|e| {
            (
                e["dst"].as_str().unwrap_or("").to_string(),
                e["duration_ms"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// assert_clean, and no udpbeat left running.
fn assert_all_clean(links: &std::collections::BTreeSet<u64>) {
    assert_clean(links);
    let procs = std::process::Command::new("pgrep")
        .args(["-x", "udpbeat"])
        .output()
        .unwrap();
    assert!(
        procs.stdout.is_empty(),
        "stray udpbeat: {}",
        String::from_utf8_lossy(&procs.stdout)
    );
}

fn kept_dirs(out: &str) -> Vec<PathBuf> {
    out.lines()
        .filter_map(|l| l.split_once(", kept in ").map(|(_, d)| PathBuf::from(d.trim())))
        .collect()
}

/// From when `a` has heard every peer for a second (udpbeat's steady()): by then every pair
/// talks both ways, and a silence that follows is the partition's.
const PARTITION_A_B: &str = "[[faults]]\nnode = \"a\"\nkind = \"partition\"\npeers = [\"b\"]\nduration_ms = 2500\nafter_functions = [\"steady\"]\n";

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn ipv6_nodes_run_and_a_partition_drops_a_pair_s_datagrams_both_ways() {
    require_root();
    let links = own_links();
    let (a, b, c) = ("fd77:219::a", "fd77:219::b", "fd77:219::c");
    let sc = scenario(
        "ipv6-beats",
        &[
            (
                "a",
                &format!("\"{a}\""),
                &["{node.b.address}", "{node.c.address}"],
                &format!("{b} {c}"),
            ),
            (
                "b",
                &format!("\"{b}\""),
                &["{node.a.address}", "{node.c.address}"],
                &format!("{a} {c}"),
            ),
            (
                "c",
                &format!("\"{c}\""),
                &["{node.a.address}", "{node.b.address}"],
                &format!("{a} {b}"),
            ),
        ],
        &[("a", b), ("b", a)],
    );
    let (_dir, sc_path, sch_path) = files(&sc, PARTITION_A_B);
    let (sc_path, sch_path) = (sc_path.to_str().unwrap(), sch_path.to_str().unwrap());
    let out = text(&reproducer(&[
        "replay",
        "--scenario",
        sc_path,
        "--schedule",
        sch_path,
        "--runs",
        "3",
        "--keep",
    ]));
    let dirs = kept_dirs(&out);
    let checked = std::panic::catch_unwind(|| {
        assert!(out.contains("replay rate: 3/3"), "{out}");
        assert_eq!(dirs.len(), 3, "{out}");
        for d in &dirs {
            check_run(d, &["a", "b", "c"], &[("a", b), ("b", a)]);
            // the run's trace shows each side's datagram silence from the other's IPv6 address
            let silent_from: Vec<String> = udp_gaps(d)
                .into_iter()
                .filter(|(_, ms)| *ms >= CUT_MS)
                .map(|(peer, _)| peer)
                .collect();
            for peer in [a, b] {
                assert!(
                    silent_from.contains(&format!("[{peer}]:7100")),
                    "no silence from {peer} in the trace: {silent_from:?}"
                );
            }
            assert_eq!(silent_from.len(), 2, "only the pair's: {silent_from:?}");
        }
        // the diagnosis maps the IPv6 ends to the nodes and names the cut pair first
        let dump = std::fs::read_dir(dirs[0].join("trace"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let diagnosis = text(&reproducer(&[
            "diagnose",
            "--trace",
            dump.to_str().unwrap(),
            "--scenario",
            sc_path,
        ]));
        let first = diagnosis
            .lines()
            .find(|l| l.trim_start().starts_with("1. "))
            .unwrap_or_else(|| panic!("no candidate: {diagnosis}"));
        assert!(
            first.contains("a: partition from b") || first.contains("b: partition from a"),
            "{diagnosis}"
        );
    });
    dirs.iter().for_each(|d| drop(std::fs::remove_dir_all(d)));
    assert_all_clean(&links);
    if let Err(e) = checked {
        std::panic::resume_unwind(e);
    }
    // fault-free: every pair heard the other all along, and the oracle stays false
    let out = text(&reproducer(&["run", "--scenario", sc_path, "--keep"]));
    let workdir = out
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no run directory: {out}"));
    let checked = std::panic::catch_unwind(|| {
        assert!(out.contains("bug: no\n"), "{out}");
        check_run(&workdir, &["a", "b", "c"], &[]);
        let gaps: Vec<_> = trace_events(&workdir)
            .into_iter()
            .filter(|e| e["kind"] == "network_gap")
            .collect();
        assert!(
            gaps.is_empty(),
            "a fault-free run's trace shows silences: {gaps:?}"
        );
    });
    let _ = std::fs::remove_dir_all(&workdir);
    assert_all_clean(&links);
    if let Err(e) = checked {
        std::panic::resume_unwind(e);
    }
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_dual_stack_partition_drops_both_families() {
    require_root();
    let links = own_links();
    let sc = scenario(
        "dual-stack-beats",
        &[
            (
                "a",
                "[\"10.219.1.1\", \"fd77:219:1::1\"]",
                &["{node.b.ipv4}", "{node.b.ipv6}", "{node.c.ipv4}"],
                "",
            ),
            (
                "b",
                "[\"fd77:219:1::2\", \"10.219.1.2\"]",
                &["{node.a.ipv4}", "{node.a.ipv6}", "{node.c.ipv6}"],
                "",
            ),
            (
                "c",
                "[\"10.219.1.3\", \"fd77:219:1::3\"]",
                &["{node.a.ipv4}", "{node.b.ipv6}"],
                "",
            ),
        ],
        &[("a", "fd77:219:1::2"), ("b", "10.219.1.1")],
    );
    let (_dir, sc_path, sch_path) = files(&sc, PARTITION_A_B);
    let out = text(&reproducer(&[
        "run",
        "--scenario",
        sc_path.to_str().unwrap(),
        "--schedule",
        sch_path.to_str().unwrap(),
        "--keep",
    ]));
    let workdir = out
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no run directory: {out}"));
    let checked = std::panic::catch_unwind(|| {
        assert!(out.contains("bug: yes"), "{out}");
        let cut = [
            ("a", "10.219.1.2"),
            ("a", "fd77:219:1::2"),
            ("b", "10.219.1.1"),
            ("b", "fd77:219:1::1"),
        ];
        check_run(&workdir, &["a", "b", "c"], &cut);
    });
    let _ = std::fs::remove_dir_all(&workdir);
    assert_all_clean(&links);
    if let Err(e) = checked {
        std::panic::resume_unwind(e);
    }
}
