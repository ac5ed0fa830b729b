//! Processes of a run: starting a node (its own process group, optionally in its network
//! namespace and under a seccomp notification filter, output to `{workdir}/NAME.log`),
//! running helper commands with a deadline, and killing everything a run started.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How to start one process of a node.
pub struct Launch<'a> {
    pub argv: &'a [String],
    pub log: &'a Path,
    pub netns: Option<&'a str>,
    pub cwd: &'a Path,
    /// classic-BPF seccomp filter to install before exec, and the socket to send its listener on
    pub seccomp: Option<(&'a [libc::sock_filter], std::os::fd::RawFd)>,
    /// BPF maps (fd, value) in which the child enters its own pid before exec, so that it is
    /// known to the injector from its first instruction on
    pub register: &'a [(std::os::fd::RawFd, [u8; 4])],
    /// the tracer's `register_target` program, run by the child with its own pid before exec
    /// (the tracer's set is entered only through that program)
    pub trace: Option<std::os::fd::RawFd>,
    /// the account to run as (after the steps above, which need root)
    pub user: Option<&'a super::runas::RunAs>,
}

/// bpf(BPF_PROG_TEST_RUN) of a raw tracepoint program with `arg` as its one argument, with
/// the raw syscall: usable between fork and exec. A non-zero return value (the program's
/// refusal) is an error.
fn prog_run_raw(prog_fd: std::os::fd::RawFd, arg: u32) -> std::io::Result<()> {
    #[repr(C)]
    #[derive(Default)]
    struct TestAttr {
        prog_fd: u32,
        retval: u32,
        data_size_in: u32,
        data_size_out: u32,
        data_in: u64,
        data_out: u64,
        repeat: u32,
        duration: u32,
        ctx_size_in: u32,
        ctx_size_out: u32,
        ctx_in: u64,
        ctx_out: u64,
        flags: u32,
        cpu: u32,
        batch_size: u32,
        _pad: u32,
    }
    const BPF_PROG_TEST_RUN: libc::c_long = 10;
    let args = [u64::from(arg)];
    let mut attr = TestAttr {
        prog_fd: prog_fd as u32,
        ctx_size_in: std::mem::size_of_val(&args) as u32,
        ctx_in: args.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: attr and the argument array it points at outlive the call; the kernel writes
    // only attr's retval and duration.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &mut attr as *mut TestAttr,
            std::mem::size_of::<TestAttr>(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if attr.retval != 0 {
        return Err(std::io::Error::other("the traced set is full"));
    }
    Ok(())
}

/// bpf(BPF_MAP_UPDATE_ELEM) with the raw syscall: usable between fork and exec.
fn map_update_raw(map_fd: std::os::fd::RawFd, key: &[u8; 4], value: &[u8; 4]) -> std::io::Result<()> {
    #[repr(C)]
    struct ElemAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    let attr = ElemAttr {
        map_fd: map_fd as u32,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        flags: 0,
    };
    // SAFETY: attr points at valid key and value buffers for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_ELEM,
            &attr as *const ElemAttr,
            std::mem::size_of::<ElemAttr>(),
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn spawn(launch: &Launch<'_>) -> Result<Child> {
    let (program, args) = launch.argv.split_first().context("empty command")?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(launch.log)
        .with_context(|| format!("log file {}", launch.log.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(launch.cwd)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    let netns: Option<File> = match launch.netns {
        Some(name) => Some(super::netbed::enter_netns(name)?),
        None => None,
    };
    let seccomp = launch.seccomp.map(|(f, fd)| (f.to_vec(), fd));
    let register = launch.register.to_vec();
    let trace = launch.trace;
    let user = launch.user.cloned();
    if let Some(u) = &user {
        u.set_env(&mut cmd);
    }
    // SAFETY: the closure only makes raw syscalls (setns, prctl, seccomp, sendmsg) on data
    // prepared before fork; it does not allocate or take locks.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(ns) = &netns {
                if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            let pid = libc::getpid() as u32;
            for (fd, value) in &register {
                map_update_raw(*fd, &pid.to_ne_bytes(), value)?;
            }
            if let Some(fd) = trace {
                prog_run_raw(fd, pid)?;
            }
            if let Some((filter, channel)) = &seccomp {
                super::seccomp::install_in_child(filter, *channel)?;
            }
            if let Some(u) = &user {
                u.switch()?;
            }
            Ok(())
        });
    }
    cmd.spawn().with_context(|| format!("starting {program}"))
}

/// Runs `argv` to completion or until `deadline`; None if it was killed at the deadline.
pub fn run_until(
    argv: &[String],
    netns: Option<&str>,
    cwd: &Path,
    log: &Path,
    deadline: Instant,
) -> Result<Option<ExitStatus>> {
    run_until_as(argv, netns, cwd, log, deadline, None)
}

/// [`run_until`] as `user` (as ourselves when None).
pub fn run_until_as(
    argv: &[String],
    netns: Option<&str>,
    cwd: &Path,
    log: &Path,
    deadline: Instant,
    user: Option<&super::runas::RunAs>,
) -> Result<Option<ExitStatus>> {
    let mut child = spawn(&Launch {
        argv,
        log,
        netns,
        cwd,
        seccomp: None,
        register: &[],
        trace: None,
        user,
    })?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline || crate::interrupt::requested() {
            kill_group(child.id());
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILL to a whole process group.
pub fn kill_group(pgid: u32) {
    // SAFETY: kill(2) with a negative pid signals the group; no memory is involved.
    unsafe { libc::kill(-(pgid as i32), libc::SIGKILL) };
}

/// Makes orphans of our descendants reparent to us, so that nothing a node starts escapes
/// the final sweep, even when it daemonizes.
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Our descendants, read from /proc.
pub fn descendants() -> Vec<u32> {
    let me = std::process::id();
    let mut parent = std::collections::HashMap::new();
    if let Ok(all) = procfs::process::all_processes() {
        for p in all.flatten() {
            if let Ok(stat) = p.stat() {
                parent.insert(stat.pid as u32, stat.ppid as u32);
            }
        }
    }
    parent
        .keys()
        .copied()
        .filter(|&pid| {
            let mut cur = pid;
            for _ in 0..64 {
                match parent.get(&cur) {
                    Some(&p) if p == me => return true,
                    Some(&p) if p > 1 => cur = p,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// Kills and reaps every descendant, waiting at most `timeout`.
pub fn sweep(timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let left = descendants();
        if left.is_empty() {
            return Ok(());
        }
        for pid in &left {
            // SAFETY: kill(2) of our own descendants.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        // reap whatever became a zombie child of ours
        while nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
            .map(|s| s != nix::sys::wait::WaitStatus::StillAlive)
            .unwrap_or(false)
        {}
        if start.elapsed() > timeout {
            bail!("processes still alive after cleanup: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `n` lines of a log file, for error messages.
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(n)..];
    if tail.is_empty() {
        "(log is empty)".to_string()
    } else {
        tail.join(" | ")
    }
}
