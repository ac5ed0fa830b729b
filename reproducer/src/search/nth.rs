//! Where the Nth-call search starts: at the matching call production's failure was, as far as
//! production's time of the failure (since its process started) and the profile's call rate
//! of that node put it, so that the search does not spend its runs failing the calls a node
//! makes while it starts (the cluster never forms, and each run waits out the ready timeout).
//! From there it goes outward: the estimate, one above, one below, two above, ...
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

/// The calls to try, at most `count`, from `start` outward (start, start+1, start-1, ...)
/// and never below 2 (the 1st is level 1's).
pub(super) fn nth_order(start: u32, count: usize) -> Vec<u32> {
    let start = start.max(2);
    let mut out = vec![start];
    let mut step = 1;
    while out.len() < count {
        out.push(start + step);
        if let Some(below) = start.checked_sub(step).filter(|&n| n >= 2) {
            out.push(below);
        }
        step += 1;
    }
    out.truncate(count);
    out
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
    fn the_order_goes_outward_from_the_start_and_never_below_two() {
        assert_eq!(nth_order(2, 5), vec![2, 3, 4, 5, 6]);
        assert_eq!(nth_order(620, 5), vec![620, 621, 619, 622, 618]);
        assert_eq!(nth_order(3, 6), vec![3, 4, 2, 5, 6, 7]);
        assert_eq!(nth_order(0, 3), vec![2, 3, 4]);
    }
}
