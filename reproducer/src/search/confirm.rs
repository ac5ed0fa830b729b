//! Confirming a schedule's replay rate with as few runs as the evidence allows: Wald's
//! sequential probability ratio test between "clearly below the target" and "clearly above
//! it", capped at MAX_RUNS, and the Wilson score interval of the rate for the report.
use serde::Serialize;

pub const MAX_RUNS: u32 = 20;
const ALPHA: f64 = 0.05;
const BETA: f64 = 0.05;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Confirmation {
    pub bugs: u32,
    pub runs: u32,
    pub met: bool,
    /// 95% Wilson interval of the replay rate
    pub low: f64,
    pub high: f64,
}

impl Confirmation {
    pub fn rate(&self) -> f64 {
        if self.runs == 0 {
            0.0
        } else {
            self.bugs as f64 / self.runs as f64
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{}/{} ({:.0}%, 95% CI {:.0}–{:.0}%)",
            self.bugs,
            self.runs,
            self.rate() * 100.0,
            self.low * 100.0,
            self.high * 100.0
        )
    }
}

/// The two rates the test tells apart around `target`.
fn hypotheses(target: f64) -> (f64, f64) {
    ((target - 0.2).max(0.02), (target + 0.15).min(0.98))
}

/// The test's decision after `bugs` of `runs`: Some(met) when it can stop.
pub fn decide(bugs: u32, runs: u32, target: f64) -> Option<bool> {
    let (p0, p1) = hypotheses(target);
    let fails = runs - bugs;
    let llr = bugs as f64 * (p1 / p0).ln() + fails as f64 * ((1.0 - p1) / (1.0 - p0)).ln();
    if llr >= ((1.0 - BETA) / ALPHA).ln() {
        return Some(true);
    }
    if llr <= (BETA / (1.0 - ALPHA)).ln() {
        return Some(false);
    }
    // the target can no longer be reached within the cap
    if (bugs + (MAX_RUNS - runs)) as f64 / (MAX_RUNS as f64) < target {
        return Some(false);
    }
    (runs >= MAX_RUNS).then(|| bugs as f64 / runs as f64 >= target)
}

pub fn wilson(bugs: u32, runs: u32) -> (f64, f64) {
    if runs == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959964;
    let n = runs as f64;
    let p = bugs as f64 / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Runs `one_run` (true = bug) until the test decides; None when `one_run` gives up (None).
pub fn confirm(
    target: f64,
    mut one_run: impl FnMut(u32) -> anyhow::Result<Option<bool>>,
) -> anyhow::Result<Option<Confirmation>> {
    let (mut bugs, mut runs) = (0, 0);
    let met = loop {
        let Some(bug) = one_run(runs + 1)? else {
            return Ok(None);
        };
        bugs += bug as u32;
        runs += 1;
        if let Some(met) = decide(bugs, runs, target) {
            break met;
        }
    };
    let (low, high) = wilson(bugs, runs);
    Ok(Some(Confirmation {
        bugs,
        runs,
        met,
        low,
        high,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(pattern: &[bool]) -> Confirmation {
        let mut it = pattern.iter().cycle();
        confirm(0.8, |_| Ok(Some(*it.next().unwrap()))).unwrap().unwrap()
    }

    #[test]
    fn always_reproducing_stops_early_and_meets() {
        let c = outcome(&[true]);
        assert!(c.met);
        assert!(c.runs < 10, "took {} runs", c.runs);
        assert_eq!(c.bugs, c.runs);
    }

    #[test]
    fn never_reproducing_fails_within_two_runs() {
        let c = outcome(&[false]);
        assert!(!c.met);
        assert_eq!(c.runs, 2);
    }

    #[test]
    fn half_the_time_misses() {
        let c = outcome(&[true, false]);
        assert!(!c.met);
        assert!(c.high < 1.0 && c.low < 0.8);
    }

    #[test]
    fn one_miss_in_ten_still_meets() {
        let c = outcome(&[true, true, true, true, false, true, true, true, true, true]);
        assert!(c.met, "{c:?}");
    }

    #[test]
    fn wilson_interval_brackets_the_rate() {
        let (lo, hi) = wilson(8, 8);
        assert!(lo > 0.6 && lo < 0.7 && hi == 1.0, "{lo} {hi}");
        let (lo, hi) = wilson(5, 10);
        assert!(lo < 0.5 && hi > 0.5);
    }
}

#[cfg(test)]
mod budget_tests {
    #[test]
    fn giving_up_is_not_a_verdict() {
        let mut n = 0;
        let r = super::confirm(0.8, |_| {
            n += 1;
            Ok((n < 3).then_some(true))
        })
        .unwrap();
        assert_eq!(r, None);
    }
}
