//! Failed syscalls: grouped by signature (node, syscall, errno, normalized path), each
//! group's burst judged against the fault-free profile's rate; failures that are part of
//! normal operation are ranked last, and an EINTR of a process killed in the call is the
//! kill's doing.
use std::collections::HashMap;

use tracedump::event::What;

use super::{normalize_path, who, Builder, Candidate, FaultGuess, TimedEvent, Verdict};

/// Burst windows over which a failure's production rate is compared with the profile.
const BURST_WINDOW_NS: u64 = 2_000_000_000;
/// A process killed inside a blocking call sees the call fail with EINTR on its way out: an
/// EINTR this shortly before its process's death by a signal is that signal's doing.
const KILLED_IN_CALL_NS: u64 = 10_000_000;
/// A failure is benign unless its production burst is this unlikely under the profile's rate.
const ANOMALY_P: f64 = 1e-4;
/// errnos that fault-free code hits and handles routinely, whatever the call
const ROUTINE_ERRNOS: [&str; 8] = [
    "EAGAIN",
    "EWOULDBLOCK",
    "EINPROGRESS",
    "EALREADY",
    "EINTR",
    "ERESTARTSYS",
    "ENOTTY",
    "ENOSYS",
];
/// (syscall, errno) pairs that are part of normal operation of that call
const ROUTINE_FAILURES: [(&str, &str); 6] = [
    ("futex", "ETIMEDOUT"),
    ("epoll_ctl", "EPERM"),
    ("epoll_ctl", "EEXIST"),
    ("epoll_ctl", "ENOENT"),
    ("wait4", "ECHILD"),
    ("waitid", "ECHILD"),
];
/// Paths the dynamic loader and libc probe along search paths (shared libraries, hardware
/// capability directories, locales and message catalogs, iconv modules): a missing one is
/// how the probe works.
const PROBED_PATHS: [&str; 8] = [
    ".so",
    "/tls/",
    "glibc-hwcaps",
    "/locale/",
    "locale.alias",
    ".mo",
    "/gconv",
    "/ld.so",
];

