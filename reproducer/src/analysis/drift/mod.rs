//! Testbed vs production: whether the test bed runs what production ran — the same builds,
//! the same configuration, the same kernel and limits — from the environment tracerd records
//! per process (`tracedump::environment`). When a reproduction fails, a testbed that is not
//! production is the first suspect, so the differences are named before the search is blamed.
//!
//! How the two sides are paired:
//! - **processes** through their scenario node (the node map of each side: production's by
//!   `match`/program/parent, the testbed's by the pids the run launched); within a node, by
//!   program (the exe's file name), and a program by its first process — the one whose
//!   start read the configuration (its forked children share its build);
//! - **the executable**: the same build when the ELF build ids are equal (else the SHA-256);
//! - **libraries** by soname stem (`libssl` of `libssl.so.3`, `libfoo` of `libfoo-2.1.so`):
//!   the version in the file name, then the build as for the executable;
//! - **configuration files** by role, never by absolute path (a production
//!   `/etc/redis/redis.conf` and a testbed `{workdir}/redis.conf` are one file when the node
//!   names it for the same argument), in this order: a file named by the command line by
//!   the option that names it (`--config=PATH`, `-c PATH`), then by its argv index; a file
//!   opened under /etc by its path there; what is left by its file name, the k-th opened
//!   on one side with the k-th on the other. A file left unpaired is missing on the other
//!   side. Both contents known: the differing lines (comments, blank lines and runs of
//!   blanks ignored, `files.rs`), else the SHA-256 says whether they differ;
//! - **kernel** (each side's dump), **rlimits** by resource, **cgroup limits** by file;
//! - **storage** (`storage.rs`): the filesystems of a program's root, working directory and
//!   argument directories, of a node's files that lived apart, and its container.
//!
//! `side.rs` reads each side's processes out of dumps (or a profile); `render.rs` writes
//! the section.
use std::collections::BTreeMap;

use serde::Serialize;
use tracedump::environment::{FileIdentity, ProcEnvironment};

use crate::model::scenario::Scenario;

mod files;
mod render;
mod side;
mod storage;
#[cfg(test)]
mod tests;

pub use files::{line_changes, soname, LineChange};
pub use render::{headlines, markdown, text, TITLE};
pub use side::{from_profile, from_search, load_testbed, samples, to_profile, ProfiledProcess, Sample};

/// Most differing lines kept per configuration file.
pub const MAX_LINES: usize = 12;

/// What a row compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Kernel,
    Program,
    Executable,
    Library,
    Config,
    Rlimit,
    Cgroup,
    /// the filesystem of a directory
    Storage,
    /// the container runtime the process ran in
    Container,
}

/// How the two sides of a row compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Same,
    Different,
    OnlyProduction,
    OnlyTestbed,
    /// neither a build id nor a hash on both sides
    Unknown,
}

/// One line of the table: a thing of a node's program on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub node: String,
    /// the program (exe file name); empty for the node's kernel
    pub program: String,
    pub kind: Kind,
    /// what is compared: "redis.conf", "libssl", "Max open files", "memory.max"
    pub name: String,
    pub verdict: Verdict,
    /// each side's value as shown: a path, a version, "soft / hard", a limit
    pub production: Option<String>,
    pub testbed: Option<String>,
    /// why the verdict: "different build (build id 1a2b… vs 3c4d…)", "paired by --config"
    pub detail: String,
    /// configuration files whose contents both sides have: the differing lines
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<LineChange>,
}

/// The comparison of a testbed run with production.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Drift {
    /// where the testbed's side came from (a run or trace directory)
    pub testbed: String,
    pub rows: Vec<Row>,
    /// what could not be compared, and why
    pub notes: Vec<String>,
}

impl Drift {
    /// The rows that differ (or exist on one side only), programs present on one side left
    /// out (a testbed's wrapper is no drift).
    pub fn differences(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .filter(|r| r.kind != Kind::Program && !matches!(r.verdict, Verdict::Same | Verdict::Unknown))
    }
}

/// A side's representative process per (node, program): the first to start.
fn by_program(samples: &[Sample]) -> BTreeMap<(usize, String), &Sample> {
    let mut out: BTreeMap<(usize, String), &Sample> = BTreeMap::new();
    for s in samples {
        let e = out.entry((s.node, s.program.clone())).or_insert(s);
        if s.start_ns < e.start_ns {
            *e = s;
        }
    }
    out
}

