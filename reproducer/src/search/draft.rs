//! Schedules in the making: a `Draft` is the faults chosen so far, each with the diagnosis
//! candidate it came from (the level-1 fault of a candidate: its kind and inputs, no
//! context), and the words the attempt log and the report use for them.
use super::Search;
use crate::analysis::diagnose::{Candidate, FaultGuess};
use crate::model::schedule::{Action, Context, Direction, Fault, Schedule, Until};

/// One fault of a draft, with the candidate (index into the search's candidates) it came from.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct DraftFault {
    pub candidate: usize,
    pub fault: Fault,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Draft {
    pub faults: Vec<DraftFault>,
}

impl Draft {
    pub fn schedule(&self) -> Schedule {
        Schedule {
            faults: self.faults.iter().map(|f| f.fault.clone()).collect(),
        }
    }
}

/// The path of syscall fault `fault` when it is not its candidate's (the search relaxed it).
pub(super) fn relaxed_path<'f>(c: &Candidate, fault: &'f Fault) -> Option<&'f str> {
    match (&c.guess, &fault.action) {
        (FaultGuess::Syscall { path: Some(p), .. }, Action::Syscall { path: Some(r), .. }) if p != r => {
            Some(r.as_str())
        }
        _ => None,
    }
}

/// The symbol of a function spec (`binary:symbol` or `symbol`).
pub(super) fn symbol_of(spec: &str) -> &str {
    spec.rsplit(':').next().unwrap_or(spec)
}

fn names_last(functions: &[String]) -> &str {
    functions.last().map(|s| symbol_of(s)).unwrap_or("")
}

impl Search<'_> {
    pub(super) fn node_name(&self, i: usize) -> String {
        self.scenario.nodes[i].name.clone()
    }

    /// The level-1 fault for candidate `c`: its kind and inputs, no context.
    fn fault_of(&self, c: &Candidate) -> Option<Fault> {
        let node = self.node_name(c.node?);
        let action = match &c.guess {
            FaultGuess::Syscall {
                syscall,
                errno,
                path,
                short,
                persistent,
                ..
            } => Action::Syscall {
                syscall: syscall.clone(),
                errno: Some(errno.clone()),
                path: path.clone(),
                nth: 1,
                short: *short,
                until: persistent.then_some(Until::End),
            },
            FaultGuess::Crash { signal, .. } => Action::Crash {
                signal: Some(signal.clone()),
            },
            FaultGuess::Pause { duration_ms, .. } => Action::Pause {
                signal: None,
                duration_ms: (*duration_ms).max(1),
            },
            FaultGuess::Partition {
                peer,
                duration_ms,
                one_way,
            } => {
                let has_addresses = self.scenario.nodes[c.node?].address.is_some()
                    && self.scenario.nodes[*peer].address.is_some();
                if !has_addresses {
                    return None;
                }
                Action::Partition {
                    peers: vec![self.node_name(*peer)],
                    direction: if *one_way { Direction::Out } else { Direction::Both },
                    duration_ms: (*duration_ms).max(1),
                }
            }
        };
        Some(Fault {
            node,
            context: Context::default(),
            action,
        })
    }

    /// Candidates `members` (indexes into the search's candidates) as a draft in production order.
    pub(super) fn draft_of(&self, members: &[usize]) -> Draft {
        let mut idx: Vec<usize> = members.to_vec();
        idx.sort_by_key(|&i| self.candidates[i].at_ns);
        Draft {
            faults: idx
                .into_iter()
                .filter_map(|i| {
                    Some(DraftFault {
                        candidate: i,
                        fault: self.fault_of(self.candidates[i])?,
                    })
                })
                .collect(),
        }
    }

    pub(super) fn is_syscall(&self, i: usize) -> bool {
        matches!(self.candidates[i].guess, FaultGuess::Syscall { .. })
    }

    /// Candidate `i` in words: "crash (SIGKILL) of db1", "write failing with EIO on db2".
    pub(super) fn describe(&self, i: usize) -> String {
        self.words(i, None)
    }

    /// A fault of a draft in words: its candidate's, with the path it has when the search
    /// relaxed production's (relax.rs).
    pub(super) fn fault_words(&self, f: &DraftFault) -> String {
        self.words(f.candidate, relaxed_path(self.candidates[f.candidate], &f.fault))
    }

    /// Candidate `i` in words, its path `relaxed` when the search relaxed it.
    fn words(&self, i: usize, relaxed: Option<&str>) -> String {
        let c = self.candidates[i];
        match &c.guess {
            FaultGuess::Syscall {
                syscall,
                errno,
                path,
                short,
                persistent,
                ..
            } => format!(
                "{}{syscall} failing with {errno}{}{} on {}",
                short
                    .map(|b| format!("a short {syscall} of {b} bytes, then "))
                    .unwrap_or_default(),
                if *persistent { " from then on" } else { "" },
                match (path, relaxed) {
                    (Some(p), Some(r)) => format!(" ({r}, relaxed from production's {p})"),
                    (Some(p), None) => format!(" ({p})"),
                    _ => String::new(),
                },
                c.who
            ),
            FaultGuess::Crash { signal, .. } => format!("crash ({signal}) of {}", c.who),
            FaultGuess::Pause { duration_ms, .. } => format!("pause of {} for {duration_ms} ms", c.who),
            FaultGuess::Partition {
                peer,
                duration_ms,
                one_way,
            } => format!(
                "partition {}{}{} for {duration_ms} ms",
                c.who,
                if *one_way { "→" } else { "–" },
                self.node_name(*peer)
            ),
        }
    }

    /// A fault of the result in words: the candidate, the context it got, what production
    /// showed.
    pub(super) fn explain(&self, f: &DraftFault) -> String {
        let c = self.candidates[f.candidate];
        let fault = &f.fault;
        let mut context = Vec::new();
        if let (Some(relaxed), FaultGuess::Syscall { path: Some(p), .. }) = (relaxed_path(c, fault), &c.guess)
        {
            context.push(format!(
                "on the path {relaxed}: production's {p} matched no call on the test bed"
            ));
        }
        if let Action::Syscall { nth, .. } = fault.action {
            match (nth, fault.context.after_ready) {
                (1, true) => context.push("at the first matching call once every node was ready".into()),
                (_, true) => context.push(format!("at the matching call #{nth} once every node was ready")),
                (1, false) => {}
                (_, false) => context.push(format!("at the matching call #{nth}")),
            }
        }
        let functions = &fault.context.after_functions;
        if !functions.is_empty() {
            let names: Vec<&str> = functions.iter().map(|s| symbol_of(s)).collect();
            context.push(format!("after {}", names.join(" → ")));
        }
        if let Some(off) = fault.context.offset {
            context.push(format!("at +{off:#x} inside {}", names_last(functions)));
        }
        if c.node.map(|n| self.node_name(n)).as_deref() != Some(fault.node.as_str()) {
            context.push(format!(
                "moved to {} (it ran the context there: roles differ between runs)",
                fault.node
            ));
        }
        let context = if context.is_empty() {
            "as soon as it is due (no context needed)".to_string()
        } else {
            context.join(", ")
        };
        format!("{} — {context}. Production: {}.", self.fault_words(f), c.why)
    }
}
