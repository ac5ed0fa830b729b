//! explain.rs: partitions and network errors explained by other faults, late consequences.
use super::super::*;
use super::fixtures::*;

#[test]
fn a_partition_that_began_before_a_crash_is_not_explained_by_it() {
    let t = timeline(vec![
        at(5.0, Some(0), 10, gap("10.7.0.1:4000", "10.7.0.2:6379", 3000)),
        at(5.1, Some(1), 20, gap("10.7.0.2:6379", "10.7.0.1:4000", 2900)),
        at(6.2, Some(0), 10, killed(libc::SIGKILL, Some(999))),
        at(9.0, Some(0), 11, exited(1)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    assert_eq!(
        d.causes().count(),
        2,
        "the partition and the crash: {:#?}",
        d.candidates
    );
}

#[test]
fn network_errors_after_a_crash_are_explained_and_faults_after_the_last_symptom_late() {
    let t = timeline(vec![
        at(1.0, Some(1), 20, killed(libc::SIGKILL, Some(999))),
        at(2.0, Some(0), 10, failure("connect", "ECONNREFUSED", None)),
        at(3.0, Some(0), 10, exited(2)),
        at(4.0, Some(0), 11, failure("fsync", "EIO", None)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    let by = |errno: &str| {
        d.candidates
            .iter()
            .find(|c| matches!(&c.guess, FaultGuess::Syscall { errno: e, .. } if e == errno))
            .unwrap()
    };
    assert_eq!(by("ECONNREFUSED").verdict, Verdict::Explained);
    assert!(
        by("ECONNREFUSED").why.contains("the crash of db2"),
        "{}",
        by("ECONNREFUSED").why
    );
    assert_eq!(by("EIO").verdict, Verdict::Late);
    assert_eq!(
        causes(&d),
        [&FaultGuess::Crash {
            signal: "SIGKILL".into(),
            sender: "killer (pid 999)".into()
        }]
    );
}

/// On timelines with a dump time and three nodes.
mod three_nodes {
    use tracedump::event::State;

    use super::super::fixtures::three_nodes::{failure, scenario, state, timeline, S};
    use super::*;

    #[test]
    fn failures_after_the_first_symptom_are_consequences() {
        let s = scenario();
        let t = timeline(vec![
            failure(5 * S, 0, "read", "EIO", Some("/data/snap.1")),
            state(10 * S, 0, State::Exited { code: 1 }),
            failure(11 * S, 1, "epoll_wait", "EINTR", None),
            failure(
                12 * S,
                1,
                "openat",
                "ENOENT",
                Some("/usr/share/locale/de/LC_MESSAGES/libc.mo"),
            ),
            failure(13 * S, 2, "mkdir", "EEXIST", Some("/data/recovery")),
            state(14 * S, 1, State::Exited { code: 1 }),
        ]);
        let d = diagnose(&t, Some(&s), None);
        let causes: Vec<&Candidate> = d.causes().collect();
        assert_eq!(causes.len(), 1, "{causes:#?}");
        assert!(matches!(&causes[0].guess, FaultGuess::Syscall { syscall, .. } if syscall == "read"));
        let late = d.candidates.iter().filter(|c| c.verdict == Verdict::Late).count();
        assert_eq!(late, 3, "shown, set aside: {:#?}", d.candidates);
        assert!(render(&d, Some(&s)).contains("after the first symptom"));
    }
}
