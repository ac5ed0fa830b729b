//! The generated skeleton of bpf/tracer.bpf.c and the Rust view of bpf/events.h, and the
//! compile-time check that tracedump's hand-written mirror of events.h (tracedump/src/abi.rs)
//! still says what the header says.
#![allow(clippy::all, non_camel_case_types, non_upper_case_globals, dead_code)]
include!(concat!(env!("OUT_DIR"), "/tracer.skel.rs"));

use tracedump::abi::{self, Plain};
use types::*;

// SAFETY (all of them): generated from events.h, #[repr(C)], fields are integers and arrays
// of integers, and the header keeps every struct free of implicit padding.
unsafe impl Plain for tracerd_header {}
unsafe impl Plain for tracerd_syscall_failure {}
unsafe impl Plain for tracerd_function_hit {}
unsafe impl Plain for tracerd_network_gap {}
unsafe impl Plain for tracerd_process_state_event {}
unsafe impl Plain for tracerd_process_start {}
unsafe impl Plain for tracerd_config_open {}
unsafe impl Plain for tracerd_process_rename {}
unsafe impl Plain for tracerd_open_file {}
unsafe impl Plain for tracerd_conn {}
unsafe impl Plain for tracerd_flow {}
unsafe impl Plain for tracerd_flow_key {}
unsafe impl Plain for tracerd_pause {}
unsafe impl Plain for tracerd_syscall_key {}
unsafe impl Plain for tracerd_syscall_arg {}

const _: () = {
    use std::mem::size_of;
    assert!(abi::EventKind::SyscallFailure as u32 == tracerd_event_kind::TRACERD_EV_SYSCALL_FAILURE.0);
    assert!(abi::EventKind::Function as u32 == tracerd_event_kind::TRACERD_EV_FUNCTION.0);
    assert!(abi::EventKind::NetworkGap as u32 == tracerd_event_kind::TRACERD_EV_NETWORK_GAP.0);
    assert!(abi::EventKind::ProcessState as u32 == tracerd_event_kind::TRACERD_EV_PROCESS_STATE.0);
    assert!(abi::EventKind::ProcessStart as u32 == tracerd_event_kind::TRACERD_EV_PROCESS_START.0);
    assert!(abi::EventKind::ConfigOpen as u32 == tracerd_event_kind::TRACERD_EV_CONFIG_OPEN.0);
    assert!(abi::EventKind::ProcessRename as u32 == tracerd_event_kind::TRACERD_EV_PROCESS_RENAME.0);
    assert!(abi::ProcessState::Paused as u32 == tracerd_process_state::TRACERD_PS_PAUSED.0);
    assert!(abi::ProcessState::Exited as u32 == tracerd_process_state::TRACERD_PS_EXITED.0);
    assert!(abi::ProcessState::Killed as u32 == tracerd_process_state::TRACERD_PS_KILLED.0);
    assert!(abi::PauseCause::Stopped as u32 == tracerd_pause_cause::TRACERD_PAUSE_STOPPED.0);
    assert!(abi::PauseCause::Uninterruptible as u32 == tracerd_pause_cause::TRACERD_PAUSE_UNINTERRUPTIBLE.0);
    assert!(abi::PauseCause::Frozen as u32 == tracerd_pause_cause::TRACERD_PAUSE_FROZEN.0);
    assert!(abi::ArgKind::Path as u32 == tracerd_arg_kind::TRACERD_ARG_PATH.0);
    assert!(abi::ArgKind::PathAt as u32 == tracerd_arg_kind::TRACERD_ARG_PATH_AT.0);
    assert!(abi::ArgKind::Fd as u32 == tracerd_arg_kind::TRACERD_ARG_FD.0);
    assert!(abi::ArgKind::Sockaddr as u32 == tracerd_arg_kind::TRACERD_ARG_SOCKADDR.0);
    assert!(abi::COMM_LEN == size_of::<[i8; 16]>() && size_of::<tracerd_header>() == 24 + abi::COMM_LEN);
    // tracedump::addr encodes a tracerd_addr field by field: family u16, port u16, addr [u8; 16]
    assert!(size_of::<tracerd_addr>() == 20);
    assert!(std::mem::offset_of!(tracerd_addr, port) == 2 && std::mem::offset_of!(tracerd_addr, addr) == 4);
    // procs::KERNEL_ARGS_LEN is TRACERD_ARGS_LEN
    assert!(
        size_of::<tracerd_process_rename>()
            == size_of::<tracerd_header>() + 8 + crate::procs::KERNEL_ARGS_LEN
    );
    // the engine writes a tracerd_syscall_arg as [kind, index, 0, 0]
    assert!(size_of::<tracerd_syscall_arg>() == 4 && std::mem::offset_of!(tracerd_syscall_arg, index) == 1);
};
