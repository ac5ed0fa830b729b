//! Seccomp user-notification primitives for syscall fault injection (x86_64): the classic-BPF
//! filter that sends chosen syscalls to a supervisor, its installation in a child between fork
//! and exec (with the listener fd handed to the parent over a Unix socket), and the parent's
//! side of the listener: receive a notification, let the call run, fail it with an errno, and
//! read the target's memory (strings) and fds to decide which.
//!
//! This module owns only the mechanism; which call to fail is decided by `supervisor`.
//! The filter is inherited across fork and exec, so one listener covers a whole process tree.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// `AUDIT_ARCH_X86_64` from linux/audit.h: EM_X86_64 (62) | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `offsetof(struct seccomp_data, nr)` (linux/seccomp.h).
const DATA_NR_OFFSET: u32 = 0;
/// `offsetof(struct seccomp_data, arch)` (linux/seccomp.h).
const DATA_ARCH_OFFSET: u32 = 4;
/// Room for a control message carrying exactly one fd.
const FD_CMSG_SPACE: usize = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as usize;

/// A control-message buffer for one fd, aligned like `cmsghdr`.
#[repr(C)]
union FdCmsgBuf {
    _align: libc::cmsghdr,
    bytes: [u8; FD_CMSG_SPACE],
}

/// One classic-BPF statement (`BPF_STMT` of linux/filter.h).
fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// One classic-BPF conditional jump (`BPF_JUMP` of linux/filter.h).
fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// Classic-BPF filter: for AUDIT_ARCH_X86_64, syscalls whose number is in `syscalls` return
/// SECCOMP_RET_USER_NOTIF, everything else SECCOMP_RET_ALLOW (other arches: ALLOW).
///
/// Each syscall gets its own compare-and-return pair, so jump offsets stay constant whatever
/// the number of syscalls. x32 calls (number with bit 30 set) never match and are allowed.
pub fn notify_filter(syscalls: &[u32]) -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let mut nrs = syscalls.to_vec();
    nrs.sort_unstable();
    nrs.dedup();
    let mut prog = vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, DATA_ARCH_OFFSET),
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(BPF_LD | BPF_W | BPF_ABS, DATA_NR_OFFSET),
    ];
    for nr in nrs {
        prog.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
        prog.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_USER_NOTIF));
    }
    prog.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW));
    prog
}

/// Whether `filter` compares the syscall number against `nr` (true for every syscall that
/// `notify_filter` notifies). Allocation-free, for use after fork.
fn compares_with(filter: &[libc::sock_filter], nr: libc::c_long) -> bool {
    let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    filter.iter().any(|i| i.code == jeq && i64::from(i.k) == nr)
}

