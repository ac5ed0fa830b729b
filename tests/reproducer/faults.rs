//! One test per precision claim of the injected faults, each against tests/programs/faulty.c:
//! failed syscalls by count (from the node's start, or once every node is ready), path,
//! function context, node (forked children, restarts) and thread, persistent and short ones; crashes at a function's entry or at an offset inside
//! it; pauses; a second fault that waits for the first. Each asserts the replay rate (10/10)
//! and, from a kept run, that the fault fired at the right point.

use std::path::Path;
use std::process::Command;

use crate::common::*;
use crate::replay::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_fault_counted_after_ready_leaves_the_start_up_calls_alone() {
    // the node writes a five times while it starts (its ready check waits for them), then
    // five times more once the workload says go: the 2nd write to a after ready is the 7th
    let scenario = r#"name = "after-ready"
[[nodes]]
name = "n1"
command = ["sh", "-c", "FAULTY writes {workdir}/n1; while [ ! -e {workdir}/go ]; do sleep 0.05; done; echo go; exec FAULTY writes {workdir}/n1"]
ready = ["grep", "-q", "write 5 to b", "{workdir}/n1.log"]
[workload]
command = ["sh", "-c", "touch {workdir}/go; for i in $(seq 200); do [ $(grep -c 'write 5 to b' {workdir}/n1.log) -ge 2 ] && exit 0; sleep 0.05; done; exit 1"]
[oracle]
command = ["sh", "-c", "[ $(grep -c 'No space' {workdir}/n1.log) -eq 1 ] && sed -n '/^go$/,$p' {workdir}/n1.log | grep -q 'write 2 to a: No space'"]
"#.to_string();
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"ENOSPC\"\npath = \"{workdir}/n1/a\"\nnth = 2\nafter_ready = true\n";
    let (_, workdir) = replay_and_keep(&scenario, schedule);
    let report = run_json(&workdir);
    assert_eq!(report["matched_at_ready"][0], 0, "{report:#}");
    let _ = std::fs::remove_dir_all(&workdir);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
