//! network.rs and silence.rs: silences judged per connection, against the connection's own
//! traffic before it (its busy stretch), the pair's other connections and the other
//! direction. Raft-like peers: on one port, a stream with a packet every 100 ms beside
//! pipelines that idle for seconds; a, b and c at 10.9.0.1-3, port 7000.
use tracedump::event::{NetworkGap, PauseCause, State, What};

use super::super::network::partition_ms;
use super::super::*;
use super::fixtures::three_nodes::{event, partitions, scenario, state, timeline, S};

const MS: u64 = 1_000_000;

/// A silence seen by `node`'s end, with the busy stretch before it.
struct Gap {
    at: u64,
    node: usize,
    local: &'static str,
    peer: &'static str,
    ms: u64,
    busy_ms: u64,
    busy_packets: u64,
    resumed: bool,
}

fn gap(g: Gap) -> TimedEvent {
    event(
        g.at,
        g.node,
        What::NetworkGap(NetworkGap {
            local: Some(g.local.parse().unwrap()),
            peer: Some(g.peer.parse().unwrap()),
            duration_ms: g.ms,
            packets: 20 + g.busy_packets,
            ongoing: !g.resumed,
            busy_ms: g.busy_ms,
            busy_packets: g.busy_packets,
            protocol: 6,
            sent: None,
            sent_before: None,
        }),
    )
}

/// Both ends of a connection between a and `peer_node` (b or c) silent from `at` for `ms`
/// (the far end 50 ms later, 50 ms shorter), after a busy stretch.
fn both_ends(
    conn: (&'static str, &'static str),
    peer_node: usize,
    at: u64,
    ms: u64,
    busy: (u64, u64),
) -> Vec<TimedEvent> {
    let (a_end, far_end) = conn;
    vec![
        gap(Gap {
            at,
            node: 0,
            local: a_end,
            peer: far_end,
            ms,
            busy_ms: busy.0,
            busy_packets: busy.1,
            resumed: true,
        }),
        gap(Gap {
            at: at + 50 * MS,
            node: peer_node,
            local: far_end,
            peer: a_end,
            ms: ms - 50,
            busy_ms: busy.0,
            busy_packets: busy.1,
            resumed: true,
        }),
    ]
}

const STREAM: (&str, &str) = ("10.9.0.1:41000", "10.9.0.2:7000");
const PIPELINE_1: (&str, &str) = ("10.9.0.1:41001", "10.9.0.2:7000");
const PIPELINE_2: (&str, &str) = ("10.9.0.1:41002", "10.9.0.2:7000");
/// a stream's busy stretch: 10 s, a packet every 100 ms
const STEADY: (u64, u64) = (10_000, 100);
/// a pipeline's: a request and its reply, 30 ms
const BURST: (u64, u64) = (30, 9);

/// Fault-free runs: the pipelines of every pair on port 7000 silent up to 5001 ms after
/// their bursts; `after_busy` false: a profile from before busy stretches were recorded.
fn profile(after_busy: bool) -> BaselineRates {
    let mut b = BaselineRates::default();
    for (x, y) in [("a", "b"), ("b", "a"), ("a", "c"), ("c", "a")] {
        let key = (x.to_string(), y.to_string(), 7000);
        b.gaps.insert(key.clone(), 5001);
        if after_busy {
            b.gaps_after_busy.insert(key, vec![[40, 5001]]);
        }
    }
    b
}

/// a cut off from b from 100 s for 7 s: the stream silent on both ends, the pipelines,
/// idle since just before, silent through it.
fn cut_with_idle_neighbours() -> Vec<TimedEvent> {
    let mut events = both_ends(STREAM, 1, 100 * S, 7000, STEADY);
    events.extend(both_ends(PIPELINE_1, 1, 99_900 * MS, 7200, BURST));
    events.extend(both_ends(PIPELINE_2, 1, 99_800 * MS, 7300, BURST));
    events
}

#[test]
fn a_busy_stream_beside_idle_pipelines_is_a_partition_whatever_their_norm() {
    for after_busy in [true, false] {
        let d = diagnose(
            &timeline(cut_with_idle_neighbours()),
            Some(&scenario()),
            Some(&profile(after_busy)),
        );
        let first = &d.candidates[0];
        assert_eq!(first.verdict, Verdict::Cause, "{:#?}", d.candidates);
        assert!(
            matches!(first.guess, FaultGuess::Partition { peer: 1, .. }),
            "{first:#?}"
        );
        assert!((6900..=7000).contains(&partition_ms(first)), "{first:#?}");
        let ev = first.silence.as_ref().expect("evidence");
        let ratio = ev.silence_ratio.expect("a ratio");
        assert!((60.0..80.0).contains(&ratio), "{ev:#?}");
        assert_eq!(ev.own_gap_ms, Some(100.0));
        assert_eq!(ev.silent_connections, ["10.9.0.1:41000-10.9.0.2:7000"]);
        assert_eq!(ev.also_silent.len(), 2, "the idle pipelines corroborate: {ev:#?}");
        assert_eq!(ev.both_directions, Some(true));
        assert!(ev.talking_connections.is_empty());
        assert!(
            first
                .why
                .contains("a packet every 100 ms went silent 70× as long")
                && first.why.contains("3 connections silent together"),
            "{}",
            first.why
        );
        let idle = partitions(&d, Verdict::Benign);
        assert!(
            !idle.is_empty() && idle.iter().all(|c| c.why.contains("an idle connection")),
            "{idle:#?}"
        );
        assert_eq!(partitions(&d, Verdict::Cause).len(), 1, "{:#?}", d.candidates);
    }
}

