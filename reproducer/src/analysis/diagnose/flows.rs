//! What sets a datagram flow's silence (UDP, raw IP) apart from a TCP connection's: its two
//! directions are seen apart. The silent end says whether it kept sending meanwhile (a
//! heartbeat that went unanswered) or had only asked once (a request/response flow between
//! requests, not a partition); the peer's flow table, in its own dump, says whether the peer
//! kept sending to the silent end all along (the datagrams were lost on the way) and kept
//! hearing it (only one direction was lost: the peer is the side cut off, a partition of its
//! outgoing datagrams).
use std::net::SocketAddr;

use tracedump::event::NetworkGap;

use super::{node_name, Builder};
use crate::analysis::timeline::TimedFlow;

/// A silence this many times a steady flow's own cadence is more than its pattern explains:
/// datagram heartbeats are regular (a 1-s advert missing three in a row), unlike a TCP
/// connection's bursts of requests (silence.rs's SILENT_RATIO).
pub const FLOW_SILENT_RATIO: f64 = 3.0;

/// A datagram flow's silence, seen from both ends.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlowSides {
    /// the IP protocol
    pub protocol: u16,
    /// datagrams the silent end sent to the peer during the silence, and before it
    pub sent: u64,
    pub sent_before: u64,
    /// the peer's flow table: it sent to the silent end steadily across the silence
    pub peer_kept_sending: bool,
    /// the peer's flow table: it kept receiving from the silent end across the silence
    pub peer_kept_hearing: bool,
}

impl FlowSides {
    /// A request/response flow between requests: the silent end talks on the flow, but sent
    /// at most the one request its answer then ended, and nothing says the peer kept sending.
    pub fn between_requests(&self) -> bool {
        self.sent_before > 0 && self.sent <= 1 && !self.peer_kept_sending
    }

    /// The silent end kept talking while it heard nothing.
    pub fn kept_sending(&self) -> bool {
        self.sent >= 2
    }

    /// Only the peer's datagrams to the silent end were lost: the silent end's own arrived.
    pub fn one_way(&self) -> bool {
        self.peer_kept_hearing && self.kept_sending()
    }
}

/// Whether a flow of the table covers `span` steadily in one direction.
fn steady_across(side: Option<(u64, u64)>, (start, end): (u64, u64)) -> bool {
    side.is_some_and(|(since, last)| since <= start && last >= end)
}

impl Builder<'_> {
    /// A datagram socket bound to any address speaks for its process's node: the node's
    /// scenario address stands for it, so that the flow's two ends name one flow.
    pub(super) fn flow_local(&self, local: SocketAddr, node: Option<usize>) -> SocketAddr {
        if !local.ip().is_unspecified() {
            return local;
        }
        let address = node
            .and_then(|n| self.scenario?.nodes.get(n))
            .and_then(|n| n.ips().into_iter().find(|a| a.is_ipv4() == local.is_ipv4()));
        address.map_or(local, |ip| SocketAddr::new(ip, local.port()))
    }

    /// The silence `g` of node `end` from node `peer` over `span`, with what the peer's
    /// flows toward `end` (in any dump) did meanwhile.
    pub(super) fn flow_sides(&self, g: &NetworkGap, end: usize, peer: usize, span: (u64, u64)) -> FlowSides {
        let toward_end = |f: &&TimedFlow| {
            f.node == Some(peer) && f.protocol == g.protocol && self.node_of_address(f.peer) == Some(end)
        };
        let flows: Vec<&TimedFlow> = self.timeline.flows.iter().filter(toward_end).collect();
        FlowSides {
            protocol: g.protocol,
            sent: g.sent.unwrap_or(0),
            sent_before: g.sent_before.unwrap_or(0),
            peer_kept_sending: flows.iter().any(|f| steady_across(f.sending, span)),
            peer_kept_hearing: flows.iter().any(|f| steady_across(f.receiving, span)),
        }
    }

    /// Why a datagram silence of `end` from `peer` is set aside as a request/response flow
    /// between requests, if it is one.
    pub(super) fn between_requests(&self, sides: &FlowSides, end: usize, peer: usize) -> Option<String> {
        sides.between_requests().then(|| {
            format!(
                "a request/response flow between requests: {} sent {} datagram(s) to {} during the silence, and nothing says {} kept sending",
                node_name(self.scenario, end),
                sides.sent,
                node_name(self.scenario, peer),
                node_name(self.scenario, peer)
            )
        })
    }
}
