//! The reproduction search: from the diagnosis's candidates to a schedule that makes the bug
//! happen at the target rate. Level 1 injects the candidates in production order with their
//! inputs; level 2 moves syscall faults to the Nth call and gives process and network faults
//! the functions that preceded them in production (the paper's Algorithm 1, with amplification
//! to the node that really ran the function); level 3 moves a process fault to the call sites
//! inside the last of those functions. Every run's report and trace feed the next choice; a
//! bug is confirmed at once by the sequential test; the winner is then minimized.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::confirm::{self, Confirmation};
use crate::diagnose::{Candidate, Diagnosis, FaultGuess};
use crate::executor::{self, RunOptions, RunReport};
use crate::nodemap::NodeMap;
use crate::scenario::Scenario;
use crate::schedule::{Direction, Fault, FaultKind, Schedule};

/// Level-2 syscall faults try the 2nd..Nth matching call at most up to this N.
const MAX_NTH: u32 = 50;
/// Level-1 and level-2 syscall candidates tried, best ranked first.
const MAX_SYSCALL_CANDIDATES: usize = 8;
const MAX_SITES: usize = 40;

#[derive(Clone, Debug)]
pub struct SearchConfig {
    pub target_rate: f64,
    pub max_runs: u32,
    pub out: PathBuf,
}

/// One fault of a plan, with the candidate it came from.
#[derive(Clone, Debug, PartialEq)]
struct Planned {
    candidate: usize,
    fault: Fault,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Plan {
    faults: Vec<Planned>,
}

impl Plan {
    fn schedule(&self) -> Schedule {
        Schedule { faults: self.faults.iter().map(|p| p.fault.clone()).collect() }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Attempt {
    pub number: u32,
    pub level: u8,
    pub what: String,
    pub schedule: String,
    pub bug: bool,
    pub fired: String,
    pub confirmation: Option<Confirmation>,
    pub dir: PathBuf,
}

/// What one run tells the search.
#[derive(Clone)]
struct Feedback {
    bug: bool,
    fired: Vec<bool>,
    matched: Vec<u32>,
    /// function symbols each node entered, in order
    functions: Vec<Vec<String>>,
}

pub enum Outcome {
    Reproduced,
    Missed(String),
}

pub struct SearchResult {
    pub outcome: Outcome,
    pub schedule: Option<Schedule>,
    pub confirmation: Option<Confirmation>,
    pub level: u8,
    pub attempts: Vec<Attempt>,
    pub runs: u32,
    pub schedules_tried: u32,
    pub runs_to_first: Option<u32>,
    /// runs until a schedule met the target (minimization runs come after)
    pub runs_to_confirmed: Option<u32>,
    pub minimized: Vec<String>,
    /// per fault of the schedule: what production showed and what context it got
    pub chosen: Vec<String>,
    pub seconds: f64,
}

struct Stop(Outcome);

pub struct Search<'a> {
    scenario: &'a Scenario,
    causes: Vec<&'a Candidate>,
    cfg: SearchConfig,
    trace_functions: Vec<(usize, String)>,
    runs: u32,
    attempts: Vec<Attempt>,
    best: Option<(Plan, Confirmation, u8)>,
    runs_to_first: Option<u32>,
    level: u8,
    started: Instant,
    progress: bool,
    /// schedules already run (their TOML), so no two attempts run the same schedule
    seen: std::collections::HashMap<String, Feedback>,
}

fn symbol_of(spec: &str) -> &str {
    spec.rsplit(':').next().unwrap_or(spec)
}

fn names_last(functions: &[String]) -> &str {
    functions.last().map(|s| symbol_of(s)).unwrap_or("")
}

fn file_name(s: &str) -> &str {
    Path::new(s).file_name().and_then(|n| n.to_str()).unwrap_or(s)
}

impl<'a> Search<'a> {
    pub fn new(scenario: &'a Scenario, diagnosis: &'a Diagnosis, production_functions: &[(Option<usize>, String)], cfg: SearchConfig) -> Search<'a> {
        let causes: Vec<&Candidate> = diagnosis.causes().filter(|c| c.node.is_some()).collect();
        let mut trace_functions = Vec::new();
        for (node, spec) in production_functions {
            let Some(n) = *node else { continue };
            let f = (n, Self::local_spec(scenario, n, spec));
            if !trace_functions.contains(&f) {
                trace_functions.push(f);
            }
        }
        Search {
            scenario, causes, cfg, trace_functions, runs: 0, attempts: Vec::new(), best: None, runs_to_first: None, level: 0,
            started: Instant::now(), progress: true, seen: Default::default(),
        }
    }

