//! reproducer: runs a scenario (nodes, workload, oracle) on a local testbed and injects a
//! fault schedule at exactly the points the schedule names; profiles fault-free runs,
//! diagnoses production dumps and searches for the schedule that brings the bug back.
pub mod binary;
pub mod confirm;
pub mod diagnose;
pub mod executor;
pub mod injector;
pub mod interrupt;
pub mod netbed;
pub mod nodemap;
pub mod nodes;
pub mod profile;
pub mod programs;
pub mod report;
pub mod retention;
pub mod runas;
pub mod scenario;
pub mod schedule;
pub mod search;
pub mod seccomp;
pub mod setup;
pub mod supervisor;
pub mod timeline;
mod toml_error;
