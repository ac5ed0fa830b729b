//! The local test bed one run happens on: node processes and their network namespaces, the
//! tracing session, and the mechanisms that carry out a fault plan — the injector's BPF
//! probes and partition filter, the seccomp supervisors of syscall faults, the scenario's setup steps and node accounts, and the executor
//! that drives a run and tears everything down.
pub mod executor;
pub mod injector;
pub mod interrupt;
pub mod netbed;
pub mod nodes;
pub mod runas;
pub mod seccomp;
pub mod setup;
pub mod spec;
pub mod supervisor;
