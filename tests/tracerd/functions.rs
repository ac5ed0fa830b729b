//! Functions probed with uprobes: the functions of one binary share one link where the
//! kernel has uprobe-multi, calls counted without an event each, and the functions of a
//! stripped Go binary (found in its .gopclntab); a function past the call limit detached.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn counts_function_calls_and_syscalls_without_function_events() {
    require_root();
    let prog = eventgen_as("eg_count");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("count.toml");
    std::fs::write(&config, "count_syscalls = true\nfunction_events = false\n").unwrap();
    let uprobe = format!("{}:tracerd_test_marker", prog.display());
    let d = Daemon::start(&[
        "--config",
        config.to_str().unwrap(),
        "--target-comm",
        "eg_count",
        "--uprobe",
        &uprobe,
    ]);
    const N: u64 = 37;
    const M: u64 = 250;
    let pid = run_prog(&prog, &["calls", &N.to_string(), &M.to_string()]);
    let dump = d.dump();

    let meta = inspect_meta(&dump);
    assert_eq!(
        meta["function_calls"],
        serde_json::json!([N]),
        "every call counted: {}",
        meta["function_calls"]
    );
    assert_eq!(meta["unattached_functions"], serde_json::json!([]));
    let counts = meta["syscall_counts"]
        .as_array()
        .expect("syscall_counts is a list");
    let getppid = counts
        .iter()
        .find(|c| c["pid"] == pid && c["syscall"] == "getppid")
        .unwrap_or_else(|| panic!("getppid of pid {pid} is counted: {counts:#?}"));
    assert!(getppid["count"].as_u64().unwrap() >= M, "{getppid}");
    assert!(counts.iter().all(|c| c["count"].as_u64().unwrap() > 0));
    assert_eq!(meta["counters"]["kernel"]["syscall_counts_full"], 0);
    assert_eq!(meta["config"]["count_syscalls"], true);

    let events = inspect_json(&dump);
    assert!(
        events.iter().all(|e| e["kind"] != "function"),
        "function_events = false records no hits"
    );
    assert!(
        !events_of(&events, "process_state", pid).is_empty(),
        "other events are still recorded"
    );
    let text = run_ok(Command::new(tracerd_bin()).arg("inspect").arg(&dump));
    assert!(
        text.contains(&format!("counted: {N} calls of 1/1 functions")),
        "{text}"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn functions_of_one_binary_share_a_link_and_are_counted_and_recorded() {
    require_root();
    let prog = eventgen_as("eg_multi");
    let marker = format!("{}:tracerd_test_marker", prog.display());
    let other = format!("{}:tracerd_test_other", prog.display());
    let d = Daemon::start(&[
        "--target-comm",
        "eg_multi",
        "--uprobe",
        &marker,
        "--uprobe",
        &other,
    ]);
    let perf_event_fds = std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("perf_event"))
        .count();
    let pid = run_prog(&prog, &["marker", "5"]);
    let dump = d.dump();
    let meta = inspect_meta(&dump);
    assert_eq!(meta["function_calls"], serde_json::json!([5, 1]));
    assert_eq!(
        meta["syscall_counts"],
        serde_json::json!([]),
        "count_syscalls is off by default"
    );
    let events = inspect_json(&dump);
    let hits = events_of(&events, "function", pid);
    assert_eq!(
        hits.iter()
            .filter(|e| e["function"] == "tracerd_test_marker")
            .count(),
        5
    );
    assert_eq!(
        hits.iter()
            .filter(|e| e["function"] == "tracerd_test_other")
            .count(),
        1
    );
    if tracerd::kernel::uprobe_multi_links() {
        assert_eq!(
            perf_event_fds, 0,
            "one uprobe-multi link for both functions, not a perf event per uprobe"
        );
    } else {
        assert_eq!(
            perf_event_fds, 2,
            "no uprobe-multi links on this kernel: one uprobe per function"
        );
    }
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_function_past_the_call_limit_is_detached_and_the_others_still_counted() {
    require_root();
    let prog = eventgen_as("eg_detach");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("detach.toml");
    std::fs::write(
        &config,
        "function_events = false\ndetach_functions_after_calls = 1000\n",
    )
    .unwrap();
    let marker = format!("{}:tracerd_test_marker", prog.display());
    let other = format!("{}:tracerd_test_other", prog.display());
    let d = Daemon::start(&[
        "--config",
        config.to_str().unwrap(),
        "--target-comm",
        "eg_detach",
        "--uprobe",
        &marker,
        "--uprobe",
        &other,
    ]);
    // the marker goes past the limit in the first run and is detached before the second:
    // the second run's calls of it are not counted, the other function's are
    run_prog(&prog, &["marker", "5000"]);
    d.wait_for_log("detached 1 functions", Duration::from_secs(10));
    run_prog(&prog, &["marker", "5000"]);
    let meta = inspect_meta(&d.dump());
    assert_eq!(
        meta["function_calls"],
        serde_json::json!([5000, 2]),
        "{}",
        d.log_text()
    );
    assert_eq!(meta["detached_functions"], serde_json::json!([0]));
    assert_eq!(meta["unattached_functions"], serde_json::json!([]));
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn functions_of_a_stripped_go_binary_are_counted() {
    require_root();
    let prog = go_program("gonode");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("count.toml");
    std::fs::write(&config, "function_events = false\n").unwrap();
    let marker = format!("{}:main.tracerdTestMarker", prog.display());
    let method = format!("{}:main.(*store).storeSnapshot", prog.display());
    let d = Daemon::start(&[
        "--config",
        config.to_str().unwrap(),
        "--target-comm",
        "gonode",
        "--uprobe",
        &marker,
        "--uprobe",
        &method,
    ]);
    let work = tempfile::tempdir().unwrap();
    let status = Command::new(&prog)
        .args(["calls", "7"])
        .current_dir(work.path())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let meta = inspect_meta(&d.dump());
    // a call that grows the goroutine's stack runs the function's entry twice (Go restarts
    // the function after growing the stack), so a count may be higher by one or two
    let calls: Vec<u64> = meta["function_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert!(
        calls.len() == 2 && calls.iter().all(|&n| (7..=9).contains(&n)),
        "Go functions from .gopclntab are probed at their entry: {calls:?}"
    );

    drop(d);
    // one function alone takes the single-uprobe path, which must resolve Go names too
    let single = Daemon::start(&["--target-comm", "gonode", "--uprobe", &method]);
    let status = Command::new(&prog)
        .args(["calls", "3"])
        .current_dir(work.path())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let calls = inspect_meta(&single.dump())["function_calls"][0]
        .as_u64()
        .unwrap();
    assert!((3..=5).contains(&calls), "{calls}");
    let sock = dir.path().join("s.sock");
    let err = tracerd_fails(&[
        "run",
        "--uprobe",
        &format!("{}:main.noSuchFunction", prog.display()),
        "--control-socket",
        sock.to_str().unwrap(),
    ]);
    assert!(
        err.contains("main.noSuchFunction") && err.contains(".gopclntab") && !err.contains("nm -D"),
        "{err}"
    );
}
