//! What a dump tells about one traced process. tracerd fills it from exec/fork records and
//! /proc; readers map processes to scenario nodes with it.
use serde::{Deserialize, Serialize};

/// One process of the dump's process table. The fields after `exit_ns` are absent from dumps
/// written before containers were recorded, and left out of the JSON when empty.
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
    /// cgroup v2 path (as /proc/PID/cgroup shows it, after `0::`)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// "docker", "containerd", "cri-o" or "podman", when the cgroup path says (see container.rs)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
    /// the container's full id, when the cgroup path names a container
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// the Kubernetes pod's uid, when the cgroup path is under a kubepods slice
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// the pid as the process's own pid namespace sees it, when that is not the host's
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<u32>,
    /// its build, configuration files and limits (see environment.rs); absent in dumps
    /// written before they were recorded
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::environment::ProcEnvironment>,
}

impl ProcInfo {
    /// Sets the cgroup path and the container fields it implies.
    pub fn set_cgroup(&mut self, path: &str) {
        let c = crate::container::parse(path);
        self.cgroup = Some(path.to_string());
        self.container_runtime = c.runtime.map(str::to_string);
        self.container_id = c.id;
        self.pod_uid = c.pod_uid;
    }

    /// The container fields, for labels ("docker 0123456789ab"); None outside containers.
    pub fn container_label(&self) -> Option<String> {
        crate::container::label(
            self.container_runtime.as_deref(),
            self.container_id.as_deref(),
            self.pod_uid.as_deref(),
        )
    }
}
