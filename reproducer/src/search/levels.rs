//! The choices of levels 1–3: which drafts to try and in what order, from the diagnosis's
//! candidates and each run's feedback. Level 1: the process and network faults in production
//! order (each network fault alone when all of them together miss), then each syscall
//! candidate with them; level 2: the Nth matching call, the burst repeated, the context
//! functions (Algorithm 1) with amplification to the node that ran them; level 3: the call
//! sites inside the last context function. Lists known ahead go to `evaluate_in_order`, so
//! that with `--jobs` the next candidates run beside the one due.
use std::ops::ControlFlow::{Break, Continue};
use std::path::PathBuf;

use anyhow::bail;

use super::draft::{symbol_of, Draft};
use super::nth::{nth_after_ready, nth_start, NthBounds};
use super::runner::Feedback;
use super::{Search, Step};
use crate::analysis::diagnose::FaultGuess;
use crate::model::schedule::{Action, FaultKind};
use crate::model::{local_spec, resolve_binary};

/// Sets the Nth call of `draft`'s syscall fault `k`.
fn set_nth(draft: &mut Draft, k: usize, nth: u32) {
    if let Action::Syscall { nth: n, .. } = &mut draft.faults[k].fault.action {
        *n = nth;
    }
}

/// Level-2 syscall faults try the 2nd..Nth matching call at most up to this N.
const MAX_NTH: u32 = 50;
/// A failure production saw this many times in a row at most is also tried as many times.
const MAX_REPEAT: u32 = 4;
/// Level-1 and level-2 syscall candidates tried, best ranked first.
const MAX_SYSCALL_CANDIDATES: usize = 8;
/// Level-3 call sites tried inside one function, first ones first.
const MAX_SITES: usize = 40;
/// Network faults tried one at a time at level 1 (best ranked first) when all of them
/// together did not show the bug: each costs a run before any syscall candidate is tried,
/// and the diagnosis ranks the partitions that matter first, so a few are enough.
pub(super) const MAX_LONE_NETWORK_FAULTS: usize = 4;

