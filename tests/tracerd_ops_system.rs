//! System tests of tracerd as operators run it, on the real kernel as root: complete dumps
//! of full kernel tables, dumps that trigger themselves, metrics, redaction.
mod common;

use std::collections::BTreeSet;
use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// A target program in its own process group; the whole group is killed on drop.
struct Group {
    child: Child,
    lines: Vec<String>,
}

impl Group {
    /// Starts `prog args` and reads its stdout up to the line "ready".
    fn start(prog: &Path, args: &[&str]) -> Group {
        let mut child = Command::new(prog)
            .args(args)
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut g = Group {
            child,
            lines: Vec::new(),
        };
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("reading the program's output");
            if line == "ready" {
                return g;
            }
            g.lines.push(line);
        }
        let status = g.child.wait();
        panic!(
            "{} {args:?} ended before it was ready: {status:?}",
            prog.display()
        );
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this test created.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// A copy of tests/programs/NAME.c's binary named `alias` (its comm).
fn program_as(name: &str, alias: &str) -> PathBuf {
    let src = program(name);
    let dst = src.with_file_name(alias);
    std::fs::copy(&src, &dst).expect("copying a test program");
    dst
}

#[test]
fn dump_holds_every_open_file_far_beyond_one_batch() {
    require_root();
    const N: usize = 20_000;
    let prog = program_as("fillmaps", "fm_files");
    let d = Daemon::start(&["--target-comm", "fm_files"]);
    let dir = tempfile::tempdir().unwrap();
    // two processes: one may not hold more fds than the hard limit (20,000 here)
    let half = (N / 2).to_string();
    let groups = [
        Group::start(&prog, &["files", dir.path().to_str().unwrap(), "0", &half]),
        Group::start(&prog, &["files", dir.path().to_str().unwrap(), &half, &half]),
    ];
    let dump = d.dump();
    let meta = inspect_meta(&dump);
    let pids: Vec<u32> = groups.iter().map(Group::pid).collect();
    let known: BTreeSet<String> = meta["open_files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| pids.contains(&(o["tgid"].as_u64().unwrap() as u32)))
        .map(|o| o["path"].as_str().unwrap().to_string())
        .collect();
    let missing: Vec<String> = (0..N)
        .map(|i| format!("{}/f{i}", dir.path().display()))
        .filter(|p| !known.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {N} open files missing from the dump, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(3)]
    );
    let events = inspect_json(&dump);
    for (g, first) in groups.iter().zip([0, N / 2]) {
        let write = events
            .iter()
            .find(|e| e["pid"] == g.pid() && e["syscall"] == "write")
            .expect("the failed write is recorded");
        assert_eq!(
            write["path"],
            format!("{}/f{first}", dir.path().display()),
            "the oldest open file still resolves"
        );
    }
    assert_eq!(meta["counters"]["open_files_unresolved"], 0);
}

#[test]
fn dump_holds_every_silent_connection_far_beyond_one_batch() {
    require_root();
    const N: usize = 5_000;
    let prog = program_as("fillmaps", "fm_conns");
    let d = Daemon::start(&["--target-comm", "fm_conns", "--gap-ms", "1000"]);
    let g = Group::start(&prog, &["conns", &N.to_string()]);
    std::thread::sleep(Duration::from_millis(1600));
    let events = inspect_json(&d.dump());
    let ongoing: BTreeSet<(String, String)> = events
        .iter()
        .filter(|e| e["kind"] == "network_gap" && e["pid"] == g.pid() && e["ongoing"] == true)
        .map(|e| {
            (
                e["src"].as_str().unwrap().to_string(),
                e["dst"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        ongoing.len(),
        2 * N,
        "both ends of every silent connection are an ongoing gap"
    );
}

#[test]
fn dump_holds_every_stopped_process_far_beyond_one_batch() {
    require_root();
    const N: usize = 1_000;
    let prog = program_as("fillmaps", "fm_stop");
    let d = Daemon::start(&["--target-comm", "fm_stop", "--pause-ms", "500"]);
    let g = Group::start(&prog, &["stop", &N.to_string()]);
    let children: BTreeSet<u32> = g.lines.iter().map(|l| l.parse().expect("a child pid")).collect();
    assert_eq!(children.len(), N);
    std::thread::sleep(Duration::from_millis(800));
    let events = inspect_json(&d.dump());
    let paused: BTreeSet<u32> = events
        .iter()
        .filter(|e| e["kind"] == "process_state" && e["state"] == "paused" && e["ongoing"] == true)
        .map(|e| e["pid"].as_u64().unwrap() as u32)
        .collect();
    let missing: Vec<&u32> = children.iter().filter(|p| !paused.contains(p)).collect();
    assert!(
        missing.is_empty(),
        "{} of {N} stopped processes missing from the dump",
        missing.len()
    );
}

/// Runs `prog args` to its end; returns its pid.
fn run_to_end(prog: &Path, args: &[&str]) -> u32 {
    let mut child = Command::new(prog)
        .args(args)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let _ = child.wait();
    pid
}

/// Dumps in the daemon's dump directory, in the order they were written.
fn dumps_in(d: &Daemon) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(d.dump_dir())
        .map(|r| {
            r.filter_map(|e| Some(e.ok()?.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "tdump"))
                .collect()
        })
        .unwrap_or_default();
    let seq = |p: &PathBuf| -> u64 {
        p.file_stem()
            .unwrap()
            .to_string_lossy()
            .rsplit('-')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    files.sort_by_key(seq);
    files
}

/// Waits until the daemon has written `n` dumps; returns them.
fn wait_for_dumps(d: &Daemon, n: usize, timeout: Duration) -> Vec<PathBuf> {
    let start = std::time::Instant::now();
    loop {
        let files = dumps_in(d);
        if files.len() >= n {
            return files;
        }
        assert!(
            start.elapsed() < timeout,
            "{} of {n} dumps after {timeout:?}:\n{}",
            files.len(),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The trigger recorded in a dump's header.
fn trigger_of(dump: &Path) -> serde_json::Value {
    let meta = inspect_meta(dump);
    assert!(
        meta["trigger"].is_object(),
        "{} has no trigger: {}",
        dump.display(),
        meta["trigger"]
    );
    meta["trigger"].clone()
}

#[test]
fn trigger_fatal_signal_is_on_by_default_and_ignores_kills_from_outside() {
    require_root();
    let prog = program_as("crasher", "cr_segv");
    let d = Daemon::start(&["--target-comm", "cr_segv", "--trigger-settle-ms", "300"]);
    // a SIGSEGV sent by another process is not a crash of the target's own
    let mut victim = Command::new(&prog).args(["sleep", "5000"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(victim.id() as i32, libc::SIGSEGV) };
    let _ = victim.wait();
    std::thread::sleep(Duration::from_millis(800));
    assert!(dumps_in(&d).is_empty(), "a kill from outside does not trigger");
    let pid = run_to_end(&prog, &["segv"]);
    let dump = wait_for_dumps(&d, 1, Duration::from_secs(10)).remove(0);
    let t = trigger_of(&dump);
    assert_eq!(t["rule"], "fatal_signal");
    assert_eq!(t["pid"], pid);
    assert_eq!(t["event"], "killed by SIGSEGV");
    let events = inspect_json(&dump);
    assert!(
        events.iter().any(|e| e["pid"] == pid && e["signal"] == "SIGSEGV"),
        "the crash is in the dump"
    );
    let abort_pid = run_to_end(&prog, &["abort"]);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        dumps_in(&d).len(),
        1,
        "the next crash within a minute is suppressed (pid {abort_pid})"
    );
}

#[test]
fn trigger_nonzero_exit() {
    require_root();
    let prog = program_as("crasher", "cr_exit");
    let d = Daemon::start(&[
        "--target-comm",
        "cr_exit",
        "--trigger-nonzero-exit",
        "--trigger-settle-ms",
        "200",
    ]);
    run_to_end(&prog, &["exit", "0"]);
    std::thread::sleep(Duration::from_millis(600));
    assert!(dumps_in(&d).is_empty(), "exit 0 does not trigger");
    let pid = run_to_end(&prog, &["exit", "3"]);
    let t = trigger_of(&wait_for_dumps(&d, 1, Duration::from_secs(10))[0]);
    assert_eq!(
        (t["rule"].as_str(), t["pid"].as_u64(), t["event"].as_str()),
        (Some("nonzero_exit"), Some(pid as u64), Some("exited with code 3"))
    );
}

/// The state letter of /proc/PID/stat ('T' stopped).
fn proc_state(pid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .unwrap_or('?')
}

/// The operator wants the dump while the service is still stuck: the pause rule fires once
/// a pause has lasted its threshold, not when it ends, and the pause's end fires nothing more.
#[test]
fn trigger_pause_dumps_while_the_process_is_still_stopped() {
    require_root();
    let prog = program_as("crasher", "cr_pause");
    let d = Daemon::start(&[
        "--target-comm",
        "cr_pause",
        "--pause-ms",
        "100",
        "--trigger-pause-ms",
        "400",
        "--trigger-settle-ms",
        "200",
        // no rate limit: a second firing for the same pause would be a second dump
        "--trigger-min-interval-ms",
        "0",
    ]);
    let mut sleeper = Command::new(&prog).args(["sleep", "20000"]).spawn().unwrap();
    let pid = sleeper.id() as i32;
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(200));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(700));
    assert!(dumps_in(&d).is_empty(), "a pause of 200 ms does not trigger");

    let stopped_at = std::time::Instant::now();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // only SIGCONT ends the pause, and it is sent after the dump: a rule that fires when a
    // pause ends never dumps here
    let dump = wait_for_dumps(&d, 1, Duration::from_secs(5)).remove(0);
    let waited = stopped_at.elapsed();
    assert_eq!(proc_state(pid), 'T', "the process is still stopped");
    assert!(
        waited >= Duration::from_millis(550) && waited < Duration::from_millis(2500),
        "dump after the 400 ms threshold and the 200 ms settle, got {waited:?}"
    );
    let t = trigger_of(&dump);
    assert_eq!(t["rule"], "pause");
    assert_eq!(t["pid"], pid);
    assert!(t["event"].as_str().unwrap().ends_with("ms, still paused"), "{t}");
    let events = inspect_json(&dump);
    assert!(
        events.iter().any(|e| e["pid"] == pid
            && e["state"] == "paused"
            && e["ongoing"] == true
            && e["duration_ms"].as_u64().unwrap() >= 400),
        "the dump holds the pause going on"
    );

    unsafe { libc::kill(pid, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(800));
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = sleeper.wait();
    assert_eq!(dumps_in(&d).len(), 1, "the end of the pause fires nothing more");
    let ended = inspect_json(&d.dump())
        .iter()
        .filter(|e| e["pid"] == pid && e["state"] == "paused" && e["ongoing"] == false)
        .count();
    assert_eq!(ended, 2, "both pauses are still recorded as they ended");
}

#[test]
fn trigger_failed_syscall_matching_syscall_errno_and_path() {
    require_root();
    let prog = program_as("crasher", "cr_sys");
    let dir = tempfile::tempdir().unwrap();
    let glob = format!("openat:ENOENT:{}/data/*.db", dir.path().display());
    let d = Daemon::start(&[
        "--target-comm",
        "cr_sys",
        "--trigger-syscall",
        &glob,
        "--trigger-settle-ms",
        "200",
    ]);
    run_to_end(&prog, &["fail", &format!("{}/data/x.log", dir.path().display())]);
    run_to_end(&prog, &["fail", &format!("{}/other/x.db", dir.path().display())]);
    std::thread::sleep(Duration::from_millis(600));
    assert!(dumps_in(&d).is_empty(), "paths outside the glob do not trigger");
    let path = format!("{}/data/x.db", dir.path().display());
    let pid = run_to_end(&prog, &["fail", &path]);
    let t = trigger_of(&wait_for_dumps(&d, 1, Duration::from_secs(10))[0]);
    assert_eq!(
        t["rule"],
        format!("syscall(openat ENOENT {}/data/*.db)", dir.path().display())
    );
    assert_eq!(t["pid"], pid);
    assert_eq!(t["event"], format!("openat({path}) = ENOENT"));
}

/// A memory cgroup (v1 or v2) limited to `limit` bytes without swap; removed on drop.
struct MemCgroup(PathBuf);

impl MemCgroup {
    fn new(name: &str, limit: u64) -> MemCgroup {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let dir = if v2 {
            Path::new("/sys/fs/cgroup").join(name)
        } else {
            Path::new("/sys/fs/cgroup/memory").join(name)
        };
        std::fs::create_dir_all(&dir).expect("creating a memory cgroup");
        let g = MemCgroup(dir);
        let files: &[(&str, String)] = if v2 {
            &[("memory.max", limit.to_string()), ("memory.swap.max", "0".into())]
        } else {
            &[
                ("memory.limit_in_bytes", limit.to_string()),
                ("memory.memsw.limit_in_bytes", limit.to_string()),
            ]
        };
        for (i, (file, value)) in files.iter().enumerate() {
            let path = g.0.join(file);
            // the limit must hold (else the test would eat the host's memory); no swap
            // accounting is fine on a host without swap
            if i == 0 || path.exists() {
                std::fs::write(&path, value)
                    .unwrap_or_else(|e| panic!("{}: {e} (memory controller enabled?)", path.display()));
            }
        }
        g
    }

    fn procs(&self) -> PathBuf {
        self.0.join("cgroup.procs")
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn trigger_oom_kill() {
    require_root();
    let prog = program_as("crasher", "cr_oom");
    let cg = MemCgroup::new(&format!("tracerd-oom-{}", std::process::id()), 64 << 20);
    let d = Daemon::start(&[
        "--target-comm",
        "cr_oom",
        "--trigger-oom-kill",
        "--no-trigger-fatal-signal",
        "--trigger-settle-ms",
        "200",
    ]);
    // a plain SIGKILL from a process is not an OOM kill
    let mut victim = Command::new(&prog).args(["sleep", "5000"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(victim.id() as i32, libc::SIGKILL) };
    let _ = victim.wait();
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        dumps_in(&d).is_empty(),
        "a SIGKILL from a process does not trigger"
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("echo $$ > {} && exec \"$0\" oom", cg.procs().display()))
        .arg(&prog)
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the OOM killer ended it");
    let t = trigger_of(&wait_for_dumps(&d, 1, Duration::from_secs(10))[0]);
    assert_eq!(t["rule"], "oom_kill");
    assert_eq!(t["pid"], child.id());
    assert_eq!(t["event"], "killed by SIGKILL");
}

#[test]
fn crash_storm_writes_one_dump_per_interval_and_counts_the_rest() {
    require_root();
    let prog = program_as("crasher", "cr_storm");
    let d = Daemon::start(&[
        "--target-comm",
        "cr_storm",
        "--trigger-min-interval-ms",
        "2000",
        "--trigger-settle-ms",
        "100",
    ]);
    const CRASHES: usize = 25;
    for _ in 0..CRASHES {
        run_to_end(&prog, &["segv"]);
        std::thread::sleep(Duration::from_millis(150));
    }
    // crashes spaced ~150 ms over ~3.7 s: one at the start and one ~2 s later fire
    let storm = wait_for_dumps(&d, 2, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(2200));
    run_to_end(&prog, &["segv"]);
    let all = wait_for_dumps(&d, 3, Duration::from_secs(10));
    assert_eq!(storm.len(), 2, "two dumps during the storm: {storm:?}");
    assert_eq!(all.len(), 3);
    let counted: u64 = all
        .iter()
        .map(|p| 1 + trigger_of(p)["suppressed_before"].as_u64().unwrap())
        .sum();
    assert_eq!(
        counted,
        CRASHES as u64 + 1,
        "every crash either fired or was counted as suppressed"
    );
    assert_eq!(trigger_of(&all[0])["suppressed_before"], 0);
}

/// Parses Prometheus text format 0.0.4: (TYPE of each family, samples by "name{labels}").
fn parse_prometheus(
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

#[test]
fn dumps_are_redacted_before_they_are_written() {
    require_root();
    let prog = program_as("crasher", "cr_redact");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("redact.toml");
    // the default rule plus one of the operator's own (rules given replace the default)
    std::fs::write(
        &config,
        format!(
            "[[redact]]\npattern = '{}'\nreplacement = \"{}\"\n[[redact]]\npattern = 'customer-[0-9]+'\nreplacement = \"customer-N\"\n",
            tracerd::redact::DEFAULT_PATTERN,
            tracerd::redact::DEFAULT_REPLACEMENT
        ),
    )
    .unwrap();
    let d = Daemon::start(&["--config", config.to_str().unwrap(), "--target-comm", "cr_redact"]);
    let argv_pid = run_to_end(
        &prog,
        &[
            "argv",
            "--password=hunter2",
            "--port=7001",
            "https://db/x?token=tok3n&y=1",
        ],
    );
    let path = "/nonexistent/customer-4711/api_key=k3y";
    let fail_pid = run_to_end(&prog, &["fail", path]);
    let dump = d.dump();

    let parsed = tracerd::dump::Dump::read(&dump).unwrap();
    let meta_json = serde_json::to_string(&parsed.meta).unwrap();
    let window = String::from_utf8_lossy(&parsed.blobs.bytes).into_owned();
    for secret in ["hunter2", "tok3n", "4711", "k3y"] {
        assert!(!meta_json.contains(secret), "{secret} is in the dump's header");
        assert!(!window.contains(secret), "{secret} is in the dump's blobs");
    }
    let p = parsed
        .meta
        .processes
        .iter()
        .find(|p| p.pid == argv_pid)
        .expect("the process is in the table");
    let argv = p.cmdline.as_ref().unwrap();
    assert_eq!(
        &argv[1..],
        [
            "argv",
            "--password=<redacted>",
            "--port=7001",
            "https://db/x?token=<redacted>&y=1"
        ]
    );
    let events = inspect_json(&dump);
    let failure = events
        .iter()
        .find(|e| e["pid"] == fail_pid && e["path"].as_str().is_some_and(|p| p.starts_with("/nonexistent/")))
        .expect("the failed open");
    assert_eq!(failure["path"], "/nonexistent/customer-N/api_key=<redacted>");
}
