//! Where the Nth-call search starts: at the matching call production's failure was, as far as
//! production's time of the failure (since its process started) and the profile's call rate
//! of that node put it, so that the search does not spend its runs failing the calls a node
//! makes while it starts (the cluster never forms, and each run waits out the ready timeout).
//! From there it goes outward: the estimate, one above, one below, two above, ...; and what
//! each run shows bounds the walk ([`NthBounds`]): the calls made before every node was
//! ready are left out (the injector counts a node's calls from its start, so the early ones
//! are start-up's, where a failure stops the cluster from forming rather than replaying
//! production), and so are the calls past the last one a run made.
use super::runner::Feedback;
use crate::analysis::diagnose::{Candidate, FaultGuess};

/// The estimated matching call of a failed call without a path, and how it was estimated.
/// None when the dump does not know when the process started, the profile has no rate for
/// the call, or the process ran longer than any fault-free run (its rate then says nothing
/// of where a test-bed run's call is). A failed call with a path is counted on that path
/// only, for which the profile has no rate.
pub(super) fn nth_start(c: &Candidate) -> Option<(u32, String)> {
    let FaultGuess::Syscall {
        syscall, path: None, ..
    } = &c.guess
    else {
        return None;
    };
    let since_s = c.evidence.since_start_ms? as f64 / 1000.0;
    let (rate, longest_run_s) = c.evidence.calls_per_s?;
    if since_s > longest_run_s || rate <= 0.0 {
        return None;
    }
    let nth = (rate * since_s).round() as u32;
    (nth > 2).then(|| {
        (
            nth,
            format!(
                "started at call #{nth}: production's failure came {since_s:.2} s after its process started, and fault-free runs make {rate:.1} {syscall} calls/s on {}",
                c.who
            ),
        )
    })
}

/// The matching call after every node was ready that production's failure was, for a
/// failure that came after its node's start-up: the calls the profile's rate (of the node's
/// calls of that syscall, for a call without a path) puts in the time from production's
/// ready to the failure, at least the first; the first for a call with a path (the profile
/// counts calls by syscall, not by file) or a failure later than any fault-free run. None
/// when the failure came during start-up or the dump and profile cannot tell.
pub(super) fn nth_after_ready(c: &Candidate) -> Option<(u32, String)> {
    let FaultGuess::Syscall { syscall, path, .. } = &c.guess else {
        return None;
    };
    let since_s = c.evidence.since_ready_ms? as f64 / 1000.0;
    let why = |nth: u32, rate: Option<f64>| {
        match rate {
        Some(rate) => format!(
            "call #{nth} after every node was ready: production's failure came {since_s:.2} s after its node's start-up, and fault-free runs make {rate:.1} {syscall} calls/s on {}",
            c.who
        ),
        None => format!(
            "the first call after every node was ready: production's failure came {since_s:.2} s after its node's start-up"
        ),
    }
    };
    let rate = c
        .evidence
        .calls_per_s
        .filter(|&(rate, longest_run_s)| path.is_none() && rate > 0.0 && since_s <= longest_run_s)
        .map(|(rate, _)| rate);
    let nth = rate.map_or(1, |rate| ((rate * since_s).round() as u32).max(1));
    Some((nth, why(nth, rate)))
}

/// The calls to try, at most `count`, from `start` outward (start, start+1, start-1, ...)
/// and never below `lowest` (2 counted from a node's start: the 1st is level 1's).
pub(super) fn nth_order(start: u32, count: usize, lowest: u32) -> Vec<u32> {
    let start = start.max(lowest);
    let mut out = vec![start];
    let mut step = 1;
    while out.len() < count {
        out.push(start + step);
        if let Some(below) = start.checked_sub(step).filter(|&n| n >= lowest) {
            out.push(below);
        }
        step += 1;
    }
    out.truncate(count);
    out
}

/// What the runs of an Nth-call walk showed of one fault's matching calls: up to `floor`
/// they come before every node is ready (exactly that many when `floor_exact`, else at least);
/// from `ceiling` on they do not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NthBounds {
    pub floor: u32,
    pub floor_exact: bool,
    pub ceiling: u32,
}

impl Default for NthBounds {
    fn default() -> Self {
        NthBounds {
            floor: 1,
            floor_exact: false,
            ceiling: u32::MAX,
        }
    }
}

impl NthBounds {
    /// The bounds of a walk among the calls counted once every node is ready: none of them
    /// is start-up's.
    pub fn after_ready() -> NthBounds {
        NthBounds {
            floor: 0,
            floor_exact: true,
            ceiling: u32::MAX,
        }
    }

