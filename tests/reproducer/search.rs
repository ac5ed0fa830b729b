//! A search's life on the real test bed: its attempts still run after its own binary was
//! replaced on disk (a rebuild or an upgrade while it searches), and none of them is
//! counted as a result it did not have.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::replay::*;

/// A production window in which a sleeper (an eventgen copy named `comm`) was killed from
/// outside: the one fault the diagnosis finds.
fn killed_sleeper_dump(sleeper: &Path) -> (Daemon, std::path::PathBuf) {
    let comm = sleeper.file_name().unwrap().to_str().unwrap().to_string();
    let d = Daemon::start(&["--target-comm", &comm]);
    let mut child = Command::new(sleeper).args(["sleep", "20000"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let dump = d.dump();
    (d, dump)
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_search_whose_binary_is_replaced_meanwhile_still_runs_its_attempts() {
    require_root();
    let sleeper = eventgen_as("eg_replaced_s");
    let (d, dump) = killed_sleeper_dump(&sleeper);
    // the daemon's own links stay until it is dropped
    let links = own_links();
    let dir = d.dir.path();
    // the oracle: the sleeper is gone (a crash of it is the bug)
    let sc = dir.join("scenario.toml");
    std::fs::write(
        &sc,
        format!(
            "name = \"replaced\"\n[[nodes]]\nname = \"sleeper\"\ncommand = [\"{}\", \"sleep\", \"20000\"]\n\
             [workload]\ncommand = [\"sleep\", \"0.3\"]\n\
             [oracle]\ncommand = [\"sh\", \"-c\", \"! kill -0 {{node.sleeper.pid}}\"]\n",
            sleeper.display()
        ),
    )
    .unwrap();
    // a copy of reproducer that the test replaces while the search runs
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let copy = bin.join("reproducer");
    std::fs::copy(reproducer_bin(), &copy).unwrap();
    let out = dir.join("out");
    let search = Command::new(&copy)
        .args(["reproduce", "--scenario", sc.to_str().unwrap()])
        .args(["--trace", dump.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // once the fault-free check has run, the file is replaced by one that runs no attempt
    let deadline = Instant::now() + Duration::from_secs(60);
    while !out.join("attempts/002").exists() {
        assert!(Instant::now() < deadline, "no second attempt within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let new = bin.join("reproducer.new");
    std::fs::copy("/bin/false", &new).unwrap();
    std::fs::rename(&new, &copy).unwrap();
    let output = search.wait_with_output().unwrap();
    let t = text(&output);
    assert!(output.status.success(), "{t}");
    assert!(!t.contains("could not run"), "{t}");
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["reproduced"], true, "{result:#}");
    assert_eq!(
        (result["bugs"].as_u64(), result["confirm_runs"].as_u64()),
        (Some(10), Some(10)),
        "{result:#}"
    );
    assert_eq!(result["error"], serde_json::Value::Null, "{result:#}");
    assert_clean(&links);
}
