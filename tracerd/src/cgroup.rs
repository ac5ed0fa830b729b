//! Target cgroups on the host: where the cgroup v2 hierarchy is mounted, `target_cgroup`
//! paths and `target_container` ids resolved to the cgroup ids and levels the kernel's
//! target_cgroups map takes, and the cgroup of a running process. What a path says about a
//! container is tracedump::container's.
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::config::Config;

/// Deepest level a target cgroup may be at (MAX_CGROUP_LEVEL in bpf/tracer/targets.h).
pub const MAX_LEVEL: usize = 31;
/// How deep the search for a container's scope goes below the cgroup v2 root.
const SEARCH_DEPTH: usize = 8;

/// A cgroup v2 subtree whose processes are targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetCgroup {
    /// as /proc/PID/cgroup shows it: "/" is the root
    pub path: String,
    /// the kernel's cgroup id: the directory's inode number
    pub id: u64,
    /// depth below the root (the root is 0)
    pub level: u32,
}

/// Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup on a unified host,
/// /sys/fs/cgroup/unified on a hybrid one).
pub fn cgroup2_mount() -> Result<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    mounts
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == "cgroup2")
        .map(|f| PathBuf::from(f[1].replace("\\040", " ")))
        .context("no cgroup v2 hierarchy is mounted (target_cgroup and target_container need one)")
}

/// The path of a directory below the cgroup v2 mount, as /proc/PID/cgroup shows it.
fn relative_path(mount: &Path, dir: &Path) -> String {
    let rel = dir.strip_prefix(mount).unwrap_or(dir);
    let parts: Vec<String> = rel
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    format!("/{}", parts.join("/"))
}

fn level_of(path: &str) -> u32 {
    path.split('/').filter(|s| !s.is_empty()).count() as u32
}

/// `spec` is either a directory of the mounted hierarchy or a path as /proc/PID/cgroup shows it.
fn resolve_path(mount: &Path, spec: &str) -> Result<TargetCgroup> {
    let as_given = Path::new(spec);
    let dir = if as_given.starts_with(mount) {
        as_given.to_path_buf()
    } else {
        mount.join(spec.trim_start_matches('/'))
    };
    let md = std::fs::metadata(&dir).with_context(|| {
        format!(
            "target_cgroup {spec}: no cgroup {} under {}",
            dir.display(),
            mount.display()
        )
    })?;
    if !md.is_dir() || !dir.join("cgroup.procs").exists() {
        bail!(
            "target_cgroup {spec}: {} is not a cgroup v2 directory",
            dir.display()
        );
    }
    let path = relative_path(mount, &dir);
    let level = level_of(&path);
    if level as usize > MAX_LEVEL {
        bail!("target_cgroup {spec}: {level} levels deep; at most {MAX_LEVEL}");
    }
    Ok(TargetCgroup {
        path,
        id: md.ino(),
        level,
    })
}

/// Directories below `dir`, breadth first (shallowest first), at most `depth` levels down.
fn cgroup_dirs(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut level = vec![dir.to_path_buf()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for d in &level {
            let Ok(entries) = std::fs::read_dir(d) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    next.push(e.path());
                }
            }
        }
        found.extend(next.iter().cloned());
        level = next;
    }
    found
}

/// The cgroup of the container whose id starts with `prefix`: the shallowest directory whose
/// path names it (its scope; a container's own sub-cgroups are inside it).
fn find_container(mount: &Path, prefix: &str) -> Result<String> {
    let mut matches: Vec<(String, String)> = Vec::new();
    for dir in cgroup_dirs(mount, SEARCH_DEPTH) {
        let path = relative_path(mount, &dir);
        let Some(id) = tracedump::container::parse(&path).id else {
            continue;
        };
        if id.starts_with(prefix) && !matches.iter().any(|(known, _)| *known == id) {
            matches.push((id, path));
        }
    }
    match matches.as_slice() {
        [] => bail!(
            "target_container {prefix}: no container's cgroup under {} (docker-, cri-containerd-, crio- or libpod-ID.scope); is it running?",
            mount.display()
        ),
        [(_, path)] => Ok(path.clone()),
        more => {
            let ids: Vec<&str> = more.iter().map(|(id, _)| &id[..id.len().min(16)]).collect();
            bail!("target_container {prefix}: matches {} containers ({}); give more of the id", more.len(), ids.join(", "))
        }
    }
}

/// Every target cgroup of `config`: its `target_cgroup` paths and its `target_container`s' scopes.
pub fn resolve_targets(config: &Config) -> Result<Vec<TargetCgroup>> {
    if config.target_cgroup.is_empty() && config.target_container.is_empty() {
        return Ok(Vec::new());
    }
    let mount = cgroup2_mount()?;
    let mut targets = Vec::new();
    for spec in &config.target_cgroup {
        targets.push(resolve_path(&mount, spec)?);
    }
    for prefix in &config.target_container {
        let path = find_container(&mount, prefix)?;
        let target = resolve_path(&mount, &path).with_context(|| format!("target_container {prefix}"))?;
        log::info!("target_container {prefix}: cgroup {}", target.path);
        targets.push(target);
    }
    Ok(targets)
}

/// The cgroup v2 path of a process (the `0::` line of /proc/PID/cgroup).
pub fn of_process(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    parse_proc_cgroup(&text)
}

fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// Whether `path` is `subtree` or below it.
pub fn is_under(path: &str, subtree: &str) -> bool {
    let subtree = subtree.trim_end_matches('/');
    subtree.is_empty()
        || path == subtree
        || path
            .strip_prefix(subtree)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtrees_are_whole_components() {
        assert!(is_under("/a/b", "/a"));
        assert!(is_under("/a", "/a"));
        assert!(is_under("/x", "/"));
        assert!(!is_under("/ab", "/a"));
        assert!(!is_under("/b", "/a"));
    }

    #[test]
    fn paths_and_levels() {
        let mount = Path::new("/sys/fs/cgroup/unified");
        assert_eq!(relative_path(mount, &mount.join("a/b.scope")), "/a/b.scope");
        assert_eq!(relative_path(mount, mount), "/");
        assert_eq!(level_of("/"), 0);
        assert_eq!(level_of("/a/b.scope"), 2);
        let text = "12:cpu:/x\n1:name=systemd:/y\n0::/system.slice/redis.service\n";
        assert_eq!(
            parse_proc_cgroup(text).as_deref(),
            Some("/system.slice/redis.service")
        );
    }
}