/// Runs a raw libc call returning -1 on error until it does not fail with EINTR.
fn retry_eintr<T: PartialOrd + Default + Copy>(mut call: impl FnMut() -> T) -> io::Result<T> {
    loop {
        let r = call();
        if r >= T::default() {
            return Ok(r);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Installs `filter` with SECCOMP_FILTER_FLAG_NEW_LISTENER and returns the listener fd.
/// Sets NO_NEW_PRIVS when not root, or when the kernel refuses without it (no CAP_SYS_ADMIN).
unsafe fn install_listener(filter: &[libc::sock_filter]) -> io::Result<RawFd> {
    let len = u16::try_from(filter.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let prog = libc::sock_fprog {
        len,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    let install = || unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    let set_nnp = || unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    let root = unsafe { libc::geteuid() } == 0;
    if !root && set_nnp() != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fd = install();
    if fd < 0 && root && io::Error::last_os_error().raw_os_error() == Some(libc::EACCES) && set_nnp() == 0 {
        fd = install();
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd as RawFd)
}

/// A msghdr carrying one data byte and room for one SCM_RIGHTS fd, pointing into the
/// caller's buffers (shared by the allocation-free sender and the receiver).
fn fd_msghdr(iov: &mut libc::iovec, buf: &mut FdCmsgBuf) -> libc::msghdr {
    // SAFETY: msghdr is a plain C struct for which all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    // SAFETY: taking a pointer into the union's byte view; nothing is read through it here.
    msg.msg_control = unsafe { buf.bytes.as_mut_ptr() }.cast();
    msg.msg_controllen = FD_CMSG_SPACE as _;
    msg
}

/// Sends `fd` with SCM_RIGHTS (and one data byte) on the stream socket `channel`, with
/// sendmmsg instead of sendmsg when `use_mmsg`. Allocation-free.
unsafe fn send_fd(channel: RawFd, fd: RawFd, use_mmsg: bool) -> io::Result<()> {
    let mut byte = [b'L'];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut buf: FdCmsgBuf = unsafe { zeroed() };
    let msg = fd_msghdr(&mut iov, &mut buf);
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd);
    }
    let sent = if use_mmsg {
        let mut m = libc::mmsghdr {
            msg_hdr: msg,
            msg_len: 0,
        };
        retry_eintr(|| unsafe { libc::sendmmsg(channel, &mut m, 1, libc::MSG_NOSIGNAL) })?;
        m.msg_len as usize
    } else {
        retry_eintr(|| unsafe { libc::sendmsg(channel, &msg, libc::MSG_NOSIGNAL) })? as usize
    };
    if sent == 1 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
}

/// Closes `fd` with close_range when the kernel has it: `close` may be a notified syscall, and
/// nobody may be answering yet.
unsafe fn close_quietly(fd: RawFd) {
    if unsafe { libc::syscall(libc::SYS_close_range, fd as libc::c_uint, fd as libc::c_uint, 0) } != 0 {
        unsafe { libc::close(fd) };
    }
}

/// To be called in a child between fork and exec (e.g. from
/// `std::os::unix::process::CommandExt::pre_exec`): installs the filter with
/// SECCOMP_FILTER_FLAG_NEW_LISTENER (NO_NEW_PRIVS only if not root), sends the listener fd over
/// `channel` (a Unix stream socket fd) with SCM_RIGHTS, then closes the listener in the child.
///
/// Async-signal-safe: no allocation, no locks; build the filter before fork. The hand-off uses
/// sendmsg, or sendmmsg when the filter notifies sendmsg (a notified hand-off would wait for a
/// supervisor that has no listener yet); EDEADLK if the filter notifies both. Every notified
/// call the child makes after this (its execve, say) waits until the parent answers.
///
/// # Safety
/// Only between fork and exec, or in a process that wants itself and its descendants filtered;
/// `channel` must be a connected Unix stream socket.
pub unsafe fn install_in_child(filter: &[libc::sock_filter], channel: RawFd) -> io::Result<()> {
    let use_mmsg = compares_with(filter, libc::SYS_sendmsg);
    if use_mmsg && compares_with(filter, libc::SYS_sendmmsg) {
        return Err(io::Error::from_raw_os_error(libc::EDEADLK));
    }
    let fd = unsafe { install_listener(filter) }?;
    let sent = unsafe { send_fd(channel, fd, use_mmsg) };
    unsafe { close_quietly(fd) };
    sent
}

/// Takes ownership of every fd in the SCM_RIGHTS messages of `msg` and returns the first one.
fn take_rights(msg: &libc::msghdr) -> Option<OwnedFd> {
    let mut first = None;
    // SAFETY: `msg` was filled by recvmsg; the CMSG_* walk stays within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / size_of::<libc::c_int>() {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    first.get_or_insert(fd); // extra fds are dropped, i.e. closed
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    first
}

/// Parent side: receives the listener fd sent by `install_in_child` (close-on-exec in the
/// parent). UnexpectedEof if the other end closed without sending one.
pub fn receive_listener(channel: &UnixStream) -> io::Result<Listener> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: a plain C union for which all-zero is a valid value.
    let mut buf: FdCmsgBuf = unsafe { zeroed() };
    let mut msg = fd_msghdr(&mut iov, &mut buf);
    let fd = channel.as_raw_fd();
    // SAFETY: msg points to live buffers of the sizes it declares.
    let n = retry_eintr(|| unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) })?;
    let listener = take_rights(&msg);
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the child closed the channel without sending a seccomp listener",
        ));
    }
    let fd = listener.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "message on the seccomp channel carried no fd",
        )
    })?;
    Ok(Listener { fd })
}

/// One notified syscall, stopped in the kernel until answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notification {
    /// cookie to answer with
    pub id: u64,
    /// thread that made the call, in the listener's pid namespace
    pub tid: u32,
    /// syscall number (x86_64)
    pub nr: u32,
    pub args: [u64; 6],
}

