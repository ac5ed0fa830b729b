//! Reload keeps the window: SIGHUP and `tracerd reload` re-read the configuration and apply
//! it (new targets traced from then on, the events and processes recorded before kept; a
//! function list's additions attached and its drops detached, every function keeping its
//! id); a configuration that does not parse or validate is refused with `run`'s error and
//! the one in force stays, counted in the metrics.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

fn reload(d: &Daemon) -> std::process::Output {
    Command::new(tracerd_bin())
        .arg("reload")
        .arg("--control-socket")
        .arg(d.socket())
        .output()
        .expect("running tracerd reload")
}

/// A daemon run from the configuration file `config` (rewritten by the test).
fn daemon_of(config: &Path) -> Daemon {
    Daemon::start(&["--config", config.to_str().unwrap()])
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn reload_keeps_the_window_and_traces_new_targets() {
    require_root();
    let (before, added_by_hup, added_by_cmd) = (
        eventgen_as("eg_rl_before"),
        eventgen_as("eg_rl_hup"),
        eventgen_as("eg_rl_cmd"),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tracerd.toml");
    std::fs::write(&config, "target_comm = [\"eg_rl_before\"]\n").unwrap();
    let d = daemon_of(&config);
    let pid_before = run_prog(&before, &["fail-path", "/nonexistent/rl-before"]);
    // running through the reloads: its identity must stay what it was
    let living = Reaped(Command::new(&before).args(["sleep", "30000"]).spawn().unwrap());
    let pid_ignored = run_prog(&added_by_hup, &["fail-path", "/nonexistent/rl-not-yet"]);

    std::fs::write(
        &config,
        "target_comm = [\"eg_rl_before\", \"eg_rl_hup\"]\nring_events = 5\n",
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log("reloaded: applied target_comm", Duration::from_secs(10));
    assert!(
        d.log_text()
            .contains("needs a restart, kept as it was: ring_events"),
        "{}",
        d.log_text()
    );
    let pid_hup = run_prog(&added_by_hup, &["fail-path", "/nonexistent/rl-after-hup"]);

    std::fs::write(
        &config,
        "target_comm = [\"eg_rl_before\", \"eg_rl_hup\", \"eg_rl_cmd\"]\n",
    )
    .unwrap();
    let out = reload(&d);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("applied target_comm"), "{said}");
    let pid_cmd = run_prog(&added_by_cmd, &["fail-path", "/nonexistent/rl-after-cmd"]);
    std::thread::sleep(Duration::from_millis(300));

    let dump = d.dump();
    let events = inspect_json(&dump);
    for (pid, path) in [
        (pid_before, "/nonexistent/rl-before"),
        (pid_hup, "/nonexistent/rl-after-hup"),
        (pid_cmd, "/nonexistent/rl-after-cmd"),
    ] {
        let e = only(failures_on(&events, pid, path), path);
        assert_eq!(e["path"], path);
    }
    assert!(
        events_of(&events, "syscall_failure", pid_ignored).is_empty(),
        "not a target then"
    );
    assert!(events.len() > 5, "the window kept its size of 1,000,000, not 5");
    let meta = inspect_meta(&dump);
    let proc_of = |pid: i32| {
        meta["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid)
            .cloned()
            .unwrap_or_default()
    };
    let p = proc_of(living.pid());
    assert_eq!(p["comm"], "eg_rl_before", "{p}");
    assert_eq!(p["cmdline"][1], "sleep", "{p}");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_bad_configuration_is_refused_and_the_one_in_force_stays() {
    require_root();
    let prog = eventgen_as("eg_rl_bad");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tracerd.toml");
    let metrics = dir.path().join("tracerd.prom");
    std::fs::write(
        &config,
        format!(
            "target_comm = [\"eg_rl_bad\"]\nmetrics_textfile = \"{}\"\nmetrics_interval_ms = 100\n",
            metrics.display()
        ),
    )
    .unwrap();
    let mut d = daemon_of(&config);
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{good}no_such_setting = 1\n")).unwrap();
    let run_says = tracerd_fails(&["run", "--config", config.to_str().unwrap()]);
    let out = reload(&d);
    assert!(!out.status.success(), "refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    let why = run_says.trim_end().trim_start_matches("tracerd: error: ");
    assert!(err.contains(why), "the reload's error {err:?} is run's: {why:?}");
    // a function that cannot be attached: refused as `run` refuses it
    let function = |symbol: &str| format!("uprobe = [\"{}:{symbol}\"]\n", prog.display());
    std::fs::write(&config, format!("{good}{}", function("no_such_function"))).unwrap();
    let out = reload(&d);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no_such_function: cannot attach"),
        "{err}"
    );
    // a target_exe that does not exist validates but cannot be applied: refused too, and the
    // function the same reload attached is detached again
    std::fs::write(
        &config,
        format!(
            "{good}target_exe = [\"/nonexistent/exe\"]\n{}",
            function("tracerd_test_marker")
        ),
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log("target_exe /nonexistent/exe", Duration::from_secs(10));
    assert_eq!(
        d.log_text().matches("reload refused").count(),
        3,
        "{}",
        d.log_text()
    );
    assert!(d.is_alive());

    let pid = run_prog(&prog, &["fail-path", "/nonexistent/rl-still-traced"]);
    let marker = run_prog(&prog, &["marker", "2"]);
    std::thread::sleep(Duration::from_millis(400));
    let dump = d.dump();
    let events = inspect_json(&dump);
    only(
        failures_on(&events, pid, "/nonexistent/rl-still-traced"),
        "failure under the configuration in force",
    );
    assert_eq!(
        events_of(&events, "function", marker).len(),
        0,
        "no function in force"
    );
    assert_eq!(inspect_meta(&dump)["functions"], serde_json::json!([]));
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(text.contains("tracerd_reloads_failed_total 3"), "{text}");
    let out = Command::new(tracerd_bin())
        .args(["status", "--json", "--control-socket"])
        .arg(d.socket())
        .output()
        .unwrap();
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (s["reloads"]["done"].as_u64(), s["reloads"]["failed"].as_u64()),
        (Some(0), Some(3))
    );
}

/// Function hits by function name.
type Hits = std::collections::BTreeMap<String, usize>;

/// The function hits of process `pid` in `events`.
fn hits_of(events: &[serde_json::Value], pid: u32) -> Hits {
    let mut by_name = Hits::new();
    for e in events_of(events, "function", pid) {
        *by_name
            .entry(e["function"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    by_name
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn reload_attaches_added_functions_and_detaches_dropped_ones() {
    require_root();
    let prog = eventgen_as("eg_rl_fn");
    let dir = tempfile::tempdir().unwrap();
    let (config, list) = (dir.path().join("tracerd.toml"), dir.path().join("functions"));
    let marker = format!("{}:tracerd_test_marker\n", prog.display());
    let other = format!("{}:tracerd_test_other\n", prog.display());
    std::fs::write(&list, &marker).unwrap();
    std::fs::write(
        &config,
        format!(
            "target_comm = [\"eg_rl_fn\"]\nfunctions = \"{}\"\n",
            list.display()
        ),
    )
    .unwrap();
    let d = daemon_of(&config);
    // `marker N` calls tracerd_test_marker N times, then tracerd_test_other once
    let before = run_prog(&prog, &["marker", "3"]);

    std::fs::write(&list, &other).unwrap();
    let out = reload(&d);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        said.contains("functions: 1 attached, 1 detached, 1 listed"),
        "{said}"
    );
    let after = run_prog(&prog, &["marker", "4"]);
    std::thread::sleep(Duration::from_millis(300));
    let first = d.dump();

    // the dropped function listed again comes back under its own id
    std::fs::write(&list, format!("{other}{marker}")).unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log(
        "functions: 1 attached, 0 detached, 2 listed",
        Duration::from_secs(10),
    );
    let again = run_prog(&prog, &["marker", "2"]);
    std::thread::sleep(Duration::from_millis(300));
    let second = d.dump();

    let one = |name: &str, n: usize| -> Hits { [(name.to_string(), n)].into_iter().collect() };
    let both = |m: usize, o: usize| -> Hits {
        [
            ("tracerd_test_marker".to_string(), m),
            ("tracerd_test_other".to_string(), o),
        ]
        .into_iter()
        .collect()
    };
    let events = inspect_json(&first);
    assert_eq!(
        hits_of(&events, before),
        one("tracerd_test_marker", 3),
        "before the reload"
    );
    assert_eq!(hits_of(&events, after), one("tracerd_test_other", 1), "after it");
    let meta = inspect_meta(&first);
    let table = |meta: &serde_json::Value| -> Vec<String> {
        meta["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["symbol"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(table(&meta), ["tracerd_test_marker", "tracerd_test_other"]);
    assert_eq!(meta["function_calls"], serde_json::json!([3, 1]));
    assert_eq!(meta["removed_functions"], serde_json::json!([0]));

    let events = inspect_json(&second);
    assert_eq!(
        hits_of(&events, before),
        one("tracerd_test_marker", 3),
        "still in the window"
    );
    assert_eq!(hits_of(&events, again), both(2, 1));
    let meta = inspect_meta(&second);
    assert_eq!(
        table(&meta),
        ["tracerd_test_marker", "tracerd_test_other"],
        "no id renumbered"
    );
    assert_eq!(meta["function_calls"], serde_json::json!([5, 2]));
    assert!(
        meta.get("removed_functions").is_none(),
        "{}",
        meta["removed_functions"]
    );

    // an entry listed twice is two functions: 1,100 of them do not fit the call counters of
    // a daemon started with one (1 + 1,024), and the list in force stays
    std::fs::write(&list, marker.repeat(1100)).unwrap();
    let said = String::from_utf8_lossy(&reload(&d).stdout).into_owned();
    assert!(
        said.contains("kept as it was: the function list (1101 functions listed since start, the call counters hold 1025)"),
        "{said}"
    );
    assert!(!said.contains("applied the functions file's list"), "{said}");
}