    /// A production BINARY:SYMBOL as the test bed names it: the symbol alone when it is the
    /// node's own program (paths differ between hosts), else the spec as it was.
    fn local_spec(scenario: &Scenario, node: usize, spec: &str) -> String {
        match spec.rsplit_once(':') {
            Some((binary, symbol)) if file_name(binary) == file_name(&scenario.nodes[node].command[0]) || !Path::new(binary).exists() => symbol.to_string(),
            _ => spec.to_string(),
        }
    }

    fn node_name(&self, i: usize) -> String {
        self.scenario.nodes[i].name.clone()
    }

    /// The level-1 fault for candidate `c`: its kind and inputs, no context.
    fn fault_of(&self, c: &Candidate) -> Option<Fault> {
        let node = self.node_name(c.node?);
        let mut f = Fault {
            node, kind: FaultKind::Crash, syscall: None, errno: None, path: None, nth: 1, after_functions: Vec::new(), offset: None,
            signal: None, duration_ms: None, peers: Vec::new(), direction: None,
        };
        match &c.guess {
            FaultGuess::Syscall { syscall, errno, path, .. } => {
                f.kind = FaultKind::Syscall;
                f.syscall = Some(syscall.clone());
                f.errno = Some(errno.clone());
                f.path = path.clone();
            }
            FaultGuess::Crash { signal, .. } => f.signal = Some(signal.clone()),
            FaultGuess::Pause { duration_ms, .. } => {
                f.kind = FaultKind::Pause;
                f.duration_ms = Some((*duration_ms).max(1));
            }
            FaultGuess::Partition { peer, duration_ms } => {
                let has_addresses = self.scenario.nodes[c.node?].address.is_some() && self.scenario.nodes[*peer].address.is_some();
                if !has_addresses {
                    return None;
                }
                f.kind = FaultKind::Partition;
                f.peers = vec![self.node_name(*peer)];
                f.duration_ms = Some((*duration_ms).max(1));
                f.direction = Some(Direction::Both);
            }
        }
        Some(f)
    }

    /// Candidates `members` (indexes into causes) as a plan in production order.
    fn plan_of(&self, members: &[usize]) -> Plan {
        let mut idx: Vec<usize> = members.to_vec();
        idx.sort_by_key(|&i| self.causes[i].at_ns);
        Plan { faults: idx.into_iter().filter_map(|i| Some(Planned { candidate: i, fault: self.fault_of(self.causes[i])? })).collect() }
    }

    fn is_syscall(&self, i: usize) -> bool {
        matches!(self.causes[i].guess, FaultGuess::Syscall { .. })
    }

    pub fn run(mut self) -> Result<SearchResult> {
        std::fs::create_dir_all(self.cfg.out.join("attempts")).with_context(|| format!("output directory {}", self.cfg.out.display()))?;
        if self.causes.is_empty() {
            bail!("the dumps show no fault to inject on a scenario node (see `reproducer diagnose`): nothing to search");
        }
        let outcome = match self.levels() {
            Ok(()) => Outcome::Missed(self.exhausted_reason()),
            Err(e) => match e.downcast::<StopError>() {
                Ok(StopError(Stop(o))) => o,
                Err(e) => return Err(e),
            },
        };
        let mut minimized = Vec::new();
        let runs_to_confirmed = matches!(outcome, Outcome::Reproduced).then_some(self.runs);
        let (plan, confirmation, level) = match self.best.clone() {
            Some((plan, conf, level)) if matches!(outcome, Outcome::Reproduced) => {
                let (plan, conf) = self.minimize(plan, conf, &mut minimized)?;
                (Some(plan), Some(conf), level)
            }
            Some((plan, conf, level)) => (Some(plan), Some(conf), level),
            None => (None, None, self.level),
        };
        let chosen = plan.iter().flat_map(|p| &p.faults).map(|p| self.explain(p)).collect();
        let schedule = plan.map(|p| p.schedule());
        let schedules_tried = self.attempts.iter().filter(|a| !a.what.starts_with("minimize") && a.level > 0).count() as u32;
        Ok(SearchResult {
            outcome, schedule, confirmation, level, attempts: self.attempts, runs: self.runs, schedules_tried,
            runs_to_first: self.runs_to_first, runs_to_confirmed, minimized, chosen, seconds: self.started.elapsed().as_secs_f64(),
        })
    }