/// The supervisor's end of a seccomp filter: receives and answers notifications.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// poll(2) timeout for `deadline`: -1 for none, else the milliseconds left, rounded up.
fn poll_ms(deadline: Option<Instant>) -> libc::c_int {
    match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            let ms = left.as_nanos().div_ceil(1_000_000);
            ms.min(libc::c_int::MAX as u128) as libc::c_int
        }
    }
}

impl Listener {
    /// Waits until a notification is ready (true) or `deadline` passes (false). Err(BrokenPipe)
    /// once no process is left under the filter and nothing is pending.
    fn wait_readable(&self, deadline: Option<Instant>) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = retry_eintr(|| unsafe { libc::poll(&mut pfd, 1, poll_ms(deadline)) })?;
        if r == 0 {
            return Ok(false);
        }
        if pfd.revents & libc::POLLIN != 0 {
            return Ok(true);
        }
        if pfd.revents & libc::POLLNVAL != 0 {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        Err(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "every process under the seccomp filter has exited",
        ))
    }

    /// One SECCOMP_IOCTL_NOTIF_RECV (blocks if nothing is pending).
    fn receive_one(&self) -> io::Result<Notification> {
        // SAFETY: all-zero is valid, and the kernel requires the struct zeroed.
        let mut n: libc::seccomp_notif = unsafe { zeroed() };
        // SAFETY: the ioctl writes one seccomp_notif into `n`.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Notification {
            id: n.id,
            tid: n.pid,
            nr: n.data.nr as u32,
            args: n.data.args,
        })
    }

    /// Waits up to `timeout` for a notification; Ok(None) on timeout. Retries EINTR; a
    /// notification whose target died before RECV (ENOENT) is skipped. Err(BrokenPipe) once
    /// every process under the filter has exited (and been reaped).
    pub fn recv(&self, timeout: Duration) -> io::Result<Option<Notification>> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if !self.wait_readable(deadline)? {
                return Ok(None);
            }
            match self.receive_one() {
                Ok(n) => return Ok(Some(n)),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ENOENT)) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends one response; a target that is gone (ENOENT) counts as answered.
    fn respond(&self, resp: libc::seccomp_notif_resp) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        // SAFETY: the ioctl reads one seccomp_notif_resp.
        match retry_eintr(|| unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) }) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            other => other.map(drop),
        }
    }

    /// Lets the syscall run (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
    pub fn allow(&self, id: u64) -> io::Result<()> {
        let flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32;
        self.respond(libc::seccomp_notif_resp {
            id,
            val: 0,
            error: 0,
            flags,
        })
    }

    /// Fails the syscall without running it: it returns -errno (1..=4095, else InvalidInput).
    pub fn fail(&self, id: u64, errno: i32) -> io::Result<()> {
        if !(1..=4095).contains(&errno) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("errno {errno} out of range"),
            ));
        }
        self.respond(libc::seccomp_notif_resp {
            id,
            val: 0,
            error: -errno,
            flags: 0,
        })
    }

    /// Answers the syscall without running it: it returns `val` (>= 0), as if it had done so.
    pub fn succeed(&self, id: u64, val: i64) -> io::Result<()> {
        if val < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("return value {val} is an error"),
            ));
        }
        self.respond(libc::seccomp_notif_resp {
            id,
            val,
            error: 0,
            flags: 0,
        })
    }

    /// Whether the notification is still pending (SECCOMP_IOCTL_NOTIF_ID_VALID): call it after
    /// reading target memory, so the data read belongs to the call still waiting.
    pub fn is_valid(&self, id: u64) -> bool {
        // SAFETY: the ioctl reads one u64.
        unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0 }
    }
}

/// The system page size (4096 when sysconf cannot tell).
fn page_size() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

