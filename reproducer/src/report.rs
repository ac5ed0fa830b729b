//! What `reproducer reproduce` leaves behind: schedule.toml (replayable), report.md (the
//! production timeline, the diagnosis, the faults chosen and why, the causal chain from the
//! fault to the failure, the testbed vs production — first when no schedule was found —,
//! every attempt, the final rate with its interval), all written
//! atomically.
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use tracedump::event::What;

use crate::analysis::chain::{self, Chain};
use crate::analysis::diagnose::{self, Diagnosis, FaultGuess, Verdict};
use crate::analysis::drift::{self, Drift};
use crate::analysis::timeline::{TimedEvent, Timeline};
use crate::model::scenario::Scenario;
use crate::model::schedule::{Action, Schedule};
use crate::search::attempts::Attempt;
use crate::search::{Outcome, SearchResult};

/// Lines of other events shown before the first symptom (or the end of the window); the
/// events the diagnosis used are shown wherever they are.
const TIMELINE_EVENTS: usize = 40;

/// The machine-readable outcome (result.json), one row of the bug benchmark's table.
#[derive(Serialize)]
pub struct Summary {
    pub reproduced: bool,
    pub why_stopped: Option<String>,
    pub faults: String,
    /// the level of the schedule found (1–3); none when nothing reproduced the bug
    pub level: Option<u8>,
    /// the result: runs with the bug of the independent replay of the accepted schedule
    /// (of the search's own test when nothing was accepted)
    pub bugs: u32,
    pub confirm_runs: u32,
    pub rate_low: f64,
    pub rate_high: f64,
    /// the search's sequential test of the schedule (its runs are in `runs`; the replay's are not)
    pub search_bugs: u32,
    pub search_confirm_runs: u32,
    pub interrupted: bool,
    /// the search stopped on a run that could not run, twice: its error
    pub error: Option<String>,
    pub schedules: u32,
    pub runs: u32,
    pub runs_to_first_bug: Option<u32>,
    /// the level of the search at that run (above `level`: a search that wasted runs)
    pub first_bug_level: Option<u8>,
    /// runs until the target was met; the rest were minimization
    pub runs_to_confirmed: Option<u32>,
    pub seconds: f64,
    /// runs side by side at most (`--jobs`)
    pub jobs: usize,
    /// runs made side by side that the search did not need (not in `runs`)
    pub surplus_runs: u32,
    /// failed-syscall signatures the profile showed to be benign, of all in the dumps
    pub failures_removed: usize,
    pub failures_total: usize,
}

/// The faults in the paper's notation: "SCF(write)", "ND + PS(Crash)*2"; a short or
/// persistent syscall fault says so: "SCF(pwrite64, short+persistent)".
pub fn faults_notation(s: &Schedule) -> String {
    let mut parts: Vec<(String, u32)> = Vec::new();
    for f in &s.faults {
        let name = match &f.action {
            Action::Syscall {
                syscall,
                short,
                until,
                ..
            } => {
                let shape: Vec<&str> = [(short.is_some(), "short"), (until.is_some(), "persistent")]
                    .iter()
                    .filter_map(|&(on, name)| on.then_some(name))
                    .collect();
                match shape.is_empty() {
                    true => format!("SCF({syscall})"),
                    false => format!("SCF({syscall}, {})", shape.join("+")),
                }
            }
            Action::Crash { .. } => "PS(Crash)".into(),
            Action::Pause { .. } => "PS(Pause)".into(),
            Action::Partition { .. } => "ND".into(),
        };
        match parts.last_mut() {
            Some((last, n)) if *last == name => *n += 1,
            _ => parts.push((name, 1)),
        }
    }
    parts
        .iter()
        .map(|(n, k)| if *k > 1 { format!("{n}*{k}") } else { n.clone() })
        .collect::<Vec<_>>()
        .join(" + ")
}

