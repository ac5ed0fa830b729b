//! Which processes are traced and what is known about them: the start-up scan of /proc that
//! seeds the kernel's target set, and the bounded process table that goes into every dump,
//! kept showing what ps shows: a process's new name and command line after it renamed
//! itself or rewrote its argv.
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tracedump::process::split_argv;
pub use tracedump::process::ProcInfo;

use crate::cgroup::{is_under, TargetCgroup};
use crate::config::Config;

/// What /proc tells about processes, to fill a [`ProcInfo`].
pub trait FromProc: Sized {
    /// Reads what /proc still tells about `pid`; fields it cannot read stay empty.
    fn from_proc(pid: u32) -> Option<Self>;
    /// Fills what is still missing from /proc, if the process is alive.
    fn refresh_from_proc(&mut self);
}

impl FromProc for ProcInfo {
    fn from_proc(pid: u32) -> Option<ProcInfo> {
        let proc = procfs::process::Process::new(pid as i32).ok()?;
        let stat = proc.stat().ok()?;
        let ticks = procfs::ticks_per_second().max(1);
        let mut info = ProcInfo {
            pid,
            ppid: stat.ppid.max(0) as u32,
            comm: stat.comm.clone(),
            exe: proc.exe().ok().map(|p| p.display().to_string()),
            cmdline: read_cmdline(pid),
            cwd: proc.cwd().ok().map(|p| p.display().to_string()),
            start_ns: stat.starttime * 1_000_000_000 / ticks,
            exit_ns: None,
            ..Default::default()
        };
        info.read_container(&proc);
        Some(info)
    }

    fn refresh_from_proc(&mut self) {
        if self.exit_ns.is_some() {
            return;
        }
        let Ok(proc) = procfs::process::Process::new(self.pid as i32) else {
            return;
        };
        // an exit the table missed (its record dropped) and the pid reused: not this process
        let Ok(stat) = proc.stat() else { return };
        let tick_ns = 1_000_000_000 / procfs::ticks_per_second().max(1);
        if stat.starttime * tick_ns > self.start_ns + tick_ns {
            return;
        }
        if self.exe.is_none() {
            self.exe = proc.exe().ok().map(|p| p.display().to_string());
        }
        // what ps shows now: a rewrite of argv (setproctitle) makes no syscall to see it by
        self.show_title(&stat.comm, read_cmdline(self.pid));
        // the cwd the process started with stays: relative paths after a chdir resolve
        // against the cwd the kernel recorded at the chdir, those before it against this one
        if self.cwd.is_none() {
            self.cwd = proc.cwd().ok().map(|p| p.display().to_string());
        }
        if self.cgroup.is_none() {
            self.read_container(&proc);
        }
    }
}

/// Bytes of argv the kernel copies at exec and rename (TRACERD_ARGS_LEN; checked in bpf.rs).
pub const KERNEL_ARGS_LEN: usize = 256;

/// /proc/PID/cmdline as arguments (None: gone, or empty as a kernel thread's). Read as bytes:
/// an argument that is not UTF-8 is kept (lossily), and empty arguments stay where exec's
/// copy has them too.
pub fn read_cmdline(pid: u32) -> Option<Vec<String>> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(split_argv(&bytes)).filter(|a| !a.is_empty())
}

/// Whether `a` and `b` are one argv, the shorter being the kernel's copy of it, cut at
/// KERNEL_ARGS_LEN bytes: not a rewrite.
fn same_but_cut(a: &[String], b: &[String]) -> bool {
    let bytes = |a: &[String]| a.join("\0").into_bytes();
    let (a, b) = (bytes(a), bytes(b));
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.len() + 1 >= KERNEL_ARGS_LEN && long.starts_with(&short)
}

/// Bytes of an argv area, NULs included.
fn argv_len(a: &[String]) -> usize {
    a.iter().map(|s| s.len() + 1).sum()
}

/// Taking a name and command line a process now shows.
trait ShowTitle {
    fn show_title(&mut self, comm: &str, cmdline: Option<Vec<String>>);
}

impl ShowTitle for ProcInfo {
    fn show_title(&mut self, comm: &str, cmdline: Option<Vec<String>>) {
        match (&self.cmdline, cmdline) {
            (None, now) => {
                self.cmdline = now;
                self.retitle(comm, None);
            }
            (Some(before), Some(now)) if same_but_cut(before, &now) => {
                if argv_len(&now) > argv_len(before) {
                    self.cmdline = Some(now);
                }
                self.retitle(comm, None);
            }
            (Some(_), now) => self.retitle(comm, now),
        }
    }
}

/// The cgroup and pid-namespace fields of a [`ProcInfo`].
trait ContainerFromProc {
    fn read_container(&mut self, proc: &procfs::process::Process);
}

impl ContainerFromProc for ProcInfo {
    fn read_container(&mut self, proc: &procfs::process::Process) {
        if let Some(path) = crate::cgroup::of_process(self.pid) {
            self.set_cgroup(&path);
        }
        self.ns_pid = innermost_pid(proc);
    }
}