impl Search<'_> {
    /// The fault-free check, then levels 1, 2 and 3; Break when the search stops. Each
    /// group of trials after level 1's causes runs within its share of the budget
    /// (coverage.rs): the set-aside round, each level-2 draft, each level-3 draft.
    pub(super) fn levels(&mut self) -> Step<()> {
        go!(self.check_oracle());
        self.level = 1;
        let (mut bases, showed_bug) = go!(self.group("level 1: the causes".into(), 0, Self::level1));
        if !showed_bug {
            // the set-aside round, level 2's drafts and level 3 share what is left
            let groups_left = 1 + bases.len() + self.level3_may_follow(&bases) as usize;
            let aside = go!(self.group(
                "level 1: the candidates set aside, each alone, by score".into(),
                groups_left,
                Self::set_aside_alone
            ));
            // they showed the bug where the causes did not: refined first
            bases.splice(0..0, aside);
        }
        self.level = 2;
        let mut refined = Vec::new();
        let level3 = self.level3_may_follow(&bases) as usize;
        for (i, base) in bases.iter().enumerate() {
            let what = format!("level 2: {}", self.draft_words(base));
            let groups_left = bases.len() - i + level3;
            refined.push(go!(self.group(what, groups_left, |s| s.level2(base.clone()))));
        }
        self.level = 3;
        let with_sites: Vec<Draft> = refined.into_iter().filter(|d| self.has_level3(d)).collect();
        for (i, draft) in with_sites.iter().enumerate() {
            let what = format!("level 3: {}", self.draft_words(draft));
            go!(self.group(what, with_sites.len() - i, |s| s.level3(draft.clone())));
        }
        Ok(Continue(()))
    }

    /// Level 1's causes: the process and network faults together (then each network fault
    /// alone when they miss), each syscall candidate with them. Returns the drafts level 2
    /// refines, those that showed the bug first, and whether any run showed it.
    fn level1(&mut self) -> Step<(Vec<Draft>, bool)> {
        let backbone: Vec<usize> = (0..self.causes_end).filter(|&i| !self.is_syscall(i)).collect();
        let syscalls: Vec<usize> = (0..self.causes_end)
            .filter(|&i| self.is_syscall(i))
            .take(MAX_SYSCALL_CANDIDATES)
            .collect();
        let mut bases = Vec::new();
        let mut showed_bug = false;
        let with_syscall: Vec<(Draft, String)> = syscalls
            .iter()
            .map(|&s| {
                let mut members = backbone.clone();
                members.push(s);
                let what = format!("{} with its production inputs", self.describe(s));
                (self.draft_of(&members), what)
            })
            .collect();
        if !backbone.is_empty() {
            let draft = self.draft_of(&backbone);
            let what = "the process and network faults in production order".to_string();
            // the syscall candidates come next (after the network faults alone, if tried)
            let whole = go!(self.evaluate(&draft, what, &with_syscall));
            showed_bug |= whole.bug;
            if !whole.bug {
                // the subsets that showed the bug are refined first at level 2
                bases.extend(go!(self.one_network_fault_at_a_time(&backbone)));
            }
            bases.push(draft);
        }
        go!(self.evaluate_in_order(&with_syscall, |_, fb| {
            showed_bug |= fb.bug;
            Continue(())
        }));
        // a path production's layout named and the test bed's does not have: looser forms;
        // a first call that failed during start-up, where production's came later: past it
        let mut drafts: Vec<Draft> = with_syscall.into_iter().map(|(draft, _)| draft).collect();
        for draft in &mut drafts {
            if let Some((relaxed, bug)) = go!(self.relax_unmatched_path(draft)) {
                showed_bug |= bug;
                *draft = relaxed;
            }
            if let Some((past, bug)) = go!(self.past_start_up(draft)) {
                showed_bug |= bug;
                *draft = past;
            }
            showed_bug |= go!(self.production_burst(draft));
        }
        bases.extend(drafts);
        Ok(Continue((bases, showed_bug)))
    }

    /// A draft in words for the coverage table: its faults, or "no faults".
    fn draft_words(&self, d: &Draft) -> String {
        let words: Vec<String> = d.faults.iter().map(|f| self.fault_words(f)).collect();
        match words.is_empty() {
            true => "no faults".into(),
            false => words.join(" + "),
        }
    }

    /// Whether level 3 has something to try in `draft`: a process fault with a context.
    fn has_level3(&self, draft: &Draft) -> bool {
        draft.faults.iter().any(|f| {
            matches!(f.fault.kind(), FaultKind::Crash | FaultKind::Pause)
                && !f.fault.context.after_functions.is_empty()
        })
    }

    /// Whether level 3 may follow the drafts `bases`: one of them holds a process fault
    /// whose production context level 2 can give it.
    fn level3_may_follow(&self, bases: &[Draft]) -> bool {
        bases.iter().flat_map(|d| &d.faults).any(|f| {
            matches!(f.fault.kind(), FaultKind::Crash | FaultKind::Pause)
                && !self.candidates[f.candidate].preceding_functions.is_empty()
        })
    }

    /// Level 1 when all of the backbone together did not show the bug and it holds several
    /// network faults: each of them alone with the process faults, best ranked first.
    /// Diagnosed partitions injected together can cut off every member, so that the system
    /// stops instead of misbehaving; production's failure may have needed only one of them.
    /// Returns the drafts that showed the bug.
    fn one_network_fault_at_a_time(&mut self, backbone: &[usize]) -> Step<Vec<Draft>> {
        let is_network = |i: &usize| matches!(self.candidates[*i].guess, FaultGuess::Partition { .. });
        let network: Vec<usize> = backbone.iter().copied().filter(is_network).collect();
        let process: Vec<usize> = backbone.iter().copied().filter(|i| !is_network(i)).collect();
        let mut showed_bug = Vec::new();
        if network.len() < 2 {
            return Ok(Continue(showed_bug));
        }
        // causes are in rank order, so the first ones are the best ranked
        let lone: Vec<(Draft, String)> = network
            .iter()
            .take(MAX_LONE_NETWORK_FAULTS)
            .map(|&n| {
                let mut members = process.clone();
                members.push(n);
                let what = format!("{} alone with the process faults", self.describe(n));
                (self.draft_of(&members), what)
            })
            .collect();
        go!(self.evaluate_in_order(&lone, |i, fb| {
            if fb.bug {
                showed_bug.push(lone[i].0.clone());
            }
            Continue(())
        }));
        Ok(Continue(showed_bug))
    }

    /// Level 1's last drafts, when none so far showed the bug: each candidate the diagnosis
    /// set aside, alone, in rank order — before level 2 spends the budget on the Nth calls
    /// of the causes. Not a failure with a kernel-internal errno: no process sees one, so
    /// injecting it replays nothing production's processes saw. Returns the drafts that
    /// showed the bug.
    fn set_aside_alone(&mut self) -> Step<Vec<Draft>> {
        let drafts: Vec<(Draft, String)> = (self.causes_end..self.candidates.len())
            .filter(|&i| !self.candidates[i].guess.kernel_internal())
            .map(|i| {
                let c = self.candidates[i];
                let what = format!("{} alone, though set aside ({})", self.describe(i), c.why);
                (self.draft_of(&[i]), what)
            })
            .collect();
        let mut showed_bug = Vec::new();
        go!(self.evaluate_in_order(&drafts, |i, fb| {
            if fb.bug {
                showed_bug.push(drafts[i].0.clone());
            }
            Continue(())
        }));
        Ok(Continue(showed_bug))
    }

    fn check_oracle(&mut self) -> Step<()> {
        let fb = go!(self.evaluate(
            &Draft::default(),
            "fault-free run: the oracle must not fire".into(),
            &[]
        ));
        if fb.bug {
            let dir = self.log.attempts()[0].dir.display().to_string();
            bail!("the oracle fires in a fault-free run (attempt dir {dir}): it must exit 0 only when the bug happened; fix the scenario's [oracle] before searching");
        }
        Ok(Continue(()))
    }

    /// Level 2 for one level-1 draft: the Nth call for its syscall fault, then the functions
    /// that preceded each fault in production, nearest fault to the failure first. A draft
    /// whose syscall fault's path matched no call at level 1 is not walked: no Nth call and
    /// no context makes a call on that path come.
    fn level2(&mut self, mut draft: Draft) -> Step<Draft> {
        if let Some(k) = self.path_matched_nothing(&draft) {
            let looser = match self.relaxed_forms_of(&draft, k).is_empty() {
                true => "",
                false => ", nor did its looser forms",
            };
            self.progress.line(&format!(
                "reproduce: level 2 skips {}: its path matched no call at level 1{looser}",
                self.describe(draft.faults[k].candidate)
            ));
            return Ok(Continue(draft));
        }
        if let Some(k) = draft.faults.iter().position(|f| self.is_syscall(f.candidate)) {
            draft = go!(self.nth_search(draft, k));
            draft = go!(self.repeat_search(draft, k));
        }
        for k in (0..draft.faults.len()).rev() {
            draft = go!(self.find_context(draft, k));
        }
        // a later fault's context may only be reachable once an earlier fault has its own
        // (a crash in the right place makes the restarted node run its recovery code)
        for k in (0..draft.faults.len()).rev() {
            if draft.faults[k].fault.context.after_functions.is_empty() {
                draft = go!(self.find_context(draft, k));
            }
        }
        Ok(Continue(draft))
    }

    /// The syscall fault of `draft` that names a path and, in the draft's level-1 run, was
    /// current (every fault before it fired) yet saw no matching call.
    pub(super) fn path_matched_nothing(&self, draft: &Draft) -> Option<usize> {
        let fb = self.seen.get(&draft.schedule())?;
        if fb.not_started.is_some() {
            return None;
        }
        draft.faults.iter().enumerate().position(|(k, f)| {
            matches!(&f.fault.action, Action::Syscall { path: Some(_), .. })
                && fb.fired.get(..k).is_some_and(|before| before.iter().all(|&b| b))
                && fb.fired.get(k) == Some(&false)
                && fb.matched.get(k) == Some(&0)
        })
    }

    /// The syscall fault `k` at its 2nd, 3rd, ... matching call, until the calls end; or,
    /// when production's time and the profile's rate put the failure at a later call
    /// (nth.rs), from that call outward; never at a call a run showed comes before every
    /// node is ready, nor past one a run showed does not exist.
    fn nth_search(&mut self, draft: Draft, k: usize) -> Step<Draft> {
        let c = self.candidates[draft.faults[k].candidate];
        let after_ready = draft.faults[k].fault.context.after_ready;
        let what = self.fault_words(&draft.faults[k]);
        let (estimate, mut bounds) = match after_ready {
            true => (nth_after_ready(c), NthBounds::after_ready()),
            false => (nth_start(c), NthBounds::default()),
        };
        let start = estimate.as_ref().map_or(bounds.floor + 1, |e| e.0);
        // the call its level-1 attempt tried, when it ran
        let mut tried: Vec<u32> = match (
            &draft.faults[k].fault.action,
            self.seen.contains_key(&draft.schedule()),
        ) {
            (Action::Syscall { nth, .. }, true) => vec![*nth],
            _ => Vec::new(),
        };
        let trial = |nth: u32, bounds: &NthBounds| {
            let mut trial = draft.clone();
            if let Action::Syscall { nth: n, .. } = &mut trial.faults[k].fault.action {
                *n = nth;
            }
            let why = match &estimate {
                Some((at, why)) if *at == nth => format!(" ({why})"),
                _ if bounds.start_up_calls().is_some_and(|c| nth == c + 1) => format!(
                    " (the first after start-up: a run made {} such calls before every node was ready)",
                    bounds.floor
                ),
                _ => String::new(),
            };
            let counted = if after_ready {
                " after every node was ready"
            } else {
                ""
            };
            (trial, format!("{what}, call #{nth}{counted}{why}"))
        };
        while tried.len() < MAX_NTH as usize - 1 && !self.share_spent() {
            let order = bounds.order(start, &tried, MAX_NTH as usize - 1 - tried.len());
            let Some(&nth) = order.first() else { break };
            let next: Vec<(Draft, String)> = order[1..].iter().map(|&n| trial(n, &bounds)).collect();
            let (first, words) = trial(nth, &bounds);
            let fb = go!(self.evaluate(&first, words, &next));
            tried.push(nth);
            bounds.learn(nth, &fb, k);
            if self.killed_start_up(&first, k, &fb) {
                // the other start-up calls are not production's: the walk goes on after ready
                let mut past = draft.clone();
                past.faults[k].fault.context.after_ready = true;
                if let Some((nth, _)) = nth_after_ready(c) {
                    set_nth(&mut past, k, nth);
                }
                return self.nth_search(past, k);
            }
        }
        Ok(Continue(draft))
    }

    /// Whether `draft`'s syscall fault `k`, counted from its node's start, fired while the
    /// nodes started and kept them from getting ready (`fb`), while production's failure came
    /// after its node's start-up: its next try goes past ready.
    pub(super) fn killed_start_up(&self, draft: &Draft, k: usize, fb: &Feedback) -> bool {
        let c = self.candidates[draft.faults[k].candidate];
        !draft.faults[k].fault.context.after_ready
            && fb.not_started.is_some()
            && fb.fired.get(k) == Some(&true)
            && c.evidence.since_ready_ms.is_some()
    }

    /// Level 1's next try of a syscall candidate whose first matching call, counted from its
    /// node's start, failed during start-up and kept the nodes from getting ready, while
    /// production's failure came after start-up: the call production's time puts after every
    /// node was ready (nth.rs). The draft with that try, and whether its run showed the bug.
    pub(super) fn past_start_up(&mut self, draft: &Draft) -> Step<Option<(Draft, bool)>> {
        let Some(k) = draft.faults.iter().position(|f| self.is_syscall(f.candidate)) else {
            return Ok(Continue(None));
        };
        let Some(fb) = self.seen.get(&draft.schedule()) else {
            return Ok(Continue(None));
        };
        let c = self.candidates[draft.faults[k].candidate];
        let (true, Some((nth, why))) = (self.killed_start_up(draft, k, fb), nth_after_ready(c)) else {
            return Ok(Continue(None));
        };
        let mut trial = draft.clone();
        trial.faults[k].fault.context.after_ready = true;
        set_nth(&mut trial, k, nth);
        let what = format!(
            "{}, past start-up: {why} (its first matching call counted from its node's start failed during start-up, and no node got ready)",
            self.fault_words(&trial.faults[k])
        );
        let fb = go!(self.evaluate(&trial, what, &[]));
        Ok(Continue(Some((trial, fb.bug))))
    }

    /// Level 1's next try of a syscall candidate production failed several times in a row
    /// (its burst): when its single failure fired without the bug, the failure as production
    /// had it, on as many consecutive matching calls. Production's inputs, so level 1's, not
    /// a refinement left for level 2 after the set-aside round. Whether its run showed the bug.
    fn production_burst(&mut self, draft: &Draft) -> Step<bool> {
        let Some(k) = draft.faults.iter().position(|f| self.is_syscall(f.candidate)) else {
            return Ok(Continue(false));
        };
        let fired_alone = self
            .seen
            .get(&draft.schedule())
            .is_some_and(|fb| !fb.bug && fb.fired.get(k) == Some(&true));
        let Some((trial, what)) = self.in_a_row(draft, k).filter(|_| fired_alone) else {
            return Ok(Continue(false));
        };
        Ok(Continue(go!(self.evaluate(&trial, what, &[])).bug))
    }

    /// A failure that persisted in production (a disk that stays full fails the write and
    /// the flush at close) may matter only when it persists: the same fault again for each
    /// further occurrence of its production burst, on consecutive matching calls.
    fn repeat_search(&mut self, draft: Draft, k: usize) -> Step<Draft> {
        if let Some((trial, what)) = self.in_a_row(&draft, k) {
            go!(self.evaluate(&trial, what, &[]));
        }
        Ok(Continue(draft))
    }

    /// `draft` with its fault `k` repeated on consecutive matching calls as often as its
    /// production burst (at most MAX_REPEAT), and the try in words; None for a burst of one.
    fn in_a_row(&self, draft: &Draft, k: usize) -> Option<(Draft, String)> {
        let times = self.candidates[draft.faults[k].candidate].burst.min(MAX_REPEAT);
        if times < 2 {
            return None;
        }
        let mut trial = draft.clone();
        for _ in 1..times {
            trial.faults.insert(k + 1, draft.faults[k].clone());
        }
        let what = format!(
            "{}, {times} matching calls in a row",
            self.fault_words(&draft.faults[k])
        );
        Some((trial, what))
    }

    /// Algorithm 1: grow the context of fault `k` with the unique functions that preceded it
    /// in production, nearest first, while the run still reaches the fault.
    fn find_context(&mut self, mut draft: Draft, k: usize) -> Step<Draft> {
        let cand = self.candidates[draft.faults[k].candidate];
        if matches!(cand.guess, FaultGuess::Partition { .. }) && cand.preceding_functions.is_empty() {
            return Ok(Continue(draft));
        }
        let node = cand.node.unwrap_or(0);
        let mut context: Vec<String> = Vec::new();
        for spec in &cand.preceding_functions {
            let f = local_spec(self.scenario, node, spec);
            if context.contains(&f) {
                break;
            }
            let mut trial = draft.clone();
            trial.faults[k].fault.context.after_functions = std::iter::once(f.clone())
                .chain(context.iter().cloned())
                .collect();
            let names: Vec<&str> = trial.faults[k]
                .fault
                .context
                .after_functions
                .iter()
                .map(|s| symbol_of(s))
                .collect();
            let what = format!(
                "{} after {}",
                self.fault_words(&draft.faults[k]),
                names.join(" → ")
            );
            // each trial depends on the last one's result: nothing is known to come next
            let fb = go!(self.evaluate(&trial, what, &[]));
            if fb.fired[k] {
                context.insert(0, f);
                draft = trial;
                continue;
            }
            match go!(self.amplify(&trial, k, &fb)) {
                Some(moved) => {
                    context.insert(0, f);
                    draft = moved;
                }
                None => break,
            }
        }
        Ok(Continue(draft))
    }

    /// The context did not complete on the production node: if another node ran its first
    /// function in this run (roles differ between runs), try the fault there.
    fn amplify(&mut self, trial: &Draft, k: usize, fb: &Feedback) -> Step<Option<Draft>> {
        let fault = &trial.faults[k].fault;
        if matches!(fault.kind(), FaultKind::Partition | FaultKind::Syscall) {
            return Ok(Continue(None));
        }
        let first = symbol_of(&fault.context.after_functions[0]).to_string();
        let here = self.scenario.node_index(&fault.node).unwrap_or(0);
        let Some(other) = (0..self.scenario.nodes.len())
            .find(|&n| n != here && fb.functions.get(n).is_some_and(|f| f.contains(&first)))
        else {
            return Ok(Continue(None));
        };
        let mut moved = trial.clone();
        moved.faults[k].fault.node = self.node_name(other);
        let what = format!(
            "amplification: the same fault on {} (it ran {first})",
            self.node_name(other)
        );
        let fb2 = go!(self.evaluate(&moved, what, &[]));
        Ok(Continue(fb2.fired[k].then_some(moved)))
    }

    /// Level 3: process faults at call sites inside the last function of their context.
    fn level3(&mut self, draft: Draft) -> Step<()> {
        for k in (0..draft.faults.len()).rev() {
            let fault = &draft.faults[k].fault;
            if !matches!(fault.kind(), FaultKind::Crash | FaultKind::Pause)
                || fault.context.after_functions.is_empty()
            {
                continue;
            }
            let last = fault.context.after_functions.last().cloned().unwrap_or_default();
            let node = self.scenario.node_index(&fault.node).unwrap_or(0);
            let (binary, symbol) = match last.rsplit_once(':') {
                Some((b, s)) => (PathBuf::from(b), s.to_string()),
                None => (
                    resolve_binary(&self.scenario.nodes[node].command[0]),
                    last.clone(),
                ),
            };
            let sites = match self.runner.injection_sites(&binary, &symbol) {
                Ok(s) => s,
                Err(e) => {
                    self.progress
                        .line(&format!("reproduce: level 3 skips {symbol}: {e:#}"));
                    continue;
                }
            };
            let trials: Vec<(Draft, String)> = sites
                .into_iter()
                .take(MAX_SITES)
                .map(|site| {
                    let mut trial = draft.clone();
                    trial.faults[k].fault.context.offset = Some(site.offset);
                    let what = format!(
                        "{} at {symbol}+{:#x} ({:?}: {})",
                        self.fault_words(&draft.faults[k]),
                        site.offset,
                        site.kind,
                        site.instruction
                    );
                    (trial, what)
                })
                .collect();
            go!(self.evaluate_in_order(&trials, |_, _| Continue(())));
        }
        Ok(Continue(()))
    }
}
