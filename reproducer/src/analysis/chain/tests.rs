use super::*;
use tracedump::event::{ProcessChange, SyscallFailure};

const SCENARIO: &str = "name = \"three\"\n\
    [[nodes]]\nname = \"a\"\ncommand = [\"srv\"]\naddress = \"10.9.0.1\"\n\
    [[nodes]]\nname = \"b\"\ncommand = [\"srv\"]\naddress = \"10.9.0.2\"\n\
    [[nodes]]\nname = \"c\"\ncommand = [\"srv\"]\naddress = \"10.9.0.3\"\n\
    [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";

fn scenario() -> Scenario {
    Scenario::parse(SCENARIO, "s.toml").unwrap()
}

const MS: u64 = 1_000_000;

fn failure(node: usize, syscall: &str, errno: &str, path: &str) -> Signature {
    Signature {
        node,
        sign: Sign::Failure {
            syscall: syscall.into(),
            errno: errno.into(),
            path: Some(path.into()),
            peer: None,
        },
    }
}

fn fault() -> Signature {
    failure(0, "write", "ENOSPC", "*/journal")
}
fn function(node: usize, symbol: &str) -> Signature {
    Signature {
        node,
        sign: Sign::Function {
            symbol: symbol.into(),
        },
    }
}
fn exited(node: usize, code: i32) -> Signature {
    Signature {
        node,
        sign: Sign::Exited { code },
    }
}
/// Happens after the fault in every run, with the bug or without: not part of the chain.
fn coincidence() -> Signature {
    failure(1, "openat", "ENOENT", "*/cache")
}

/// A run: `(ms, signature)` in time order; the fault is the event whose signature is
/// `fault()` (the first of them).
fn run(bug: bool, events: &[(u64, Signature)]) -> TracedRun {
    let events: Vec<RunEvent> = events
        .iter()
        .enumerate()
        .map(|(index, (ms, sig))| RunEvent {
            at_ns: 1_000 * MS + ms * MS,
            sig: sig.clone(),
            index,
        })
        .collect();
    TracedRun {
        label: "r".into(),
        bug,
        anchors: vec![events.iter().position(|e| e.sig == fault())],
        controls: vec![!bug],
        events,
        timeline: Some("t.perfetto".into()),
    }
}

/// Three reproduced runs: the fault on a, then b enters `apply_gap`, then c exits with 1;
/// the coincidence on b everywhere. Two runs without the bug (one with the fault, one
/// fault-free).
fn runs() -> Vec<TracedRun> {
    let reproduced = |jitter: u64| {
        run(
            true,
            &[
                (0, function(0, "main")),
                (5, fault()),
                (6 + jitter, coincidence()),
                (12 + jitter, function(1, "apply_gap")),
                (30 + jitter, exited(2, 1)),
            ],
        )
    };
    vec![
        reproduced(0),
        reproduced(2),
        reproduced(1),
        run(
            false,
            &[(0, function(0, "main")), (5, fault()), (7, coincidence())],
        ),
        run(false, &[(0, function(0, "main")), (9, coincidence())]),
    ]
}

fn no_profile() -> FaultFree<'static> {
    FaultFree {
        runs: 3,
        seen_in: Box::new(|s: &Signature| if *s == coincidence() { 3 } else { 0 }),
        per_second: Box::new(|_| 0.0),
    }
}

fn production(events: &[(u64, Signature)]) -> Vec<RunEvent> {
    run(true, events).events
}

#[test]
fn a_chain_across_three_nodes_in_time_order() {
    let prod = production(&[
        (0, function(0, "main")),
        (100, fault()),
        (111, function(1, "apply_gap")),
        (140, exited(2, 1)),
    ]);
    let c = build(&runs(), 0, &no_profile(), &prod).unwrap();
    let links: Vec<(&Signature, u64, u32, u32, u32)> = c
        .links
        .iter()
        .map(|l| {
            (
                &l.sig,
                l.after_ns / MS,
                l.in_reproduced,
                l.in_other,
                l.in_fault_free,
            )
        })
        .collect();
    assert_eq!(
        links,
        vec![
            (&fault(), 0, 3, 1, 0),
            // medians of 7, 9, 8 and of 25, 27, 26 ms
            (&function(1, "apply_gap"), 8, 3, 0, 0),
            (&exited(2, 1), 26, 3, 0, 0),
        ]
    );
    assert!(c.links[0].fault && !c.links[1].fault);
    assert_eq!((c.reproduced_runs, c.other_runs, c.fault_free_runs), (3, 2, 3));
    // the flow arrows of each reproduced run: its fault and links, as merged-event indexes
    assert_eq!(c.flows.len(), 3);
    assert!(c.flows.iter().all(|(_, at)| *at == vec![1, 3, 4]));
}

