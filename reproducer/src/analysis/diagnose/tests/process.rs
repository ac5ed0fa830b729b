//! process.rs: kills from outside are faults, own deaths and exits symptoms.
use super::super::*;
use super::fixtures::*;
use tracedump::event::What;

#[test]
fn outside_kills_are_faults_own_deaths_and_exits_are_symptoms() {
    let t = timeline(vec![
        at(1.0, Some(0), 10, killed(libc::SIGKILL, Some(999))),
        at(2.0, Some(1), 20, killed(libc::SIGSEGV, Some(999))),
        at(3.0, Some(1), 21, exited(3)),
        at(3.5, Some(1), 22, exited(0)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    assert_eq!(
        causes(&d),
        [&FaultGuess::Crash {
            signal: "SIGKILL".into(),
            sender: "killer (pid 999)".into()
        }]
    );
    assert_eq!(d.candidates[0].who, "db1");
    let symptoms: Vec<&str> = d.symptoms.iter().map(|s| s.what.as_str()).collect();
    assert_eq!(symptoms, ["died of SIGSEGV", "exited with status 3"]);
}

#[test]
fn a_kill_from_the_same_node_is_a_symptom() {
    let t = timeline(vec![
        at(0.5, Some(0), 11, function("main")),
        at(1.0, Some(0), 10, killed(libc::SIGKILL, Some(11))),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    assert!(d.causes().next().is_none(), "{:?}", d.candidates);
    assert_eq!(d.symptoms.len(), 1);
}

#[test]
fn unmapped_processes_are_ignored_and_counted_with_a_scenario() {
    let t = timeline(vec![
        at(1.0, None, 99, killed(libc::SIGKILL, Some(1))),
        at(2.0, Some(0), 10, exited(1)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    assert!(d.candidates.is_empty());
    assert_eq!(d.unmapped_events, 1);
    let d = diagnose(&t, None, None);
    assert_eq!(d.candidates.len(), 1, "without a scenario every process counts");
    assert_eq!(d.candidates[0].who, "kv/99");
}

/// A death of `comm` (pid `pid`) of `node` at `secs`.
fn exit_of(secs: f64, node: usize, pid: u32, comm: &str, what: What) -> TimedEvent {
    let mut e = at(secs, Some(node), pid, what);
    e.event.comm = comm.into();
    e
}

/// A timeline whose nodes both started at 1 s (their first process's start, from the dump).
fn started_at_1s(events: Vec<TimedEvent>) -> Timeline {
    let mut t = timeline(events);
    t.dumps.push(crate::analysis::timeline::DumpInfo {
        path: "d.tdump".into(),
        host: "h".into(),
        events: t.events.len(),
        mapped_processes: 2,
        processes: 2,
        nodes: vec![0, 1],
        interfaces: Vec::new(),
        taken_ns: 100 * SEC,
        lost_events: 0,
        node_starts: vec![(0, SEC), (1, SEC)],
        process_starts: Default::default(),
        parents: Default::default(),
        workdir: None,
    });
    t
}

/// The profile of one fault-free run of `events` (every node ready at `ready_s`).
fn profile_of(events: &[TimedEvent], ready_s: f64) -> BaselineRates {
    use crate::analysis::profile::{aggregate, exits_of, RunData};
    let s = scenario();
    let plain: Vec<tracedump::event::Event> = events.iter().map(|t| t.event.clone()).collect();
    let node_of = |pid: u32| events.iter().find(|t| t.event.pid == pid).and_then(|t| t.node);
    let ready_ns = (ready_s * SEC as f64) as u64;
    let run = RunData {
        seconds: 20.0,
        exits: exits_of(&s, &plain, node_of, Some(ready_ns)),
        startup_ms: [
            ("db1".into(), ready_ns / 1_000_000 - 1000),
            ("db2".into(), ready_ns / 1_000_000 - 1000),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    BaselineRates::from_profile(aggregate(&s, &[], &[run], 2.0))
}

#[test]
fn an_exit_fault_free_runs_show_is_no_symptom_and_one_they_do_not_show_is() {
    // fault-free: while the nodes start (all ready at 5 s), db1's grep and db2's ps find
    // nothing and exit with status 1
    let fault_free = vec![
        exit_of(2.0, 0, 30, "grep", exited(1)),
        exit_of(3.0, 1, 31, "ps", exited(1)),
        exit_of(15.0, 0, 32, "grep", exited(0)),
    ];
    let baseline = profile_of(&fault_free, 5.0);
    let t = started_at_1s(vec![
        // the same helpers at start-up: norms
        exit_of(2.5, 0, 40, "grep", exited(1)),
        exit_of(2.7, 0, 41, "grep", exited(1)),
        exit_of(3.1, 1, 42, "ps", exited(1)),
        // the same grep once the system runs: not what fault-free runs do
        exit_of(30.0, 0, 43, "grep", exited(1)),
        // another status, another program: never seen
        exit_of(31.0, 1, 44, "ps", exited(2)),
        exit_of(32.0, 1, 20, "kv", exited(1)),
    ]);
    let d = diagnose(&t, Some(&scenario()), Some(&baseline));
    let symptoms: Vec<(f64, &str)> = d
        .symptoms
        .iter()
        .map(|s| (s.at_ns as f64 / SEC as f64, s.what.as_str()))
        .collect();
    assert_eq!(
        symptoms,
        [
            (30.0, "exited with status 1"),
            (31.0, "exited with status 2"),
            (32.0, "exited with status 1")
        ]
    );
    assert!(
        d.notes
            .iter()
            .any(|n| n.contains("db1: grep status 1 at start-up ×2")
                && n.contains("db2: ps status 1 at start-up ×1")),
        "{:?}",
        d.notes
    );
    // without a profile every one of them is a symptom, as before
    let d = diagnose(&t, Some(&scenario()), None);
    assert_eq!(d.symptoms.len(), 6);
}

#[test]
fn a_fault_free_runs_own_trace_shows_no_symptom_from_its_routine_exits() {
    let run = vec![
        exit_of(2.0, 0, 30, "grep", exited(1)),
        exit_of(2.2, 0, 33, "grep", exited(1)),
        exit_of(3.0, 1, 31, "ps", killed(libc::SIGPIPE, None)),
        exit_of(12.0, 1, 34, "sh", exited(1)),
        // the test bed's teardown: a kill from outside, a fault the profile does not record
        exit_of(19.0, 0, 10, "kv", killed(libc::SIGKILL, Some(999))),
    ];
    let baseline = profile_of(&run, 5.0);
    let d = diagnose(&started_at_1s(run), Some(&scenario()), Some(&baseline));
    assert!(d.symptoms.is_empty(), "{:?}", d.symptoms);
    assert!(baseline.exits.iter().all(|(_, program, _, _)| program != "kv"));
}

/// A server (db1, pid 10) whose flush fails with EIO at 20 s: it aborts, and its fatal-signal
/// handler forks two backtrace printers (pids 11, 12) that try `execve` along PATH and exit
/// 1 before the server dies of its SIGABRT at 20.7 s. A worker it forked long before (pid
/// 13) failed a call of its own at 2 s.
fn aborted_after_a_failed_flush() -> Timeline {
    let helper = |secs: f64, pid: u32, what: What| exit_of(secs, 0, pid, "addr2line", what);
    let mut t = timeline(vec![
        at(
            2.0,
            Some(0),
            13,
            failure("openat", "ENOENT", Some("/etc/kv/extra.conf")),
        ),
        at(
            20.0,
            Some(0),
            10,
            failure("fdatasync", "EIO", Some("/srv/kv/redo.log")),
        ),
        helper(
            20.21,
            11,
            failure("execve", "ENOENT", Some("/usr/local/sbin/addr2line")),
        ),
        helper(
            20.22,
            11,
            failure("execve", "EACCES", Some("/root/bin/addr2line")),
        ),
        helper(20.3, 11, exited(1)),
        helper(
            20.51,
            12,
            failure("execve", "ENOENT", Some("/usr/local/sbin/addr2line")),
        ),
        helper(
            20.52,
            12,
            failure("newfstatat", "ENOENT", Some("/usr/lib/debug/kv")),
        ),
        helper(20.6, 12, exited(1)),
        at(20.65, Some(0), 10, failure("wait4", "EINTR", None)),
        at(20.7, Some(0), 10, killed(libc::SIGABRT, Some(10))),
    ]);
    let secs = |s: f64| (s * SEC as f64) as u64;
    t.dumps.push(crate::analysis::timeline::DumpInfo {
        path: "d.tdump".into(),
        host: "h".into(),
        events: t.events.len(),
        mapped_processes: 4,
        processes: 4,
        nodes: vec![0],
        interfaces: Vec::new(),
        taken_ns: 30 * SEC,
        lost_events: 0,
        node_starts: vec![(0, SEC)],
        process_starts: [
            (10, secs(1.0)),
            (13, secs(1.5)),
            (11, secs(20.2)),
            (12, secs(20.5)),
        ]
        .into(),
        parents: [(10, 1), (13, 10), (11, 10), (12, 10)].into(),
        workdir: None,
    });
    t
}

#[test]
fn what_a_crashing_process_forks_while_dying_is_part_of_its_crash() {
    let d = diagnose(&aborted_after_a_failed_flush(), Some(&scenario()), None);
    let symptoms: Vec<(&str, &str)> = d
        .symptoms
        .iter()
        .map(|s| (s.who.as_str(), s.what.as_str()))
        .collect();
    assert_eq!(
        symptoms,
        [("db1", "died of SIGABRT")],
        "the crash is the symptom, not its helpers' exits"
    );
    let calls: Vec<(&str, &str)> = d
        .candidates
        .iter()
        .filter_map(|c| match &c.guess {
            FaultGuess::Syscall { syscall, errno, .. } => Some((syscall.as_str(), errno.as_str())),
            _ => None,
        })
        .collect();
    // the helpers' failed calls and the handler's own are no candidates; the worker forked
    // long before is no helper
    assert_eq!(
        calls,
        [("openat", "ENOENT"), ("fdatasync", "EIO")],
        "{:#?}",
        d.candidates
    );
    assert!(
        d.candidates.iter().all(|c| c.verdict == Verdict::Cause),
        "{:#?}",
        d.candidates
    );
    let note = d
        .notes
        .iter()
        .find(|n| n.starts_with("part of the crash of db1 (pid 10)"));
    assert_eq!(
        note.map(String::as_str),
        Some("part of the crash of db1 (pid 10), not symptoms or causes: what it forked while dying (addr2line): 2 exit(s), 4 failed call(s)"),
        "{:?}",
        d.notes
    );
}
