//! The diagnosis as text: symptoms, the candidates by score with the score's reasons and
//! what their node ran before, what was set aside (with its score) and why, and the notes.
use std::fmt::Write as _;

use super::{node_name, Candidate, Diagnosis, FaultGuess, Scenario, Verdict};

/// `who`, and with dumps of several hosts the host whose dump showed it: "replica@db2".
fn placed(d: &Diagnosis, who: &str, host: &str) -> String {
    if d.dumps.len() > 1 {
        format!("{who}@{host}")
    } else {
        who.to_string()
    }
}

/// A guess in words: "crash (SIGKILL)", "partition from db2 for 4100 ms".
fn describe(g: &FaultGuess, scenario: Option<&Scenario>) -> String {
    match g {
        FaultGuess::Syscall {
            syscall,
            errno,
            raw_path,
            short,
            persistent,
            ..
        } => format!(
            "{}{syscall} failed with {errno}{}{}",
            short
                .map(|b| format!("a short {syscall} ({b} bytes), then "))
                .unwrap_or_default(),
            if *persistent { " on every later call" } else { "" },
            raw_path.as_ref().map(|p| format!(" on {p}")).unwrap_or_default()
        ),
        FaultGuess::Crash { signal, .. } => format!("crash ({signal})"),
        FaultGuess::Pause { duration_ms, .. } => format!("pause of {duration_ms} ms"),
        FaultGuess::Partition {
            peer,
            duration_ms,
            one_way,
        } => {
            format!(
                "partition {} {} for {duration_ms} ms",
                if *one_way { "of its packets to" } else { "from" },
                node_name(scenario, *peer)
            )
        }
    }
}

/// A time relative to the end of the window: "-1.500 s".
fn rel(at_ns: u64, end_ns: u64) -> String {
    format!("-{:.3} s", end_ns.saturating_sub(at_ns) as f64 / 1e9)
}

/// The human-readable diagnosis (also the top of report.md).
pub fn render(d: &Diagnosis, scenario: Option<&Scenario>) -> String {
    let mut out = String::new();
    let span = (d.end_ns.saturating_sub(d.start_ns)) as f64 / 1e9;
    let _ = writeln!(
        out,
        "window: {span:.1} s of events; times are relative to the end of the window (the dump)"
    );
    if d.dumps.len() > 1 {
        let _ = writeln!(
            out,
            "dumps ({}), merged on wall-clock time (each dump's clock pair):",
            d.dumps.len()
        );
        for dump in &d.dumps {
            let nodes = match dump.nodes.is_empty() {
                true => String::new(),
                false => format!(", nodes: {}", dump.nodes.join(", ")),
            };
            let _ = writeln!(
                out,
                "  {}: {} — {} events{nodes}",
                dump.host,
                dump.path.display(),
                dump.events
            );
        }
    }
    let _ = writeln!(out, "symptoms ({}):", d.symptoms.len());
    for s in &d.symptoms {
        let _ = writeln!(
            out,
            "  {:>10}  {}: {}",
            rel(s.at_ns, d.end_ns),
            placed(d, &s.who, &s.host),
            s.what
        );
    }
    let causes: Vec<&Candidate> = d.causes().collect();
    let _ = writeln!(
        out,
        "fault candidates ({}), by score (highest first; the reasons below each):",
        causes.len()
    );
    for (i, c) in causes.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {:>2}. {:>10}  {}: {} — {}",
            i + 1,
            rel(c.at_ns, d.end_ns),
            placed(d, &c.who, &c.host),
            describe(&c.guess, scenario),
            c.why
        );
        let _ = writeln!(out, "      score {}", c.score.summary());
        if !c.preceding_functions.is_empty() {
            let names: Vec<&str> = c
                .preceding_functions
                .iter()
                .take(5)
                .map(|f| f.rsplit(':').next().unwrap_or(f))
                .collect();
            let _ = writeln!(out, "      after: {} (nearest first)", names.join(" <- "));
        }
    }
    let others: Vec<&Candidate> = d
        .candidates
        .iter()
        .filter(|c| c.verdict != Verdict::Cause)
        .collect();
    if !others.is_empty() {
        let _ = writeln!(
            out,
            "set aside ({}), by score: tried after the candidates above, alone, when the budget allows:",
            others.len()
        );
        for c in others {
            let what = match &c.guess {
                FaultGuess::Partition {
                    peer, duration_ms, ..
                } => {
                    format!("silence with {} for {duration_ms} ms", node_name(scenario, *peer))
                }
                g => describe(g, scenario),
            };
            let _ = writeln!(
                out,
                "      {:>10}  {}: {what} — {:?}: {} [score {}]",
                rel(c.at_ns, d.end_ns),
                placed(d, &c.who, &c.host),
                c.verdict,
                c.why,
                c.score.summary()
            );
        }
    }
    if d.unmapped_events > 0 {
        let _ = writeln!(
            out,
            "{} events of processes that are not scenario nodes were ignored",
            d.unmapped_events
        );
    }
    for n in &d.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}
