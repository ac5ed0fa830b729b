//! Datagram flows: a UDP or raw-IP heartbeat whose arrivals stop while its peer keeps sending
//! is a network gap between the two addresses, with its protocol and the datagrams sent
//! meanwhile; the peer, which heard everything, records none; IPv4 and IPv6; every datagram
//! call (sendto/recvfrom, sendmsg/recvmsg, sendmmsg/recvmmsg); a process's share of the flow
//! table is bounded and what does not fit is counted; a socket made before tracerd started or
//! inherited from a parent is watched too.
//!
//! The loss is made on the wire, with no firewall: b's neighbour entry for a is pointed at a
//! MAC address nobody has, so b's sends still succeed and a's veth drops them as not its own;
//! then back at a's own.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// One heartbeat process, started and ready.
struct Heartbeat {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Heartbeat {
    fn start(mut cmd: Command) -> Heartbeat {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawning heartbeat");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok);
        assert_eq!(first.as_deref(), Some("ready"), "heartbeat did not start");
        Heartbeat { child, lines }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks it to stop (SIGTERM) and waits for the end; returns its last line.
    fn stop(self) -> String {
        // SAFETY: kill(2) on the child this test started and has not waited for.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.finish()
    }

    /// Waits for the end; returns its last line ("sent N received M").
    fn finish(mut self) -> String {
        let last = self
            .lines
            .by_ref()
            .map_while(Result::ok)
            .last()
            .unwrap_or_default();
        let status = self.child.wait().expect("waiting for heartbeat");
        assert!(status.success(), "heartbeat failed: {status}");
        last
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const PERIOD_MS: &str = "100";
/// b's datagrams to a are lost CUT_AT_MS after the last heartbeat started, for CUT_MS; the
/// heartbeats run CUT_AT_MS more after that: in an emulated guest (the kernel matrix) starting
/// a process or `ip` can take a second.
const CUT_AT_MS: u64 = 3000;
const CUT_MS: u64 = 2500;
const VRRP: &str = "112";

/// Side a's and b's heartbeats over UDP (a: sendmmsg/recvmmsg, b: sendmsg/recvmsg) and raw IP
/// protocol 112 (a: sendto/recvfrom, b: sendmsg/recvmsg), between `addr_a` and `addr_b`; b's
/// datagrams to a are lost for CUT_MS. Returns the dump's events and the four pids
/// (a udp, a raw, b udp, b raw), the dump's flow table and the pair.
fn one_way_loss(tag: &str, v6: bool) -> (Vec<serde_json::Value>, [u32; 4], serde_json::Value, NetnsPair) {
    let comm = format!("hb_{tag}");
    let prog = program_as("heartbeat", &comm);
    let d = Daemon::start(&["--target-comm", &comm, "--gap-ms", "1000"]);
    let net = NetnsPair::new(tag);
    let (addr_a, addr_b) = if v6 {
        (net.addr6_a.clone(), net.addr6_b.clone())
    } else {
        (net.addr_a.clone(), net.addr_b.clone())
    };
    let side = |ns: &str, kind: &str, port: &str, peer: &str, peer_port: &str, calls: &str| {
        let mut c = net.exec(ns, &prog);
        c.args([kind, VRRP, port, peer, peer_port, PERIOD_MS, "0", calls]);
        Heartbeat::start(c)
    };
    let a_udp = side(&net.a, "udp", "5405", &addr_b, "5406", "mmsg");
    let a_raw = side(&net.a, "raw", "0", &addr_b, "0", "from");
    let b_udp = side(&net.b, "udp", "5406", &addr_a, "5405", "msg");
    let b_raw = side(&net.b, "raw", "0", &addr_a, "0", "msg");
    let pids = [a_udp.pid(), a_raw.pid(), b_udp.pid(), b_raw.pid()];
    std::thread::sleep(Duration::from_millis(CUT_AT_MS));
    // b's entry for a: a MAC address nobody has, then a's own (no resolution to wait for)
    let point_at = |mac: &str| {
        run_ok(Command::new("ip").args([
            "-n",
            &net.b,
            "neigh",
            "replace",
            &addr_a,
            "lladdr",
            mac,
            "dev",
            &net.dev_b,
            "nud",
            "permanent",
        ]))
    };
    let mac_a = run_ok(Command::new("ip").args(["-n", &net.a, "-o", "link", "show", &net.dev_a]));
    let mac_a = mac_a
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .expect("a's MAC address")
        .to_string();
    point_at("02:00:00:00:00:01");
    std::thread::sleep(Duration::from_millis(CUT_MS));
    point_at(&mac_a);
    std::thread::sleep(Duration::from_millis(CUT_AT_MS));
    // while they run: their flows are in the table (an ended process's leave it)
    let dump = d.dump();
    for h in [a_udp, a_raw, b_udp, b_raw] {
        let last = h.stop();
        assert!(last.starts_with("sent "), "heartbeat ended with {last:?}");
    }
    check_timeline(&dump);
    (
        inspect_json(&dump),
        pids,
        inspect_meta(&dump)["flows"].clone(),
        net,
    )
}

/// The Perfetto timeline names a flow's track by its protocol, as it does a connection's.
fn check_timeline(dump: &std::path::Path) {
    let out = dump.with_extension("perfetto");
    run_ok(
        Command::new(tracerd_bin())
            .args(["export", "--format", "perfetto"])
            .arg(dump)
            .arg("-o")
            .arg(&out),
    );
    let trace = perfetto_decode(&out);
    let names: Vec<&str> = trace["tracks"]
        .as_array()
        .expect("tracks")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("udp ") && n.ends_with(":5406")),
        "a track for a's udp flow: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("vrrp ")),
        "a track for the vrrp flow: {names:?}"
    );
}

/// `pid`'s silences that ended with a datagram (not those still going on at the dump).
fn gaps_of(events: &[serde_json::Value], pid: u32) -> Vec<&serde_json::Value> {
    events_of(events, "network_gap", pid)
        .into_iter()
        .filter(|e| e["ongoing"] == false)
        .collect()
}

fn check_one_way_loss(tag: &str, v6: bool) {
    let (events, [a_udp, a_raw, b_udp, b_raw], flows, net) = one_way_loss(tag, v6);
    let addr_b: std::net::IpAddr = if v6 { &net.addr6_b } else { &net.addr_b }
        .parse()
        .expect("b's address");
    let peer = |port| std::net::SocketAddr::new(addr_b, port).to_string();
    for (pid, protocol, local_port, peer) in [(a_udp, "udp", 5405, peer(5406)), (a_raw, "vrrp", 0, peer(0))] {
        let all: Vec<String> = events
            .iter()
            .filter(|e| e["kind"] == "network_gap")
            .map(|e| {
                format!(
                    "{} {} {}->{} {} ms ongoing {}",
                    e["pid"], e["protocol"], e["src"], e["dst"], e["duration_ms"], e["ongoing"]
                )
            })
            .collect();
        let gaps = gaps_of(&events, pid);
        assert_eq!(
            gaps.len(),
            1,
            "one {protocol} gap of a (pid {pid}); every gap: {all:#?}; flows: {flows:#}"
        );
        let gap = gaps[0];
        assert_eq!(gap["protocol"], protocol);
        assert_eq!(
            gap["dst"],
            peer.as_str(),
            "the peer whose datagrams stopped: {gap:#}"
        );
        if local_port > 0 {
            let src = gap["src"].as_str().expect("src");
            assert!(
                src.ends_with(&format!(":{local_port}")),
                "the flow's own address: {gap:#}"
            );
        }
        let ms = gap["duration_ms"].as_u64().expect("duration_ms");
        assert!(
            (2000..4500).contains(&ms),
            "silent about 2.5 s, got {ms} ms: {gap:#}"
        );
        assert_eq!(gap["ongoing"], false, "the silence ended: {gap:#}");
        assert!(
            gap["busy_packets"].as_u64().unwrap_or(0) >= 8,
            "a steady stream before it: {gap:#}"
        );
        assert!(
            gap["sent"].as_u64().unwrap_or(0) >= 15,
            "a kept sending while it heard nothing: {gap:#}"
        );
        assert!(
            gap["sent_before"].as_u64().unwrap_or(0) >= 10,
            "and before: {gap:#}"
        );
        // b's dump (the same one here) says b kept sending to a throughout: its steady
        // stretch of sends began before the silence and went on after it
        let (start, end) = (
            gap["ts_ns"].as_u64().unwrap(),
            gap["ts_ns"].as_u64().unwrap() + ms * 1_000_000,
        );
        let b_pid = if protocol == "udp" { b_udp } else { b_raw };
        let b_flow = flows
            .as_array()
            .expect("the dump's flow table")
            .iter()
            .find(|f| f["pid"] == b_pid)
            .unwrap_or_else(|| panic!("b's flow in {flows:#}"));
        assert!(
            b_flow["sending_since_ns"].as_u64().unwrap() < start
                && b_flow["last_sent_ns"].as_u64().unwrap() > end,
            "b sent steadily across a's silence {start}..{end}: {b_flow:#}"
        );
    }
    for pid in [b_udp, b_raw] {
        assert!(
            gaps_of(&events, pid).is_empty(),
            "b heard a all along: {:#?}",
            gaps_of(&events, pid)
        );
    }
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_datagram_flow_that_stops_arriving_while_its_peer_sends_is_a_gap() {
    require_root();
    check_one_way_loss("dg4", false);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn an_ipv6_datagram_flow_that_stops_arriving_is_a_gap() {
    require_root();
    check_one_way_loss("dg6", true);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_process_holds_at_most_its_share_of_flows_and_the_rest_is_counted() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tracerd.toml");
    std::fs::write(&config, "flows_per_process = 16\n").expect("writing the config");
    let prog = program_as("heartbeat", "hb_share");
    let d = Daemon::start(&[
        "--config",
        config.to_str().expect("utf-8 path"),
        "--target-comm",
        "hb_share",
        "--gap-ms",
        "200",
    ]);
    let mut sink = Command::new(&prog);
    sink.args(["sink", "47123", "40", "5000"]);
    let sink = Heartbeat::start(sink);
    // 40 peers: a fresh source port each (the sprayer is a target too: it receives nothing)
    run_ok(Command::new(&prog).args(["spray", "::1", "47123", "40"]));
    let sink_pid = sink.pid();
    assert_eq!(sink.finish(), "received 40");
    let meta = inspect_meta(&d.dump());
    assert_eq!(
        meta["counters"]["kernel"]["flows_full"], 24,
        "16 of 40 peers fit the process's share: {}",
        meta["counters"]
    );
    let held = |meta: &serde_json::Value| {
        meta["flows"]
            .as_array()
            .map_or(0, |f| f.iter().filter(|f| f["pid"] == sink_pid).count())
    };
    assert_eq!(held(&meta), 16, "the table holds the share: {}", meta["flows"]);
    // the sink has ended: its flows leave the table at the next upkeep (every 10 s)
    std::thread::sleep(Duration::from_secs(11));
    assert_eq!(
        held(&inspect_meta(&d.dump())),
        0,
        "an ended process's flows are gone"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs); scripts/test runs it"]
fn an_error_queue_read_is_no_datagram_from_the_peer() {
    require_root();
    // twelve datagrams to a port nobody listens on, each answered by an ICMP port unreachable
    // that the sender reads from its error queue (IP_RECVERR, recvmsg MSG_ERRQUEUE: what knet
    // does), named by the datagram's destination
    let prog = program_as("heartbeat", "hb_errq");
    let d = Daemon::start(&["--target-comm", "hb_errq", "--gap-ms", "200"]);
    let out = run_ok(Command::new(&prog).args(["errors", "127.0.0.1", "47125", "12"]));
    let count = |what: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(what))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {what:?} line in {out:?}"))
    };
    // now and then a send fails (ECONNREFUSED): the kernel queues an ICMP error before it marks
    // the socket with it, and a read between the two leaves the mark to the next send
    let sent = count("sent ");
    assert!(sent >= 10, "the datagrams were sent: {out:?}");
    assert!(
        count("errors ") >= 10,
        "the errors were read from the queue: {out:?}"
    );
    let meta = inspect_meta(&d.dump());
    let flows = meta["flows"].as_array().expect("the dump's flow table");
    let flow = flows
        .iter()
        .find(|f| f["peer"] == "127.0.0.1:47125")
        .unwrap_or_else(|| panic!("the flow to the closed port in {flows:#?}"));
    assert_eq!(flow["sent"], sent, "{flow:#}");
    assert_eq!(
        flow["received"], 0,
        "an error about a datagram sent is no datagram received: {flow:#}"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs); scripts/test runs it"]
fn datagram_sockets_made_before_the_start_or_by_a_parent_are_watched() {
    require_root();
    // the kernel looks at a target's datagram calls only in processes it knows may hold a
    // datagram socket: this one made its socket before the programs were attached (only the
    // scan at start can know), and this one's parent made it before forking it
    let prog = program_as("heartbeat", "hb_known");
    let mut early = Command::new(&prog);
    early.args(["sink", "47131", "5", "20000"]);
    let early = Heartbeat::start(early);
    let d = Daemon::start(&["--target-comm", "hb_known", "--gap-ms", "200"]);
    let mut forked = Command::new(&prog);
    forked.args(["sink", "47132", "5", "20000", "fork"]);
    let forked = Heartbeat::start(forked);
    for port in ["47131", "47132"] {
        run_ok(Command::new(&prog).args(["spray", "::1", port, "5"]));
    }
    assert_eq!(early.finish(), "received 5");
    assert_eq!(forked.finish(), "received 5");
    let meta = inspect_meta(&d.dump());
    let flows = meta["flows"].as_array().expect("the dump's flow table");
    for port in [47131, 47132] {
        let received: u64 = flows
            .iter()
            .filter(|f| {
                f["local"]
                    .as_str()
                    .is_some_and(|l| l.ends_with(&format!(":{port}")))
            })
            .map(|f| f["received"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(received, 5, "the sink on port {port} received 5: {flows:#?}");
    }
}