    fn explain(&self, p: &Planned) -> String {
        let c = self.causes[p.candidate];
        let f = &p.fault;
        let mut context = Vec::new();
        if f.nth > 1 {
            context.push(format!("at the matching call #{}", f.nth));
        }
        if !f.after_functions.is_empty() {
            let names: Vec<&str> = f.after_functions.iter().map(|s| symbol_of(s)).collect();
            context.push(format!("after {}", names.join(" → ")));
        }
        if let Some(off) = f.offset {
            context.push(format!("at +{off:#x} inside {}", names_last(&f.after_functions)));
        }
        if c.node.map(|n| self.node_name(n)).as_deref() != Some(f.node.as_str()) {
            context.push(format!("moved to {} (it ran the context there: roles differ between runs)", f.node));
        }
        let context = if context.is_empty() { "as soon as it is due (no context needed)".to_string() } else { context.join(", ") };
        format!("{} — {context}. Production: {}.", self.describe(p.candidate), c.why)
    }

    fn exhausted_reason(&self) -> String {
        match &self.best {
            Some((_, c, _)) => format!("every level was tried; the best schedule reproduced the bug {} (below the target)", c.summary()),
            None => "every level was tried and no schedule made the bug happen".into(),
        }
    }

    fn levels(&mut self) -> Result<()> {
        self.check_oracle()?;
        let backbone: Vec<usize> = (0..self.causes.len()).filter(|&i| !self.is_syscall(i)).collect();
        let syscalls: Vec<usize> = (0..self.causes.len()).filter(|&i| self.is_syscall(i)).take(MAX_SYSCALL_CANDIDATES).collect();
        self.level = 1;
        let mut bases = Vec::new();
        if !backbone.is_empty() {
            let plan = self.plan_of(&backbone);
            self.evaluate(&plan, "the process and network faults in production order".into())?;
            bases.push(plan);
        }
        for &s in &syscalls {
            let mut members = backbone.clone();
            members.push(s);
            let plan = self.plan_of(&members);
            self.evaluate(&plan, format!("{} with its production inputs", self.describe(s)))?;
            bases.push(plan);
        }
        self.level = 2;
        let mut refined = Vec::new();
        for base in bases {
            refined.push(self.level2(base)?);
        }
        self.level = 3;
        for plan in refined {
            self.level3(plan)?;
        }
        Ok(())
    }

    fn describe(&self, i: usize) -> String {
        let c = self.causes[i];
        match &c.guess {
            FaultGuess::Syscall { syscall, errno, path, .. } => format!("{syscall} failing with {errno}{} on {}", path.as_ref().map(|p| format!(" ({p})")).unwrap_or_default(), c.who),
            FaultGuess::Crash { signal, .. } => format!("crash ({signal}) of {}", c.who),
            FaultGuess::Pause { duration_ms, .. } => format!("pause of {} for {duration_ms} ms", c.who),
            FaultGuess::Partition { peer, duration_ms } => format!("partition {}–{} for {duration_ms} ms", c.who, self.node_name(*peer)),
        }
    }

    fn check_oracle(&mut self) -> Result<()> {
        let fb = self.evaluate(&Plan::default(), "fault-free run: the oracle must not fire".into())?;
        if fb.bug {
            bail!("the oracle fires in a fault-free run (attempt dir {}): it must exit 0 only when the bug happened; fix the scenario's [oracle] before searching", self.attempts[0].dir.display());
        }
        Ok(())
    }

    /// Level 2 for one level-1 plan: the Nth call for its syscall fault, then the functions
    /// that preceded each fault in production, nearest fault to the failure first.
    fn level2(&mut self, mut plan: Plan) -> Result<Plan> {
        if let Some(k) = plan.faults.iter().position(|p| self.is_syscall(p.candidate)) {
            plan = self.nth_search(plan, k)?;
        }
        for k in (0..plan.faults.len()).rev() {
            plan = self.find_context(plan, k)?;
        }
        // a later fault's context may only be reachable once an earlier fault has its own
        // (a crash in the right place makes the restarted node run its recovery code)
        for k in (0..plan.faults.len()).rev() {
            if plan.faults[k].fault.after_functions.is_empty() {
                plan = self.find_context(plan, k)?;
            }
        }
        Ok(plan)
    }

