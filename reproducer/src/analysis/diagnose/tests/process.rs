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
