//! Configuration files paired by role (see the module doc of `drift`), their contents
//! compared line by line, and libraries named by soname stem and version.
use std::path::Path;

use serde::Serialize;
use similar::{capture_diff_slices, Algorithm, DiffOp};
use tracedump::environment::ConfigFile;

use super::{Kind, Rows, Sample, Verdict, MAX_LINES};

/// A line one side has where the other has another (or none).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LineChange {
    pub production: Option<String>,
    pub testbed: Option<String>,
}

/// A library's soname stem and the version its file name says: `libssl.so.3` → (`libssl`,
/// `3`), `libfoo-2.1.so` → (`libfoo`, `2.1`), `libc.so` → (`libc`, ``).
pub fn soname(path: &str) -> (String, String) {
    let name = file_name(path);
    let Some(at) = name.find(".so").filter(|&i| {
        let rest = &name[i + 3..];
        rest.is_empty() || rest.starts_with('.')
    }) else {
        return (name.to_string(), String::new());
    };
    let (stem, version) = (&name[..at], name[at + 3..].trim_start_matches('.'));
    if version.is_empty() {
        if let Some((s, v)) = stem.rsplit_once('-') {
            if v.starts_with(|c: char| c.is_ascii_digit())
                && v.chars().all(|c| c.is_ascii_digit() || c == '.')
            {
                return (s.to_string(), v.to_string());
            }
        }
    }
    (stem.to_string(), version.to_string())
}

fn file_name(path: &str) -> &str {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path)
}

/// The option a command line names a file with: the argument itself when it is
/// `--opt=PATH` (or the option, when the index points at it), else the option before it
/// (`-c PATH`); None for a positional argument.
fn option_of(cmdline: &[String], index: usize) -> Option<String> {
    let arg = cmdline.get(index)?;
    if arg.starts_with('-') {
        return Some(arg.split_once('=').map_or(arg.as_str(), |(o, _)| o).to_string());
    }
    let before = cmdline.get(index.checked_sub(1)?)?;
    (index >= 2 && before.starts_with('-') && !before.contains('=')).then(|| before.clone())
}

/// The role keys of one side's file, in pairing order.
fn keys(f: &ConfigFile, cmdline: &[String]) -> [Option<String>; 3] {
    let index = f.argument.filter(|_| f.source == "argument").map(|i| i as usize);
    [
        index
            .and_then(|i| option_of(cmdline, i))
            .map(|o| format!("option {o}")),
        index.map(|i| format!("argument {i}")),
        (f.source == "etc" && f.file.path.starts_with("/etc/")).then(|| f.file.path.clone()),
    ]
}

/// Pairs the configuration files of two processes by role; unpaired ones come alone. Each
/// pair comes with the role that paired it.
fn pair<'a>(p: &'a Sample, t: &'a Sample) -> Vec<(Option<&'a ConfigFile>, Option<&'a ConfigFile>, String)> {
    let (pf, tf) = (&p.environment.config_files, &t.environment.config_files);
    let (pk, tk): (Vec<_>, Vec<_>) = (
        pf.iter().map(|f| keys(f, &p.cmdline)).collect(),
        tf.iter().map(|f| keys(f, &t.cmdline)).collect(),
    );
    let mut p_used = vec![false; pf.len()];
    let mut t_used = vec![false; tf.len()];
    let mut pairs = Vec::new();
    for k in 0..3 {
        for i in 0..pf.len() {
            let Some(key) = pk[i][k].as_ref().filter(|_| !p_used[i]) else {
                continue;
            };
            if let Some(j) = (0..tf.len()).find(|&j| !t_used[j] && tk[j][k].as_ref() == Some(key)) {
                (p_used[i], t_used[j]) = (true, true);
                pairs.push((Some(&pf[i]), Some(&tf[j]), key.clone()));
            }
        }
    }
    // what is left: the k-th opened with the same file name on each side
    let by_open = |files: &'a [ConfigFile], used: &[bool]| {
        let mut v: Vec<(usize, &'a ConfigFile)> =
            files.iter().enumerate().filter(|(i, _)| !used[*i]).collect();
        v.sort_by_key(|(i, f)| (f.opened_after_ns, *i));
        v
    };
    let p_left = by_open(pf, &p_used);
    for (j, f) in by_open(tf, &t_used) {
        let name = file_name(&f.file.path);
        if let Some(&(i, g)) = p_left
            .iter()
            .find(|(i, g)| !p_used[*i] && file_name(&g.file.path) == name)
        {
            (p_used[i], t_used[j]) = (true, true);
            pairs.push((Some(g), Some(f), "the same file name, in open order".into()));
        }
    }
    let role = |f: &ConfigFile, cmdline: &[String]| {
        keys(f, cmdline).into_iter().flatten().next().unwrap_or_default()
    };
    pairs.extend(
        pf.iter()
            .enumerate()
            .filter(|(i, _)| !p_used[*i])
            .map(|(_, f)| (Some(f), None, role(f, &p.cmdline))),
    );
    pairs.extend(
        tf.iter()
            .enumerate()
            .filter(|(j, _)| !t_used[*j])
            .map(|(_, f)| (None, Some(f), role(f, &t.cmdline))),
    );
    pairs
}

