//! tracerd: an always-on flight recorder of the externally visible events of services
//! (failed syscalls, uprobe hits, network gaps, process states), kept in a bounded window
//! and written to a dump file on demand. The library is the tracing engine and the dump
//! writer; the daemon (`tracerd run`) and the reproducer's test runs both use it. The dump
//! format itself, and everything a reader needs, is the BPF-free `tracedump` crate.
pub mod bpf;
pub mod capture;
pub mod cgroup;
pub mod cli;
pub mod config;
pub mod config_error;
pub mod control;
pub mod daemon;
mod datagram_holders;
pub mod dumpdir;
pub mod engine;
pub mod environment;
pub mod flows;
pub mod inspect;
pub mod kernel;
mod mapdump;
pub mod metrics;
pub mod mountns;
pub mod procs;
pub mod recorder;
pub mod reload;
pub mod session;
pub mod skel;
pub mod status;
pub mod triggers;
pub mod uprobes;

// The format moved to tracedump; these keep `tracerd::dump::...` paths working.
pub use tracedump::{dump, record, redact, syscalls};
