//! The search against a fake system: each test's `Fake` answers a plan the way a system
//! with one known bug would (which fault fires, whether the oracle says "bug"), so every
//! level, the confirmation, the minimization and the budget are checked without root; and
//! the batch runner's runs made ahead and side by side, apart from the search.
use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use super::levels::MAX_LONE_NETWORK_FAULTS;
use super::runner::{Feedback, Runner};
use super::*;
use crate::analysis::binary::{Site, SiteKind};
use crate::analysis::diagnose::{Candidate, Diagnosis, FaultGuess, Verdict};
use crate::model::plan::{FaultPlan, Planned as PlannedAction, PlannedFault};
use crate::model::schedule::{Context, FaultKind, Until};

const SCENARIO: &str = "name = \"kv\"\n\
    [[nodes]]\nname = \"db1\"\ncommand = [\"kv\"]\naddress = \"10.8.0.1\"\n\
    [[nodes]]\nname = \"db2\"\ncommand = [\"kv\"]\naddress = \"10.8.0.2\"\n\
    [[nodes]]\nname = \"db3\"\ncommand = [\"kv\"]\naddress = \"10.8.0.3\"\n\
    [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";

/// Whether a run of a plan (with the faults that fired, the run's number) shows the bug.
type BugOracle = dyn Fn(&FaultPlan, &[bool], u32) -> bool + Send + Sync;
/// How a run breaks instead of finishing: Err(text) fails it, Ok(text) is a node that did
/// not start.
type Breaks = dyn Fn(&FaultPlan, u32) -> Option<std::result::Result<String, String>> + Send + Sync;

/// A system under test: `bug` says whether a run with this plan shows the bug; a fault fires
/// when its node ran its whole context (`functions` per node) and its nth call exists.
struct Fake {
    functions: Vec<Vec<String>>,
    /// matching calls each syscall fault's node makes
    calls: u32,
    /// of those, the ones it makes before every node is ready: a fault at one of them stops
    /// the cluster from forming (the run ends not started)
    before_ready: u32,
    /// a syscall fault naming one of these paths matches no call (none of the node's calls
    /// is on it)
    unmatched_paths: Vec<String>,
    bug: Box<BugOracle>,
    sites: Vec<u64>,
    runs: AtomicU32,
    /// what a run with this plan does instead of finishing: Err(text) fails the run, Ok(text)
    /// is a node that did not start
    breaks: Box<Breaks>,
    /// from this run on, the user has pressed Ctrl-C (that run fails as the testbed's does)
    interrupt_at: Option<u32>,
    /// instead of `bug`: whether a run shows the bug from its plan, what fired and its
    /// confirmation index (0 for an attempt's own run), never from the order runs happen in
    bug_by_index: Option<Box<IndexOracle>>,
    /// runs going on now, and the most at once
    in_flight: AtomicU32,
    max_in_flight: AtomicU32,
    /// how long each run takes
    delay: std::time::Duration,
}

type IndexOracle = dyn Fn(&FaultPlan, &[bool], u32) -> bool + Send + Sync;

/// A run's confirmation index from its directory (`confirm-NN`), 0 for an attempt's own run.
fn confirmation_index(dir: &Path) -> u32 {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    name.strip_prefix("confirm-").map_or(0, |k| k.parse().unwrap())
}

impl Fake {
    fn new(bug: impl Fn(&FaultPlan, &[bool], u32) -> bool + Send + Sync + 'static) -> Fake {
        Fake {
            functions: vec![Vec::new(); 3],
            calls: 10,
            before_ready: 0,
            unmatched_paths: Vec::new(),
            bug: Box::new(bug),
            sites: Vec::new(),
            runs: AtomicU32::new(0),
            breaks: Box::new(|_, _| None),
            interrupt_at: None,
            bug_by_index: None,
            in_flight: AtomicU32::new(0),
            max_in_flight: AtomicU32::new(0),
            delay: std::time::Duration::ZERO,
        }
    }

    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    fn fires(&self, f: &PlannedFault) -> bool {
        let ran = &self.functions[f.node];
        let context = f
            .context()
            .after_functions
            .iter()
            .all(|s| ran.iter().any(|r| r == s));
        match f.action {
            PlannedAction::Syscall { nth, .. } => context && nth <= self.matched(f),
            _ => context,
        }
    }

    /// The matching calls fault `f`'s node makes (syscall faults); counted `after_ready`,
    /// those after start-up's.
    fn matched(&self, f: &PlannedFault) -> u32 {
        match &f.action {
            PlannedAction::Syscall { path: Some(p), .. } if self.unmatched_paths.contains(p) => 0,
            _ if f.context().after_ready => self.calls.saturating_sub(self.before_ready),
            _ => self.calls,
        }
    }
}

/// The call of a node's start that fault `f` fires at: its Nth, after start-up's calls when
/// it counts `after_ready`.
fn call_from_start(f: &PlannedFault, before_ready: u32) -> u32 {
    match f.action {
        PlannedAction::Syscall { nth, .. } if f.context().after_ready => before_ready + nth,
        PlannedAction::Syscall { nth, .. } => nth,
        _ => 0,
    }
}

impl Runner for Fake {
    fn run(&self, plan: &FaultPlan, dir: &Path) -> Result<Feedback> {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            dir.join("schedule.toml").exists() || name.starts_with("confirm-") || name.starts_with("run-"),
            "{}",
            dir.display()
        );
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        std::thread::sleep(self.delay);
        if self.interrupt_at.is_some_and(|at| run >= at) {
            anyhow::bail!("interrupted");
        }
        let fired: Vec<bool> = plan.faults.iter().map(|f| self.fires(f)).collect();
        let matched: Vec<u32> = plan.faults.iter().map(|f| self.matched(f)).collect();
        match (self.breaks)(plan, run) {
            Some(Err(e)) => anyhow::bail!("{e}"),
            Some(Ok(why)) => {
                return Ok(Feedback {
                    bug: false,
                    matched,
                    fired,
                    functions: self.functions.clone(),
                    not_started: Some(why),
                    ..Default::default()
                })
            }
            None => {}
        }
        let in_start_up = plan.faults.iter().zip(&fired).any(|(f, &fired)| {
            fired
                && matches!(f.action, PlannedAction::Syscall { .. })
                && call_from_start(f, self.before_ready) <= self.before_ready
        });
        if in_start_up {
            // a fault that fired stopped counting there
            let matched = plan
                .faults
                .iter()
                .zip(&fired)
                .map(|(f, &fired)| match f.action {
                    PlannedAction::Syscall { nth, .. } if fired => nth,
                    _ => self.matched(f).min(self.before_ready),
                })
                .collect();
            return Ok(Feedback {
                fired,
                matched,
                functions: self.functions.clone(),
                not_started: Some("node db1 never became ready".into()),
                ..Default::default()
            });
        }
        let matched_before_ready = plan
            .faults
            .iter()
            .zip(&matched)
            .map(|(f, &m)| {
                if f.context().after_ready {
                    0
                } else {
                    m.min(self.before_ready)
                }
            })
            .collect();
        let bug = match &self.bug_by_index {
            Some(by_index) => {
                // long enough for the runs of a batch to overlap
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_in_flight.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(5));
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                by_index(plan, &fired, confirmation_index(dir))
            }
            None => (self.bug)(plan, &fired, run),
        };
        Ok(Feedback {
            bug,
            matched,
            matched_before_ready,
            fired,
            functions: self.functions.clone(),
            not_started: None,
        })
    }

    fn interrupted(&self) -> bool {
        self.interrupt_at.is_some_and(|at| self.runs() >= at)
    }

    fn injection_sites(&self, _binary: &Path, _symbol: &str) -> Result<Vec<Site>> {
        let site = |offset| Site {
            offset,
            kind: SiteKind::OtherCall,
            callee: None,
            instruction: "call x".into(),
        };
        Ok(self.sites.iter().copied().map(site).collect())
    }
}

fn candidate(guess: FaultGuess, node: usize, at_s: u64, preceding: &[&str]) -> Candidate {
    Candidate {
        guess,
        node: Some(node),
        who: ["db1", "db2", "db3"][node].into(),
        pid: 10 + node as u32,
        host: "h".into(),
        dump: 0,
        at_ns: at_s * 1_000_000_000,
        occurrences: 1,
        profile_per_s: None,
        burst: 1,
        preceding_functions: preceding.iter().map(|f| format!("/opt/kv:{f}")).collect(),
        routine: false,
        verdict: Verdict::Cause,
        why: "production said so".into(),
        evidence: Default::default(),
        score: Default::default(),
        silence: None,
    }
}

fn crash() -> FaultGuess {
    FaultGuess::Crash {
        signal: "SIGKILL".into(),
        sender: "chaos (pid 1)".into(),
    }
}

fn diagnosis(candidates: Vec<Candidate>) -> Diagnosis {
    Diagnosis {
        candidates,
        symptoms: Vec::new(),
        start_ns: 0,
        end_ns: 0,
        unmapped_events: 0,
        notes: Vec::new(),
        dumps: Vec::new(),
    }
}

