//! System tests of `reproducer run` / `replay` on the real kernel, as root: one test per
//! precision claim, each against tests/programs/faulty.c, each asserting the replay rate
//! (10/10) and, from a kept run, that the fault fired at the right point. After every test:
//! no stray process, network namespace, bridge or BPF link.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::*;

fn reproducer_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_reproducer"))
}

fn faulty() -> String {
    program("faulty").display().to_string()
}

/// Writes the scenario and schedule into a temp dir.
fn files(scenario: &str, schedule: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let sc = dir.path().join("scenario.toml");
    let sch = dir.path().join("schedule.toml");
    std::fs::write(&sc, scenario.replace("FAULTY", &faulty())).unwrap();
    std::fs::write(&sch, schedule).unwrap();
    (dir, sc, sch)
}

fn reproducer(args: &[&str]) -> Output {
    Command::new(reproducer_bin())
        .args(args)
        .output()
        .expect("running reproducer")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// How much later than on a real machine a timed event may come: 1, or REPRODUCER_TEST_SLACK
/// (scripts/test-kernels sets it for emulated guests, where time runs 10-50x slower).
fn timing_slack() -> u64 {
    std::env::var("REPRODUCER_TEST_SLACK")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&s| s >= 1)
        .unwrap_or(1)
}

fn link_count() -> usize {
    let out = Command::new("bpftool")
        .args(["link", "list"])
        .output()
        .expect("bpftool");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.is_empty())
        .count()
}

