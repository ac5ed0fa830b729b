//! The report's "How the fault led to the failure" section: a chain per fault as a table.
use std::fmt::Write as _;

use super::{Chain, MAX_LINKS};
use crate::model::scenario::Scenario;

/// The section's title (the bug benchmark checks for it).
pub const TITLE: &str = "## How the fault led to the failure";

/// "+10.3 ms", "+1.20 s".
fn after(ns: u64) -> String {
    match ns {
        0 => "0".into(),
        n if n < 10_000_000_000 => format!("+{:.1} ms", n as f64 / 1e6),
        n => format!("+{:.2} s", n as f64 / 1e9),
    }
}

/// Writes the section: a chain per fault of the accepted schedule (none: the search
/// accepted no schedule, or no kept run showed a fault's event).
pub fn section(out: &mut String, chains: &[Chain], scenario: &Scenario) {
    let _ = writeln!(out, "{TITLE}\n");
    if chains.is_empty() {
        let _ = writeln!(out, "No chain: no kept run of the accepted schedule with the bug shows the fault's event (or no schedule was accepted).\n");
        return;
    }
    if chains.len() > 1 {
        let _ = writeln!(out, "Each fault of the schedule has its chain: the runs without the bug it is compared with are its own controls, the kept runs that did not have it (the fault-free check, minimization's runs that dropped it); a run that had it but not another fault the bug needs is no control of it.\n");
    }
    for c in chains {
        if chains.len() > 1 {
            let fault = c.links.first().map(|l| l.sig.clone());
            let _ = writeln!(
                out,
                "### Fault {}{}\n",
                c.fault + 1,
                fault
                    .map(|s| format!(": {} {}", scenario.nodes[s.node].name, s.sign))
                    .unwrap_or_default()
            );
        }
        chain_table(out, c, scenario);
    }
}

/// One fault's chain as a table, with what was left out.
fn chain_table(out: &mut String, c: &Chain, scenario: &Scenario) {
    let _ = writeln!(
        out,
        "The events that followed the injected fault in the runs where the bug happened and not (or at most a quarter as often) where it did not, by their median time after the fault (at most {MAX_LINKS}). Compared by node and signature (syscall, errno, normalized path or peer node, function, exit code or signal), not pids or raw paths. Counts: **reproduced** = runs of the accepted schedule with the bug whose trace shows the event after the fault (of {}); **without the bug** = kept runs where the bug did not happen and the fault was not injected that show it anywhere (of {}), and fault-free profile runs that show it (of {}; exits, kills and pauses are not in a profile); **production** = the time after production's own fault event in its dump.\n",
        c.reproduced_runs, c.other_runs, c.fault_free_runs
    );
    let _ = writeln!(out, "| # | node | event | after the fault | reproduced | without the bug (runs / fault-free) | production |");
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for (i, l) in c.links.iter().enumerate() {
        let prod = match (l.production_after_ns, c.production_fault) {
            (Some(ns), _) => after(ns),
            (None, true) => "not seen".into(),
            (None, false) => "-".into(),
        };
        let what = match l.fault {
            true => format!("{} (the fault)", l.sig.sign),
            false => l.sig.sign.to_string(),
        };
        let _ = writeln!(
            out,
            "| {i} | {} | {} | {} | {}/{} | {}/{} · {}/{} | {prod} |",
            scenario.nodes[l.sig.node].name,
            what.replace('|', "/"),
            after(l.after_ns),
            l.in_reproduced,
            c.reproduced_runs,
            l.in_other,
            c.other_runs,
            l.in_fault_free,
            c.fault_free_runs
        );
    }
    let nodes: std::collections::BTreeSet<usize> = c.links.iter().map(|l| l.sig.node).collect();
    let in_production = c.links.iter().filter(|l| l.production_after_ns.is_some()).count();
    let _ =
        writeln!(
        out,
        "\n{} links across {} node(s); production's dump shows {in_production} of them after its fault{}.",
        c.links.len(),
        nodes.len(),
        if c.production_fault { "" } else { " (its dump does not show the fault's event)" }
    );
    let names = |sigs: &[super::Signature]| {
        sigs.iter()
            .map(|s| format!("{} {}", scenario.nodes[s.node].name, s.sign))
            .collect::<Vec<_>>()
            .join("; ")
    };
    if !c.left_out.is_empty() {
        let _ = writeln!(
            out,
            "Left out as coincidental (as frequent without the bug): {}.",
            names(&c.left_out)
        );
    }
    if !c.routine.is_empty() {
        let _ = writeln!(
            out,
            "Left out as routine (fault-free runs make it at a comparable rate): {}.",
            names(&c.routine)
        );
    }
    if !c.flows.is_empty() {
        let _ = writeln!(out, "The timelines of the reproduced runs (`trace/trace.perfetto`) draw the chain as flow arrows from event to event.");
    }
    out.push('\n');
}