fn search(fake: &mut Fake, d: &Diagnosis, max_runs: u32) -> (Result<SearchResult>, tempfile::TempDir) {
    search_jobs(fake, d, max_runs, 1)
}

fn search_jobs(
    fake: &Fake,
    d: &Diagnosis,
    max_runs: u32,
    jobs: usize,
) -> (Result<SearchResult>, tempfile::TempDir) {
    search_with_progress(fake, d, max_runs, jobs, &Lines::default())
}

/// The progress lines of a search, collected.
#[derive(Default)]
struct Lines(RefCell<Vec<String>>);

impl Progress for Lines {
    fn line(&self, text: &str) {
        self.0.borrow_mut().push(text.to_string());
    }
}

fn search_with_progress(
    fake: &dyn Runner,
    d: &Diagnosis,
    max_runs: u32,
    jobs: usize,
    progress: &dyn Progress,
) -> (Result<SearchResult>, tempfile::TempDir) {
    let scenario = Scenario::parse(SCENARIO, "t").unwrap();
    let out = tempfile::tempdir().unwrap();
    let cfg = SearchConfig {
        target_rate: 0.8,
        max_runs,
        max_time: std::time::Duration::from_secs(3600),
        out: out.path().to_path_buf(),
        keep_bytes: u64::MAX,
        jobs,
    };
    let result = Search::new(&scenario, d, cfg, fake, progress).and_then(Search::run);
    (result, out)
}

fn has_kind(plan: &FaultPlan, kind: FaultKind) -> bool {
    plan.faults.iter().any(|f| f.kind() == kind)
}

#[test]
fn level_1_reproduces_and_minimization_drops_the_fault_not_needed() {
    let d = diagnosis(vec![
        candidate(crash(), 0, 1, &[]),
        candidate(
            FaultGuess::Pause {
                duration_ms: 500,
                cause: "stopped".into(),
            },
            1,
            2,
            &[],
        ),
    ]);
    let mut fake = Fake::new(|plan, _, _| has_kind(plan, FaultKind::Crash));
    let (r, out) = search(&mut fake, &d, 150);
    let r = r.unwrap();
    assert_eq!(r.outcome, Outcome::Reproduced);
    assert_eq!(r.level, 1);
    let schedule = r.schedule.clone().unwrap();
    assert_eq!(schedule.faults.len(), 1, "{schedule:?}");
    assert_eq!(
        schedule.faults[0].action,
        Action::Crash {
            signal: Some("SIGKILL".into())
        }
    );
    assert_eq!(r.minimized.len(), 1);
    assert!(
        r.minimized[0].contains("without fault 2 (pause of db2"),
        "{:?}",
        r.minimized
    );
    let c = r.confirmation.unwrap();
    assert!(c.met && c.bugs == c.runs, "{c:?}");
    let replay = r.replay.unwrap();
    assert_eq!(
        (replay.bugs, replay.runs, replay.met),
        (REPLAY_RUNS, REPLAY_RUNS, true)
    );
    assert_eq!(r.rate(), Some(replay), "the independent replay is the result");
    assert_eq!(
        r.runs + REPLAY_RUNS,
        fake.runs(),
        "every run is counted, the replay's apart"
    );
    assert!(out.path().join("replay/schedule.toml").exists());
    assert_eq!(
        (r.runs_to_first, r.schedules_tried),
        (Some(2), 1),
        "the fault-free check, then level 1"
    );
    // the attempt log: one file for all, one directory per attempt with its schedule
    let log: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("attempts.json")).unwrap()).unwrap();
    assert_eq!(log.as_array().unwrap().len(), r.attempts.len());
    assert!(out.path().join("attempts/002/schedule.toml").exists());
    assert!(Schedule::parse(
        &std::fs::read_to_string(out.path().join("attempts/002/schedule.toml")).unwrap(),
        "x"
    )
    .is_ok());
}

#[test]
fn a_fault_minimization_dropped_by_luck_is_put_back_when_its_replay_misses() {
    let d = diagnosis(vec![
        candidate(crash(), 0, 1, &[]),
        candidate(
            FaultGuess::Pause {
                duration_ms: 500,
                cause: "stopped".into(),
            },
            1,
            2,
            &[],
        ),
    ]);
    // the crash alone shows the bug in its first 7 runs (the sequential test minimization
    // decides on) and never again; with the pause, always
    let crash_alone = AtomicU32::new(0);
    let mut fake = Fake::new(move |plan, _, _| {
        let (crash, pause) = (has_kind(plan, FaultKind::Crash), has_kind(plan, FaultKind::Pause));
        crash && (pause || crash_alone.fetch_add(1, Ordering::SeqCst) < 7)
    });
    let (r, out) = search(&mut fake, &d, 150);
    let r = r.unwrap();
    assert_eq!(r.outcome, Outcome::Reproduced);
    assert_eq!(r.schedule.unwrap().faults.len(), 2, "the pause put back");
    let replay = r.replay.unwrap();
    assert_eq!((replay.bugs, replay.met), (REPLAY_RUNS, true), "{replay:?}");
    assert_eq!(r.minimized.len(), 1, "{:?}", r.minimized);
    assert!(
        r.minimized[0].starts_with("nothing: ") && r.minimized[0].contains("0/10"),
        "{}",
        r.minimized[0]
    );
    assert!(out.path().join("replay-unminimized/schedule.toml").exists());
    assert_eq!(
        r.runs + 2 * REPLAY_RUNS,
        fake.runs(),
        "both replays apart from the runs"
    );
}

#[test]
fn level_2_finds_the_nth_call() {
    let refused = FaultGuess::Syscall {
        syscall: "connect".into(),
        errno: "ECONNREFUSED".into(),
        path: None,
        raw_path: None,
        short: None,
        persistent: false,
    };
    let d = diagnosis(vec![candidate(refused, 0, 1, &[])]);
    let nth = |plan: &FaultPlan| match plan.faults.first().map(|f| &f.action) {
        Some(PlannedAction::Syscall { nth, .. }) => *nth,
        _ => 0,
    };
    let mut fake = Fake::new(move |plan, _, _| nth(plan) == 3);
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!((r.outcome, r.level), (Outcome::Reproduced, 2));
    assert!(matches!(
        r.schedule.unwrap().faults[0].action,
        Action::Syscall { nth: 3, .. }
    ));
    assert!(r.chosen[0].contains("at the matching call #3"), "{:?}", r.chosen);
}

#[test]
fn a_short_then_persistent_candidate_is_tried_at_level_1() {
    let full = |short: Option<u64>, persistent: bool| FaultGuess::Syscall {
        syscall: "pwrite64".into(),
        errno: "ENOSPC".into(),
        path: Some("*/store-*.log".into()),
        raw_path: Some("/srv/store-7.log".into()),
        short,
        persistent,
    };
    let d = diagnosis(vec![
        candidate(full(Some(480), true), 0, 1, &[]),
        candidate(full(None, false), 0, 2, &[]),
    ]);
    // only a short write followed by failures from then on brings the bug back
    let disk_full = |plan: &FaultPlan, fired: &[bool], _| {
        plan.faults.iter().zip(fired).any(|(f, &fired)| {
            fired
                && matches!(
                    f.action,
                    PlannedAction::Syscall {
                        short: Some(480),
                        until: Some(Until::End),
                        errno: Some(28),
                        ..
                    }
                )
        })
    };
    let mut fake = Fake::new(disk_full);
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!((r.outcome, r.level), (Outcome::Reproduced, 1));
    let schedule = r.schedule.unwrap();
    assert!(
        schedule.to_toml().contains("short = 480\nuntil = \"end\"\n"),
        "{}",
        schedule.to_toml()
    );
    assert!(
        r.chosen[0].contains("a short pwrite64 of 480 bytes, then pwrite64 failing with ENOSPC from then on"),
        "{:?}",
        r.chosen
    );
    assert_eq!(
        r.attempts[1].level, 1,
        "the first attempt after the fault-free check"
    );
}

#[test]
fn a_failure_production_saw_in_a_row_is_tried_in_a_row() {
    let full = FaultGuess::Syscall {
        syscall: "write".into(),
        errno: "ENOSPC".into(),
        path: Some("*/log.*".into()),
        raw_path: None,
        short: None,
        persistent: false,
    };
    let mut c = candidate(full, 0, 1, &[]);
    (c.occurrences, c.burst) = (2, 2);
    let d = diagnosis(vec![c]);
    // the bug needs the write and the next one (the flush at close) to fail
    let mut fake = Fake::new(|plan, fired, _| plan.len() == 2 && fired.iter().all(|&f| f));
    fake.calls = 3;
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!(r.outcome, Outcome::Reproduced);
    let schedule = r.schedule.unwrap();
    assert_eq!(schedule.faults.len(), 2, "{schedule:?}");
    assert!(schedule.faults.iter().all(
        |f| matches!(&f.action, Action::Syscall { nth: 1, errno, .. } if errno.as_deref() == Some("ENOSPC"))
    ));
    // production's inputs: level 1 tries them in a row right after the single failure, before
    // the set-aside round and level 2's walk (the check, the single write, the two in a row)
    let whats: Vec<&str> = r.attempts.iter().map(|a| a.what.as_str()).collect();
    assert!(whats[2].ends_with("2 matching calls in a row"), "{whats:?}");
    assert_eq!(
        (r.runs_to_first, r.first_bug_level),
        (Some(3), Some(1)),
        "{whats:?}"
    );
}

