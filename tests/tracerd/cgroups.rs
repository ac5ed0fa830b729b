//! Targets by cgroup v2 subtree (`--target-cgroup`): on a cgroup the test creates, a process
//! already in it (in a child cgroup) is traced from the start, one moved into it later is
//! traced without an exec, its sibling outside is not, a child it forks later is, one started
//! there later is, and the dump's process table carries the cgroup path.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a
/// hybrid host).
pub fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(2) == Some("cgroup2"))
        .expect("a cgroup v2 hierarchy is mounted");
    PathBuf::from(line.split(' ').nth(1).unwrap())
}

/// A cgroup (and its child cgroups) created by a test: on drop its processes are moved back to
/// the root cgroup, then the directories are removed, deepest first.
pub struct TestCgroup {
    pub mount: PathBuf,
    pub dir: PathBuf,
    children: Vec<PathBuf>,
}

impl TestCgroup {
    pub fn new(name: &str) -> TestCgroup {
        let mount = cgroup2_mount();
        let dir = mount.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating cgroup {}: {e}", dir.display()));
        TestCgroup {
            mount,
            dir,
            children: Vec::new(),
        }
    }

    pub fn child(&mut self, name: &str) -> PathBuf {
        let dir = self.dir.join(name);
        std::fs::create_dir(&dir).unwrap();
        self.children.push(dir.clone());
        dir
    }

    /// The path as /proc/PID/cgroup shows it.
    pub fn path(&self) -> String {
        format!("/{}", self.dir.strip_prefix(&self.mount).unwrap().display())
    }

    pub fn move_into(dir: &Path, pid: u32) {
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let root_procs = self.mount.join("cgroup.procs");
        for dir in self.children.iter().rev().chain(std::iter::once(&self.dir)) {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                let _ = std::fs::write(&root_procs, pid);
            }
            // a cgroup is removable once its last process is out (exiting ones linger briefly)
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A shell that waits for a line on stdin before each step of `script`; killed on drop.
struct Stepped {
    child: Reaped,
    stdin: ChildStdin,
}

impl Stepped {
    fn start(cmd: &mut Command) -> Stepped {
        let mut child: Child = cmd.stdin(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        Stepped {
            child: Reaped(child),
            stdin,
        }
    }

    fn shell(script: &str) -> Stepped {
        Self::start(Command::new("sh").args(["-c", script]))
    }

    fn pid(&self) -> u32 {
        self.child.pid() as u32
    }

    fn step(&mut self) {
        self.stdin.write_all(b"go\n").unwrap();
    }

    fn finish(mut self) {
        self.step();
        let status = self.child.0.wait().unwrap();
        assert!(status.success(), "the shell ended with {status}");
    }
}

/// A failing open (`read` is a regular builtin: the shell opens the file itself and goes on).
fn fail(path: &str) -> String {
    format!("read x < {path}")
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates cgroups); scripts/test runs it"]
fn a_cgroup_subtree_is_traced_present_and_future() {
    require_root();
    let mut cg = TestCgroup::new("tracerd-test-cg");
    let inner = cg.child("inner");
    let tag = std::process::id();
    let (seeded, moved, child, sibling, started) = (
        format!("/nonexistent/cg_seeded_{tag}"),
        format!("/nonexistent/cg_moved_{tag}"),
        format!("/nonexistent/cg_child_{tag}"),
        format!("/nonexistent/cg_sibling_{tag}"),
        format!("/nonexistent/cg_started_{tag}"),
    );
    // already in the subtree (a child cgroup of it) when tracerd starts
    let mut early = Stepped::shell(&format!("read go; {}; read done", fail(&seeded)));
    TestCgroup::move_into(&inner, early.pid());
    let d = Daemon::start(&["--target-cgroup", &cg.path()]);

    let mut late = Stepped::shell(&format!(
        "read go; {}; ({}); read done",
        fail(&moved),
        fail(&child)
    ));
    let mut outside = Stepped::shell(&format!("read go; {}; read done", fail(&sibling)));
    TestCgroup::move_into(&cg.dir, late.pid());
    let procs = cg.dir.join("cgroup.procs");
    let starter = format!(
        "echo $$ > {}; exec sh -c '{}; read done'",
        procs.display(),
        fail(&started)
    );
    let born = Stepped::shell(&starter);
    for s in [&mut early, &mut late, &mut outside] {
        s.step();
    }
    // the processes stay alive until the dump, so the process table is read from /proc
    std::thread::sleep(Duration::from_millis(300));
    let dump = d.dump();
    let (early_pid, late_pid, outside_pid, born_pid) = (early.pid(), late.pid(), outside.pid(), born.pid());
    for s in [early, late, outside, born] {
        s.finish();
    }

    let events = inspect_json(&dump);
    let failed_on = |path: &str| -> Vec<u64> {
        events
            .iter()
            .filter(|e| e["kind"] == "syscall_failure" && e["path"] == path)
            .map(|e| e["pid"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(
        failed_on(&seeded),
        [early_pid as u64],
        "in the subtree before the start"
    );
    assert_eq!(failed_on(&moved), [late_pid as u64], "moved in, no exec");
    let forked = failed_on(&child);
    assert!(
        forked.len() == 1 && forked[0] != late_pid as u64,
        "a child forked inside later: {forked:?}"
    );
    assert_eq!(failed_on(&started), [born_pid as u64], "started inside later");
    assert!(
        failed_on(&sibling).is_empty(),
        "the sibling outside is not traced"
    );
    assert!(!events.iter().any(|e| e["pid"] == outside_pid));

    let meta = inspect_meta(&dump);
    let cgroup_of = |pid: u32| -> Option<String> {
        meta["processes"]
            .as_array()?
            .iter()
            .find(|p| p["pid"] == pid)
            .and_then(|p| p["cgroup"].as_str())
            .map(str::to_string)
    };
    assert_eq!(cgroup_of(late_pid), Some(cg.path()), "{meta:#}");
    assert_eq!(cgroup_of(early_pid), Some(format!("{}/inner", cg.path())));
    drop(d);
}

#[test]
#[ignore = "system test: needs root (reads the cgroup hierarchy); scripts/test runs it"]
fn bad_cgroup_targets_are_one_line_errors() {
    require_root();
    let err = tracerd_fails(&["run", "--target-cgroup", "/no-such-cgroup-for-tracerd"]);
    assert!(err.contains("target_cgroup /no-such-cgroup-for-tracerd"), "{err}");
    let err = tracerd_fails(&["run", "--target-container", "0123456789abcdef0123"]);
    assert!(
        err.contains("target_container 0123456789abcdef0123") && err.contains("no container"),
        "{err}"
    );
    let err = tracerd_fails(&["run", "--target-container", "not-hex"]);
    assert!(err.contains("target_container 'not-hex'"), "{err}");
}