#[test]
fn an_idle_only_pair_is_set_aside() {
    let mut events = both_ends(("10.9.0.1:41003", "10.9.0.3:7000"), 2, 100 * S, 4000, BURST);
    events.extend(both_ends(
        ("10.9.0.1:41004", "10.9.0.3:7000"),
        2,
        101 * S,
        4500,
        BURST,
    ));
    let d = diagnose(&timeline(events), Some(&scenario()), Some(&profile(true)));
    assert!(partitions(&d, Verdict::Cause).is_empty(), "{:#?}", d.candidates);
    let idle = partitions(&d, Verdict::Benign);
    assert!(!idle.is_empty(), "set aside, not dropped");
    for c in idle {
        let ev = c.silence.as_ref().expect("evidence");
        assert_eq!(ev.idle_norm_ms, Some(5001), "{ev:#?}");
        assert!(
            ev.silence_ratio.is_some_and(|r| r > 100.0),
            "a burst's gap says little: {ev:#?}"
        );
    }
}

#[test]
fn a_silence_only_one_direction_shows_is_not_a_partition() {
    // b's end of the stream heard nothing for 7 s; a's end of the same connection, watched
    // (it saw a short idle moment earlier), kept hearing b
    let events = vec![
        gap(Gap {
            at: 50 * S,
            node: 0,
            local: STREAM.0,
            peer: STREAM.1,
            ms: 600,
            busy_ms: 20,
            busy_packets: 3,
            resumed: true,
        }),
        gap(Gap {
            at: 100 * S,
            node: 1,
            local: STREAM.1,
            peer: STREAM.0,
            ms: 7000,
            busy_ms: STEADY.0,
            busy_packets: STEADY.1,
            resumed: true,
        }),
    ];
    let d = diagnose(&timeline(events), Some(&scenario()), Some(&profile(true)));
    assert!(partitions(&d, Verdict::Cause).is_empty(), "{:#?}", d.candidates);
    let one_way = d
        .candidates
        .iter()
        .find(|c| partition_ms(c) == 7000)
        .expect("kept, with its evidence");
    assert_eq!(one_way.verdict, Verdict::Benign);
    let ev = one_way.silence.as_ref().expect("evidence");
    assert_eq!(ev.both_directions, Some(false));
    assert!(ev.silence_ratio.is_some_and(|r| r > 60.0));
    assert!(one_way.why.contains("only b's end saw it"), "{}", one_way.why);
}

#[test]
fn a_pause_explains_the_silence_it_caused() {
    let mut events = cut_with_idle_neighbours();
    events.push(state(
        99_950 * MS,
        0,
        State::Paused {
            cause: PauseCause::Stopped,
            duration_ms: 7000,
        },
    ));
    let d = diagnose(&timeline(events), Some(&scenario()), Some(&profile(true)));
    assert!(partitions(&d, Verdict::Cause).is_empty(), "{:#?}", d.candidates);
    let explained = partitions(&d, Verdict::Explained);
    assert_eq!(explained.len(), 1, "{:#?}", d.candidates);
    assert!(explained[0].why.contains("explained by"), "{}", explained[0].why);
    assert!(explained[0].silence.is_some());
}

#[test]
fn a_connection_opened_during_the_heal_does_not_shorten_the_partition() {
    // the stream resumes late (its retransmission back-off); meanwhile a new connection
    // opened at 107 s carried 30 packets in 300 ms, then idled
    let mut events = both_ends(STREAM, 1, 100 * S, 7500, STEADY);
    events.extend(both_ends(
        ("10.9.0.1:41009", "10.9.0.2:7000"),
        1,
        107_300 * MS,
        3000,
        (300, 30),
    ));
    // with the profile the new connection is an idle one; without it, it joins the stream's
    // silences: either way the partition lasts until the pair talked again, on the new one
    for baseline in [Some(profile(true)), None] {
        let d = diagnose(&timeline(events.clone()), Some(&scenario()), baseline.as_ref());
        let cut = partitions(&d, Verdict::Cause);
        assert_eq!(cut.len(), 1, "{:#?}", d.candidates);
        assert_eq!(partition_ms(cut[0]), 6950, "{:#?}", cut[0]);
        assert_eq!(cut[0].at_ns, 100_050 * MS);
    }
}

