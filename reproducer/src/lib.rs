//! reproducer: runs a scenario (nodes, workload, oracle) on a local testbed and injects a
//! fault schedule at exactly the points the schedule names; profiles fault-free runs,
//! diagnoses production dumps and searches for the schedule that brings the bug back.
//!
//! The folders follow the data: `model` (scenario, schedule, fault plan) is what everyone
//! shares; `analysis` turns dumps into a diagnosis; `search` turns a diagnosis into
//! schedules and runs them through a `Runner` (the `testbed` in production, a fake in unit
//! tests); `report` renders the outcome.
//!
//! Everything but `testbed` is the analysis: it reads dumps and profiles and never loads a
//! BPF program. The `testbed` feature (on by default) adds the test bed and with it tracerd's
//! engine and libbpf; `--no-default-features` builds the analysis alone, which needs no
//! clang, libelf or libbpf (a laptop that only diagnoses dumps).
pub mod analysis;
pub mod cli;
pub mod interrupt;
pub mod model;
pub mod report;
pub mod search;
#[cfg(feature = "testbed")]
pub mod testbed;