#[test]
fn the_nth_search_stops_where_the_calls_end() {
    let refused = FaultGuess::Syscall {
        syscall: "connect".into(),
        errno: "ECONNREFUSED".into(),
        path: None,
        raw_path: None,
        short: None,
        persistent: false,
    };
    let d = diagnosis(vec![candidate(refused, 0, 1, &[])]);
    let mut fake = Fake::new(|_, _, _| false);
    fake.calls = 2;
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!(
        r.outcome,
        Outcome::Missed("every level was tried and no schedule made the bug happen".into())
    );
    assert_eq!(
        r.runs, 4,
        "fault-free, nth 1, nth 2, nth 3 (never fired, only 2 calls): then no more"
    );
    assert!(r.schedule.is_none() && r.confirmation.is_none());
}

#[test]
fn level_2_grows_the_context_and_amplifies_to_the_node_that_ran_it() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &["g", "f"])]);
    let crash_after_g = |plan: &FaultPlan, fired: &[bool], _| {
        plan.faults
            .iter()
            .zip(fired)
            .any(|(f, &fired)| fired && f.context().after_functions == ["g"])
    };
    let mut fake = Fake::new(crash_after_g);
    fake.functions = vec![vec!["f".into()], vec!["g".into(), "f".into()]];
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!((r.outcome, r.level), (Outcome::Reproduced, 2));
    let f = &r.schedule.unwrap().faults[0];
    assert_eq!(
        (f.node.as_str(), f.context.after_functions.clone()),
        ("db2", vec!["g".to_string()])
    );
    assert!(r.chosen[0].contains("moved to db2"), "{:?}", r.chosen);
    assert!(r
        .attempts
        .iter()
        .any(|a| a.what.starts_with("amplification: the same fault on db2")));
}

#[test]
fn level_3_tries_the_sites_inside_the_last_context_function() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &["g"])]);
    let mut fake = Fake::new(|plan, _, _| {
        plan.faults
            .first()
            .is_some_and(|f| f.context().offset == Some(0x20))
    });
    fake.functions = vec![vec!["g".into()], Vec::new()];
    fake.sites = vec![0x10, 0x20, 0x30];
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!((r.outcome, r.level), (Outcome::Reproduced, 3));
    let f = &r.schedule.unwrap().faults[0];
    assert_eq!(
        f.context,
        Context {
            after_functions: vec!["g".into()],
            offset: Some(0x20),
            after_ready: false,
        }
    );
    assert!(
        !r.attempts.iter().any(|a| a.what.contains("+0x30")),
        "the search stops at the target"
    );
}

#[test]
fn a_rate_below_the_target_is_reported_as_missed_with_the_best_schedule() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &[])]);
    let mut fake = Fake::new(|plan, _, run| !plan.is_empty() && run % 2 == 0);
    let r = search(&mut fake, &d, 150).0.unwrap();
    let Outcome::Missed(why) = &r.outcome else {
        panic!("half the time is below 80%")
    };
    assert!(
        why.starts_with("every level was tried; the best schedule reproduced the bug"),
        "{why}"
    );
    let c = r.confirmation.unwrap();
    assert!(!c.met && c.bugs > 0 && c.bugs < c.runs, "{c:?}");
    assert!(r.schedule.is_some() && r.minimized.is_empty());
}

#[test]
fn the_run_budget_stops_the_search_with_what_it_found() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &["g", "f"])]);
    let mut fake = Fake::new(|_, _, _| false);
    fake.functions = vec![vec!["g".into(), "f".into()], Vec::new()];
    let r = search(&mut fake, &d, 3).0.unwrap();
    assert_eq!(
        r.outcome,
        Outcome::Missed("the run budget (--max-runs 3) is spent; no schedule made the bug happen".into())
    );
    assert_eq!((r.runs, fake.runs()), (3, 3));
}

#[test]
fn an_oracle_that_fires_without_faults_is_an_error() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &[])]);
    let mut fake = Fake::new(|_, _, _| true);
    let e = search(&mut fake, &d, 150).0.err().unwrap().to_string();
    assert!(
        e.contains("the oracle fires in a fault-free run") && e.contains("attempts/001"),
        "{e}"
    );
}

#[test]
fn nothing_to_inject_is_an_error() {
    let mut fake = Fake::new(|_, _, _| false);
    let e = search(&mut fake, &diagnosis(Vec::new()), 150)
        .0
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("nothing to search"), "{e}");
    assert_eq!(fake.runs(), 0);
}

fn syscall_nth(plan: &FaultPlan) -> u32 {
    match plan.faults.first().map(|f| &f.action) {
        Some(PlannedAction::Syscall { nth, .. }) => *nth,
        _ => 0,
    }
}

#[test]
fn a_fault_that_stops_a_node_from_starting_is_a_result_and_the_search_goes_on() {
    let eperm = FaultGuess::Syscall {
        syscall: "prctl".into(),
        errno: "EPERM".into(),
        path: None,
        raw_path: None,
        short: None,
        persistent: false,
    };
    let d = diagnosis(vec![candidate(eperm, 0, 1, &[])]);
    // the 1st and 2nd prctl are start-up calls: failing them stops db1; the first try of the
    // 2nd could not run at all (a test bed that hiccuped), its second try ran
    let mut fake = Fake::new(|plan, _, _| syscall_nth(plan) == 3);
    let hiccuped = std::sync::atomic::AtomicBool::new(false);
    fake.breaks = Box::new(move |plan, _| {
        match syscall_nth(plan) {
        2 if !hiccuped.swap(true, Ordering::SeqCst) => Some(Err("the test bed hiccuped".into())),
        1 => Some(Ok("node db1 exited (exit status: 1) before it was ready; fault 1 fired in pid 77 before it was ready".into())),
        _ => None,
    }
    });
    let (r, out) = search(&mut fake, &d, 150);
    let r = r.unwrap();
    assert_eq!(
        (r.outcome, r.level),
        (Outcome::Reproduced, 2),
        "the Nth-call search moved past the start-up calls"
    );
    let notes: Vec<&str> = r.attempts.iter().filter_map(|a| a.note.as_deref()).collect();
    assert_eq!(
        notes.len(),
        1,
        "the try that could not run is no result: {:?}",
        r.attempts
    );
    assert!(
        notes[0].contains("node db1 exited") && notes[0].contains("fault 1 fired in pid 77"),
        "{notes:?}"
    );
    assert_eq!(r.error, None);
    assert_eq!(
        fake.runs(),
        r.runs + 1 + REPLAY_RUNS,
        "one run made again, not counted"
    );
    assert!(r.attempts.iter().filter(|a| a.note.is_some()).all(|a| !a.bug));
    let log = std::fs::read_to_string(out.path().join("attempts.json")).unwrap();
    assert!(
        log.contains("fault 1 fired in pid 77"),
        "recorded like any other attempt"
    );
}

#[test]
fn a_failure_of_the_fault_free_check_is_the_scenario_s_error() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &[])]);
    let mut fake = Fake::new(|_, _, _| false);
    fake.breaks = Box::new(|plan, _| plan.is_empty().then(|| Err("node db1 never became ready".into())));
    let e = search(&mut fake, &d, 150).0.err().unwrap().to_string();
    assert!(e.contains("never became ready"), "{e}");
}

#[test]
fn ctrl_c_ends_the_search_with_what_it_has() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &["g", "f"])]);
    let mut fake = Fake::new(|plan, _, run| !plan.is_empty() && run % 2 == 0);
    fake.functions = vec![vec!["g".into(), "f".into()], Vec::new()];
    fake.interrupt_at = Some(9);
    let (r, out) = search(&mut fake, &d, 150);
    let r = r.unwrap();
    assert!(r.interrupted);
    let Outcome::Missed(why) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(
        why.starts_with("interrupted (Ctrl-C) after 9 runs; best schedule so far:"),
        "{why}"
    );
    assert!(
        r.schedule.is_some() && r.confirmation.is_some(),
        "the best schedule is kept"
    );
    assert!(r.replay.is_none());
    assert_eq!(fake.runs(), 9, "nothing runs after the interruption");
    assert!(out.path().join("attempts.json").exists());
}

#[test]
fn the_accepted_schedule_is_replayed_afresh_and_that_rate_is_the_result() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &[])]);
    // lucky: the bug shows in the search's runs (2, then 3..9: 7/7 accepts), never afterwards
    let mut fake = Fake::new(|plan, _, run| !plan.is_empty() && run <= 9);
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert!(r.confirmation.unwrap().met, "the search's own test passed");
    let replay = r.replay.unwrap();
    assert_eq!((replay.bugs, replay.runs, replay.met), (0, REPLAY_RUNS, false));
    let Outcome::Missed(why) = &r.outcome else {
        panic!("a lucky schedule is not a reproduction")
    };
    assert!(
        why.contains("independent replay reproduced the bug 0/10"),
        "{why}"
    );
    assert_eq!(r.rate(), Some(replay));
}