impl Builder<'_> {
    /// Adds a candidate per failure signature.
    pub(super) fn syscall_failures(&mut self) {
        let deaths = self.deaths_by_signal();
        let killed_in_call = |e: &TimedEvent| {
            matches!(&e.event.what, What::SyscallFailure(f) if f.errno.as_deref() == Some("EINTR"))
                && deaths
                    .get(&(e.dump, e.event.pid))
                    .is_some_and(|&d| d >= e.at_ns && d - e.at_ns <= KILLED_IN_CALL_NS)
        };
        let workdirs: Vec<Option<&str>> = self.timeline.dumps.iter().map(|d| d.workdir.as_deref()).collect();
        let crash = &self.crash;
        let groups = failure_groups(
            &self.timeline.events,
            self.scenario.is_some(),
            &workdirs,
            |t| crash.contains(t),
            killed_in_call,
        );
        // the rate is judged on what happened before the first symptom, not on its aftermath
        let first_symptom = self.symptoms.iter().map(|s| s.at_ns).min().unwrap_or(u64::MAX);
        for FailureGroup {
            first,
            times: all,
            path,
            killed_in_call,
        } in groups
        {
            let What::SyscallFailure(f) = &first.event.what else {
                continue;
            };
            let (who_, syscall) = (who(first, self.scenario), f.syscall.clone());
            let errno = f.errno.clone().unwrap_or_default();
            let before = all.partition_point(|&at| at <= first_symptom);
            let times = if before == 0 { &all[..] } else { &all[..before] };
            let raw_path = f.path.clone();
            let guess = FaultGuess::Syscall {
                syscall: syscall.clone(),
                errno: errno.clone(),
                path: path.clone(),
                raw_path,
                short: None,
                persistent: false,
            };
            let mut c = self.candidate(first, guess, first.at_ns, String::new());
            c.occurrences = all.len() as u32;
            c.burst = max_burst(times);
            let key = (who_, syscall.clone(), errno.clone(), path.clone());
            let (rate, most) = self.baseline.map(|b| b.failure(&key)).unwrap_or_default();
            c.profile_per_s = rate;
            c.routine = is_routine(&syscall, &errno, first_path(first));
            // score.rs: the fault-free burst to compare with
            c.evidence.most_in_a_run = most;
            let (verdict, why) = if killed_in_call {
                c.evidence.explained_by = Some("the signal that killed the process right after".into());
                let seen = how_often(&c);
                (
                    Verdict::Explained,
                    format!("{seen}; cut short by the signal that killed the process right after"),
                )
            } else {
                self.judge_failure(&c, &errno)
            };
            if verdict == Verdict::Explained && c.evidence.explained_by.is_none() {
                c.evidence.explained_by = Some(format!("a signal ({errno} is kernel-internal)"));
            }
            c.verdict = verdict;
            c.why = why;
            self.candidates.push(c);
        }
    }

    /// A signature's verdict and why: kernel-internal errnos are explained, a burst no larger
    /// than fault-free runs see is benign, one far above the profile's rate (or never seen in
    /// it) a cause.
    fn judge_failure(&self, c: &Candidate, errno: &str) -> (Verdict, String) {
        let seen = how_often(c);
        if kernel_internal(errno) {
            return (Verdict::Explained, format!("{seen}; interrupted by a signal ({errno} is kernel-internal: the call is restarted or ends in EINTR)"));
        }
        // a burst no larger than what one fault-free run saw in all is no anomaly, however
        // short that run's burst was (start-up probes of a runtime, against a long run's rate)
        if let (Some(most), Some(rate)) = (c.evidence.most_in_a_run, c.profile_per_s) {
            if c.burst as u64 <= most {
                return (
                    Verdict::Benign,
                    format!("{seen}; fault-free runs see it too at {rate:.2}/s, up to {most} in one run"),
                );
            }
        }
        match c.profile_per_s {
            Some(rate) => {
                let expected = rate * BURST_WINDOW_NS as f64 / 1e9;
                let p = poisson_tail(expected, c.burst);
                if p < ANOMALY_P {
                    let routine = if c.routine {
                        "; part of normal operation, so a raised rate is more likely load than a fault (ranked last)"
                    } else {
                        ""
                    };
                    let window_s = BURST_WINDOW_NS / 1_000_000_000;
                    (Verdict::Cause, format!("{seen}; fault-free runs see {rate:.2}/s ({expected:.1} per {window_s} s): far above (p={p:.1e}){routine}"))
                } else {
                    (
                        Verdict::Benign,
                        format!("{seen}; fault-free runs see it too at {rate:.2}/s (p={p:.2})"),
                    )
                }
            }
            None if c.routine => (
                Verdict::Cause,
                format!("{seen}; part of normal operation (ranked last, tried after every other candidate)"),
            ),
            None if self.baseline.is_some() => {
                (Verdict::Cause, format!("{seen}; never seen in fault-free runs"))
            }
            None => (Verdict::Cause, format!("{seen}; no profile to compare with")),
        }
    }
}

/// "3 time(s), at most 2 within 2 s": how often production saw a failure.
fn how_often(c: &Candidate) -> String {
    format!(
        "{} time(s), at most {} within {} s",
        c.occurrences,
        c.burst,
        BURST_WINDOW_NS / 1_000_000_000
    )
}

/// P(X >= k) for X ~ Poisson(lambda).
pub(super) fn poisson_tail(lambda: f64, k: u32) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if lambda <= 0.0 {
        return 0.0;
    }
    let mut term = (-lambda).exp();
    let mut below = 0.0;
    for i in 0..k {
        below += term;
        term *= lambda / (i + 1) as f64;
    }
    (1.0 - below).max(0.0)
}

/// The most of `times` (in time order) within one burst window.
pub(super) fn max_burst(times: &[u64]) -> u32 {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] > BURST_WINDOW_NS {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u32
}

/// The failed syscalls of one signature: node, who (the node, or the process when no node
/// names it), syscall, errno and normalized path.
struct FailureGroup<'e> {
    first: &'e TimedEvent,
    /// the times of its events, in time order
    times: Vec<u64>,
    /// the normalized path, when the calls named one
    path: Option<String>,
    /// every one of its calls was cut short by the signal that killed its process
    killed_in_call: bool,
}

