//! Everything the reproducer learns without running anything: the production timeline of
//! one or more dumps, which process is which node, the diagnosis (faults vs symptoms) and
//! its candidates' production contexts, the fault-free profile's statistics, the programs a
//! node really ran (wrappers left out), the injection sites inside node binaries, and the
//! causal chain from an accepted schedule's fault to the failure (from the runs a search
//! kept), and the testbed's drift from production (builds, configuration files, kernel
//! and limits). Reads dumps through tracedump; never touches the testbed.
pub mod binary;
pub mod chain;
pub mod context;
pub mod contexts;
pub mod diagnose;
pub mod drift;
pub mod nodemap;
pub mod profile;
pub mod programs;
pub mod timeline;