#[test]
fn the_reported_level_is_that_of_the_minimized_schedule() {
    let d = diagnosis(vec![
        candidate(crash(), 0, 1, &["g"]),
        candidate(crash(), 1, 2, &[]),
    ]);
    // the bug needs only the crash of db2, but level 1 (both crashes, no context) misses it
    let mut fake = Fake::new(|plan, _, _| {
        plan.faults.iter().any(|f| f.node == 1)
            && (plan.len() == 1 || !plan.faults[0].context().after_functions.is_empty())
    });
    fake.functions = vec![vec!["g".into()], Vec::new()];
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!(r.outcome, Outcome::Reproduced);
    let schedule = r.schedule.unwrap();
    assert_eq!(schedule.faults.len(), 1, "{schedule:?}");
    assert!(
        r.attempts
            .iter()
            .any(|a| a.level == 2 && a.confirmation.is_some_and(|c| c.met)),
        "accepted at level 2"
    );
    assert_eq!(r.level, 1, "reported: the level of the minimized schedule");
    assert_eq!(level_of(&schedule), 1);
}

#[test]
fn best_right_after_a_bug_run_is_not_zero() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &[])]);
    let scenario = Scenario::parse(SCENARIO, "t").unwrap();
    let out = tempfile::tempdir().unwrap();
    let fake = Fake::new(|_, _, _| false);
    let cfg = SearchConfig {
        target_rate: 0.8,
        max_runs: 10,
        max_time: std::time::Duration::from_secs(3600),
        out: out.path().to_path_buf(),
        keep_bytes: u64::MAX,
        jobs: 1,
    };
    let lines = Lines::default();
    let mut s = Search::new(&scenario, &d, cfg, &fake, &lines).unwrap();
    assert_eq!(s.best_short(), "-");
    s.runs_to_first = Some(2);
    assert_eq!(
        s.best_short(),
        "1/1 (confirming)",
        "the run that showed the bug, before its confirmation"
    );
    let draft = s.draft_of(&[0]);
    s.best = Some((
        draft,
        Confirmation {
            bugs: 0,
            runs: 2,
            met: false,
            low: 0.0,
            high: 0.66,
        },
    ));
    assert_eq!(s.best_short(), "0/2", "runs with the bug of runs, not a bare 0%");
}

fn partition(peer: usize, duration_ms: u64) -> FaultGuess {
    FaultGuess::Partition {
        peer,
        duration_ms,
        one_way: false,
    }
}

/// The partition faults of a plan, as (node, peer) pairs.
fn partitions(plan: &FaultPlan) -> Vec<(usize, usize)> {
    plan.faults
        .iter()
        .filter_map(|f| match &f.action {
            PlannedAction::Partition { peers, .. } => Some((f.node, peers[0])),
            _ => None,
        })
        .collect()
}

fn level_1_attempts(r: &SearchResult) -> Vec<&str> {
    r.attempts
        .iter()
        .filter(|a| a.level == 1)
        .map(|a| a.what.as_str())
        .collect()
}

#[test]
fn level_1_tries_each_partition_alone_when_all_of_them_together_miss() {
    // three diagnosed partitions: db1-db2, db2-db3, db1-db3; the bug needs db2-db3 alone
    // (all three together cut every node off, and the system just stops), with the pause
    let pause = FaultGuess::Pause {
        duration_ms: 700,
        cause: "stopped".into(),
    };
    let d = diagnosis(vec![
        candidate(pause, 0, 1, &[]),
        candidate(partition(1, 3000), 0, 2, &[]),
        candidate(partition(2, 3000), 1, 3, &[]),
        candidate(partition(2, 3000), 0, 4, &[]),
    ]);
    let mut fake = Fake::new(|plan, _, _| partitions(plan) == [(1, 2)] && has_kind(plan, FaultKind::Pause));
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!(r.outcome, Outcome::Reproduced);
    assert_eq!(r.level, 1);
    let tried = level_1_attempts(&r);
    assert_eq!(tried.len(), 3, "{tried:?}");
    assert!(tried[0].contains("process and network faults"), "{tried:?}");
    assert!(
        tried[1].starts_with("partition db1–db2 for 3000 ms alone"),
        "{tried:?}"
    );
    assert!(
        tried[2].starts_with("partition db2–db3 for 3000 ms alone"),
        "{tried:?}"
    );
    let schedule = r.schedule.unwrap();
    assert_eq!(schedule.faults.len(), 2, "{schedule:?}");
    assert_eq!(schedule.faults[1].node, "db2");
    assert!(
        matches!(&schedule.faults[1].action, Action::Partition { peers, .. } if peers == &["db3".to_string()]),
        "{schedule:?}"
    );
}

#[test]
fn partitions_alone_are_tried_only_when_needed_and_at_most_a_few() {
    let many: Vec<Candidate> = (0..7)
        .map(|i| candidate(partition(1 + i % 2, 1000 + i as u64), 0, 1 + i as u64, &[]))
        .collect();
    let mut fake = Fake::new(|_, _, _| false);
    let r = search(&mut fake, &diagnosis(many.clone()), 150).0.unwrap();
    assert!(matches!(r.outcome, Outcome::Missed(_)));
    let tried = level_1_attempts(&r);
    assert_eq!(tried.len(), 1 + MAX_LONE_NETWORK_FAULTS, "{tried:?}");
    assert!(
        tried[1].starts_with("partition db1–db2 for 1000 ms")
            && tried[2].starts_with("partition db1–db3 for 1001 ms"),
        "best ranked (here: earliest) first: {tried:?}"
    );

    // the whole backbone shows the bug (below the target): nothing is tried alone
    let mut fake = Fake::new(|plan, _, run| partitions(plan).len() == 7 && run % 2 == 0);
    let r = search(&mut fake, &diagnosis(many.clone()), 150).0.unwrap();
    let tried = level_1_attempts(&r);
    assert!(!tried.iter().any(|w| w.contains("alone")), "{tried:?}");

    // one partition: it was already tried alone
    let mut fake = Fake::new(|_, _, _| false);
    let r = search(&mut fake, &diagnosis(many[..1].to_vec()), 150).0.unwrap();
    assert_eq!(level_1_attempts(&r).len(), 1);
}

#[test]
fn a_node_cut_off_from_two_peers_at_once_is_minimized_as_one_event() {
    // production: db1 cut off from db2 and db3 by one firewall rule (two silences that began
    // 50 ms apart), then a pause of db3; the bug needs the pause and a partition, and either
    // partition alone shows it in the sequential test's runs (in a real cluster: in most
    // runs, not all)
    let pause = FaultGuess::Pause {
        duration_ms: 500,
        cause: "stopped".into(),
    };
    let mut second = candidate(partition(2, 6100), 0, 2, &[]);
    second.at_ns += 50_000_000;
    let d = diagnosis(vec![
        candidate(partition(1, 6000), 0, 2, &[]),
        second,
        candidate(pause, 2, 9, &[]),
    ]);
    let mut fake = Fake::new(|plan, _, _| has_kind(plan, FaultKind::Pause) && !partitions(plan).is_empty());
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!(r.outcome, Outcome::Reproduced);
    assert!(r.minimized.is_empty(), "{:?}", r.minimized);
    assert_eq!(r.schedule.unwrap().faults.len(), 3, "both partitions kept");
    let tried: Vec<&str> = r
        .attempts
        .iter()
        .map(|a| a.what.as_str())
        .filter(|w| w.starts_with("minimize"))
        .collect();
    assert_eq!(
        tried,
        [
            "minimize: without fault 3 (pause of db3 for 500 ms)",
            "minimize: without faults 1 and 2 (partition db1–db2 for 6000 ms, partition db1–db3 for 6100 ms: one event in production)"
        ],
        "the two partitions dropped together, never one alone"
    );
}

#[test]
fn partitions_of_one_node_at_different_times_are_minimized_apart() {
    // db1 cut off from db2 at 2 s and from db3 at 10 s: two events; the bug needs the first
    let d = diagnosis(vec![
        candidate(partition(1, 3000), 0, 2, &[]),
        candidate(partition(2, 3000), 0, 10, &[]),
    ]);
    let mut fake = Fake::new(|plan, _, _| partitions(plan).contains(&(0, 1)));
    let r = search(&mut fake, &d, 150).0.unwrap();
    assert_eq!(r.outcome, Outcome::Reproduced);
    let schedule = r.schedule.unwrap();
    assert_eq!(schedule.faults.len(), 1, "{schedule:?}");
    assert!(
        matches!(&schedule.faults[0].action, Action::Partition { peers, .. } if peers == &["db2".to_string()]),
        "{schedule:?}"
    );
}

