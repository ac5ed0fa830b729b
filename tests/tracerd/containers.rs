//! A real container (podman, an image imported from a local busybox root filesystem, no
//! registry): `--target-container` by a prefix of its id traces its processes, the one that
//! was running before tracerd and one `podman exec`'d later, and their records carry the
//! container's id, runtime and the pid inside it; a function list naming a program by its
//! host path records the calls of the image's copy of it, of a process that ran before
//! tracerd and of a file made in the container later, and names the entry found nowhere; a
//! reload's additions to the list are probed in the container too.
//! scripts/test installs podman, runc and busybox-static.

use std::path::{Path, PathBuf};
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
        Self::image_with(&[], &[])
    }

    /// An image of busybox (its applets `sh`, `sleep`, `test`, `[` and `applets`) and `files`
    /// (each copied from the host's second path to the image's first).
    fn image_with(files: &[(&Path, &Path)], applets: &[&str]) -> BusyboxContainer {
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
        for applet in ["sh", "sleep", "test", "["].iter().chain(applets) {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
        for (inside, from) in files {
            let to = root.path().join(inside.strip_prefix("/").unwrap());
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from, &to).unwrap();
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

/// The daemon's `status --json`.
fn status_of(d: &Daemon) -> serde_json::Value {
    let out = run_ok(
        Command::new(tracerd_bin())
            .args(["status", "--json", "--control-socket"])
            .arg(d.socket()),
    );
    serde_json::from_str(&out).unwrap()
}

fn unmatched(d: &Daemon) -> Vec<String> {
    let s = status_of(d);
    let mut v: Vec<String> = s["functions"]["unmatched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// The etcd-in-a-container case of issue 32: the function list names the program by its path
/// on the host, where another file of that name lies (a host build), while the target runs
/// the image's own copy on overlay.
#[test]
#[ignore = "system test: needs root (loads BPF programs, runs a podman container); scripts/test runs it"]
fn a_function_list_naming_host_paths_records_the_calls_of_a_containers_copies() {
    require_root();
    let host_dir = tempfile::tempdir().unwrap();
    let (on_host, late, nowhere) = (
        host_dir.path().join("eg_fn"),
        host_dir.path().join("eg_late"),
        PathBuf::from("/nonexistent/eg_nowhere"),
    );
    // the host's file: a dynamic build; the image's, at the same path: a static one
    std::fs::copy(program("eventgen"), &on_host).unwrap();
    let mut c = BusyboxContainer::image_with(&[(&on_host, &static_program("eventgen"))], &["cp"]);
    let list = host_dir.path().join("profile.functions");
    let entry = |p: &Path| format!("{}:tracerd_test_marker", p.display());
    std::fs::write(
        &list,
        format!("{}\n{}\n{}\n", entry(&on_host), entry(&late), entry(&nowhere)),
    )
    .unwrap();
    // running before tracerd; then a copy made in the container, a file of its upper layer
    let (f, l) = (on_host.display(), late.display());
    let id = c.run(&format!(
        ": > /x/up; {f} marker-after /x/go 3; cp {f} {l}; : > /x/copied; sleep 600"
    ));
    wait_for_file(&c.shared().join("up"), Duration::from_secs(60));
    let d = Daemon::start(&[
        "--target-container",
        &id[..12],
        "--functions",
        list.to_str().unwrap(),
    ]);
    assert_eq!(
        unmatched(&d),
        [entry(&nowhere), entry(&late)],
        "found neither on the host nor in the image"
    );
    std::fs::write(c.shared().join("go"), b"").unwrap();
    wait_for_file(&c.shared().join("copied"), Duration::from_secs(30));
    // a process started later runs the new file: probed at its exec, before it calls
    let mut later = Command::new("podman")
        .args(["exec", &id, late.to_str().unwrap(), "marker-after", "/x/go2", "2"])
        .spawn()
        .unwrap();
    let start = Instant::now();
    while unmatched(&d) != [entry(&nowhere)] {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{}\n{}",
            d.log_text(),
            status_of(&d)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(c.shared().join("go2"), b"").unwrap();
    assert!(later.wait().unwrap().success());
    let dump = d.dump();
    let events = inspect_json(&dump);
    let hits = |binary: &Path| -> Vec<&serde_json::Value> {
        events
            .iter()
            .filter(|e| e["kind"] == "function" && e["binary"] == binary.to_str().unwrap())
            .collect()
    };
    let first = hits(&on_host);
    assert_eq!(
        first.len(),
        3,
        "the image's copy, under the list's host path: {first:#?}\n{}",
        d.log_text()
    );
    assert!(first
        .iter()
        .all(|e| e["container_id"] == id.as_str() && e["function"] == "tracerd_test_marker"));
    assert_eq!(hits(&late).len(), 2, "the file made later in the container");
    let text = run_ok(
        Command::new(tracerd_bin())
            .args(["status", "--control-socket"])
            .arg(d.socket()),
    );
    assert!(
        text.contains(&format!("1 match no file a target runs: {}", entry(&nowhere))),
        "{text}"
    );
}

/// A reload that adds a function of a binary probed in a container already, and a binary the
/// host does not have that a container's process runs now: both are probed in the container.
#[test]
#[ignore = "system test: needs root (loads BPF programs, runs a podman container); scripts/test runs it"]
fn a_reload_probes_its_additions_in_a_containers_files() {
    require_root();
    let host_dir = tempfile::tempdir().unwrap();
    let (on_host, only_inside) = (host_dir.path().join("eg_fn"), host_dir.path().join("eg_inside"));
    std::fs::copy(program("eventgen"), &on_host).unwrap();
    let image_copy = static_program("eventgen");
    let mut c = BusyboxContainer::image_with(&[(&on_host, &image_copy), (&only_inside, &image_copy)], &[]);
    let list = host_dir.path().join("profile.functions");
    let entry = |p: &Path, f: &str| format!("{}:{f}\n", p.display());
    std::fs::write(&list, entry(&on_host, "tracerd_test_marker")).unwrap();
    let id = c.run(&format!(
        ": > /x/up; {} marker-after /x/go 2; : > /x/done; sleep 600",
        only_inside.display()
    ));
    wait_for_file(&c.shared().join("up"), Duration::from_secs(60));
    let d = Daemon::start(&[
        "--target-container",
        &id[..12],
        "--functions",
        list.to_str().unwrap(),
    ]);
    std::fs::write(
        &list,
        [
            entry(&on_host, "tracerd_test_marker"),
            entry(&on_host, "tracerd_test_other"),
            entry(&only_inside, "tracerd_test_marker"),
        ]
        .concat(),
    )
    .unwrap();
    let said = run_ok(
        Command::new(tracerd_bin())
            .args(["reload", "--control-socket"])
            .arg(d.socket()),
    );
    assert!(
        said.contains("functions: 2 attached, 0 detached, 3 listed"),
        "{said}"
    );
    std::fs::write(c.shared().join("go"), b"").unwrap();
    wait_for_file(&c.shared().join("done"), Duration::from_secs(30));
    // `marker 1`: tracerd_test_marker once, tracerd_test_other once (gone before tracerd reads
    // its cgroup, its records may lack the container's fields; nothing on the host runs eg_fn)
    podman(&["exec", &id, on_host.to_str().unwrap(), "marker", "1"]);
    std::thread::sleep(Duration::from_millis(300));
    let events = inspect_json(&d.dump());
    let hits = |binary: &Path, function: &str| {
        events
            .iter()
            .filter(|e| e["kind"] == "function" && e["binary"] == binary.to_str().unwrap())
            .filter(|e| e["function"] == function)
            .count()
    };
    assert_eq!(
        hits(&only_inside, "tracerd_test_marker"),
        2,
        "a binary new to the list, run by a process that started before the reload\n{}",
        d.log_text()
    );
    assert_eq!(
        (
            hits(&on_host, "tracerd_test_marker"),
            hits(&on_host, "tracerd_test_other")
        ),
        (1, 1),
        "a function added to a binary probed in the container\n{}",
        d.log_text()
    );
}