/// Reads up to `buf.len()` bytes at `addr` of process `tid` into `buf` (process_vm_readv).
fn read_remote(tid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` covers `buf`; the remote side is checked by the kernel.
    let n = unsafe { libc::process_vm_readv(tid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Reads a NUL-terminated string of at most `max` bytes (NUL excluded) at `addr` in process
/// `tid`, page by page so that a string near the end of a mapping still reads. ENAMETOOLONG if
/// no NUL comes within `max` bytes, EFAULT if the memory ends before one.
pub fn read_string(tid: u32, addr: u64, max: usize) -> io::Result<Vec<u8>> {
    let page = page_size();
    let mut out = Vec::with_capacity(max.min(page as usize));
    let mut chunk = vec![0u8; page as usize];
    let mut at = addr;
    while out.len() <= max {
        let want = ((page - at % page) as usize).min(max + 1 - out.len());
        let got = read_remote(tid, at, &mut chunk[..want])?;
        if let Some(end) = chunk[..got].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(out);
        }
        if got == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        out.extend_from_slice(&chunk[..got]);
        at = at
            .checked_add(got as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
    }
    Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG))
}

/// A duplicate of fd `fd` of process `pid` (a thread-group leader) in this process
/// (pidfd_open + pidfd_getfd, Linux 5.6): the same open file, so the same file offset.
fn steal_fd(pid: u32, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscalls; each returned fd is owned exactly once below.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0);
        if pidfd < 0 {
            return Err(io::Error::last_os_error());
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd as RawFd);
        let dup = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0);
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(dup as RawFd))
    }
}

/// Does the first `bytes` of a notified `write(fd, buf, count)` or `pwrite64(fd, buf, count,
/// offset)` (count > bytes) for the caller — its own open file, its own buffer — and
/// returns how many bytes were written (fewer when the file itself refuses more). The
/// caller is then answered with that count: a short write. `tgid` is the caller's process.
pub fn write_part(n: &Notification, tgid: u32, bytes: usize) -> io::Result<usize> {
    let file = steal_fd(tgid, n.args[0] as i32)?;
    let mut data = vec![0u8; bytes];
    let mut got = 0;
    while got < bytes {
        let r = read_remote(n.tid, n.args[1] + got as u64, &mut data[got..])?;
        if r == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        got += r;
    }
    let fd = file.as_raw_fd();
    // SAFETY: `data` is a live buffer of `bytes` bytes; `fd` is ours until `file` drops.
    let written = match n.nr as libc::c_long {
        libc::SYS_write => retry_eintr(|| unsafe { libc::write(fd, data.as_ptr().cast(), bytes) })?,
        libc::SYS_pwrite64 => retry_eintr(|| unsafe {
            libc::pwrite(fd, data.as_ptr().cast(), bytes, n.args[3] as libc::off_t)
        })?,
        _ => return Err(io::Error::from_raw_os_error(libc::ENOSYS)),
    };
    Ok(written as usize)
}

/// The path an fd of process `pid` refers to (readlink /proc/PID/fd/FD); None if either is gone.
pub fn fd_path(pid: u32, fd: i32) -> Option<String> {
    if fd < 0 {
        return None;
    }
    let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    Some(target.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;

    /// These tests install seccomp filters and read other processes' memory: they need root.
    fn require_root() {
        // SAFETY: geteuid has no memory effects.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "seccomp tests must run as root (euid is {euid}); rerun with sudo"
        );
    }

    /// Serves the listener received on `channel` with `decide` (Some(errno) fails the call)
    /// until the filtered processes are gone or `stop` is set.
    fn supervise(
        channel: UnixStream,
        stop: Arc<AtomicBool>,
        mut decide: impl FnMut(&Notification) -> Option<i32> + Send + 'static,
    ) -> JoinHandle<u32> {
        std::thread::spawn(move || {
            let listener = receive_listener(&channel).expect("listener");
            let mut failed = 0;
            while !stop.load(Ordering::Relaxed) {
                let n = match listener.recv(Duration::from_millis(50)) {
                    Ok(Some(n)) => n,
                    Ok(None) => continue,
                    Err(_) => break,
                };
                match decide(&n) {
                    Some(errno) if listener.is_valid(n.id) => {
                        listener.fail(n.id, errno).expect("fail");
                        failed += 1;
                    }
                    _ => listener.allow(n.id).expect("allow"),
                }
            }
            failed
        })
    }

    /// Runs `cmd` under a filter notifying `syscalls`, answered by `decide`; returns the exit
    /// status, stderr and how many calls were failed. Panics after 30 s.
    fn run_filtered(
        mut cmd: Command,
        syscalls: &[u32],
        decide: impl FnMut(&Notification) -> Option<i32> + Send + 'static,
    ) -> (std::process::ExitStatus, String, u32) {
        let filter = notify_filter(syscalls);
        let (parent_end, child_end) = UnixStream::pair().expect("socketpair");
        let stop = Arc::new(AtomicBool::new(false));
        let supervisor = supervise(parent_end, stop.clone(), decide);
        let raw = child_end.as_raw_fd();
        // SAFETY: install_in_child is async-signal-safe and the filter was built before fork.
        unsafe { cmd.pre_exec(move || install_in_child(&filter, raw)) };
        let mut child = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child_end);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("filtered child did not finish in 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        stop.store(true, Ordering::Relaxed);
        let failed = supervisor.join().expect("supervisor thread");
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .expect("read stderr");
        (status, stderr, failed)
    }

    #[test]
    fn filter_shape() {
        let f = notify_filter(&[257, 1, 1]);
        assert_eq!(f.len(), 4 + 2 * 2 + 1);
        assert_eq!(f[1].k, AUDIT_ARCH_X86_64);
        assert_eq!((f[4].k, f[6].k), (1, 257));
        assert_eq!(f[5].k, libc::SECCOMP_RET_USER_NOTIF);
        assert_eq!(f[8].k, libc::SECCOMP_RET_ALLOW);
    }

    #[test]
    #[ignore = "needs root (installs seccomp filters, reads another process's memory); scripts/test runs it"]
    fn third_write_to_file_fails_with_enospc() {
        require_root();
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("out.txt");
        let path = file.to_string_lossy().into_owned();
        let script = format!("for i in 1 2 3 4 5; do echo x$i >> '{path}' || echo failed$i >&2; done");
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script);
        let target = path.clone();
        let mut writes = 0;
        let (_, stderr, failed) = run_filtered(cmd, &[libc::SYS_write as u32], move |n| {
            if fd_path(n.tid, n.args[0] as i32).as_deref() != Some(target.as_str()) {
                return None;
            }
            writes += 1;
            (writes == 3).then_some(libc::ENOSPC)
        });
        let content = std::fs::read_to_string(&file).expect("output file");
        assert_eq!(content, "x1\nx2\nx4\nx5\n", "stderr: {stderr}");
        assert!(stderr.contains("failed3"), "stderr: {stderr}");
        assert_eq!(failed, 1);
    }

    #[test]
    #[ignore = "needs root (installs seccomp filters, reads another process's memory); scripts/test runs it"]
    fn read_string_reads_own_memory() {
        require_root();
        let s = std::ffi::CString::new("hello seccomp").expect("cstring");
        let got = read_string(std::process::id(), s.as_ptr() as u64, 4096).expect("read");
        assert_eq!(got, b"hello seccomp");
        let err = read_string(std::process::id(), s.as_ptr() as u64, 5).expect_err("too long");
        assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG));
    }

    #[test]
    #[ignore = "needs root (installs seccomp filters, reads another process's memory); scripts/test runs it"]
    fn read_string_stops_at_end_of_mapping() {
        require_root();
        let page = page_size() as usize;
        // SAFETY: a fresh anonymous mapping of two pages, the second unmapped again.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::munmap(p.cast::<u8>().add(page).cast(), page), 0);
            p.cast::<u8>()
        };
        let text = b"edge\0";
        // SAFETY: the last bytes of the first, still mapped page.
        let at = unsafe {
            let at = base.add(page - text.len());
            std::ptr::copy_nonoverlapping(text.as_ptr(), at, text.len());
            at
        };
        let got = read_string(std::process::id(), at as u64, 4096);
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(base.cast(), page) };
        assert_eq!(got.expect("read at end of mapping"), b"edge");
    }

    #[test]
    #[ignore = "needs root (installs seccomp filters, reads another process's memory); scripts/test runs it"]
    fn openat_path_is_readable_and_fails_with_eacces() {
        require_root();
        const PATH: &str = "/nonexistent/seccomp-test-path";
        let mut cmd = Command::new("cat");
        cmd.arg(PATH).stdout(Stdio::null());
        let (status, stderr, failed) = run_filtered(cmd, &[libc::SYS_openat as u32], |n| {
            let path = read_string(n.tid, n.args[1], 4096).ok()?;
            (path == PATH.as_bytes()).then_some(libc::EACCES)
        });
        assert!(!status.success());
        assert!(stderr.contains("Permission denied"), "stderr: {stderr}");
        assert_eq!(failed, 1);
    }
}
