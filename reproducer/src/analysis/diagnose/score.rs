//! Every candidate's score: a product of six named factors, each from the candidate's
//! evidence, each with the words that say why. Nothing is thrown away: a candidate the rules
//! set aside (benign, explained, late) keeps a score, only a low one, and the search tries it
//! after the others when the budget allows (docs/diagnosis.md, "How candidates are scored").
//!
//! The factors: `kind` (the paper's order: process faults, partitions, failed calls),
//! `deviation` (how far production is from what fault-free runs show: a ratio of burst to
//! fault-free burst, of silence to fault-free silence), `corroboration` (a silence others
//! confirm: traffic resumed, a connection torn down, several connections silent together),
//! `timing` (before the first symptom, and how long before), `explanation` (another fault or
//! the kernel explains it) and `routine` (failures of normal operation: a raised rate is load).
use serde::Serialize;

use super::{Builder, Candidate, FaultGuess};

/// Deviation ratios are bounded to this range: "never seen" is as far as it gets, and a
/// candidate fault-free runs show far more often is no less plausible than one shown as often.
const DEVIATION_MAX: f64 = 10.0;
const DEVIATION_MIN: f64 = 0.1;
/// A fault this long before the first symptom (or the dump) counts as far from it.
const FAR_BEFORE_NS: u64 = 60_000_000_000;
/// A busy connection silent this many of its own gaps between packets deviates as much as
/// a silence as long as the fault-free norm (×1).
const OWN_GAPS_PER_NORM: f64 = 10.0;
/// The burst window of failed calls (syscalls.rs's BURST_WINDOW_NS), in seconds.
const BURST_WINDOW_S: f64 = 2.0;

/// What the rules saw of a candidate besides its kind, time and verdict: the inputs of its
/// score. Each rule family fills what it knows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// partitions: the longest silence fault-free runs saw on the pair and port (ms)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub norm_ms: Option<u64>,
    /// partitions of a connection busier than the pair's idle ones: the silence over that
    /// connection's own typical gap between packets, and that gap (ms)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_ratio: Option<(f64, f64)>,
    /// partitions of datagram flows: the silence over the flow's own cadence (its mean gap
    /// between datagrams before it), and that gap (ms)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cadence: Option<(f64, f64)>,
    /// partitions of datagram flows: the silent end kept sending meanwhile
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kept_sending: bool,
    /// partitions of datagram flows: the peer's flow table says it kept sending all along
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub peer_kept_sending: bool,
    /// partitions: traffic resumed after the silence
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
    /// partitions: a connection closed while silent
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub torn_down: bool,
    /// partitions: a connect between the nodes, made during the silence, never carried a packet
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unanswered_connect: bool,
    /// partitions: connections of the pair silent together
    #[serde(skip_serializing_if = "is_zero")]
    pub connections: u32,
    /// partitions: the connection never carried a packet
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub never_carried: bool,
    /// failed calls: the most occurrences of the signature in one fault-free run
    #[serde(skip_serializing_if = "Option::is_none")]
    pub most_in_a_run: Option<u64>,
    /// what explains it: another fault, the kill that cut the call short, a kernel-internal errno
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explained_by: Option<String>,
    /// failed calls without a path: production's ms from its process's start to the failure
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_start_ms: Option<u64>,
    /// failed calls without a path: how many calls of that syscall the node makes per second
    /// in fault-free runs, and the longest fault-free run (s)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls_per_s: Option<(f64, f64)>,
    /// failed calls: production's ms from its node's readiness (its first process's start
    /// plus the profile's start-up of the node) to the failure; none when the failure came
    /// during start-up, or either is unknown
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_ready_ms: Option<u64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One factor of a score: its value and why it has it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Factor {
    pub value: f64,
    pub why: String,
}

impl Factor {
    fn new(value: f64, why: impl Into<String>) -> Factor {
        Factor {
            value,
            why: why.into(),
        }
    }

    /// A factor that changes nothing and needs no words.
    fn neutral() -> Factor {
        Factor::new(1.0, "")
    }
}

impl Default for Factor {
    fn default() -> Factor {
        Factor::neutral()
    }
}

/// A candidate's score: the product of its factors (`value`); higher is tried first.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Score {
    pub value: f64,
    pub kind: Factor,
    pub deviation: Factor,
    pub corroboration: Factor,
    pub timing: Factor,
    pub explanation: Factor,
    pub routine: Factor,
}

impl Score {
    fn of(factors: [Factor; 6]) -> Score {
        let [kind, deviation, corroboration, timing, explanation, routine] = factors;
        let value = [&kind, &deviation, &corroboration, &timing, &explanation, &routine]
            .iter()
            .map(|f| f.value)
            .product();
        Score {
            value,
            kind,
            deviation,
            corroboration,
            timing,
            explanation,
            routine,
        }
    }