/// Compares production's processes with the testbed's, node by node (see the module doc).
pub fn compare(production: &[Sample], testbed: &[Sample], scenario: &Scenario, label: &str) -> Drift {
    let mut drift = Drift {
        testbed: label.to_string(),
        ..Default::default()
    };
    let (prod, test) = (by_program(production), by_program(testbed));
    for (node, n) in scenario.nodes.iter().enumerate() {
        let p_any = prod.iter().find(|((k, _), _)| *k == node).map(|(_, s)| *s);
        let t_any = test.iter().find(|((k, _), _)| *k == node).map(|(_, s)| *s);
        let (Some(p_any), Some(t_any)) = (p_any, t_any) else {
            let side = if p_any.is_none() {
                "production"
            } else {
                "the testbed"
            };
            drift.notes.push(format!(
                "node {}: {side} recorded no environment of its processes (a dump from before tracerd recorded them, or the node did not run)",
                n.name
            ));
            continue;
        };
        let mut rows = Rows {
            node: n.name.clone(),
            program: String::new(),
            out: &mut drift.rows,
        };
        rows.values(
            Kind::Kernel,
            "kernel",
            Some(p_any.kernel.clone()),
            Some(t_any.kernel.clone()),
            "",
        );
        let programs: std::collections::BTreeSet<&String> = prod
            .keys()
            .chain(test.keys())
            .filter(|(k, _)| *k == node)
            .map(|(_, p)| p)
            .collect();
        for program in programs {
            let key = (node, program.clone());
            rows.program = program.clone();
            match (prod.get(&key), test.get(&key)) {
                (Some(p), Some(t)) => {
                    compare_process(&mut rows, p, t);
                    for (side, s) in [("production", p), ("the testbed", t)] {
                        let n = s.environment.dropped_files;
                        if n > 0 {
                            drift.notes.push(format!(
                                "{}/{program}: {side} left {n} files (libraries or configuration) unrecorded at tracerd's bounds: they were not compared",
                                n_name(scenario, node)
                            ));
                        }
                    }
                }
                (p, t) => {
                    let cmd = |s: &Sample| s.cmdline.join(" ");
                    rows.values(
                        Kind::Program,
                        program,
                        p.map(|s| cmd(s)),
                        t.map(|s| cmd(s)),
                        "ran on one side only",
                    );
                }
            }
        }
        // the node's files that lived apart from its working directory, whatever process
        rows.program = String::new();
        let (p_node, t_node): (Vec<&Sample>, Vec<&Sample>) = (
            production.iter().filter(|s| s.node == node).collect(),
            testbed.iter().filter(|s| s.node == node).collect(),
        );
        storage::compare_files(&mut rows, &p_node, &t_node);
    }
    drift
}

fn n_name(scenario: &Scenario, node: usize) -> &str {
    &scenario.nodes[node].name
}

/// Rows of one node's program under construction.
struct Rows<'a> {
    node: String,
    program: String,
    out: &'a mut Vec<Row>,
}

impl Rows<'_> {
    fn push(
        &mut self,
        kind: Kind,
        name: &str,
        verdict: Verdict,
        values: [Option<String>; 2],
        detail: String,
    ) {
        let [production, testbed] = values;
        self.out.push(Row {
            node: self.node.clone(),
            program: self.program.clone(),
            kind,
            name: name.to_string(),
            verdict,
            production,
            testbed,
            detail,
            lines: Vec::new(),
        });
    }

    /// A row of plain values: the same when equal.
    fn values(&mut self, kind: Kind, name: &str, p: Option<String>, t: Option<String>, detail: &str) {
        let verdict = match (&p, &t) {
            (Some(a), Some(b)) if a == b => Verdict::Same,
            (Some(_), Some(_)) => Verdict::Different,
            (Some(_), None) => Verdict::OnlyProduction,
            (None, Some(_)) => Verdict::OnlyTestbed,
            (None, None) => Verdict::Unknown,
        };
        self.push(kind, name, verdict, [p, t], detail.to_string());
    }
}

fn compare_process(rows: &mut Rows, p: &Sample, t: &Sample) {
    let (pe, te) = (&p.environment, &t.environment);
    match (&pe.executable, &te.executable) {
        (Some(a), Some(b)) => {
            let (verdict, detail) = same_build(a, b);
            rows.push(
                Kind::Executable,
                &rows.program.clone(),
                verdict,
                [Some(a.path.clone()), Some(b.path.clone())],
                detail,
            );
        }
        (a, b) => rows.values(
            Kind::Executable,
            &rows.program.clone(),
            a.as_ref().map(|f| f.path.clone()),
            b.as_ref().map(|f| f.path.clone()),
            "not recorded on one side",
        ),
    }
    compare_libraries(rows, pe, te);
    files::compare_configs(rows, p, t);
    compare_limits(rows, pe, te);
    storage::compare_program(rows, p, t);
}

/// Whether two files are one build: by ELF build id, else by SHA-256.
fn same_build(a: &FileIdentity, b: &FileIdentity) -> (Verdict, String) {
    let short = |s: &str| s.chars().take(12).collect::<String>();
    if let (Some(x), Some(y)) = (&a.build_id, &b.build_id) {
        return match x == y {
            true => (Verdict::Same, format!("same build (build id {})", short(x))),
            false => (
                Verdict::Different,
                format!("different build (build id {} vs {})", short(x), short(y)),
            ),
        };
    }
    if let (Some(x), Some(y)) = (&a.sha256, &b.sha256) {
        return match x == y {
            true => (Verdict::Same, "same contents (sha256)".into()),
            false => (
                Verdict::Different,
                format!("different contents (sha256 {} vs {})", short(x), short(y)),
            ),
        };
    }
    (Verdict::Unknown, "no build id or hash on both sides".into())
}

