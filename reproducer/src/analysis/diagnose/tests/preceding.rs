//! preceding.rs: each candidate's context, and the index against a walk per candidate.
use super::super::*;
use super::fixtures::*;
use crate::analysis::contexts;

/// A busy timeline: two nodes and a process that is none, each with several pids;
/// function hits, failures of many signatures (paths that normalize alike), kills, a
/// pause, gaps and an exit, on a coarse clock so that many events share a time stamp.
fn busy_timeline(seed: u64, events: usize) -> Timeline {
    let mut x = seed;
    let mut below = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut out = Vec::new();
    for _ in 0..events {
        let secs = below(300) as f64 / 10.0;
        let pid = 10 + below(6) as u32;
        let node = (pid < 15).then_some(pid as usize % 2);
        let what = match below(20) {
            0..=9 => {
                function(["boot", "load", "recover", "flush", "sync", "elect", "step"][below(7) as usize])
            }
            10..=16 => {
                let path = format!(
                    "/srv/{}-{}.log",
                    ["wal", "snap", "meta"][below(3) as usize],
                    below(4)
                );
                let syscall = ["openat", "read", "fsync"][below(3) as usize];
                let errno = ["EIO", "ENOENT", "EAGAIN", "ECONNREFUSED"][below(4) as usize];
                failure(syscall, errno, (below(3) > 0).then_some(path.as_str()))
            }
            17 => killed(
                libc::SIGKILL,
                Some(if below(2) == 0 { 99 } else { 10 + below(6) as u32 }),
            ),
            18 => paused(500 + below(3000)),
            _ => gap("10.7.0.1:4000", "10.7.0.2:6379", 1000 + below(4000)),
        };
        out.push(at(secs, node, pid, what));
    }
    out.push(at(25.0, Some(0), 10, exited(1)));
    timeline(out)
}

#[test]
fn context_is_the_functions_since_the_previous_fault_nearest_first() {
    let t = timeline(vec![
        at(0.5, Some(1), 20, function("boot")),
        at(1.0, Some(1), 20, killed(libc::SIGKILL, Some(999))),
        at(1.5, Some(1), 21, function("recover")),
        at(1.6, Some(0), 10, function("elsewhere")),
        at(1.7, Some(1), 21, function("load")),
        at(1.8, Some(1), 21, function("recover")),
        at(1.9, Some(1), 22, function("supervise")),
        at(2.0, Some(1), 21, killed(libc::SIGKILL, Some(999))),
        at(3.0, Some(0), 10, exited(1)),
    ]);
    let d = diagnose(&t, Some(&scenario()), None);
    let crashes: Vec<&Vec<String>> = d.causes().map(|c| &c.preceding_functions).collect();
    assert_eq!(crashes[0], &vec!["/opt/kv:boot".to_string()]);
    assert_eq!(
        crashes[1],
        &vec!["/opt/kv:recover".to_string(), "/opt/kv:load".into()],
        "since the previous fault on db2, each once, only what the killed process ran"
    );
}

#[test]
fn the_indexed_contexts_leave_the_diagnosis_as_the_walk_per_candidate_made_it() {
    let baseline = BaselineRates {
        scenario: "kv".into(),
        failures: [(
            (
                "db1".into(),
                "read".into(),
                "EIO".into(),
                Some("*/wal-*.log".into()),
            ),
            50.0,
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let s = scenario();
    for seed in 1..=12 {
        let t = busy_timeline(0x9e37_79b9 * seed, 200 + 60 * seed as usize);
        for (scenario, baseline) in [(Some(&s), Some(&baseline)), (Some(&s), None), (None, None)] {
            let fast = diagnose(&t, scenario, baseline);
            let walked = diagnose_with(&t, scenario, baseline, contexts::walk_per_query);
            assert!(
                fast.candidates.iter().any(|c| !c.preceding_functions.is_empty()),
                "the timeline gives candidates a context"
            );
            assert_eq!(
                serde_json::to_string(&fast).unwrap(),
                serde_json::to_string(&walked).unwrap(),
                "seed {seed}, scenario {}",
                scenario.is_some()
            );
            assert_eq!(render(&fast, scenario), render(&walked, scenario));
        }
    }
}
