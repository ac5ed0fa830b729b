//! System tests of tracerd on the real kernel, as root: real BPF programs, real processes,
//! real network namespaces. Each test targets its own copy of tests/programs/eventgen.c
//! (a distinct comm), so tests do not see each other's processes.
mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn only<'a>(v: Vec<&'a serde_json::Value>, what: &str) -> &'a serde_json::Value {
    assert_eq!(v.len(), 1, "expected exactly one {what}, got {v:#?}");
    v[0]
}

#[test]
fn records_every_event_kind_with_its_fields() {
    require_root();
    let prog = eventgen_as("eg_kinds");
    let uprobe = format!("{}:tracerd_test_marker", prog.display());
    let d = Daemon::start(&[
        "--target-comm",
        "eg_kinds",
        "--uprobe",
        &uprobe,
        "--gap-ms",
        "1000",
        "--pause-ms",
        "500",
    ]);

    let missing = d.dir.path().join("no-such-dir/file");
    let pid_path = run_prog(&prog, &["fail-path", missing.to_str().unwrap()]);
    let readonly = d.dir.path().join("readonly.txt");
    std::fs::write(&readonly, "x").unwrap();
    let pid_fd = run_prog(&prog, &["fail-fd", readonly.to_str().unwrap()]);
    let pid_marker = run_prog(&prog, &["marker", "3"]);

    let mut sleeper = Command::new(&prog).args(["sleep", "20000"]).spawn().unwrap();
    let pid_sleep = sleeper.id();
    std::thread::sleep(Duration::from_millis(300));
    let me = std::process::id();
    unsafe { libc::kill(pid_sleep as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(1000));
    unsafe { libc::kill(pid_sleep as i32, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(pid_sleep as i32, libc::SIGKILL) };
    sleeper.wait().unwrap();

    let net = NetnsPair::new("k");
    let mut server = net
        .exec(&net.b, &prog)
        .args(["tcp-server", "7000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let client_status = net
        .exec(&net.a, &prog)
        .args(["tcp-client", &net.addr_b, "7000", "1500"])
        .status()
        .unwrap();
    assert!(client_status.success());
    let server_pid = server.id();
    server.wait().unwrap();

    let dump = d.dump();
    let events = inspect_json(&dump);

    let keys: BTreeSet<String> = events[0].as_object().unwrap().keys().cloned().collect();
    for k in [
        "ts_ns",
        "kind",
        "pid",
        "tid",
        "comm",
        "syscall",
        "errno",
        "ret",
        "fd",
        "path",
        "binary",
        "function",
        "src",
        "dst",
        "duration_ms",
        "packets",
        "state",
        "exit_code",
        "signal",
    ] {
        assert!(keys.contains(k), "inspect --json lacks {k}");
    }
    for e in &events {
        let k: BTreeSet<String> = e.as_object().unwrap().keys().cloned().collect();
        assert_eq!(k, keys, "every event carries every key (null when unknown)");
    }

    let by_path: Vec<_> = events_of(&events, "syscall_failure", pid_path)
        .into_iter()
        .filter(|e| e["path"] == missing.to_str().unwrap())
        .collect();
    let e = only(by_path, "failed openat of the missing path");
    assert_eq!(e["syscall"], "openat");
    assert_eq!(e["errno"], "ENOENT");
    assert_eq!(e["ret"], -2);
    assert_eq!(e["comm"], "eg_kinds");

    let writes: Vec<_> = events_of(&events, "syscall_failure", pid_fd)
        .into_iter()
        .filter(|e| e["syscall"] == "write")
        .collect();
    let e = only(writes, "failed write");
    assert_eq!(e["errno"], "EBADF");
    assert_eq!(
        e["path"],
        readonly.to_str().unwrap(),
        "the fd resolves to the file it was opened from"
    );
    assert!(e["fd"].as_i64().unwrap() >= 3);

    let hits = events_of(&events, "function", pid_marker);
    assert_eq!(
        hits.len(),
        3,
        "one event per call of tracerd_test_marker: {hits:#?}"
    );
    assert_eq!(hits[0]["function"], "tracerd_test_marker");
    assert_eq!(hits[0]["binary"], prog.to_str().unwrap());

    let states = events_of(&events, "process_state", pid_sleep);
    let paused = only(
        states
            .iter()
            .copied()
            .filter(|e| e["state"] == "paused")
            .collect(),
        "pause",
    );
    let ms = paused["duration_ms"].as_u64().unwrap();
    assert!((900..5000).contains(&ms), "pause of about 1 s, got {ms} ms");
    assert_eq!(paused["cause"], "stopped");
    assert_eq!(paused["signal"], "SIGSTOP");
    assert_eq!(paused["sender_pid"], me);
    let killed = only(
        states
            .iter()
            .copied()
            .filter(|e| e["state"] == "killed")
            .collect(),
        "kill",
    );
    assert_eq!(killed["signal"], "SIGKILL");
    assert_eq!(killed["sender_pid"], me, "the kill names its sender");

    let exited = only(events_of(&events, "process_state", pid_path), "exit");
    assert_eq!(exited["state"], "exited");
    assert_eq!(exited["exit_code"], 0);

    let gaps: Vec<_> = events
        .iter()
        .filter(|e| e["kind"] == "network_gap" && e["duration_ms"].as_u64().unwrap_or(0) >= 1000)
        .collect();
    assert!(!gaps.is_empty(), "a silence of 1.5 s is a gap: {events:#?}");
    let server_gap = gaps
        .iter()
        .find(|e| e["pid"] == server_pid)
        .expect("the accepting side records the gap");
    assert_eq!(server_gap["src"], format!("{}:7000", net.addr_b));
    assert!(server_gap["dst"].as_str().unwrap().starts_with(&net.addr_a));
    assert!(server_gap["packets"].as_u64().unwrap() >= 1);
    assert!(server_gap["duration_ms"].as_u64().unwrap() < 5000);
}

/// A non-blocking connect that is refused on loopback is closed before connect() returns
/// EINPROGRESS: it must not stay watched and show up as a silent connection at dump time.
#[test]
fn a_refused_non_blocking_connect_is_not_a_gap() {
    require_root();
    let prog = eventgen_as("eg_refused");
    let d = Daemon::start(&["--target-comm", "eg_refused", "--gap-ms", "300"]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // free once dropped
    let mut child = Command::new(&prog)
        .args(["refused-connect", &port.to_string(), "3000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let dump = d.dump(); // the socket is still open, its connect long refused
    let pid = child.id();
    child.wait().unwrap();
    let events = inspect_json(&dump);
    let failures = events_of(&events, "syscall_failure", pid);
    assert!(
        failures.iter().any(|e| e["syscall"] == "connect"),
        "{line}: the connect failed ({failures:#?})"
    );
    let gaps = events_of(&events, "network_gap", pid);
    assert!(
        gaps.is_empty(),
        "a refused connect is not a silent connection: {gaps:#?}"
    );
}

#[test]
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

/// Every thread of a process passes the exit hook; the process's end is recorded once, with
/// the exit code, from the thread that ends the group (signal->live at 0; the claim in
/// `exited` guards against siblings that see 0 too, a race this test does not provoke).
#[test]
fn a_process_with_threads_ends_once_with_its_exit_code() {
    require_root();
    let prog = eventgen_as("eg_threads");
    let d = Daemon::start(&["--target-comm", "eg_threads"]);
    let mut pids = Vec::new();
    for _ in 0..20 {
        let mut child = Command::new(&prog).args(["threads", "6"]).spawn().expect("spawn");
        pids.push(child.id());
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(3), "eventgen threads: {status}");
    }
    let events = inspect_json(&d.dump());
    for pid in pids {
        let end = only(events_of(&events, "process_state", pid), "end of the process");
        assert_eq!(end["state"], "exited");
        assert_eq!(end["exit_code"], 3);
    }
}

/// The probe agrees with the kernel's version (uprobe-multi links came with Linux 6.6), and
/// the daemon says which paths it chose.
#[test]
fn kernel_probes_choose_the_paths_before_loading() {
    require_root();
    let release = tracerd::kernel::release();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    assert_eq!(
        tracerd::kernel::uprobe_multi_links(),
        version >= (6, 6),
        "uprobe-multi probe on {release}"
    );
    let d = Daemon::start(&["--target-comm", "eg_no_such"]);
    let log = d.log_text();
    assert!(
        log.contains(&tracerd::kernel::summary()),
        "the daemon logs the chosen paths: {log}"
    );
    let printed = run_ok(Command::new(tracerd_bin()).arg("kernel"));
    assert_eq!(printed.trim(), tracerd::kernel::summary());
    // scripts/test-kernels says which kernels must take the fexit path (Debian 12's)
    if let Ok(expected) = std::env::var("TRACERD_EXPECT_FEXIT") {
        assert_eq!(
            tracerd::kernel::fexit_programs(),
            expected == "1",
            "fexit programs on {release}"
        );
    }
    let hook = if tracerd::kernel::fexit_programs() {
        "failed syscalls caught by fexit programs on"
    } else {
        "failed syscalls caught by the sys_exit tracepoint"
    };
    assert!(
        log.contains(hook),
        "the daemon says how it catches failures: {log}"
    );
}

/// (syscall, errno, path) of the failed syscalls of `pid` in a dump.
fn failures_of(dump: &Path, pid: u32) -> BTreeSet<(String, String, String)> {
    inspect_json(dump)
        .iter()
        .filter(|e| e["kind"] == "syscall_failure" && e["pid"] == pid)
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (text("syscall"), text("errno"), text("path"))
        })
        .collect()
}

#[test]
fn failed_syscalls_are_the_same_on_either_hook() {
    require_root();
    let prog = eventgen_as("eg_hooks");
    let dir = tempfile::tempdir().unwrap();
    let forced = dir.path().join("tracepoint.toml");
    std::fs::write(&forced, "syscall_hook = \"tracepoint\"\n").unwrap();
    let missing = dir.path().join("no-such-dir/file");
    let readonly = dir.path().join("readonly.txt");
    std::fs::write(&readonly, "x").unwrap();
    let mut seen = Vec::new();
    for config in [None, Some(&forced)] {
        let mut args = vec!["--target-comm", "eg_hooks"];
        if let Some(c) = config {
            args.extend(["--config", c.to_str().unwrap()]);
        }
        let d = Daemon::start(&args);
        let log = d.log_text();
        let fexit = log.contains("caught by fexit programs");
        assert_eq!(
            fexit,
            config.is_none() && tracerd::kernel::fexit_programs(),
            "{log}"
        );
        let pids = [
            run_prog(&prog, &["fail-path", missing.to_str().unwrap()]),
            run_prog(&prog, &["fail-fd", readonly.to_str().unwrap()]),
            // a sleep with a bad time: EINVAL of a syscall the fexit set leaves out
            run_prog(&prog, &["bad-sleep", "1"]),
        ];
        let dump = d.dump();
        seen.push((fexit, pids.map(|p| failures_of(&dump, p))));
    }
    for (fexit, [path, fd, sleep]) in &seen {
        let hook = if *fexit { "fexit" } else { "tracepoint" };
        let path_failure = (
            "openat".to_string(),
            "ENOENT".to_string(),
            dir.path().join("no-such-dir/file").display().to_string(),
        );
        assert!(path.contains(&path_failure), "{hook}: {path:?}");
        let fd_failure = (
            "write".to_string(),
            "EBADF".to_string(),
            readonly.display().to_string(),
        );
        assert!(fd.contains(&fd_failure), "{hook}: {fd:?}");
        let sleep_failure = ("clock_nanosleep".to_string(), "EINVAL".to_string(), String::new());
        // waits and sleeps are not in the fexit set (bpf/fexit_syscalls.h)
        assert_eq!(sleep.contains(&sleep_failure), !fexit, "{hook}: {sleep:?}");
    }
    // the same program start (loader probes included) is seen the same way by both hooks
    let (a, b) = (&seen[0].1[0], &seen[1].1[0]);
    assert_eq!(a, b, "fail-path failures differ between the hooks");
}

#[test]
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

#[test]
fn relative_paths_resolve_against_the_cwd_after_chdir_and_fchdir() {
    require_root();
    let prog = eventgen_as("eg_chdir");
    let d = Daemon::start(&["--target-comm", "eg_chdir"]);
    let top = tempfile::tempdir().unwrap();
    let top_path = std::fs::canonicalize(top.path()).unwrap();
    std::fs::create_dir_all(top_path.join("data/sub")).unwrap();
    let status = Command::new(&prog)
        .args(["chdir", "data"])
        .current_dir(&top_path)
        .status()
        .unwrap();
    assert!(status.success());
    let events = inspect_json(&d.dump());
    let failed: BTreeSet<String> = events
        .iter()
        .filter(|e| e["kind"] == "syscall_failure" && e["syscall"] == "openat" && e["comm"] == "eg_chdir")
        .filter_map(|e| Some(e["path"].as_str()?.to_string()))
        // (the loader's library search along LD_LIBRARY_PATH fails too)
        .filter(|p| !p.ends_with("libc.so.6"))
        .collect();
    let want: BTreeSet<String> = ["before", "data/child-missing", "data/sub/fchdir-missing"]
        .iter()
        .map(|p| top_path.join(p).display().to_string())
        .collect();
    assert_eq!(failed, want, "paths as the processes saw them");
}

#[test]
fn short_reads_and_writes_of_regular_files_are_recorded() {
    require_root();
    let prog = program("shortio");
    let d = Daemon::start(&["--target-comm", "shortio"]);
    let file = d.dir.path().join("limited.dat");
    let child = Command::new(&prog)
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running shortio");
    let pid = child.id();
    let out = child.wait_with_output().expect("waiting for shortio");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "shortio failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // what the calls returned, as the program saw them
    for line in [
        "write 904 of 1064",
        "write -27 of 100",
        "pwrite64 500 of 1064",
        "read 5000 of 8192",
        "read 0 of 8192",
        "read 4096 of 4200",
        "pread64 3096 of 4000",
        "pipe-read 5 of 8192",
    ] {
        assert!(stdout.lines().any(|l| l == line), "shortio printed {stdout}");
    }
    let dump = d.dump();
    let events = inspect_json(&dump);
    let path = file.to_str().unwrap();
    let short: Vec<(String, i64, u64, String)> = events_of(&events, "short_io", pid)
        .iter()
        .map(|e| {
            (
                e["syscall"].as_str().unwrap_or("").to_string(),
                e["ret"].as_i64().unwrap_or(-1),
                e["requested"].as_u64().unwrap_or(0),
                e["path"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let want: Vec<(String, i64, u64, String)> = [
        ("write", 904, 1064),
        ("pwrite64", 500, 1064),
        ("read", 4096, 4200),
        ("pread64", 3096, 4000),
    ]
    .iter()
    .map(|(s, r, n)| (s.to_string(), *r, *n, path.to_string()))
    .collect();
    assert_eq!(
        short, want,
        "exactly the short calls on the file: not the reads that ended at its end, the pipe or sysfs"
    );
    let failures = events_of(&events, "syscall_failure", pid);
    let efbig = only(
        failures.into_iter().filter(|e| e["errno"] == "EFBIG").collect(),
        "EFBIG write",
    );
    assert_eq!(
        (efbig["syscall"].as_str(), efbig["path"].as_str()),
        (Some("write"), Some(path))
    );
    let text = run_ok(Command::new(tracerd_bin()).arg("inspect").arg(&dump));
    // the fd number depends on what the program inherited (a guest's console, say)
    let tail = format!(" {path}) = 500 of 1064 (short)");
    assert!(
        text.lines()
            .any(|l| l.contains("pwrite64(fd ") && l.ends_with(&tail)),
        "inspect shows pwrite64(fd N{tail}: {text}"
    );
    assert!(text.contains("short_io 4"), "the summary counts them: {text}");
}

#[test]
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

#[test]
fn storm_keeps_memory_bounded_and_counts_overwrites() {
    require_root();
    let prog = eventgen_as("eg_storm");
    let mut d = Daemon::start(&["--target-comm", "eg_storm", "--ring-events", "10000"]);
    run_prog(&prog, &["storm", "2000000"]);
    let rss_kib = d.rss_kib();
    let started = Instant::now();
    let dump = d.dump();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the daemon answers during a storm"
    );
    assert!(d.is_alive());
    let meta = inspect_meta(&dump);
    let c = &meta["counters"];
    let overwritten = c["recorder"]["ring_overwritten"].as_u64().unwrap();
    let kernel_full = c["kernel"]["buffer_full_syscall"].as_u64().unwrap();
    let received = c["recorder"]["received"].as_u64().unwrap();
    assert!(overwritten > 0, "overwrites are counted: {c}");
    assert!(
        received + kernel_full >= 2_000_000,
        "every failure was received or counted as dropped: {c}"
    );
    assert!(
        meta["event_count"].as_u64().unwrap() <= 10_010,
        "the window holds N events"
    );
    assert!(rss_kib < 96 * 1024, "daemon RSS stays bounded: {rss_kib} KiB");
}

#[test]
fn sigusr1_storm_only_produces_complete_dumps() {
    require_root();
    let prog = eventgen_as("eg_usr1");
    let mut d = Daemon::start(&["--target-comm", "eg_usr1"]);
    run_prog(&prog, &["storm", "20000"]);
    for _ in 0..100 {
        d.signal(libc::SIGUSR1);
        std::thread::sleep(Duration::from_millis(2));
    }
    // the daemon still answers, so every signal before this request has been handled
    let last = d.dump();
    assert!(d.is_alive());
    let files: Vec<PathBuf> = std::fs::read_dir(d.dump_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files.len() >= 2, "SIGUSR1 wrote dumps: {files:?}");
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        assert!(!name.starts_with('.'), "no temporary file is left behind: {name}");
        assert!(name.ends_with(".tdump"));
        let meta = inspect_meta(f);
        assert!(meta["event_count"].as_u64().unwrap() > 0);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert!(files.contains(&last));
}

#[test]
fn unwritable_dump_dir_is_survived() {
    require_root();
    let mut d = Daemon::start(&["--target-comm", "eg_unwritable"]);
    let dir = d.dump_dir();
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    let out = Command::new(tracerd_bin())
        .arg("dump")
        .arg("--control-socket")
        .arg(d.socket())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(dir.to_str().unwrap()),
        "the error names the directory: {err}"
    );
    d.signal(libc::SIGUSR1);
    std::thread::sleep(Duration::from_millis(300));
    assert!(d.is_alive());
    assert!(d.log_text().contains("dump failed"), "{}", d.log_text());
    std::fs::remove_file(&dir).unwrap();
    let path = d.dump();
    assert!(path.starts_with(&dir) && path.exists());
    let status = d.stop();
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    assert!(!d.socket().exists(), "the control socket is removed on exit");
}

fn tracerd_fails(args: &[&str]) -> String {
    let out = Command::new(tracerd_bin()).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "tracerd {args:?} should fail");
    assert!(!err.contains("panicked"), "no panic: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn bad_inputs_get_one_line_errors() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let sock = sock.to_str().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "gap_ms = 100\nnot_a_setting = 1\n").unwrap();
    let err = tracerd_fails(&["run", "--config", bad.to_str().unwrap(), "--control-socket", sock]);
    assert!(
        err.contains("bad.toml") && err.contains("line 2") && err.contains("not_a_setting"),
        "{err}"
    );
    let err = tracerd_fails(&["run", "--config", "/nonexistent/tracerd.toml"]);
    assert!(err.contains("/nonexistent/tracerd.toml"), "{err}");
    let err = tracerd_fails(&["run", "--ring-events", "0", "--control-socket", sock]);
    assert!(err.contains("ring_events"), "{err}");
    let err = tracerd_fails(&[
        "run",
        "--uprobe",
        "/nonexistent/bin:main",
        "--control-socket",
        sock,
    ]);
    assert!(err.contains("/nonexistent/bin"), "{err}");
    let prog = program("eventgen");
    let err = tracerd_fails(&[
        "run",
        "--uprobe",
        &format!("{}:no_such_function", prog.display()),
        "--control-socket",
        sock,
    ]);
    assert!(err.contains("no_such_function"), "{err}");
    let err = tracerd_fails(&[
        "run",
        "--target-exe",
        "/nonexistent/exe",
        "--control-socket",
        sock,
    ]);
    assert!(err.contains("/nonexistent/exe"), "{err}");
    let err = tracerd_fails(&["dump", "--control-socket", "/nonexistent/control.sock"]);
    assert!(err.contains("cannot reach"), "{err}");

    // damaged dumps: take a real one and cut or garble it
    let d = Daemon::start(&["--target-comm", "eg_badinput"]);
    let good = std::fs::read(d.dump()).unwrap();
    let f = dir.path().join("damaged.tdump");
    for (what, bytes) in [
        ("empty", Vec::new()),
        ("foreign", b"{\"not\": \"a dump\"}\n".repeat(10)),
        ("header only", good[..16].to_vec()),
        ("truncated", good[..good.len() * 2 / 3].to_vec()),
    ] {
        std::fs::write(&f, &bytes).unwrap();
        let err = tracerd_fails(&["inspect", f.to_str().unwrap()]);
        assert!(err.contains("damaged.tdump"), "{what}: {err}");
    }
    let err = tracerd_fails(&["inspect", "/nonexistent.tdump"]);
    assert!(err.contains("/nonexistent.tdump"), "{err}");
}

/// The unit's CapabilityBoundingSet, in setpriv's syntax.
fn unit_bounding_set() -> String {
    let unit = std::fs::read_to_string(workspace_root().join("systemd/tracerd.service")).unwrap();
    let line = unit
        .lines()
        .find(|l| l.starts_with("CapabilityBoundingSet="))
        .expect("the unit limits capabilities");
    let caps: Vec<String> = line["CapabilityBoundingSet=".len()..]
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    format!("-all,{}", caps.join(","))
}

#[test]
fn runs_with_only_the_units_capabilities() {
    require_root();
    let prog = eventgen_as("eg_caps");
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--bounding-set={}", unit_bounding_set()))
        .args(["--inh-caps=-all", "--no-new-privs"])
        .arg(tracerd_bin())
        .arg("run")
        .arg("--dump-dir")
        .arg(dir.path().join("dumps"))
        .arg("--control-socket")
        .arg(dir.path().join("control.sock"))
        .args(["--target-comm", "eg_caps", "--uprobe"])
        .arg(format!("{}:tracerd_test_marker", prog.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let d = Daemon::spawn(cmd, dir);
    let pid = run_prog(&prog, &["marker", "2"]);
    let events = inspect_json(&d.dump());
    assert_eq!(events_of(&events, "function", pid).len(), 2);
}

/// A session stopped while events pour in drains the ring one last time: that drain must not
/// meet the recorder still borrowed by the stop (it panicked in libbpf's callback, which
/// aborts the process -- seen when a JVM's threads failed calls as its run ended). The race
/// window is short: several floods, many stops.
#[test]
fn a_session_stops_cleanly_while_events_pour_in() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    for round in 0..10 {
        let mut floods: Vec<std::process::Child> = (0..4)
            .map(|_| {
                let mut cmd = Command::new("sh");
                cmd.args(["-c", "while :; do true < /nonexistent/tracerd-flood; done"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                // the floods die with the test, even when a panic aborts it
                // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
                unsafe {
                    std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                cmd.spawn().expect("spawn sh")
            })
            .collect();
        let config = tracerd::config::Config {
            dump_dir: dir.path().join(format!("dumps-{round}")),
            control_socket: dir.path().join("control.sock"),
            ..Default::default()
        };
        let session = tracerd::session::TraceSession::start(config).expect("session starts");
        for f in &floods {
            session.add_target(f.id()).expect("target added");
        }
        std::thread::sleep(Duration::from_millis(100));
        drop(session); // stops and joins the session thread while the floods go on
        for f in &mut floods {
            let _ = f.kill();
            let _ = f.wait();
        }
    }
}