#[test]
fn a_coincidental_event_is_left_out() {
    let c = build(&runs(), 0, &no_profile(), &[]).unwrap();
    assert!(c.links.iter().all(|l| l.sig != coincidence()));
    assert_eq!(c.left_out, vec![coincidence()]);
    // an event before the fault is not its consequence, even if it happens again after it
    assert!(c.links.iter().all(|l| l.sig != function(0, "main")));
    // a consequence seen in only one of three reproduced runs is not a link
    let mut rs = runs();
    rs[0].events.push(RunEvent {
        at_ns: 2_000 * MS,
        sig: exited(1, 2),
        index: 9,
    });
    let c = build(&rs, 0, &no_profile(), &[]).unwrap();
    assert!(c.links.iter().all(|l| l.sig != exited(1, 2)));
}

#[test]
fn production_shows_the_links_it_has_after_its_own_fault() {
    // production's b entered apply_gap before its fault too: only the later hit counts
    let prod = production(&[
        (50, function(1, "apply_gap")),
        (100, fault()),
        (103, function(1, "apply_gap")),
    ]);
    let c = build(&runs(), 0, &no_profile(), &prod).unwrap();
    let prod: Vec<Option<u64>> = c
        .links
        .iter()
        .map(|l| l.production_after_ns.map(|n| n / MS))
        .collect();
    assert_eq!(
        prod,
        vec![Some(0), Some(3), None],
        "c's exit is not in production's dump"
    );
    assert!(c.production_fault);
    let mut text = String::new();
    section(&mut text, std::slice::from_ref(&c), &scenario());
    assert!(text.starts_with(render::TITLE), "{text}");
    assert!(
        text.contains(
            "| 0 | a | write failed with ENOSPC on */journal (the fault) | 0 | 3/3 | 1/2 · 0/3 | 0 |"
        ),
        "{text}"
    );
    assert!(
        text.contains("| 2 | c | exited with code 1 | +26.0 ms | 3/3 | 0/2 · 0/3 | not seen |"),
        "{text}"
    );
    assert!(
        text.contains("3 links across 3 node(s); production's dump shows 2 of them"),
        "{text}"
    );
    assert!(
        text.contains(
            "Left out as coincidental (as frequent without the bug): b openat failed with ENOENT on */cache"
        ),
        "{text}"
    );

    // a dump without the fault's event: no production times at all
    let c = build(&runs(), 0, &no_profile(), &production(&[(5, exited(2, 1))])).unwrap();
    assert!(!c.production_fault && c.links.iter().all(|l| l.production_after_ns.is_none()));
}

#[test]
fn no_reproduced_run_with_the_fault_no_chain() {
    let rs: Vec<TracedRun> = runs().into_iter().filter(|r| !r.bug).collect();
    assert!(build(&rs, 0, &no_profile(), &[]).is_none());
}

#[test]
fn signatures_leave_out_pids_fds_and_raw_paths() {
    let sc = scenario();
    let event = |pid, what| Event {
        ts_ns: 1,
        realtime_ns: 1,
        host: "h".into(),
        pid,
        tid: pid,
        comm: "srv".into(),
        what,
    };
    let write = |path: &str, fd| {
        What::SyscallFailure(SyscallFailure {
            syscall: "write".into(),
            ret: -28,
            errno: Some("ENOSPC".into()),
            fd: Some(fd),
            path: Some(path.into()),
            peer: None,
        })
    };
    let no_peer = |_: SocketAddr| None;
    let testbed = signature(
        &sc,
        0,
        &event(4711, write("/scratch/run-8/a/journal", 3)),
        &no_peer,
    );
    let prod = signature(&sc, 0, &event(12, write("/srv/a/journal", 7)), &no_peer);
    assert_eq!(testbed, prod);
    assert_eq!(testbed, fault());
    let send = What::SyscallFailure(SyscallFailure {
        syscall: "sendto".into(),
        ret: -32,
        errno: Some("EPIPE".into()),
        fd: Some(4),
        path: None,
        peer: Some("10.9.0.3:7600".parse().unwrap()),
    });
    let by_address = |a: SocketAddr| sc.node_at(a.ip());
    let s = signature(&sc, 0, &event(1, send), &by_address);
    assert_eq!(s.sign.to_string(), "sendto failed with EPIPE (peer c)");
    let killed = What::ProcessState(ProcessChange {
        state: State::Killed { core_dumped: false },
        signal: Some(9),
        sender: None,
        ongoing: false,
    });
    assert_eq!(
        signature(&sc, 2, &event(1, killed), &no_peer).sign.to_string(),
        "killed by SIGKILL"
    );
}

/// A profile of three fault-free runs of 10 s: b failed `openat` on its run directory's
/// `stat.tmp` (a signature anchored in the run directory) 20 times in the first, never in
/// the others.
fn profile_with_stat_tmp() -> crate::analysis::profile::Profile {
    use crate::analysis::profile::{aggregate, FailureKey, RunData};
    let runs: Vec<RunData> = [20, 0, 0]
        .into_iter()
        .map(|n| {
            let mut r = RunData {
                seconds: 10.0,
                ..Default::default()
            };
            let key = FailureKey {
                node: "b".into(),
                syscall: "openat".into(),
                errno: "ENOENT".into(),
                path: Some("{workdir}/b*/stat.tmp".into()),
            };
            r.failures.insert(key, n);
            r
        })
        .collect();
    aggregate(&scenario(), &[], &runs, 2.0)
}