#[test]
fn one_event_needs_a_shared_node_and_half_the_shorter_silence_together() {
    use super::minimize::one_event;
    let at = |peer, start_ms: u64, duration_ms| {
        let mut c = candidate(partition(peer, duration_ms), 0, 0, &[]);
        c.at_ns = start_ms * 1_000_000;
        c
    };
    assert!(one_event(&at(1, 0, 4000), &at(2, 100, 4000)));
    assert!(
        one_event(&at(1, 0, 4000), &at(2, 2000, 4000)),
        "half of the shorter"
    );
    assert!(!one_event(&at(1, 0, 4000), &at(2, 2100, 4000)), "less than half");
    assert!(
        !one_event(&at(1, 0, 4000), &at(2, 4000, 1000)),
        "touching is not overlapping"
    );
    let mut other_pair = candidate(partition(2, 4000), 1, 0, &[]);
    other_pair.at_ns = 0;
    assert!(
        one_event(&at(1, 0, 4000), &other_pair),
        "db1–db2 and db2–db3 share db2"
    );
    assert!(
        !one_event(&at(1, 0, 4000), &candidate(crash(), 0, 0, &[])),
        "partitions only"
    );
}

fn syscall(name: &str, errno: &str) -> FaultGuess {
    FaultGuess::Syscall {
        syscall: name.into(),
        errno: errno.into(),
        path: None,
        raw_path: None,
        short: None,
        persistent: false,
    }
}

/// What --jobs must not change: every choice, number and attempt of the search.
fn comparable(r: &SearchResult, out: &Path) -> String {
    let attempts: Vec<String> = r
        .attempts
        .iter()
        .map(|a| {
            format!(
                "{} L{} {} | {} | bug {} fired {} | {:?} | {}",
                a.number,
                a.level,
                a.what,
                a.schedule,
                a.bug,
                a.fired,
                a.confirmation,
                a.dir.strip_prefix(out).unwrap().display()
            )
        })
        .collect();
    format!(
        "{:?}\n{:?}\nlevel {} runs {} schedules {} first {:?} confirmed {:?}\n{:?}\n{:?}\n{:?} {:?}\n{}",
        r.outcome,
        r.schedule,
        r.level,
        r.runs,
        r.schedules_tried,
        r.runs_to_first,
        r.runs_to_confirmed,
        r.minimized,
        r.chosen,
        r.confirmation,
        r.replay,
        attempts.join("\n")
    )
}

/// The fake's answers through a batch engine (`--runner COMMAND`), as a real search's runs
/// go: each run's answer is its spec in its directory, and a job (`sh`, here) turns the spec
/// into the run's report there, read back by the engine as `run-attempt`'s is.
struct ThroughEngine<'a> {
    fake: &'a Fake,
    engine: engine::Engine,
    /// jobs going on now, and the most at once
    in_flight: AtomicU32,
    max_in_flight: AtomicU32,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Answer {
    bug: bool,
    fired: Vec<bool>,
    matched: Vec<u32>,
    functions: Vec<Vec<String>>,
    not_started: Option<String>,
}

impl Runner for ThroughEngine<'_> {
    fn run(&self, plan: &FaultPlan, dir: &Path) -> Result<Feedback> {
        let f = self.fake.run(plan, dir)?;
        let answer = Answer {
            bug: f.bug,
            fired: f.fired,
            matched: f.matched,
            functions: f.functions,
            not_started: f.not_started,
        };
        let spec = dir.join("answer.json");
        std::fs::write(&spec, serde_json::to_vec(&answer)?)?;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let report = self.engine.run_attempt::<Answer>(&spec, dir);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let a = report?;
        Ok(Feedback {
            bug: a.bug,
            fired: a.fired,
            matched: a.matched,
            functions: a.functions,
            not_started: a.not_started,
            ..Default::default()
        })
    }

    fn interrupted(&self) -> bool {
        self.fake.interrupted()
    }

    fn injection_sites(&self, binary: &Path, symbol: &str) -> Result<Vec<Site>> {
        self.fake.injection_sites(binary, symbol)
    }
}

#[test]
fn one_job_and_three_jobs_find_the_same_schedule_the_same_way() {
    // a crash of db1 after f, and three syscall candidates of db2; the bug: the 5th fsync
    // fails (shown in 3 runs of 4: below the target), or the crash lands at +0x20 inside f
    // with any fsync fault (always)
    let d = diagnosis(vec![
        candidate(crash(), 0, 1, &["f"]),
        candidate(syscall("write", "EIO"), 1, 2, &[]),
        candidate(syscall("fsync", "EIO"), 1, 3, &[]),
        candidate(syscall("read", "EIO"), 1, 4, &[]),
    ]);
    let is_fsync = |f: &PlannedFault| matches!(&f.fault.action, Action::Syscall { syscall, .. } if syscall.as_str() == "fsync");
    let bug = move |plan: &FaultPlan, fired: &[bool], k: u32| {
        let fsync_nth = plan
            .faults
            .iter()
            .zip(fired)
            .find_map(|(f, &on)| match &f.fault.action {
                Action::Syscall { nth, .. } if on && is_fsync(f) => Some(*nth),
                _ => None,
            });
        let crash_at_0x20 = plan.faults.iter().any(|f| f.fault.context.offset == Some(0x20));
        match fsync_nth {
            Some(_) if crash_at_0x20 => true,
            Some(5) => k % 4 != 3,
            _ => false,
        }
    };
    let fake = |bug: Box<IndexOracle>| {
        let mut f = Fake::new(|_, _, _| unreachable!("the index oracle answers"));
        f.functions = vec![vec!["f".into()], Vec::new(), Vec::new()];
        f.sites = vec![0x10, 0x20, 0x30, 0x40];
        f.bug_by_index = Some(bug);
        f
    };
    let (one, three, queued) = (fake(Box::new(bug)), fake(Box::new(bug)), fake(Box::new(bug)));
    let (r1, out1) = search_jobs(&one, &d, 300, 1);
    let (r3, out3) = search_jobs(&three, &d, 300, 3);
    // the same search with its runs as jobs of an engine, three in the queue at once
    let through_engine = ThroughEngine {
        fake: &queued,
        engine: "sh -c 'sleep 0.02; cp \"$0\" \"$1/attempt-report.json\"' {spec} {dir}"
            .parse()
            .unwrap(),
        in_flight: AtomicU32::new(0),
        max_in_flight: AtomicU32::new(0),
    };
    let (re, oute) = search_with_progress(&through_engine, &d, 300, 3, &Lines::default());
    let (r1, r3, re) = (r1.unwrap(), r3.unwrap(), re.unwrap());
    assert_eq!(comparable(&r1, out1.path()), comparable(&re, oute.path()));
    assert!(through_engine.max_in_flight.load(Ordering::SeqCst) > 1);
    assert_eq!(re.surplus_runs, r3.surplus_runs);
    assert!(oute
        .path()
        .join("attempts/001")
        .join(engine::REPORT_FILE)
        .is_file());
    assert_eq!(r1.outcome, Outcome::Reproduced);
    assert_eq!(r1.level, 3, "{}", comparable(&r1, out1.path()));
    assert!(
        r1.attempts
            .iter()
            .any(|a| a.confirmation.is_some_and(|c| !c.met && c.runs > 4)),
        "the flaky 5th fsync went through a long confirmation"
    );
    assert_eq!(comparable(&r1, out1.path()), comparable(&r3, out3.path()));
    // the three-job search ran side by side and threw away what it did not need
    assert_eq!(
        (r1.surplus_runs, one.max_in_flight.load(Ordering::SeqCst)),
        (0, 1)
    );
    assert!(three.max_in_flight.load(Ordering::SeqCst) > 1);
    assert!(r3.surplus_runs > 0);
    let replay = r3.replay.unwrap().runs;
    assert_eq!(one.runs(), r1.runs + replay);
    assert_eq!(three.runs(), r3.runs + replay + r3.surplus_runs);
    let surplus_listed = r3.attempts.iter().map(|a| a.surplus.len()).sum::<usize>();
    assert!(surplus_listed > 0, "the surplus runs are in the attempt log");
    let json = std::fs::read_to_string(out3.path().join("attempts.json")).unwrap();
    assert!(json.contains("side by side"), "{json}");
    let left: Vec<_> = std::fs::read_dir(out3.path().join("attempts"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("ahead-"))
        .collect();
    assert!(
        left.is_empty(),
        "runs made ahead and not used are removed: {left:?}"
    );
}

#[test]
fn the_progress_sink_gets_the_lines_of_the_attempts_confirmations_and_replay() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &[])]);
    let progress_of = |jobs| {
        let fake = Fake::new(|plan, _, _| !plan.is_empty());
        let lines = Lines::default();
        let r = search_with_progress(&fake, &d, 150, jobs, &lines).0.unwrap();
        assert_eq!(r.outcome, Outcome::Reproduced);
        lines.0.into_inner()
    };
    let lines = progress_of(1);
    let mut expected = vec![
        "[level 0 | attempt 1 | run 1/150 | best -] fault-free run: the oracle must not fire: bug no, fired 0/0"
            .to_string(),
        "[level 1 | attempt 2 | run 2/150 | best 1/1 (confirming)] the process and network faults in production order: bug YES, fired 1/1".into(),
    ];
    expected.extend((1..=7).map(|k| format!("    confirming: run {k}: bug yes")));
    expected.push("    confirmation: 7/7 (100%, 95% CI 65–100%) (target met); best so far 7/7".into());
    expected.extend(
        (1..=REPLAY_RUNS).map(|k| format!("[replay | run {k}/10] the accepted schedule afresh: bug yes")),
    );
    assert_eq!(lines, expected);
    assert_eq!(progress_of(3), lines, "side by side, the same lines");
}

