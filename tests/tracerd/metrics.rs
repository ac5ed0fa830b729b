//! The metrics textfile: Prometheus' text format (one TYPE per family, counters end in
//! _total), written atomically, counting what the daemon saw.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// Parses Prometheus text format 0.0.4: (TYPE of each family, samples by "name{labels}").
pub(crate) fn parse_prometheus(
    text: &str,
) -> (
    std::collections::HashMap<String, String>,
    std::collections::HashMap<String, f64>,
) {
    let mut types = std::collections::HashMap::new();
    let mut samples = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE NAME KIND");
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "one TYPE per family: {line}"
            );
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("SERIES VALUE: {line}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "metric name: {line}"
        );
        assert!(
            types.contains_key(name),
            "sample of a family without TYPE: {line}"
        );
        if types[name] == "counter" {
            assert!(name.ends_with("_total"), "counters end in _total: {line}");
        }
        samples.insert(
            series.to_string(),
            value.parse::<f64>().unwrap_or_else(|_| panic!("value: {line}")),
        );
    }
    (types, samples)
}

/// Waits until the metrics file shows `name` at `value`.
fn wait_for_metric(file: &Path, name: &str, value: f64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = String::new();
    while std::time::Instant::now() < deadline {
        last = std::fs::read_to_string(file).unwrap_or_default();
        if parse_prometheus(&last).1.get(name) == Some(&value) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{name} never became {value}; last metrics:\n{last}");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn metrics_textfile_is_scrapable_and_counts() {
    require_root();
    let prog = program_as("crasher", "cr_metrics");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tracerd.prom");
    let d = Daemon::start(&[
        "--target-comm",
        "cr_metrics",
        "--metrics-textfile",
        file.to_str().unwrap(),
        "--metrics-interval-ms",
        "200",
        "--trigger-settle-ms",
        "100",
        "--ring-events",
        "1000",
    ]);
    // a target alive counts in the target set; every one that ended must leave it (a count
    // that never drops back would send every later process of its slot to the slow lookup)
    let sleeper = Reaped(
        Command::new(&prog)
            .args(["sleep", "30000"])
            .spawn()
            .expect("spawn"),
    );
    wait_for_metric(&file, "tracerd_targets", 1.0);
    drop(sleeper);
    for _ in 0..3 {
        run_to_end(&prog, &["segv"]);
    }
    for i in 0..5 {
        run_to_end(&prog, &["fail", &format!("/nonexistent/cr_metrics/{i}")]);
    }
    wait_for_dumps(&d, 1, Duration::from_secs(10));
    wait_for_metric(&file, "tracerd_targets", 0.0);
    d.dump();
    std::thread::sleep(Duration::from_millis(600));
    let text = std::fs::read_to_string(&file).expect("the metrics file is written");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o644
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        1,
        "only the .prom file, no temp file: {leftovers:?}"
    );
    let (types, s) = parse_prometheus(&text);
    assert_eq!(types["tracerd_window_fill_ratio"], "gauge");
    assert_eq!(types["tracerd_lost_total"], "counter");
    assert!(
        s[r#"tracerd_events_received_total{kind="syscall_failure"}"#] >= 5.0,
        "{text}"
    );
    assert!(
        s[r#"tracerd_events_received_total{kind="process_state"}"#] >= 8.0,
        "{text}"
    );
    assert_eq!(
        s[r#"tracerd_triggers_fired_total{rule="fatal_signal"}"#], 1.0,
        "{text}"
    );
    assert_eq!(
        s[r#"tracerd_triggers_suppressed_total{rule="fatal_signal"}"#], 2.0,
        "{text}"
    );
    assert_eq!(
        s["tracerd_dumps_written_total"], 2.0,
        "one triggered, one asked for: {text}"
    );
    assert_eq!(s["tracerd_dumps_failed_total"], 0.0);
    assert_eq!(s["tracerd_window_capacity_events"], 1000.0);
    let fill = s["tracerd_window_fill_ratio"];
    assert!(
        fill > 0.0 && fill <= 1.0 && (fill - s["tracerd_window_events"] / 1000.0).abs() < 1e-9,
        "{text}"
    );
    for reason in [
        "kernel_buffer_full_syscall",
        "window_overwritten",
        "malformed",
        "targets_full",
    ] {
        assert!(
            s.contains_key(&format!("tracerd_lost_total{{reason=\"{reason}\"}}")),
            "{reason} is exported: {text}"
        );
    }
    assert_eq!(s["tracerd_uprobe_attach_failures_total"], 0.0);
}
