//! flows.rs and network.rs on datagram flows: a heartbeat silent far beyond its cadence is a
//! partition, corroborated by what its ends kept doing; a request/response flow idling between
//! requests is not; a one-way loss is a partition of the sender's outgoing datagrams. Three
//! nodes a, b, c at 10.9.0.1-3 (fixtures::three_nodes), sockets bound to any address.
use tracedump::event::{NetworkGap, What};

use super::super::*;
use super::fixtures::three_nodes::*;
use crate::analysis::timeline::TimedFlow;

const VRRP: u16 = 112;
const UDP: u16 = 17;

/// A datagram flow's silence seen at node `node` (socket bound to any address on `local_port`) from
/// `peer`, beginning at `at_ns`: `busy` (ms, datagrams) of steady traffic before it, and the
/// datagrams `node` sent to `peer` during it and before it.
fn flow_gap(
    at_ns: u64,
    (node, local_port): (usize, u16),
    peer: &str,
    ms: u64,
    busy: (u64, u64),
    sent: (u64, u64),
    protocol: u16,
) -> TimedEvent {
    let g = NetworkGap {
        local: Some(format!("0.0.0.0:{local_port}").parse().unwrap()),
        peer: Some(peer.parse().unwrap()),
        duration_ms: ms,
        packets: busy.1 + 3,
        ongoing: false,
        busy_ms: busy.0,
        busy_packets: busy.1,
        protocol,
        sent: Some(sent.0),
        sent_before: Some(sent.1),
    };
    event(at_ns, node, What::NetworkGap(g))
}

/// A flow of `node`'s table toward `peer`: steady receiving and sending over the spans given.
fn table_flow(
    node: usize,
    peer: &str,
    protocol: u16,
    receiving: Option<(u64, u64)>,
    sending: Option<(u64, u64)>,
) -> TimedFlow {
    TimedFlow {
        node: Some(node),
        dump: 0,
        protocol,
        peer: peer.parse().unwrap(),
        receiving,
        sending,
    }
}

fn partition_guess(c: &Candidate) -> (Option<usize>, usize, u64, bool) {
    match c.guess {
        FaultGuess::Partition {
            peer,
            duration_ms,
            one_way,
        } => (c.node, peer, duration_ms, one_way),
        _ => panic!("not a partition: {c:?}"),
    }
}

