//! The consequences of a crash are the crash's: a process that dies of its own fatal signal
//! (SIGABRT, SIGSEGV, ...) often handles it first — its fatal-signal handler forks a
//! backtrace printer (`addr2line`), a core collector, a crash reporter — and those children
//! fail calls (an `execve` along PATH, a probe of a file) and exit non-zero. None of that is
//! a symptom of its own or a cause: the crash, the death by the process's own signal, is the
//! symptom, and its cause is what came before it. The children a crashing process forked in
//! its dying moments (and theirs), with their exits and failed calls, and the crashing
//! process's own failed calls from its first such fork on, are left out of the symptoms and
//! the candidates, and counted in a note.
use std::collections::{BTreeMap, HashMap};

use tracedump::event::{State, What};

use super::{who, Builder, TimedEvent};
use crate::analysis::profile::exits::SELF_SIGNALS;

/// How long before its death a crashing process's children count as forked while it died:
/// a fatal-signal handler forks its helpers and waits for them, then the process dies.
pub(super) const DYING_NS: u64 = 5_000_000_000;

/// What of the dumps belongs to crashes.
#[derive(Debug, Default)]
pub(super) struct Crashes {
    /// (dump, pid) of a helper -> (dump, pid) of the process that forked it while dying
    helpers: HashMap<(usize, u32), (usize, u32)>,
    /// (dump, pid) of a crashing process -> when its first helper started: its own failed
    /// calls from then on are its crash handling
    handling_from: HashMap<(usize, u32), u64>,
    /// per crash (who, pid): what of its helpers was left out (their programs, exits, failed calls)
    left_out: BTreeMap<(String, u32), (Vec<String>, u32, u32)>,
}

impl Crashes {
    /// Whether event `t` is of a process a crashing one forked while dying.
    pub fn is_helper(&self, t: &TimedEvent) -> bool {
        self.helpers.contains_key(&(t.dump, t.event.pid))
    }

    /// Whether failed call `t` is part of a crash: a helper's, or the crashing process's own
    /// once its first helper started.
    pub fn contains(&self, t: &TimedEvent) -> bool {
        let own = self.handling_from.get(&(t.dump, t.event.pid));
        self.is_helper(t) || own.is_some_and(|&from| t.at_ns >= from)
    }
}

impl Builder<'_> {
    /// Finds the crashes of the dumps (deaths by the process's own fatal signal) and what
    /// their processes forked while dying.
    pub(super) fn crashes(&mut self) {
        let mut deaths: Vec<(usize, u32, u64)> = Vec::new();
        for t in &self.timeline.events {
            if let What::ProcessState(p) = &t.event.what {
                let own = p.signal.is_some_and(|s| SELF_SIGNALS.contains(&(s as i32)));
                if matches!(p.state, State::Killed { .. }) && own {
                    deaths.push((t.dump, t.event.pid, t.at_ns));
                }
            }
        }
        let mut crashes = Crashes::default();
        for (dump, pid, died) in deaths {
            let Some(info) = self.timeline.dumps.get(dump) else {
                continue;
            };
            let forked_while_dying = |child: u32| {
                info.process_starts
                    .get(&child)
                    .is_some_and(|&at| at + DYING_NS >= died && at <= died)
            };
            // its children forked in its dying moments, then theirs
            let mut found: Vec<u32> = info
                .parents
                .iter()
                .filter(|&(&child, &parent)| parent == pid && child != pid && forked_while_dying(child))
                .map(|(&child, _)| child)
                .collect();
            let mut i = 0;
            while i < found.len() {
                let parent = found[i];
                let theirs: Vec<u32> = info
                    .parents
                    .iter()
                    .filter(|&(c, p)| *p == parent && !found.contains(c))
                    .map(|(c, _)| *c)
                    .collect();
                found.extend(theirs);
                i += 1;
            }
            let Some(first) = found.iter().filter_map(|c| info.process_starts.get(c)).min() else {
                continue;
            };
            crashes.handling_from.insert((dump, pid), *first);
            for child in found {
                crashes.helpers.insert((dump, child), (dump, pid));
            }
        }
        self.crash = crashes;
        self.count_crash_parts();
    }

    /// Counts, per crash, the helpers' programs, exits and failed calls left out.
    fn count_crash_parts(&mut self) {
        let mut left_out: BTreeMap<(String, u32), (Vec<String>, u32, u32)> = BTreeMap::new();
        // the crashing processes by name, from their own events (one pass)
        let mut names: HashMap<(usize, u32), String> = HashMap::new();
        for t in &self.timeline.events {
            if self.crash.handling_from.contains_key(&(t.dump, t.event.pid)) {
                names
                    .entry((t.dump, t.event.pid))
                    .or_insert_with(|| who(t, self.scenario));
            }
        }
        for t in &self.timeline.events {
            let Some(&crashed) = self.crash.helpers.get(&(t.dump, t.event.pid)) else {
                continue;
            };
            let name = names
                .get(&crashed)
                .cloned()
                .unwrap_or_else(|| format!("pid {}", crashed.1));
            let entry = left_out.entry((name, crashed.1)).or_default();
            let program = t.event.comm.to_string();
            if !entry.0.contains(&program) {
                entry.0.push(program);
            }
            match &t.event.what {
                What::ProcessState(p) if !matches!(p.state, State::Paused { .. }) => entry.1 += 1,
                What::SyscallFailure(_) => entry.2 += 1,
                _ => {}
            }
        }
        self.crash.left_out = left_out;
    }

    /// A note on what the crashes' handling did, if anything was left out.
    pub(super) fn note_crash_parts(&mut self) {
        for ((who, pid), (programs, deaths, failures)) in &self.crash.left_out {
            self.notes.push(format!(
                "part of the crash of {who} (pid {pid}), not symptoms or causes: what it forked while dying ({}): {deaths} exit(s), {failures} failed call(s)",
                programs.join(", ")
            ));
        }
    }
}
