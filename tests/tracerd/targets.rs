//! Which processes are recorded and what a dump holds: targets by comm (others are not
//! recorded), the descendants of a target pid, and the window across two dumps.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn second_dump_holds_later_events_and_filters_non_targets() {
    require_root();
    let prog = eventgen_as("eg_twice");
    let other = eventgen_as("eg_untraced");
    let d = Daemon::start(&["--target-comm", "eg_twice"]);
    let first = d.dir.path().join("first");
    let second = d.dir.path().join("second");
    let pid1 = run_prog(&prog, &["fail-path", first.to_str().unwrap()]);
    let untraced = run_prog(&other, &["fail-path", first.to_str().unwrap()]);
    let dump1 = d.dump();
    let pid2 = run_prog(&prog, &["fail-path", second.to_str().unwrap()]);
    let dump2 = d.dump();
    assert_ne!(dump1, dump2);

    let e1 = inspect_json(&dump1);
    let e2 = inspect_json(&dump2);
    let has = |ev: &[serde_json::Value], pid: u32, p: &Path| {
        ev.iter()
            .any(|e| e["pid"] == pid && e["path"] == p.to_str().unwrap())
    };
    assert!(has(&e1, pid1, &first));
    assert!(!has(&e1, pid2, &second));
    assert!(has(&e2, pid1, &first), "the window still holds the earlier event");
    assert!(has(&e2, pid2, &second));
    assert!(
        !e2.iter().any(|e| e["pid"] == untraced),
        "processes that are not targets are not recorded"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn descendants_of_a_target_pid_are_traced() {
    require_root();
    let prog = eventgen_as("eg_child");
    let mut shell = Command::new("sh")
        .args(["-c", "read go; exec \"$0\" fork-fail \"$1\""])
        .arg(&prog)
        .arg("/nonexistent/eg_child")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let d = Daemon::start(&["--target-pid", &shell.id().to_string()]);
    shell.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(shell.wait().unwrap().success());
    let events = inspect_json(&d.dump());
    let failure = events
        .iter()
        .find(|e| e["kind"] == "syscall_failure" && e["path"] == "/nonexistent/eg_child")
        .expect("the forked grandchild's failure is recorded");
    assert_ne!(failure["pid"], shell.id(), "it comes from the forked child");
}
