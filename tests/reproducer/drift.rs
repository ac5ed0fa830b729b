//! Testbed vs production on real processes: production is a program traced by the real
//! tracerd daemon (configuration contents captured), the testbed a `reproducer run --keep`
//! of the scenario whose node runs the same program with its own configuration file (at
//! another path) and maybe another build; `diagnose --testbed-trace` names the file and the
//! differing line, or says they are the same, and the same for the executable's build.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use crate::replay::*;

/// tests/programs/confreader.c built with `tag` into a directory of its own: the same file
/// name (the node's program), another ELF build id per tag.
fn confreader_build(tag: &str) -> PathBuf {
    let dir = workspace_root()
        .join("target/test-programs")
        .join(format!("confreader-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("confreader");
    let status = Command::new("cc")
        .args(["-O1", "-g", "-Wl,--build-id=sha1"])
        .arg(format!("-DBUILD_TAG=\"{tag}\""))
        .arg("-o")
        .arg(&out)
        .arg(workspace_root().join("tests/programs/confreader.c"))
        .status()
        .expect("running cc");
    assert!(status.success(), "compiling confreader {tag}");
    out
}

/// A run directory `reproducer run --keep` left, removed on drop.
struct KeptRun(PathBuf);

impl Drop for KeptRun {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Production: `program CONF` (CONF holding `setting`) traced by tracerd with configuration
/// contents captured; returns the daemon (its directory holds the dump) and the dump.
fn production(program: &Path, setting: &str) -> (Daemon, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tracerd.toml");
    std::fs::write(&config, "capture_config_files = 4096\n").unwrap();
    let conf = dir.path().join("app.conf");
    std::fs::write(&conf, format!("# production's\n{setting}\nport 7400\n")).unwrap();
    let d = Daemon::start(&[
        "--config",
        config.to_str().unwrap(),
        "--target-comm",
        "confreader",
    ]);
    run_prog(program, &[conf.to_str().unwrap(), "300"]);
    let dump = d.dump();
    drop(dir);
    (d, dump)
}

/// The scenario: node `app` runs the testbed's build on `{workdir}/app.conf`, which a
/// setup step writes with `setting`; the bug never happens.
fn scenario(dir: &Path, program: &Path, setting: &str) -> PathBuf {
    let text = format!(
        r#"name = "drift"
[[setup]]
command = ["sh", "-c", "printf '{setting}\nport 7400\n' > {{workdir}}/app.conf"]
[[nodes]]
name = "app"
command = ["{}", "{{workdir}}/app.conf", "1500"]
[workload]
command = ["sleep", "1"]
[oracle]
command = ["false"]
"#,
        program.display()
    );
    let path = dir.join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn kept_run(scenario: &Path) -> KeptRun {
    let out = reproducer(&["run", "--scenario", scenario.to_str().unwrap(), "--keep"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let dir = t
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .map(PathBuf::from)
        .expect("run directory printed");
    KeptRun(dir)
}

fn diagnose(scenario: &Path, dump: &Path, testbed: &Path, json: bool) -> String {
    let mut args = vec![
        "diagnose",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        dump.to_str().unwrap(),
        "--testbed-trace",
        testbed.to_str().unwrap(),
    ];
    if json {
        args.push("--json");
    }
    let out = reproducer(&args);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn diagnose_names_a_differing_setting_and_a_different_build() {
    require_root();
    let links = own_links();
    let (build_a, build_b) = (confreader_build("a"), confreader_build("b"));
    let dir = tempfile::tempdir().unwrap();
    // the testbed: build a, `mode fast`
    let sc = scenario(dir.path(), &build_a, "mode fast");
    let run = kept_run(&sc);
    assert_clean(&links);

    // production ran build a with `mode safe`: the file differs by that line, the build is the same
    let (_d1, dump) = production(&build_a, "mode safe");
    let t = diagnose(&sc, &dump, &run.0, false);
    assert!(t.contains("testbed vs production (testbed: "), "{t}");
    assert!(t.contains("app/confreader config app.conf: differs"), "{t}");
    assert!(t.contains("paired by argument 1"), "{t}");
    assert!(
        t.contains("      production: mode safe\n      testbed:    mode fast"),
        "the differing line, comments left out: {t}"
    );
    assert!(
        t.contains("app/confreader executable confreader: the same: same build"),
        "{t}"
    );
    let v: serde_json::Value = serde_json::from_str(&diagnose(&sc, &dump, &run.0, true)).unwrap();
    let rows = v["testbed_drift"]["rows"]
        .as_array()
        .expect("testbed_drift in the JSON");
    let config = rows
        .iter()
        .find(|r| r["kind"] == "config" && r["name"] == "app.conf")
        .expect("the configuration file's row");
    assert_eq!(config["verdict"], "different");
    assert_eq!(config["lines"][0]["production"], "mode safe");
    assert_eq!(config["lines"][0]["testbed"], "mode fast");

    // production ran build b with the testbed's setting: the file matches, the build does not
    let (_d2, dump) = production(&build_b, "mode fast");
    let t = diagnose(&sc, &dump, &run.0, false);
    assert!(t.contains("app/confreader config app.conf: the same"), "{t}");
    assert!(
        t.contains("app/confreader executable confreader: differs: different build (build id "),
        "{t}"
    );
    assert!(!t.contains("mode fast"), "no line of a file that matches: {t}");
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn diagnose_names_production_s_working_directory_on_another_kind_of_storage() {
    require_root();
    let links = own_links();
    let build = confreader_build("a");
    let dir = tempfile::tempdir().unwrap();
    let sc = scenario(dir.path(), &build, "mode safe");
    let run = kept_run(&sc);
    assert_clean(&links);
    // production ran in a small tmpfs mounted `sync`, its configuration file there too
    let fs = Tmpfs::mount("size=1m,sync");
    let conf = fs.path().join("app.conf");
    std::fs::write(&conf, "mode safe\nport 7400\n").unwrap();
    let d = Daemon::start(&["--target-comm", "confreader"]);
    let status = Command::new(&build)
        .args([conf.to_str().unwrap(), "300"])
        .current_dir(fs.path())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let dump = d.dump();
    let t = diagnose(&sc, &dump, &run.0, false);
    let row = t
        .lines()
        .find(|l| l.contains("app/confreader storage working directory:"))
        .unwrap_or_else(|| panic!("no working directory row: {t}"));
    assert!(row.contains(": differs: "), "{row}");
    assert!(row.contains("tmpfs (1.0 MiB"), "production's: {row}");
    assert!(row.contains("options sync") || row.contains("sync vs"), "{row}");
    let v: serde_json::Value = serde_json::from_str(&diagnose(&sc, &dump, &run.0, true)).unwrap();
    let rows = v["testbed_drift"]["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["kind"] == "storage" && r["verdict"] == "different"),
        "{rows:#?}"
    );
    assert!(
        rows.iter()
            .any(|r| r["kind"] == "container" && r["verdict"] == "same"),
        "neither ran in a container: {rows:#?}"
    );
}
