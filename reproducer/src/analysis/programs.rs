//! Which programs a node really runs. A node's `command[0]` is often a wrapper that execs or
//! starts the server (`setpriv --reuid=... BINARY`, `runuser -u USER -- BINARY`,
//! `sh -c 'exec BINARY ...'`); the trace of a fault-free run knows every program the node's
//! processes executed, and those, wrappers left out, are the programs whose functions count.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::nodemap::NodeMap;
use crate::model::scenario::Scenario;

/// Programs that only start another one: shells, privilege and scheduling wrappers, init
/// shims. Their own functions are never a server's.
const WRAPPERS: &[&str] = &[
    "sh",
    "dash",
    "bash",
    "zsh",
    "ash",
    "busybox",
    "env",
    "setpriv",
    "runuser",
    "su",
    "sudo",
    "doas",
    "gosu",
    "su-exec",
    "chpst",
    "setuidgid",
    "s6-setuidgid",
    "start-stop-daemon",
    "nice",
    "ionice",
    "chrt",
    "taskset",
    "numactl",
    "chroot",
    "timeout",
    "stdbuf",
    "setsid",
    "nohup",
    "unshare",
    "nsenter",
    "prlimit",
    "flock",
    "tini",
    "dumb-init",
    "catatonit",
    "systemd-run",
    "bbnode",
];

/// Whether `program` (a path or a file name) is a wrapper (see [`WRAPPERS`]).
pub fn is_wrapper(program: &Path) -> bool {
    program
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| WRAPPERS.contains(&n))
}

/// Node index -> the executables its processes ran in a run's `trace` (real paths as the
/// kernel names them), wrappers and the reproducer itself (a node's process before its
/// exec) left out; `launched` are the (node, pid) pairs the run started.
pub fn executed(
    scenario: &Scenario,
    trace: &Path,
    launched: &[(String, u32)],
) -> Result<BTreeMap<usize, BTreeSet<PathBuf>>> {
    let dump = tracedump::dump::Dump::read(trace)?;
    let launched: Vec<(usize, u32)> = launched
        .iter()
        .filter_map(|(name, pid)| Some((scenario.node_index(name)?, *pid)))
        .collect();
    let map = NodeMap::build_for(scenario, &dump.meta, &launched);
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::canonicalize(p).ok());
    let mut out: BTreeMap<usize, BTreeSet<PathBuf>> = BTreeMap::new();
    for p in &dump.meta.processes {
        let (Some(node), Some(exe)) = (map.node(p.pid), p.exe.as_deref()) else {
            continue;
        };
        // a program replaced while running ("(deleted)") cannot be read any more
        let Ok(exe) = std::fs::canonicalize(exe) else {
            continue;
        };
        if is_wrapper(&exe) || me.as_ref() == Some(&exe) {
            continue;
        }
        out.entry(node).or_default().insert(exe);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_are_known_by_file_name() {
        for w in [
            "/usr/bin/setpriv",
            "/sbin/runuser",
            "sh",
            "/bin/dash",
            "/usr/bin/env",
        ] {
            assert!(is_wrapper(Path::new(w)), "{w}");
        }
        for p in [
            "/usr/bin/redis-server",
            "/usr/lib/postgresql/15/bin/postgres",
            "/usr/bin/shred",
        ] {
            assert!(!is_wrapper(Path::new(p)), "{p}");
        }
    }
}
