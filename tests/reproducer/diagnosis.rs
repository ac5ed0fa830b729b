//! `reproducer diagnose`, and the bad input `reproduce` must refuse before it searches, on
//! dumps the real tracerd daemon writes: faults told from symptoms, processes mapped to
//! nodes, and one clear line for every kind of broken input.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use crate::replay::*;

/// Three copies of eventgen, one per node. The reader and the checker live for a few
/// milliseconds: they are matched by the command line tracerd read in the kernel at exec.
struct Progs {
    sleeper: PathBuf,
    reader: PathBuf,
    checker: PathBuf,
}

fn progs(tag: &str) -> Progs {
    Progs {
        sleeper: eventgen_as(&format!("eg_{tag}_s")),
        reader: eventgen_as(&format!("eg_{tag}_r")),
        checker: eventgen_as(&format!("eg_{tag}_c")),
    }
}

fn scenario(dir: &Path, p: &Progs, oracle: &str) -> PathBuf {
    let (s, r, c) = (p.sleeper.display(), p.reader.display(), p.checker.display());
    let text = format!(
        r#"name = "diag"
[[nodes]]
name = "sleeper"
command = ["{s}", "sleep", "20000"]
[[nodes]]
name = "reader"
command = ["{r}", "fail-path", "/nonexistent/diag/snapshot.7"]
match = "fail-path /nonexistent/diag"
[[nodes]]
name = "checker"
command = ["{c}", "bogus-mode"]
match = "bogus-mode"
[workload]
command = ["true"]
[oracle]
command = {oracle}
"#
    );
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A production window with a pause and a SIGKILL from outside (faults), a failed openat
/// (fault candidate) and a non-zero exit (symptom).
fn production_dump(p: &Progs) -> (Daemon, PathBuf) {
    let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
    let (s, r, c) = (name(&p.sleeper), name(&p.reader), name(&p.checker));
    let d = Daemon::start(&[
        "--target-comm",
        &s,
        "--target-comm",
        &r,
        "--target-comm",
        &c,
        "--pause-ms",
        "300",
    ]);
    let mut sleeper = Command::new(&p.sleeper).args(["sleep", "20000"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    unsafe { libc::kill(sleeper.id() as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(700));
    unsafe { libc::kill(sleeper.id() as i32, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(100));
    let status = Command::new(&p.reader)
        .args(["fail-path", "/nonexistent/diag/snapshot.7"])
        .status()
        .unwrap();
    assert!(status.success());
    unsafe { libc::kill(sleeper.id() as i32, libc::SIGKILL) };
    sleeper.wait().unwrap();
    let status = Command::new(&p.checker)
        .arg("bogus-mode")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
    std::thread::sleep(Duration::from_millis(200));
    let dump = d.dump();
    (d, dump)
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn diagnosis_tells_faults_from_symptoms_and_maps_nodes() {
    require_root();
    let p = progs("dg");
    let (d, dump) = production_dump(&p);
    let sc = scenario(d.dir.path(), &p, r#"["true"]"#);
    let out = reproducer(&[
        "diagnose",
        "--json",
        "--scenario",
        sc.to_str().unwrap(),
        "--trace",
        dump.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let causes: Vec<&serde_json::Value> = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "cause")
        .collect();
    let of = |kind: &str| {
        causes
            .iter()
            .filter(|c| c["guess"]["kind"] == kind)
            .copied()
            .collect::<Vec<_>>()
    };
    let pauses = of("pause");
    assert_eq!(pauses.len(), 1, "{causes:#?}");
    assert_eq!(pauses[0]["who"], "sleeper");
    let ms = pauses[0]["guess"]["duration_ms"].as_u64().unwrap();
    assert!((600..1500).contains(&ms), "pause of {ms} ms");
    let crashes = of("crash");
    assert_eq!(crashes.len(), 1, "{causes:#?}");
    assert_eq!(crashes[0]["who"], "sleeper");
    assert_eq!(crashes[0]["guess"]["signal"], "SIGKILL");
    let reads: Vec<_> = of("syscall")
        .into_iter()
        .filter(|c| c["who"] == "reader" && c["guess"]["raw_path"] == "/nonexistent/diag/snapshot.7")
        .collect();
    assert_eq!(reads.len(), 1, "{causes:#?}");
    assert_eq!(reads[0]["guess"]["errno"], "ENOENT");
    assert_eq!(
        reads[0]["guess"]["path"], "*/snapshot.*",
        "digits in file names are normalized"
    );
    // process faults rank before failed syscalls
    let first_syscall = causes
        .iter()
        .position(|c| c["guess"]["kind"] == "syscall")
        .unwrap();
    assert!(causes[..first_syscall]
        .iter()
        .any(|c| c["guess"]["kind"] == "crash"));
    let symptoms = v["symptoms"].as_array().unwrap();
    assert!(
        symptoms
            .iter()
            .any(|s| s["who"] == "checker" && s["what"].as_str().unwrap().contains("status 2")),
        "{symptoms:#?}"
    );
    assert!(
        !causes
            .iter()
            .any(|c| c["who"] == "checker" && c["guess"]["kind"] != "syscall"),
        "an exit is a symptom, not a fault"
    );
    // the text form names the same
    let out = reproducer(&[
        "diagnose",
        "--scenario",
        sc.to_str().unwrap(),
        "--trace",
        dump.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(
        t.contains("killed by SIGKILL") && t.contains("exited with status 2"),
        "{t}"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn bad_input_gets_one_clear_line() {
    require_root();
    let p = progs("bi");
    let (d, dump) = production_dump(&p);
    let dir = d.dir.path();
    let sc = scenario(dir, &p, r#"["true"]"#);
    let (s, dump_s) = (sc.to_str().unwrap(), dump.to_str().unwrap());
    let expect_error = |args: &[&str], needle: &str| {
        let out = reproducer(args);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(needle), "{args:?}: wanted '{needle}' in: {t}");
        let error_lines = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.contains("error"))
            .count();
        assert_eq!(error_lines, 1, "{t}");
    };
    let bytes = std::fs::read(&dump).unwrap();
    let truncated = dir.join("truncated.tdump");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    expect_error(
        &["diagnose", "--trace", truncated.to_str().unwrap()],
        "truncated or corrupt",
    );
    let foreign = dir.join("foreign.tdump");
    std::fs::write(&foreign, b"PK\x03\x04 this is a zip file, not a dump").unwrap();
    expect_error(
        &["diagnose", "--trace", foreign.to_str().unwrap()],
        "not a tracerd dump",
    );

    let other = dir.join("other.toml");
    let other_text = format!("name = \"other\"\n[[nodes]]\nname = \"db\"\ncommand = [\"{}\", \"serve\"]\nmatch = \"--role db\"\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n", p.sleeper.display());
    std::fs::write(&other, other_text).unwrap();
    expect_error(
        &[
            "diagnose",
            "--scenario",
            other.to_str().unwrap(),
            "--trace",
            dump_s,
        ],
        "is a node of scenario other",
    );

    let profile = dir.join("profile.json");
    std::fs::write(&profile, r#"{"format":"reproducer-profile","version":1,"scenario":"elsewhere","scenario_nodes":{},"runs":1,"run_seconds":[1.0],"infrequent_below_per_s":2.0,"failures":[],"syscalls":[],"functions":[],"dropped":{"events":0,"counters":0},"unmapped_events":0,"unmapped_syscalls":0,"functions_not_attached":[]}"#).unwrap();
    expect_error(
        &[
            "diagnose",
            "--scenario",
            s,
            "--profile",
            profile.to_str().unwrap(),
            "--trace",
            dump_s,
        ],
        "made for scenario 'elsewhere'",
    );

    // an oracle that fires without faults stops reproduce before any search run
    let always = scenario(&dir.join("a"), &p, r#"["true"]"#);
    let out_dir = dir.join("out");
    expect_error(
        &[
            "reproduce",
            "--scenario",
            always.to_str().unwrap(),
            "--trace",
            dump_s,
            "--out",
            out_dir.to_str().unwrap(),
        ],
        "oracle fires in a fault-free run",
    );
    let attempts = std::fs::read_dir(out_dir.join("attempts")).unwrap().count();
    assert_eq!(attempts, 1, "only the fault-free check ran");
    let broken = scenario(&dir.join("b"), &p, r#"["no-such-oracle-program"]"#);
    expect_error(
        &[
            "reproduce",
            "--scenario",
            broken.to_str().unwrap(),
            "--trace",
            dump_s,
            "--out",
            out_dir.to_str().unwrap(),
        ],
        "program 'no-such-oracle-program' not found",
    );
    expect_error(
        &[
            "reproduce",
            "--scenario",
            s,
            "--trace",
            dump_s,
            "--out",
            out_dir.to_str().unwrap(),
            "--target-rate",
            "1.5",
        ],
        "--target-rate",
    );
}

/// A server that fails a call, then aborts: its SIGABRT handler forks two helpers that fail
/// their execve()s along a PATH and exit 1, then it dies of the SIGABRT. The dump the real
/// daemon writes of it: the crash is the one symptom, the failed open the one cause, and
/// the helpers are part of the crash.
#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn what_a_crash_handler_forks_is_part_of_the_crash() {
    require_root();
    let server = eventgen_as("eg_crash_h");
    let d = Daemon::start(&["--target-comm", "eg_crash_h"]);
    let status = Command::new(&server)
        .args(["crash-handler", "/nonexistent/crash/redo.log"])
        .status()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status}");
    std::thread::sleep(Duration::from_millis(200));
    let dump = d.dump();
    let sc = d.dir.path().join("crash.toml");
    std::fs::write(
        &sc,
        format!(
            "name = \"crash\"\n[[nodes]]\nname = \"db\"\ncommand = [\"{}\", \"crash-handler\", \"/nonexistent/crash/redo.log\"]\n\
             [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n",
            server.display()
        ),
    )
    .unwrap();
    let out = reproducer(&[
        "diagnose",
        "--scenario",
        sc.to_str().unwrap(),
        "--trace",
        dump.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let symptoms: Vec<&str> = json["symptoms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["what"].as_str().unwrap())
        .collect();
    // "(core dumped)" or not, as the core limit says
    assert!(
        symptoms.len() == 1 && symptoms[0].starts_with("died of SIGABRT"),
        "{json:#}"
    );
    let calls: Vec<String> = json["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["guess"]["kind"] == "syscall")
        .map(|c| format!("{} {}", c["guess"]["syscall"], c["guess"]["raw_path"]))
        .collect();
    // no profile: the loader's probes at start stay candidates; the helpers' execve()s do not
    assert!(
        calls.contains(&"\"openat\" \"/nonexistent/crash/redo.log\"".to_string()),
        "{calls:?}"
    );
    assert!(!calls.iter().any(|c| c.starts_with("\"execve\"")), "{calls:?}");
    let notes = json["notes"].to_string();
    assert!(
        notes.contains("part of the crash of db") && notes.contains(": 2 exit(s), 4 failed call(s)"),
        "{notes}"
    );
}
