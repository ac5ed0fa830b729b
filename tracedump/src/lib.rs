//! tracedump: what crosses from tracerd to everyone who reads its dumps, with no BPF in it.
//! The dump file format (reader and writer), the records of the in-memory window it holds,
//! the typed event model those records resolve to (JSON is one view of it), the values
//! bpf/events.h defines, syscall/errno/signal names, process info, loss counters, the one
//! atomic file writer, the function symbols of ELF binaries, several dumps merged on one
//! clock, and their export as a Perfetto trace. tracerd writes dumps with it; the
//! reproducer's analysis reads them with it and never links libbpf.
pub mod abi;
pub mod addr;
pub mod atomic;
pub mod container;
pub mod counters;
pub mod dump;
pub mod elf;
pub mod environment;
pub mod event;
pub mod merge;
pub mod perfetto;
pub mod process;
pub mod record;
pub mod redact;
mod syscall_tables;
pub mod syscalls;
