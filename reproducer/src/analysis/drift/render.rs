//! The comparison in words: the text section of `diagnose`, the markdown section of
//! report.md, and the one-sentence headlines a failed search shows first.
use std::fmt::Write as _;

use super::{Drift, Kind, LineChange, Row, Verdict};

/// The section's title, in both renderings.
pub const TITLE: &str = "Testbed vs production";

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Kernel => "kernel",
        Kind::Program => "program",
        Kind::Executable => "executable",
        Kind::Library => "library",
        Kind::Config => "config",
        Kind::Rlimit => "rlimit",
        Kind::Cgroup => "cgroup",
        Kind::Storage => "storage",
        Kind::Container => "container",
    }
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Same => "the same",
        Verdict::Different => "differs",
        Verdict::OnlyProduction => "production only",
        Verdict::OnlyTestbed => "testbed only",
        Verdict::Unknown => "unknown",
    }
}

/// "kv/redis-server config redis.conf", "kv kernel".
fn subject(r: &Row) -> String {
    let who = if r.program.is_empty() {
        r.node.clone()
    } else {
        format!("{}/{}", r.node, r.program)
    };
    if r.kind == Kind::Kernel {
        return format!("{who} kernel");
    }
    format!("{who} {} {}", kind_name(r.kind), r.name)
}

/// A changed setting: "`appendfsync always` vs `everysec`" (testbed first) when both lines
/// set the same key, else both lines whole.
fn change(c: &LineChange) -> String {
    match (&c.testbed, &c.production) {
        (Some(t), Some(p)) => {
            let key = |s: &str| s.split_whitespace().next().map(str::to_string);
            let same_key = key(t).is_some() && key(t) == key(p);
            let shown = match (same_key, p.split_once(' ')) {
                (true, Some((_, value))) => value.to_string(),
                _ => p.clone(),
            };
            format!("`{t}` vs `{shown}`")
        }
        (Some(t), None) => format!("`{t}` only on the testbed"),
        (None, Some(p)) => format!("`{p}` only in production"),
        (None, None) => String::new(),
    }
}

/// One sentence per difference, the most telling first (configuration, builds, kernel,
/// limits): "the testbed's redis.conf differs from production's: `appendfsync always` vs
/// `everysec`".
pub fn headlines(d: &Drift) -> Vec<String> {
    let mut rows: Vec<&Row> = d.differences().collect();
    let rank = |r: &Row| match r.kind {
        Kind::Config => 0,
        Kind::Executable => 1,
        Kind::Library => 2,
        Kind::Kernel => 3,
        Kind::Storage | Kind::Container => 4,
        _ => 5,
    };
    rows.sort_by_key(|r| rank(r));
    rows.into_iter().map(headline).collect()
}

fn headline(r: &Row) -> String {
    let node = &r.node;
    let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
    match (r.kind, r.verdict) {
        (Kind::Config, Verdict::Different) => {
            let what = match r.lines.first() {
                Some(c) if r.lines.len() > 1 => format!("{} (and {} more)", change(c), r.lines.len() - 1),
                Some(c) => change(c),
                None => r.detail.clone(),
            };
            format!(
                "the testbed's {} (node {node}) differs from production's: {what}",
                r.name
            )
        }
        (Kind::Config, Verdict::OnlyProduction) => {
            format!(
                "production's {node} read {}, the testbed's did not",
                value(&r.production)
            )
        }
        (Kind::Config, _) => format!(
            "the testbed's {node} read {}, production's did not",
            value(&r.testbed)
        ),
        (Kind::Executable, _) => {
            format!(
                "the testbed's {} (node {node}) is not production's build: {}",
                r.name, r.detail
            )
        }
        (Kind::Library, _) => format!(
            "the testbed's {} (node {node}) is not production's: {}",
            r.name, r.detail
        ),
        (Kind::Storage, _) => format!(
            "the testbed's {} (node {node}) is not on production's kind of storage: {} (production {}, testbed {})",
            r.name,
            r.detail,
            value(&r.production),
            value(&r.testbed)
        ),
        (Kind::Container, _) => format!(
            "the testbed's {node} ran in container {}, production's in {}",
            value(&r.testbed),
            value(&r.production)
        ),
        (Kind::Kernel, _) => format!(
            "the testbed's kernel is {}, production's {} (node {node})",
            value(&r.testbed),
            value(&r.production)
        ),
        _ => format!(
            "the testbed's {} {} (node {node}) is {}, production's {}",
            kind_name(r.kind),
            r.name,
            value(&r.testbed),
            value(&r.production)
        ),
    }
}