fn crash_of(node: &str) -> Schedule {
    Schedule {
        faults: vec![Fault {
            node: node.into(),
            context: Context::default(),
            action: Action::Crash { signal: None },
        }],
    }
}

fn attempt_in(number: u32, dir: PathBuf) -> Attempt {
    Attempt {
        number,
        level: 1,
        what: format!("attempt {number}"),
        schedule: String::new(),
        bug: false,
        fired: String::new(),
        confirmation: None,
        dir,
        note: None,
        runs_pruned: false,
        timelines: Vec::new(),
        surplus: Vec::new(),
    }
}

#[test]
fn the_batch_runner_hands_out_runs_made_ahead_and_removes_those_never_reached() {
    let scenario = Scenario::parse(SCENARIO, "t").unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut log = AttemptLog::create(out.path(), u64::MAX).unwrap();
    let fake = Fake::new(|_, _, _| false);
    let mut batch = batch::BatchRunner::new(&fake, &scenario, 3);
    let (a, b, c, d) = (
        crash_of("db1"),
        crash_of("db2"),
        crash_of("db3"),
        Schedule::default(),
    );
    let upcoming = [(b.clone(), "b"), (c.clone(), "c"), (d.clone(), "d")];
    // c ran already: b and d run beside a
    let (dir, run) = batch
        .next(&log, &a, upcoming.iter().cloned(), 100, |s| s == &c)
        .unwrap();
    assert!(run.ran && run.result.is_ok());
    assert_eq!((dir.clone(), fake.runs()), (out.path().join("attempts/001"), 3));
    log.push(attempt_in(1, dir), &Default::default(), None).unwrap();
    // b's turn: its run was made ahead, and its directory becomes the attempt's
    let (dir, run) = batch.next(&log, &b, [(c.clone(), "c")], 100, |_| false).unwrap();
    assert!(run.ran);
    assert_eq!((dir.clone(), fake.runs()), (out.path().join("attempts/002"), 3));
    assert!(dir.join("schedule.toml").is_file());
    log.push(attempt_in(2, dir), &Default::default(), None).unwrap();
    // the search ends before d's turn: d's run is surplus, listed in the attempt that made it
    assert_eq!(batch.finish(&mut log).unwrap(), 1);
    assert_eq!(log.attempts()[0].surplus.len(), 1);
    assert!(
        log.attempts()[0].surplus[0].starts_with("d (faults = []) ran side by side with this attempt"),
        "{:?}",
        log.attempts()[0].surplus
    );
    let ahead = std::fs::read_dir(out.path().join("attempts"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ahead-"))
        .count();
    assert_eq!(ahead, 0, "the run made ahead and not used is removed");
}

#[test]
fn the_batch_runner_hands_out_repeated_runs_in_order_and_removes_those_not_taken() {
    let scenario = Scenario::parse(SCENARIO, "t").unwrap();
    let out = tempfile::tempdir().unwrap();
    let fake = Fake::new(|_, _, _| false);
    let mut batch = batch::BatchRunner::new(&fake, &scenario, 3);
    let schedule = crash_of("db1");
    let mut repeats = batch::Repeats::new(&schedule, out.path(), "confirm");
    // runs 1–3 go together (--jobs 3); run 4 alone, the last one left
    for k in 1..=4 {
        let left = if k == 4 { 1 } else { 5 };
        assert!(batch
            .repeat(&mut repeats, k, left)
            .unwrap()
            .is_some_and(|r| r.ran));
    }
    assert_eq!(fake.runs(), 4);
    assert_eq!(batch.discard(repeats), None, "every run made was taken");
    let mut repeats = batch::Repeats::new(&schedule, out.path(), "run");
    assert!(batch.repeat(&mut repeats, 1, 10).unwrap().is_some());
    assert_eq!(fake.runs(), 7);
    assert_eq!(batch.discard(repeats), Some((2, 3)));
    assert!(out.path().join("run-01").is_dir());
    assert!(!out.path().join("run-02").exists() && !out.path().join("run-03").exists());
    let mut log = AttemptLog::create(out.path(), u64::MAX).unwrap();
    assert_eq!(
        batch.finish(&mut log).unwrap(),
        2,
        "the runs not taken are surplus"
    );
}

#[test]
fn a_partition_the_diagnosis_set_aside_is_tried_when_the_causes_miss() {
    let reset = FaultGuess::Syscall {
        syscall: "write".into(),
        errno: "ECONNRESET".into(),
        path: None,
        raw_path: None,
        short: None,
        persistent: false,
    };
    let mut idle = candidate(partition(1, 7000), 0, 2, &[]);
    idle.verdict = Verdict::Benign;
    idle.why = "an idle connection: fault-free runs see db1→db2 port 7000 silent for up to 5001 ms".into();
    let d = diagnosis(vec![candidate(reset, 0, 9, &[]), idle]);
    let fake = Fake::new(|plan, _, _| has_kind(plan, FaultKind::Partition));
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    assert_eq!(
        (r.outcome.clone(), r.level),
        (Outcome::Reproduced, 1),
        "{:?}",
        r.chosen
    );
    let schedule = r.schedule.unwrap();
    assert_eq!(schedule.faults.len(), 1);
    assert_eq!(schedule.faults[0].kind(), FaultKind::Partition);
    // the fault-free check, the cause at level 1, then the set-aside partition alone
    assert_eq!(r.runs_to_first, Some(3), "{:?}", lines.0.borrow());
    assert!(
        lines
            .0
            .borrow()
            .iter()
            .any(|l| l.contains("alone, though set aside (an idle connection")),
        "{:?}",
        lines.0.borrow()
    );
}

#[test]
fn the_time_budget_stops_the_search_with_what_it_found() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &[])]);
    let scenario = Scenario::parse(SCENARIO, "t").unwrap();
    let out = tempfile::tempdir().unwrap();
    let fake = Fake::new(|_, _, _| true);
    let cfg = SearchConfig {
        target_rate: 0.8,
        max_runs: 150,
        max_time: std::time::Duration::ZERO,
        out: out.path().to_path_buf(),
        keep_bytes: u64::MAX,
        jobs: 1,
    };
    let r = Search::new(&scenario, &d, cfg, &fake, &Lines::default())
        .and_then(Search::run)
        .unwrap();
    match &r.outcome {
        Outcome::Missed(why) => assert!(
            why.starts_with("the time budget (--max-time 0s) is spent after 0 runs"),
            "{why}"
        ),
        o => panic!("{o:?}"),
    }
    assert_eq!(fake.runs(), 0);
}

/// A failed call the diagnosis set aside as benign, with its score.
fn benign(guess: FaultGuess, node: usize, at_s: u64, score: f64) -> Candidate {
    let mut c = candidate(guess, node, at_s, &[]);
    c.verdict = Verdict::Benign;
    c.why = "fault-free runs see it too".into();
    c.score.value = score;
    c
}

#[test]
fn failed_calls_set_aside_are_tried_after_the_causes_in_score_order() {
    let d = diagnosis(vec![
        candidate(crash(), 0, 1, &[]),
        benign(syscall("openat", "ENOENT"), 1, 2, 0.5),
        // no process ever sees it: never injected
        benign(syscall("futex", "ERESTARTSYS"), 1, 2, 0.3),
        benign(syscall("read", "EAGAIN"), 1, 3, 0.02),
    ]);
    let eagain = |plan: &FaultPlan| {
        plan.faults.iter().any(
            |f| matches!(&f.action, PlannedAction::Syscall { errno, .. } if *errno == Some(libc::EAGAIN)),
        )
    };
    let fake = Fake::new(move |plan, _, _| eagain(plan));
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    assert_eq!(
        (r.outcome.clone(), r.level),
        (Outcome::Reproduced, 1),
        "{:?}",
        lines.0.borrow()
    );
    // the fault-free check, the crash, then the set-aside calls alone, the higher score first
    assert_eq!(r.runs_to_first, Some(4), "{:?}", lines.0.borrow());
    let aside: Vec<String> = level_1_attempts(&r)
        .into_iter()
        .filter(|w| w.contains("though set aside"))
        .map(String::from)
        .collect();
    assert_eq!(aside.len(), 2, "{aside:?}");
    assert!(
        aside[0].starts_with("openat failing with ENOENT on db2 alone"),
        "{aside:?}"
    );
    assert!(
        aside[1].starts_with("read failing with EAGAIN on db2 alone"),
        "{aside:?}"
    );
    let tried: Vec<(usize, u32)> = r.ranking.iter().map(|c| (c.rank, c.attempts)).collect();
    assert_eq!(tried, [(1, 1), (2, 1), (3, 0), (4, 1)]);
    let report = coverage::markdown(&r.ranking, &r.groups);
    assert!(
        report.contains("4. read failing with EAGAIN on db2 (score 0.02, set aside: Benign)"),
        "{report}"
    );
    assert!(
        report.contains("Never injected (1):\n\n- 3. futex failing with ERESTARTSYS on db2 (score 0.3, set aside: Benign): a kernel-internal errno: no process sees it"),
        "{report}"
    );
}

