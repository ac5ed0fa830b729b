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
    /// the comm it had before it renamed itself (prctl, /proc/PID/comm): `comm` is the new
    /// name, as ps shows it; absent when it kept its name, and in older dumps
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_comm: Option<String>,
    /// the command line it started with (its exec's argv; a forked child's is its parent's)
    /// when it rewrote it later (setproctitle, `postgres: checkpointer`): `cmdline` is the
    /// new one, as ps shows it; absent when it kept it, and in older dumps
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_cmdline: Option<Vec<String>>,
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

    /// Takes a name and command line the process now shows (None: unknown, kept as is). The
    /// first ones it had stay in `exec_comm`/`exec_cmdline` while they differ from the
    /// current ones.
    pub fn retitle(&mut self, comm: &str, cmdline: Option<Vec<String>>) {
        if !comm.is_empty() && comm != self.comm {
            let before = std::mem::replace(&mut self.comm, comm.to_string());
            self.exec_comm.get_or_insert(before);
        }
        if self.exec_comm.as_deref() == Some(self.comm.as_str()) {
            self.exec_comm = None;
        }
        if let Some(now) = cmdline.filter(|c| !c.is_empty()) {
            if self.cmdline.as_ref() != Some(&now) {
                if let Some(before) = self.cmdline.replace(now) {
                    self.exec_cmdline.get_or_insert(before);
                }
            }
        }
        if self.exec_cmdline.is_some() && self.exec_cmdline == self.cmdline {
            self.exec_cmdline = None;
        }
    }

    /// The command line it started with: `exec_cmdline` if it rewrote it, else `cmdline`.
    pub fn started_cmdline(&self) -> Option<&Vec<String>> {
        self.exec_cmdline.as_ref().or(self.cmdline.as_ref())
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

/// Splits a NUL-separated argv area (/proc/PID/cmdline, or the kernel's copy of it) into
/// arguments. A process that rewrote its argv in place (setproctitle) leaves NUL padding
/// after its title: trailing empty arguments are dropped.
pub fn split_argv(area: &[u8]) -> Vec<String> {
    let mut args: Vec<String> = area
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    while args.last().is_some_and(String::is_empty) {
        args.pop();
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Option<Vec<String>> {
        Some(s.split(' ').map(String::from).collect())
    }

    fn started() -> ProcInfo {
        ProcInfo {
            pid: 7,
            comm: "redis-server".into(),
            cmdline: argv("/usr/bin/redis-server --port 6379"),
            ..Default::default()
        }
    }

    #[test]
    fn a_rename_keeps_what_it_started_with() {
        let mut p = started();
        p.retitle("redis-rdb-bgsav", argv("redis-rdb-bgsave 127.0.0.1:6379"));
        assert_eq!(p.comm, "redis-rdb-bgsav");
        assert_eq!(p.exec_comm.as_deref(), Some("redis-server"));
        assert_eq!(p.cmdline, argv("redis-rdb-bgsave 127.0.0.1:6379"));
        assert_eq!(
            p.started_cmdline(),
            argv("/usr/bin/redis-server --port 6379").as_ref()
        );
        // a second rename keeps the first name, not the intermediate one
        p.retitle("bgsave-2", argv("second title"));
        assert_eq!(p.exec_comm.as_deref(), Some("redis-server"));
        assert_eq!(p.exec_cmdline, argv("/usr/bin/redis-server --port 6379"));
    }

    #[test]
    fn an_unchanged_or_unknown_title_adds_nothing() {
        let mut p = started();
        p.retitle("redis-server", argv("/usr/bin/redis-server --port 6379"));
        p.retitle("", None);
        assert_eq!(p, started());
        // renamed back: nothing differs any more
        p.retitle("other", argv("other"));
        p.retitle("redis-server", argv("/usr/bin/redis-server --port 6379"));
        assert_eq!(p, started());
    }

    #[test]
    fn an_argv_rewritten_in_place_has_no_padding_arguments() {
        assert_eq!(
            split_argv(b"postgres: checkpointer \0\0\0\0"),
            ["postgres: checkpointer "]
        );
        assert_eq!(split_argv(b"a\0\0b\0"), ["a", "", "b"]);
        assert!(split_argv(b"").is_empty());
    }

    #[test]
    fn dumps_without_the_fields_still_read() {
        let old = r#"{"pid":1,"ppid":0,"comm":"x","exe":null,"cmdline":null,"cwd":null,"start_ns":0,"exit_ns":null}"#;
        let p: ProcInfo = serde_json::from_str(old).unwrap();
        assert_eq!((p.exec_comm, p.exec_cmdline), (None, None));
        let renamed = ProcInfo {
            exec_comm: Some("a".into()),
            ..Default::default()
        };
        let json = serde_json::to_string(&renamed).unwrap();
        assert!(json.contains("\"exec_comm\":\"a\"") && !json.contains("exec_cmdline"));
    }
}
