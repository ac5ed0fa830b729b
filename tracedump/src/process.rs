//! What a dump tells about one traced process. tracerd fills it from exec/fork records and
//! /proc; readers map processes to scenario nodes with it.
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub exe: Option<String>,
    pub cmdline: Option<Vec<String>>,
    pub cwd: Option<String>,
    /// CLOCK_BOOTTIME of the exec or fork that started it (or of its start, for processes
    /// found by the start-up scan)
    pub start_ns: u64,
    pub exit_ns: Option<u64>,
}
