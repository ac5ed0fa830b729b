//! Explanations: a partition during a pause or right after a crash of one of its ends, a
//! network error during or right after another node's crash, pause or partition, and what
//! comes after the symptoms are not causes of their own.
use super::network::peer_of;
use super::{Builder, Candidate, FaultGuess, Verdict};

/// How far around a pause (before it, after it ends) a silence may start and be its doing.
const EXPLAIN_SLACK_NS: u64 = 1_500_000_000;
/// How long before a crash a silence may start and still be the crash's doing.
const CRASH_SLACK_NS: u64 = 300_000_000;
/// errnos of calls a peer's crash, pause or a partition makes fail
const NETWORK_ERRNOS: [&str; 7] = [
    "ECONNRESET",
    "EPIPE",
    "ECONNREFUSED",
    "ETIMEDOUT",
    "EHOSTUNREACH",
    "ENETUNREACH",
    "ECONNABORTED",
];
/// How long after a crash (or the end of a pause or partition) its peers' calls still fail.
const AFTERMATH_NS: u64 = 5_000_000_000;

impl Builder<'_> {
    /// A gap while one side was paused, or starting after one side was killed, is that
    /// fault's consequence.
    pub(super) fn explain_gaps(&mut self) {
        // (what, earliest and latest start of a silence it explains, node): a paused node's
        // peer hears its last packet up to a heartbeat before the pause; a crash closes the
        // node's connections, so a silence it causes starts at the crash, not before
        let process_faults: Vec<(String, u64, u64, Option<usize>)> = self
            .candidates
            .iter()
            .filter_map(|c| match c.guess {
                FaultGuess::Pause { duration_ms, .. } => Some((
                    label(c),
                    c.at_ns.saturating_sub(EXPLAIN_SLACK_NS),
                    c.at_ns + duration_ms * 1_000_000 + EXPLAIN_SLACK_NS,
                    c.node,
                )),
                FaultGuess::Crash { .. } => Some((
                    label(c),
                    c.at_ns.saturating_sub(CRASH_SLACK_NS),
                    c.at_ns + EXPLAIN_SLACK_NS,
                    c.node,
                )),
                _ => None,
            })
            .collect();
        for c in &mut self.candidates {
            if !matches!(c.guess, FaultGuess::Partition { .. }) || c.verdict != Verdict::Cause {
                continue;
            }
            let ends = [c.node, Some(peer_of(c))];
            if let Some((what, _, _, _)) = process_faults
                .iter()
                .find(|(_, from, to, n)| ends.contains(n) && (*from..=*to).contains(&c.at_ns))
            {
                c.verdict = Verdict::Explained;
                c.why = format!("{}; explained by {what}", c.why);
                c.evidence.explained_by = Some(what.clone());
            }
        }
    }

    /// A connection reset, refused or timed out while (or shortly after) another node was
    /// crashed, paused or cut off is that fault's consequence.
    pub(super) fn explain_network_failures(&mut self) {
        // (what, node, peer, from, to): when another fault's aftermath lasts
        type Window = (String, Option<usize>, Option<usize>, u64, u64);
        let windows: Vec<Window> = self
            .candidates
            .iter()
            .filter(|c| c.verdict == Verdict::Cause)
            .filter_map(|c| match c.guess {
                FaultGuess::Crash { .. } => Some((label(c), c.node, None, c.at_ns, c.at_ns + AFTERMATH_NS)),
                FaultGuess::Pause { duration_ms, .. } => Some((
                    label(c),
                    c.node,
                    None,
                    c.at_ns,
                    c.at_ns + duration_ms * 1_000_000 + AFTERMATH_NS,
                )),
                FaultGuess::Partition {
                    peer, duration_ms, ..
                } => Some((
                    label(c),
                    c.node,
                    Some(peer),
                    c.at_ns,
                    c.at_ns + duration_ms * 1_000_000 + AFTERMATH_NS,
                )),
                _ => None,
            })
            .collect();
        for c in &mut self.candidates {
            let FaultGuess::Syscall { errno, .. } = &c.guess else {
                continue;
            };
            if c.verdict != Verdict::Cause || !NETWORK_ERRNOS.contains(&errno.as_str()) {
                continue;
            }
            let hit = windows.iter().find(|(_, node, peer, from, to)| {
                let involves_other = *node != c.node || peer.is_some();
                involves_other && c.at_ns >= *from && c.at_ns <= *to
            });
            if let Some((what, ..)) = hit {
                c.verdict = Verdict::Explained;
                c.why = format!("{}; during or right after {what}", c.why);
                c.evidence.explained_by = Some(format!("{what} (during or right after it)"));
            }
        }
    }

    /// Failed syscalls after the first symptom are its consequences (recovery, error
    /// reporting, a dying process's calls); other faults after the last symptom cannot have
    /// caused it. Either is shown, never tried.
    pub(super) fn mark_late(&mut self) {
        let Some(first) = self.symptoms.iter().map(|s| s.at_ns).min() else {
            return;
        };
        let last = self.symptoms.iter().map(|s| s.at_ns).max().unwrap_or(first);
        for c in &mut self.candidates {
            let failure = matches!(c.guess, FaultGuess::Syscall { .. });
            if c.verdict != Verdict::Cause || c.at_ns <= if failure { first } else { last } {
                continue;
            }
            c.verdict = Verdict::Late;
            c.why = format!(
                "{}; after the {} symptom: a consequence",
                c.why,
                if failure { "first" } else { "last" }
            );
        }
    }
}

/// "the crash of leader": how other candidates refer to this one.
fn label(c: &Candidate) -> String {
    let kind = match c.guess {
        FaultGuess::Crash { .. } => "crash",
        FaultGuess::Pause { .. } => "pause",
        FaultGuess::Partition { .. } => "partition",
        FaultGuess::Syscall { .. } => "failure",
    };
    format!("the {kind} of {}", c.who)
}
