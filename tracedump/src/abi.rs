//! The values bpf/events.h defines that a dump reader needs (record kinds, process states,
//! pause causes, how syscall arguments name their target), and the one way to copy a C
//! record out of bytes.
//!
//! Why hand-written and not generated: the BPF-free side must build without clang and
//! without the BPF object, and the generated Rust view of events.h comes from the object's
//! BTF (the libbpf skeleton in tracerd). So the few values needed here are mirrored by
//! hand, and tracerd/src/bpf.rs checks every one of them against the skeleton at compile
//! time: a change to events.h that is not made here too fails the build.

/// Length of a kernel `comm` (TRACERD_COMM_LEN).
pub const COMM_LEN: usize = 16;

/// Kinds of records (enum tracerd_event_kind). The dump's record kinds use the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EventKind {
    SyscallFailure = 1,
    Function = 2,
    NetworkGap = 3,
    ProcessState = 4,
    /// exec or fork of a traced process: feeds the process table, never the window
    ProcessStart = 5,
    /// a target's read-only open of a file under /etc at its start: feeds the process's
    /// environment, never the window
    ConfigOpen = 6,
    /// a traced process renamed itself: feeds the process table, never the window
    ProcessRename = 7,
}

impl EventKind {
    pub fn from_raw(raw: u32) -> Option<EventKind> {
        Some(match raw {
            1 => EventKind::SyscallFailure,
            2 => EventKind::Function,
            3 => EventKind::NetworkGap,
            4 => EventKind::ProcessState,
            5 => EventKind::ProcessStart,
            6 => EventKind::ConfigOpen,
            7 => EventKind::ProcessRename,
            _ => return None,
        })
    }
}

/// enum tracerd_process_state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ProcessState {
    Paused = 1,
    Exited = 2,
    Killed = 3,
}

impl ProcessState {
    pub fn from_raw(raw: u32) -> Option<ProcessState> {
        Some(match raw {
            1 => ProcessState::Paused,
            2 => ProcessState::Exited,
            3 => ProcessState::Killed,
            _ => return None,
        })
    }
}

/// enum tracerd_pause_cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u32)]
pub enum PauseCause {
    /// SIGSTOP or a ptrace stop
    Stopped = 1,
    /// D state
    Uninterruptible = 2,
    /// cgroup freezer
    Frozen = 3,
}

impl PauseCause {
    pub fn from_raw(raw: u32) -> Option<PauseCause> {
        Some(match raw {
            1 => PauseCause::Stopped,
            2 => PauseCause::Uninterruptible,
            3 => PauseCause::Frozen,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            PauseCause::Stopped => "stopped",
            PauseCause::Uninterruptible => "uninterruptible",
            PauseCause::Frozen => "frozen",
        }
    }
}

/// How a syscall's argument names what it works on (enum tracerd_arg_kind, without NONE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ArgKind {
    /// a path string
    Path = 1,
    /// dirfd in arg0, a path string in the named argument
    PathAt = 2,
    /// a file descriptor
    Fd = 3,
    /// socket fd in arg0, a struct sockaddr * in the named argument
    Sockaddr = 4,
}

/// A C record that may be copied out of any bytes: every field an integer or an array of
/// them, every bit pattern valid.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs whose fields are all integers (or arrays or
/// structs of integers), such as the types generated from bpf/events.h and injector.h.
pub unsafe trait Plain: Copy {}

/// Copies a `T` out of the start of `data`; None if `data` is too short.
pub fn read_struct<T: Plain>(data: &[u8]) -> Option<T> {
    if data.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: the length is checked; `T: Plain` is valid for any bit pattern and
    // read_unaligned needs no alignment.
    Some(unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<T>()) })
}

/// The bytes of a `T`, to hand to a BPF map.
pub fn bytes_of<T: Plain>(value: &T) -> &[u8] {
    // SAFETY: `T: Plain` is a repr(C) struct of integers that the generated types lay out
    // without padding (events.h and injector.h keep it so), so every byte is initialized.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// The bytes of a NUL-terminated C buffer, at most `len_hint` long when that is non-zero.
pub fn c_bytes(buf: &[i8], len_hint: usize) -> &[u8] {
    // SAFETY: i8 and u8 have the same size and alignment.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), buf.len()) };
    let limit = if len_hint == 0 {
        bytes.len()
    } else {
        len_hint.min(bytes.len())
    };
    let end = bytes[..limit].iter().position(|&b| b == 0).unwrap_or(limit);
    &bytes[..end]
}

/// A kernel `comm` (C chars) as bytes.
pub fn comm_bytes(comm: &[i8; COMM_LEN]) -> [u8; COMM_LEN] {
    let mut out = [0u8; COMM_LEN];
    for (o, c) in out.iter_mut().zip(comm.iter()) {
        *o = *c as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_values_round_trip() {
        for k in [
            EventKind::SyscallFailure,
            EventKind::Function,
            EventKind::NetworkGap,
            EventKind::ProcessState,
            EventKind::ProcessStart,
            EventKind::ConfigOpen,
            EventKind::ProcessRename,
        ] {
            assert_eq!(EventKind::from_raw(k as u32), Some(k));
        }
        for s in [ProcessState::Paused, ProcessState::Exited, ProcessState::Killed] {
            assert_eq!(ProcessState::from_raw(s as u32), Some(s));
        }
        for c in [
            PauseCause::Stopped,
            PauseCause::Uninterruptible,
            PauseCause::Frozen,
        ] {
            assert_eq!(PauseCause::from_raw(c as u32), Some(c));
        }
        assert_eq!(EventKind::from_raw(0), None);
    }

    #[test]
    fn c_bytes_stops_at_nul_or_hint() {
        let buf: [i8; 6] = [b'a' as i8, b'b' as i8, 0, b'c' as i8, 0, 0];
        assert_eq!(c_bytes(&buf, 0), b"ab");
        assert_eq!(c_bytes(&buf, 1), b"a");
    }
}