    fn nth_search(&mut self, plan: Plan, k: usize) -> Result<Plan> {
        let what = self.describe(plan.faults[k].candidate);
        for nth in 2..=MAX_NTH {
            let mut trial = plan.clone();
            trial.faults[k].fault.nth = nth;
            let fb = self.evaluate(&trial, format!("{what}, call #{nth}"))?;
            if !fb.fired[k] && fb.matched.get(k).copied().unwrap_or(0) < nth {
                break; // there were fewer matching calls: later ones do not exist either
            }
        }
        Ok(plan)
    }

    /// Algorithm 1: grow the context of fault `k` with the unique functions that preceded it
    /// in production, nearest first, while the run still reaches the fault.
    fn find_context(&mut self, mut plan: Plan, k: usize) -> Result<Plan> {
        let cand = self.causes[plan.faults[k].candidate];
        if matches!(cand.guess, FaultGuess::Partition { .. }) && cand.preceding_functions.is_empty() {
            return Ok(plan);
        }
        let node = cand.node.unwrap_or(0);
        let mut context: Vec<String> = Vec::new();
        for spec in &cand.preceding_functions {
            let f = Self::local_spec(self.scenario, node, spec);
            if context.contains(&f) {
                break;
            }
            let mut trial = plan.clone();
            trial.faults[k].fault.after_functions = std::iter::once(f.clone()).chain(context.iter().cloned()).collect();
            let what = format!("{} after {}", self.describe(plan.faults[k].candidate), trial.faults[k].fault.after_functions.iter().map(|s| symbol_of(s)).collect::<Vec<_>>().join(" → "));
            let fb = self.evaluate(&trial, what)?;
            if fb.fired[k] {
                context.insert(0, f);
                plan = trial;
                continue;
            }
            match self.amplify(&trial, k, &fb)? {
                Some(moved) => {
                    context.insert(0, f);
                    plan = moved;
                }
                None => break,
            }
        }
        Ok(plan)
    }

    /// The context did not complete on the production node: if another node ran its first
    /// function in this run (roles differ between runs), try the fault there.
    fn amplify(&mut self, trial: &Plan, k: usize, fb: &Feedback) -> Result<Option<Plan>> {
        let fault = &trial.faults[k].fault;
        if fault.kind == FaultKind::Partition || fault.kind == FaultKind::Syscall {
            return Ok(None);
        }
        let first = symbol_of(&fault.after_functions[0]).to_string();
        let here = self.scenario.node_index(&fault.node).unwrap_or(0);
        let Some(other) = (0..self.scenario.nodes.len()).find(|&n| n != here && fb.functions.get(n).is_some_and(|f| f.contains(&first))) else {
            return Ok(None);
        };
        let mut moved = trial.clone();
        moved.faults[k].fault.node = self.node_name(other);
        let fb2 = self.evaluate(&moved, format!("amplification: the same fault on {} (it ran {first})", self.node_name(other)))?;
        Ok(fb2.fired[k].then_some(moved))
    }

    /// Level 3: process faults at call sites inside the last function of their context.
    fn level3(&mut self, plan: Plan) -> Result<()> {
        for k in (0..plan.faults.len()).rev() {
            let fault = &plan.faults[k].fault;
            if !matches!(fault.kind, FaultKind::Crash | FaultKind::Pause) || fault.after_functions.is_empty() {
                continue;
            }
            let last = fault.after_functions.last().cloned().unwrap_or_default();
            let node = self.scenario.node_index(&fault.node).unwrap_or(0);
            let (binary, symbol) = match last.rsplit_once(':') {
                Some((b, s)) => (PathBuf::from(b), s.to_string()),
                None => (executor::resolve_binary(&self.scenario.nodes[node].command[0]), last.clone()),
            };
            let sites = match crate::binary::injection_sites(&binary, &symbol) {
                Ok(s) => s,
                Err(e) => {
                    self.note(&format!("level 3 skips {symbol}: {e:#}"));
                    continue;
                }
            };
            for site in sites.into_iter().take(MAX_SITES) {
                let mut trial = plan.clone();
                trial.faults[k].fault.offset = Some(site.offset);
                let what = format!("{} at {symbol}+{:#x} ({:?}: {})", self.describe(plan.faults[k].candidate), site.offset, site.kind, site.instruction);
                self.evaluate(&trial, what)?;
            }
        }
        Ok(())
    }

