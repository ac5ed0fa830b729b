//! Which run directories a search keeps. A real server's run directory holds its whole data
//! directory (tens of MB), and a search makes up to `--max-runs` of them: only the runs of
//! the attempts that matter stay — the best (and so the confirmed) schedule, the first run
//! that showed the bug, the fault-free check (a run without the bug, which the causal chain
//! compares with), the last few attempts — and, over a byte budget, the oldest of those go
//! too (never the best). Each attempt's `schedule.toml` always stays.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Attempts whose runs stay regardless of age: the last this many.
pub const KEEP_LAST: usize = 5;
/// Default byte budget for kept run directories (`--keep-bytes`).
pub const DEFAULT_KEEP_BYTES: u64 = 1 << 30;

/// The run directories of one attempt.
#[derive(Clone, Debug)]
pub struct AttemptRuns {
    pub number: u32,
    pub dirs: Vec<PathBuf>,
    pub bytes: u64,
}

/// What pruning has removed so far.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Pruned {
    pub attempts: Vec<u32>,
    pub bytes: u64,
}

/// The `reproducer-run-*` directories under an attempt's directory (its run, and its
/// confirmation runs in `confirm-NN/`) and their size.
pub fn attempt_runs(number: u32, dir: &Path) -> AttemptRuns {
    let mut dirs = Vec::new();
    collect_runs(dir, 0, &mut dirs);
    let bytes = dirs.iter().map(|d| tree_bytes(d)).sum();
    AttemptRuns { number, dirs, bytes }
}

fn collect_runs(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if e.file_name().to_string_lossy().starts_with("reproducer-run-") {
            out.push(path);
        } else if depth == 0 {
            collect_runs(&path, 1, out);
        }
    }
}

fn tree_bytes(path: &Path) -> u64 {
    let Ok(md) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !md.is_dir() {
        return md.len();
    }
    std::fs::read_dir(path)
        .map(|it| it.flatten().map(|e| tree_bytes(&e.path())).sum())
        .unwrap_or(0)
}

/// Removes the runs of `kept` attempts that no longer matter, updating `pruned`: every
/// attempt outside `protected` and the last [`KEEP_LAST`], then, while the rest exceeds
/// `budget`, the oldest except `best`.
pub fn prune(
    kept: &mut Vec<AttemptRuns>,
    protected: &BTreeSet<u32>,
    best: Option<u32>,
    budget: u64,
    pruned: &mut Pruned,
) {
    let last: BTreeSet<u32> = kept.iter().rev().take(KEEP_LAST).map(|a| a.number).collect();
    let drop = |a: &AttemptRuns, pruned: &mut Pruned| {
        for d in &a.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        pruned.attempts.push(a.number);
        pruned.bytes += a.bytes;
    };
    kept.retain(|a| {
        let keep = protected.contains(&a.number) || last.contains(&a.number);
        if !keep {
            drop(a, pruned);
        }
        keep
    });
    let mut total: u64 = kept.iter().map(|a| a.bytes).sum();
    while total > budget {
        let Some(i) = kept.iter().position(|a| Some(a.number) != best) else {
            break;
        };
        let a = kept.remove(i);
        total -= a.bytes;
        drop(&a, pruned);
    }
    pruned.attempts.sort_unstable();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(root: &Path, number: u32, bytes: usize) -> AttemptRuns {
        let dir = root.join(format!("{number:03}"));
        let run = dir.join("reproducer-run-x");
        std::fs::create_dir_all(run.join("data")).unwrap();
        std::fs::write(run.join("data/file"), vec![0u8; bytes]).unwrap();
        std::fs::create_dir_all(dir.join("confirm-01/reproducer-run-y")).unwrap();
        std::fs::write(dir.join("schedule.toml"), "x").unwrap();
        attempt_runs(number, &dir)
    }

    #[test]
    fn keeps_the_runs_that_matter_within_the_budget() {
        let root = tempfile::tempdir().unwrap();
        let mut kept: Vec<AttemptRuns> = (1..=12).map(|n| attempt(root.path(), n, 1000)).collect();
        assert_eq!(kept[0].dirs.len(), 2, "the run and the confirmation run");
        assert_eq!(kept[0].bytes, 1000);
        let protected: BTreeSet<u32> = [2, 4].into();
        let mut pruned = Pruned::default();
        prune(&mut kept, &protected, Some(4), u64::MAX, &mut pruned);
        let left: Vec<u32> = kept.iter().map(|a| a.number).collect();
        assert_eq!(left, vec![2, 4, 8, 9, 10, 11, 12]);
        assert_eq!(pruned.attempts, vec![1, 3, 5, 6, 7]);
        assert_eq!(pruned.bytes, 5000);
        assert!(
            !root.path().join("001/reproducer-run-x").exists()
                && !root.path().join("001/confirm-01/reproducer-run-y").exists()
        );
        assert!(
            root.path().join("001/schedule.toml").exists(),
            "the schedule stays"
        );
        assert!(root.path().join("002/reproducer-run-x/data/file").exists());

        // over the budget: the oldest go, the best stays
        prune(&mut kept, &protected, Some(4), 2500, &mut pruned);
        let left: Vec<u32> = kept.iter().map(|a| a.number).collect();
        assert_eq!(left, vec![4, 12]);
        assert_eq!(pruned.attempts, vec![1, 2, 3, 5, 6, 7, 8, 9, 10, 11]);
        prune(&mut kept, &protected, Some(4), 0, &mut pruned);
        assert_eq!(
            kept.iter().map(|a| a.number).collect::<Vec<_>>(),
            vec![4],
            "the best is never pruned"
        );
    }
}
