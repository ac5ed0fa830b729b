//! syscalls.rs: failure signatures judged against the profile, routine ones ranked last.

use super::super::syscalls::{max_burst, poisson_tail};
use super::super::*;
use super::fixtures::*;

#[test]
fn poisson_tail_matches_known_values() {
    assert!((poisson_tail(1.0, 1) - (1.0 - (-1.0f64).exp())).abs() < 1e-12);
    assert!(
        poisson_tail(10.0, 40) < 1e-9,
        "40 in a window that expects 10 is an anomaly"
    );
    assert!(
        poisson_tail(60.0, 40) > 0.9,
        "40 in a window that expects 60 is not"
    );
    assert_eq!(poisson_tail(0.0, 1), 0.0);
}

#[test]
fn without_a_profile_loader_and_locale_probes_rank_after_the_real_fault() {
    let probes = [
        "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libpthread.so.0",
        "/usr/lib/locale/C.UTF-8/LC_MESSAGES/libc.mo",
        "/usr/share/locale/en/LC_MESSAGES/postgres-16.mo",
        "/usr/lib/x86_64-linux-gnu/gconv/gconv-modules.d",
    ];
    let mut events: Vec<TimedEvent> = probes
        .iter()
        .enumerate()
        .map(|(i, p)| at(0.1 * i as f64, Some(0), 10, failure("openat", "ENOENT", Some(p))))
        .collect();
    events.push(at(
        3.0,
        Some(0),
        10,
        failure("openat", "ENOENT", Some("/srv/db/base/1/pg_filenode.map")),
    ));
    events.push(at(5.0, Some(0), 10, exited(1)));
    let d = diagnose(&timeline(events), Some(&scenario()), None);
    let first = d.causes().next().unwrap();
    assert!(
        matches!(&first.guess, FaultGuess::Syscall { raw_path: Some(p), .. } if p.ends_with("pg_filenode.map")),
        "{:#?}",
        d.candidates
    );
    assert_eq!(d.causes().filter(|c| c.routine).count(), 4);
}

#[test]
fn bursts_count_within_two_seconds() {
    let s = 1_000_000_000;
    assert_eq!(max_burst(&[0, s, 2 * s, 10 * s]), 3);
    assert_eq!(max_burst(&[0, 3 * s, 6 * s]), 1);
}