/// Two syscall causes; the bug needs the second one's 5th call.
fn two_causes() -> (Diagnosis, Fake) {
    let d = diagnosis(vec![
        candidate(syscall("read", "EIO"), 0, 1, &[]),
        candidate(syscall("write", "EIO"), 1, 2, &[]),
    ]);
    let mut fake = Fake::new(|plan, _, _| {
        plan.faults.iter().any(|f| {
            matches!(&f.action, PlannedAction::Syscall { nr, nth: 5, .. } if *nr == libc::SYS_write as u32)
        })
    });
    fake.calls = 1000;
    (d, fake)
}

#[test]
fn a_group_that_spends_its_share_of_the_runs_hands_over_to_the_next() {
    let (d, mut fake) = two_causes();
    // 40 runs: the read's Nth-call walk alone (49 calls) would spend them all
    let r = search(&mut fake, &d, 40).0.unwrap();
    assert_eq!(r.outcome, Outcome::Reproduced, "{:?}", r.groups);
    let read = r
        .groups
        .iter()
        .find(|g| g.what.starts_with("level 2: read"))
        .unwrap();
    assert_eq!(
        read.stopped, "handed over to the next group: its share of the runs (18) is spent",
        "{:?}",
        r.groups
    );
    assert_eq!(read.runs, 18);
    let write = r
        .groups
        .iter()
        .find(|g| g.what.starts_with("level 2: write"))
        .unwrap();
    assert_eq!(write.stopped, "found: a schedule met the target");
    let report = coverage::markdown(&r.ranking, &r.groups);
    assert!(
        report.contains("| 2 | level 2: read failing with EIO on db1 | 18 |"),
        "{report}"
    );
}

#[test]
fn a_group_that_spends_its_share_of_the_time_hands_over_to_the_next() {
    let (d, mut fake) = two_causes();
    fake.delay = std::time::Duration::from_millis(20);
    let scenario = Scenario::parse(SCENARIO, "t").unwrap();
    let out = tempfile::tempdir().unwrap();
    let cfg = SearchConfig {
        target_rate: 0.8,
        max_runs: 1000,
        // the read's share is under 0.75 s: less than its 49 calls of 20 ms
        max_time: std::time::Duration::from_millis(1500),
        out: out.path().to_path_buf(),
        keep_bytes: u64::MAX,
        jobs: 1,
    };
    let r = Search::new(&scenario, &d, cfg, &fake, &Lines::default())
        .and_then(Search::run)
        .unwrap();
    let read = r
        .groups
        .iter()
        .find(|g| g.what.starts_with("level 2: read"))
        .unwrap();
    assert!(
        read.stopped
            .starts_with("handed over to the next group: its share of the time"),
        "{:?}",
        r.groups
    );
    // the write's Nth calls were reached
    let write = r.ranking.iter().find(|c| c.what.starts_with("write")).unwrap();
    assert!(write.attempts > 1, "{:?}", r.ranking);
}

#[test]
fn the_nth_call_search_starts_where_production_s_time_and_the_rate_put_it() {
    let mut c = candidate(syscall("write", "ECONNRESET"), 0, 1, &[]);
    // 50 writes/s fault-free, the failure 12.4 s after the process started: call 620
    c.evidence.since_start_ms = Some(12_400);
    c.evidence.calls_per_s = Some((50.0, 30.0));
    let d = diagnosis(vec![c]);
    let mut fake = Fake::new(|plan, _, _| syscall_nth(plan) == 619);
    fake.calls = 1000;
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    assert_eq!((r.outcome, r.level), (Outcome::Reproduced, 2));
    // the check, call 1, then 620, 621, 619
    assert_eq!(r.runs_to_first, Some(5), "{:?}", lines.0.borrow());
    assert_eq!(r.first_bug_level, Some(2));
    let whats: Vec<&str> = r.attempts.iter().map(|a| a.what.as_str()).collect();
    assert!(
        whats[2].starts_with("write failing with ECONNRESET on db1, call #620 (started at call #620: production's failure came 12.40 s after its process started"),
        "{whats:?}"
    );
}

#[test]
fn a_fault_whose_path_matched_nothing_at_level_1_is_not_walked_at_level_2() {
    let on = |path: &str| FaultGuess::Syscall {
        syscall: "openat".into(),
        errno: "ENOENT".into(),
        path: Some(path.into()),
        raw_path: None,
        short: None,
        persistent: false,
    };
    let mut missing = candidate(on("*/missing.conf"), 0, 1, &["load_config", "main"]);
    missing.burst = 3;
    let d = diagnosis(vec![missing, candidate(on("*/data.log"), 0, 2, &[])]);
    let mut fake = Fake::new(|_, _, _| false);
    fake.calls = 3;
    fake.unmatched_paths = vec!["*/missing.conf".into()];
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    let at_level_2: Vec<&str> = r
        .attempts
        .iter()
        .filter(|a| a.level == 2)
        .map(|a| a.what.as_str())
        .collect();
    assert!(
        at_level_2.iter().all(|w| !w.contains("missing.conf")),
        "{at_level_2:?}"
    );
    // the other one's path matched calls: walked up to its last call (nth 2, 3, 4)
    assert_eq!(at_level_2.len(), 3, "{at_level_2:?}");
    assert!(at_level_2.iter().all(|w| w.contains("data.log")));
    assert!(
        lines
            .0
            .borrow()
            .iter()
            .any(|l| l.contains("level 2 skips openat failing with ENOENT (*/missing.conf) on db1: its path matched no call at level 1")),
        "{:?}",
        lines.0.borrow()
    );
    // fault-free check, both at level 1, then the Nth calls of the one that matched
    assert_eq!(r.runs, 6);
}

#[test]
fn the_nth_call_search_leaves_out_the_calls_made_before_every_node_was_ready() {
    // no estimate: the walk starts at call #2, which comes during start-up (the node makes
    // 17 writes before the cluster is ready); the bug is production's, at the 20th
    let d = diagnosis(vec![candidate(syscall("write", "ECONNRESET"), 0, 1, &[])]);
    let mut fake = Fake::new(|plan, fired, _| fired.iter().all(|&f| f) && syscall_nth(plan) == 20);
    fake.calls = 100;
    fake.before_ready = 17;
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    assert_eq!((r.outcome, r.level), (Outcome::Reproduced, 2));
    let level2: Vec<&str> = r
        .attempts
        .iter()
        .filter(|a| a.level == 2)
        .map(|a| a.what.as_str())
        .collect();
    // #2, #4, #8, #16 stop the start-up (each a lower bound, doubled); #32 comes after it,
    // and its run counted the 17 calls before every node was ready: the walk goes on at #18
    let nths: Vec<&str> = level2
        .iter()
        .map(|w| w.rsplit_once("call #").unwrap().1)
        .collect();
    assert_eq!(
        nths,
        [
            "2",
            "4",
            "8",
            "16",
            "32",
            "18 (the first after start-up: a run made 17 such calls before every node was ready)",
            "19",
            "20"
        ],
        "{level2:?}"
    );
}

/// The path a plan's first syscall fault names.
fn syscall_path(plan: &FaultPlan) -> Option<&str> {
    plan.faults.iter().find_map(|f| match &f.action {
        PlannedAction::Syscall { path, .. } => path.as_deref(),
        _ => None,
    })
}

#[test]
fn a_path_that_matched_no_call_is_relaxed_step_by_step_and_the_report_says_which_form_matched() {
    let on = |path: &str| FaultGuess::Syscall {
        syscall: "pwritev".into(),
        errno: "ENOSPC".into(),
        path: Some(path.into()),
        raw_path: None,
        short: None,
        persistent: false,
    };
    // production's WAL on a filesystem of its own; the test bed keeps it in the data directory
    let wal = "{workdir}/walfs/pg_wal/xlogtemp.*";
    let gone = "{workdir}/gone/x.conf";
    let d = diagnosis(vec![
        candidate(on(gone), 0, 1, &[]),
        candidate(on(wal), 0, 2, &[]),
    ]);
    let mut fake = Fake::new(|plan, fired, _| {
        fired.iter().all(|&f| f) && syscall_path(plan) == Some("*/pg_wal/xlogtemp.*")
    });
    fake.unmatched_paths = [
        wal,
        "*/walfs/pg_wal/xlogtemp.*",
        gone,
        "*/gone/x.conf",
        "*/x.conf",
    ]
    .map(String::from)
    .to_vec();
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    assert_eq!(
        (r.outcome, r.level),
        (Outcome::Reproduced, 1),
        "{:?}",
        lines.0.borrow()
    );
    let whats: Vec<&str> = r.attempts.iter().map(|a| a.what.as_str()).collect();
    // the check, both at level 1, the first one's two looser forms (neither matched), then
    // the second one's: production's directories anywhere, then the last one, which matched
    assert_eq!(r.runs_to_first, Some(7), "{whats:?}");
    assert!(
        whats[3].starts_with("pwritev failing with ENOSPC (*/gone/x.conf, relaxed from production's {workdir}/gone/x.conf) on db1"),
        "{whats:?}"
    );
    assert!(
        whats[5].contains("(*/walfs/pg_wal/xlogtemp.*, relaxed from"),
        "{whats:?}"
    );
    assert!(
        whats[6].contains("(*/pg_wal/xlogtemp.*, relaxed from"),
        "{whats:?}"
    );
    let schedule = r.schedule.unwrap().to_toml();
    assert!(schedule.contains("path = \"*/pg_wal/xlogtemp.*\""), "{schedule}");
    assert!(
        r.chosen[0].contains("on the path */pg_wal/xlogtemp.*: production's {workdir}/walfs/pg_wal/xlogtemp.* matched no call on the test bed"),
        "{:?}",
        r.chosen
    );
}

