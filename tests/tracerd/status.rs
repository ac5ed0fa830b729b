//! `tracerd status`: what the running daemon answers about its targets, window, event rates,
//! losses and dumps, as text and as JSON; one line and a non-zero exit when none answers.

use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// `tracerd status [--json]` of the daemon `d`.
fn status(d: &Daemon, json: bool) -> std::process::Output {
    let mut cmd = Command::new(tracerd_bin());
    cmd.arg("status").arg("--control-socket").arg(d.socket());
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("running tracerd status")
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn status_tells_targets_window_rates_losses_and_the_last_dump() {
    require_root();
    let prog = eventgen_as("eg_status");
    let mut d = Daemon::start(&["--target-comm", "eg_status", "--ring-events", "100"]);
    // 150 failed calls into a window of 100: 50 overwritten, counted as lost
    let holder = Reaped(Command::new(&prog).args(["sleep", "30000"]).spawn().unwrap());
    run_prog(&prog, &["storm", "150"]);
    std::thread::sleep(Duration::from_millis(1500));
    let dump = d.dump();

    let out = status(&d, true);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json is one JSON object");
    assert_eq!(s["pid"], d.pid());
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"));
    assert!(s["kernel"].as_str().unwrap().contains("function probes"), "{s}");
    assert_eq!(
        s["targets"]["selectors"],
        serde_json::json!(["target_comm eg_status"])
    );
    assert_eq!(s["targets"]["every_process"], false);
    assert!(
        s["targets"]["processes"].as_u64() >= Some(1),
        "the sleeping holder: {s}"
    );
    let w = &s["window"];
    assert_eq!(
        (w["events"].as_u64(), w["capacity"].as_u64()),
        (Some(100), Some(100)),
        "{w}"
    );
    assert!(
        w["oldest_event_age_ms"]
            .as_u64()
            .is_some_and(|a| (1000..60_000).contains(&a)),
        "{w}"
    );
    assert_eq!(w["record_bytes"], w["record_capacity_bytes"]);
    assert!(
        s["events_per_second"]["syscall_failure"]
            .as_f64()
            .is_some_and(|r| r > 0.0),
        "{}",
        s["events_per_second"]
    );
    assert!(
        s["lost"]["window_overwritten"].as_u64() >= Some(50),
        "{}",
        s["lost"]
    );
    let last = &s["dumps"]["last"];
    assert_eq!(last["path"], dump.to_str().unwrap());
    assert_eq!(last["trigger"], "request");
    assert_eq!(
        (s["dumps"]["written"].as_u64(), s["dumps"]["failed"].as_u64()),
        (Some(1), Some(0))
    );

    let out = status(&d, false);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for part in [
        format!("(pid {})", d.pid()),
        "targets: target_comm eg_status;".to_string(),
        "window: 100 of 100 events (100%)".to_string(),
        "events per second (last minute): ".to_string(),
        "lost since start: ".to_string(),
        format!("last: {} at ", dump.display()),
        "(request)".to_string(),
    ] {
        assert!(text.contains(&part), "{part:?} in:\n{text}");
    }
    drop(holder);
    d.stop();
    let out = status(&d, false);
    assert!(!out.status.success(), "no daemon: a non-zero exit");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("cannot reach tracerd"), "{err}");
}