fn compare_libraries(rows: &mut Rows, pe: &ProcEnvironment, te: &ProcEnvironment) {
    let named = |libs: &[FileIdentity]| -> BTreeMap<String, Vec<(String, FileIdentity)>> {
        let mut m: BTreeMap<String, Vec<(String, FileIdentity)>> = BTreeMap::new();
        for f in libs {
            let (stem, version) = soname(&f.path);
            m.entry(stem).or_default().push((version, f.clone()));
        }
        m
    };
    if unrecorded_on_one_side(rows, Kind::Library, &pe.libraries, &te.libraries) {
        return;
    }
    let (pl, tl) = (named(&pe.libraries), named(&te.libraries));
    let mut same = 0;
    let stems: std::collections::BTreeSet<&String> = pl.keys().chain(tl.keys()).collect();
    for stem in stems {
        let empty = Vec::new();
        let (ps, ts) = (pl.get(stem).unwrap_or(&empty), tl.get(stem).unwrap_or(&empty));
        for i in 0..ps.len().max(ts.len()) {
            let (p, t) = (ps.get(i), ts.get(i));
            let shown = |l: Option<&(String, FileIdentity)>| l.map(|(_, f)| f.path.clone());
            let (verdict, detail) = match (p, t) {
                (Some((pv, _)), Some((tv, _))) if pv != tv => (
                    Verdict::Different,
                    format!("version {} vs {}", or_none(pv), or_none(tv)),
                ),
                (Some((_, pf)), Some((_, tf))) => same_build(pf, tf),
                (Some(_), None) => (Verdict::OnlyProduction, "not loaded on the testbed".into()),
                _ => (Verdict::OnlyTestbed, "not loaded in production".into()),
            };
            if verdict == Verdict::Same {
                same += 1;
                continue;
            }
            rows.push(Kind::Library, stem, verdict, [shown(p), shown(t)], detail);
        }
    }
    if same > 0 {
        let detail = format!("{same} more, each the same version and build");
        rows.push(Kind::Library, "the others", Verdict::Same, [None, None], detail);
    }
}

/// A list that one side left empty while the other has entries was not recorded there (a
/// process that ended before tracerd looked at it), which says nothing about the files or
/// limits themselves: one row of "unknown", not a difference per entry.
fn unrecorded_on_one_side<T>(rows: &mut Rows, kind: Kind, production: &[T], testbed: &[T]) -> bool {
    let side = match (production.is_empty(), testbed.is_empty()) {
        (true, false) => "production",
        (false, true) => "the testbed",
        _ => return false,
    };
    let detail = format!("not recorded by {side} (its process ended before tracerd looked)");
    rows.push(kind, "all", Verdict::Unknown, [None, None], detail);
    true
}

fn or_none(v: &str) -> &str {
    if v.is_empty() {
        "(none)"
    } else {
        v
    }
}

fn compare_limits(rows: &mut Rows, pe: &ProcEnvironment, te: &ProcEnvironment) {
    let rl = |e: &ProcEnvironment| -> BTreeMap<String, String> {
        e.rlimits
            .iter()
            .map(|r| (r.resource.clone(), format!("{} / {}", r.soft, r.hard)))
            .collect()
    };
    let (p, t) = (rl(pe), rl(te));
    let mut same = 0;
    let unrecorded = unrecorded_on_one_side(rows, Kind::Rlimit, &pe.rlimits, &te.rlimits);
    let names = p.keys().chain(t.keys().filter(|k| !p.contains_key(*k)));
    for name in names.filter(|_| !unrecorded) {
        let (a, b) = (p.get(name).cloned(), t.get(name).cloned());
        if a.is_some() && a == b {
            same += 1;
            continue;
        }
        rows.values(Kind::Rlimit, name, a, b, "soft / hard");
    }
    if same > 0 {
        rows.push(
            Kind::Rlimit,
            "the others",
            Verdict::Same,
            [None, None],
            format!("{same} more, each the same"),
        );
    }
    let cg = |e: &ProcEnvironment| -> BTreeMap<String, String> {
        e.cgroup_limits
            .iter()
            .map(|c| (c.file.clone(), c.value.clone()))
            .collect()
    };
    let (p, t) = (cg(pe), cg(te));
    for name in p.keys().chain(t.keys().filter(|k| !p.contains_key(*k))) {
        rows.values(Kind::Cgroup, name, p.get(name).cloned(), t.get(name).cloned(), "");
    }
}
