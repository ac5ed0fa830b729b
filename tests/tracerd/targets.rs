//! Which processes are recorded and what a dump holds: targets by comm (others are not
//! recorded), the descendants of a target pid, the window across two dumps, and the names
//! and command lines of children that renamed themselves.

use std::io::{BufRead, BufReader, Write};
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

/// Starts `renamer ARGS`; returns it (killed with its child on drop) and its child's pid,
/// printed once the child has taken its new title.
fn renamed_child(prog: &Path, args: &[&str]) -> (Reaped, u32) {
    let mut parent = Reaped(
        Command::new(prog)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning renamer"),
    );
    let mut line = String::new();
    let stdout = parent.0.stdout.take().expect("piped stdout");
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("reading renamer");
    let pid = line
        .trim()
        .strip_prefix("child ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("renamer {args:?} printed {line:?}"));
    (parent, pid)
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_child_that_renamed_itself_shows_its_new_name_and_command_line() {
    require_root();
    let prog = program_as("renamer", "rn_parent");
    let started = |mode: &str, title: &str, comm: &[&str]| {
        let mut argv = vec![prog.to_str().unwrap().to_string(), mode.into(), title.into()];
        argv.extend(comm.iter().map(|c| c.to_string()));
        serde_json::json!(argv)
    };
    let d = Daemon::start(&["--target-comm", "rn_parent"]);
    // renamed (prctl) and a new title, alive at the dump
    let (_a, stays) = renamed_child(&prog, &["stay", "rn-stays: bgsave 1", "rn_stays"]);
    // the same, gone before the dump: only the kernel's record of the rename tells
    let (_b, exits) = renamed_child(&prog, &["exit", "rn-exits: bgsave 2", "rn_exits"]);
    // a new title alone: no syscall; /proc at the dump tells
    let (_c, titled) = renamed_child(&prog, &["stay", "rn-titled: worker"]);
    let meta = inspect_meta(&d.dump());
    let procs = meta["processes"].as_array().expect("a process table");
    let of = |pid: u32| {
        procs
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("pid {pid} in the table: {procs:#?}"))
    };

    let p = of(stays);
    assert_eq!(p["comm"], "rn_stays", "{p:#}");
    assert_eq!(p["cmdline"], serde_json::json!(["rn-stays: bgsave 1"]), "{p:#}");
    assert_eq!(p["exec_comm"], "rn_parent", "{p:#}");
    assert_eq!(
        p["exec_cmdline"],
        started("stay", "rn-stays: bgsave 1", &["rn_stays"]),
        "{p:#}"
    );

    let p = of(exits);
    assert!(p["exit_ns"].is_u64(), "it exited before the dump: {p:#}");
    assert_eq!(p["comm"], "rn_exits", "{p:#}");
    assert_eq!(p["cmdline"], serde_json::json!(["rn-exits: bgsave 2"]), "{p:#}");
    assert_eq!(p["exec_comm"], "rn_parent", "{p:#}");
    assert_eq!(
        p["exec_cmdline"],
        started("exit", "rn-exits: bgsave 2", &["rn_exits"]),
        "{p:#}"
    );

    let p = of(titled);
    assert_eq!(p["comm"], "rn_parent", "{p:#}");
    assert!(p.get("exec_comm").is_none(), "it kept its name: {p:#}");
    assert_eq!(p["cmdline"], serde_json::json!(["rn-titled: worker"]), "{p:#}");
    assert_eq!(
        p["exec_cmdline"],
        started("stay", "rn-titled: worker", &[]),
        "{p:#}"
    );
}
