//! A node pair's silences (network.rs builds them from the gaps): how they group, when the
//! partition they say happened began and ended, which later connections were reconnects,
//! and what the pair's other connections and the other direction did meanwhile.
use std::net::SocketAddr;

use super::flows::FlowSides;
use super::silence::{self, NotIdle, OwnTraffic, SilenceEvidence, Traffic};
use super::TimedEvent;

/// The evidence of a pair's silences `group` over `span` (without the reason): the ratio
/// to the steadiest connection's own traffic, and what the pair's other connections
/// (`all`) and the other direction did meanwhile. The other direction counts only for a
/// connection whose other end is known to be watched: `all` holds a silence seen from it.
/// A connection opened after the silences began (`reconnects`: at the heal, or during a
/// silence that outlasted it) ended the partition; it never says the pair could talk.
pub(super) fn evidence(
    group: &[&Silence],
    all: &[Silence],
    reconnects: &[&Silence],
    span: (u64, u64),
) -> SilenceEvidence {
    let (start, end) = span;
    let pair = group[0].pair;
    let names = |it: &mut dyn Iterator<Item = &Silence>| {
        let mut v: Vec<String> = it.map(|s| silence::connection_name(s.conn)).collect();
        v.sort();
        v.dedup();
        v
    };
    let in_group = |s: &Silence| group.iter().chain(reconnects).any(|g| g.conn == s.conn);
    let others = || all.iter().filter(|s| s.pair == pair && !in_group(s));
    // the edges are fuzzy (stamps, a retransmission's back-off): talking in the middle counts
    let margin = (end - start) / 10;
    let talking = names(&mut others().filter(|s| s.traffic().inside(start + margin, end - margin)));
    let also_silent = names(&mut others().filter(|s| s.start <= start && s.end >= end));
    let both = group.iter().any(|s| {
        group
            .iter()
            .any(|o| o.conn == s.conn && o.end_node != s.end_node && o.start < end && o.end > start)
    });
    let watched = group
        .iter()
        .any(|s| all.iter().any(|o| o.conn == s.conn && o.end_node != s.end_node));
    let duration_ms = (end - start) / 1_000_000;
    let steadiest = silence::steadiest(group.iter().map(|s| s.own), duration_ms);
    SilenceEvidence {
        silence_ms: duration_ms,
        silence_ratio: steadiest.map(|s| s.0),
        own_gap_ms: steadiest.map(|s| s.1),
        idle_norm_ms: None,
        silent_connections: names(&mut group.iter().copied()),
        also_silent,
        talking_connections: talking,
        both_directions: (both || watched).then_some(both),
        resumed: group.iter().any(|s| s.resumed),
        reason: String::new(),
    }
}

/// One connection's silence between two scenario nodes, seen from one end.
pub(super) struct Silence<'e> {
    pub(super) event: &'e TimedEvent,
    /// the two nodes, lower index first
    pub(super) pair: (usize, usize),
    /// the node whose end saw it (whose receive direction fell silent)
    pub(super) end_node: usize,
    /// the connection's endpoints, ordered (both ends of one connection are one connection)
    pub(super) conn: (SocketAddr, SocketAddr),
    pub(super) start: u64,
    pub(super) end: u64,
    /// a packet ended it
    pub(super) resumed: bool,
    /// packets the connection carried before it went silent
    pub(super) packets: u64,
    /// its busy stretch before the silence
    pub(super) own: OwnTraffic,
    /// the connection closed while silent, before the dump
    pub(super) torn_down: bool,
    /// why the profile's norm for the pair and port did not excuse it, when it has one
    pub(super) not_idle: Option<NotIdle>,
    /// set aside: never carried a packet, or idling as in fault-free runs
    pub(super) idle: bool,
    /// a datagram flow's silence: what its two ends did meanwhile
    pub(super) flow: Option<FlowSides>,
}

impl Silence<'_> {
    pub(super) fn traffic(&self) -> Traffic {
        Traffic {
            busy: (self.packets > 0).then(|| (self.busy_start(), self.start)),
            resumed_at: self.resumed.then_some(self.end),
        }
    }

    /// When its busy stretch began (its start when unknown).
    fn busy_start(&self) -> u64 {
        self.start.saturating_sub(self.own.busy_ms * 1_000_000)
    }

    /// Whether the connection only began carrying packets at or after `b`: opened during
    /// or after a window ending there, so it does not shorten it. Without busy stretches
    /// (older dumps): a connection of a few packets whose silence begins after `b`.
    fn opened_after(&self, b: u64) -> bool {
        if self.own.busy_packets > 0 {
            self.start >= b && self.busy_start() >= b
        } else {
            self.packets <= YOUNG_PACKETS && self.start >= b
        }
    }
}

