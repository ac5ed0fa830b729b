//! reproducer: runs a scenario (nodes, workload, oracle) on a local testbed and injects a
//! fault schedule at exactly the points the schedule names; profiles fault-free runs,
//! diagnoses production dumps and searches for the schedule that brings the bug back.
//!
//! The folders follow the data: `model` (scenario, schedule, fault plan) is what everyone
//! shares; `analysis` turns dumps into a diagnosis; `search` turns a diagnosis into
//! schedules and runs them through a `Runner` (the `testbed` in production, a fake in unit
//! tests); `report` renders the outcome. `profiling` is the `profile` command (fault-free
//! runs, aggregated by `analysis::profile`).
pub mod analysis;
pub mod model;
pub mod profiling;
pub mod report;
pub mod search;
pub mod testbed;
