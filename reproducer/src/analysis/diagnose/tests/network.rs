//! network.rs: silences set aside as idle, merged into partitions when corroborated.
use tracedump::event::{NetworkGap, What};

use super::super::network::{partition_ms, peer_of};
use super::super::*;
use super::fixtures::*;

#[test]
fn a_connection_the_profile_knows_as_busy_is_a_partition_when_long_silent() {
    // the replication link: pings every second fault-free; cut, it stays silent until the dump
    let t = timeline(vec![
        at(
            5.0,
            Some(1),
            20,
            What::NetworkGap(NetworkGap {
                local: Some("10.7.0.2:44792".parse().unwrap()),
                peer: Some("10.7.0.1:6380".parse().unwrap()),
                duration_ms: 4071,
                packets: 18,
                ongoing: true,
                busy_ms: 0,
                busy_packets: 0,
                protocol: 6,
                sent: None,
                sent_before: None,
            }),
        ),
        at(9.5, Some(1), 20, exited(1)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    assert!(
        d.causes().next().is_none(),
        "no profile: one silent connection is not enough: {:#?}",
        d.candidates
    );
    let mut baseline = BaselineRates::default();
    baseline.gaps.insert(("db2".into(), "db1".into(), 6380), 1020);
    let d = diagnose(&t, Some(&scenario()), Some(&baseline));
    let p = d.causes().next().expect("a partition");
    assert!(
        p.why.contains("never see these connections silent over 1020 ms"),
        "{}",
        p.why
    );
}

#[test]
fn gaps_between_node_addresses_are_one_partition_unless_a_pause_explains_them() {
    let t = timeline(vec![
        // two silent connections between db1 and db2, overlapping: one partition
        at(5.0, Some(0), 10, gap("10.7.0.1:4000", "10.7.0.2:6379", 3000)),
        at(5.5, Some(1), 20, gap("10.7.0.2:6379", "10.7.0.1:4000", 3000)),
        at(9.0, Some(0), 10, exited(1)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    let parts: Vec<&Candidate> = d
        .candidates
        .iter()
        .filter(|c| matches!(c.guess, FaultGuess::Partition { .. }))
        .collect();
    assert_eq!(parts.len(), 1, "{:?}", d.candidates);
    let p = parts[0];
    assert_eq!((p.node, p.occurrences, &p.verdict), (Some(0), 2, &Verdict::Cause));
    assert_eq!(
        p.guess,
        FaultGuess::Partition {
            peer: 1,
            duration_ms: 2500,
            one_way: false,
        },
        "the time both ends were silent"
    );
    assert_eq!(p.at_ns, 5 * SEC + SEC / 2, "a gap's time stamp is when it began");
    assert!(p.why.contains("between db1 and db2"), "{}", p.why);

    let t = timeline(vec![
        at(4.5, Some(1), 20, paused(3000)),
        at(5.0, Some(0), 10, gap("10.7.0.1:4000", "10.7.0.2:6379", 3000)),
        at(9.0, Some(0), 10, exited(1)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    assert_eq!(
        causes(&d),
        [&FaultGuess::Pause {
            duration_ms: 3000,
            cause: "stopped".into()
        }]
    );
    let part = d
        .candidates
        .iter()
        .find(|c| matches!(c.guess, FaultGuess::Partition { .. }))
        .unwrap();
    assert_eq!(part.verdict, Verdict::Explained);
    assert!(part.why.contains("explained by the pause of db2"), "{}", part.why);
}

/// On timelines with a dump time and three nodes.
mod three_nodes {
    use tracedump::event::{PauseCause, State};

    use super::super::fixtures::three_nodes::{gap, partitions, scenario, state, timeline, DUMP_AT, S};
    use super::*;

    fn cause_ms(d: &Diagnosis) -> Vec<u64> {
        partitions(d, Verdict::Cause)
            .iter()
            .map(|c| match c.guess {
                FaultGuess::Partition { duration_ms, .. } => duration_ms,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn a_partition_keeps_its_length_when_a_connection_opens_during_the_heal() {
        let s = scenario();
        // two old connections silent 6.8 s from 100 s; at the heal a new connection
        // (a handshake and one message) goes silent 50 ms before the old ones resume
        let old = |port: u16, at: u64| {
            gap(
                at,
                0,
                &format!("10.9.0.1:{port}"),
                "10.9.0.2:7000",
                6800,
                900,
                false,
            )
        };
        let heal = 100 * S + 6750 * 1_000_000;
        let events = vec![
            old(41000, 100 * S),
            old(41001, 100 * S + 20 * 1_000_000),
            gap(heal, 0, "10.9.0.1:41002", "10.9.0.2:7000", 300, 3, false),
        ];
        let d = diagnose(&timeline(events.clone()), Some(&s), None);
        assert_eq!(cause_ms(&d), [6730], "{:#?}", d.candidates);
        // a silence that began later on a busy connection is traffic until then: the
        // partition starts there, not at the idle one's start
        let mut events = events;
        events[2] = gap(103 * S, 0, "10.9.0.1:41002", "10.9.0.2:7000", 3800, 900, false);
        let d = diagnose(&timeline(events), Some(&s), None);
        assert_eq!(cause_ms(&d), [3800], "{:#?}", d.candidates);
    }

    #[test]
    fn gaps_and_pauses_start_at_their_time_stamp() {
        let s = scenario();
        // a known silence: a and b hear nothing from each other from 100 s to 104 s
        let t = timeline(vec![
            gap(100 * S, 0, "10.9.0.1:41000", "10.9.0.2:7000", 4000, 50, false),
            gap(
                100 * S + S / 10,
                1,
                "10.9.0.2:7000",
                "10.9.0.1:41000",
                3900,
                48,
                false,
            ),
            // ongoing at the dump: silent for the last 9.6 s of the window, on two connections
            gap(
                DUMP_AT - 9600 * 1_000_000,
                0,
                "10.9.0.1:41001",
                "10.9.0.3:7000",
                9600,
                10,
                true,
            ),
            gap(
                DUMP_AT - 9500 * 1_000_000,
                2,
                "10.9.0.3:41002",
                "10.9.0.1:7001",
                9500,
                10,
                true,
            ),
            state(
                50 * S,
                2,
                State::Paused {
                    cause: PauseCause::Stopped,
                    duration_ms: 2000,
                },
            ),
        ]);
        let d = diagnose(&t, Some(&s), None);
        let mut cut = partitions(&d, Verdict::Cause);
        assert_eq!(cut.len(), 2, "{:#?}", d.candidates);
        // ranked by score (the later one is nearer the dump); the times are what this checks
        cut.sort_by_key(|c| c.at_ns);
        assert_eq!(
            (cut[0].at_ns, cut[0].guess.clone()),
            (
                100 * S + S / 10,
                FaultGuess::Partition {
                    peer: 1,
                    duration_ms: 3900,
                    one_way: false,
                }
            ),
            "the time every connection was silent"
        );
        assert_eq!(
            cut[1].at_ns,
            DUMP_AT - 9500 * 1_000_000,
            "an ongoing gap starts 9.5 s before the dump, not 19 s"
        );
        let pause = d
            .candidates
            .iter()
            .find(|c| matches!(c.guess, FaultGuess::Pause { .. }))
            .unwrap();
        assert_eq!(pause.at_ns, 50 * S);
    }

    #[test]
    fn gaps_that_would_end_after_the_dump_are_ignored() {
        let s = scenario();
        let t = timeline(vec![
            // a real cut of a from b, seen on two connections
            gap(100 * S, 0, "10.9.0.1:41000", "10.9.0.2:7000", 4000, 50, false),
            gap(100 * S, 0, "10.9.0.1:41001", "10.9.0.2:7001", 4000, 50, false),
            // a and c: what a wrapped jiffies difference made of a short silence
            gap(
                110 * S,
                0,
                "10.9.0.1:41002",
                "10.9.0.3:7000",
                18_429_563_939_213,
                50,
                false,
            ),
            gap(
                110 * S,
                2,
                "10.9.0.3:7000",
                "10.9.0.1:41002",
                18_429_563_939_213,
                50,
                false,
            ),
        ]);
        let d = diagnose(&t, Some(&s), None);
        let cut = partitions(&d, Verdict::Cause);
        assert_eq!(cut.len(), 1, "{:#?}", d.candidates);
        assert_eq!(peer_of(cut[0]), 1);
        assert!(
            d.candidates.iter().all(|c| peer_of(c) != 2 && c.node != Some(2)),
            "{:#?}",
            d.candidates
        );
        assert!(
            d.notes
                .iter()
                .any(|n| n.starts_with("2 gap(s) that would end after their dump")),
            "{:?}",
            d.notes
        );
    }

    #[test]
    fn idle_connections_are_not_partitions() {
        let s = scenario();
        let mut events: Vec<TimedEvent> = (0..20)
            .map(|i| {
                gap(
                    (100 + i) * S,
                    1,
                    "10.9.0.2:41000",
                    "10.9.0.1:6380",
                    1000,
                    10 + i,
                    false,
                )
            })
            .collect();
        events.push(gap(
            130 * S,
            1,
            "10.9.0.2:41000",
            "10.9.0.1:6380",
            4067,
            40,
            false,
        ));
        // a keep-alive connection to c, silent until the dump: idle or cut, nothing says which
        events.push(gap(
            150 * S,
            0,
            "10.9.0.1:41005",
            "10.9.0.3:2379",
            50_000,
            3,
            true,
        ));
        let t = timeline(events);
        let mut baseline = BaselineRates::default();
        baseline.gaps.insert(("b".into(), "a".into(), 6380), 1050);
        let d = diagnose(&t, Some(&s), Some(&baseline));
        let cut = partitions(&d, Verdict::Cause);
        assert_eq!(cut.len(), 1, "{:#?}", d.candidates);
        assert_eq!(
            (cut[0].at_ns, cut[0].guess.clone()),
            (
                130 * S,
                FaultGuess::Partition {
                    peer: 1,
                    duration_ms: 4067,
                    one_way: false,
                }
            )
        );
        let idle = partitions(&d, Verdict::Benign);
        assert_eq!(
            idle.len(),
            2,
            "the idle gaps folded into one, the keep-alive apart: {idle:#?}"
        );
        assert_eq!(idle.iter().map(|c| c.occurrences).max(), Some(20));
        // without the profile, the idle pings are not chained into one long partition
        let d = diagnose(&t, Some(&s), None);
        assert!(
            partitions(&d, Verdict::Cause)
                .iter()
                .all(|c| partition_ms(c) <= 4067),
            "{:#?}",
            d.candidates
        );
    }

    #[test]
    fn a_partition_needs_corroboration() {
        let s = scenario();
        let torn = timeline(vec![gap(
            100 * S,
            0,
            "10.9.0.1:41000",
            "10.9.0.2:7000",
            5000,
            9,
            true,
        )]);
        let d = diagnose(&torn, Some(&s), None);
        assert_eq!(
            partitions(&d, Verdict::Cause).len(),
            1,
            "closed while silent, long before the dump: {:#?}",
            d.candidates
        );
        let together = timeline(vec![
            gap(
                DUMP_AT - 8 * S,
                0,
                "10.9.0.1:41000",
                "10.9.0.2:7000",
                8000,
                9,
                true,
            ),
            gap(
                DUMP_AT - 8 * S,
                1,
                "10.9.0.2:7000",
                "10.9.0.1:41000",
                8000,
                9,
                true,
            ),
        ]);
        let d = diagnose(&together, Some(&s), None);
        assert_eq!(
            partitions(&d, Verdict::Benign).len(),
            1,
            "both ends of one idle connection are one connection: {:#?}",
            d.candidates
        );
        let mut events = together.events.clone();
        events.push(gap(
            DUMP_AT - 7 * S,
            1,
            "10.9.0.2:41009",
            "10.9.0.1:7001",
            7000,
            9,
            true,
        ));
        let d = diagnose(&timeline(events), Some(&s), None);
        assert_eq!(
            partitions(&d, Verdict::Cause).len(),
            1,
            "two connections silent together: {:#?}",
            d.candidates
        );
    }

    #[test]
    fn production_addresses_that_are_not_the_scenario_s_are_mapped_to_nodes() {
        // the scenario names the test bed (10.9.0.x, nodes listening on 700N); production
        // ran on 192.168.3.x
        let text = (1..=3)
            .map(|i| {
                format!("[[nodes]]\nname = \"n{i}\"\ncommand = [\"srv\", \"--port\", \"700{i}\"]\naddress = \"10.9.0.{i}\"\nmatch = \"700{i}\"\n")
            })
            .collect::<String>();
        let s = Scenario::parse(
            &format!(
                "name = \"t\"\n{text}[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n"
            ),
            "t",
        )
        .unwrap();
        let t = timeline(vec![
            // both ends of n1-n2 traced, silent together, traffic resumed
            gap(
                100 * S,
                0,
                "192.168.3.1:41000",
                "192.168.3.2:7002",
                5000,
                50,
                false,
            ),
            gap(
                100 * S,
                1,
                "192.168.3.2:7002",
                "192.168.3.1:41000",
                5000,
                50,
                false,
            ),
            // n1's connection to n3's service on an untraced host, torn down while silent
            gap(
                150 * S,
                0,
                "192.168.3.1:41001",
                "192.168.3.9:7003",
                6000,
                50,
                true,
            ),
        ]);
        let d = diagnose(&t, Some(&s), None);
        let mut cut: Vec<(Option<usize>, u64)> = partitions(&d, Verdict::Cause)
            .iter()
            .map(|c| (c.node, peer_of(c) as u64))
            .collect();
        // ranked by score; which nodes the addresses name is what this checks
        cut.sort();
        assert_eq!(cut, [(Some(0), 1), (Some(0), 2)], "{:#?}", d.candidates);
    }

    #[test]
    fn self_connections_and_connects_that_never_completed_are_not_partitions() {
        let s = scenario();
        let t = timeline(vec![
            gap(100 * S, 0, "10.9.0.1:2379", "10.9.0.1:41000", 9000, 30, false),
            gap(100 * S, 0, "10.9.0.1:41001", "10.9.0.2:2380", 9565, 0, true),
            gap(120 * S, 0, "10.9.0.1:41002", "10.9.0.2:2380", 9565, 0, false),
        ]);
        let d = diagnose(&t, Some(&s), None);
        assert!(partitions(&d, Verdict::Cause).is_empty(), "{:#?}", d.candidates);
        assert!(d.notes.iter().any(|n| n.contains("to itself")), "{:?}", d.notes);
    }
}

/// Two hosts, a node on each: db1 (10.7.0.1) on host-a, db2 (10.7.0.2) on host-b. Only
/// db2's end of their connection fell silent, and only host-b's dump shows it.
#[test]
fn a_silence_seen_in_one_host_s_dump_is_labelled_with_the_hosts_of_its_nodes() {
    use crate::analysis::timeline::DumpInfo;
    let mut silence = at(10.0, Some(1), 20, gap("10.7.0.2:41000", "10.7.0.1:7000", 6000));
    (silence.dump, silence.event.host) = (1, "host-b".into());
    let mut exit = at(18.0, Some(1), 20, exited(1));
    (exit.dump, exit.event.host) = (1, "host-b".into());
    let mut t = timeline(vec![silence, exit]);
    for (host, node) in [("host-a", 0), ("host-b", 1)] {
        t.dumps.push(DumpInfo {
            path: format!("{host}.tdump").into(),
            host: host.into(),
            events: 1,
            mapped_processes: 1,
            processes: 1,
            nodes: vec![node],
            interfaces: Vec::new(),
            taken_ns: 30 * SEC,
            lost_events: 0,
            process_starts: Default::default(),
            parents: Default::default(),
            node_starts: Vec::new(),
            workdir: None,
        });
    }
    let d = diagnose(&t, Some(&scenario()), None);
    let cut = d
        .candidates
        .iter()
        .find(|c| matches!(c.guess, FaultGuess::Partition { .. }))
        .expect("a partition candidate");
    assert_eq!(
        (cut.who.as_str(), cut.host.as_str(), cut.dump),
        ("db1", "host-a", 0),
        "{cut:#?}"
    );
    let text = crate::analysis::diagnose::render(&d, Some(&scenario()));
    assert!(text.contains("db1@host-a: partition from db2"), "{text}");
    assert!(!text.contains("db1@host-b"), "{text}");
}
