//! A dump before every stop: SIGTERM and SIGINT write the window as a dump whose trigger says
//! `stop` before the daemon exits (on by default); `dump_on_stop = false` turns it off.

use std::time::Duration;

use crate::common::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn sigterm_and_sigint_write_the_window_before_exiting() {
    require_root();
    let prog = eventgen_as("eg_stop");
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let mut d = Daemon::start(&["--target-comm", "eg_stop"]);
        let missing = format!("/nonexistent/before-{name}");
        let pid = run_prog(&prog, &["fail-path", &missing]);
        std::thread::sleep(Duration::from_millis(300));
        d.signal(signal);
        let status = d.child.wait().expect("waiting for tracerd");
        assert!(
            status.success(),
            "{name}: a clean exit: {status}\n{}",
            d.log_text()
        );
        let dumps = dumps_in(&d);
        assert_eq!(dumps.len(), 1, "{name}: one dump, on stop:\n{}", d.log_text());
        let meta = inspect_meta(&dumps[0]);
        assert_eq!(meta["trigger"]["rule"], "stop", "{}", meta["trigger"]);
        assert_eq!(meta["trigger"]["event"], name);
        let events = inspect_json(&dumps[0]);
        let failed = only(failures_on(&events, pid, &missing), "failure before the stop");
        assert_eq!(failed["path"], missing.as_str());
        assert!(
            d.log_text().contains(&format!("dump on stop ({name})")),
            "{}",
            d.log_text()
        );
        assert!(!d.socket().exists());
    }
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn dump_on_stop_can_be_turned_off() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tracerd.toml");
    std::fs::write(&config, "dump_on_stop = false\ntarget_comm = [\"eg_nostop\"]\n").unwrap();
    let mut d = Daemon::start(&["--config", config.to_str().unwrap()]);
    let status = d.stop();
    assert!(status.success());
    assert!(dumps_in(&d).is_empty(), "no dump on stop:\n{}", d.log_text());
}
