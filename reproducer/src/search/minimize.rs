//! Minimization of the accepted schedule: drop faults, then context functions, while the
//! schedule still meets the target (each trial confirmed with the sequential test, so that
//! a lucky run does not drop what is needed). Faults production saw as one event (a node
//! cut off from several peers at once) are dropped together or not at all.
use anyhow::Result;

use super::attempts::Attempt;
use super::confirm::Confirmation;
use super::draft::{symbol_of, Draft};
use super::Search;
use crate::analysis::diagnose::{Candidate, FaultGuess};

/// Whether two partition candidates are one event in production: they share a node and
/// their silences overlap for at least half the shorter one. A firewall rule or a failed
/// link cuts a node off from all its peers at once; the dump shows one silence per pair.
pub(super) fn one_event(a: &Candidate, b: &Candidate) -> bool {
    let window = |c: &Candidate| match c.guess {
        FaultGuess::Partition {
            peer, duration_ms, ..
        } => Some(([c.node?, peer], c.at_ns, c.at_ns + duration_ms * 1_000_000)),
        _ => None,
    };
    let (Some((pair_a, start_a, end_a)), Some((pair_b, start_b, end_b))) = (window(a), window(b)) else {
        return false;
    };
    let shared = pair_a.iter().any(|n| pair_b.contains(n));
    let overlap = end_a.min(end_b).saturating_sub(start_a.max(start_b));
    let shorter = (end_a - start_a).min(end_b - start_b);
    shared && shorter > 0 && overlap * 2 >= shorter
}

impl Search<'_> {
    /// Drops faults (an event's together), then context functions, while the schedule still
    /// meets the target without a single miss; `log` gets a line for each thing dropped.
    pub(super) fn minimize(
        &mut self,
        mut draft: Draft,
        mut conf: Confirmation,
        log: &mut Vec<String>,
    ) -> Result<(Draft, Confirmation)> {
        self.level = 0;
        let mut events = self.events(&draft);
        let mut k = events.len();
        while k > 0 && events.len() > 1 {
            k -= 1;
            let mut trial = draft.clone();
            for &i in events[k].iter().rev() {
                trial.faults.remove(i);
            }
            let what = self.without_words(&draft, &events[k]);
            if let Some(c) = self.try_minimal(&trial, what.clone())? {
                log.push(what);
                draft = trial;
                conf = c;
                // the events before k keep their faults and order
                events = self.events(&draft);
            }
        }
        for k in 0..draft.faults.len() {
            let n = draft.faults[k].fault.context.after_functions.len();
            if n > 2 {
                let mut trial = draft.clone();
                trial.faults[k].fault.context.after_functions.drain(..n - 1);
                let what = format!("minimize: fault {} with only its last context function", k + 1);
                if let Some(c) = self.try_minimal(&trial, what.clone())? {
                    log.push(what);
                    draft = trial;
                    conf = c;
                    continue;
                }
            }
            while draft.faults[k].fault.context.after_functions.len() > 1 {
                let mut trial = draft.clone();
                let dropped = trial.faults[k].fault.context.after_functions.remove(0);
                let what = format!(
                    "minimize: fault {} without the context function {}",
                    k + 1,
                    symbol_of(&dropped)
                );
                match self.try_minimal(&trial, what.clone())? {
                    Some(c) => {
                        log.push(what);
                        draft = trial;
                        conf = c;
                    }
                    None => break,
                }
            }
        }
        Ok((draft, conf))
    }

    /// The faults of `draft` grouped into the events production saw (`one_event`, also through
    /// a third fault: a network split is one event), each a list of fault indexes in ascending
    /// order, in the order of their first fault.
    pub(super) fn events(&self, draft: &Draft) -> Vec<Vec<usize>> {
        let n = draft.faults.len();
        let mut label: Vec<usize> = (0..n).collect();
        for i in 0..n {
            for j in 0..i {
                let (a, b) = (
                    self.candidates[draft.faults[i].candidate],
                    self.candidates[draft.faults[j].candidate],
                );
                if label[i] != label[j] && one_event(a, b) {
                    let (from, to) = (label[i].max(label[j]), label[i].min(label[j]));
                    label.iter_mut().filter(|l| **l == from).for_each(|l| *l = to);
                }
            }
        }
        let mut events: Vec<Vec<usize>> = Vec::new();
        for (i, l) in label.iter().enumerate() {
            match events.iter_mut().find(|e| label[e[0]] == *l) {
                Some(e) => e.push(i),
                None => events.push(vec![i]),
            }
        }
        events
    }

    /// "minimize: without fault 2 (pause of db2 ...)", or for several faults of one event
    /// "minimize: without faults 1 and 2 (partition ..., partition ...: one event in production)".
    fn without_words(&self, draft: &Draft, event: &[usize]) -> String {
        let what: Vec<String> = event
            .iter()
            .map(|&i| self.describe(draft.faults[i].candidate))
            .collect();
        match event {
            [one] => format!("minimize: without fault {} ({})", one + 1, what[0]),
            _ => {
                let numbers: Vec<String> = event.iter().map(|i| (i + 1).to_string()).collect();
                let (last, first) = numbers.split_last().expect("an event has faults");
                format!(
                    "minimize: without faults {} and {last} ({}: one event in production)",
                    first.join(", "),
                    what.join(", ")
                )
            }
        }
    }

    /// Confirms `trial` with the sequential test; None when it does not meet the target.
    fn try_minimal(&mut self, trial: &Draft, what: String) -> Result<Option<Confirmation>> {
        if self.failed.is_some() || self.interrupted {
            // a confirmation that could not run says nothing of what the schedule needs
            return Ok(None);
        }
        let schedule = trial.schedule();
        let dir = self.log.next_dir(&schedule)?;
        let (conf, surplus) = self.confirm(&schedule, &dir)?;
        let verdict = match (&self.failed, conf.met) {
            (Some(_), _) => "not decided: a run could not run",
            (None, true) => "not needed",
            (None, false) => "needed",
        };
        self.progress.line(&format!(
            "[minimize | run {}/{}] {what}: {verdict}",
            self.runs, self.cfg.max_runs,
        ));
        let number = self.log.next_number();
        if conf.met {
            // the minimized schedule is the one that will be reported: keep its runs
            self.best_attempt = Some(number);
        }
        let attempt = Attempt {
            number,
            level: 0,
            what,
            schedule: schedule.to_toml(),
            bug: conf.bugs > 0,
            fired: String::new(),
            confirmation: Some(conf),
            dir,
            note: self.failed.as_ref().map(|e| format!("not run: {e}")),
            runs_pruned: false,
            timelines: Vec::new(),
            surplus: surplus.into_iter().collect(),
        };
        self.push_attempt(attempt)?;
        Ok((conf.met && self.failed.is_none()).then_some(conf))
    }
}
