//! Storage in the drift check: where a node kept its files in production and on the test
//! bed. Per program (its first process), the filesystem of its root (a container's is an
//! overlay), of its working directory and of each directory its command line names (paired
//! by argument index); per node, every directory of a file its recorded events named that
//! lay on another filesystem than its working directory, or behind a symlink (a WAL
//! directory on a small filesystem of its own): paired with the testbed's directory of the
//! same name, else with the testbed's working directory. Two directories differ in their
//! filesystem's kind (block device, tmpfs, overlay, FUSE, network), its type, or the mount
//! options that change what a write promises (`sync`, `data=`, `barrier`; not `noatime`).
//! Whether the node ran in a container (its runtime) is compared too.
use tracedump::environment::{durability_options, DirStorage};

use super::{Kind, Rows, Sample, Verdict};

/// A directory's filesystem in words: "tmpfs (16.0 MiB, 2% free) at /srv/wal, reached
/// through a symlink to /srv/wal/pg_wal, options sync".
pub fn describe(d: &DirStorage) -> String {
    let mut out = d.fs_type.clone();
    if d.kind() == "block" || d.kind() == "network" {
        out.push_str(&format!(" on {}", d.source));
    }
    if d.size_bytes > 0 {
        out.push_str(&format!(
            " ({:.1} MiB, {}% free)",
            d.size_bytes as f64 / (1 << 20) as f64,
            d.free_bytes * 100 / d.size_bytes
        ));
    }
    out.push_str(&format!(" at {}", d.mount_point));
    if let Some(r) = &d.resolved {
        out.push_str(&format!(", through a symlink to {r}"));
    }
    let options = durability_options(&d.options);
    if !options.is_empty() {
        out.push_str(&format!(", options {}", options.join(",")));
    }
    out
}

/// Whether two directories' filesystems differ for a write, and how.
fn differs(p: &DirStorage, t: &DirStorage) -> Option<String> {
    if p.kind() != t.kind() || p.fs_type != t.fs_type {
        return Some(format!(
            "{} ({}) vs {} ({})",
            p.fs_type,
            p.kind(),
            t.fs_type,
            t.kind()
        ));
    }
    let (po, to) = (durability_options(&p.options), durability_options(&t.options));
    (po != to).then(|| format!("options {} vs {}", or_none(&po), or_none(&to)))
}

fn or_none(options: &[&str]) -> String {
    match options.is_empty() {
        true => "(none)".into(),
        false => options.join(","),
    }
}

/// A row comparing production's directory `p` with the testbed's `t` (named `name`).
fn compare_dir(rows: &mut Rows, name: &str, p: Option<&DirStorage>, t: Option<&DirStorage>, paired: &str) {
    let shown = |d: Option<&DirStorage>| d.map(|d| format!("{}: {}", d.path, describe(d)));
    let (verdict, detail) = match (p, t) {
        (Some(p), Some(t)) => match differs(p, t) {
            Some(how) => (Verdict::Different, format!("{how}; {paired}")),
            None => (Verdict::Same, paired.to_string()),
        },
        (Some(_), None) => (Verdict::OnlyProduction, "not recorded on the testbed".into()),
        (None, Some(_)) => (Verdict::OnlyTestbed, "not recorded in production".into()),
        (None, None) => return,
    };
    rows.push(Kind::Storage, name, verdict, [shown(p), shown(t)], detail);
}

fn of_role<'s>(s: &'s Sample, role: &str) -> Option<&'s DirStorage> {
    s.environment.storage.iter().find(|d| d.role == role)
}

/// One program's root, working directory and argument directories (its first process on
/// each side), and whether it ran in a container.
pub(super) fn compare_program(rows: &mut Rows, p: &Sample, t: &Sample) {
    if p.environment.storage.is_empty() || t.environment.storage.is_empty() {
        return;
    }
    rows.values(
        Kind::Container,
        "container",
        Some(p.container.clone().unwrap_or_else(|| "none".into())),
        Some(t.container.clone().unwrap_or_else(|| "none".into())),
        "the runtime whose cgroup the process ran in",
    );
    compare_dir(rows, "root", of_role(p, "root"), of_role(t, "root"), "its /");
    compare_dir(
        rows,
        "working directory",
        of_role(p, "cwd"),
        of_role(t, "cwd"),
        "its cwd",
    );
    let (pa, ta) = (arguments(p), arguments(t));
    let mut indexes: Vec<u32> = pa.iter().chain(&ta).map(|(i, _)| *i).collect();
    indexes.sort_unstable();
    indexes.dedup();
    for i in indexes {
        let name = format!("argument {i}");
        compare_dir(
            rows,
            &name,
            at_index(&pa, i),
            at_index(&ta, i),
            "paired by argument index",
        );
    }
}

/// The directories `s`'s command line names, with the argument's index.
fn arguments(s: &Sample) -> Vec<(u32, &DirStorage)> {
    s.environment
        .storage
        .iter()
        .filter(|d| d.role == "argument")
        .filter_map(|d| Some((d.argument?, d)))
        .collect()
}

fn at_index<'d>(dirs: &[(u32, &'d DirStorage)], i: u32) -> Option<&'d DirStorage> {
    dirs.iter().find(|(j, _)| *j == i).map(|(_, d)| *d)
}

/// The node's directories of files its events named that lay elsewhere than its working
/// directory (another filesystem, or behind a symlink), each paired with the testbed's of
/// the same name, else the testbed's working directory.
pub(super) fn compare_files(rows: &mut Rows, prod: &[&Sample], test: &[&Sample]) {
    let files = |side: &[&Sample]| -> Vec<DirStorage> {
        let mut out: Vec<DirStorage> = Vec::new();
        for d in side
            .iter()
            .flat_map(|s| &s.environment.storage)
            .filter(|d| d.role == "file")
        {
            if !out.iter().any(|o| o.path == d.path) {
                out.push(d.clone());
            }
        }
        out
    };
    let cwd = |side: &[&Sample]| side.iter().find_map(|s| of_role(s, "cwd")).cloned();
    let (Some(home), test_home) = (cwd(prod), cwd(test)) else {
        return;
    };
    let test_files = files(test);
    let name_of = |d: &DirStorage| d.path.rsplit('/').next().unwrap_or("").to_string();
    for p in files(prod) {
        let elsewhere = p.mount_point != home.mount_point || p.resolved.is_some();
        if !elsewhere {
            continue;
        }
        let name = name_of(&p);
        let (t, paired) = match test_files.iter().find(|t| name_of(t) == name) {
            Some(t) => (Some(t.clone()), format!("paired by its name {name}")),
            None => (
                test_home.clone(),
                "the testbed recorded no such directory: compared with its working directory".into(),
            ),
        };
        let what =
            format!("directory {name} (production's files there lived apart from its working directory)");
        compare_dir(rows, &what, Some(&p), t.as_ref(), &paired);
    }
}