pub fn summary(d: &Diagnosis, r: &SearchResult) -> Summary {
    let scf: Vec<_> = d
        .candidates
        .iter()
        .filter(|c| matches!(c.guess, diagnose::FaultGuess::Syscall { .. }))
        .collect();
    let c = r.rate();
    let search = r.confirmation;
    Summary {
        reproduced: matches!(r.outcome, Outcome::Reproduced),
        why_stopped: match &r.outcome {
            Outcome::Missed(w) => Some(w.clone()),
            Outcome::Reproduced => None,
        },
        faults: r.schedule.as_ref().map(faults_notation).unwrap_or_default(),
        level: match (&r.outcome, &r.schedule) {
            (Outcome::Reproduced, Some(s)) => Some(crate::search::level_of(s)),
            _ => None,
        },
        bugs: c.map(|c| c.bugs).unwrap_or(0),
        confirm_runs: c.map(|c| c.runs).unwrap_or(0),
        rate_low: c.map(|c| c.low).unwrap_or(0.0),
        rate_high: c.map(|c| c.high).unwrap_or(0.0),
        search_bugs: search.map(|c| c.bugs).unwrap_or(0),
        search_confirm_runs: search.map(|c| c.runs).unwrap_or(0),
        interrupted: r.interrupted,
        error: r.error.clone(),
        schedules: r.schedules_tried,
        runs: r.runs,
        runs_to_first_bug: r.runs_to_first,
        first_bug_level: r.first_bug_level,
        runs_to_confirmed: r.runs_to_confirmed,
        seconds: r.seconds,
        jobs: r.jobs,
        surplus_runs: r.surplus_runs,
        failures_removed: scf
            .iter()
            .filter(|c| c.verdict == diagnose::Verdict::Benign)
            .count(),
        failures_total: scf.len(),
    }
}

pub fn schedule_text(scenario: &Scenario, result: &SearchResult) -> Option<String> {
    let schedule = result.schedule.as_ref()?;
    let status = match (&result.outcome, &result.rate()) {
        (Outcome::Reproduced, Some(c)) => format!("reproduces the bug {}", c.summary()),
        (_, Some(c)) => format!("best found, BELOW the target: {}", c.summary()),
        _ => "never made the bug happen".into(),
    };
    Some(format!(
        "# generated by `reproducer reproduce` for scenario {}: {status}\n# replay: reproducer replay --scenario SCENARIO --schedule THIS_FILE\n{}",
        scenario.name,
        schedule.to_toml()
    ))
}

/// One line of the timeline: an event, or a run of alike events folded into one.
struct Line<'a> {
    first: &'a TimedEvent,
    last_ns: u64,
    count: usize,
    /// the diagnosis used it (a fault, a symptom, evidence or context): always shown
    used: bool,
    key: String,
}

/// Whether the diagnosis used `e`: process states and network gaps (faults, symptoms and the
/// evidence set aside), failures of a signature it did not find benign, context functions.
fn used_by_diagnosis(e: &TimedEvent, d: &Diagnosis) -> bool {
    match &e.event.what {
        What::ProcessState(_) | What::NetworkGap(_) => true,
        What::SyscallFailure(f) => d.candidates.iter().any(|c| {
            c.verdict != Verdict::Benign
                && c.node == e.node
                && matches!(&c.guess, FaultGuess::Syscall { syscall, errno, .. } if *syscall == f.syscall && Some(errno) == f.errno.as_ref())
        }),
        What::ShortIo(s) => d.candidates.iter().any(|c| {
            c.verdict != Verdict::Benign
                && c.node == e.node
                && matches!(&c.guess, FaultGuess::Syscall { syscall, short: Some(_), .. } if *syscall == s.syscall)
        }),
        What::Function(hit) => hit.spec().is_some_and(|spec| d.causes().any(|c| c.preceding_functions.iter().take(5).any(|p| *p == spec))),
    }
}

/// Alike events fold: the same node and the same text up to numbers (fds, counts, times).
/// Gaps and process states never fold: each is evidence of its own.
fn fold_key(e: &TimedEvent) -> String {
    let text = e.event.describe();
    let text = match &e.event.what {
        What::SyscallFailure(_) | What::ShortIo(_) | What::Function(_) => {
            text.chars().filter(|c| !c.is_ascii_digit()).collect()
        }
        _ => format!("{text}@{}", e.at_ns),
    };
    format!("{:?} {text}", e.node)
}

fn timeline_lines<'a>(t: &'a Timeline, d: &Diagnosis, until: u64) -> Vec<Line<'a>> {
    let mut lines: Vec<Line> = Vec::new();
    for e in t
        .events
        .iter()
        .filter(|e| e.node.is_some() && e.at_ns <= until + 2_000_000_000)
    {
        let key = fold_key(e);
        let used = used_by_diagnosis(e, d);
        match lines.last_mut() {
            Some(l) if l.key == key && l.used == used => {
                l.count += 1;
                l.last_ns = e.at_ns;
            }
            _ => lines.push(Line {
                first: e,
                last_ns: e.at_ns,
                count: 1,
                used,
                key,
            }),
        }
    }
    let cut = lines
        .iter()
        .rposition(|l| l.first.at_ns <= until)
        .map(|i| i + 1)
        .unwrap_or(lines.len());
    let from = cut.saturating_sub(TIMELINE_EVENTS);
    lines
        .into_iter()
        .enumerate()
        .filter(|(i, l)| l.used || *i >= from)
        .map(|(_, l)| l)
        .collect()
}

