//! Process states: a pause, or a kill by a signal from outside the node, is a fault; a
//! death by the process's own fatal signal (or a kill from its own node) and a non-zero
//! exit are symptoms — unless fault-free runs show the same death (node, program, status,
//! phase: see `profile::exits`), which is then a norm, counted in a note.
use std::collections::{HashMap, HashSet};

use tracedump::event::{State, What};
use tracedump::syscalls::signal_name;

use super::{who, Builder, FaultGuess, Symptom, TimedEvent};
use crate::analysis::profile::exits::{self, is_kill_from_outside, symptom_status};

impl Builder<'_> {
    /// Adds a candidate per pause and kill from outside, a symptom per other death and
    /// failed exit (one death per process).
    pub(super) fn process_states(&mut self) {
        let mut seen_deaths = HashSet::new();
        let timeline = self.timeline;
        for t in &timeline.events {
            let What::ProcessState(p) = &t.event.what else {
                continue;
            };
            if (self.scenario.is_some() && t.node.is_none()) || self.crash.is_helper(t) {
                continue;
            }
            let pid = t.event.pid;
            let sender_comm = p.sender.as_ref().and_then(|s| s.comm.clone());
            match p.state {
                State::Paused {
                    cause,
                    duration_ms: d,
                } => {
                    let cause = cause.name().to_string();
                    let why = format!(
                        "stopped ({cause}) for {d} ms{}",
                        sender_comm
                            .map(|c| format!(" after a signal from {c}"))
                            .unwrap_or_default()
                    );
                    // the event's time stamp is when the pause began
                    let c = self.candidate(
                        t,
                        FaultGuess::Pause {
                            duration_ms: d,
                            cause,
                        },
                        t.at_ns,
                        why,
                    );
                    self.candidates.push(c);
                }
                // a pid names a process only within its dump (host)
                State::Killed { core_dumped } if seen_deaths.insert((t.dump, pid)) => {
                    let signo = p.signal.unwrap_or(libc::SIGKILL as u32);
                    let signal = signal_name(signo);
                    let sender_pid = p.sender.as_ref().map(|s| s.pid);
                    let from_outside =
                        sender_pid.is_some_and(|s| s != pid && !self.same_node(s, t.dump, t.node));
                    if is_kill_from_outside(signo, from_outside) {
                        let sender = format!(
                            "{} (pid {})",
                            sender_comm.unwrap_or_default(),
                            sender_pid.unwrap_or(0)
                        );
                        let why = format!("killed by {signal} from {sender}");
                        let c = self.candidate(t, FaultGuess::Crash { signal, sender }, t.at_ns, why);
                        self.candidates.push(c);
                    } else if !self.is_routine_exit(t, from_outside) {
                        let what = format!(
                            "died of {signal}{}",
                            if core_dumped { " (core dumped)" } else { "" }
                        );
                        self.symptom(t, what);
                    }
                }
                // one death per process; a death fault-free runs show is no symptom
                State::Exited { code }
                    if code != 0 && seen_deaths.insert((t.dump, pid)) && !self.is_routine_exit(t, false) =>
                {
                    let what = format!("exited with status {code}");
                    self.symptom(t, what);
                }
                _ => {}
            }
        }
    }

    /// Whether the death of event `t` is one fault-free runs show too (same node, program,
    /// status and phase); such a death is counted for the note, not taken as a symptom.
    fn is_routine_exit(&mut self, t: &TimedEvent, from_outside: bool) -> bool {
        let (Some(node), Some(scenario), Some(baseline)) = (t.node, self.scenario, self.baseline) else {
            return false;
        };
        let What::ProcessState(p) = &t.event.what else {
            return false;
        };
        let Some(status) = symptom_status(p, from_outside) else {
            return false;
        };
        let name = &scenario.nodes[node].name;
        let since_start = self
            .timeline
            .dumps
            .get(t.dump)
            .and_then(|d| d.node_starts.iter().find(|(n, _)| *n == node))
            .map(|&(_, start)| t.at_ns.saturating_sub(start));
        let startup = baseline.startup_ms.get(name).map(|ms| ms * 1_000_000);
        let program = t.event.comm.to_string();
        let phase = exits::phase(since_start, startup);
        let Some(phase) = [exits::STARTUP, exits::RUNNING]
            .into_iter()
            .filter(|ph| phase.is_none_or(|p| p == *ph))
            .find(|ph| {
                let key = (name.clone(), program.clone(), status.clone(), ph.to_string());
                baseline.exits.contains(&key)
            })
        else {
            return false;
        };
        let key = (name.clone(), program, status, phase.to_string());
        *self.routine_exits.entry(key).or_default() += 1;
        true
    }

    /// A note on the deaths taken as norms, if any.
    pub(super) fn note_routine_exits(&mut self) {
        if self.routine_exits.is_empty() {
            return;
        }
        let each: Vec<String> = self
            .routine_exits
            .iter()
            .map(|((node, program, status, phase), n)| format!("{node}: {program} {status} at {phase} ×{n}"))
            .collect();
        self.notes.push(format!(
            "not symptoms: exits that fault-free runs show too ({})",
            each.join(", ")
        ));
    }

    /// Adds the symptom `what` of event `t`'s process.
    fn symptom(&mut self, t: &TimedEvent, what: String) {
        self.symptoms.push(Symptom {
            at_ns: t.at_ns,
            node: t.node,
            who: who(t, self.scenario),
            host: t.event.host.to_string(),
            what,
        });
    }

    /// Whether process `pid` of dump `dump` (a signal's sender is on the receiver's host) has
    /// events as `node` (a signal from a process of the same node is the node's own doing).
    fn same_node(&mut self, pid: u32, dump: usize, node: Option<usize>) -> bool {
        let Some(node) = node else { return false };
        // one pass over the timeline per sender, not per death
        let timeline = self.timeline;
        let nodes = self.nodes_of_pid.entry((dump, pid)).or_insert_with(|| {
            let mut nodes: Vec<usize> = timeline
                .events
                .iter()
                .filter(|e| e.event.pid == pid && e.dump == dump)
                .filter_map(|e| e.node)
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            nodes
        });
        nodes.contains(&node)
    }

    /// When each process that died of a signal died ((dump, pid) → time).
    pub(super) fn deaths_by_signal(&self) -> HashMap<(usize, u32), u64> {
        let mut out = HashMap::new();
        for t in &self.timeline.events {
            if let What::ProcessState(p) = &t.event.what {
                if matches!(p.state, State::Killed { .. }) {
                    out.entry((t.dump, t.event.pid)).or_insert(t.at_ns);
                }
            }
        }
        out
    }
}