/// The pid in the process's own pid namespace, when that is not the host's: NSpid in
/// /proc/PID/status lists it in each namespace from the host's down.
fn innermost_pid(proc: &procfs::process::Process) -> Option<u32> {
    let nspid = proc.status().ok()?.nspid?;
    (nspid.len() > 1)
        .then(|| nspid.last().copied())
        .flatten()
        .map(|p| p.max(0) as u32)
}

fn ns_pid_of(pid: u32) -> Option<u32> {
    innermost_pid(&procfs::process::Process::new(pid as i32).ok()?)
}

/// Processes seen since start, bounded: when full, the longest-dead process is forgotten
/// first (a live one only if none has exited), and every forgotten one is counted.
pub struct ProcTable {
    procs: HashMap<u32, ProcInfo>,
    capacity: usize,
    evicted: u64,
}

impl ProcTable {
    pub fn new(capacity: usize) -> Self {
        ProcTable {
            procs: HashMap::with_capacity(capacity.min(1 << 16)),
            capacity: capacity.max(1),
            evicted: 0,
        }
    }

    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    pub fn iter(&self) -> impl Iterator<Item = &ProcInfo> {
        self.procs.values()
    }

    pub fn get(&self, pid: u32) -> Option<&ProcInfo> {
        self.procs.get(&pid)
    }

    pub fn insert(&mut self, info: ProcInfo) {
        if !self.procs.contains_key(&info.pid) && self.procs.len() >= self.capacity {
            self.evict_one();
        }
        self.procs.insert(info.pid, info);
    }

    fn evict_one(&mut self) {
        let victim = self
            .procs
            .values()
            .min_by_key(|p| (p.exit_ns.is_none(), p.exit_ns.unwrap_or(p.start_ns)))
            .map(|p| p.pid);
        if let Some(pid) = victim {
            self.procs.remove(&pid);
            self.evicted += 1;
        }
    }

    /// A traced process forked: the child starts as a copy of its parent. A process whose
    /// parent is not traced (one moved into a target cgroup) is read from /proc instead.
    pub fn on_fork(&mut self, pid: u32, ppid: u32, comm: &str, ts_ns: u64) {
        let mut info = match self.procs.get(&ppid) {
            Some(parent) => {
                let mut info = parent.clone();
                info.start_ns = ts_ns;
                // a child of a process in a pid namespace is in it too, with a pid of its own
                if parent.ns_pid.is_some() {
                    info.ns_pid = ns_pid_of(pid);
                }
                info
            }
            None => ProcInfo::from_proc(pid).unwrap_or(ProcInfo {
                start_ns: ts_ns,
                ..Default::default()
            }),
        };
        info.pid = pid;
        info.ppid = ppid;
        info.comm = comm.to_string();
        info.exit_ns = None;
        self.insert(info);
    }

    /// A traced process called exec: read its new identity while it is surely alive.
    /// `argv` and `exe` come from the kernel at exec time: they are there even when the
    /// process is gone before /proc could be read.
    pub fn on_exec(
        &mut self,
        pid: u32,
        ppid: u32,
        comm: &str,
        ts_ns: u64,
        argv: Option<Vec<String>>,
        exe: Option<String>,
    ) {
        let mut info = ProcInfo::from_proc(pid).unwrap_or_default();
        if info.cgroup.is_none() {
            // gone from /proc already: the cgroup it had as a target before the exec
            if let Some(before) = self.procs.get(&pid) {
                info.cgroup = before.cgroup.clone();
                info.container_runtime = before.container_runtime.clone();
                info.container_id = before.container_id.clone();
                info.pod_uid = before.pod_uid.clone();
                info.ns_pid = before.ns_pid;
            }
        }
        if argv.is_some() {
            info.cmdline = argv;
        }
        if info.exe.is_none() {
            info.exe = exe;
        }
        info.pid = pid;
        info.ppid = ppid;
        info.comm = comm.to_string();
        info.start_ns = ts_ns;
        info.exit_ns = None;
        self.insert(info);
    }

    /// A traced process renamed its main thread: `comm` is the new name, `argv` its argv area
    /// as the kernel copied it then (None: unreadable). /proc, read now, has the whole command
    /// line, maybe rewritten since; the kernel's copy stands in when the process is gone.
    pub fn on_rename(&mut self, pid: u32, comm: &str, argv: Option<Vec<String>>) {
        if !self.procs.contains_key(&pid) {
            // its fork or exec record was lost or evicted: read it whole
            if let Some(info) = ProcInfo::from_proc(pid) {
                self.insert(info);
            }
        }
        let Some(info) = self.procs.get_mut(&pid) else {
            return;
        };
        let cmdline = read_cmdline(pid).or(argv);
        info.show_title(comm, cmdline);
    }

    pub fn on_exit(&mut self, pid: u32, ts_ns: u64) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.exit_ns = Some(ts_ns);
        }
    }

    /// All entries, refreshed from /proc where still alive, ordered by pid.
    pub fn snapshot(&mut self) -> Vec<ProcInfo> {
        for p in self.procs.values_mut() {
            p.refresh_from_proc();
        }
        let mut all: Vec<ProcInfo> = self.procs.values().cloned().collect();
        all.sort_by_key(|p| p.pid);
        all
    }
}

