//! One connection's silence judged against that connection's own traffic before it (its
//! busy stretch: how long it carried packets since its previous silence, and how many),
//! against the fault-free norm of its node pair and port only when it behaved like the
//! connections that norm was learned from, and against the pair's other connections at the
//! same moment. `SilenceEvidence` is what a silence candidate carries: numbers a score can
//! weigh (`silence_ratio`) and the reason in words.
use std::net::SocketAddr;

use serde::Serialize;

/// A busy stretch needs this many packets before its mean gap says how the connection talks.
pub const STEADY_PACKETS: u64 = 8;
/// A silence this many times a steady connection's own gap is more than its traffic
/// pattern explains (a 100-ms heartbeat silent for 2 s).
pub const SILENT_RATIO: f64 = 20.0;
/// Slack on the fault-free norms: a silence up to 1.5 × the longest the profile saw after
/// a busy stretch up to 1.5 × as long (+ `BUSY_SLACK_MS`) is that connection idling.
pub const IDLE_SLACK: f64 = 1.5;
const BUSY_SLACK_MS: u64 = 500;

/// A connection's traffic in the busy stretch before its silence; 0 and 0 in dumps
/// written before tracerd recorded it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OwnTraffic {
    pub busy_ms: u64,
    pub busy_packets: u64,
}

impl OwnTraffic {
    /// The mean gap between the busy stretch's packets (ms, at least 1), when it carried
    /// enough of them to say.
    pub fn typical_gap_ms(&self) -> Option<f64> {
        (self.busy_packets >= STEADY_PACKETS)
            .then(|| (self.busy_ms as f64 / self.busy_packets as f64).max(1.0))
    }

    /// `silence_ms` over the typical gap.
    pub fn ratio(&self, silence_ms: u64) -> Option<f64> {
        self.typical_gap_ms().map(|g| silence_ms as f64 / g)
    }
}

/// The profile's norm of a node pair and port.
pub struct IdleNorm<'a> {
    /// the longest fault-free silence
    pub longest_ms: u64,
    /// `[busy_ms, silence_ms]` pairs (empty: a profile from before busy stretches)
    pub after_busy: &'a [[u64; 2]],
}

/// Why a pair-and-port norm does not excuse a silence.
#[derive(Clone, Debug, PartialEq)]
pub enum NotIdle {
    /// longer than such connections fall silent fault-free (the longest of them, ms)
    Longer(u64),
    /// busy for this long (ms) before it: longer than any connection of the pair that idles
    /// in fault-free runs
    Busier(u64),
}

impl NotIdle {
    pub fn describe(&self) -> String {
        match self {
            NotIdle::Longer(ms) => format!("fault-free runs never see these connections silent over {ms} ms"),
            NotIdle::Busier(ms) => format!(
                "a connection busy for {ms} ms before it, unlike the pair's connections that idle in fault-free runs"
            ),
        }
    }
}

impl IdleNorm<'_> {
    /// Whether a silence of `silence_ms` after `own` traffic is what the norm's connections
    /// do without faults.
    pub fn excuses(&self, own: OwnTraffic, silence_ms: u64) -> Result<(), NotIdle> {
        let within = |longest: u64| {
            if silence_ms as f64 <= longest as f64 * IDLE_SLACK {
                Ok(())
            } else {
                Err(NotIdle::Longer(longest))
            }
        };
        if own.typical_gap_ms().is_none() {
            // a dump without busy stretches, or a few packets: the pair-and-port norm
            return within(self.longest_ms);
        }
        if self.after_busy.is_empty() {
            // an older profile: a connection that kept steady traffic for longer than the
            // pair's longest idle silence is not one of the idle ones
            if own.busy_ms > self.longest_ms {
                return Err(NotIdle::Busier(own.busy_ms));
            }
            return within(self.longest_ms);
        }
        let limit = |busy: u64| busy as f64 * IDLE_SLACK + BUSY_SLACK_MS as f64;
        let covering = self
            .after_busy
            .iter()
            .filter(|[busy, _]| own.busy_ms as f64 <= limit(*busy));
        match covering.map(|[_, silence]| *silence).max() {
            None => Err(NotIdle::Busier(own.busy_ms)),
            Some(longest) => within(longest),
        }
    }
}

