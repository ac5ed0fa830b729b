//! What a traced process was built from and configured with, as its start left it: the
//! executable and libraries it mapped, the configuration files it read, its resource limits.
//! tracerd records one per process of the dump's process table (`ProcInfo::environment`); the
//! reproducer compares production's with a testbed run's to name drift (a different build, a
//! different setting) before blaming the search.
use serde::{Deserialize, Serialize};

/// A process's build, configuration and limits. Every list is bounded by tracerd's
/// configuration; what did not fit is counted in `dropped_files`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcEnvironment {
    /// the executable the process ran (its `/proc/PID/exe` at the first look)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<FileIdentity>,
    /// the shared objects it had mapped by the end of its start, in the order of its maps
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub libraries: Vec<FileIdentity>,
    /// regular files it read as configuration, in the order it opened them
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_files: Vec<ConfigFile>,
    /// `/proc/PID/limits`, soft and hard, for the limits a fault can hit (open files,
    /// processes, address space, locked memory, core size, file size, stack)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rlimits: Vec<Rlimit>,
    /// the limits of its cgroup v2 (`memory.max`, `memory.high`, `pids.max`, `cpu.max`), as
    /// the files say them ("max" when unlimited)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroup_limits: Vec<CgroupLimit>,
    /// files (libraries or configuration) left out because a bound was reached
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_files: u32,
    /// the filesystems of its working directory, of the directories its command line names,
    /// of its root, and of the directories of the files its recorded failures and short
    /// writes named, each directory once (absent in dumps written before they were recorded)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage: Vec<DirStorage>,
}

/// The filesystem a directory of a process was on, as tracerd found it in the process's
/// mount namespace.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DirStorage {
    /// the directory as the process named it
    pub path: String,
    /// "cwd", "argument" (named by its command line), "root" (its `/`), or "file" (the
    /// directory of a file one of its recorded events named)
    pub role: String,
    /// for "argument": the index in the command line of the argument naming it
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<u32>,
    /// the real directory, when a symlink on the way led elsewhere
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    pub mount_point: String,
    /// the filesystem type (mountinfo's): "ext4", "xfs", "tmpfs", "overlay", "fuse.sshfs"
    pub fs_type: String,
    /// the mount's source: a block device, "tmpfs", a server's export
    pub source: String,
    /// the mount's options then the filesystem's, each once
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// the filesystem's size and the bytes free to an unprivileged writer, when tracerd looked
    #[serde(default)]
    pub size_bytes: u64,
    #[serde(default)]
    pub free_bytes: u64,
}

/// Filesystem types over the network: their durability is the server's.
const NETWORK_FS: [&str; 6] = ["nfs", "nfs4", "cifs", "smb3", "ceph", "glusterfs"];

/// Mount options that change what a write or a flush promises (not `noatime` and the like).
pub fn durability_options(options: &[String]) -> Vec<&str> {
    options
        .iter()
        .map(String::as_str)
        .filter(|o| {
            let name = o.split('=').next().unwrap_or(o);
            matches!(
                name,
                "ro" | "sync"
                    | "dirsync"
                    | "data"
                    | "barrier"
                    | "nobarrier"
                    | "journal_async_commit"
                    | "commit"
            )
        })
        .collect()
}

impl DirStorage {
    /// What kind of storage it is: "tmpfs", "overlay", "fuse", "network", "block" (a
    /// device's filesystem) or "other".
    pub fn kind(&self) -> &'static str {
        let t = self.fs_type.as_str();
        if t == "tmpfs" || t == "ramfs" {
            "tmpfs"
        } else if t == "overlay" {
            "overlay"
        } else if t == "fuse" || t.starts_with("fuse.") || t == "fuseblk" {
            "fuse"
        } else if NETWORK_FS.contains(&t) {
            "network"
        } else if self.source.starts_with("/dev/") {
            "block"
        } else {
            "other"
        }
    }
}

/// One file as it was on disk when tracerd looked.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileIdentity {
    /// the absolute path, as the process saw it (inside its mount namespace)
    pub path: String,
    pub size: u64,
    /// modification time, nanoseconds since the Unix epoch
    pub mtime_ns: u64,
    /// SHA-256 of the contents, lowercase hex; absent when the file could not be read
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// the ELF NT_GNU_BUILD_ID note, lowercase hex (executables and libraries)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

/// A configuration file a process read, and why tracerd counts it as one.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConfigFile {
    pub file: FileIdentity,
    /// "etc" (opened read-only under /etc) or "argument" (named in the command line)
    pub source: String,
    /// for "argument": the index in the command line of the argument that names it
    /// (`--config=/x` and `-c /x` both count as the argument holding the path)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<u32>,
    /// CLOCK_BOOTTIME nanoseconds after the process's start when it was opened (0 for
    /// "argument" files recorded at the start)
    #[serde(default)]
    pub opened_after_ns: u64,
    /// the contents after redaction, only when `capture_config_files` allows (bounded in
    /// bytes per file; `truncated` says the bound cut it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// One line of `/proc/PID/limits`, by its resource name there ("Max open files").
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Rlimit {
    pub resource: String,
    /// the soft and hard limits as the file says them ("unlimited" or a number)
    pub soft: String,
    pub hard: String,
}

/// One cgroup v2 limit file and its contents, trimmed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CgroupLimit {
    pub file: String,
    pub value: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
