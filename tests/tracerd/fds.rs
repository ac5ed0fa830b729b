//! Failed calls on fds that tracerd never saw opened: each is named from the task's fd
//! table when it fails (bpf/tracer/fdnames.h), as /proc/PID/fd names it. Every fd here is
//! made before tracerd starts.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::common::*;

/// A tests/programs/fdholder in its own process group (killed on drop): started, read up to
/// its "ready" line; `fail` tells it to fail its calls and waits for its end.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    /// the process holding the fds, and the fds it printed
    pid: u32,
    fds: Vec<i32>,
}

impl Holder {
    /// Starts `prog` (a copy of fdholder named as the test's target comm).
    fn start(prog: &Path, args: &[&str]) -> Holder {
        let mut child = Command::new(prog)
            .args(args)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn fdholder");
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut h = Holder {
            child,
            stdin,
            lines,
            pid: 0,
            fds: Vec::new(),
        };
        loop {
            let line = h.next_line(args);
            if line == "ready" {
                break;
            }
            if let Some(pid) = line.strip_prefix("pid ") {
                h.pid = pid.parse().expect("a pid");
            } else if let Some(fds) = line.strip_prefix("fds ") {
                h.fds = fds.split(' ').map(|f| f.parse().expect("an fd")).collect();
            }
        }
        assert!(
            h.pid != 0 && !h.fds.is_empty(),
            "fdholder {args:?} printed no pid or fds"
        );
        h
    }

    fn next_line(&mut self, args: &[&str]) -> String {
        match self.lines.next() {
            Some(Ok(line)) => line,
            _ => panic!("fdholder {args:?} ended early: {:?}", self.child.wait()),
        }
    }

    /// What /proc/PID/fd says fd `fd` of the holder is, without the " (deleted)" of a memfd.
    fn proc_name(&self, fd: i32) -> String {
        let link = std::fs::read_link(format!("/proc/{}/fd/{fd}", self.pid)).expect("readlink");
        let name = link.to_string_lossy().into_owned();
        name.strip_suffix(" (deleted)").unwrap_or(&name).to_string()
    }