fn assert_clean(links_before: usize) {
    let netns = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    assert!(
        !netns.lines().any(|l| l.starts_with("rp")),
        "stray network namespaces: {netns}"
    );
    let links = String::from_utf8_lossy(&Command::new("ip").args(["-o", "link"]).output().unwrap().stdout)
        .to_string();
    assert!(
        !links.lines().any(|l| l.contains(": rpb") || l.contains(": rp")),
        "stray interfaces: {links}"
    );
    let procs = Command::new("pgrep").args(["-x", "faulty"]).output().unwrap();
    assert!(
        procs.stdout.is_empty(),
        "stray processes: {}",
        String::from_utf8_lossy(&procs.stdout)
    );
    // links are released asynchronously after the process exits
    for _ in 0..50 {
        if link_count() <= links_before {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(link_count() <= links_before, "stray BPF links");
}

/// Replays 10 times (asserting 10/10), then one kept run; returns that run's output and dir.
/// REPRODUCER_TEST_RUNS replaces the 10 (scripts/test-kernels: fewer runs in emulated guests).
fn replay_and_keep(scenario: &str, schedule: &str) -> (String, PathBuf) {
    require_root();
    let runs: u32 = std::env::var("REPRODUCER_TEST_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let links = link_count();
    let (_dir, sc, sch) = files(scenario, schedule);
    let out = reproducer(&[
        "replay",
        "--scenario",
        sc.to_str().unwrap(),
        "--schedule",
        sch.to_str().unwrap(),
        "--runs",
        &runs.to_string(),
    ]);
    let t = text(&out);
    assert!(t.contains(&format!("replay rate: {runs}/{runs}")), "{t}");
    assert!(out.status.success());
    assert_clean(links);
    let out = reproducer(&[
        "run",
        "--scenario",
        sc.to_str().unwrap(),
        "--schedule",
        sch.to_str().unwrap(),
        "--keep",
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let workdir = t
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .map(PathBuf::from)
        .expect("run directory printed");
    assert_clean(links);
    (t, workdir)
}

fn log(workdir: &Path, node: &str) -> String {
    std::fs::read_to_string(workdir.join(format!("{node}.log"))).unwrap_or_default()
}

fn trace_events(workdir: &Path) -> Vec<serde_json::Value> {
    let dir = workdir.join("trace");
    let dump = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    inspect_json(&dump)
}

/// A workload that waits until NODE's log contains TEXT (at most 10 s).
fn wait_for(node: &str, needle: &str) -> String {
    format!(
        r#"["sh", "-c", "for i in $(seq 200); do grep -q '{needle}' {{workdir}}/{node}.log && exit 0; sleep 0.05; done; exit 1"]"#
    )
}

#[test]
fn fails_the_third_write_to_one_file_only() {
    let scenario = format!(
        r#"name = "writes"
run_timeout_s = 20
[[nodes]]
name = "n1"
command = ["FAULTY", "writes", "{{workdir}}/n1"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "grep -q 'write 3 to a: No space' {{workdir}}/n1.log && [ $(grep -c 'No space' {{workdir}}/n1.log) -eq 1 ]"]
"#,
        wait_for("n1", "write 5 to b")
    );
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"ENOSPC\"\npath = \"{workdir}/n1/a\"\nnth = 3\n";
    let (out, workdir) = replay_and_keep(&scenario, schedule);
    assert!(out.contains("faults fired: 1/1"), "{out}");
    let n1 = log(&workdir, "n1");
    assert!(
        n1.contains("write 2 to a: ok") && n1.contains("write 4 to a: ok") && n1.contains("write 3 to b: ok"),
        "{n1}"
    );
    let failed: Vec<_> = trace_events(&workdir)
        .into_iter()
        .filter(|e| e["kind"] == "syscall_failure" && e["syscall"] == "write")
        .collect();
    assert_eq!(
        failed.len(),
        1,
        "the run's trace shows exactly the injected failure: {failed:#?}"
    );
    assert_eq!(failed[0]["errno"], "ENOSPC");
    assert!(failed[0]["path"].as_str().unwrap().ends_with("/n1/a"));
    let _ = std::fs::remove_dir_all(&workdir);
}

/// The scenario of `faulty records`: one node writing 10 records, done when it says so.
fn records_scenario(oracle: &str) -> String {
    format!(
        r#"name = "records"
run_timeout_s = 20
[[nodes]]
name = "n1"
command = ["FAULTY", "records", "{{workdir}}/n1", "10"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "{oracle}"]
"#,
        wait_for("n1", "records done")
    )
}

fn run_json(workdir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(workdir.join("run.json")).expect("run.json");
    serde_json::from_str(&text).expect("run.json is JSON")
}

#[test]
fn a_persistent_fault_fails_every_later_matching_call() {
    let scenario = records_scenario("grep -q 'failed 8 of 10' {workdir}/n1.log");
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"ENOSPC\"\npath = \"{workdir}/n1/log\"\nnth = 3\nuntil = \"end\"\n";
    let (out, workdir) = replay_and_keep(&scenario, schedule);
    assert!(out.contains("faults fired: 1/1"), "{out}");
    assert!(
        out.contains("every later matching call fails until the end"),
        "{out}"
    );
    assert!(
        out.contains("fault 1 then failed 7 more matching call(s)"),
        "{out}"
    );
    let n1 = log(&workdir, "n1");
    for want in [
        "record 2: 100",
        "record 3: No space left on device",
        "record 10: No space left on device",
        "write 10 to other: ok",
        "log size 200",
    ] {
        assert!(n1.lines().any(|l| l == want), "{want}: {n1}");
    }
    assert_eq!(run_json(&workdir)["failed_after"], serde_json::json!([7]));
    let failed = trace_events(&workdir)
        .into_iter()
        .filter(|e| e["kind"] == "syscall_failure" && e["syscall"] == "write" && e["errno"] == "ENOSPC")
        .count();
    assert_eq!(failed, 8, "the run's trace shows every failed write");
    let _ = std::fs::remove_dir_all(&workdir);
}

#[test]
fn a_short_fault_writes_exactly_its_bytes_and_the_program_sees_the_count() {
    let scenario = records_scenario("grep -q 'record 2: 30' {workdir}/n1.log");
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\npath = \"{workdir}/n1/log\"\nnth = 2\nshort = 30\n\n\
                    [[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"pwrite64\"\npath = \"{workdir}/n1/plog\"\nshort = 10\n";
    let (out, workdir) = replay_and_keep(&scenario, schedule);
    assert!(out.contains("faults fired: 2/2"), "{out}");
    assert!(out.contains("(short: wrote 30 of 100 bytes)"), "{out}");
    assert!(out.contains("(short: wrote 10 of 100 bytes)"), "{out}");
    let n1 = log(&workdir, "n1");
    for want in [
        "record 1: 100",
        "record 2: 30",
        "record 3: 100",
        "precord 1: 10",
        "precord 2: 100",
        "failed 0 of 10",
        // the 30 bytes went through the program's own file offset: the next record follows them
        "log size 930",
        "plog size 300, 90 zero bytes",
    ] {
        assert!(n1.lines().any(|l| l == want), "{want}: {n1}");
    }
    let log_bytes = std::fs::read(workdir.join("n1/log")).unwrap();
    assert!(
        log_bytes.iter().all(|&b| b == b'r'),
        "the supervisor wrote the program's own bytes"
    );
    let short: Vec<(String, i64, u64)> = trace_events(&workdir)
        .iter()
        .filter(|e| e["kind"] == "short_io")
        .map(|e| {
            (
                e["syscall"].as_str().unwrap_or("").to_string(),
                e["ret"].as_i64().unwrap_or(-1),
                e["requested"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        short,
        [("write".to_string(), 30, 100), ("pwrite64".to_string(), 10, 100)],
        "the run's trace shows the short writes as tracerd records them in production"
    );
    let _ = std::fs::remove_dir_all(&workdir);
}

#[test]
fn fails_openat_only_after_function_f() {
    let scenario = format!(
        r#"name = "open-after"
[[nodes]]
name = "n1"
command = ["FAULTY", "open-after", "{{workdir}}/n1"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "grep -q 'open before f: ok' {{workdir}}/n1.log && grep -q 'open after f: Permission denied' {{workdir}}/n1.log"]
"#,
        wait_for("n1", "open after f")
    );
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"openat\"\nerrno = \"EACCES\"\npath = \"{workdir}/n1/x\"\nafter_functions = [\"stage_f\"]\n";
    let (out, workdir) = replay_and_keep(&scenario, schedule);
    assert!(out.contains("faults fired: 1/1"), "{out}");
    let _ = std::fs::remove_dir_all(&workdir);
}

#[test]
fn crashes_at_entry_of_g_not_h() {
    let scenario = format!(
        r#"name = "crash-order"
[[nodes]]
name = "n1"
command = ["FAULTY", "crash-order"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "grep -q 'h done' {{workdir}}/n1.log && ! grep -q 'g entered' {{workdir}}/n1.log"]
"#,
        wait_for("n1", "h done")
    );
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"crash\"\nafter_functions = [\"stage_g\"]\n";
    let (out, workdir) = replay_and_keep(&scenario, schedule);
    assert!(out.contains("at stage_g"), "{out}");
    let killed = trace_events(&workdir)
        .into_iter()
        .any(|e| e["state"] == "killed" && e["signal"] == "SIGKILL");
    assert!(killed, "the trace shows the kill");
    let _ = std::fs::remove_dir_all(&workdir);
}

/// Offset of `label` from `function` in `binary`, from its symbol table.
fn symbol_offset(binary: &str, function: &str, label: &str) -> u64 {
    let out = run_ok(Command::new("nm").arg(binary));
    let addr = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(2) == Some(name))
            .and_then(|l| u64::from_str_radix(l.split_whitespace().next().unwrap(), 16).ok())
            .unwrap_or_else(|| panic!("{name} not in {binary}"))
    };
    addr(label) - addr(function)
}

#[test]
fn crashes_at_an_offset_inside_a_function() {
    let offset = symbol_offset(&faulty(), "stage_k", "stage_k_mid");
    assert!(offset > 0);
    let scenario = format!(
        r#"name = "offset"
[[nodes]]
name = "n1"
command = ["FAULTY", "offset"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "grep -q 'k first half' {{workdir}}/n1.log && ! grep -q 'k second half' {{workdir}}/n1.log"]
"#,
        wait_for("n1", "k first half")
    );
    let schedule = format!(
        "[[faults]]\nnode = \"n1\"\nkind = \"crash\"\nafter_functions = [\"stage_k\"]\noffset = {offset}\n"
    );
    let (out, workdir) = replay_and_keep(&scenario, &schedule);
    assert!(out.contains(&format!("at stage_k+{offset}")), "{out}");
    let _ = std::fs::remove_dir_all(&workdir);
}

#[test]
fn pauses_a_process_for_two_seconds() {
    let scenario = format!(
        r#"name = "pause"
[[nodes]]
name = "n1"
command = ["FAULTY", "ticks", "3500"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "gap=$(sed -n 's/longest tick gap \\([0-9]*\\) ms/\\1/p' {{workdir}}/n1.log); [ \"$gap\" -ge 1950 ] && [ \"$gap\" -lt {late} ]"]
"#,
        wait_for("n1", "longest tick gap"),
        late = 2000 + 600 * timing_slack(),
    );
    let schedule =
        "[[faults]]\nnode = \"n1\"\nkind = \"pause\"\nafter_functions = [\"stage_p\"]\nduration_ms = 2000\n";
    let (out, workdir) = replay_and_keep(&scenario, schedule);
    assert!(out.contains("at stage_p"), "{out}");
    let paused = trace_events(&workdir)
        .into_iter()
        .find(|e| e["state"] == "paused")
        .expect("the trace shows the pause");
    let ms = paused["duration_ms"].as_u64().unwrap();
    assert!(
        (1900..2000 + 600 * timing_slack()).contains(&ms),
        "paused {ms} ms"
    );
    let _ = std::fs::remove_dir_all(&workdir);
}

#[test]
fn partitions_two_nodes_for_three_seconds() {
    let scenario = format!(
        r#"name = "partition"
run_timeout_s = 30
[[nodes]]
name = "server"
command = ["FAULTY", "serve", "7000"]
address = "10.219.0.11"
ready = ["sh", "-c", "grep -q listening {{workdir}}/server.log"]
[[nodes]]
name = "client"
command = ["FAULTY", "ping", "{{node.server.address}}", "7000", "6000"]
address = "10.219.0.12"
[workload]
command = {}
[oracle]
command = ["sh", "-c", "w=$(sed -n 's/worst rtt \\([0-9]*\\) ms/\\1/p' {{workdir}}/client.log); [ \"$w\" -ge 2500 ]"]
"#,
        wait_for("client", "worst rtt")
    );
    // after the connect: a partition before it would only delay the handshake
    let schedule = "[[faults]]\nnode = \"client\"\nkind = \"partition\"\npeers = [\"server\"]\nduration_ms = 3000\nafter_functions = [\"stage_c\"]\n";
    let (out, workdir) = replay_and_keep(&scenario, schedule);
    assert!(
        out.contains("fault 1 partition on client") && out.contains("at stage_c"),
        "{out}"
    );
    let client = log(&workdir, "client");
    assert!(
        client.contains("worst rtt"),
        "the connection recovered after the partition: {client}"
    );
    let gap = trace_events(&workdir)
        .into_iter()
        .any(|e| e["kind"] == "network_gap" && e["duration_ms"].as_u64().unwrap_or(0) >= 2500);
    assert!(gap, "the trace shows the silence");
    let _ = std::fs::remove_dir_all(&workdir);
}

#[test]
fn forked_child_counts_against_its_node() {
    let scenario = format!(
        r#"name = "fork"
[[nodes]]
name = "n1"
command = ["FAULTY", "fork-write", "{{workdir}}/n1"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "grep -q 'write 2 to c: No space' {{workdir}}/n1.log && grep -q 'write 3 to c: ok' {{workdir}}/n1.log"]
"#,
        wait_for("n1", "write 3 to c")
    );
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"ENOSPC\"\npath = \"{workdir}/n1/c\"\nnth = 2\n";
    replay_and_keep(&scenario, schedule);
}

#[test]
fn restarted_node_keeps_counting() {
    // the node writes a five times and exits; restarted, it writes a five times more:
    // the 7th write to a overall is the 2nd of the second incarnation
    let scenario = r#"name = "restart"
[[nodes]]
name = "n1"
command = ["FAULTY", "writes", "{workdir}/n1"]
restart = true
[workload]
command = ["sh", "-c", "for i in $(seq 200); do [ $(grep -c 'write 5 to b' {workdir}/n1.log) -ge 2 ] && exit 0; sleep 0.05; done; exit 1"]
[oracle]
command = ["sh", "-c", "[ $(grep -c 'No space' {workdir}/n1.log) -eq 1 ] && [ $(grep -c 'write 2 to a: No space' {workdir}/n1.log) -eq 1 ]"]
"#.to_string();
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"ENOSPC\"\npath = \"{workdir}/n1/a\"\nnth = 7\n";
    replay_and_keep(&scenario, schedule);
}

#[test]
fn second_fault_waits_for_the_first() {
    // stage_g runs before the write that fires fault 1, so fault 2 (crash after stage_g)
    // must not fire: its context only counts once fault 1 has been injected
    let scenario = format!(
        r#"name = "order"
[[nodes]]
name = "n1"
command = ["FAULTY", "two-faults", "{{workdir}}/n1"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "grep -q 'write 1 to a: Input/output error' {{workdir}}/n1.log && grep -q 'write 2 to a: ok' {{workdir}}/n1.log"]
"#,
        wait_for("n1", "write 2 to a")
    );
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"EIO\"\npath = \"{workdir}/n1/a\"\n\n[[faults]]\nnode = \"n1\"\nkind = \"crash\"\nafter_functions = [\"stage_g\"]\n";
    let (out, _workdir) = replay_and_keep(&scenario, schedule);
    assert!(out.contains("faults fired: 1/2"), "{out}");
}

fn profile_scenario(oracle: &str) -> String {
    format!(
        r#"name = "profiled"
[[nodes]]
name = "n1"
command = ["FAULTY", "profile", "{{workdir}}/n1", "1500"]
[workload]
command = {}
[oracle]
command = {oracle}
"#,
        wait_for("n1", "profile done")
    )
}

/// What is left in `tmp` (the TMPDIR a reproducer ran with).
fn leftovers(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect()
}

#[test]
fn profile_counts_benign_failures_and_finds_infrequent_functions() {
    require_root();
    let links = link_count();
    let (dir, sc, _) = files(&profile_scenario(r#"["false"]"#), "");
    // its own TMPDIR: the check below must not see other programs' scratch directories
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out_path = dir.path().join("profile.json");
    let out = Command::new(reproducer_bin())
        .args([
            "profile",
            "--scenario",
            sc.to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
        ])
        .env("TMPDIR", &tmp)
        .output()
        .expect("running reproducer");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let list_path = dir.path().join("profile.functions");
    assert!(
        t.contains(&format!("infrequent functions: {}", list_path.display())),
        "{t}"
    );
    assert!(t.contains("profile: 3 runs"), "{t}");
    assert_clean(links);
    assert_eq!(
        leftovers(&tmp),
        Vec::<PathBuf>::new(),
        "the runs' scratch directory is removed"
    );

    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    assert_eq!(p["format"], "reproducer-profile");
    assert_eq!(p["version"], 1);
    assert_eq!(p["scenario"], "profiled");
    assert_eq!(p["runs"], 3);
    assert_eq!(p["run_seconds"].as_array().unwrap().len(), 3);
    assert!(
        p["run_seconds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s.as_f64().unwrap() >= 1.5),
        "{}",
        p["run_seconds"]
    );
    assert_eq!(p["scenario_nodes"]["n1"][1], "profile");

    let failures = p["failures"].as_array().unwrap();
    let optional = failures
        .iter()
        .find(|f| f["path"] == "*/optional-*.conf")
        .unwrap_or_else(|| {
            panic!("the benign ENOENT signature, three paths normalized into one: {failures:#?}")
        });
    assert_eq!(
        (
            optional["node"].as_str(),
            optional["syscall"].as_str(),
            optional["errno"].as_str()
        ),
        (Some("n1"), Some("openat"), Some("ENOENT"))
    );
    assert_eq!(optional["per_run"], serde_json::json!([3, 3, 3]));
    assert!(optional["per_second"].as_f64().unwrap() > 0.5 / timing_slack() as f64);

    let syscalls = p["syscalls"].as_array().unwrap();
    let openat = syscalls
        .iter()
        .find(|s| s["node"] == "n1" && s["syscall"] == "openat")
        .expect("openat counted for n1");
    assert!(
        openat["per_run"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n.as_u64().unwrap() >= 3),
        "{openat}"
    );

    let functions = p["functions"].as_array().unwrap();
    let function = |name: &str| {
        functions
            .iter()
            .find(|f| f["symbol"] == name)
            .unwrap_or_else(|| panic!("{name} profiled: {functions:#?}"))
    };
    let binary = std::fs::canonicalize(faulty()).unwrap().display().to_string();
    let once = function("stage_once");
    assert_eq!(once["per_run"], serde_json::json!([1, 1, 1]));
    assert_eq!(once["infrequent"], true);
    assert_eq!(once["binary"], binary.as_str());
    assert_eq!(once["node"], "n1");
    let hot = function("stage_hot");
    assert_eq!(hot["per_run"], serde_json::json!([20000, 20000, 20000]));
    assert_eq!(hot["infrequent"], false);
    assert_eq!(
        function("stage_g")["per_run"],
        serde_json::json!([0, 0, 0]),
        "never called in this mode"
    );
    assert_eq!(p["dropped"]["events"], 0);

    let list = std::fs::read_to_string(&list_path).unwrap();
    let lines: Vec<&str> = list.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(lines.contains(&format!("{binary}:stage_once").as_str()), "{list}");
    assert!(!list.contains("stage_hot"), "{list}");
    assert!(
        lines.iter().all(|l| l.starts_with(&format!("{binary}:"))),
        "{list}"
    );

    // the list is what production tracerd reads (its `functions` setting)
    let config = tracerd::config::Config {
        functions: Some(list_path.clone()),
        ..Default::default()
    };
    let specs = config.function_specs().expect("tracerd reads the list");
    assert_eq!(specs.len(), lines.len());
    assert!(specs
        .iter()
        .any(|f| f.symbol == "stage_once" && f.binary.display().to_string() == binary));
}

#[test]
fn profile_refuses_an_oracle_that_fires_without_faults() {
    require_root();
    let links = link_count();
    let (dir, sc, _) = files(&profile_scenario(r#"["true"]"#), "");
    let out_path = dir.path().join("profile.json");
    let out = reproducer(&[
        "profile",
        "--scenario",
        sc.to_str().unwrap(),
        "--runs",
        "2",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("oracle fired in fault-free run 1 of 2"), "{t}");
    assert!(!out_path.exists(), "no profile is written");
    assert_clean(links);
}

#[test]
fn bad_schedule_names_file_line_and_field() {
    require_root();
    let scenario = "name = \"s\"\n[[nodes]]\nname = \"n1\"\ncommand = [\"true\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";
    for (schedule, needle) in [
        (
            "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"wrte\"\nerrno = \"ENOSPC\"\n",
            "line 4",
        ),
        ("[[faults]]\nnode = \"n9\"\nkind = \"crash\"\n", "n9"),
        (
            "[[faults]]\nnode = \"n1\"\nkind = \"crash\"\nsignal = \"SIGNOPE\"\n",
            "SIGNOPE",
        ),
        (
            "[[faults]]\nnode = \"n1\"\nkind = \"crash\"\nbogus = 1\n",
            "bogus",
        ),
        (
            "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"EWHAT\"\n",
            "EWHAT",
        ),
    ] {
        let (_d, sc, sch) = files(scenario, schedule);
        let out = reproducer(&[
            "run",
            "--scenario",
            sc.to_str().unwrap(),
            "--schedule",
            sch.to_str().unwrap(),
        ]);
        let t = text(&out);
        assert!(!out.status.success(), "{schedule}");
        assert!(t.contains("schedule.toml") && t.contains(needle), "{t}");
        assert_eq!(t.trim_end().lines().count(), 1, "{t}");
    }
}

#[test]
fn node_that_never_becomes_ready_shows_its_log() {
    require_root();
    let scenario = "name = \"s\"\nrun_timeout_s = 3\n[[nodes]]\nname = \"n1\"\ncommand = [\"sh\", \"-c\", \"echo starting up; echo config broken; sleep 30\"]\nready = [\"false\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";
    let links = link_count();
    let (_d, sc, _) = files(scenario, "");
    let out = reproducer(&["run", "--scenario", sc.to_str().unwrap()]);
    let t = text(&out);
    assert!(!out.status.success());
    assert!(
        t.contains("never became ready") && t.contains("config broken"),
        "{t}"
    );
    assert_clean(links);
}

/// A fault that stops a node from starting is the run's result, not an error: the run says
/// which node, why, and that the fault fired in which process.
#[test]
fn a_node_that_a_fault_keeps_from_starting_is_a_result() {
    require_root();
    let scenario = "name = \"s\"\nrun_timeout_s = 10\n[[nodes]]\nname = \"n1\"\n\
        command = [\"sh\", \"-c\", \"echo x > {workdir}/n1/conf && echo started && touch {workdir}/n1/up && sleep 30\"]\n\
        ready = [\"test\", \"-f\", \"{workdir}/n1/up\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"openat\"\nerrno = \"EACCES\"\npath = \"{workdir}/n1/conf\"\n";
    let links = link_count();
    let (_d, sc, sch) = files(scenario, schedule);
    let out = reproducer(&[
        "run",
        "--scenario",
        sc.to_str().unwrap(),
        "--schedule",
        sch.to_str().unwrap(),
        "--keep",
    ]);
    let t = text(&out);
    assert!(out.status.success(), "a result, not an error: {t}");
    assert!(
        t.contains("bug: no — node n1 exited") && t.contains("before it was ready"),
        "{t}"
    );
    assert!(t.contains("fault 1 fired in pid"), "{t}");
    assert!(t.contains("faults fired: 1/1"), "{t}");
    let workdir = t
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .map(PathBuf::from)
        .expect("run directory printed");
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(workdir.join("run.json")).unwrap()).unwrap();
    assert!(
        run["not_started"].as_str().unwrap().contains("node n1"),
        "{run:#}"
    );
    let _ = std::fs::remove_dir_all(&workdir);
    assert_clean(links);
}

#[test]
fn sigint_mid_run_leaves_nothing_behind() {
    require_root();
    let scenario = "name = \"s\"\nrun_timeout_s = 60\n[[nodes]]\nname = \"a\"\ncommand = [\"FAULTY\", \"serve\", \"7000\"]\naddress = \"10.219.1.11\"\n[[nodes]]\nname = \"b\"\ncommand = [\"FAULTY\", \"ticks\", \"60000\"]\naddress = \"10.219.1.12\"\n[workload]\ncommand = [\"sleep\", \"60\"]\n[oracle]\ncommand = [\"true\"]\n";
    let links = link_count();
    let (_d, sc, _) = files(scenario, "");
    let mut child = Command::new(reproducer_bin())
        .args(["run", "--scenario", sc.to_str().unwrap()])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(!status.success(), "an interrupted run is not a success");
    assert_clean(links);
}

#[test]
fn go_functions_of_a_stripped_binary_are_profiled_and_are_fault_context() {
    require_root();
    let links = link_count();
    let gonode = go_program("gonode").display().to_string();
    let scenario = r#"name = "go"
[[nodes]]
name = "n1"
command = ["GONODE", "calls", "5", "50"]
[workload]
command = ["sleep", "1.5"]
[oracle]
command = ["sh", "-c", "! grep -q done {workdir}/n1.log && [ ! -e {workdir}/snapshot-0 ]"]
"#
    .replace("GONODE", &gonode);
    let schedule =
        "[[faults]]\nnode = \"n1\"\nkind = \"crash\"\nafter_functions = [\"main.(*store).storeSnapshot\"]\n";
    let (dir, sc, sch) = files(&scenario, schedule);
    let out_path = dir.path().join("profile.json");
    let out = reproducer(&[
        "profile",
        "--scenario",
        sc.to_str().unwrap(),
        "--runs",
        "2",
        "--functions-from",
        "main.*",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let functions = p["functions"].as_array().unwrap();
    let snapshot = functions
        .iter()
        .find(|f| f["symbol"] == "main.(*store).storeSnapshot")
        .unwrap_or_else(|| panic!("the Go method is a candidate of the stripped binary: {functions:#?}"));
    // a call that grows the goroutine's stack runs the function's entry twice (Go restarts
    // the function after growing the stack), so a run may count one call more
    let counts: Vec<u64> = snapshot["per_run"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert!(
        counts.len() == 2 && counts.iter().all(|&n| (5..=7).contains(&n)),
        "{counts:?}"
    );
    assert_eq!(
        snapshot["binary"],
        std::fs::canonicalize(&gonode).unwrap().display().to_string()
    );
    assert!(
        functions
            .iter()
            .all(|f| f["symbol"].as_str().unwrap().starts_with("main.")),
        "{functions:#?}"
    );
    assert_clean(links);

    let out = reproducer(&[
        "replay",
        "--scenario",
        sc.to_str().unwrap(),
        "--schedule",
        sch.to_str().unwrap(),
        "--runs",
        "3",
    ]);
    let t = text(&out);
    assert!(out.status.success() && t.contains("replay rate: 3/3"), "{t}");
    assert_clean(links);
}

#[test]
fn profile_finds_the_programs_behind_wrappers_and_warns_about_zero_candidates() {
    require_root();
    let links = link_count();
    let scenario = format!(
        r#"name = "wrapped"
[[nodes]]
name = "n1"
command = ["setpriv", "--no-new-privs", "FAULTY", "profile", "{{workdir}}/n1", "300"]
[[nodes]]
name = "n2"
command = ["runuser", "-u", "root", "--", "FAULTY", "profile", "{{workdir}}/n2", "300"]
[[nodes]]
name = "n3"
command = ["sh", "-c", "exec FAULTY profile {{workdir}}/n3 300"]
[workload]
command = {}
[oracle]
command = ["false"]
"#,
        wait_for("n2", "profile done")
    );
    let (dir, sc, _) = files(&scenario, "");
    let out_path = dir.path().join("profile.json");
    let out = reproducer(&[
        "profile",
        "--scenario",
        sc.to_str().unwrap(),
        "--runs",
        "1",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("repeated with the functions of the programs the nodes really run"),
        "{t}"
    );
    assert!(!t.contains("WARNING"), "{t}");
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let binary = std::fs::canonicalize(faulty()).unwrap().display().to_string();
    for node in ["n1", "n2", "n3"] {
        assert_eq!(
            p["programs"][node],
            serde_json::json!([binary]),
            "{node}: the wrapper is ignored: {}",
            p["programs"]
        );
    }
    let functions = p["functions"].as_array().unwrap();
    let once = functions
        .iter()
        .find(|f| f["symbol"] == "stage_once")
        .unwrap_or_else(|| panic!("{functions:#?}"));
    assert_eq!(
        once["per_run"],
        serde_json::json!([3]),
        "one call in each of the three nodes"
    );
    assert_eq!(once["binary"], binary.as_str());
    assert_eq!(p["runs"], 1);
    assert_clean(links);

    // nothing to count: loud, with the reason
    for (command, patterns, why) in [
        (
            r#"["sh", "-c", "i=0; while [ $i -lt 50 ]; do i=$((i+1)); done"]"#,
            vec![],
            "node n1 runs only wrappers",
        ),
        (
            r#"["FAULTY", "profile", "{workdir}/n1", "100"]"#,
            vec!["--functions-from", "no_such_*"],
            "--functions-from matched none",
        ),
    ] {
        let scenario = format!("name = \"none\"\n[[nodes]]\nname = \"n1\"\ncommand = {command}\n[workload]\ncommand = [\"sleep\", \"0.5\"]\n[oracle]\ncommand = [\"false\"]\n");
        let (dir, sc, _) = files(&scenario, "");
        let out_path = dir.path().join("profile.json");
        let mut args = vec![
            "profile",
            "--scenario",
            sc.to_str().unwrap(),
            "--runs",
            "1",
            "--out",
            out_path.to_str().unwrap(),
        ];
        args.extend(patterns);
        let out = reproducer(&args);
        let t = text(&out);
        assert!(
            t.contains("WARNING: 0 candidate functions") && t.contains(why),
            "{t}"
        );
    }
    assert_clean(links);
}

#[test]
fn setup_runs_before_the_nodes_and_a_node_runs_as_its_user() {
    let scenario = format!(
        r#"name = "as-user"
run_timeout_s = 20
[[setup]]
command = ["sh", "-c", "id -un > {{workdir}}/n1/setup-user && echo prepared > {{workdir}}/n1/prepared"]
user = "nobody"
[[setup]]
command = ["sh", "-c", "test -e {{workdir}}/n1/prepared"]
[[nodes]]
name = "n1"
user = "nobody"
command = ["FAULTY", "writes", "{{workdir}}/n1"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "grep -q 'write 3 to a: No space' {{workdir}}/n1.log"]
"#,
        wait_for("n1", "write 5 to b")
    );
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"ENOSPC\"\npath = \"{workdir}/n1/a\"\nnth = 3\n";
    let (_out, workdir) = replay_and_keep(&scenario, schedule);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::read_to_string(workdir.join("n1/setup-user"))
            .unwrap()
            .trim(),
        "nobody"
    );
    assert_eq!(
        std::fs::metadata(workdir.join("n1")).unwrap().uid(),
        65534,
        "{{workdir}}/n1 belongs to the node's user"
    );
    assert_eq!(
        std::fs::metadata(workdir.join("n1/a")).unwrap().uid(),
        65534,
        "the node wrote as nobody"
    );
    let _ = std::fs::remove_dir_all(&workdir);

    // a setup step that fails or hangs is a scenario error naming the step, with its log
    for (step, needle) in [
        (
            "command = [\"sh\", \"-c\", \"echo initdb: cannot create the data directory; exit 3\"]",
            "setup 1 (sh -c echo initdb",
        ),
        (
            "command = [\"sleep\", \"30\"]\ntimeout_s = 1",
            "did not finish within 1 s",
        ),
    ] {
        let scenario = format!("name = \"s\"\n[[setup]]\n{step}\n[[nodes]]\nname = \"n1\"\ncommand = [\"true\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n");
        let (_d, sc, _) = files(&scenario, "");
        let out = reproducer(&["run", "--scenario", sc.to_str().unwrap()]);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{t}");
        assert!(t.contains(needle), "{t}");
        if needle.contains("initdb") {
            assert!(
                t.contains("exit status: 3") && t.contains("cannot create the data directory"),
                "{t}"
            );
        }
    }
}

#[test]
fn a_fault_in_a_thread_names_process_and_thread() {
    let scenario = format!(
        r#"name = "thread"
[[nodes]]
name = "n1"
command = ["FAULTY", "thread-write", "{{workdir}}/n1"]
[workload]
command = {}
[oracle]
command = ["sh", "-c", "grep -q 'write 2 to t: No space' {{workdir}}/n1.log"]
"#,
        wait_for("n1", "write 2 to t")
    );
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"ENOSPC\"\npath = \"{workdir}/n1/t\"\nnth = 2\n";
    let (out, workdir) = replay_and_keep(&scenario, schedule);
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(workdir.join("run.json")).unwrap()).unwrap();
    let node_pid = run["launched"][0][1].as_u64().unwrap();
    let fired = &run["fired"][0];
    assert_eq!(
        fired["pid"].as_u64().unwrap(),
        node_pid,
        "the process, not the thread: {fired}"
    );
    assert_ne!(
        fired["tid"], fired["pid"],
        "the writing thread is not the main thread: {fired}"
    );
    assert!(
        out.contains(&format!("pid {node_pid} tid {}", fired["tid"])),
        "{out}"
    );
    assert_eq!(run["kept"], true, "run.json of a kept run says so");
    let _ = std::fs::remove_dir_all(&workdir);
}

#[test]
fn a_schedule_naming_a_missing_function_is_refused_and_failed_runs_leave_no_directory() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let runs_left = || std::fs::read_dir(tmp.path()).unwrap().count();
    let scenario = "name = \"s\"\n[[nodes]]\nname = \"n1\"\ncommand = [\"FAULTY\", \"crash-order\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n";
    let schedule =
        "[[faults]]\nnode = \"n1\"\nkind = \"crash\"\nafter_functions = [\"stage_h\", \"no_such_stage\"]\n";
    let (_d, sc, sch) = files(scenario, schedule);
    let out = Command::new(reproducer_bin())
        .args([
            "run",
            "--scenario",
            sc.to_str().unwrap(),
            "--schedule",
            sch.to_str().unwrap(),
        ])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("schedule.toml, line 4: fault 1 field after_functions: no function 'no_such_stage'"),
        "{t}"
    );
    assert_eq!(t.trim_end().lines().count(), 1, "{t}");
    assert_eq!(runs_left(), 0);

    // errors after the run directory exists: a node that never gets ready, a failing setup
    for scenario in [
        "name = \"s\"\nrun_timeout_s = 2\n[[nodes]]\nname = \"n1\"\ncommand = [\"sleep\", \"30\"]\nready = [\"false\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n",
        "name = \"s\"\n[[setup]]\ncommand = [\"false\"]\n[[nodes]]\nname = \"n1\"\ncommand = [\"true\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n",
    ] {
        let (_d, sc, _) = files(scenario, "");
        let out = Command::new(reproducer_bin()).args(["run", "--scenario", sc.to_str().unwrap(), "--keep"]).env("TMPDIR", tmp.path()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert_eq!(runs_left(), 0, "a failed run removes its directory: {}", text(&out));
    }
}

/// Starts `reproducer run --keep` of `sc` with `schedule`, output piped.
fn spawn_run(sc: &Path, schedule: Option<&Path>) -> std::process::Child {
    let mut cmd = Command::new(reproducer_bin());
    cmd.args(["run", "--keep", "--scenario", sc.to_str().unwrap()]);
    if let Some(s) = schedule {
        cmd.args(["--schedule", s.to_str().unwrap()]);
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting reproducer run")
}

/// Kills the runs still going (on a failed assertion) so that nothing outlives the test.
struct Runs(Vec<std::process::Child>);

impl Drop for Runs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SIGINT: the run tears down what it made
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let _ = c.wait();
        }
    }
}

fn wait_all(runs: &mut Runs) -> Vec<(bool, String)> {
    std::mem::take(&mut runs.0)
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            (out.status.success(), text(&out))
        })
        .collect()
}

#[test]
fn two_runs_of_one_networked_scenario_go_side_by_side() {
    require_root();
    // the same addresses in both runs: each run has its own run namespace with its bridge,
    // where the workload and oracle run (the oracle connects to the server's address); the
    // partition filter sits on each run's own veth
    let scenario = format!(
        r#"name = "side-by-side"
run_timeout_s = 30
[[nodes]]
name = "server"
command = ["FAULTY", "serve", "7000"]
address = "10.219.2.11"
ready = ["sh", "-c", "grep -q listening {{workdir}}/server.log"]
[[nodes]]
name = "client"
command = ["FAULTY", "ping", "{{node.server.address}}", "7000", "5000"]
address = "10.219.2.12"
[workload]
command = {}
[oracle]
command = ["bash", "-c", "w=$(sed -n 's/worst rtt \\([0-9]*\\) ms/\\1/p' {{workdir}}/client.log); [ \"$w\" -ge 1500 ] && exec 3<>/dev/tcp/10.219.2.11/7000"]
"#,
        wait_for("client", "worst rtt")
    );
    let schedule = "[[faults]]\nnode = \"client\"\nkind = \"partition\"\npeers = [\"server\"]\nduration_ms = 2000\nafter_functions = [\"stage_c\"]\n";
    let links = link_count();
    let (_d, sc, sch) = files(&scenario, schedule);
    let mut runs = Runs(vec![spawn_run(&sc, Some(&sch)), spawn_run(&sc, Some(&sch))]);
    // each run lasts 5 s: after 2 s both are still going, each on its own network
    std::thread::sleep(Duration::from_secs(2));
    for c in &mut runs.0 {
        assert!(c.try_wait().unwrap().is_none(), "a run ended early");
    }
    let results = wait_all(&mut runs);
    let mut workdirs = Vec::new();
    for (ok, t) in &results {
        assert!(ok, "{t}");
        assert!(
            t.contains("bug: yes") && t.contains("fault 1 partition on client"),
            "{t}"
        );
        let workdir = t
            .lines()
            .find_map(|l| l.strip_prefix("run directory: "))
            .map(PathBuf::from)
            .expect("run directory printed");
        workdirs.push(workdir);
    }
    assert_ne!(workdirs[0], workdirs[1]);
    assert_clean(links);
    for w in workdirs {
        let _ = std::fs::remove_dir_all(w);
    }
}

#[test]
fn runs_on_the_host_network_wait_for_each_other() {
    require_root();
    // no address: the node listens on the host's port 7391; a second run at the same time
    // could not bind it, so the second waits for the first
    let scenario = "name = \"host-net\"\nrun_timeout_s = 20\n[[nodes]]\nname = \"a\"\ncommand = [\"FAULTY\", \"serve\", \"7391\"]\nready = [\"sh\", \"-c\", \"grep -q listening {workdir}/a.log\"]\n[workload]\ncommand = [\"sleep\", \"1\"]\n[oracle]\ncommand = [\"false\"]\n";
    let links = link_count();
    let (_d, sc, _) = files(scenario, "");
    let mut runs = Runs(vec![spawn_run(&sc, None), spawn_run(&sc, None)]);
    let results = wait_all(&mut runs);
    for (ok, t) in &results {
        assert!(ok, "{t}");
        assert!(t.contains("bug: no"), "{t}");
        if let Some(w) = t.lines().find_map(|l| l.strip_prefix("run directory: ")) {
            let _ = std::fs::remove_dir_all(w);
        }
    }
    assert_clean(links);
}
