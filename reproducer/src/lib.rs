//! reproducer: runs a scenario (nodes, workload, oracle) on a local testbed and injects a
//! fault schedule at exactly the points the schedule names.
pub mod binary;
pub mod executor;
pub mod injector;
pub mod interrupt;
pub mod netbed;
pub mod nodemap;
pub mod nodes;
pub mod profile;
pub mod scenario;
pub mod schedule;
pub mod seccomp;
pub mod supervisor;
mod toml_error;