/// What a silence candidate rests on, for the reason text and for a score.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SilenceEvidence {
    /// how long no packet passed, ms (a partition: every connection of the pair at once)
    pub silence_ms: u64,
    /// `silence_ms` over the steadiest silent connection's own typical gap before it: how
    /// far the silence is from that connection's own traffic; none when no silent connection
    /// carried enough packets to say (or the dump predates busy stretches)
    pub silence_ratio: Option<f64>,
    /// that connection's typical gap between packets, ms
    pub own_gap_ms: Option<f64>,
    /// the fault-free norm of the pair and port that excused it (idle connections only)
    pub idle_norm_ms: Option<u64>,
    /// the silent connections ("local-peer", each once whichever end saw it)
    pub silent_connections: Vec<String>,
    /// the pair's other connections that also stayed silent throughout (idle ones)
    pub also_silent: Vec<String>,
    /// the pair's connections that carried packets in the middle of it: the pair could talk
    pub talking_connections: Vec<String>,
    /// both ends of a silent connection saw it (`None`: one end's node is not traced, so
    /// the other direction cannot be told)
    pub both_directions: Option<bool>,
    /// a packet ended it before the dump
    pub resumed: bool,
    /// the judgement in words
    pub reason: String,
}

/// A connection, the same whichever end saw it: "lower-higher" endpoint.
pub fn connection_name(conn: (SocketAddr, SocketAddr)) -> String {
    format!("{}-{}", conn.0, conn.1)
}

/// The largest ratio of a silence of `silence_ms` to the own traffic of the connections
/// that fell silent, with the typical gap it came from.
pub fn steadiest(own: impl Iterator<Item = OwnTraffic>, silence_ms: u64) -> Option<(f64, f64)> {
    own.filter_map(|o| Some((o.ratio(silence_ms)?, o.typical_gap_ms()?)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// When a connection carried packets: the moments its silences name (the last packet before
/// each, the next packet after a resumed one) and its busy stretches.
#[derive(Clone, Copy, Debug)]
pub struct Traffic {
    /// its busy stretch before the silence: from, to (ns; from == to when unknown); none
    /// when it carried no packet before the silence (a connect still waiting for its
    /// answer: its silence begins when it was opened, not at a packet)
    pub busy: Option<(u64, u64)>,
    /// the packet that ended the silence, if one did
    pub resumed_at: Option<u64>,
}

impl Traffic {
    /// Whether it carried a packet strictly inside `from..to`.
    pub fn inside(&self, from: u64, to: u64) -> bool {
        let before = self.busy.is_some_and(|(b0, b1)| {
            let busy = b1 > from && b0 < to && b1 > b0;
            let last = b1 > from && b1 < to;
            busy || last
        });
        let next = self.resumed_at.is_some_and(|t| t > from && t < to);
        before || next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_connection_is_not_excused_by_its_idle_neighbours_norm() {
        let norm = IdleNorm {
            longest_ms: 5001,
            after_busy: &[[40, 5001], [9000, 60]],
        };
        let stream = OwnTraffic {
            busy_ms: 8000,
            busy_packets: 80,
        };
        assert!((stream.ratio(7000).unwrap() - 70.0).abs() < 1e-9);
        assert_eq!(norm.excuses(stream, 7000), Err(NotIdle::Longer(60)));
        let pipeline = OwnTraffic {
            busy_ms: 30,
            busy_packets: 9,
        };
        assert!(norm.excuses(pipeline, 6000).is_ok());
        assert!(norm.excuses(pipeline, 9000).is_err());
        let old_profile = IdleNorm {
            longest_ms: 5001,
            after_busy: &[],
        };
        assert_eq!(old_profile.excuses(stream, 7000), Err(NotIdle::Busier(8000)));
        assert!(old_profile.excuses(OwnTraffic::default(), 7000).is_ok());
    }

    #[test]
    fn traffic_inside_a_window() {
        let t = Traffic {
            busy: Some((10, 20)),
            resumed_at: Some(50),
        };
        assert!(t.inside(15, 40));
        assert!(t.inside(40, 60));
        assert!(!t.inside(20, 50));
        assert!(!t.inside(60, 70));
        // a connect made at 30 that no packet ever answered did not talk at 30
        let unanswered = Traffic {
            busy: None,
            resumed_at: None,
        };
        assert!(!unanswered.inside(20, 50));
        let answered_at_45 = Traffic {
            busy: None,
            resumed_at: Some(45),
        };
        assert!(answered_at_45.inside(20, 50));
    }
}