    /// The factors that say something, each as "×V name: why", in the product's order.
    pub fn reasons(&self) -> Vec<String> {
        [
            ("kind", &self.kind),
            ("deviation", &self.deviation),
            ("corroboration", &self.corroboration),
            ("timing", &self.timing),
            ("explanation", &self.explanation),
            ("routine", &self.routine),
        ]
        .into_iter()
        .filter(|(_, f)| !f.why.is_empty())
        .map(|(name, f)| format!("×{} {name}: {}", number(f.value), f.why))
        .collect()
    }

    /// "20 = ×2 kind: ... · ×10 deviation: ...": the value and its reasons on one line.
    pub fn summary(&self) -> String {
        format!("{} = {}", number(self.value), self.reasons().join(" · "))
    }
}

/// A factor or score in few digits: 10, 2.5, 0.35, 0.012.
pub fn number(v: f64) -> String {
    let digits = if v >= 10.0 {
        0
    } else if v >= 1.0 {
        1
    } else if v >= 0.1 {
        2
    } else {
        3
    };
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// What the timing factor measures from: the first and last symptom, or the dump's end.
#[derive(Clone, Copy, Debug)]
pub(super) struct Moments {
    pub first_symptom: Option<u64>,
    pub last_symptom: Option<u64>,
    pub end_ns: u64,
}

impl Builder<'_> {
    /// Scores every candidate from its evidence (the last pass before the ranking).
    pub(super) fn score(&mut self) {
        let moments = Moments {
            first_symptom: self.symptoms.iter().map(|s| s.at_ns).min(),
            last_symptom: self.symptoms.iter().map(|s| s.at_ns).max(),
            end_ns: self.timeline.end_ns(),
        };
        let profiled = self.baseline.is_some();
        let knows_gaps = self.baseline.is_some_and(|b| !b.gaps.is_empty());
        let (timeline, baseline) = (self.timeline, self.baseline);
        for c in &mut self.candidates {
            if matches!(c.guess, FaultGuess::Syscall { .. }) {
                c.evidence.since_ready_ms = since_ready_ms(c, timeline, baseline, self.scenario);
            }
            if let FaultGuess::Syscall {
                syscall, path: None, ..
            } = &c.guess
            {
                let started = timeline
                    .dumps
                    .get(c.dump)
                    .and_then(|d| d.process_starts.get(&c.pid));
                c.evidence.since_start_ms = started.map(|&s| c.at_ns.saturating_sub(s) / 1_000_000);
                c.evidence.calls_per_s = baseline.and_then(|b| {
                    let rate = b.calls.get(&(c.who.clone(), syscall.clone()))?;
                    Some((*rate, b.longest_run_s))
                });
            }
            c.score = score(c, moments, profiled, knows_gaps);
        }
    }
}

/// How long after its node was ready production's failure `c` came (ms): the node's ready
/// is its first process's start plus the profile's start-up of the node; None during
/// start-up, or when either is unknown.
fn since_ready_ms(
    c: &Candidate,
    timeline: &super::Timeline,
    baseline: Option<&super::BaselineRates>,
    scenario: Option<&super::Scenario>,
) -> Option<u64> {
    let node = c.node?;
    let started = timeline
        .dumps
        .get(c.dump)?
        .node_starts
        .iter()
        .find(|(n, _)| *n == node)?
        .1;
    let startup_ns = baseline?.startup_ms.get(&scenario?.nodes[node].name)? * 1_000_000;
    let since = c.at_ns.checked_sub(started)?;
    (since > startup_ns).then(|| (since - startup_ns) / 1_000_000)
}

/// The score of `c`; `profiled`: a profile was given, `knows_gaps`: it recorded silences.
pub(super) fn score(c: &Candidate, at: Moments, profiled: bool, knows_gaps: bool) -> Score {
    Score::of([
        kind(&c.guess),
        deviation(c, profiled, knows_gaps),
        corroboration(c),
        timing(c, at),
        match &c.evidence.explained_by {
            Some(what) => Factor::new(0.1, format!("explained by {what}")),
            None => Factor::neutral(),
        },
        if c.routine {
            Factor::new(
                0.1,
                "part of normal operation: a raised rate is more likely load than a fault",
            )
        } else {
            Factor::neutral()
        },
    ])
}

fn kind(g: &FaultGuess) -> Factor {
    match g {
        FaultGuess::Crash { .. } => Factor::new(4.0, "a kill from outside the node"),
        FaultGuess::Pause { .. } => Factor::new(4.0, "a stopped process"),
        FaultGuess::Partition { .. } => Factor::new(2.0, "a silence between two nodes"),
        FaultGuess::Syscall { .. } => Factor::new(1.0, "a failed call"),
    }
}

fn bounded(ratio: f64) -> f64 {
    ratio.clamp(DEVIATION_MIN, DEVIATION_MAX)
}

