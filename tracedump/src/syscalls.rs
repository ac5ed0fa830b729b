//! Names of syscalls, errnos and signals, both ways, and the table that tells the
//! kernel programs which argument of each syscall names its file, path or peer.
pub use crate::abi::ArgKind;
use crate::syscall_tables::{ERRNO_NAMES, SYSCALL_NAMES};

/// Name of syscall `nr` ("syscall_NNN" when the table does not know it).
pub fn syscall_name(nr: u32) -> String {
    match SYSCALL_NAMES.get(nr as usize) {
        Some(name) if !name.is_empty() => (*name).to_string(),
        _ => format!("syscall_{nr}"),
    }
}

/// Number of the syscall called `name`, if the table knows it.
pub fn syscall_number(name: &str) -> Option<u32> {
    if name.is_empty() {
        return None;
    }
    SYSCALL_NAMES.iter().position(|n| *n == name).map(|i| i as u32)
}

/// Kernel-internal codes that can show up in a raw syscall exit but never reach user space.
const INTERNAL_ERRNOS: [(i64, &str); 6] = [
    (512, "ERESTARTSYS"),
    (513, "ERESTARTNOINTR"),
    (514, "ERESTARTNOHAND"),
    (515, "ENOIOCTLCMD"),
    (516, "ERESTART_RESTARTBLOCK"),
    (517, "EPROBE_DEFER"),
];

/// Name of a positive errno value ("E123" when unknown).
pub fn errno_name(errno: i64) -> String {
    if let Some(name) = usize::try_from(errno).ok().and_then(|i| ERRNO_NAMES.get(i)) {
        if !name.is_empty() {
            return (*name).to_string();
        }
    }
    if let Some((_, name)) = INTERNAL_ERRNOS.iter().find(|(v, _)| *v == errno) {
        return (*name).to_string();
    }
    format!("E{errno}")
}

/// Value of the errno called `name` (e.g. "ENOSPC").
pub fn errno_number(name: &str) -> Option<i64> {
    if name.is_empty() {
        return None;
    }
    if let Some(i) = ERRNO_NAMES.iter().position(|n| *n == name) {
        return Some(i as i64);
    }
    match name {
        "EWOULDBLOCK" => Some(libc::EAGAIN as i64),
        "EDEADLOCK" => Some(libc::EDEADLK as i64),
        _ => INTERNAL_ERRNOS.iter().find(|(_, n)| *n == name).map(|(v, _)| *v),
    }
}

const SIGNAL_NAMES: [&str; 32] = [
    "",
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];

/// Name of signal `sig` ("SIG34" for real-time and unknown ones).
pub fn signal_name(sig: u32) -> String {
    match SIGNAL_NAMES.get(sig as usize) {
        Some(name) if !name.is_empty() => (*name).to_string(),
        _ => format!("SIG{sig}"),
    }
}

/// Number of the signal called `name`; accepts "SIGKILL", "KILL" and "9".
pub fn signal_number(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return (1..65).contains(&n).then_some(n);
    }
    let full = if name.starts_with("SIG") {
        name.to_string()
    } else {
        format!("SIG{name}")
    };
    SIGNAL_NAMES.iter().position(|n| *n == full).map(|i| i as u32)
}