#[test]
fn a_heartbeat_silent_five_times_its_cadence_is_a_partition() {
    // b and c each hear a's 1-s adverts (VRRP, raw IP: port 0), and send none; both stop
    // hearing a at 100 s for 5 s
    let t = timeline(vec![
        flow_gap(100 * S, (1, 112), "10.9.0.1:0", 5000, (60_000, 60), (0, 0), VRRP),
        flow_gap(
            100 * S + S / 10,
            (2, 112),
            "10.9.0.1:0",
            4900,
            (60_000, 60),
            (0, 0),
            VRRP,
        ),
        state(110 * S, 1, tracedump::event::State::Exited { code: 1 }),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    let cut = partitions(&d, Verdict::Cause);
    assert_eq!(cut.len(), 2, "a cut off from b and from c: {:#?}", d.candidates);
    for c in &cut {
        let (node, peer, ms, one_way) = partition_guess(c);
        assert_eq!(node, Some(0), "the pair's lower node: a");
        assert!(peer == 1 || peer == 2);
        assert!((4900..=5000).contains(&ms), "{ms}");
        assert!(!one_way, "nothing says a kept hearing them");
        assert!(
            c.why.contains("went silent 5.0× as long") || c.why.contains("4.9× as long"),
            "{}",
            c.why
        );
        let deviation = &c.score.deviation;
        assert!(
            (deviation.value - 5.0).abs() < 0.2,
            "scored by its cadence: {deviation:?}"
        );
        assert!(
            deviation.why.contains("cadence of a datagram every 1000 ms"),
            "{}",
            deviation.why
        );
    }
    // with a's flow table (its dump): it kept sending to both all along
    let mut t = t;
    t.flows = vec![
        table_flow(0, "10.9.0.2:0", VRRP, None, Some((10 * S, 150 * S))),
        table_flow(0, "10.9.0.3:0", VRRP, None, Some((10 * S, 150 * S))),
    ];
    let d = diagnose(&t, Some(&scenario()), None);
    let cut = partitions(&d, Verdict::Cause);
    assert_eq!(cut.len(), 2);
    assert!(
        cut[0].why.contains("a's flow table: it kept sending to"),
        "{}",
        cut[0].why
    );
    assert!(cut[0].evidence.peer_kept_sending);
}

#[test]
fn a_request_response_flow_idling_between_requests_is_not_a_partition() {
    // a asks b (port 53) now and then; each answer ends a silence that began at the last
    // answer, during which a sent only the request; b's end: it sent answers before, none
    // during (it only answers)
    let mut events = Vec::new();
    for i in 0..4 {
        let at = (20 + 15 * i) * S;
        events.push(flow_gap(
            at,
            (0, 40000),
            "10.9.0.2:53",
            12_000,
            (300, 3),
            (1, 20 + i),
            UDP,
        ));
        events.push(flow_gap(
            at + S / 100,
            (1, 53),
            "10.9.0.1:40000",
            12_000,
            (300, 3),
            (0, 20 + i),
            UDP,
        ));
    }
    let d = diagnose(&timeline(events), Some(&scenario()), None);
    assert!(partitions(&d, Verdict::Cause).is_empty(), "{:#?}", d.candidates);
    let aside = partitions(&d, Verdict::Benign);
    assert!(!aside.is_empty());
    assert!(
        aside
            .iter()
            .all(|c| c.why.contains("request/response flow between requests")),
        "{aside:#?}"
    );
}

#[test]
fn a_one_way_loss_is_a_partition_of_the_senders_datagrams() {
    // a and b heartbeat each other every 100 ms over UDP; at 100 s a's datagrams stop
    // reaching b for 3 s while b's keep reaching a: b hears nothing and keeps sending
    let mut t = timeline(vec![
        flow_gap(
            100 * S,
            (1, 5406),
            "10.9.0.1:5405",
            3000,
            (30_000, 300),
            (30, 300),
            UDP,
        ),
        state(104 * S, 1, tracedump::event::State::Exited { code: 1 }),
    ]);
    t.flows = vec![
        // a's table: it heard b, and sent to it, steadily across 100-103 s
        table_flow(
            0,
            "10.9.0.2:5406",
            UDP,
            Some((10 * S, 150 * S)),
            Some((10 * S, 150 * S)),
        ),
        table_flow(
            1,
            "10.9.0.1:5405",
            UDP,
            Some((103 * S, 150 * S)),
            Some((10 * S, 150 * S)),
        ),
    ];
    let d = diagnose(&t, Some(&scenario()), None);
    let cut = partitions(&d, Verdict::Cause);
    assert_eq!(cut.len(), 1, "{:#?}", d.candidates);
    let (node, peer, ms, one_way) = partition_guess(cut[0]);
    assert_eq!(
        (node, peer, one_way),
        (Some(0), 1, true),
        "a's datagrams to b: {}",
        cut[0].why
    );
    assert_eq!(ms, 3000);
    assert!(
        cut[0].why.contains("b kept sending to a (30 datagrams)"),
        "{}",
        cut[0].why
    );
    assert!(cut[0].why.contains("only a→b was lost"), "{}", cut[0].why);
    assert!(cut[0].evidence.kept_sending && cut[0].evidence.peer_kept_sending);
}

#[test]
fn what_each_end_did_is_said_of_that_end() {
    // a firewall in a's namespace drops a's traffic with b both ways at 100 s for 6 s: a's
    // sends fail there (EPERM), so a sent nothing to b while it heard nothing; b kept
    // sending to a (30 datagrams), as its flow table says; a's silence comes first in the
    // pair's group
    let mut t = timeline(vec![
        flow_gap(
            100 * S,
            (0, 5405),
            "10.9.0.2:5405",
            6000,
            (5000, 100),
            (0, 80),
            UDP,
        ),
        flow_gap(
            100 * S + S / 20,
            (1, 5405),
            "10.9.0.1:5405",
            5950,
            (5000, 100),
            (30, 80),
            UDP,
        ),
        state(108 * S, 2, tracedump::event::State::Exited { code: 1 }),
    ]);
    t.flows = vec![
        // a's sends resumed after the cut; b's went on throughout
        table_flow(
            0,
            "10.9.0.2:5405",
            UDP,
            Some((106 * S, 150 * S)),
            Some((106 * S, 150 * S)),
        ),
        table_flow(
            1,
            "10.9.0.1:5405",
            UDP,
            Some((106 * S, 150 * S)),
            Some((10 * S, 150 * S)),
        ),
    ];
    let d = diagnose(&t, Some(&scenario()), None);
    let cut = partitions(&d, Verdict::Cause);
    assert_eq!(cut.len(), 1, "{:#?}", d.candidates);
    let why = &cut[0].why;
    assert!(
        why.contains("b kept sending to a (30 datagrams) while it heard nothing"),
        "{why}"
    );
    assert!(!why.contains("a kept sending"), "a's sends failed: {why}");
    assert!(
        why.contains("b's flow table: it kept sending to a all along"),
        "{why}"
    );
    assert!(!partition_guess(cut[0]).3, "both directions were lost: {why}");
}
