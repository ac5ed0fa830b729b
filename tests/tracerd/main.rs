//! System tests of tracerd on the real kernel, as root: real BPF programs, real processes,
//! real network namespaces; one module per topic. Each test targets its own copy of a
//! tests/programs binary (a distinct comm), so tests do not see each other's processes.
//! Each test that needs root is `#[ignore]`d with the reason, so a plain `cargo test` lists
//! it as skipped; scripts/test runs every one (`--include-ignored`).

#[path = "../common/mod.rs"]
mod common;

mod cgroups;
mod containers;
mod daemon;
mod dumpdir;
mod environment;
mod events;
mod export;
mod fds;
mod flows;
mod functions;
mod kernel;
mod load;
mod metrics;
mod redaction;
mod reload;
mod status;
mod stop;
mod tables;
mod targets;
mod triggers;