pub(crate) fn timeline_section(out: &mut String, t: &Timeline, d: &Diagnosis, scenario: &Scenario) {
    let until = d.symptoms.first().map(|s| s.at_ns).unwrap_or(d.end_ns);
    let lines = timeline_lines(t, d, until);
    let _ = writeln!(
        out,
        "## Production timeline around the failure
"
    );
    let _ = writeln!(
        out,
        "Every event the diagnosis used (faults, symptoms, network gaps, failures it did not find benign, context functions) and the last {TIMELINE_EVENTS} lines of the others, up to the first symptom and the 2 s after it; runs of alike events are folded into one line (×N). Times are relative to {}.\n",
        match d.symptoms.is_empty() {
            true => "the dump (the diagnosis found no symptom)",
            false => "the first symptom",
        }
    );
    let _ = writeln!(out, "```");
    // with dumps of several hosts, each line says whose dump it is in: "replica@db2"
    let place = |e: &TimedEvent| {
        let node = e.node.map(|n| scenario.nodes[n].name.as_str()).unwrap_or("?");
        match t.dumps.len() > 1 {
            true => format!("{node}@{}", e.event.host),
            false => node.to_string(),
        }
    };
    let width = lines
        .iter()
        .map(|l| place(l.first).len())
        .max()
        .unwrap_or(0)
        .max(10);
    for l in &lines {
        let e = l.first;
        let dt = e.at_ns as i128 - until as i128;
        let node = place(e);
        let folded = if l.count > 1 {
            format!(
                "  (×{} over {:.1} s)",
                l.count,
                (l.last_ns - e.at_ns) as f64 / 1e9
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{:>+10.3} s  {:<width$} {}{folded}",
            dt as f64 / 1e9,
            node,
            e.event.describe()
        );
    }
    let _ = writeln!(out, "```\n");
}

fn attempts_section(out: &mut String, result: &SearchResult, base: &Path) {
    let _ = writeln!(out, "## Attempts\n");
    let _ = writeln!(
        out,
        "| # | level | schedule | bug | fired | confirmation | directory | timeline |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for a in &result.attempts {
        let level = if a.level == 0 {
            "-".to_string()
        } else {
            a.level.to_string()
        };
        let conf = a.confirmation.map(|c| c.summary()).unwrap_or_default();
        let mut dir = a.dir.strip_prefix(base).unwrap_or(&a.dir).display().to_string();
        if a.runs_pruned {
            dir.push_str(" (runs removed)");
        }
        let bug = match &a.note {
            Some(n) => format!("no — {}", n.replace('|', "/").replace('\n', " ")),
            None => (if a.bug { "yes" } else { "no" }).to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {level} | {} | {bug} | {} | {conf} | {dir} | {} |",
            a.number,
            a.what.replace('|', "/"),
            a.fired,
            timeline_links(a, base)
        );
    }
    if result.attempts.iter().any(|a| !a.timelines.is_empty()) {
        let _ = writeln!(
            out,
            "\nEach kept run's trace is a timeline (`trace/{}` in the run's directory; `run` is the attempt's run, `confirm-NN` its confirmation runs): open it in the Perfetto UI (ui.perfetto.dev, \"Open trace file\") or query it with trace_processor.",
            crate::search::attempts::TIMELINE_FILE
        );
    }
    if !result.pruned.attempts.is_empty() {
        let _ = writeln!(
            out,
            "\nRun directories of {} attempts were removed ({:.1} MB) to bound the disk: kept are the best schedule's, the first bug's, the fault-free check's and the last {} attempts', within `--keep-bytes`.",
            result.pruned.attempts.len(),
            result.pruned.bytes as f64 / 1e6,
            crate::search::retention::KEEP_LAST
        );
    }
    out.push('\n');
}

/// Links to an attempt's timelines, relative to the report, named by the run they show.
fn timeline_links(a: &Attempt, base: &Path) -> String {
    a.timelines
        .iter()
        .map(|t| {
            let rel = t.strip_prefix(base).unwrap_or(t);
            let label = match t.strip_prefix(&a.dir).ok().and_then(|r| r.components().next()) {
                Some(first) if first.as_os_str().to_string_lossy().starts_with("confirm-") => {
                    first.as_os_str().to_string_lossy().into_owned()
                }
                _ => "run".to_string(),
            };
            format!("[{label}]({})", rel.display())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn render(
    scenario: &Scenario,
    t: &Timeline,
    d: &Diagnosis,
    result: &SearchResult,
    out_dir: &Path,
    chains: &[Chain],
    drift: Option<&Drift>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Reproduction report: {}\n", scenario.name);
    let first = result
        .runs_to_first
        .map(|r| format!(", first bug at run {r}"))
        .unwrap_or_default();
    match (&result.outcome, &result.rate()) {
        (Outcome::Reproduced, Some(c)) => {
            let _ = writeln!(
                out,
                "**Reproduced** at {} — level {}, {} schedules, {} runs{first}, {:.1} min.\n",
                c.summary(),
                result.level,
                result.schedules_tried,
                result.runs,
                result.seconds / 60.0
            );
            if let (Some(_), Some(s)) = (result.replay, result.confirmation) {
                let _ = writeln!(out, "The rate is that of an independent replay of the accepted schedule ({} fresh runs, not counted in the search's); the search's own sequential test had given {}.\n", c.runs, s.summary());
            }
        }
        (Outcome::Missed(why), _) => {
            let _ = writeln!(
                out,
                "**Not reproduced at the target rate**: {why}. {} schedules, {} runs{first}, {:.1} min.\n",
                result.schedules_tried,
                result.runs,
                result.seconds / 60.0
            );
        }
        _ => {}
    }
    // a failed search blames the testbed first when it is not production
    let drift_first = drift.filter(|d| result.schedule.is_none() && d.differences().next().is_some());
    if let Some(d) = drift_first {
        out.push_str(&drift::markdown(d));
    }
    if result.jobs > 1 {
        let _ = writeln!(
            out,
            "Runs went up to {} side by side (`--jobs {}`); the search's choices and numbers are those of one at a time. {} runs made ahead of need were not used (see `surplus` in attempts.json).\n",
            result.jobs, result.jobs, result.surplus_runs
        );
    }
    if result.schedule.is_some() {
        let _ = writeln!(
            out,
            "Replay: `reproducer replay --scenario SCENARIO --schedule {}`\n",
            out_dir.join("schedule.toml").display()
        );
    }
    timeline_section(&mut out, t, d, scenario);
    let _ = writeln!(
        out,
        "## Diagnosis\n\n```\n{}```\n",
        diagnose::render(d, Some(scenario))
    );
    let _ = writeln!(out, "## Faults chosen and why\n");
    match &result.schedule {
        Some(s) => {
            for (i, why) in result.chosen.iter().enumerate() {
                let _ = writeln!(out, "{}. {why}", i + 1);
            }
            let _ = writeln!(out, "\n```toml\n{}```\n", s.to_toml());
            let _ = writeln!(out, "Faults are injected in this order; each waits for the one before it. `after_functions` are uprobes the node must enter (in order) after the previous fault; `offset` places the last one inside its function; `nth` counts matching calls.\n");
        }
        None => {
            let _ = writeln!(out, "No schedule made the bug happen.\n");
        }
    }
    if !result.minimized.is_empty() {
        let _ = writeln!(out, "Minimization removed what the bug did not need:\n");
        for m in &result.minimized {
            let _ = writeln!(out, "- {}", m.trim_start_matches("minimize: "));
        }
        out.push('\n');
    }
    if result.schedule.is_some() {
        chain::section(&mut out, chains, scenario);
    }
    if let Some(d) = drift.filter(|_| drift_first.is_none()) {
        out.push_str(&drift::markdown(d));
    }
    out.push_str(&crate::search::coverage::markdown(
        &result.ranking,
        &result.groups,
    ));
    attempts_section(&mut out, result, out_dir);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnose::{Candidate, FaultGuess, Verdict};
    use crate::search::confirm::Confirmation;

    const SCENARIO: &str = "name = \"kv\"\n[[nodes]]\nname = \"db1\"\ncommand = [\"kv\"]\n[[nodes]]\nname = \"db2\"\ncommand = [\"kv\"]\n\
        [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";
    const SCHEDULE: &str = "[[faults]]\nnode = \"db1\"\nkind = \"crash\"\n[[faults]]\nnode = \"db2\"\nkind = \"crash\"\n\
        [[faults]]\nnode = \"db1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"EIO\"\nafter_functions = [\"flush\"]\n";

    fn result(outcome: Outcome) -> SearchResult {
        let confirmation = Confirmation {
            bugs: 7,
            runs: 7,
            met: true,
            low: 0.64,
            high: 1.0,
        };
        SearchResult {
            outcome,
            schedule: Some(Schedule::parse(SCHEDULE, "s").unwrap()),
            confirmation: Some(confirmation),
            level: 2,
            attempts: vec![Attempt {
                number: 1,
                level: 1,
                what: "crash | pause".into(),
                schedule: String::new(),
                bug: true,
                fired: "2/2".into(),
                confirmation: Some(confirmation),
                dir: "/out/attempts/001".into(),
                note: None,
                runs_pruned: false,
                surplus: Vec::new(),
                timelines: vec![
                    "/out/attempts/001/reproducer-run-a/trace/trace.perfetto".into(),
                    "/out/attempts/001/confirm-01/reproducer-run-b/trace/trace.perfetto".into(),
                ],
            }],
            runs: 12,
            schedules_tried: 3,
            runs_to_first: Some(4),
            first_bug_level: Some(1),
            runs_to_confirmed: Some(11),
            minimized: vec!["minimize: without fault 4 (pause of db2)".into()],
            chosen: vec!["crash of db1 — as soon as it is due".into()],
            seconds: 90.0,
            replay: None,
            interrupted: false,
            pruned: Default::default(),
            surplus_runs: 0,
            jobs: 1,
            ranking: Vec::new(),
            groups: Vec::new(),
            error: None,
        }
    }

    fn diagnosis() -> Diagnosis {
        let scf = |verdict| Candidate {
            guess: FaultGuess::Syscall {
                syscall: "read".into(),
                errno: "EIO".into(),
                path: None,
                raw_path: None,
                short: None,
                persistent: false,
            },
            node: Some(0),
            who: "db1".into(),
            pid: 1,
            host: "h".into(),
            dump: 0,
            at_ns: 0,
            occurrences: 1,
            profile_per_s: None,
            burst: 1,
            preceding_functions: Vec::new(),
            routine: false,
            verdict,
            why: String::new(),
            evidence: Default::default(),
            score: Default::default(),
            silence: None,
        };
        Diagnosis {
            candidates: vec![scf(Verdict::Benign), scf(Verdict::Cause)],
            symptoms: Vec::new(),
            start_ns: 0,
            end_ns: 0,
            unmapped_events: 0,
            notes: Vec::new(),
            dumps: Vec::new(),
        }
    }

    #[test]
    fn notation_groups_repeated_faults() {
        assert_eq!(
            faults_notation(&Schedule::parse(SCHEDULE, "s").unwrap()),
            "PS(Crash)*2 + SCF(write)"
        );
        assert_eq!(faults_notation(&Schedule::default()), "");
        let full = "[[faults]]\nnode = \"db1\"\nkind = \"syscall\"\nsyscall = \"pwrite64\"\nerrno = \"ENOSPC\"\nshort = 400\nuntil = \"end\"\n";
        assert_eq!(
            faults_notation(&Schedule::parse(full, "s").unwrap()),
            "SCF(pwrite64, short+persistent)"
        );
    }

    #[test]
    fn summary_is_one_benchmark_row() {
        let s = summary(&diagnosis(), &result(Outcome::Reproduced));
        assert!(s.reproduced && s.why_stopped.is_none());
        assert_eq!(
            (s.level, s.bugs, s.confirm_runs, s.runs, s.schedules),
            (Some(2), 7, 7, 12, 3)
        );
        assert_eq!((s.failures_removed, s.failures_total), (1, 2));
        let s = summary(&diagnosis(), &result(Outcome::Missed("budget".into())));
        assert_eq!((s.reproduced, s.why_stopped.as_deref()), (false, Some("budget")));
        assert_eq!(s.level, None, "no level without a schedule that reproduced");
    }

    #[test]
    fn report_and_schedule_render_every_section() {
        let scenario = Scenario::parse(SCENARIO, "t").unwrap();
        let r = result(Outcome::Reproduced);
        let text = render(
            &scenario,
            &Timeline::default(),
            &diagnosis(),
            &r,
            Path::new("/out"),
            &[],
            None,
        );
        for needle in [
            "# Reproduction report: kv",
            "**Reproduced** at 7/7",
            "level 2, 3 schedules, 12 runs, first bug at run 4, 1.5 min",
            "Replay: `reproducer replay --scenario SCENARIO --schedule /out/schedule.toml`",
            "## Production timeline",
            "## Diagnosis",
            "1. crash of db1 — as soon as it is due",
            "```toml\n[[faults]]\nnode = \"db1\"",
            "- without fault 4 (pause of db2)",
            "| 1 | 1 | crash / pause | yes | 2/2 |",
            "| attempts/001 | [run](attempts/001/reproducer-run-a/trace/trace.perfetto) [confirm-01](attempts/001/confirm-01/reproducer-run-b/trace/trace.perfetto) |",
            "open it in the Perfetto UI",
            "## How the fault led to the failure\n\nNo chain",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
        let missed = render(
            &scenario,
            &Timeline::default(),
            &diagnosis(),
            &result(Outcome::Missed("the budget is spent".into())),
            Path::new("/out"),
            &[],
            None,
        );
        assert!(
            missed.contains("**Not reproduced at the target rate**: the budget is spent."),
            "{missed}"
        );
        let toml = schedule_text(&scenario, &r).unwrap();
        assert!(
            toml.starts_with("# generated by `reproducer reproduce` for scenario kv: reproduces the bug 7/7"),
            "{toml}"
        );
        assert_eq!(
            Schedule::parse(&toml, "again").unwrap(),
            Schedule::parse(SCHEDULE, "s").unwrap(),
            "the file replays"
        );
    }

    #[test]
    fn a_failed_search_shows_the_testbed_s_differences_first() {
        use crate::analysis::drift::{Kind, LineChange, Row, Verdict};
        let scenario = Scenario::parse(SCENARIO, "t").unwrap();
        let drift = Drift {
            testbed: "attempts/001/reproducer-run-a".into(),
            rows: vec![Row {
                node: "db1".into(),
                program: "kv".into(),
                kind: Kind::Config,
                name: "kv.conf".into(),
                verdict: Verdict::Different,
                production: Some("/etc/kv.conf".into()),
                testbed: Some("/w/kv.conf".into()),
                detail: "1 line differs; paired by argument 1".into(),
                lines: vec![LineChange {
                    production: Some("fsync everysec".into()),
                    testbed: Some("fsync always".into()),
                }],
            }],
            notes: Vec::new(),
        };
        let render_with = |outcome| {
            let mut r = result(outcome);
            if matches!(r.outcome, Outcome::Missed(_)) {
                r.schedule = None;
            }
            render(
                &scenario,
                &Timeline::default(),
                &diagnosis(),
                &r,
                Path::new("/out"),
                &[],
                Some(&drift),
            )
        };
        let missed = render_with(Outcome::Missed("the budget is spent".into()));
        let (section, timeline) = (
            missed.find("## Testbed vs production").unwrap(),
            missed.find("## Production timeline").unwrap(),
        );
        assert!(section < timeline, "first when the search failed:\n{missed}");
        assert!(
            missed.contains(
                "the testbed's kv.conf (node db1) differs from production's: `fsync always` vs `everysec`"
            ),
            "{missed}"
        );
        assert!(missed.contains("- fsync everysec\n+ fsync always"), "{missed}");
        let reproduced = render_with(Outcome::Reproduced);
        let section = reproduced.find("## Testbed vs production").unwrap();
        assert!(
            section > reproduced.find("## How the fault led").unwrap(),
            "{reproduced}"
        );
    }

    #[test]
    fn the_replay_is_the_result_and_the_search_s_test_is_kept_apart() {
        let scenario = Scenario::parse(SCENARIO, "t").unwrap();
        let mut r = result(Outcome::Reproduced);
        r.replay = Some(Confirmation {
            bugs: 9,
            runs: 10,
            met: true,
            low: 0.6,
            high: 0.98,
        });
        r.attempts[0].note = Some("node db1 exited (exit status: 1) before it was ready; fault 1 fired in pid 7 before it was ready".into());
        let s = summary(&diagnosis(), &r);
        assert_eq!(
            (s.bugs, s.confirm_runs, s.search_bugs, s.search_confirm_runs),
            (9, 10, 7, 7)
        );
        let text = render(
            &scenario,
            &Timeline::default(),
            &diagnosis(),
            &r,
            Path::new("/out"),
            &[],
            None,
        );
        assert!(text.contains("**Reproduced** at 9/10"), "{text}");
        assert!(
            text.contains("independent replay of the accepted schedule (10 fresh runs"),
            "{text}"
        );
        assert!(
            text.contains(
                "| no — node db1 exited (exit status: 1) before it was ready; fault 1 fired in pid 7"
            ),
            "{text}"
        );
        assert!(schedule_text(&scenario, &r)
            .unwrap()
            .contains("reproduces the bug 9/10"));
    }

    #[test]
    fn the_timeline_shows_the_evidence_and_folds_the_noise() {
        use crate::analysis::diagnose::diagnose;
        use tracedump::event::{Event, NetworkGap, ProcessChange, State, SyscallFailure};
        let text = "name = \"kv\"\n[[nodes]]\nname = \"db1\"\ncommand = [\"kv\"]\naddress = \"10.7.0.1\"\n[[nodes]]\nname = \"db2\"\ncommand = [\"kv\"]\naddress = \"10.7.0.2\"\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";
        let scenario = Scenario::parse(text, "t").unwrap();
        let s = 1_000_000_000u64;
        let ev = |at_ns: u64, node: usize, what: What| TimedEvent {
            at_ns,
            node: Some(node),
            dump: 0,
            event: Event {
                ts_ns: at_ns,
                realtime_ns: at_ns,
                host: "h".into(),
                pid: 10 + node as u32,
                tid: 10,
                comm: "kv".into(),
                what,
            },
        };
        let mut events = vec![
            ev(
                10 * s,
                0,
                What::NetworkGap(NetworkGap {
                    local: Some("10.7.0.1:4000".parse().unwrap()),
                    peer: Some("10.7.0.2:6379".parse().unwrap()),
                    duration_ms: 5000,
                    packets: 9,
                    ongoing: false,
                    busy_ms: 0,
                    busy_packets: 0,
                    protocol: 6,
                    sent: None,
                    sent_before: None,
                }),
            ),
            ev(
                10 * s + s / 10,
                1,
                What::NetworkGap(NetworkGap {
                    local: Some("10.7.0.2:6379".parse().unwrap()),
                    peer: Some("10.7.0.1:4000".parse().unwrap()),
                    duration_ms: 4900,
                    packets: 9,
                    ongoing: false,
                    busy_ms: 0,
                    busy_packets: 0,
                    protocol: 6,
                    sent: None,
                    sent_before: None,
                }),
            ),
        ];
        // the Go runtime's futex noise, after the gap and up to the symptom
        for i in 0..80u64 {
            let f = SyscallFailure {
                syscall: "futex".into(),
                ret: -11,
                errno: Some("EAGAIN".into()),
                fd: None,
                path: None,
                peer: None,
            };
            events.push(ev(16 * s + i * s / 20, 0, What::SyscallFailure(f)));
        }
        events.push(ev(
            21 * s,
            0,
            What::ProcessState(ProcessChange {
                state: State::Exited { code: 1 },
                signal: None,
                sender: None,
                ongoing: false,
            }),
        ));
        events.sort_by_key(|e| e.at_ns);
        let t = Timeline {
            events,
            dumps: Vec::new(),
            functions: Vec::new(),
            environments: Vec::new(),
            flows: Vec::new(),
        };
        let d = diagnose(&t, Some(&scenario), None);
        let mut out = String::new();
        timeline_section(&mut out, &t, &d, &scenario);
        assert!(
            out.contains("10.7.0.1:4000 -> 10.7.0.2:6379 silent 5000 ms"),
            "the partition's evidence is shown: {out}"
        );
        assert!(out.contains("exited with code 1"), "{out}");
        let futex_lines = out.lines().filter(|l| l.contains("futex")).count();
        assert_eq!(futex_lines, 1, "the noise folds into one line: {out}");
        assert!(out.contains("(×80 over 4.0 s)"), "{out}");
        assert!(out.contains("Times are relative to the first symptom."), "{out}");
        let no_symptom = Diagnosis {
            symptoms: Vec::new(),
            ..d
        };
        let mut out = String::new();
        timeline_section(&mut out, &t, &no_symptom, &scenario);
        assert!(
            out.contains("Times are relative to the dump (the diagnosis found no symptom)."),
            "{out}"
        );
    }
}
