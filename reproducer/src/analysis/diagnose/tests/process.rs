//! process.rs: kills from outside are faults, own deaths and exits symptoms.
use super::super::*;
use super::fixtures::*;

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
