//! The local test bed one run happens on: node processes and their network namespaces, the
//! tracing session, and the mechanisms that carry out a fault plan — the injector's BPF
//! probes and partition filter, the seccomp supervisors of syscall faults, the scenario's setup steps and node accounts, and the executor
//! that drives a run and tears everything down; the search's runner on it, and the
//! `profile` command's fault-free runs.
pub mod executor;
pub mod injector;
pub mod netbed;
pub mod nodes;
pub mod profiling;
pub mod runas;
pub mod runner;
pub mod seccomp;
pub mod setup;
pub mod spec;
pub mod supervisor;
