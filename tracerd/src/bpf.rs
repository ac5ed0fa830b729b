//! The generated skeleton of bpf/tracer.bpf.c and the Rust view of bpf/events.h.
#![allow(clippy::all, non_camel_case_types, non_upper_case_globals, dead_code)]
include!(concat!(env!("OUT_DIR"), "/tracer.skel.rs"));
