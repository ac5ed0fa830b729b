//! Tests own their resources: a replay beside another reproducer's network namespaces and
//! beside BPF links another process holds (a tracerd the test starts outside its own process
//! tree) passes its leak check, which counts only the names made from this test process's
//! run ids (REPRODUCER_RUN_ID_BASE) and the links its own processes hold.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::replay::*;

/// Network namespaces named as a reproducer that is not this test names its runs', and a
/// tracerd daemon that is no descendant of the test (`setsid -f`); removed and stopped on drop.
struct Foreign {
    netns: Vec<String>,
    dir: tempfile::TempDir,
    tracerd: Option<u32>,
}

impl Foreign {
    fn namespaces() -> Foreign {
        let netns = vec!["rpr199999".to_string(), "rp199999-foreign".to_string()];
        for ns in &netns {
            run_ok(Command::new("ip").args(["netns", "add", ns]));
        }
        Foreign {
            netns,
            dir: tempfile::tempdir().unwrap(),
            tracerd: None,
        }
    }

    /// Starts tracerd in a session of its own whose parent exits at once: init's child,
    /// holding BPF links; returns once it answers `tracerd status`.
    fn start_tracerd(&mut self) {
        let socket = self.dir.path().join("control.sock");
        let log = std::fs::File::create(self.dir.path().join("tracerd.log")).unwrap();
        let status = Command::new("setsid")
            .arg("-f")
            .arg(tracerd_bin())
            .args(["run", "--target-comm", "foreign_none", "--dump-dir"])
            .arg(self.dir.path().join("dumps"))
            .arg("--control-socket")
            .arg(&socket)
            .stderr(log)
            .status()
            .unwrap();
        assert!(status.success());
        let start = Instant::now();
        loop {
            let out = Command::new(tracerd_bin())
                .args(["status", "--json", "--control-socket"])
                .arg(&socket)
                .output()
                .unwrap();
            if out.status.success() {
                let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                self.tracerd = s["pid"].as_u64().map(|p| p as u32);
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the foreign tracerd never answered"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        if let Some(pid) = self.tracerd {
            // SAFETY: kill(2) of the daemon this test started.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            let start = Instant::now();
            while std::path::Path::new(&format!("/proc/{pid}")).exists()
                && start.elapsed() < Duration::from_secs(30)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        for ns in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn all_links() -> BTreeSet<u64> {
    let out = Command::new("bpftool")
        .args(["-j", "link", "list"])
        .output()
        .unwrap();
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["id"].as_u64())
        .collect()
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_replay_beside_another_reproducers_namespaces_and_links_leaves_nothing_of_its_own() {
    require_root();
    let mut foreign = Foreign::namespaces();
    let links = own_links();
    let before = all_links();
    // an address: the run gets namespaces of its own (rpr{id}, rp{id}-n1)
    let scenario = format!(
        r#"name = "ownership"
run_timeout_s = 20
[[nodes]]
name = "n1"
command = ["FAULTY", "writes", "{{workdir}}/n1"]
address = "10.218.0.11"
[workload]
command = {}
[oracle]
command = ["sh", "-c", "grep -q 'write 3 to a: No space' {{workdir}}/n1.log"]
"#,
        wait_for("n1", "write 5 to b")
    );
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"ENOSPC\"\npath = \"{workdir}/n1/a\"\nnth = 3\n";
    let (_dir, sc, sch) = files(&scenario, schedule);
    // the other process's links come while the replay runs
    foreign.start_tracerd();
    let (seen_tx, seen) = std::sync::mpsc::channel();
    let (stop_tx, stop) = std::sync::mpsc::channel::<()>();
    let watcher = std::thread::spawn(move || {
        while stop.try_recv().is_err() {
            let netns = run_ok(Command::new("ip").args(["netns", "list"]));
            for ns in netns.lines().filter_map(|l| l.split_whitespace().next()) {
                if is_own_run_name(ns) {
                    let _ = seen_tx.send(ns.to_string());
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let out = reproducer(&[
        "replay",
        "--scenario",
        sc.to_str().unwrap(),
        "--schedule",
        sch.to_str().unwrap(),
        "--runs",
        "2",
    ]);
    let _ = stop_tx.send(());
    watcher.join().unwrap();
    let t = text(&out);
    assert!(t.contains("replay rate: 2/2"), "{t}");
    let named: BTreeSet<String> = seen.try_iter().collect();
    assert!(
        named.iter().any(|n| n.starts_with("rpr")) && named.iter().any(|n| n.ends_with("-n1")),
        "the runs' namespaces are named from the test's run ids {:?}: {named:?}",
        own_run_ids()
    );
    // what a check of every rp namespace and every link would have called stray
    let netns = run_ok(Command::new("ip").args(["netns", "list"]));
    assert!(netns.contains("rp199999-foreign"), "{netns}");
    assert!(
        all_links().difference(&before).count() > 0,
        "the foreign tracerd holds links the test did not make"
    );
    assert_clean(&links);
    // and the check sees a namespace of the test's own
    let own = format!("rp{}-leak", own_run_ids().start);
    run_ok(Command::new("ip").args(["netns", "add", &own]));
    let caught = std::panic::catch_unwind(|| assert_clean(&links));
    let _ = Command::new("ip").args(["netns", "del", &own]).status();
    assert!(
        caught.is_err(),
        "a namespace named from the test's run ids is stray"
    );
}