#[test]
fn a_path_none_of_whose_forms_matched_is_not_walked_at_level_2() {
    let gone = FaultGuess::Syscall {
        syscall: "openat".into(),
        errno: "ENOENT".into(),
        path: Some("{workdir}/gone/x.conf".into()),
        raw_path: None,
        short: None,
        persistent: false,
    };
    let d = diagnosis(vec![candidate(gone, 0, 1, &[])]);
    let mut fake = Fake::new(|_, _, _| false);
    fake.unmatched_paths = ["{workdir}/gone/x.conf", "*/gone/x.conf", "*/x.conf"]
        .map(String::from)
        .to_vec();
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    assert_eq!(r.runs, 4, "the check, level 1, its two looser forms");
    assert!(
        lines.0.borrow().iter().any(|l| l.contains(
            "level 2 skips openat failing with ENOENT ({workdir}/gone/x.conf) on db1: its path matched no call at level 1, nor did its looser forms"
        )),
        "{:?}",
        lines.0.borrow()
    );
}

#[test]
fn an_attempt_that_cannot_start_is_run_once_more_then_stops_the_search_with_its_error() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &[]), candidate(crash(), 1, 2, &[])]);
    let mut fake = Fake::new(|plan, _, _| !plan.is_empty());
    fake.breaks =
        Box::new(|plan, _| (!plan.is_empty()).then(|| Err("reproducer (deleted): No such file".into())));
    let lines = Lines::default();
    let (r, out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    let error = r.error.clone().expect("the search stopped on an error");
    assert!(
        error.starts_with("attempt 2 could not run, twice: reproducer (deleted)"),
        "{error}"
    );
    let Outcome::Missed(why) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(
        why.starts_with("stopped: attempt 2 could not run, twice"),
        "{why}"
    );
    assert_eq!(
        fake.runs(),
        3,
        "the check, the attempt and its second try; nothing after"
    );
    assert_eq!(r.runs, 1, "runs that did not run are not counted");
    let last = r.attempts.last().unwrap();
    assert!(
        !last.bug && last.note.as_deref().unwrap().starts_with("not run: "),
        "{last:?}"
    );
    assert!(
        lines.0.borrow().iter().any(|l| l.contains(
            "the attempt could not run (reproducer (deleted): No such file): running it once more"
        )),
        "{:?}",
        lines.0.borrow()
    );
    assert!(out.path().join("attempts.json").exists());
}

#[test]
fn a_confirmation_or_replay_run_that_cannot_start_is_never_counted_as_bug_no() {
    let d = diagnosis(vec![candidate(crash(), 0, 1, &[])]);
    // runs 1 the check, 2 the attempt, 3.. its confirmation: the 3rd of those cannot start
    let mut fake = Fake::new(|plan, _, _| !plan.is_empty());
    fake.breaks = Box::new(|_, run| (run == 5 || run == 6).then(|| Err("cannot start".into())));
    let r = search(&mut fake, &d, 150).0.unwrap();
    let conf = r.confirmation.unwrap();
    assert_eq!((conf.bugs, conf.runs, conf.met), (2, 2, false), "{conf:?}");
    assert!(
        r.error.as_deref().unwrap().starts_with("confirmation run 3 of "),
        "{:?}",
        r.error
    );
    assert!(r.replay.is_none());
    // confirmed (runs 3-9), then the replay's 3rd run (12, and 13 once more) cannot start
    let mut fake = Fake::new(|plan, _, _| !plan.is_empty());
    fake.breaks = Box::new(|_, run| (run == 12 || run == 13).then(|| Err("cannot start".into())));
    let r = search(&mut fake, &d, 150).0.unwrap();
    let replay = r.replay.unwrap();
    assert_eq!(
        (replay.bugs, replay.runs, replay.met),
        (2, 2, false),
        "{replay:?}"
    );
    assert!(
        r.error.as_deref().unwrap().starts_with("replay run 3 of "),
        "{:?}",
        r.error
    );
    let Outcome::Missed(why) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(why.starts_with("stopped: replay run 3"), "{why}");
}

/// A flush of the redo log that failed in production 1 s after the node was ready.
fn failed_flush(since_ready_ms: Option<u64>) -> Candidate {
    let guess = FaultGuess::Syscall {
        syscall: "fdatasync".into(),
        errno: "EIO".into(),
        path: Some("{workdir}/db/redo.log".into()),
        raw_path: None,
        short: None,
        persistent: false,
    };
    let mut c = candidate(guess, 0, 1, &[]);
    c.evidence.since_ready_ms = since_ready_ms;
    c
}

/// The node flushes its redo log once while it starts (a failure there stops it before it
/// is ready) and 50 times while it serves; any of those failing aborts it: the bug.
fn flushing_node() -> Fake {
    let mut fake = Fake::new(|plan, fired, _| {
        plan.faults
            .iter()
            .zip(fired)
            .any(|(f, &fired)| fired && call_from_start(f, 1) > 1)
    });
    fake.calls = 51;
    fake.before_ready = 1;
    fake
}

#[test]
fn a_first_call_that_failed_during_start_up_moves_the_next_try_past_ready() {
    let d = diagnosis(vec![failed_flush(Some(1000))]);
    let fake = flushing_node();
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    let whats: Vec<&str> = r.attempts.iter().map(|a| a.what.as_str()).collect();
    // the check, the first flush (start-up: no node got ready), the first after ready
    assert_eq!(r.runs_to_first, Some(3), "{whats:?}");
    assert_eq!(r.first_bug_level, Some(1), "level 1's try past start-up");
    assert!(
        whats[2].contains("past start-up: the first call after every node was ready: production's failure came 1.00 s after its node's start-up"),
        "{whats:?}"
    );
    assert_eq!((r.outcome, r.level), (Outcome::Reproduced, 2));
    let schedule = r.schedule.unwrap().to_toml();
    assert!(
        schedule.contains("after_ready = true") && !schedule.contains("nth = 2"),
        "{schedule}"
    );
    assert!(
        r.chosen[0].contains("at the first matching call once every node was ready"),
        "{:?}",
        r.chosen
    );
}

#[test]
fn start_up_calls_are_tried_when_production_s_failure_was_at_start_up() {
    // production's flush failed while its node started: no try past ready; the walk counts
    // from the node's start, the start-up's calls included
    let d = diagnosis(vec![failed_flush(None)]);
    let fake = flushing_node();
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    assert!(
        r.attempts.iter().all(|a| !a.schedule.contains("after_ready")),
        "{:?}",
        lines.0.borrow()
    );
    assert_eq!((r.outcome, r.level), (Outcome::Reproduced, 2));
}

#[test]
fn the_nth_call_after_ready_is_where_production_s_time_and_the_rate_put_it() {
    // a call without a path: 50 per second fault-free, production's failure 1.2 s after
    // start-up: call #60 after ready; the bug is the 59th after ready (the 62nd from start)
    let mut c = candidate(syscall("write", "ECONNRESET"), 0, 1, &[]);
    c.evidence.since_ready_ms = Some(1200);
    c.evidence.calls_per_s = Some((50.0, 30.0));
    let d = diagnosis(vec![c]);
    let mut fake = Fake::new(|plan, fired, _| {
        plan.faults
            .iter()
            .zip(fired)
            .any(|(f, &fired)| fired && call_from_start(f, 3) == 62)
    });
    fake.calls = 200;
    fake.before_ready = 3;
    let lines = Lines::default();
    let (r, _out) = search_with_progress(&fake, &d, 150, 1, &lines);
    let r = r.unwrap();
    let whats: Vec<&str> = r.attempts.iter().map(|a| a.what.as_str()).collect();
    // the check, call #1 (start-up: no node ready), #60 after ready, then the walk: 61, 59
    assert_eq!(r.runs_to_first, Some(5), "{whats:?}");
    assert_eq!(r.first_bug_level, Some(2), "the walk of level 2");
    assert!(
        whats[2].contains("past start-up: call #60 after every node was ready"),
        "{whats:?}"
    );
    assert!(
        whats[3].ends_with("call #61 after every node was ready"),
        "{whats:?}"
    );
    assert!(
        whats[4].ends_with("call #59 after every node was ready"),
        "{whats:?}"
    );
    assert_eq!((r.outcome, r.level), (Outcome::Reproduced, 2));
}