/// Which argument of which syscall names a path, an fd or a socket address.
const ARG_TABLE: &[(&str, ArgKind, u8)] = {
    use ArgKind::{Fd as FD, Path as PATH, PathAt as PATH_AT, Sockaddr as SOCKADDR};
    &[
        ("open", PATH, 0),
        ("creat", PATH, 0),
        ("stat", PATH, 0),
        ("lstat", PATH, 0),
        ("access", PATH, 0),
        ("unlink", PATH, 0),
        ("rename", PATH, 0),
        ("mkdir", PATH, 0),
        ("rmdir", PATH, 0),
        ("chdir", PATH, 0),
        ("truncate", PATH, 0),
        ("readlink", PATH, 0),
        ("chmod", PATH, 0),
        ("chown", PATH, 0),
        ("lchown", PATH, 0),
        ("link", PATH, 0),
        ("symlink", PATH, 1),
        ("execve", PATH, 0),
        ("mknod", PATH, 0),
        ("statfs", PATH, 0),
        ("utime", PATH, 0),
        ("utimes", PATH, 0),
        ("chroot", PATH, 0),
        ("acct", PATH, 0),
        ("swapon", PATH, 0),
        ("setxattr", PATH, 0),
        ("lsetxattr", PATH, 0),
        ("getxattr", PATH, 0),
        ("lgetxattr", PATH, 0),
        ("listxattr", PATH, 0),
        ("llistxattr", PATH, 0),
        ("removexattr", PATH, 0),
        ("lremovexattr", PATH, 0),
        ("openat", PATH_AT, 1),
        ("openat2", PATH_AT, 1),
        ("newfstatat", PATH_AT, 1),
        ("statx", PATH_AT, 1),
        ("faccessat", PATH_AT, 1),
        ("faccessat2", PATH_AT, 1),
        ("unlinkat", PATH_AT, 1),
        ("renameat", PATH_AT, 1),
        ("renameat2", PATH_AT, 1),
        ("mkdirat", PATH_AT, 1),
        ("mknodat", PATH_AT, 1),
        ("fchmodat", PATH_AT, 1),
        ("fchownat", PATH_AT, 1),
        ("readlinkat", PATH_AT, 1),
        ("linkat", PATH_AT, 1),
        ("execveat", PATH_AT, 1),
        ("futimesat", PATH_AT, 1),
        ("utimensat", PATH_AT, 1),
        ("name_to_handle_at", PATH_AT, 1),
        ("symlinkat", PATH, 2),
        ("read", FD, 0),
        ("write", FD, 0),
        ("pread64", FD, 0),
        ("pwrite64", FD, 0),
        ("readv", FD, 0),
        ("writev", FD, 0),
        ("preadv", FD, 0),
        ("pwritev", FD, 0),
        ("preadv2", FD, 0),
        ("pwritev2", FD, 0),
        ("close", FD, 0),
        ("fstat", FD, 0),
        ("lseek", FD, 0),
        ("fsync", FD, 0),
        ("fdatasync", FD, 0),
        ("ftruncate", FD, 0),
        ("fallocate", FD, 0),
        ("sync_file_range", FD, 0),
        ("fadvise64", FD, 0),
        ("flock", FD, 0),
        ("fcntl", FD, 0),
        ("ioctl", FD, 0),
        ("getdents64", FD, 0),
        ("getdents", FD, 0),
        ("fchmod", FD, 0),
        ("fchown", FD, 0),
        ("fchdir", FD, 0),
        ("fstatfs", FD, 0),
        ("syncfs", FD, 0),
        ("sendfile", FD, 0),
        ("copy_file_range", FD, 0),
        ("splice", FD, 0),
        ("tee", FD, 0),
        ("mmap", FD, 4),
        ("fsetxattr", FD, 0),
        ("fgetxattr", FD, 0),
        ("flistxattr", FD, 0),
        ("fremovexattr", FD, 0),
        ("sendto", FD, 0),
        ("recvfrom", FD, 0),
        ("sendmsg", FD, 0),
        ("recvmsg", FD, 0),
        ("sendmmsg", FD, 0),
        ("recvmmsg", FD, 0),
        ("shutdown", FD, 0),
        ("listen", FD, 0),
        ("accept", FD, 0),
        ("accept4", FD, 0),
        ("getsockopt", FD, 0),
        ("setsockopt", FD, 0),
        ("getpeername", FD, 0),
        ("getsockname", FD, 0),
        ("dup", FD, 0),
        ("dup2", FD, 0),
        ("dup3", FD, 0),
        ("connect", SOCKADDR, 1),
        ("bind", SOCKADDR, 1),
    ]
};

/// Which argument of syscall `nr` names its path, fd or address, and how.
pub fn syscall_arg_kind(nr: u32) -> Option<(ArgKind, u8)> {
    let name = SYSCALL_NAMES.get(nr as usize)?;
    let (_, kind, index) = ARG_TABLE.iter().find(|(n, _, _)| n == name)?;
    Some((*kind, *index))
}

/// The per-syscall argument table as loaded into the kernel's `syscall_args` map:
/// (syscall number, kind, argument index).
pub fn syscall_arg_table() -> Vec<(u32, ArgKind, u8)> {
    ARG_TABLE
        .iter()
        .filter_map(|(name, kind, index)| Some((syscall_number(name)?, *kind, *index)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(syscall_name(0), "read");
        assert_eq!(syscall_name(257), "openat");
        assert_eq!(syscall_number("write"), Some(1));
        assert_eq!(syscall_number(""), None);
        assert_eq!(errno_name(28), "ENOSPC");
        assert_eq!(errno_number("ENOENT"), Some(2));
        assert_eq!(errno_name(512), "ERESTARTSYS");
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_number("KILL"), Some(9));
        assert_eq!(signal_number("SIGSTOP"), Some(19));
        assert_eq!(signal_number("SIGNOPE"), None);
    }

    #[test]
    fn every_arg_table_entry_names_a_known_syscall() {
        for (name, _, _) in ARG_TABLE {
            assert!(
                syscall_number(name).is_some(),
                "{name} is not in the syscall table"
            );
        }
        assert_eq!(syscall_arg_table().len(), ARG_TABLE.len());
    }

    /// bpf/fexit_syscalls.h pairs each entry point with the syscall number the fexit program
    /// reports: a wrong number would record a failure under another syscall's name.
    #[test]
    fn every_fexit_entry_point_serves_the_syscall_number_it_names() {
        // the kernel functions that kept an older name than the syscall table's
        let renamed = [
            ("newstat", "stat"),
            ("newlstat", "lstat"),
            ("newfstat", "fstat"),
            ("sendfile64", "sendfile"),
            ("umount", "umount2"),
        ];
        let header = include_str!("../../bpf/fexit_syscalls.h");
        let mut count = 0;
        for line in header.lines().filter(|l| l.starts_with("X(")) {
            let inner = line.trim_start_matches("X(").trim_end_matches(')');
            let (function, nr) = inner.split_once(", ").expect("X(FUNCTION, NR)");
            let nr: u32 = nr.parse().expect("a syscall number");
            let name = renamed
                .iter()
                .find(|(f, _)| *f == function)
                .map_or(function, |(_, n)| *n);
            assert_eq!(syscall_name(nr), name, "X({function}, {nr})");
            count += 1;
        }
        assert!(count > 100, "only {count} entry points read from the header");
    }
}
