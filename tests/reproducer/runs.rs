//! One run's life: setup steps and the node's user, bad schedules refused in one line naming
//! file, line and field, a node that never gets ready or that a fault keeps from starting,
//! SIGINT mid-run, and no run directory left by a failed run.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::*;
use crate::replay::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
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
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn node_that_never_becomes_ready_shows_its_log() {
    require_root();
    let scenario = "name = \"s\"\nrun_timeout_s = 3\n[[nodes]]\nname = \"n1\"\ncommand = [\"sh\", \"-c\", \"echo starting up; echo config broken; sleep 30\"]\nready = [\"false\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";
    let links = own_links();
    let (_d, sc, _) = files(scenario, "");
    let out = reproducer(&["run", "--scenario", sc.to_str().unwrap()]);
    let t = text(&out);
    assert!(!out.status.success());
    assert!(
        t.contains("never became ready") && t.contains("config broken"),
        "{t}"
    );
    assert_clean(&links);
}

/// A fault that stops a node from starting is the run's result, not an error: the run says
/// which node, why, and that the fault fired in which process.
#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_node_that_a_fault_keeps_from_starting_is_a_result() {
    require_root();
    let scenario = "name = \"s\"\nrun_timeout_s = 10\n[[nodes]]\nname = \"n1\"\n\
        command = [\"sh\", \"-c\", \"echo x > {workdir}/n1/conf && echo started && touch {workdir}/n1/up && sleep 30\"]\n\
        ready = [\"test\", \"-f\", \"{workdir}/n1/up\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";
    let schedule = "[[faults]]\nnode = \"n1\"\nkind = \"syscall\"\nsyscall = \"openat\"\nerrno = \"EACCES\"\npath = \"{workdir}/n1/conf\"\n";
    let links = own_links();
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
    assert_clean(&links);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn sigint_mid_run_leaves_nothing_behind() {
    require_root();
    let scenario = "name = \"s\"\nrun_timeout_s = 60\n[[nodes]]\nname = \"a\"\ncommand = [\"FAULTY\", \"serve\", \"7000\"]\naddress = \"10.219.1.11\"\n[[nodes]]\nname = \"b\"\ncommand = [\"FAULTY\", \"ticks\", \"60000\"]\naddress = \"10.219.1.12\"\n[workload]\ncommand = [\"sleep\", \"60\"]\n[oracle]\ncommand = [\"true\"]\n";
    let links = own_links();
    let (_d, sc, _) = files(scenario, "");
    let mut child = reproducer_cmd()
        .args(["run", "--scenario", sc.to_str().unwrap()])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(!status.success(), "an interrupted run is not a success");
    assert_clean(&links);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_schedule_naming_a_missing_function_is_refused_and_failed_runs_leave_no_directory() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let runs_left = || std::fs::read_dir(tmp.path()).unwrap().count();
    let scenario = "name = \"s\"\n[[nodes]]\nname = \"n1\"\ncommand = [\"FAULTY\", \"crash-order\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n";
    let schedule =
        "[[faults]]\nnode = \"n1\"\nkind = \"crash\"\nafter_functions = [\"stage_h\", \"no_such_stage\"]\n";
    let (_d, sc, sch) = files(scenario, schedule);
    let out = reproducer_cmd()
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
        let out = reproducer_cmd().args(["run", "--scenario", sc.to_str().unwrap(), "--keep"]).env("TMPDIR", tmp.path()).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert_eq!(runs_left(), 0, "a failed run removes its directory: {}", text(&out));
    }
}