/// How far production is from fault-free runs, as a ratio.
fn deviation(c: &Candidate, profiled: bool, knows_gaps: bool) -> Factor {
    match &c.guess {
        FaultGuess::Crash { .. } | FaultGuess::Pause { .. } => Factor::new(
            DEVIATION_MAX,
            "fault-free runs are not killed or stopped from outside",
        ),
        FaultGuess::Partition { duration_ms, .. } => {
            if c.evidence.never_carried {
                return Factor::new(
                    DEVIATION_MIN,
                    "the connection never carried a packet (a connect that did not complete)",
                );
            }
            if let Some((ratio, gap)) = c.evidence.cadence {
                return Factor::new(
                    bounded(ratio),
                    format!(
                        "silent {duration_ms} ms: {ratio:.1}× its cadence of a datagram every {gap:.0} ms"
                    ),
                );
            }
            if let Some((ratio, gap)) = c.evidence.own_ratio {
                return Factor::new(
                    bounded(ratio / OWN_GAPS_PER_NORM),
                    format!(
                        "silent {duration_ms} ms: {ratio:.0}× its own gap of {gap:.0} ms between packets"
                    ),
                );
            }
            match c.evidence.norm_ms {
                Some(norm) => Factor::new(
                    bounded(*duration_ms as f64 / norm.max(1) as f64),
                    format!("silent {duration_ms} ms; fault-free runs up to {norm} ms on that pair and port"),
                ),
                None if knows_gaps => Factor::new(
                    DEVIATION_MAX,
                    "fault-free runs never see that pair and port silent",
                ),
                None => Factor::new(1.0, "no fault-free silences to compare with"),
            }
        }
        FaultGuess::Syscall { short: Some(_), .. } => Factor::new(
            DEVIATION_MAX,
            "a short write, then failures: storage that stays broken",
        ),
        FaultGuess::Syscall { .. } => match (c.profile_per_s, profiled) {
            (Some(rate), _) => {
                let expected = rate * BURST_WINDOW_S;
                let most = c.evidence.most_in_a_run.unwrap_or(0) as f64;
                let norm = expected.max(most);
                Factor::new(
                    bounded(c.burst as f64 / norm.max(f64::MIN_POSITIVE)),
                    format!(
                        "{} within 2 s; fault-free runs {} per 2 s{}",
                        c.burst,
                        number(expected),
                        if most > 0.0 {
                            format!(", up to {most} in one run")
                        } else {
                            String::new()
                        }
                    ),
                )
            }
            (None, true) => Factor::new(DEVIATION_MAX, "never seen in fault-free runs"),
            (None, false) => Factor::new(1.0, "no profile to compare with"),
        },
    }
}

/// Whether others confirm a silence: traffic resumed, a connection torn down, a connect
/// unanswered, several connections silent together (each ×1.5); none of them: one connection silent until the
/// dump, as an idle connection also is (×0.3).
fn corroboration(c: &Candidate) -> Factor {
    if !matches!(c.guess, FaultGuess::Partition { .. }) || c.evidence.never_carried {
        return Factor::neutral();
    }
    let e = &c.evidence;
    let mut seen = Vec::new();
    if e.resumed {
        seen.push("traffic resumed".to_string());
    }
    if e.torn_down {
        seen.push("a connection torn down".to_string());
    }
    if e.unanswered_connect {
        seen.push("a connect went unanswered".to_string());
    }
    if e.connections > 1 {
        seen.push(format!("{} connections silent together", e.connections));
    }
    if e.kept_sending {
        seen.push("its end kept sending".to_string());
    }
    if e.peer_kept_sending {
        seen.push("the peer kept sending".to_string());
    }
    if seen.is_empty() {
        return Factor::new(
            0.3,
            "one connection silent until the dump, as an idle one also is",
        );
    }
    Factor::new(1.5f64.powi(seen.len() as i32), seen.join(", "))
}

/// Where the fault is in time: before the first symptom (a failed call) or the last (other
/// faults), within a minute of it; with no symptom, before the dump.
fn timing(c: &Candidate, at: Moments) -> Factor {
    let failure = matches!(c.guess, FaultGuess::Syscall { .. });
    let (reference, what) = match (at.first_symptom, at.last_symptom) {
        (Some(first), Some(last)) if !failure && c.at_ns > first => (last, "the last symptom"),
        (Some(first), _) => (first, "the first symptom"),
        _ => (at.end_ns, "the dump"),
    };
    let secs = |ns: u64| format!("{:.2} s", ns as f64 / 1e9);
    if c.at_ns > reference {
        return Factor::new(
            0.1,
            format!("{} after {what}: a consequence", secs(c.at_ns - reference)),
        );
    }
    let before = reference - c.at_ns;
    let between = !failure && what == "the last symptom";
    match (before > FAR_BEFORE_NS, between) {
        (true, _) => Factor::new(0.5, format!("{} before {what}: far from it", secs(before))),
        (false, true) => Factor::new(
            0.5,
            format!("after the first symptom, {} before the last", secs(before)),
        ),
        (false, false) => Factor::new(1.0, format!("{} before {what}", secs(before))),
    }
}