/// The text section (`diagnose`): the differences with their lines, then what is the same.
pub fn text(d: &Drift) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} (testbed: {}):", TITLE.to_lowercase(), d.testbed);
    let differences: Vec<&Row> = d.differences().collect();
    if differences.is_empty() && !d.rows.is_empty() {
        let _ = writeln!(
            out,
            "  the testbed's builds, configuration files, kernel, limits and storage match production's ({} compared)",
            d.rows.len()
        );
    }
    for r in &d.rows {
        let sides = match (&r.production, &r.testbed) {
            (Some(p), Some(t)) if p != t => format!(" — production {p}, testbed {t}"),
            (Some(p), Some(_)) => format!(" — {p}"),
            (Some(p), None) => format!(" — production {p}"),
            (None, Some(t)) => format!(" — testbed {t}"),
            (None, None) => String::new(),
        };
        let detail = match r.detail.is_empty() {
            true => String::new(),
            false => format!(": {}", r.detail),
        };
        let _ = writeln!(
            out,
            "  {}: {}{detail}{sides}",
            subject(r),
            verdict_name(r.verdict)
        );
        for c in &r.lines {
            let _ = writeln!(
                out,
                "      production: {}",
                c.production.as_deref().unwrap_or("(no such line)")
            );
            let _ = writeln!(
                out,
                "      testbed:    {}",
                c.testbed.as_deref().unwrap_or("(no such line)")
            );
        }
    }
    for n in &d.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The markdown section (report.md).
pub fn markdown(d: &Drift) -> String {
    let mut out = format!("## {TITLE}\n\n");
    let _ = writeln!(out, "The testbed's side: `{}`. {}\n", d.testbed, summary(d));
    if !d.rows.is_empty() {
        out.push_str(
            "| node | program | what | production | testbed | verdict |\n|---|---|---|---|---|---|\n",
        );
        for r in &d.rows {
            let mut v = match r.verdict {
                Verdict::Same => verdict_name(r.verdict).to_string(),
                v => format!("**{}**", verdict_name(v)),
            };
            if !r.detail.is_empty() {
                v = format!("{v}: {}", r.detail);
            }
            let what = match r.kind {
                Kind::Kernel => "kernel".to_string(),
                k => format!("{} {}", kind_name(k), r.name),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                cell(&r.node),
                cell(&r.program),
                cell(&what),
                cell(r.production.as_deref().unwrap_or("")),
                cell(r.testbed.as_deref().unwrap_or("")),
                cell(&v)
            );
        }
        out.push('\n');
    }
    for r in d.rows.iter().filter(|r| !r.lines.is_empty()) {
        let _ = writeln!(out, "{} (production, then testbed):\n\n```diff", subject(r));
        for c in &r.lines {
            c.production
                .iter()
                .for_each(|l| out.push_str(&format!("- {l}\n")));
            c.testbed.iter().for_each(|l| out.push_str(&format!("+ {l}\n")));
        }
        out.push_str("```\n\n");
    }
    for n in &d.notes {
        let _ = writeln!(out, "Note: {n}\n");
    }
    out
}

/// "3 differences: …" or "Everything compared matches."
fn summary(d: &Drift) -> String {
    let h = headlines(d);
    match h.len() {
        0 if d.rows.is_empty() => "Nothing could be compared.".into(),
        0 => "Everything compared matches: the same builds, configuration files, kernel and limits.".into(),
        1 => format!("1 difference: {}.", h[0]),
        n => format!("{n} differences: {}.", h.join("; ")),
    }
}