/// A connection that had carried no more packets than this when it went silent may have
/// been opened just then (a handshake and a message or two).
const YOUNG_PACKETS: u64 = 4;

/// The pair's connections outside `group` that began carrying packets after the group's
/// silences began: a reconnect at the heal (a standby whose stream was torn down connects
/// again), or one opened while an old connection's silence outlasted the cut (its
/// retransmission back-off). Each as its first silence, whose busy stretch starts with the
/// connection. The one rule for them, as for a member of the group opened at a window's end
/// (`Silence::opened_after`): its opening is traffic that ends the partition, and it never
/// contradicts it. A connect that never carried a packet (its SYNs dropped by the cut) is no
/// traffic: it ends nothing.
pub(super) fn reconnects<'s, 'e>(group: &[&'s Silence<'e>], all: &'s [Silence<'e>]) -> Vec<&'s Silence<'e>> {
    let pair = group[0].pair;
    let began = group.iter().map(|s| s.start).min().unwrap_or(0);
    let mut firsts: Vec<&Silence> = Vec::new();
    for s in all.iter().filter(|s| s.pair == pair) {
        if group.iter().any(|g| g.conn == s.conn) {
            continue;
        }
        match firsts.iter_mut().find(|f| f.conn == s.conn) {
            Some(f) if s.start < f.start => *f = s,
            Some(_) => {}
            None => firsts.push(s),
        }
    }
    firsts.retain(|f| f.packets > 0 && f.opened_after(began));
    firsts
}

/// Whether a TCP connection of `pair` opened during `span` never carried a packet: not even
/// a SYN-ACK (tracerd counts every segment received), so a connect whose SYNs the cut
/// dropped (a reconnect, a port-mapper lookup). A datagram flow may be one-way by design.
pub(super) fn unanswered_connect(all: &[Silence], pair: (usize, usize), span: (u64, u64)) -> bool {
    all.iter().any(|s| {
        s.pair == pair && s.flow.is_none() && s.packets == 0 && s.start >= span.0 && s.start < span.1
    })
}

/// When a pair's overlapping silences say no packet passed between the nodes: the longest
/// stretch between two moments of traffic (a silence's start is its connection's last
/// packet, a resumed silence's end its next one, a busy stretch's start its first) that
/// every connection active before it spent silent — a connection that only began carrying
/// packets at its end (opened during the heal) does not shorten the partition to its own
/// overlap, and a connection opened after the silences began (`reconnects`) ends it where it
/// opened. Falls back to the latest start and earliest resumption of the group when no
/// stretch qualifies.
pub(super) fn partition_span(members: &[&Silence], reconnects: &[&Silence]) -> (u64, u64) {
    let group: Vec<&Silence> = members.iter().chain(reconnects).copied().collect();
    let mut moments: Vec<u64> = group.iter().map(|s| s.start).collect();
    moments.extend(group.iter().filter(|s| s.resumed).map(|s| s.end));
    moments.extend(
        group
            .iter()
            .filter(|s| s.own.busy_packets > 0)
            .map(|s| s.busy_start()),
    );
    moments.extend(group.iter().map(|s| s.end).max());
    moments.sort_unstable();
    moments.dedup();
    let silent_throughout = |a: u64, b: u64| {
        group
            .iter()
            .all(|s| (s.start <= a && s.end >= b) || s.opened_after(b))
    };
    let best = moments
        .windows(2)
        .map(|w| (w[0], w[1]))
        .filter(|&(a, b)| silent_throughout(a, b))
        .max_by_key(|&(a, b)| (b - a, std::cmp::Reverse(a)));
    best.unwrap_or_else(|| {
        let start = members.iter().map(|s| s.start).max().unwrap_or(0);
        let resumed_end = members.iter().filter(|s| s.resumed).map(|s| s.end).min();
        let end = resumed_end
            .filter(|&e| e > start)
            .unwrap_or_else(|| members.iter().map(|s| s.end).max().unwrap_or(start));
        (start, end)
    })
}

/// Groups of silences of the same node pair that overlap in time (touching is not
/// overlapping: an idle connection's back-to-back gaps stay apart).
pub(super) fn overlapping<'s, 'e>(mut silences: Vec<&'s Silence<'e>>) -> Vec<Vec<&'s Silence<'e>>> {
    silences.sort_by_key(|s| (s.pair, s.start));
    let mut groups: Vec<Vec<&Silence>> = Vec::new();
    let mut group_end = 0;
    for s in silences {
        match groups.last_mut() {
            Some(g) if g[0].pair == s.pair && s.start < group_end => {
                group_end = group_end.max(s.end);
                g.push(s);
            }
            _ => {
                group_end = s.end;
                groups.push(vec![s]);
            }
        }
    }
    groups
}