    fn note(&self, msg: &str) {
        if self.progress {
            eprintln!("reproduce: {msg}");
        }
    }

    fn attempt_dir(&self) -> PathBuf {
        self.cfg.out.join("attempts").join(format!("{:03}", self.attempts.len() + 1))
    }

    /// Runs `plan` once; a bug is confirmed at once. Stops the search (through the error
    /// path) when the target is met or the run budget is spent.
    fn evaluate(&mut self, plan: &Plan, what: String) -> Result<Feedback> {
        if self.runs >= self.cfg.max_runs {
            return Err(StopError(Stop(Outcome::Missed(format!("the run budget (--max-runs {}) is spent; {}", self.cfg.max_runs, self.best_words())))).into());
        }
        let schedule = plan.schedule();
        let text = schedule.to_toml()?;
        if let Some(fb) = self.seen.get(&text) {
            return Ok(fb.clone());
        }
        let dir = self.attempt_dir();
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("schedule.toml"), &text)?;
        let (report, fb) = self.run_once(&schedule, &text, &dir)?;
        self.seen.insert(text.clone(), fb.clone());
        let fired = format!("{}/{}", report.fired.len(), report.faults);
        self.progress_line(&what, &fb, &fired);
        let mut attempt = Attempt { number: self.attempts.len() as u32 + 1, level: self.level, what, schedule: text.clone(), bug: fb.bug, fired, confirmation: None, dir: dir.clone() };
        if fb.bug && !plan.faults.is_empty() {
            self.runs_to_first.get_or_insert(self.runs);
            let conf = self.confirm(&schedule, &text, &dir)?;
            attempt.confirmation = Some(conf);
            self.attempts.push(attempt);
            self.write_attempts()?;
            if self.best.as_ref().is_none_or(|(_, b, _)| conf.rate() > b.rate()) {
                self.best = Some((plan.clone(), conf, self.level));
            }
            if conf.met {
                return Err(StopError(Stop(Outcome::Reproduced)).into());
            }
            return Ok(fb);
        }
        self.attempts.push(attempt);
        self.write_attempts()?;
        Ok(fb)
    }

    fn best_words(&self) -> String {
        match &self.best {
            Some((_, c, _)) => format!("best schedule so far: {}", c.summary()),
            None => "no schedule made the bug happen".into(),
        }
    }

    fn progress_line(&self, what: &str, fb: &Feedback, fired: &str) {
        if !self.progress {
            return;
        }
        let best = self.best.as_ref().map(|(_, c, _)| format!("{:.0}%", c.rate() * 100.0)).unwrap_or_else(|| "-".into());
        eprintln!(
            "[level {} | attempt {} | run {}/{} | best {best}] {what}: bug {}, fired {fired}",
            self.level,
            self.attempts.len() + 1,
            self.runs,
            self.cfg.max_runs,
            if fb.bug { "YES" } else { "no" }
        );
    }

    /// The sequential test on `schedule`; when the run budget ends first, the rate so far
    /// (not met).
    fn confirm(&mut self, schedule: &Schedule, text: &str, dir: &Path) -> Result<Confirmation> {
        let target = self.cfg.target_rate;
        let (mut bugs, mut runs) = (0u32, 0u32);
        let outcome = confirm::confirm(target, |k| {
            if self.runs >= self.cfg.max_runs {
                return Ok(None);
            }
            let sub = dir.join(format!("confirm-{k:02}"));
            std::fs::create_dir_all(&sub)?;
            let (_, fb) = self.run_once(schedule, text, &sub)?;
            if self.progress {
                eprintln!("    confirming: run {k}: bug {}", if fb.bug { "yes" } else { "no" });
            }
            bugs += fb.bug as u32;
            runs += 1;
            Ok(Some(fb.bug))
        })?;
        Ok(outcome.unwrap_or_else(|| {
            let (low, high) = confirm::wilson(bugs, runs);
            Confirmation { bugs, runs, met: false, low, high }
        }))
    }

