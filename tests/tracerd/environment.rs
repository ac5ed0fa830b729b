//! Process environments: what a target was built from and configured with, as the dump's
//! process table records it (tracerd/src/environment, bpf/tracer/config_opens.h).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// `sha256sum FILE`'s hash.
fn sha256sum(path: &Path) -> String {
    let out = run_ok(Command::new("sha256sum").arg(path));
    out.split_whitespace().next().unwrap_or("").to_string()
}

/// The build id `readelf -n` prints for `path`.
fn readelf_build_id(path: &Path) -> String {
    let out = run_ok(Command::new("readelf").arg("-n").arg(path));
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("readelf -n {} shows no build id", path.display()))
        .to_string()
}

fn config_file<'a>(env: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    env["config_files"]
        .as_array()
        .and_then(|files| files.iter().find(|c| c["file"]["path"] == path))
        .unwrap_or_else(|| panic!("no configuration file {path} in {env:#}"))
}

/// Starts `cmd` with piped stdin and stdout and returns once it printed "ready" (it has read
/// what the test looks for and waits on stdin); killed on drop.
fn start_until_ready(cmd: &mut Command) -> Reaped {
    let child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawning the target");
    let mut target = Reaped(child);
    let stdout = target.0.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the target's first line");
    target
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_targets_build_and_configuration_are_recorded() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    // a copy of dash named as the target: dynamically linked, and it opens nothing under /etc
    // by itself for -c
    let shell = dir.path().join("envtest_sh");
    std::fs::copy("/bin/dash", &shell).expect("copying /bin/dash");
    let conf = dir.path().join("app.conf");
    std::fs::write(&conf, "maxmemory 100mb\ndb_password=hunter2\n").unwrap();
    let config = dir.path().join("tracerd.toml");
    std::fs::write(&config, "capture_config_files = 65536\n").unwrap();
    let d = Daemon::start(&[
        "--config",
        config.to_str().unwrap(),
        "--target-comm",
        "envtest_sh",
    ]);

    // the configuration file named relative to the cwd; /etc/hostname read at the start
    let target = start_until_ready(
        Command::new(&shell)
            .args(["-c", "read h < /etc/hostname; echo ready; read x", "app.conf"])
            .current_dir(dir.path()),
    );
    let dump = d.dump();
    let pid = target.pid();

    let meta = inspect_meta(&dump);
    let p = meta["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"] == pid))
        .expect("the target is in the process table");
    let env = &p["environment"];
    let exe = &env["executable"];
    assert_eq!(exe["path"], shell.to_str().unwrap());
    assert_eq!(exe["build_id"], readelf_build_id(&shell).as_str());
    assert_eq!(exe["sha256"], sha256sum(&shell).as_str());
    let libc = env["libraries"]
        .as_array()
        .and_then(|l| {
            l.iter()
                .find(|f| f["path"].as_str().is_some_and(|p| p.ends_with("/libc.so.6")))
        })
        .unwrap_or_else(|| panic!("dash's libc is among its libraries: {env:#}"));
    let libc_path = Path::new(libc["path"].as_str().unwrap());
    assert_eq!(libc["build_id"], readelf_build_id(libc_path).as_str());
    assert_eq!(libc["sha256"], sha256sum(libc_path).as_str());

    let argument = config_file(env, conf.to_str().unwrap());
    assert_eq!(argument["source"], "argument");
    assert_eq!(
        argument["argument"], 3,
        "argv[3] names it: dash -c SCRIPT app.conf"
    );
    assert_eq!(argument["file"]["sha256"], sha256sum(&conf).as_str());
    assert_eq!(
        argument["contents"], "maxmemory 100mb\ndb_password=<redacted>\n",
        "contents go through the redaction rules"
    );
    let hostname = config_file(env, "/etc/hostname");
    assert_eq!(hostname["source"], "etc");
    assert_eq!(
        hostname["file"]["sha256"],
        sha256sum(Path::new("/etc/hostname")).as_str()
    );
    assert_eq!(
        hostname["contents"].as_str(),
        Some(std::fs::read_to_string("/etc/hostname").unwrap().as_str())
    );
    let after = hostname["opened_after_ns"].as_u64().unwrap();
    assert!(
        after > 0 && after < 5_000_000_000,
        "opened {after} ns into its start"
    );
    let rlimits = env["rlimits"].as_array().expect("rlimits");
    assert!(
        rlimits.iter().any(|r| r["resource"] == "Max open files"),
        "{rlimits:?}"
    );
    assert_eq!(meta["counters"]["kernel"]["buffer_full_config"], 0);

    let text = run_ok(Command::new(tracerd_bin()).arg("inspect").arg(&dump));
    let summary = format!(
        "{pid} envtest_sh  exe {} build {}",
        shell.display(),
        readelf_build_id(&shell)
    );
    assert!(text.contains(&summary), "inspect shows {summary:?}:\n{text}");
    let json = inspect_json(&dump);
    let line = json
        .iter()
        .find(|l| l["kind"] == "environment" && l["pid"] == pid)
        .expect("inspect --json has the environment");
    assert_eq!(&line["environment"], env);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs); scripts/test runs it"]