/// A failure's signature as borrowed from its event: node, the process when no node names
/// it (comm, pid), syscall, errno, and the path (exact or normalized).
type FailureKey<'e, P> = (Option<usize>, Option<(&'e str, u32)>, &'e str, &'e str, Option<P>);

fn failure_key<'e, P>(
    t: &'e TimedEvent,
    scenario: bool,
    path: impl FnOnce(&'e str) -> P,
) -> Option<FailureKey<'e, P>> {
    let What::SyscallFailure(f) = &t.event.what else {
        return None;
    };
    // who() names the node, or the process when there is no node to name
    let process = (t.node.is_none() || !scenario).then_some((&*t.event.comm, t.event.pid));
    let errno = f.errno.as_deref().unwrap_or_default();
    Some((
        t.node,
        process,
        f.syscall.as_str(),
        errno,
        f.path.as_deref().map(path),
    ))
}

/// The failed syscalls of `events` grouped by signature, in the order of each signature's
/// first event (so that equal ranks keep one order); `killed_in_call` tells an event cut
/// short by its process's death. With a scenario, failures of no node are left out, and so
/// are those `part_of_crash` says a crash's handling made. Events
/// group first by exact path (one look-up per event), and those groups merge by normalized
/// path (one normalization per distinct path; `workdirs`: each dump's run directory).
fn failure_groups<'e>(
    events: &'e [TimedEvent],
    scenario: bool,
    workdirs: &[Option<&str>],
    part_of_crash: impl Fn(&TimedEvent) -> bool,
    killed_in_call: impl Fn(&TimedEvent) -> bool,
) -> Vec<FailureGroup<'e>> {
    let mut exact: Vec<(&TimedEvent, Vec<u64>, bool)> = Vec::new();
    let mut exact_of: HashMap<FailureKey<&str>, usize> = HashMap::new();
    for t in events {
        if (scenario && t.node.is_none()) || part_of_crash(t) {
            continue;
        }
        let Some(key) = failure_key(t, scenario, |p| p) else {
            continue;
        };
        let next = exact.len();
        let g = *exact_of.entry(key).or_insert_with(|| {
            exact.push((t, Vec::new(), true));
            next
        });
        exact[g].1.push(t.at_ns);
        exact[g].2 &= killed_in_call(t);
    }
    let mut groups: Vec<FailureGroup> = Vec::new();
    let mut group_of: HashMap<FailureKey<String>, usize> = HashMap::new();
    let mut merged = vec![false; exact.len()];
    for (first, times, killed) in exact {
        let workdir = workdirs.get(first.dump).copied().flatten();
        let Some(key) = failure_key(first, scenario, |p| normalize_path(p, workdir)) else {
            continue;
        };
        if let Some(&g) = group_of.get(&key) {
            groups[g].times.extend(times);
            groups[g].killed_in_call &= killed;
            merged[g] = true;
            continue;
        }
        let path = key.4.clone();
        group_of.insert(key, groups.len());
        groups.push(FailureGroup {
            first,
            times,
            path,
            killed_in_call: killed,
        });
    }
    for (g, _) in groups.iter_mut().zip(&merged).filter(|(_, &m)| m) {
        g.times.sort_unstable();
    }
    groups
}

/// A failure that is part of normal operation by its nature: its errno, its call and errno,
/// or a loader/libc probe of a path that may not exist.
fn is_routine(syscall: &str, errno: &str, path: Option<&str>) -> bool {
    let probe = matches!(errno, "ENOENT" | "ENOTDIR")
        && path.is_some_and(|p| PROBED_PATHS.iter().any(|m| p.contains(m)));
    ROUTINE_ERRNOS.contains(&errno) || ROUTINE_FAILURES.contains(&(syscall, errno)) || probe
}

fn first_path(t: &TimedEvent) -> Option<&str> {
    match &t.event.what {
        What::SyscallFailure(f) => f.path.as_deref(),
        _ => None,
    }
}

/// An errno the kernel keeps to itself: the call is restarted or ends in EINTR, and
/// ENOIOCTLCMD becomes ENOTTY.
pub(super) fn kernel_internal(errno: &str) -> bool {
    errno.starts_with("ERESTART") || errno == "ENOIOCTLCMD"
}
