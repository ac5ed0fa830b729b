//! `reproducer diagnose` on a Raft-like cluster whose peers keep, on one port, a stream with
//! a heartbeat every 100 ms beside pipelines idle for 8 s (tests/programs/raftpeers.c):
//! the test, not the reproducer, cuts one node off with a firewall rule in its namespace
//! for 4.5 s, past the others' 1-s election timeout. The pipelines' silences are as long as
//! the profile's fault-free ones; the streams' are not what their own traffic does, so the
//! partition ranks first.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use crate::replay::*;

const PORT: &str = "7000";
/// seconds each node runs
const RUN_S: &str = "12";

/// Three network namespaces on a bridge in a fourth; removed on drop.
struct Cluster {
    hub: String,
    nodes: Vec<String>,
}

impl Cluster {
    fn new(addresses: &[String]) -> Cluster {
        let tag = std::process::id();
        let c = Cluster {
            hub: format!("rsh{tag}"),
            nodes: (0..addresses.len()).map(|i| format!("rsn{i}x{tag}")).collect(),
        };
        let ip = |args: &[&str]| run_ok(Command::new("ip").args(args));
        ip(&["netns", "add", &c.hub]);
        ip(&["-n", &c.hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &c.hub, "link", "set", "br0", "up"]);
        for (i, (ns, addr)) in c.nodes.iter().zip(addresses).enumerate() {
            let (inner, outer) = (format!("rs{i}n{tag}"), format!("rs{i}h{tag}"));
            ip(&["netns", "add", ns]);
            ip(&[
                "link", "add", &inner, "netns", ns, "type", "veth", "peer", "name", &outer, "netns", &c.hub,
            ]);
            ip(&["-n", &c.hub, "link", "set", &outer, "master", "br0", "up"]);
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", &inner]);
            ip(&["-n", ns, "link", "set", &inner, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        c
    }

    /// Drops everything between node `i` and `others`, in node i's namespace (nft).
    fn cut(&self, i: usize, others: &[&str]) {
        let set = others.join(", ");
        let rules = format!(
            "table inet rscut {{\n chain in {{ type filter hook input priority 0; policy accept; ip saddr {{ {set} }} drop; }}\n chain out {{ type filter hook output priority 0; policy accept; ip daddr {{ {set} }} drop; }}\n}}\n"
        );
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &self.nodes[i], "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("running nft");
        use std::io::Write;
        nft.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
        assert!(nft.wait().unwrap().success(), "nft refused the cut");
    }

    fn heal(&self, i: usize) {
        run_ok(Command::new("ip").args([
            "netns",
            "exec",
            &self.nodes[i],
            "nft",
            "delete",
            "table",
            "inet",
            "rscut",
        ]));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain([&self.hub]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn node_args(prog: &Path, i: usize, addresses: &[String]) -> Vec<String> {
    let mut args = vec![
        prog.display().to_string(),
        i.to_string(),
        PORT.into(),
        RUN_S.into(),
    ];
    args.extend(addresses.iter().cloned());
    args
}

fn scenario(dir: &Path, prog: &Path, addresses: &[String]) -> PathBuf {
    let mut text = String::from("name = \"raftpeers\"\nrun_timeout_s = 40\n");
    for (i, addr) in addresses.iter().enumerate() {
        let command: Vec<String> = node_args(prog, i, addresses)
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect();
        text += &format!(
            "[[nodes]]\nname = \"n{}\"\ncommand = [{}]\naddress = \"{addr}\"\nmatch = \"raftpeers {i} \"\nready = [\"sh\", \"-c\", \"grep -q listening {{workdir}}/n{}.log\"]\n",
            i + 1,
            command.join(", "),
            i + 1
        );
    }
    text += "[workload]\ncommand = [\"sh\", \"-c\", \"for i in $(seq 400); do grep -q done {workdir}/n1.log && grep -q done {workdir}/n2.log && grep -q done {workdir}/n3.log && exit 0; sleep 0.05; done; exit 1\"]\n";
    text += "[oracle]\ncommand = [\"sh\", \"-c\", \"grep -q election {workdir}/n2.log\"]\n";
    let path = dir.join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Production: the three nodes traced by tracerd, n1 cut off 3 s in for 4.5 s; the dump.
fn production(dir: &Path, prog: &Path, addresses: &[String]) -> (Daemon, PathBuf) {
    let cluster = Cluster::new(addresses);
    let d = Daemon::start(&["--target-comm", "raftpeers", "--gap-ms", "200"]);
    let mut nodes: Vec<Reaped> = (0..addresses.len())
        .map(|i| {
            let log = std::fs::File::create(dir.join(format!("prod-n{}.log", i + 1))).unwrap();
            let args = node_args(prog, i, addresses);
            Reaped(
                Command::new("ip")
                    .args(["netns", "exec", &cluster.nodes[i]])
                    .args(&args)
                    .stdout(log)
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    cluster.cut(0, &[&addresses[1], &addresses[2]]);
    std::thread::sleep(Duration::from_millis(4500));
    cluster.heal(0);
    let codes: Vec<Option<i32>> = nodes.iter_mut().map(|n| n.0.wait().unwrap().code()).collect();
    let log = |i: usize| std::fs::read_to_string(dir.join(format!("prod-n{i}.log"))).unwrap();
    assert_eq!(
        codes,
        [Some(3); 3],
        "every node saw an election: {} {} {}",
        log(1),
        log(2),
        log(3)
    );
    std::thread::sleep(Duration::from_millis(300));
    let dump = d.dump();
    (d, dump)
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_partition_of_busy_and_idle_connections_on_one_port_ranks_first() {
    require_root();
    let prog = program("raftpeers");
    let net = format!("10.243.{}", std::process::id() % 200 + 20);
    let addresses: Vec<String> = (1..=3).map(|i| format!("{net}.{i}")).collect();
    let dir = tempfile::tempdir().unwrap();
    let sc = scenario(dir.path(), &prog, &addresses);
    let profile = dir.path().join("profile.json");
    let out = reproducer(&[
        "profile",
        "--scenario",
        sc.to_str().unwrap(),
        "--runs",
        "2",
        "--out",
        profile.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    let idle = p["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["node"] == "n2" && g["peer"] == "n1")
        .unwrap_or_else(|| panic!("fault-free silences of n2 to n1: {}", p["gaps"]))
        .clone();
    assert!(
        idle["longest_ms"].as_u64().unwrap() >= 7000,
        "the pipelines idle 8 s: {idle}"
    );

    let (_d, dump) = production(dir.path(), &prog, &addresses);
    let events = inspect_json(&dump);
    let stream_silence = events.iter().any(|e| {
        e["kind"] == "network_gap"
            && e["duration_ms"].as_u64().unwrap_or(0) >= 3000
            && e["busy_packets"].as_u64().unwrap_or(0) >= 20
    });
    assert!(
        stream_silence,
        "a stream's silence with its busy stretch before it"
    );
    let out = reproducer(&[
        "diagnose",
        "--json",
        "--scenario",
        sc.to_str().unwrap(),
        "--trace",
        dump.to_str().unwrap(),
        "--profile",
        profile.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &v["candidates"][0];
    assert_eq!(first["guess"]["kind"], "partition", "{:#}", v["candidates"]);
    assert_eq!(first["verdict"], "cause", "{first:#}");
    assert_eq!(first["who"], "n1", "the cut node's pairs: {first:#}");
    let ms = first["guess"]["duration_ms"].as_u64().unwrap();
    assert!((3500..9000).contains(&ms), "about the 4.5-s cut: {ms} ms");
    let ratio = first["silence"]["silence_ratio"].as_f64().unwrap_or(0.0);
    assert!(
        ratio >= 20.0,
        "far beyond the stream's own 100-ms beat: {first:#}"
    );
    let causes: Vec<_> = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "cause" && c["guess"]["kind"] == "partition")
        .collect();
    assert!(
        causes.iter().all(|c| c["who"] == "n1"),
        "only n1's pairs were cut: {causes:#?}"
    );
}