fn a_configuration_file_opened_again_and_again_is_sent_once() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let shell = dir.path().join("envonce_sh");
    std::fs::copy("/bin/dash", &shell).expect("copying /bin/dash");
    let metrics = dir.path().join("tracerd.prom");
    let d = Daemon::start(&[
        "--target-comm",
        "envonce_sh",
        "--metrics-textfile",
        metrics.to_str().unwrap(),
        "--metrics-interval-ms",
        "100",
    ]);
    let target = start_until_ready(Command::new(&shell).args([
        "-c",
        "i=0; while [ $i -lt 200 ]; do read h < /etc/hostname; i=$((i+1)); done; echo ready; read x",
    ]));
    let dump = d.dump();
    // the metrics file is rewritten every 100 ms: one written after the dump counts every open
    std::thread::sleep(Duration::from_millis(500));
    let text = std::fs::read_to_string(&metrics).expect("the metrics file is written");
    let (_, samples) = crate::metrics::parse_prometheus(&text);
    let sent = samples[r#"tracerd_events_received_total{kind="config_open"}"#];
    // /etc/hostname once, and what the dynamic loader and libc open under /etc once each
    assert!(
        (1.0..10.0).contains(&sent),
        "{sent} configuration opens sent for 200 opens of one file"
    );
    let meta = inspect_meta(&dump);
    let p = meta["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"] == target.pid()))
        .expect("the target is in the process table");
    config_file(&p["environment"], "/etc/hostname");
}

/// A target working in a tmpfs mounted `sync`, whose failed open names a file in a
/// directory reached through a symlink to another tmpfs (a WAL directory on a filesystem
/// of its own): the dump records both filesystems, and where the symlink led.
#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn where_a_target_keeps_its_files_is_recorded() {
    require_root();
    let (home, wal) = (Tmpfs::mount("size=2m,sync"), Tmpfs::mount("size=1m"));
    std::os::unix::fs::symlink(wal.path(), home.path().join("pg_wal")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shell = dir.path().join("eg_storage");
    std::fs::copy("/bin/dash", &shell).expect("copying /bin/dash");
    let d = Daemon::start(&["--target-comm", "eg_storage"]);
    // the shell's own open of a WAL segment that is not there, named relative to its cwd
    let target = start_until_ready(
        Command::new(&shell)
            .args(["-c", "< pg_wal/missing.seg; echo ready; read x"])
            .current_dir(home.path()),
    );
    let dump = d.dump();
    drop(target);
    let meta = inspect_meta(&dump);
    let p = meta["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["comm"] == "eg_storage")
        .unwrap_or_else(|| panic!("no eg_storage process: {meta:#}"));
    let storage = p["environment"]["storage"]
        .as_array()
        .unwrap_or_else(|| panic!("{p:#}"));
    let of_role = |role: &str| {
        storage
            .iter()
            .find(|s| s["role"] == role)
            .unwrap_or_else(|| panic!("no {role} storage: {storage:#?}"))
    };
    let cwd = of_role("cwd");
    assert_eq!(cwd["path"], home.path().display().to_string());
    assert_eq!(cwd["fs_type"], "tmpfs");
    let options: Vec<&str> = cwd["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert!(options.contains(&"sync"), "{cwd:#}");
    assert_eq!(cwd["size_bytes"], 2 << 20, "{cwd:#}");
    // the loader's probes name directories too (/etc of ld.so.preload): the WAL's is there
    let wal_dir = home.path().join("pg_wal").display().to_string();
    let file = storage
        .iter()
        .find(|s| s["role"] == "file" && s["path"] == wal_dir.as_str())
        .unwrap_or_else(|| panic!("no storage of {wal_dir}: {storage:#?}"));
    assert_eq!(file["resolved"], wal.path().display().to_string(), "{file:#}");
    assert_eq!(file["mount_point"], wal.path().display().to_string(), "{file:#}");
    assert_eq!(file["size_bytes"], 1 << 20, "{file:#}");
    assert_eq!(of_role("root")["path"], "/");
}
