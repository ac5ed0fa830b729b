//! The paths tracerd chooses by probing the kernel before loading (fexit programs or the
//! sys_exit tracepoint for failed syscalls; uprobe-multi links), and the same failed
//! syscalls recorded on either hook.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::common::*;

/// The probes agree with the kernel's version (uprobe-multi links came with Linux 6.6), and
/// the daemon says which paths it chose.
#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn kernel_probes_choose_the_paths_before_loading() {
    require_root();
    let release = tracerd::kernel::release();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    assert_eq!(
        tracerd::kernel::uprobe_multi_links(),
        version >= (6, 6),
        "uprobe-multi probe on {release}"
    );
    // typed loads of an fd table's slot: refused by Debian 12's 6.1 and 6.12, taken on 6.18
    if version <= (6, 12) || version >= (6, 18) {
        assert_eq!(
            tracerd::kernel::typed_fd_slot(),
            version >= (6, 18),
            "typed fd slot probe on {release}"
        );
    }
    let d = Daemon::start(&["--target-comm", "eg_no_such"]);
    let log = d.log_text();
    assert!(
        log.contains(&tracerd::kernel::summary()),
        "the daemon logs the chosen paths: {log}"
    );
    let printed = run_ok(Command::new(tracerd_bin()).arg("kernel"));
    assert_eq!(printed.trim(), tracerd::kernel::summary());
    // scripts/test-kernels says which kernels must take the fexit path (Debian 12's)
    if let Ok(expected) = std::env::var("TRACERD_EXPECT_FEXIT") {
        assert_eq!(
            tracerd::kernel::fexit_programs(),
            expected == "1",
            "fexit programs on {release}"
        );
    }
    let hook = if tracerd::kernel::fexit_programs() {
        "failed syscalls caught by fexit programs on"
    } else {
        "failed syscalls caught by the sys_exit tracepoint"
    };
    assert!(
        log.contains(hook),
        "the daemon says how it catches failures: {log}"
    );
}

/// (syscall, errno, path) of the failed syscalls of `pid` in a dump.
fn failures_of(dump: &Path, pid: u32) -> BTreeSet<(String, String, String)> {
    inspect_json(dump)
        .iter()
        .filter(|e| e["kind"] == "syscall_failure" && e["pid"] == pid)
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (text("syscall"), text("errno"), text("path"))
        })
        .collect()
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn failed_syscalls_are_the_same_on_either_hook() {
    require_root();
    let prog = eventgen_as("eg_hooks");
    let dir = tempfile::tempdir().unwrap();
    let forced = dir.path().join("tracepoint.toml");
    std::fs::write(&forced, "syscall_hook = \"tracepoint\"\n").unwrap();
    let missing = dir.path().join("no-such-dir/file");
    let readonly = dir.path().join("readonly.txt");
    std::fs::write(&readonly, "x").unwrap();
    let mut seen = Vec::new();
    for config in [None, Some(&forced)] {
        let mut args = vec!["--target-comm", "eg_hooks"];
        if let Some(c) = config {
            args.extend(["--config", c.to_str().unwrap()]);
        }
        let d = Daemon::start(&args);
        let log = d.log_text();
        let fexit = log.contains("caught by fexit programs");
        assert_eq!(
            fexit,
            config.is_none() && tracerd::kernel::fexit_programs(),
            "{log}"
        );
        let pids = [
            run_prog(&prog, &["fail-path", missing.to_str().unwrap()]),
            run_prog(&prog, &["fail-fd", readonly.to_str().unwrap()]),
            // a sleep with a bad time: EINVAL of a syscall the fexit set leaves out
            run_prog(&prog, &["bad-sleep", "1"]),
        ];
        let dump = d.dump();
        seen.push((fexit, pids.map(|p| failures_of(&dump, p))));
    }
    for (fexit, [path, fd, sleep]) in &seen {
        let hook = if *fexit { "fexit" } else { "tracepoint" };
        let path_failure = (
            "openat".to_string(),
            "ENOENT".to_string(),
            dir.path().join("no-such-dir/file").display().to_string(),
        );
        assert!(path.contains(&path_failure), "{hook}: {path:?}");
        let fd_failure = (
            "write".to_string(),
            "EBADF".to_string(),
            readonly.display().to_string(),
        );
        assert!(fd.contains(&fd_failure), "{hook}: {fd:?}");
        let sleep_failure = ("clock_nanosleep".to_string(), "EINVAL".to_string(), String::new());
        // waits and sleeps are not in the fexit set (bpf/fexit_syscalls.h)
        assert_eq!(sleep.contains(&sleep_failure), !fexit, "{hook}: {sleep:?}");
    }
    // the same program start (loader probes included) is seen the same way by both hooks
    let (a, b) = (&seen[0].1[0], &seen[1].1[0]);
    assert_eq!(a, b, "fail-path failures differ between the hooks");
}
