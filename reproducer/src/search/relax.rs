//! A fault whose path matched no call on the test bed: production's layout talking (the same
//! file under another directory, a WAL directory on a filesystem of its own), not a fault to
//! give up. Its path is relaxed step by step (`profile::relaxed_forms`: production's
//! directories anywhere, fewer of the last ones, the file name alone), one attempt each,
//! until a form matches calls; that form is the draft level 2 refines, and the report says
//! which form it was.
use std::ops::ControlFlow::{Break, Continue};

use super::draft::Draft;
use super::{Search, Step};
use crate::analysis::profile::relaxed_forms;
use crate::model::schedule::Action;

impl Search<'_> {
    /// The looser forms of the path of `draft`'s fault `k` (none for a fault without one).
    pub(super) fn relaxed_forms_of(&self, draft: &Draft, k: usize) -> Vec<String> {
        match &draft.faults[k].fault.action {
            Action::Syscall { path: Some(p), .. } => relaxed_forms(p),
            _ => Vec::new(),
        }
    }

    /// When `draft`'s level-1 run saw no call on its syscall fault's path: the draft with the
    /// first looser path whose run matched calls, and whether a run of these showed the bug;
    /// None when no form matched (or the draft's path matched calls).
    pub(super) fn relax_unmatched_path(&mut self, draft: &Draft) -> Step<Option<(Draft, bool)>> {
        let Some(k) = self.path_matched_nothing(draft) else {
            return Ok(Continue(None));
        };
        let Action::Syscall {
            path: Some(production),
            ..
        } = &draft.faults[k].fault.action
        else {
            return Ok(Continue(None));
        };
        let trials: Vec<(Draft, String)> = relaxed_forms(production)
            .into_iter()
            .map(|form| {
                let mut trial = draft.clone();
                if let Action::Syscall { path, .. } = &mut trial.faults[k].fault.action {
                    *path = Some(form);
                }
                let what = format!(
                    "{} with its production inputs",
                    self.fault_words(&trial.faults[k])
                );
                (trial, what)
            })
            .collect();
        let mut bug = false;
        for (i, (trial, what)) in trials.iter().enumerate() {
            if self.share_spent() {
                break;
            }
            let fb = go!(self.evaluate(trial, what.clone(), &trials[i + 1..]));
            bug |= fb.bug;
            let matched = fb.matched.get(k).is_some_and(|&m| m > 0) || fb.fired.get(k) == Some(&true);
            if matched {
                return Ok(Continue(Some((trial.clone(), bug))));
            }
        }
        Ok(Continue(None))
    }
}
