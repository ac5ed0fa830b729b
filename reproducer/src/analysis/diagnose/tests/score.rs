//! score.rs: every candidate scored from its evidence, the ranking by score, the reasons.
use tracedump::event::{PauseCause, State};

use super::super::*;
use super::fixtures::three_nodes::{failure, gap, scenario, state, timeline, S};

/// Node a (10.9.0.1) exits at 160 s; before it b is stopped, a and c go silent, a's read
/// fails with EIO and c's with EAGAIN; a and b go silent while b is stopped; a's fsync fails
/// after the symptom. Fault-free runs know a→b on port 7000 silent up to 50 ms only.
fn incident() -> (Timeline, BaselineRates) {
    let t = timeline(vec![
        state(
            110 * S,
            1,
            State::Paused {
                cause: PauseCause::Stopped,
                duration_ms: 3000,
            },
        ),
        gap(
            110 * S + S / 2,
            0,
            "10.9.0.1:40000",
            "10.9.0.2:7000",
            2500,
            40,
            false,
        ),
        gap(120 * S, 0, "10.9.0.1:40002", "10.9.0.3:7000", 4000, 40, false),
        failure(150 * S, 0, "read", "EIO", Some("/data/snap.1")),
        failure(151 * S, 2, "read", "EAGAIN", None),
        state(160 * S, 0, State::Exited { code: 1 }),
        failure(170 * S, 0, "fsync", "EIO", Some("/data/wal")),
    ]);
    let baseline = BaselineRates {
        scenario: "t".into(),
        gaps: [(("a".into(), "b".into(), 7000), 50)].into_iter().collect(),
        ..Default::default()
    };
    (t, baseline)
}

/// (kind of guess, who, score) of the candidates in ranking order.
fn ranking(d: &Diagnosis) -> Vec<(&'static str, String, f64)> {
    d.candidates
        .iter()
        .map(|c| {
            let kind = match c.guess {
                FaultGuess::Pause { .. } => "pause",
                FaultGuess::Crash { .. } => "crash",
                FaultGuess::Partition { .. } => "partition",
                FaultGuess::Syscall { .. } => "syscall",
            };
            (kind, c.who.clone(), (c.score.value * 1000.0).round() / 1000.0)
        })
        .collect()
}

#[test]
fn candidates_rank_by_a_product_of_named_factors() {
    let (t, baseline) = incident();
    let d = diagnose(&t, Some(&scenario()), Some(&baseline));
    assert_eq!(
        ranking(&d),
        [
            // kind 4 × deviation 10 (no node is stopped fault-free)
            ("pause", "b".to_string(), 40.0),
            // kind 2 × 10 (never silent fault-free) × 1.5 (traffic resumed)
            ("partition", "a".to_string(), 30.0),
            // kind 1 × 10 (never seen in fault-free runs)
            ("syscall", "a".to_string(), 10.0),
            // × 0.1: part of normal operation
            ("syscall", "c".to_string(), 1.0),
            // set aside, still scored: explained by the pause (× 0.1)
            ("partition", "a".to_string(), 3.0),
            // after the first symptom (× 0.1)
            ("syscall", "a".to_string(), 1.0),
        ],
        "{}",
        render(&d, Some(&scenario()))
    );
    let verdicts: Vec<&Verdict> = d.candidates.iter().map(|c| &c.verdict).collect();
    assert_eq!(verdicts[4..], [&Verdict::Explained, &Verdict::Late]);
}

#[test]
fn each_factor_says_why() {
    let (t, baseline) = incident();
    let d = diagnose(&t, Some(&scenario()), Some(&baseline));
    let reasons = |i: usize| d.candidates[i].score.reasons().join(" · ");
    assert_eq!(
        reasons(1),
        "×2 kind: a silence between two nodes · ×10 deviation: fault-free runs never see that pair and port silent · ×1.5 corroboration: traffic resumed · ×1 timing: 40.00 s before the first symptom"
    );
    assert!(
        reasons(3).contains("×0.1 routine: part of normal operation"),
        "{}",
        reasons(3)
    );
    assert!(
        reasons(4).contains("×10 deviation: silent 2500 ms; fault-free runs up to 50 ms"),
        "{}",
        reasons(4)
    );
    assert!(
        reasons(4).contains("×0.1 explanation: explained by the pause of b"),
        "{}",
        reasons(4)
    );
    assert!(
        reasons(5).contains("×0.1 timing: 10.00 s after the first symptom: a consequence"),
        "{}",
        reasons(5)
    );
    let text = render(&d, Some(&scenario()));
    assert!(
        text.contains("      score 40 = ×4 kind: a stopped process"),
        "{text}"
    );
    assert!(text.contains("[score 3 = ×2 kind"), "{text}");
}

#[test]
fn deviation_is_a_ratio_to_what_fault_free_runs_show() {
    let idle = |ms: u64| {
        let t = timeline(vec![gap(
            120 * S,
            0,
            "10.9.0.1:40002",
            "10.9.0.3:7000",
            ms,
            40,
            true,
        )]);
        let baseline = BaselineRates {
            scenario: "t".into(),
            gaps: [(("a".into(), "c".into(), 7000), 5000)].into_iter().collect(),
            ..Default::default()
        };
        let d = diagnose(&t, Some(&scenario()), Some(&baseline));
        d.candidates[0].score.deviation.value
    };
    // an idle connection's 7 s silence against 5 s fault-free: 1.4, set aside but not zero
    assert!((idle(7000) - 1.4).abs() < 1e-9, "{}", idle(7000));
    assert!((idle(2500) - 0.5).abs() < 1e-9, "{}", idle(2500));
    // a failed call: its burst against the fault-free burst (rate × 2 s, or the most in a run)
    let t = timeline(
        (0..6)
            .map(|i| failure(100 * S + i * S / 10, 0, "read", "EIO", None))
            .collect(),
    );
    let mut baseline = BaselineRates {
        scenario: "t".into(),
        ..Default::default()
    };
    let key = ("a".to_string(), "read".to_string(), "EIO".to_string(), None);
    baseline.failures.insert(key.clone(), 1.0);
    baseline.failures_most_in_a_run.insert(key, 3);
    let d = diagnose(&t, Some(&scenario()), Some(&baseline));
    let f = &d.candidates[0].score.deviation;
    assert_eq!(
        (f.value, f.why.as_str()),
        (2.0, "6 within 2 s; fault-free runs 2 per 2 s, up to 3 in one run")
    );
}