    /// Lets the holder fail its calls; returns once it printed "done" and ended.
    fn fail(&mut self) {
        let mut stdin = self.stdin.take().expect("told once");
        stdin.write_all(b"go\n").expect("telling fdholder to go");
        drop(stdin);
        let line = self.next_line(&["(failing its calls)"]);
        assert_eq!(line, "done", "fdholder's calls did not fail as expected");
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "fdholder: {status}");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this test created.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// The failed calls of `pid` in `events`: fd → (syscall, errno, path) of each.
fn failures_by_fd(events: &[serde_json::Value], pid: u32) -> BTreeMap<i64, Vec<(String, String, String)>> {
    let mut out: BTreeMap<i64, Vec<_>> = BTreeMap::new();
    for e in events_of(events, "syscall_failure", pid) {
        let text = |k: &str| e[k].as_str().unwrap_or("").to_string();
        if let Some(fd) = e["fd"].as_i64() {
            out.entry(fd)
                .or_default()
                .push((text("syscall"), text("errno"), text("path")));
        }
    }
    out
}

fn unresolved_fds(meta: &serde_json::Value) -> u64 {
    let c = &meta["counters"];
    c["open_files_unresolved"].as_u64().unwrap_or(0) + c["kernel"]["fds_unnamed"].as_u64().unwrap_or(0)
}

fn write_ebadf(path: &str) -> Vec<(String, String, String)> {
    vec![("write".into(), "EBADF".into(), path.into())]
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_file_opened_before_tracerd_is_named_directly_and_through_dup2() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("held-since-start");
    std::fs::write(&file, b"data").unwrap();
    let mut h = Holder::start(
        &program_as("fdholder", "fd_direct"),
        &["direct", file.to_str().unwrap()],
    );
    let d = Daemon::start(&["--target-comm", "fd_direct"]);
    h.fail();
    let dump = d.dump();
    let failures = failures_by_fd(&inspect_json(&dump), h.pid);
    let path = file.to_str().unwrap();
    let expected = BTreeMap::from([(i64::from(h.fds[0]), write_ebadf(path)), (100, write_ebadf(path))]);
    assert_eq!(failures, expected, "both writes name the file they failed on");
    assert_eq!(unresolved_fds(&inspect_meta(&dump)), 0);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn an_fd_received_over_a_unix_socket_is_named_in_the_receiver() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("passed-over-scm-rights");
    std::fs::write(&file, b"data").unwrap();
    let mut h = Holder::start(
        &program_as("fdholder", "fd_scm"),
        &["scm", file.to_str().unwrap()],
    );
    let d = Daemon::start(&["--target-comm", "fd_scm"]);
    h.fail();
    let failures = failures_by_fd(&inspect_json(&d.dump()), h.pid);
    let expected = BTreeMap::from([(i64::from(h.fds[0]), write_ebadf(file.to_str().unwrap()))]);
    assert_eq!(failures, expected, "the receiver's failed write names the file");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_pipe_an_eventfd_and_a_memfd_are_named_by_kind() {
    require_root();
    let mut h = Holder::start(&program_as("fdholder", "fd_kinds"), &["kinds"]);
    let names: Vec<String> = h.fds.iter().map(|&fd| h.proc_name(fd)).collect();
    assert!(
        names[0].starts_with("pipe:[") && names[1] == "anon_inode:[eventfd]" && names[2] == "/memfd:fdtest",
        "/proc/PID/fd names them {names:?}"
    );
    let d = Daemon::start(&["--target-comm", "fd_kinds"]);
    h.fail();
    let failures = failures_by_fd(&inspect_json(&d.dump()), h.pid);
    let one = |syscall: &str, errno: &str, name: &str| vec![(syscall.into(), errno.into(), name.to_string())];
    let expected = BTreeMap::from([
        (i64::from(h.fds[0]), one("write", "EBADF", &names[0])),
        (i64::from(h.fds[1]), one("write", "EINVAL", &names[1])),
        (i64::from(h.fds[2]), one("lseek", "EINVAL", &names[2])),
    ]);
    assert_eq!(
        failures, expected,
        "each failure names its fd as /proc/PID/fd does"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_reused_fd_number_and_a_renamed_file_are_named_anew_not_from_the_name_cache() {
    require_root();
    // names are cached in the kernel once walked (fdnames.h): an fd number closed and reopened
    // on another file, perhaps on the same struct file reallocated, must not get the name
    // cached for the file before, nor a file renamed while open its old name
    let dir = tempfile::tempdir().unwrap();
    let [a, b, c] = ["file-a", "file-b", "file-b-renamed"].map(|n| dir.path().join(n));
    std::fs::write(&a, b"a").unwrap();
    std::fs::write(&b, b"b").unwrap();
    let [a, b, c] = [&a, &b, &c].map(|p| p.to_str().unwrap().to_string());
    let mut h = Holder::start(&program_as("fdholder", "fd_reuse"), &["reuse", &a, &b, &c]);
    let d = Daemon::start(&["--target-comm", "fd_reuse"]);
    h.fail();
    let failures = failures_by_fd(&inspect_json(&d.dump()), h.pid);
    let mut names: Vec<&str> = (0..20)
        .map(|i| if i % 2 == 0 { a.as_str() } else { b.as_str() })
        .collect();
    names.extend([c.as_str(), c.as_str()]);
    let expected = BTreeMap::from([(
        i64::from(h.fds[0]),
        names.iter().flat_map(|n| write_ebadf(n)).collect::<Vec<_>>(),
    )]);
    assert_eq!(
        failures, expected,
        "each failure names the file open on the fd then"
    );
}

/// The holder's failed writes of `many`: each fd's path, in the order of the files.
fn many_paths(dir: &Path, first: usize, n: usize) -> Vec<String> {
    (0..n)
        .filter(|i| i % 8 == 0 || *i == n - 1)
        .map(|i| format!("{}/f{}", dir.display(), first + i))
        .collect()
}

/// How many files one holder may keep open, up to `want`: the holders inherit the test's hard
/// limit, which root raises where it may (CAP_SYS_RESOURCE); where it may not (a container
/// without it), the hard limit it has bounds each holder, and more holders share the files.
fn files_per_holder(want: usize) -> usize {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on this process with a valid struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    let need = (want + 64) as libc::rlim_t;
    if r.rlim_max >= need {
        return want;
    }
    let raised = libc::rlimit {
        rlim_cur: r.rlim_cur,
        rlim_max: need,
    };
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        return want;
    }
    (r.rlim_max as usize).saturating_sub(64).max(1)
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn failures_on_40000_files_held_at_once_are_all_named() {
    require_root();
    // past the 32,768 entries of the open-file map that once named fds; two holders where
    // the fd limit may be raised, more where it may not
    const N: usize = 40_000;
    let dir = tempfile::tempdir().unwrap();
    let d_path = dir.path().to_str().unwrap();
    let holders_n = N.div_ceil(files_per_holder(N / 2));
    let per = N.div_ceil(holders_n);
    // one copy: a running binary cannot be copied over
    let prog = program_as("fdholder", "fd_many");
    let firsts: Vec<usize> = (0..holders_n).map(|i| i * per).collect();
    let mut holders: Vec<(Holder, usize, usize)> = firsts
        .iter()
        .map(|&first| {
            let n = per.min(N - first);
            let args = ["many", d_path, &first.to_string(), &n.to_string()];
            (Holder::start(&prog, &args), first, n)
        })
        .collect();
    let d = Daemon::start(&["--target-comm", "fd_many"]);
    for (h, _, _) in &mut holders {
        h.fail();
    }
    let dump = d.dump();
    let events = inspect_json(&dump);
    for (h, first, n) in &holders {
        let named: Vec<String> = events_of(&events, "syscall_failure", h.pid)
            .iter()
            .filter(|e| e["syscall"] == "write" && e["errno"] == "EBADF")
            .map(|e| e["path"].as_str().unwrap_or("(none)").to_string())
            .collect();
        let expected = many_paths(dir.path(), *first, *n);
        assert_eq!(
            named.len(),
            expected.len(),
            "every failed write of {} is recorded",
            h.pid
        );
        let wrong: Vec<_> = named.iter().zip(&expected).filter(|(a, b)| a != b).collect();
        assert!(
            wrong.is_empty(),
            "{} failures misnamed, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(3)]
        );
    }
    let meta = inspect_meta(&dump);
    assert_eq!(unresolved_fds(&meta), 0);
    assert_eq!(meta["counters"]["kernel"]["buffer_full_syscall"], 0);
}
