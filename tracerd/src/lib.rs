//! tracerd: an always-on flight recorder of the externally visible events of services
//! (failed syscalls, uprobe hits, network gaps, process states), kept in a bounded window
//! and written to a dump file on demand. The library is the tracing engine and the dump
//! format; the daemon (`tracerd run`) and the reproducer's test runs both use it.
pub mod bpf;
pub mod capture;
pub mod config;
pub mod daemon;
pub mod dump;
mod elfsyms;
pub mod engine;
pub mod inspect;
pub mod metrics;
mod mapdump;
pub mod procs;
pub mod record;
pub mod recorder;
pub mod redact;
pub mod session;
mod syscall_tables;
pub mod syscalls;
pub mod triggers;
