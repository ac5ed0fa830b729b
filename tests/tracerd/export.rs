//! `tracerd export --format perfetto`: real dumps holding every event kind, exported, and
//! read back with Perfetto's own schema (the perfetto_trace_pb2 of Perfetto's Python
//! package, which scripts/test installs into target/perfetto-venv) by
//! tests/programs/perfetto_decode.py, not with the exporter's types.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

fn export(dumps: &[&Path], output: &Path) -> Output {
    Command::new(tracerd_bin())
        .args(["export", "--format", "perfetto"])
        .args(dumps)
        .arg("-o")
        .arg(output)
        .output()
        .expect("running tracerd export")
}

fn export_ok(dumps: &[&Path], output: &Path) -> Value {
    let out = export(dumps, output);
    assert!(
        out.status.success(),
        "tracerd export failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    perfetto_decode(output)
}

/// The tracks of a decoded trace, by uuid, and checks on their hierarchy.
struct Tracks(BTreeMap<u64, Value>);

impl Tracks {
    fn of(trace: &Value) -> Tracks {
        Tracks(
            trace["tracks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (t["uuid"].as_u64().unwrap(), t.clone()))
                .collect(),
        )
    }

    /// Host tracks: no parent, neither process nor thread; uuid by name.
    fn hosts(&self) -> BTreeMap<String, u64> {
        self.0
            .values()
            .filter(|t| t["parent_uuid"].is_null() && t["process"].is_null() && t["thread"].is_null())
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["uuid"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    fn process(&self, pid: u32) -> &Value {
        let found: Vec<&Value> = self.0.values().filter(|t| t["process"]["pid"] == pid).collect();
        assert_eq!(found.len(), 1, "one track for process {pid}: {found:#?}");
        found[0]
    }

    fn thread(&self, pid: u32, tid: u32) -> u64 {
        let found: Vec<&Value> = self
            .0
            .values()
            .filter(|t| t["thread"]["pid"] == pid && t["thread"]["tid"] == tid)
            .collect();
        assert_eq!(found.len(), 1, "one track for thread {pid}/{tid}");
        found[0]["uuid"].as_u64().unwrap()
    }

    /// Every process track is under a host; every thread and connection track under the
    /// process it belongs to.
    fn check_hierarchy(&self) {
        let hosts: BTreeSet<u64> = self.hosts().into_values().collect();
        for t in self.0.values() {
            let parent = t["parent_uuid"].as_u64();
            if !t["process"].is_null() {
                assert!(
                    parent.is_some_and(|p| hosts.contains(&p)),
                    "a process under its host: {t}"
                );
            } else if !t["thread"].is_null() {
                let p = &self.0[&parent.expect("a thread has a parent")];
                assert_eq!(
                    p["process"]["pid"], t["thread"]["pid"],
                    "a thread under its process: {t}"
                );
            } else if let Some(p) = parent {
                assert!(
                    !self.0[&p]["process"].is_null(),
                    "a connection under its process: {t}"
                );
            }
        }
    }
}

/// The track events of a decoded trace.
fn events(trace: &Value) -> &Vec<Value> {
    trace["events"].as_array().unwrap()
}

/// The one event of `kind` on `track` at `ts` named `name`.
fn find<'a>(trace: &'a Value, kind: &str, track: u64, ts: u64, name: &str) -> &'a Value {
    let found: Vec<&Value> = events(trace)
        .iter()
        .filter(|e| e["type"] == kind && e["track_uuid"] == track && e["ts"] == ts && e["name"] == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {kind} '{name}' at {ts} on track {track}; the track has: {:#?}",
        events(trace)
            .iter()
            .filter(|e| e["track_uuid"] == track)
            .collect::<Vec<_>>()
    );
    found[0]
}

/// When the slice that begins at `begin` on `track` ends: the first end on that track after it.
fn end_of(trace: &Value, track: u64, begin: u64) -> u64 {
    let evs = events(trace);
    let i = evs
        .iter()
        .position(|e| e["type"] == "TYPE_SLICE_BEGIN" && e["track_uuid"] == track && e["ts"] == begin)
        .expect("the slice begins");
    evs[i + 1..]
        .iter()
        .find(|e| e["type"] == "TYPE_SLICE_END" && e["track_uuid"] == track)
        .expect("the slice ends")["ts"]
        .as_u64()
        .unwrap()
}

/// The slice's length is the event's duration (which inspect gives to the millisecond).
fn assert_lasts(trace: &Value, track: u64, e: &Value) {
    let begin = e["realtime_ns"].as_u64().unwrap();
    let ms = e["duration_ms"].as_u64().unwrap();
    let length = end_of(trace, track, begin) - begin;
    assert!(
        (ms * 1_000_000..(ms + 1) * 1_000_000).contains(&length),
        "slice of {length} ns for {ms} ms: {e}"
    );
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn export_shows_every_event_kind_on_host_process_and_thread_tracks() {
    require_root();
    let prog = eventgen_as("eg_pf");
    let uprobe = format!("{}:tracerd_test_marker", prog.display());
    let d = Daemon::start(&[
        "--target-comm",
        "eg_pf",
        "--uprobe",
        &uprobe,
        "--gap-ms",
        "1000",
        "--pause-ms",
        "300",
    ]);
    let missing = d.dir.path().join("no-such-dir/file");
    let pid_path = run_prog(&prog, &["fail-path", missing.to_str().unwrap()]);
    let readonly = d.dir.path().join("readonly.txt");
    std::fs::write(&readonly, "x").unwrap();
    let pid_fd = run_prog(&prog, &["fail-fd", readonly.to_str().unwrap()]);
    let pid_marker = run_prog(&prog, &["marker", "3"]);

    let me = std::process::id();
    let sleeper = Reaped(Command::new(&prog).args(["sleep", "20000"]).spawn().unwrap());
    std::thread::sleep(Duration::from_millis(300));
    sleeper.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(800));
    sleeper.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(100));
    sleeper.signal(libc::SIGKILL);
    let pid_sleep = sleeper.pid() as u32;
    drop(sleeper);

    let net = NetnsPair::new("x");
    let mut server = Reaped(
        net.exec(&net.b, &prog)
            .args(["tcp-server", "7000"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let client = net
        .exec(&net.a, &prog)
        .args(["tcp-client", &net.addr_b, "7000", "1500"])
        .status()
        .unwrap();
    assert!(client.success());
    let pid_server = server.pid() as u32;
    server.0.wait().unwrap();

    // stopped when the dump is taken: a pause going on
    let stuck = Reaped(Command::new(&prog).args(["sleep", "20000"]).spawn().unwrap());
    std::thread::sleep(Duration::from_millis(200));
    stuck.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(600));
    let dump = d.dump();
    drop(stuck);

    let meta = inspect_meta(&dump);
    // the events; the process environments that follow them are no timeline events
    let dumped: Vec<_> = inspect_json(&dump)
        .into_iter()
        .filter(|e| e["kind"] != "environment")
        .collect();
    let taken = meta["clock"]["realtime_ns"].as_u64().unwrap();
    let out = d.dir.path().join("trace.perfetto");
    let trace = export_ok(&[&dump], &out);

    assert_eq!(
        trace["first_packet"],
        serde_json::json!({"sequence_flags": 1, "has_clock_snapshot": true}),
        "the first packet starts the sequence and sets the clocks"
    );
    let snap = &trace["clock_snapshots"][0];
    assert_eq!(snap["clocks"][0][0], 1, "CLOCK_REALTIME");
    assert_eq!(snap["clocks"][1][0], 6, "CLOCK_BOOTTIME");
    assert_eq!(snap["clocks"][0][1], snap["clocks"][1][1], "read as one");
    assert!(
        events(&trace)
            .iter()
            .all(|e| e["clock_id"] == 1 && e["sequence"] == 1),
        "every event is stamped with the wall clock"
    );

    let tracks = Tracks::of(&trace);
    tracks.check_hierarchy();
    let hosts = tracks.hosts();
    assert_eq!(hosts.keys().cloned().collect::<Vec<_>>(), vec![hostname()]);
    let host = hosts[&hostname()];
    let dump_mark = find(&trace, "TYPE_INSTANT", host, taken, "dump");
    assert_eq!(
        dump_mark["args"]["file"],
        dump.file_name().unwrap().to_str().unwrap()
    );

    // every event of the dump is on the timeline, once, where and when it happened
    let mut seen = 0;
    for e in &dumped {
        let (pid, tid) = (
            e["pid"].as_u64().unwrap() as u32,
            e["tid"].as_u64().unwrap() as u32,
        );
        let ts = e["realtime_ns"].as_u64().unwrap();
        let process = tracks.process(pid);
        assert_eq!(process["process"]["process_name"], e["comm"]);
        assert_eq!(process["process"]["labels"][0], format!("host {}", hostname()));
        match e["kind"].as_str().unwrap() {
            "syscall_failure" => {
                let result = e["errno"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or(e["ret"].to_string());
                let name = format!("{} {result}", e["syscall"].as_str().unwrap());
                let m = find(&trace, "TYPE_INSTANT", tracks.thread(pid, tid), ts, &name);
                assert_eq!(m["categories"], serde_json::json!(["syscall_failure"]));
                for k in ["syscall", "errno", "ret", "fd", "path"] {
                    if !e[k].is_null() {
                        assert_eq!(m["args"][k], e[k], "{k} of {e}");
                    }
                }
                if !e["dst"].is_null() {
                    assert_eq!(m["args"]["peer"], e["dst"]);
                }
            }
            "function" => {
                let name = e["function"].as_str().unwrap();
                let m = find(&trace, "TYPE_INSTANT", tracks.thread(pid, tid), ts, name);
                assert_eq!(m["args"]["binary"], e["binary"]);
                assert_eq!(m["args"]["function"], e["function"]);
            }
            "process_state" if e["state"] == "paused" => {
                let track = tracks.thread(pid, tid);
                let name = format!("paused ({})", e["cause"].as_str().unwrap());
                let m = find(&trace, "TYPE_SLICE_BEGIN", track, ts, &name);
                assert_eq!(m["args"]["ongoing"], e["ongoing"]);
                assert_eq!(m["args"]["signal"], e["signal"]);
                assert_eq!(m["args"]["sender_pid"], e["sender_pid"]);
                if e["ongoing"] == true {
                    assert_eq!(
                        end_of(&trace, track, ts),
                        taken,
                        "an ongoing pause ends at the dump"
                    );
                } else {
                    assert_lasts(&trace, track, e);
                }
            }
            "process_state" => {
                let name = match e["state"].as_str().unwrap() {
                    "exited" => format!("exited (code {})", e["exit_code"]),
                    _ => format!("killed by {}", e["signal"].as_str().unwrap()),
                };
                let m = find(&trace, "TYPE_INSTANT", tracks.thread(pid, tid), ts, &name);
                assert_eq!(m["args"]["signal"], e["signal"]);
                assert_eq!(m["args"]["sender_pid"], e["sender_pid"]);
            }
            "network_gap" => {
                let conn = format!(
                    "{} {} -> {}",
                    e["protocol"].as_str().unwrap(),
                    e["src"].as_str().unwrap(),
                    e["dst"].as_str().unwrap()
                );
                let found: Vec<(&u64, &Value)> = tracks
                    .0
                    .iter()
                    .filter(|(_, t)| t["name"] == conn.as_str() && t["parent_uuid"] == process["uuid"])
                    .collect();
                assert_eq!(found.len(), 1, "one track for {conn} under process {pid}");
                let track = *found[0].0;
                let m = find(&trace, "TYPE_SLICE_BEGIN", track, ts, "network gap");
                assert_eq!(m["args"]["packets_before"], e["packets"]);
                if e["ongoing"] == true {
                    assert_eq!(end_of(&trace, track, ts), taken);
                } else {
                    assert_lasts(&trace, track, e);
                }
            }
            other => panic!("unknown kind {other}"),
        }
        seen += 1;
    }
    let written = events(&trace)
        .iter()
        .filter(|e| e["type"] != "TYPE_SLICE_END" && e["track_uuid"] != host)
        .count();
    assert_eq!(written, seen, "nothing but the dump's events");

    // the kinds this test made, by name
    let named = |pid: u32, name: &str| -> Vec<&Value> {
        let process = tracks.process(pid)["uuid"].as_u64().unwrap();
        let under: BTreeSet<u64> = tracks
            .0
            .iter()
            .filter(|(_, t)| t["parent_uuid"] == process)
            .map(|(u, _)| *u)
            .collect();
        events(&trace)
            .iter()
            .filter(|e| under.contains(&e["track_uuid"].as_u64().unwrap()) && e["name"] == name)
            .collect()
    };
    let failed = named(pid_path, "openat ENOENT");
    assert!(failed
        .iter()
        .any(|m| m["args"]["path"] == missing.to_str().unwrap()));
    let write = named(pid_fd, "write EBADF");
    assert_eq!(write.len(), 1);
    assert_eq!(write[0]["args"]["path"], readonly.to_str().unwrap());
    assert!(write[0]["args"]["fd"].as_i64().unwrap() >= 3);
    assert_eq!(named(pid_marker, "tracerd_test_marker").len(), 3);
    assert_eq!(named(pid_path, "exited (code 0)").len(), 1);
    let pause = named(pid_sleep, "paused (stopped)");
    assert_eq!(pause.len(), 1);
    assert_eq!(pause[0]["args"]["signal"], "SIGSTOP");
    assert_eq!(pause[0]["args"]["sender_pid"], me);
    let kill = named(pid_sleep, "killed by SIGKILL");
    assert_eq!(kill.len(), 1);
    assert_eq!(kill[0]["args"]["sender_pid"], me);
    assert!(
        !named(pid_server, "network gap").is_empty(),
        "the silence of 1.5 s"
    );
    assert!(
        dumped
            .iter()
            .any(|e| e["state"] == "paused" && e["ongoing"] == true),
        "the stopped process is a pause going on"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn export_refuses_unreadable_dumps_and_bad_output_in_one_line() {
    require_root();
    let d = Daemon::start(&["--target-comm", "eg_pf_none"]);
    let dump = d.dump();
    let dir = tempfile::tempdir().unwrap();
    let not_a_dump = dir.path().join("notes.txt");
    std::fs::write(&not_a_dump, "hello").unwrap();
    let out = dir.path().join("out.perfetto");
    let cases: [(Vec<&Path>, PathBuf, String); 5] = [
        (
            vec![&dump, Path::new("/nonexistent/x.tdump")],
            out.clone(),
            "/nonexistent/x.tdump".into(),
        ),
        (vec![&not_a_dump], out.clone(), "not a tracerd dump".into()),
        (
            vec![&dump],
            dir.path().join("missing/out.perfetto"),
            "missing/out.perfetto".into(),
        ),
        (vec![&dump], dir.path().to_path_buf(), "is a directory".into()),
        (
            vec![&dump],
            "/proc/out.perfetto".into(),
            "/proc/out.perfetto".into(),
        ),
    ];
    for (dumps, output, needle) in cases {
        let o = export(&dumps, &output);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{dumps:?} -o {}", output.display());
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with("tracerd: error: ") && err.contains(&needle),
            "{needle} in: {err}"
        );
        assert!(!out.exists(), "nothing written");
    }
    let o = export(&[], &out);
    assert!(!o.status.success(), "a dump is required");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn export_merges_dumps_of_two_hosts_on_the_wall_clock_and_writes_each_event_once() {
    require_root();
    let prog_a = eventgen_as("eg_pfa");
    let prog_b = eventgen_as("eg_pfb");
    let a = Daemon::start(&["--target-comm", "eg_pfa"]);
    // the second host: its own UTS namespace, so its dumps name another host
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new("unshare");
    cmd.args(["--uts", "sh", "-c", "hostname trd-export-b && exec \"$0\" \"$@\""])
        .arg(tracerd_bin())
        .arg("run")
        .arg("--dump-dir")
        .arg(dir.path().join("dumps"))
        .arg("--control-socket")
        .arg(dir.path().join("control.sock"))
        .args(["--target-comm", "eg_pfb"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let b = Daemon::spawn(cmd, dir);

    let mut order = Vec::new();
    for i in 0..3 {
        for (prog, tag) in [(&prog_a, "a"), (&prog_b, "b")] {
            let path = format!("/nonexistent/eg_pf/{tag}{i}");
            run_prog(prog, &["fail-path", &path]);
            order.push(path);
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    let a1 = a.dump();
    run_prog(&prog_a, &["fail-path", "/nonexistent/eg_pf/a-late"]);
    order.push("/nonexistent/eg_pf/a-late".into());
    let a2 = a.dump();
    let b1 = b.dump();
    assert_eq!(inspect_meta(&b1)["host"], "trd-export-b");

    let out = b.dir.path().join("merged.perfetto");
    let trace = export_ok(&[&a1, &b1, &a2], &out);
    let tracks = Tracks::of(&trace);
    tracks.check_hierarchy();
    let hosts = tracks.hosts();
    assert_eq!(
        hosts.keys().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from([hostname(), "trd-export-b".to_string()])
    );

    // when each failure happened, by path, as inspect tells it (every dump of host a holds
    // the failures before it: a2 holds a1's again, mapped to wall time with a2's own clock
    // reading, a few ns apart)
    let mut when: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (dump, host) in [(&a1, hostname()), (&a2, hostname()), (&b1, "trd-export-b".into())] {
        for e in inspect_json(dump) {
            if let Some(p) = e["path"]
                .as_str()
                .filter(|p| p.starts_with("/nonexistent/eg_pf/"))
            {
                let pid = e["pid"].as_u64().unwrap() as u32;
                assert_eq!(
                    tracks.process(pid)["parent_uuid"],
                    hosts[&host],
                    "{p} under host {host}"
                );
                when.entry(p.to_string())
                    .or_default()
                    .push(e["realtime_ns"].as_u64().unwrap());
            }
        }
    }
    let on_timeline: Vec<(u64, String)> = events(&trace)
        .iter()
        .filter_map(|e| {
            let p = e["args"]["path"].as_str()?;
            p.starts_with("/nonexistent/eg_pf/")
                .then(|| (e["ts"].as_u64().unwrap(), p.to_string()))
        })
        .collect();
    assert_eq!(
        on_timeline.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
        order,
        "each failure once, in the order they happened across both hosts"
    );
    for (ts, p) in &on_timeline {
        assert!(
            when[p].contains(ts),
            "{p} at its wall-clock time as a dump holding it says: {ts} not in {:?}",
            when[p]
        );
    }
    let dumps_on = |host: &str| {
        events(&trace)
            .iter()
            .filter(|e| e["track_uuid"] == hosts[host] && e["name"] == "dump")
            .count()
    };
    assert_eq!((dumps_on(&hostname()), dumps_on("trd-export-b")), (2, 1));
}