    fn run_once(&mut self, schedule: &Schedule, text: &str, dir: &Path) -> Result<(RunReport, Feedback)> {
        let faults = schedule.resolve(self.scenario, text, &dir.join("schedule.toml").display().to_string())?;
        self.runs += 1;
        let opts = RunOptions { keep: true, base_dir: Some(dir.to_path_buf()), trace_functions: self.trace_functions.clone(), ..Default::default() };
        let report = executor::run(self.scenario, &faults, &opts)?;
        let fb = self.feedback(&report)?;
        Ok((report, fb))
    }

    fn feedback(&self, r: &RunReport) -> Result<Feedback> {
        let fired = (0..r.faults).map(|i| r.fired.iter().any(|f| f.fault == i + 1)).collect();
        let mut functions = vec![Vec::new(); self.scenario.nodes.len()];
        if let Some(trace) = &r.trace {
            let dump = tracerd::dump::Dump::read(trace).with_context(|| format!("trace of run {}", r.workdir.display()))?;
            let launched: Vec<(usize, u32)> = r.launched.iter().filter_map(|(n, pid)| Some((self.scenario.node_index(n)?, *pid))).collect();
            let map = NodeMap::build_for(self.scenario, &dump.meta, &launched);
            for e in dump.events() {
                if let (Some(n), Some(f)) = (map.node(e.pid), e.function) {
                    functions[n].push(f);
                }
            }
        }
        Ok(Feedback { bug: r.bug, fired, matched: r.matched.clone(), functions })
    }

    fn write_attempts(&self) -> Result<()> {
        crate::report::write_atomic(&self.cfg.out.join("attempts.json"), &serde_json::to_vec_pretty(&self.attempts)?)
    }

    /// Drops faults, then context functions, while the schedule still meets the target
    /// without a single miss.
    fn minimize(&mut self, mut plan: Plan, mut conf: Confirmation, log: &mut Vec<String>) -> Result<(Plan, Confirmation)> {
        self.level = 0;
        let mut k = plan.faults.len();
        while k > 0 && plan.faults.len() > 1 {
            k -= 1;
            let mut trial = plan.clone();
            let gone = trial.faults.remove(k);
            let what = format!("minimize: without fault {} ({})", k + 1, self.describe(gone.candidate));
            if let Some(c) = self.try_minimal(&trial, what.clone())? {
                log.push(what);
                plan = trial;
                conf = c;
            }
        }
        for k in 0..plan.faults.len() {
            let n = plan.faults[k].fault.after_functions.len();
            if n > 2 {
                let mut trial = plan.clone();
                trial.faults[k].fault.after_functions.drain(..n - 1);
                let what = format!("minimize: fault {} with only its last context function", k + 1);
                if let Some(c) = self.try_minimal(&trial, what.clone())? {
                    log.push(what);
                    plan = trial;
                    conf = c;
                    continue;
                }
            }
            while plan.faults[k].fault.after_functions.len() > 1 {
                let mut trial = plan.clone();
                let dropped = trial.faults[k].fault.after_functions.remove(0);
                let what = format!("minimize: fault {} without the context function {}", k + 1, symbol_of(&dropped));
                match self.try_minimal(&trial, what.clone())? {
                    Some(c) => {
                        log.push(what);
                        plan = trial;
                        conf = c;
                    }
                    None => break,
                }
            }
        }
        Ok((plan, conf))
    }

    /// Confirms `trial` with the sequential test; None when it does not meet the target.
    fn try_minimal(&mut self, trial: &Plan, what: String) -> Result<Option<Confirmation>> {
        let dir = self.attempt_dir();
        std::fs::create_dir_all(&dir)?;
        let schedule = trial.schedule();
        let text = schedule.to_toml()?;
        std::fs::write(dir.join("schedule.toml"), &text)?;
        let conf = self.confirm(&schedule, &text, &dir)?;
        if self.progress {
            eprintln!("[minimize | run {}/{}] {what}: {}", self.runs, self.cfg.max_runs, if conf.met { "not needed" } else { "needed" });
        }
        self.attempts.push(Attempt { number: self.attempts.len() as u32 + 1, level: 0, what, schedule: text, bug: conf.bugs > 0, fired: String::new(), confirmation: Some(conf), dir });
        self.write_attempts()?;
        Ok(conf.met.then_some(conf))
    }
}

#[derive(Debug)]
struct StopError(Stop);

impl std::fmt::Display for StopError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("search stopped")
    }
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stop")
    }
}

impl std::error::Error for StopError {}
