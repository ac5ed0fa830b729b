//! A real container (podman, an image imported from a local busybox root filesystem, no
//! registry): `--target-container` by a prefix of its id traces its processes, the one that
//! was running before tracerd and one `podman exec`'d later, and their records carry the
//! container's id, runtime and the pid inside it. scripts/test installs podman, runc and
//! busybox-static.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

/// Options every podman command of the test shares: runc (crun refuses a hybrid cgroup host
/// whose v2 hierarchy has a controller), resource limits within what a sandbox allows, no
/// network (nothing to set up).
const RUN_OPTS: [&str; 7] = [
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
    "--network=none",
];

fn podman(args: &[&str]) -> String {
    run_ok(Command::new("podman").args(args)).trim().to_string()
}

/// An image of busybox alone and a container of it; both removed on drop.
struct BusyboxContainer {
    image: String,
    id: Option<String>,
    shared: tempfile::TempDir,
}

impl BusyboxContainer {
    fn image() -> BusyboxContainer {
        assert!(
            Command::new("podman")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
            "podman is missing (scripts/test installs podman, runc and busybox-static)"
        );
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::copy("/bin/busybox", bin.join("busybox")).expect("busybox-static's /bin/busybox");
        for applet in ["sh", "sleep", "test", "["] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
        let tar = root.path().with_extension("tar");
        run_ok(
            Command::new("tar")
                .arg("-C")
                .arg(root.path())
                .arg("-cf")
                .arg(&tar)
                .arg("."),
        );
        let image = format!("localhost/tracerd-test-busybox:{}", std::process::id());
        let imported = podman(&["import", tar.to_str().unwrap(), &image]);
        let _ = std::fs::remove_file(&tar);
        assert!(!imported.is_empty());
        BusyboxContainer {
            image,
            id: None,
            shared: tempfile::tempdir().unwrap(),
        }
    }

    /// Starts `script` detached in a container with the shared directory at /x; returns its id.
    fn run(&mut self, script: &str) -> String {
        let volume = format!("{}:/x", self.shared.path().display());
        let mut args = vec!["run", "-d"];
        args.extend(RUN_OPTS);
        args.extend(["-v", &volume, &self.image, "/bin/sh", "-c", script]);
        let id = podman(&args);
        assert!(
            id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "a container id: {id}"
        );
        self.id = Some(id.clone());
        id
    }

    fn shared(&self) -> &Path {
        self.shared.path()
    }
}

impl Drop for BusyboxContainer {
    fn drop(&mut self) {
        if let Some(id) = &self.id {
            let _ = Command::new("podman").args(["rm", "-f", "-t", "0", id]).output();
        }
        let _ = Command::new("podman").args(["rmi", "-f", &self.image]).output();
    }
}

fn wait_for_file(path: &Path, timeout: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < timeout, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, runs a podman container); scripts/test runs it"]
fn a_podman_containers_failed_calls_carry_its_id() {
    require_root();
    let mut c = BusyboxContainer::image();
    let tag = std::process::id();
    let (first, later) = (
        format!("/nonexistent/podman_first_{tag}"),
        format!("/nonexistent/podman_exec_{tag}"),
    );
    // PID 1 of the container waits for /x/go, fails an open, says so, and stays until removed
    let script = format!(
        ": > /x/up; while [ ! -e /x/go ]; do sleep 0.1; done; read x < {first}; : > /x/done; sleep 600"
    );
    let id = c.run(&script);
    wait_for_file(&c.shared().join("up"), Duration::from_secs(60));
    let d = Daemon::start(&["--target-container", &id[..12]]);
    assert!(
        d.log_text().contains(&format!("target_container {}", &id[..12])),
        "{}",
        d.log_text()
    );
    std::fs::write(c.shared().join("go"), b"").unwrap();
    wait_for_file(&c.shared().join("done"), Duration::from_secs(30));
    // alive until tracerd has read its cgroup from /proc (a process gone before that has
    // no container fields: docs/tracerd.md, Containers)
    let exec = format!("read x < {later}; sleep 1");
    podman(&["exec", &id, "/bin/sh", "-c", &exec]);
    std::thread::sleep(Duration::from_millis(300));
    let dump = d.dump();

    let events = inspect_json(&dump);
    let on = |path: &str| -> Vec<&serde_json::Value> {
        events
            .iter()
            .filter(|e| e["kind"] == "syscall_failure" && e["path"] == path)
            .collect()
    };
    let f = only(on(&first), "failure of the container's first process");
    assert_eq!(f["container_id"], id.as_str(), "{f}");
    assert_eq!(f["container_runtime"], "podman", "{f}");
    assert_eq!(f["ns_pid"], 1, "PID 1 inside the container: {f}");
    assert!(f["cgroup"].as_str().is_some_and(|c| c.contains(&id)), "{f}");
    let e = only(on(&later), "failure of the process podman exec started later");
    assert_eq!(e["container_id"], id.as_str(), "{e}");
    assert_ne!(e["pid"], f["pid"]);
    let text = run_ok(Command::new(tracerd_bin()).arg("inspect").arg(&dump));
    assert!(text.contains(&format!("podman {id}")), "{text}");
}