#[test]
fn an_event_the_profile_shows_at_a_comparable_rate_is_no_link() {
    let stat = failure(1, "openat", "ENOENT", "*/stat.tmp");
    let mut rs = runs();
    for r in rs.iter_mut().filter(|r| r.bug) {
        let at_ns = r.events[r.anchors[0].unwrap()].at_ns + 3 * MS;
        let index = r.events.len();
        r.events.push(RunEvent {
            at_ns,
            sig: stat.clone(),
            index,
        });
        r.events.sort_by_key(|e| e.at_ns);
    }
    let (profile, sc) = (profile_with_stat_tmp(), scenario());
    let fault_free = fault_free_of(Some(&profile), &sc);
    // the profile's signature is anchored, the chain's not: the same file all the same
    assert_eq!((fault_free.seen_in)(&stat), 1);
    assert!(((fault_free.per_second)(&stat) - 2.0 / 3.0).abs() < 1e-9);
    let c = build(&rs, 0, &fault_free, &[]).unwrap();
    assert!(c.links.iter().all(|l| l.sig != stat), "{:#?}", c.links);
    assert_eq!(c.routine, vec![stat.clone()]);
    // without the profile's rate it is a link: one fault-free run of three is not enough
    let c = build(&rs, 0, &no_profile(), &[]).unwrap();
    assert!(c.links.iter().any(|l| l.sig == stat));
}

/// A replicated stream that fails only when a kill of a (fault 1) and a partition of b
/// (fault 2) combine. After the kill a runs its recovery; after the partition b's link to a
/// falls silent; only with both does c exit. Minimization's runs that dropped one of them
/// (no bug) are the other's controls, not its own.
#[test]
fn each_fault_of_a_schedule_gets_its_chain_with_its_own_controls() {
    let killed = Signature {
        node: 0,
        sign: Sign::Killed {
            signal: "SIGKILL".into(),
        },
    };
    let silent = Signature {
        node: 1,
        sign: Sign::Gap {
            peer: Some("a".into()),
            port: 7000,
        },
    };
    let recover = function(0, "recover");
    let run = |bug: bool, kill: bool, cut: bool| {
        let mut events = vec![(0, function(0, "main"))];
        if kill {
            events.extend([(10, killed.clone()), (15, recover.clone())]);
        }
        if cut {
            events.push((20, silent.clone()));
        }
        if bug {
            events.push((40, exited(2, 1)));
        }
        let events: Vec<RunEvent> = events
            .into_iter()
            .enumerate()
            .map(|(index, (ms, sig))| RunEvent {
                at_ns: 1_000 * MS + ms * MS,
                sig,
                index,
            })
            .collect();
        TracedRun {
            label: "r".into(),
            bug,
            anchors: match bug {
                true => vec![
                    events.iter().position(|e| e.sig == killed),
                    events.iter().position(|e| e.sig == silent),
                ],
                false => vec![None, None],
            },
            // a control of each fault its schedule did not have
            controls: vec![!bug && !kill, !bug && !cut],
            events,
            timeline: None,
        }
    };
    let rs = vec![
        run(true, true, true),
        run(true, true, true),
        run(false, true, false),  // minimization: without the partition
        run(false, false, true),  // minimization: without the kill
        run(false, false, false), // the fault-free check
    ];
    let kill = build(&rs, 0, &no_profile(), &[]).unwrap();
    let sigs: Vec<&Signature> = kill.links.iter().map(|l| &l.sig).collect();
    assert_eq!(
        sigs,
        [&killed, &recover, &silent, &exited(2, 1)],
        "the kill's controls had no kill"
    );
    assert_eq!(kill.other_runs, 2);
    let cut = build(&rs, 1, &no_profile(), &[]).unwrap();
    let sigs: Vec<&Signature> = cut.links.iter().map(|l| &l.sig).collect();
    assert_eq!(sigs, [&silent, &exited(2, 1)], "{:#?}", cut.links);
    assert_eq!(cut.other_runs, 2);
    assert_eq!(cut.links[1].in_other, 0);
    let mut text = String::new();
    section(&mut text, &[kill, cut], &scenario());
    assert!(text.contains("### Fault 1: a killed by SIGKILL"), "{text}");
    assert!(
        text.contains("### Fault 2: b connection to a (port 7000) fell silent"),
        "{text}"
    );
}

#[test]
fn a_run_s_schedule_has_a_fault_whatever_its_place_or_count() {
    use crate::model::schedule::Schedule;
    let accepted = Schedule::parse(
        "[[faults]]\nnode = \"a\"\nkind = \"crash\"\n[[faults]]\nnode = \"b\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"EIO\"\nnth = 4\n",
        "s",
    )
    .unwrap();
    let level1 = Schedule::parse(
        "[[faults]]\nnode = \"b\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"EIO\"\n",
        "s",
    )
    .unwrap();
    assert!(!runs::has_fault(&level1, &accepted.faults[0]));
    assert!(
        runs::has_fault(&level1, &accepted.faults[1]),
        "another Nth call, the same fault"
    );
    assert!(!runs::has_fault(&Schedule::default(), &accepted.faults[1]));
}
