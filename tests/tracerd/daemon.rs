//! The daemon as operators run it: it survives a dump directory it cannot write, refuses bad
//! input in one line, and runs with only the capabilities of the systemd unit.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
