//! System tests of the reproducer on the real kernel, as root; one module per topic: faults
//! injected into tests/programs/faulty.c at the points a schedule names, `profile`, a run's
//! life, a search's life (its binary replaced while it runs), runs side by side, `diagnose` on dumps the real tracerd daemon writes (and compared with a testbed run's), the bug
//! benchmark's fast cases end to end, and a search's attempts as jobs of a real Slurm. After every test: no stray process, network
//! namespace, bridge or BPF link. Each test that needs root is `#[ignore]`d with the reason,
//! so a plain `cargo test` lists it as skipped; scripts/test runs every one
//! (`--include-ignored`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/replay.rs"]
mod replay;

mod bugbench;
mod diagnosis;
mod drift;
mod faults;
mod ipv6;
mod jobs;
mod ownership;
mod partition;
mod profile;
mod runs;
mod search;
mod silences;
mod slurm;
