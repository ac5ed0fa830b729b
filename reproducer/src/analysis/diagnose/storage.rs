//! Storage that stays broken: a short write followed by failures of the same call on the
//! same file (ENOSPC, EDQUOT, EIO) is a disk that filled up (or a device that died), and
//! the program took the path it takes after a short write. A single failure at the Nth
//! call does not replay that, so the candidate is one fault: the first call writes only
//! what production's did, and every later matching call fails.
use std::collections::{HashMap, HashSet};

use tracedump::event::What;

use super::{normalize_path, Builder, FaultGuess, TimedEvent};
use crate::model::schedule::SHORT_SYSCALLS;

/// errnos of storage that does not recover by itself: full, over quota, failing
const PERSISTENT_ERRNOS: [&str; 3] = ["ENOSPC", "EDQUOT", "EIO"];

/// (node, or the dump and pid without a scenario; syscall; path): one file written by one node
type FileCall = (Option<usize>, (usize, u32), String, String);

impl Builder<'_> {
    /// Adds a short-then-persistent candidate per node, write call and file where a short
    /// write was followed by failures with a persistent errno.
    pub(super) fn short_then_persistent(&mut self) {
        let key = |t: &TimedEvent, syscall: &str, path: &str| -> FileCall {
            let who = if t.node.is_some() {
                (0, 0)
            } else {
                (t.dump, t.event.pid)
            };
            (t.node, who, syscall.to_string(), path.to_string())
        };
        // later failures by file: (time, errno), in time order
        let mut failures: HashMap<FileCall, Vec<(u64, &str)>> = HashMap::new();
        for t in &self.timeline.events {
            let What::SyscallFailure(f) = &t.event.what else {
                continue;
            };
            let (Some(path), Some(errno)) = (&f.path, &f.errno) else {
                continue;
            };
            if PERSISTENT_ERRNOS.contains(&errno.as_str()) && SHORT_SYSCALLS.contains(&f.syscall.as_str()) {
                let k = key(t, &f.syscall, path);
                failures.entry(k).or_default().push((t.at_ns, errno));
            }
        }
        let mut done: HashSet<FileCall> = HashSet::new();
        for t in &self.timeline.events {
            let What::ShortIo(io) = &t.event.what else {
                continue;
            };
            let Some(path) = &io.path else { continue };
            if self.scenario.is_some() && t.node.is_none() {
                continue;
            }
            let k = key(t, &io.syscall, path);
            if done.contains(&k) {
                continue;
            }
            let after: Vec<&(u64, &str)> = failures
                .get(&k)
                .map(|v| v.iter().filter(|(at, _)| *at >= t.at_ns).collect())
                .unwrap_or_default();
            let Some(&&(_, errno)) = after.first() else {
                continue;
            };
            let why = format!(
                "a short {} ({} of {} bytes), then {} {} call(s) on the file failed with {errno}: storage that filled up or failed stays so",
                io.syscall,
                io.done,
                io.requested,
                after.len(),
                io.syscall
            );
            let guess = FaultGuess::Syscall {
                syscall: io.syscall.clone(),
                errno: errno.to_string(),
                path: Some(normalize_path(path, self.workdir_of(t))),
                raw_path: Some(path.clone()),
                short: Some(io.done),
                persistent: true,
            };
            let mut c = self.candidate(t, guess, t.at_ns, why);
            c.occurrences = after.len() as u32 + 1;
            self.candidates.push(c);
            done.insert(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use tracedump::event::{Event, ShortIo, SyscallFailure, What};

    use super::super::*;
    use crate::analysis::timeline::{DumpInfo, TimedEvent, Timeline};

    const S: u64 = 1_000_000_000;
    const AOF: &str = "/srv/db/appendonly-17.aof";

    fn scenario() -> Scenario {
        Scenario::parse(
            "name = \"t\"\n[[nodes]]\nname = \"db\"\ncommand = [\"db\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n",
            "t",
        )
        .unwrap()
    }

    fn event(at_ns: u64, what: What) -> TimedEvent {
        TimedEvent {
            at_ns,
            node: Some(0),
            dump: 0,
            event: Event {
                ts_ns: at_ns,
                realtime_ns: at_ns,
                host: "h".into(),
                pid: 40,
                tid: 40,
                comm: "db".into(),
                what,
            },
        }
    }

    fn short(at_ns: u64, syscall: &str, path: &str, done: u64, requested: u64) -> TimedEvent {
        let io = ShortIo {
            syscall: syscall.into(),
            fd: 5,
            path: Some(path.into()),
            requested,
            done,
        };
        event(at_ns, What::ShortIo(io))
    }

    fn failed(at_ns: u64, syscall: &str, errno: &str, path: &str) -> TimedEvent {
        let f = SyscallFailure {
            syscall: syscall.into(),
            ret: -28,
            errno: Some(errno.into()),
            fd: Some(5),
            path: Some(path.into()),
            peer: None,
        };
        event(at_ns, What::SyscallFailure(f))
    }

    fn timeline(events: Vec<TimedEvent>) -> Timeline {
        let dump = DumpInfo {
            path: "d.tdump".into(),
            host: "h".into(),
            events: events.len(),
            mapped_processes: 1,
            processes: 1,
            nodes: Vec::new(),
            interfaces: Vec::new(),
            taken_ns: 100 * S,
            lost_events: 0,
            process_starts: Default::default(),
            parents: Default::default(),
            node_starts: Vec::new(),
            workdir: None,
        };
        Timeline {
            events,
            dumps: vec![dump],
            functions: Vec::new(),
            environments: Vec::new(),
            flows: Vec::new(),
        }
    }

    fn shapes(d: &Diagnosis) -> Vec<(String, String, Option<u64>, bool)> {
        d.causes()
            .filter_map(|c| match &c.guess {
                FaultGuess::Syscall {
                    syscall,
                    errno,
                    short,
                    persistent,
                    ..
                } => Some((syscall.clone(), errno.clone(), *short, *persistent)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_short_write_then_failures_on_the_file_is_one_short_then_persistent_fault() {
        let t = timeline(vec![
            short(10 * S, "read", AOF, 100, 4096),
            short(20 * S, "pwrite64", AOF, 480, 1064),
            failed(20 * S + 1, "pwrite64", "ENOSPC", AOF),
            short(21 * S, "pwrite64", AOF, 480, 1064),
            failed(21 * S + 1, "pwrite64", "ENOSPC", AOF),
            failed(22 * S, "pwrite64", "ENOSPC", "/srv/db/other"),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        let shapes = shapes(&d);
        assert_eq!(
            shapes[0],
            ("pwrite64".into(), "ENOSPC".into(), Some(480), true),
            "the short write ranks first: it came first ({shapes:?})"
        );
        let combined: Vec<&Candidate> = d
            .causes()
            .filter(|c| matches!(c.guess, FaultGuess::Syscall { persistent: true, .. }))
            .collect();
        assert_eq!(
            combined.len(),
            1,
            "one candidate per file, however many short writes"
        );
        let c = combined[0];
        assert_eq!((c.at_ns, c.occurrences), (20 * S, 3));
        assert!(
            matches!(&c.guess, FaultGuess::Syscall { path: Some(p), raw_path: Some(r), .. } if p == "*/appendonly-*.aof" && r == AOF)
        );
        assert!(c.why.contains("480 of 1064 bytes"), "{}", c.why);
        assert!(
            shapes.contains(&("pwrite64".into(), "ENOSPC".into(), None, false)),
            "the plain failures stay candidates too: {shapes:?}"
        );
        let text = render(&d, Some(&scenario()));
        assert!(
            text.contains(
                "a short pwrite64 (480 bytes), then pwrite64 failed with ENOSPC on every later call"
            ),
            "{text}"
        );
    }

    #[test]
    fn no_candidate_without_a_short_write_before_persistent_failures_of_that_file() {
        let t = timeline(vec![
            failed(5 * S, "write", "ENOSPC", AOF),
            short(10 * S, "write", AOF, 10, 20),
            failed(11 * S, "write", "EAGAIN", AOF),
            failed(12 * S, "write", "ENOSPC", "/srv/db/other"),
            failed(13 * S, "pwrite64", "ENOSPC", AOF),
            short(14 * S, "read", "/srv/db/x", 1, 2),
            failed(15 * S, "read", "EIO", "/srv/db/x"),
        ]);
        let d = diagnose(&t, Some(&scenario()), None);
        assert!(
            !shapes(&d).iter().any(|s| s.3 || s.2.is_some()),
            "earlier failures, other errnos, other files, other calls, reads: {:?}",
            shapes(&d)
        );
    }
}
