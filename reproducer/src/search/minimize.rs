//! Minimization of the accepted schedule: drop faults, then context functions, while the
//! schedule still meets the target (each trial confirmed with the sequential test, so that
//! a lucky run does not drop what is needed).
use anyhow::Result;

use super::attempts::Attempt;
use super::confirm::Confirmation;
use super::draft::{symbol_of, Draft};
use super::Search;

impl Search<'_> {
    /// Drops faults, then context functions, while the schedule still meets the target
    /// without a single miss; `log` gets a line for each thing dropped.
    pub(super) fn minimize(
        &mut self,
        mut draft: Draft,
        mut conf: Confirmation,
        log: &mut Vec<String>,
    ) -> Result<(Draft, Confirmation)> {
        self.level = 0;
        let mut k = draft.faults.len();
        while k > 0 && draft.faults.len() > 1 {
            k -= 1;
            let mut trial = draft.clone();
            let gone = trial.faults.remove(k);
            let what = format!(
                "minimize: without fault {} ({})",
                k + 1,
                self.describe(gone.candidate)
            );
            if let Some(c) = self.try_minimal(&trial, what.clone())? {
                log.push(what);
                draft = trial;
                conf = c;
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