/// The standby's replication stream to the primary (b to a's port 5432): a packet every
/// 100 ms, cut at 100 s for 6.8 s. The standby gives up on it and tears it down at the heal;
/// the primary's end stays silent until its own timeout at 160 s; the standby reconnects
/// right at the heal, and the new stream idles once caught up.
fn replication_cut_and_reconnect() -> Vec<TimedEvent> {
    let (old_b, old_a) = ("10.9.0.2:41000", "10.9.0.1:5432");
    let (new_b, new_a) = ("10.9.0.2:41001", "10.9.0.1:5432");
    let stream = |at: u64, node: usize, local, peer, ms, resumed| {
        gap(Gap {
            at,
            node,
            local,
            peer,
            ms,
            busy_ms: STEADY.0,
            busy_packets: STEADY.1,
            resumed,
        })
    };
    let caught_up = |at: u64, node: usize, local, peer| {
        gap(Gap {
            at,
            node,
            local,
            peer,
            ms: 700,
            busy_ms: 3000,
            busy_packets: 30,
            resumed: true,
        })
    };
    vec![
        stream(100 * S, 1, old_b, old_a, 6800, false),
        stream(100_050 * MS, 0, old_a, old_b, 59_950, false),
        caught_up(109_800 * MS, 1, new_b, new_a),
        caught_up(109_850 * MS, 0, new_a, new_b),
    ]
}

#[test]
fn a_standby_reconnecting_at_the_heal_leaves_a_corroborated_partition() {
    // fault-free runs: the replication port idles up to 1 s after a catch-up of up to 3 s
    let mut idle = BaselineRates::default();
    for (x, y) in [("a", "b"), ("b", "a")] {
        let key = (x.to_string(), y.to_string(), 5432);
        idle.gaps.insert(key.clone(), 1000);
        idle.gaps_after_busy.insert(key, vec![[3000, 1000]]);
    }
    // with the profile the new stream is an idle connection, outside the cut's silences;
    // without it, one of them: the same rule either way
    for baseline in [Some(idle), None] {
        let d = diagnose(
            &timeline(replication_cut_and_reconnect()),
            Some(&scenario()),
            baseline.as_ref(),
        );
        let cut = partitions(&d, Verdict::Cause);
        assert_eq!(cut.len(), 1, "{:#?}", d.candidates);
        // from the primary's last packet to the reconnect, not to the primary's timeout
        assert_eq!(partition_ms(cut[0]), 6750, "{:#?}", cut[0]);
        assert_eq!(cut[0].at_ns, 100_050 * MS);
        let evidence = cut[0].silence.as_ref().expect("a silence's evidence");
        assert!(evidence.talking_connections.is_empty(), "{evidence:#?}");
        assert!(
            cut[0].why.contains("a connection was torn down while silent"),
            "{}",
            cut[0].why
        );
    }
}

#[test]
fn another_connection_talking_meanwhile_contradicts_a_partition() {
    let mut events = both_ends(STREAM, 1, 100 * S, 7000, STEADY);
    // a pipeline's request got through in the middle of the stream's silence
    events.extend(both_ends(PIPELINE_1, 1, 99 * S, 4500, BURST));
    let d = diagnose(&timeline(events), Some(&scenario()), Some(&profile(true)));
    assert!(partitions(&d, Verdict::Cause).is_empty(), "{:#?}", d.candidates);
    let talked = d
        .candidates
        .iter()
        .find_map(|c| c.silence.as_ref().filter(|e| !e.talking_connections.is_empty()))
        .expect("the stream's silence, with what talked");
    assert_eq!(talked.talking_connections, ["10.9.0.1:41001-10.9.0.2:7000"]);
    assert!(talked.reason.contains("the pair could talk"), "{}", talked.reason);
}

#[test]
fn a_connect_no_packet_answered_during_the_cut_does_not_contradict_it() {
    // a reconnects to b's port 4369 at 103 s, in the middle of the cut: its SYNs are dropped,
    // so it never carries a packet and is still silent at the dump (as RabbitMQ's epmd
    // lookups were in the bug benchmark's rabbitmq-partition)
    let mut events = both_ends(STREAM, 1, 100 * S, 7000, STEADY);
    events.push(event(
        103 * S,
        0,
        What::NetworkGap(NetworkGap {
            local: Some("10.9.0.1:41009".parse().unwrap()),
            peer: Some("10.9.0.2:4369".parse().unwrap()),
            duration_ms: 3500,
            packets: 0,
            ongoing: true,
            busy_ms: 0,
            busy_packets: 0,
            protocol: 6,
            sent: None,
            sent_before: None,
        }),
    ));
    let d = diagnose(&timeline(events), Some(&scenario()), Some(&profile(true)));
    let cut = partitions(&d, Verdict::Cause);
    assert_eq!(cut.len(), 1, "{:#?}", d.candidates);
    // nor does it end it: no packet passed, the cut lasts as long as the stream's silence;
    // it confirms the cut
    assert_eq!(partition_ms(cut[0]), 6950, "{:#?}", cut[0]);
    assert!(cut[0].evidence.unanswered_connect, "{:#?}", cut[0]);
    let evidence = cut[0].silence.as_ref().expect("a silence's evidence");
    assert!(evidence.talking_connections.is_empty(), "{evidence:#?}");
}