/// One row per configuration file of the pair of processes.
pub(super) fn compare_configs(rows: &mut Rows, p: &Sample, t: &Sample) {
    for (pf, tf, role) in pair(p, t) {
        let name = file_name(pf.or(tf).map(|f| f.file.path.as_str()).unwrap_or_default()).to_string();
        let path = |f: Option<&ConfigFile>| f.map(|f| f.file.path.clone());
        let (verdict, detail, lines) = match (pf, tf) {
            (Some(a), Some(b)) => contents_verdict(a, b),
            (Some(_), None) => (
                Verdict::OnlyProduction,
                "not read on the testbed".into(),
                Vec::new(),
            ),
            _ => (Verdict::OnlyTestbed, "not read in production".into(), Vec::new()),
        };
        let detail = if role.is_empty() {
            detail
        } else {
            format!("{detail}; paired by {role}")
        };
        rows.push(Kind::Config, &name, verdict, [path(pf), path(tf)], detail);
        if let Some(last) = rows.out.last_mut() {
            last.lines = lines;
        }
    }
}

/// Whether two configuration files say the same: the lines, when both contents were
/// captured, else the SHA-256.
fn contents_verdict(a: &ConfigFile, b: &ConfigFile) -> (Verdict, String, Vec<LineChange>) {
    if a.file.sha256.is_some() && a.file.sha256 == b.file.sha256 {
        return (Verdict::Same, "same contents (sha256)".into(), Vec::new());
    }
    let (Some(x), Some(y)) = (&a.contents, &b.contents) else {
        return match (&a.file.sha256, &b.file.sha256) {
            (Some(_), Some(_)) => (
                Verdict::Different,
                "contents differ (sha256; the lines were not captured: capture_config_files)".into(),
                Vec::new(),
            ),
            _ => (Verdict::Unknown, "no hash on both sides".into(), Vec::new()),
        };
    };
    let truncated = a.truncated || b.truncated;
    let (x, y) = if truncated {
        common_prefix(x, y)
    } else {
        (x.as_str(), y.as_str())
    };
    let lines = line_changes(x, y);
    match (lines.is_empty(), truncated) {
        (false, _) => {
            let n = lines.len();
            let shown = lines.into_iter().take(MAX_LINES).collect::<Vec<_>>();
            let more = if n > shown.len() {
                format!(" ({} shown)", shown.len())
            } else {
                String::new()
            };
            (
                Verdict::Different,
                format!(
                    "{n} {}{more}",
                    if n == 1 { "line differs" } else { "lines differ" }
                ),
                shown,
            )
        }
        (true, false) => (
            Verdict::Same,
            "the same settings (only comments or blank space differ)".into(),
            Vec::new(),
        ),
        (true, true) => (
            Verdict::Different,
            format!(
                "contents differ after the first {} bytes the capture kept (sha256)",
                x.len()
            ),
            Vec::new(),
        ),
    }
}

/// Both texts cut to the complete lines of the shorter (a truncated capture's last line may
/// be cut).
fn common_prefix<'a>(x: &'a str, y: &'a str) -> (&'a str, &'a str) {
    let n = x.len().min(y.len());
    let cut = |s: &'a str| {
        let head = s.get(..n).unwrap_or(s);
        head.rfind('\n').map_or("", |i| &s[..=i])
    };
    (cut(x), cut(y))
}

/// A line as a setting: blanks collapsed; None for blank lines and comments.
fn setting(line: &str) -> Option<String> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') || t.starts_with(';') || t.starts_with("//") {
        return None;
    }
    Some(t.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The settings production's contents have where the testbed's have others (a line diff
/// of the settings, comments and blank lines left out): a changed line pairs the two.
pub fn line_changes(production: &str, testbed: &str) -> Vec<LineChange> {
    let p: Vec<String> = production.lines().filter_map(setting).collect();
    let t: Vec<String> = testbed.lines().filter_map(setting).collect();
    let mut out = Vec::new();
    for op in capture_diff_slices(Algorithm::Myers, &p, &t) {
        let (old, new) = match op {
            DiffOp::Equal { .. } => continue,
            DiffOp::Delete {
                old_index, old_len, ..
            } => (old_index..old_index + old_len, 0..0),
            DiffOp::Insert {
                new_index, new_len, ..
            } => (0..0, new_index..new_index + new_len),
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => (old_index..old_index + old_len, new_index..new_index + new_len),
        };
        for k in 0..old.len().max(new.len()) {
            out.push(LineChange {
                production: p.get(old.start + k).filter(|_| k < old.len()).cloned(),
                testbed: t.get(new.start + k).filter(|_| k < new.len()).cloned(),
            });
        }
    }
    out
}