/// Kernel encoding of a device number (MKDEV), as the BPF side reads it from `s_dev`.
pub fn kernel_dev(st_dev: u64) -> u64 {
    let major = libc::major(st_dev) as u64;
    let minor = libc::minor(st_dev) as u64;
    (major << 20) | minor
}

/// (kernel dev, inode) of an executable, the key of `target_exes`.
pub fn exe_key(path: &Path) -> std::io::Result<(u64, u64)> {
    let md = std::fs::metadata(path)?;
    Ok((kernel_dev(md.dev()), md.ino()))
}

/// Whether a process's cgroup v2 path has a targeted unit as its leaf or is in a target cgroup.
fn cgroup_matches(pid: u32, config: &Config, cgroups: &[TargetCgroup]) -> bool {
    if config.target_unit.is_empty() && cgroups.is_empty() {
        return false;
    }
    let Some(path) = crate::cgroup::of_process(pid) else {
        return false;
    };
    let unit = path.rsplit('/').next().unwrap_or("");
    config.target_unit.iter().any(|u| u == unit) || cgroups.iter().any(|c| is_under(&path, &c.path))
}

/// Processes running now that the configuration targets, descendants included.
pub fn scan_targets(config: &Config, cgroups: &[TargetCgroup]) -> Vec<ProcInfo> {
    let exe_keys: HashSet<(u64, u64)> = config.target_exe.iter().filter_map(|p| exe_key(p).ok()).collect();
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    let mut parent_of: HashMap<u32, u32> = HashMap::new();
    let mut matched: HashSet<u32> = HashSet::new();
    for proc in all.flatten() {
        let Ok(stat) = proc.stat() else { continue };
        let pid = stat.pid as u32;
        parent_of.insert(pid, stat.ppid.max(0) as u32);
        let by_comm = config.target_comm.contains(&stat.comm);
        let by_pid = config.target_pid.contains(&pid);
        let by_exe = !exe_keys.is_empty()
            && proc
                .exe()
                .ok()
                .and_then(|p| exe_key(&p).ok())
                .is_some_and(|k| exe_keys.contains(&k));
        if by_comm || by_pid || by_exe || cgroup_matches(pid, config, cgroups) {
            matched.insert(pid);
        }
    }
    // descendants: walk each process's ancestry until a match or the root
    let mut targets: Vec<u32> = Vec::new();
    for &pid in parent_of.keys() {
        let mut cur = pid;
        for _ in 0..64 {
            if matched.contains(&cur) {
                targets.push(pid);
                break;
            }
            match parent_of.get(&cur) {
                Some(&p) if p != 0 && p != cur => cur = p,
                _ => break,
            }
        }
    }
    targets.sort_unstable();
    targets.into_iter().filter_map(ProcInfo::from_proc).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    fn started(cmdline: Vec<String>) -> ProcInfo {
        ProcInfo {
            pid: 7,
            comm: "server".into(),
            cmdline: Some(cmdline),
            ..Default::default()
        }
    }

    #[test]
    fn a_new_title_is_shown_and_the_first_kept() {
        let mut p = started(argv("/usr/bin/server --port 1"));
        p.show_title("worker", Some(argv("server: worker")));
        assert_eq!(p.cmdline, Some(argv("server: worker")));
        assert_eq!(p.exec_cmdline, Some(argv("/usr/bin/server --port 1")));
        assert_eq!(p.exec_comm.as_deref(), Some("server"));
    }

    #[test]
    fn the_kernels_cut_copy_is_no_rewrite() {
        let long = format!("/usr/bin/server --config={}", "x".repeat(300));
        let cut: String = long.chars().take(KERNEL_ARGS_LEN).collect();
        let mut p = started(argv(&cut));
        p.show_title("server", Some(argv(&long)));
        assert_eq!(p.cmdline, Some(argv(&long)), "completed");
        assert_eq!((p.exec_cmdline.as_ref(), p.exec_comm.as_ref()), (None, None));
        // and the other way round: the copy of a rename, /proc unreadable
        p.show_title("server", Some(argv(&cut)));
        assert_eq!(p.cmdline, Some(argv(&long)));
        assert_eq!(p.exec_cmdline, None);
        // a short command line that a title extends is a rewrite
        let mut short = started(argv("postgres"));
        short.show_title("postgres", Some(vec!["postgres: checkpointer ".into()]));
        assert_eq!(short.exec_cmdline, Some(argv("postgres")));
    }

    #[test]
    fn a_rename_of_a_process_not_in_the_table_is_read_from_proc() {
        let mut table = ProcTable::new(4);
        let me = std::process::id();
        table.on_rename(me, "renamed", None);
        let p = table.get(me).expect("read from /proc");
        assert_eq!(p.comm, "renamed");
        assert_eq!(p.cmdline, read_cmdline(me));
    }
}