    /// Learns from the run that tried fault `k` at call `nth`. A run whose nodes never got
    /// ready made every call it counted during start-up (and says nothing of the calls a
    /// started cluster makes). One that got ready tells how many it counted before: all the
    /// start-up's calls when the fault had not fired by then, else at least that many.
    pub fn learn(&mut self, nth: u32, fb: &Feedback, k: usize) {
        let Some(&matched) = fb.matched.get(k) else {
            return;
        };
        if fb.not_started.is_some() {
            self.raise_floor(matched, false);
            return;
        }
        let fired = fb.fired.get(k).copied().unwrap_or(false);
        if !fired && matched < nth {
            self.ceiling = self.ceiling.min(matched.saturating_add(1));
        }
        if let Some(&before) = fb.matched_before_ready.get(k) {
            self.raise_floor(before, !(fired && before >= nth));
        }
    }

    fn raise_floor(&mut self, calls: u32, exact: bool) {
        if calls > self.floor || (calls == self.floor && exact) {
            self.floor = calls;
            self.floor_exact = exact;
        }
    }

    /// Start-up's matching calls, when a run told them all.
    pub fn start_up_calls(&self) -> Option<u32> {
        (self.floor_exact && self.floor > 1).then_some(self.floor)
    }

    /// The calls still to try, at most `count`, inside the bounds and none of `tried`:
    /// outward from `start`, or from above the floor when that is higher. While the floor is
    /// only a lower bound (runs whose fault stopped the start-up), the walk doubles it: a
    /// node that makes a hundred calls while it starts costs a few runs, not a hundred.
    pub fn order(&self, start: u32, tried: &[u32], count: usize) -> Vec<u32> {
        let above = match self.floor_exact {
            false if self.floor > 1 => self.floor.saturating_mul(2),
            _ => self.floor.saturating_add(1),
        };
        nth_order(start.max(above), 2 * (count + tried.len()) + 2, self.floor + 1)
            .into_iter()
            .filter(|n| *n > self.floor && *n < self.ceiling && !tried.contains(n))
            .take(count)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnose::{Evidence, Verdict};

    fn connect(since_start_ms: Option<u64>, calls_per_s: Option<(f64, f64)>) -> Candidate {
        Candidate {
            guess: FaultGuess::Syscall {
                syscall: "connect".into(),
                errno: "ECONNREFUSED".into(),
                path: None,
                raw_path: None,
                short: None,
                persistent: false,
            },
            node: Some(0),
            who: "balancer".into(),
            pid: 1,
            host: "h".into(),
            dump: 0,
            at_ns: 0,
            occurrences: 1,
            profile_per_s: None,
            burst: 1,
            preceding_functions: Vec::new(),
            routine: false,
            verdict: Verdict::Cause,
            why: String::new(),
            evidence: Evidence {
                since_start_ms,
                calls_per_s,
                ..Default::default()
            },
            score: Default::default(),
            silence: None,
        }
    }

    #[test]
    fn the_start_is_production_s_time_times_the_fault_free_rate() {
        // 50 writes/s in fault-free runs of 30 s, the failure 12.4 s after the start: call 620
        let (nth, why) = nth_start(&connect(Some(12_400), Some((50.0, 30.0)))).unwrap();
        assert_eq!(nth, 620);
        assert!(why.contains("12.40 s after its process started"), "{why}");
        // the bench's nth-connect: 19 connects/s in runs of 0.21 s, refused 0.175 s in
        assert_eq!(
            nth_start(&connect(Some(175), Some((19.0, 0.21)))).map(|s| s.0),
            Some(3)
        );
    }

    #[test]
    fn no_start_without_the_process_start_the_rate_or_a_run_as_long() {
        assert_eq!(nth_start(&connect(None, Some((50.0, 30.0)))), None);
        assert_eq!(nth_start(&connect(Some(12_400), None)), None);
        // a server up for an hour: its rate says nothing of where a 30-s run's call is
        assert_eq!(nth_start(&connect(Some(3_600_000), Some((50.0, 30.0)))), None);
        // early calls: the search starts at #2 as without an estimate
        assert_eq!(nth_start(&connect(Some(20), Some((50.0, 30.0)))), None);
        let mut with_path = connect(Some(12_400), Some((50.0, 30.0)));
        if let FaultGuess::Syscall { path, .. } = &mut with_path.guess {
            *path = Some("*/log".into());
        }
        assert_eq!(nth_start(&with_path), None);
    }

    #[test]
    fn after_ready_the_call_is_production_s_time_since_ready_times_the_rate() {
        let mut c = connect(None, Some((50.0, 30.0)));
        assert_eq!(nth_after_ready(&c), None, "a failure during start-up, or unknown");
        c.evidence.since_ready_ms = Some(1200);
        let (nth, why) = nth_after_ready(&c).unwrap();
        assert_eq!(nth, 60);
        assert!(why.contains("1.20 s after its node's start-up"), "{why}");
        c.evidence.since_ready_ms = Some(5);
        assert_eq!(nth_after_ready(&c).map(|e| e.0), Some(1), "at least the first");
        c.evidence.since_ready_ms = Some(3_600_000);
        assert_eq!(
            nth_after_ready(&c).map(|e| e.0),
            Some(1),
            "longer than any fault-free run"
        );
        let mut with_path = connect(None, Some((50.0, 30.0)));
        with_path.evidence.since_ready_ms = Some(1200);
        if let FaultGuess::Syscall { path, .. } = &mut with_path.guess {
            *path = Some("*/redo.log".into());
        }
        assert_eq!(
            nth_after_ready(&with_path).map(|e| e.0),
            Some(1),
            "the profile counts no path"
        );
    }

    #[test]
    fn the_order_goes_outward_from_the_start_and_never_below_two() {
        assert_eq!(nth_order(2, 5, 2), vec![2, 3, 4, 5, 6]);
        assert_eq!(nth_order(620, 5, 2), vec![620, 621, 619, 622, 618]);
        assert_eq!(nth_order(3, 6, 2), vec![3, 4, 2, 5, 6, 7]);
        assert_eq!(nth_order(0, 3, 2), vec![2, 3, 4]);
        // counted after ready: the first call is one to try
        assert_eq!(nth_order(2, 4, 1), vec![2, 3, 1, 4]);
    }

    fn ran(fired: bool, matched: u32, before_ready: Option<u32>, started: bool) -> Feedback {
        Feedback {
            fired: vec![false, fired],
            matched: vec![1, matched],
            matched_before_ready: before_ready.map(|b| vec![0, b]).unwrap_or_default(),
            not_started: (!started).then(|| "node n1 never became ready".into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_walk_leaves_out_the_calls_made_before_every_node_was_ready() {
        let mut b = NthBounds::default();
        assert_eq!(b.order(2, &[], 4), vec![2, 3, 4, 5]);
        // call #2 fired during start-up and the cluster never formed: at least 2 calls are
        // start-up's; the walk doubles that until a run gets ready
        b.learn(2, &ran(true, 2, None, false), 1);
        assert_eq!((b.floor, b.floor_exact), (2, false));
        assert_eq!(b.order(2, &[2], 3), vec![4, 5, 3]);
        b.learn(4, &ran(true, 4, None, false), 1);
        assert_eq!(b.order(2, &[2, 4], 1), vec![8]);
        // #8 fired before ready, yet the cluster formed: still a lower bound
        b.learn(8, &ran(true, 8, Some(8), true), 1);
        assert_eq!((b.floor, b.floor_exact, b.start_up_calls()), (8, false, None));
        // #16 had not fired by then: the run counted all 13 start-up calls
        b.learn(16, &ran(true, 16, Some(13), true), 1);
        assert_eq!((b.floor, b.floor_exact, b.start_up_calls()), (13, true, Some(13)));
        assert_eq!(b.order(2, &[2, 4, 8, 16], 4), vec![14, 15, 17, 18]);
        // an estimate above the floor stays the start; the walk goes outward, not below it
        assert_eq!(b.order(15, &[16], 4), vec![15, 14, 17, 18]);
        // a later run that counted fewer before ready does not lower it
        b.learn(18, &ran(false, 40, Some(5), true), 1);
        assert_eq!(b.floor, 13);
    }

    #[test]
    fn a_run_that_never_got_ready_sets_no_ceiling() {
        let mut b = NthBounds::default();
        // the node made 6 calls and stopped before it was ready (no fault fired): the calls
        // after ready were never reached, not missing
        b.learn(9, &ran(false, 6, None, false), 1);
        assert_eq!((b.floor, b.ceiling), (6, u32::MAX));
        // a started run that made 30 calls, 6 of them before ready: #31 on do not exist
        b.learn(40, &ran(false, 30, Some(6), true), 1);
        assert_eq!((b.floor, b.floor_exact, b.ceiling), (6, true, 31));
        assert_eq!(b.order(29, &[], 5), vec![29, 30, 28, 27, 26]);
        let shut = NthBounds {
            floor: 30,
            floor_exact: true,
            ceiling: 31,
        };
        assert!(shut.order(2, &[], 5).is_empty());
    }
}