#[test]
fn an_eintr_right_before_its_process_is_killed_is_the_kill_not_a_fault() {
    let t = timeline(vec![
        at(0.5, Some(0), 10, function("serve")),
        at(1.0, Some(0), 10, failure("epoll_wait", "EINTR", None)),
        at(1.000_01, Some(0), 10, killed(libc::SIGKILL, Some(999))),
        // the same EINTR in a process that lives on is not explained by the kill
        at(1.0, Some(1), 20, failure("poll", "EINTR", None)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    let eintr = |syscall: &str| {
        d.candidates
            .iter()
            .find(|c| matches!(&c.guess, FaultGuess::Syscall { syscall: s, .. } if s == syscall))
            .unwrap()
    };
    assert_eq!(eintr("epoll_wait").verdict, Verdict::Explained);
    assert_eq!(eintr("poll").verdict, Verdict::Cause);
    // the crash's context reaches back past the EINTR
    let crash = d
        .causes()
        .find(|c| matches!(c.guess, FaultGuess::Crash { .. }))
        .unwrap();
    assert_eq!(crash.preceding_functions, ["/opt/kv:serve"]);
}

#[test]
fn a_burst_one_fault_free_run_saw_in_all_is_benign_whatever_the_mean_rate() {
    // a runtime's start-up: 16 readlink EINVAL within 10 ms; fault-free runs see 16 per
    // run too, but their runs last 12 s (1.3/s)
    let mut events = vec![at(9.0, Some(0), 10, exited(1))];
    events.extend((0..16).map(|i| {
        at(
            1.0 + i as f64 * 0.000_5,
            Some(0),
            10,
            failure("readlink", "EINVAL", Some("/usr")),
        )
    }));
    let key = (
        "db1".to_string(),
        "readlink".to_string(),
        "EINVAL".to_string(),
        Some("*/usr".to_string()),
    );
    let mut baseline = BaselineRates {
        scenario: "kv".into(),
        failures: [(key.clone(), 1.3)].into_iter().collect(),
        failures_most_in_a_run: [(key.clone(), 16)].into_iter().collect(),
        ..Default::default()
    };
    let verdict = |b: &BaselineRates| {
        let d = diagnose(&timeline(events.clone()), Some(&scenario()), Some(b));
        d.candidates
            .iter()
            .find(|c| matches!(c.guess, FaultGuess::Syscall { .. }))
            .unwrap()
            .verdict
            .clone()
    };
    assert_eq!(verdict(&baseline), Verdict::Benign);
    // one more than any fault-free run saw: judged by the rate (far above it)
    baseline.failures_most_in_a_run.insert(key, 15);
    assert_eq!(verdict(&baseline), Verdict::Cause);
}

#[test]
fn failures_are_benign_at_their_profile_rate_and_causes_far_above_it() {
    let mut events = vec![at(9.0, Some(0), 10, exited(1))];
    // 3 ENOENT within 2 s (profile: 2/s) and 30 EIO within 2 s (profile: 0.1/s)
    events.extend((0..3).map(|i| {
        at(
            1.0 + i as f64 * 0.5,
            Some(0),
            10,
            failure("openat", "ENOENT", Some("/srv/x/opt-12.conf")),
        )
    }));
    events.extend((0..30).map(|i| {
        at(
            2.0 + i as f64 * 0.05,
            Some(0),
            10,
            failure("read", "EIO", Some("/srv/data")),
        )
    }));
    events.push(at(4.0, Some(1), 20, failure("write", "ENOSPC", None)));
    let baseline = BaselineRates {
        scenario: "kv".into(),
        failures: [
            (
                (
                    "db1".into(),
                    "openat".into(),
                    "ENOENT".into(),
                    Some("*/opt-*.conf".into()),
                ),
                2.0,
            ),
            (
                ("db1".into(), "read".into(), "EIO".into(), Some("*/data".into())),
                0.1,
            ),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let d = diagnose(&timeline(events), Some(&scenario()), Some(&baseline));
    let verdict = |syscall: &str| {
        d.candidates
            .iter()
            .find(|c| matches!(&c.guess, FaultGuess::Syscall { syscall: s, .. } if s == syscall))
            .unwrap()
    };
    assert_eq!(
        verdict("openat").verdict,
        Verdict::Benign,
        "{}",
        verdict("openat").why
    );
    assert_eq!(verdict("read").verdict, Verdict::Cause, "{}", verdict("read").why);
    assert_eq!((verdict("read").occurrences, verdict("read").burst), (30, 30));
    assert_eq!(verdict("write").verdict, Verdict::Cause, "never seen fault-free");
    assert!(verdict("write").why.contains("never seen in fault-free runs"));
    assert!(d.notes.is_empty(), "{:?}", d.notes);
}

#[test]
fn without_a_profile_routine_errnos_rank_last_and_kernel_internal_ones_are_explained() {
    let t = timeline(vec![
        at(1.0, Some(0), 10, failure("read", "EAGAIN", None)),
        at(1.5, Some(0), 10, failure("read", "ERESTARTSYS", None)),
        at(2.0, Some(0), 10, failure("fsync", "EIO", None)),
        at(5.0, Some(0), 10, exited(1)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    let verdicts: Vec<(&str, &Verdict)> = d
        .candidates
        .iter()
        .map(|c| match &c.guess {
            FaultGuess::Syscall { errno, .. } => (errno.as_str(), &c.verdict),
            _ => ("?", &c.verdict),
        })
        .collect();
    assert!(verdicts.contains(&("EAGAIN", &Verdict::Cause)), "{verdicts:?}");
    assert!(
        matches!(causes(&d)[..], [FaultGuess::Syscall { errno: a, .. }, FaultGuess::Syscall { errno: b, .. }] if a == "EIO" && b == "EAGAIN"),
        "{verdicts:?}"
    );
    assert!(
        verdicts.contains(&("ERESTARTSYS", &Verdict::Explained)),
        "{verdicts:?}"
    );
    assert!(verdicts.contains(&("EIO", &Verdict::Cause)), "{verdicts:?}");
    assert!(d.notes.iter().any(|n| n.contains("no --profile")));
}

/// On timelines with a dump time and three nodes.
mod three_nodes {
    use super::super::fixtures::three_nodes::{failure, scenario, timeline, S};
    use super::*;

    #[test]
    fn failures_of_normal_operation_rank_last() {
        let s = scenario();
        let mut events = Vec::new();
        for i in 0..40 {
            events.push(failure(10 * S + i * S / 40, 0, "epoll_ctl", "EPERM", None));
            events.push(failure(10 * S + i * S / 40, 0, "connect", "EINPROGRESS", None));
            events.push(failure(10 * S + i * S / 40, 0, "futex", "ETIMEDOUT", None));
        }
        events.push(failure(30 * S, 1, "fsync", "EIO", Some("/data/wal.3")));
        events.push(failure(31 * S, 1, "read", "EAGAIN", None));
        let t = timeline(events);
        let mut baseline = BaselineRates::default();
        for (sys, errno) in [
            ("epoll_ctl", "EPERM"),
            ("connect", "EINPROGRESS"),
            ("futex", "ETIMEDOUT"),
        ] {
            baseline
                .failures
                .insert(("a".into(), sys.into(), errno.into(), None), 0.5);
        }
        for b in [Some(&baseline), None] {
            let d = diagnose(&t, Some(&s), b);
            let causes: Vec<&Candidate> = d.causes().collect();
            assert!(
                matches!(&causes[0].guess, FaultGuess::Syscall { syscall, .. } if syscall == "fsync"),
                "{causes:#?}"
            );
            assert!(causes[1..].iter().all(|c| c.routine), "{causes:#?}");
            assert_eq!(
                causes.len(),
                5,
                "a raised rate still makes them candidates, after the others: {causes:#?}"
            );
        }
    }
}

#[test]
fn a_path_in_the_run_directory_matches_the_profile_anchored_or_not() {
    use crate::analysis::profile::{aggregate, FailureKey, RunData};
    // the profile's runs saw readlink EINVAL on their run directory's file, anchored
    let mut run = RunData {
        seconds: 10.0,
        ..Default::default()
    };
    let key = FailureKey {
        node: "db1".into(),
        syscall: "readlink".into(),
        errno: "EINVAL".into(),
        path: Some("{workdir}/db*/data".into()),
    };
    run.failures.insert(key, 3);
    let baseline = BaselineRates::from_profile(aggregate(&scenario(), &[], &[run], 2.0));
    let verdict = |path: &str, workdir: Option<&str>| {
        let mut events = vec![at(9.0, Some(0), 10, exited(1))];
        events.extend((0..3).map(|i| {
            at(
                1.0 + i as f64,
                Some(0),
                10,
                failure("readlink", "EINVAL", Some(path)),
            )
        }));
        let mut t = timeline(events);
        t.dumps.push(crate::analysis::timeline::DumpInfo {
            path: "d.tdump".into(),
            host: "h".into(),
            events: 4,
            mapped_processes: 1,
            processes: 1,
            nodes: vec![0],
            interfaces: Vec::new(),
            taken_ns: 100 * SEC,
            lost_events: 0,
            node_starts: Vec::new(),
            process_starts: Default::default(),
            parents: Default::default(),
            workdir: workdir.map(String::from),
        });
        let d = diagnose(&t, Some(&scenario()), Some(&baseline));
        let c = d
            .candidates
            .iter()
            .find(|c| matches!(c.guess, FaultGuess::Syscall { .. }))
            .unwrap();
        (c.verdict.clone(), c.why.clone())
    };
    // production's own run directory, another name: the same signature
    let (v, why) = verdict("/srv/bb.Xy12Qz/db1/data", Some("/srv/bb.Xy12Qz"));
    assert_eq!(v, Verdict::Benign, "{why}");
    // the path came relative: the unanchored signature still finds it
    let (v, why) = verdict("db1/data", Some("/srv/bb.Xy12Qz"));
    assert_eq!(v, Verdict::Benign, "{why}");
    // another file of the run directory is not the profile's
    let (v, why) = verdict("/srv/bb.Xy12Qz/db1/other", Some("/srv/bb.Xy12Qz"));
    assert_eq!(v, Verdict::Cause, "{why}");
}

#[test]
fn a_path_anchored_in_production_matches_the_profile_s_unanchored_one() {
    use crate::analysis::profile::{aggregate, FailureKey, RunData};
    // the profile's runs did not know their run directory: the signature is unanchored
    let mut run = RunData {
        seconds: 10.0,
        ..Default::default()
    };
    let key = FailureKey {
        node: "db1".into(),
        syscall: "readlink".into(),
        errno: "EINVAL".into(),
        path: Some("*/data".into()),
    };
    run.failures.insert(key, 3);
    let baseline = BaselineRates::from_profile(aggregate(&scenario(), &[], &[run], 2.0));
    let mut events = vec![at(9.0, Some(0), 10, exited(1))];
    events.extend((0..3).map(|i| {
        let path = Some("/srv/bb.Xy12Qz/db1/data");
        at(1.0 + i as f64, Some(0), 10, failure("readlink", "EINVAL", path))
    }));
    let mut t = timeline(events);
    t.dumps.push(crate::analysis::timeline::DumpInfo {
        path: "d.tdump".into(),
        host: "h".into(),
        events: 4,
        mapped_processes: 1,
        processes: 1,
        nodes: vec![0],
        interfaces: Vec::new(),
        taken_ns: 100 * SEC,
        lost_events: 0,
        node_starts: Vec::new(),
        process_starts: Default::default(),
        parents: Default::default(),
        workdir: Some("/srv/bb.Xy12Qz".into()),
    });
    let d = diagnose(&t, Some(&scenario()), Some(&baseline));
    let c = d
        .candidates
        .iter()
        .find(|c| matches!(c.guess, FaultGuess::Syscall { .. }))
        .unwrap();
    assert_eq!(
        c.guess,
        FaultGuess::Syscall {
            syscall: "readlink".into(),
            errno: "EINVAL".into(),
            path: Some("{workdir}/db*/data".into()),
            raw_path: Some("/srv/bb.Xy12Qz/db1/data".into()),
            short: None,
            persistent: false,
        }
    );
    assert_eq!(c.verdict, Verdict::Benign, "{}", c.why);
}
