use tracedump::environment::{CgroupLimit, ConfigFile, DirStorage, FileIdentity, ProcEnvironment, Rlimit};

use super::*;

const SCENARIO: &str = "name = \"kv\"\n\
    [[nodes]]\nname = \"cache\"\ncommand = [\"redis-server\"]\n\
    [[nodes]]\nname = \"db\"\ncommand = [\"kvnode\"]\n\
    [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";

fn scenario() -> Scenario {
    Scenario::parse(SCENARIO, "t").unwrap()
}

fn file(path: &str, sha: &str, build_id: Option<&str>) -> FileIdentity {
    FileIdentity {
        path: path.into(),
        size: 100,
        mtime_ns: 1,
        sha256: Some(sha.into()),
        build_id: build_id.map(str::to_string),
    }
}

fn config(path: &str, source: &str, argument: Option<u32>, contents: Option<&str>) -> ConfigFile {
    // the hash stands for the contents: equal contents, equal hashes
    let sha = format!(
        "{:x}",
        contents.unwrap_or(path).len() * 7919 + contents.map_or(0, |c| c.bytes().map(|b| b as usize).sum())
    );
    ConfigFile {
        file: file(path, &sha, None),
        source: source.into(),
        argument,
        opened_after_ns: 0,
        contents: contents.map(str::to_string),
        truncated: false,
    }
}

fn sample(node: usize, cmdline: &str, env: ProcEnvironment) -> Sample {
    let cmdline: Vec<String> = cmdline.split(' ').map(String::from).collect();
    Sample {
        node,
        host: "h".into(),
        kernel: "6.1.0-56-amd64".into(),
        pid: 100 + node as u32,
        start_ns: 1,
        program: cmdline[0].rsplit('/').next().unwrap().to_string(),
        cmdline,
        environment: env,
        container: None,
    }
}

const REDIS_CONF: &str = "# Redis\nport 6379\n\nappendonly yes\nappendfsync everysec\n";

fn redis(conf_path: &str, contents: &str) -> Sample {
    sample(
        0,
        &format!("/usr/bin/redis-server {conf_path}"),
        ProcEnvironment {
            executable: Some(file("/usr/bin/redis-server", "aa", Some("b1d0"))),
            libraries: vec![
                file("/lib/x86_64-linux-gnu/libssl.so.3", "s3", Some("55")),
                file("/lib/x86_64-linux-gnu/libc.so.6", "c6", Some("66")),
            ],
            config_files: vec![config(conf_path, "argument", Some(1), Some(contents))],
            rlimits: vec![Rlimit {
                resource: "Max open files".into(),
                soft: "1024".into(),
                hard: "4096".into(),
            }],
            cgroup_limits: vec![CgroupLimit {
                file: "pids.max".into(),
                value: "max".into(),
            }],
            dropped_files: 0,
            storage: Vec::new(),
        },
    )
}

fn config_rows(d: &Drift) -> Vec<&Row> {
    d.rows.iter().filter(|r| r.kind == Kind::Config).collect()
}

#[test]
fn the_same_environment_matches_across_paths() {
    let s = scenario();
    let prod = [redis("/etc/redis/redis.conf", REDIS_CONF)];
    let test = [redis("/scratch/run-1/redis.conf", REDIS_CONF)];
    let d = compare(&prod, &test, &s, "run-1");
    assert_eq!(d.differences().count(), 0, "{d:#?}");
    let c = config_rows(&d);
    assert_eq!(
        c.len(),
        1,
        "argument files paired by index, across different paths: {d:#?}"
    );
    assert_eq!(c[0].verdict, Verdict::Same);
    assert!(c[0].detail.contains("paired by argument 1"), "{}", c[0].detail);
    assert!(headlines(&d).is_empty());
    let t = text(&d);
    assert!(t.contains("match production's"), "{t}");
    assert!(
        t.contains("cache/redis-server config redis.conf: the same"),
        "{t}"
    );
    assert!(
        markdown(&d).contains("Everything compared matches"),
        "{}",
        markdown(&d)
    );
    let note = d
        .notes
        .iter()
        .find(|n| n.contains("node db"))
        .expect("a note on the node without processes");
    assert!(note.contains("production recorded no environment"), "{note}");
}

#[test]
fn a_differing_setting_is_named_with_its_lines() {
    let s = scenario();
    let prod = [redis("/etc/redis/redis.conf", REDIS_CONF)];
    let testbed_conf = "port 6379\n# a comment the testbed added\nappendonly   yes\nappendfsync always\n";
    let test = [redis("/scratch/run-1/redis.conf", testbed_conf)];
    let d = compare(&prod, &test, &s, "run-1");
    let diffs: Vec<&Row> = d.differences().collect();
    assert_eq!(diffs.len(), 1, "comments and blanks are no difference: {d:#?}");
    assert_eq!(diffs[0].kind, Kind::Config);
    assert_eq!(
        diffs[0].lines,
        vec![LineChange {
            production: Some("appendfsync everysec".into()),
            testbed: Some("appendfsync always".into()),
        }]
    );
    assert_eq!(
        headlines(&d),
        ["the testbed's redis.conf (node cache) differs from production's: `appendfsync always` vs `everysec`"]
    );
    let t = text(&d);
    assert!(
        t.contains("production: appendfsync everysec\n      testbed:    appendfsync always"),
        "{t}"
    );
    let md = markdown(&d);
    assert!(
        md.contains("- appendfsync everysec\n+ appendfsync always"),
        "{md}"
    );
}

#[test]
fn without_contents_the_hash_says_they_differ() {
    let s = scenario();
    let mut p = redis("/etc/redis/redis.conf", REDIS_CONF);
    let mut t = redis("/w/redis.conf", "appendfsync always\n");
    for side in [&mut p, &mut t] {
        side.environment.config_files[0].contents = None;
    }
    let d = compare(&[p], &[t], &s, "r");
    let c = config_rows(&d);
    assert_eq!(c[0].verdict, Verdict::Different);
    assert!(
        c[0].detail.starts_with("contents differ (sha256"),
        "{}",
        c[0].detail
    );
    assert!(c[0].lines.is_empty());
}

#[test]
fn a_file_read_on_one_side_only_is_missing_on_the_other() {
    let s = scenario();
    let mut p = redis("/etc/redis/redis.conf", REDIS_CONF);
    p.environment.config_files.push(config(
        "/etc/redis/users.acl",
        "etc",
        None,
        Some("user default on\n"),
    ));
    let t = redis("/w/redis.conf", REDIS_CONF);
    let d = compare(&[p], &[t], &s, "r");
    let diffs: Vec<&Row> = d.differences().collect();
    assert_eq!(diffs.len(), 1, "{d:#?}");
    assert_eq!(
        (diffs[0].name.as_str(), diffs[0].verdict),
        ("users.acl", Verdict::OnlyProduction)
    );
    assert_eq!(
        headlines(&d),
        ["production's cache read /etc/redis/users.acl, the testbed's did not"]
    );
}

#[test]
fn a_different_build_of_the_executable_is_named() {
    let s = scenario();
    let p = redis("/etc/redis/redis.conf", REDIS_CONF);
    let mut t = redis("/w/redis.conf", REDIS_CONF);
    t.environment.executable = Some(file("/opt/redis/bin/redis-server", "bb", Some("c0ffee")));
    let d = compare(&[p], &[t], &s, "r");
    let diffs: Vec<&Row> = d.differences().collect();
    assert_eq!(diffs.len(), 1, "{d:#?}");
    assert_eq!(diffs[0].kind, Kind::Executable);
    assert_eq!(diffs[0].detail, "different build (build id b1d0 vs c0ffee)");
    assert!(headlines(&d)[0].contains("redis-server (node cache) is not production's build"));
    // no build id on one side: the hash decides
    let mut p = redis("/etc/redis/redis.conf", REDIS_CONF);
    p.environment.executable.as_mut().unwrap().build_id = None;
    let mut t = redis("/w/redis.conf", REDIS_CONF);
    t.environment.executable.as_mut().unwrap().build_id = None;
    let d = compare(&[p], &[t], &s, "r");
    assert_eq!(d.differences().count(), 0, "same sha256: {d:#?}");
}

#[test]
fn libraries_pair_by_soname_and_compare_versions_then_builds() {
    assert_eq!(soname("/lib/libssl.so.3"), ("libssl".into(), "3".into()));
    assert_eq!(soname("/usr/lib/libfoo-2.1.so"), ("libfoo".into(), "2.1".into()));
    assert_eq!(
        soname("/lib64/ld-linux-x86-64.so.2"),
        ("ld-linux-x86-64".into(), "2".into())
    );
    assert_eq!(
        soname("/opt/libsomething.sock"),
        ("libsomething.sock".into(), "".into())
    );
    let s = scenario();
    let p = redis("/etc/redis/redis.conf", REDIS_CONF);
    let mut t = redis("/w/redis.conf", REDIS_CONF);
    // another directory, another version of libssl, a rebuilt libc of the same version
    t.environment.libraries = vec![
        file("/usr/local/lib/libc.so.6", "c7", Some("67")),
        file("/usr/local/lib/libssl.so.1.1", "s1", Some("11")),
    ];
    let d = compare(&[p], &[t], &s, "r");
    let libs: Vec<(&str, Verdict, &str)> = d
        .rows
        .iter()
        .filter(|r| r.kind == Kind::Library)
        .map(|r| (r.name.as_str(), r.verdict, r.detail.as_str()))
        .collect();
    assert_eq!(
        libs,
        [
            ("libc", Verdict::Different, "different build (build id 66 vs 67)"),
            ("libssl", Verdict::Different, "version 3 vs 1.1"),
        ]
    );
}

#[test]
fn argument_files_pair_by_option_then_index_and_etc_files_by_path() {
    let s = scenario();
    let env = |files: Vec<ConfigFile>| ProcEnvironment {
        config_files: files,
        ..Default::default()
    };
    // production: --config=PATH at index 1, -d PATH at 3, an /etc file; the testbed names
    // them in another order and at other paths
    let p = sample(
        1,
        "/opt/kv/kvnode --config=/etc/kv/kv.toml -d /etc/kv/data.toml",
        env(vec![
            config("/etc/kv/kv.toml", "argument", Some(1), Some("a = 1\n")),
            config("/etc/kv/data.toml", "argument", Some(3), Some("dir = x\n")),
            config("/etc/hosts", "etc", None, Some("127.0.0.1 localhost\n")),
        ]),
    );
    let t = sample(
        1,
        "/w/kvnode -d /w/d.toml --config /w/main.toml",
        env(vec![
            config("/etc/hosts", "etc", None, Some("127.0.0.1 localhost\n")),
            config("/w/d.toml", "argument", Some(2), Some("dir = x\n")),
            config("/w/main.toml", "argument", Some(4), Some("a = 2\n")),
        ]),
    );
    let d = compare(&[p], &[t], &s, "r");
    let c: Vec<(Option<&str>, Option<&str>, Verdict)> = config_rows(&d)
        .iter()
        .map(|r| (r.production.as_deref(), r.testbed.as_deref(), r.verdict))
        .collect();
    assert_eq!(
        c,
        [
            (Some("/etc/kv/kv.toml"), Some("/w/main.toml"), Verdict::Different),
            (Some("/etc/kv/data.toml"), Some("/w/d.toml"), Verdict::Same),
            (Some("/etc/hosts"), Some("/etc/hosts"), Verdict::Same),
        ],
        "{d:#?}"
    );
    assert!(config_rows(&d)[0].detail.contains("paired by option --config"));
    // positional arguments pair by index; etc files left by basename, in open order
    let p = sample(
        1,
        "kvnode /etc/kv/kv.toml",
        env(vec![config(
            "/etc/kv/kv.toml",
            "argument",
            Some(1),
            Some("a = 1\n"),
        )]),
    );
    let t = sample(
        1,
        "kvnode /w/other.toml",
        env(vec![config(
            "/w/other.toml",
            "argument",
            Some(1),
            Some("a = 1\n"),
        )]),
    );
    let d = compare(&[p], &[t], &s, "r");
    assert_eq!(config_rows(&d).len(), 1);
    assert_eq!(config_rows(&d)[0].verdict, Verdict::Same);
    let p = sample(
        1,
        "kvnode",
        env(vec![config("/etc/kv/conf.d/x.conf", "etc", None, Some("a\n"))]),
    );
    let t = sample(
        1,
        "kvnode",
        env(vec![config("/etc/kvtest/x.conf", "etc", None, Some("b\n"))]),
    );
    let d = compare(&[p], &[t], &s, "r");
    let rows = config_rows(&d);
    assert_eq!(rows.len(), 1, "{d:#?}");
    assert!(
        rows[0].detail.contains("the same file name"),
        "{}",
        rows[0].detail
    );
}

#[test]
fn kernel_limits_and_cgroups_are_rows_of_the_same_table() {
    let s = scenario();
    let p = redis("/etc/redis/redis.conf", REDIS_CONF);
    let mut t = redis("/w/redis.conf", REDIS_CONF);
    t.kernel = "6.18.0".into();
    t.environment.rlimits[0].soft = "65536".into();
    t.environment.cgroup_limits.push(CgroupLimit {
        file: "memory.max".into(),
        value: "536870912".into(),
    });
    t.environment.dropped_files = 2;
    let d = compare(&[p], &[t], &s, "r");
    assert_eq!(
        d.notes[..1],
        ["cache/redis-server: the testbed left 2 files (libraries or configuration) unrecorded at tracerd's bounds: they were not compared"]
    );
    let diffs: Vec<(Kind, &str, Verdict)> = d
        .differences()
        .map(|r| (r.kind, r.name.as_str(), r.verdict))
        .collect();
    assert_eq!(
        diffs,
        [
            (Kind::Kernel, "kernel", Verdict::Different),
            (Kind::Rlimit, "Max open files", Verdict::Different),
            (Kind::Cgroup, "memory.max", Verdict::OnlyTestbed),
        ]
    );
    let h = headlines(&d);
    assert_eq!(
        h[0],
        "the testbed's kernel is 6.18.0, production's 6.1.0-56-amd64 (node cache)"
    );
    assert!(
        h.contains(
            &"the testbed's rlimit Max open files (node cache) is 65536 / 4096, production's 1024 / 4096"
                .to_string()
        ),
        "{h:?}"
    );
}

#[test]
fn a_node_s_program_is_its_first_process_and_wrappers_are_no_drift() {
    let s = scenario();
    let p = redis("/etc/redis/redis.conf", REDIS_CONF);
    let mut child = redis("/etc/redis/redis.conf", "garbage\n");
    child.start_ns = 5;
    child.pid = 999;
    let t = redis("/w/redis.conf", REDIS_CONF);
    let wrapper = sample(0, "/bin/sh -c redis-server", ProcEnvironment::default());
    let d = compare(&[child, p], &[wrapper, t], &s, "r");
    assert_eq!(d.differences().count(), 0, "{d:#?}");
    assert!(!d.notes.iter().any(|n| n.contains("unrecorded")), "{:?}", d.notes);
    let program = d
        .rows
        .iter()
        .find(|r| r.kind == Kind::Program)
        .expect("the wrapper's row");
    assert_eq!(
        (program.program.as_str(), program.verdict),
        ("sh", Verdict::OnlyTestbed)
    );
}

#[test]
fn truncated_captures_compare_their_common_lines() {
    let long = "a 1\nb 2\nc 3\n";
    assert_eq!(files::line_changes("a 1\nb 2\n", "a 1\nb 3\n").len(), 1);
    let s = scenario();
    let mut p = redis("/etc/r.conf", long);
    let mut t = redis("/w/r.conf", "a 1\nb 2\nc 4\nd 5\n");
    p.environment.config_files[0].contents = Some("a 1\nb 2\nc".into());
    p.environment.config_files[0].truncated = true;
    t.environment.config_files[0].contents = Some("a 1\nb 2\nc 4\nd 5\n".into());
    let d = compare(&[p], &[t], &s, "r");
    let c = config_rows(&d);
    assert_eq!(c[0].verdict, Verdict::Different);
    assert!(
        c[0].lines.is_empty(),
        "the cut line is not compared: {:?}",
        c[0].lines
    );
    assert!(c[0].detail.contains("after the first 8 bytes"), "{}", c[0].detail);
}

#[test]
fn a_profile_keeps_each_node_s_program_as_its_testbed_side() {
    let s = scenario();
    let mut child = redis("/w/redis.conf", "garbage\n");
    child.start_ns = 9;
    let run = [redis("/w/redis.conf", REDIS_CONF), child];
    let kept = to_profile(&run, &s);
    assert_eq!(kept.len(), 1, "the first process of the program only");
    assert_eq!(
        (kept[0].node.as_str(), kept[0].program.as_str()),
        ("cache", "redis-server")
    );
    let json = serde_json::to_string(&kept).unwrap();
    let back: Vec<ProfiledProcess> = serde_json::from_str(&json).unwrap();
    let side = from_profile(&back, &s);
    let d = compare(
        &[redis("/etc/redis/redis.conf", REDIS_CONF)],
        &side,
        &s,
        "profile p.json",
    );
    assert_eq!(d.differences().count(), 0, "{d:#?}");
    assert!(config_rows(&d)[0].verdict == Verdict::Same);
}

#[test]
fn libraries_or_limits_one_side_did_not_record_are_one_unknown_row() {
    let s = scenario();
    let mut p = redis("/etc/redis/redis.conf", REDIS_CONF);
    // production's process ended before tracerd's look: no libraries, no limits
    p.environment.libraries.clear();
    p.environment.rlimits.clear();
    let t = redis("/w/redis.conf", REDIS_CONF);
    let d = compare(&[p], &[t], &s, "r");
    let rows: Vec<(Kind, &str, Verdict)> = d
        .rows
        .iter()
        .filter(|r| matches!(r.kind, Kind::Library | Kind::Rlimit))
        .map(|r| (r.kind, r.name.as_str(), r.verdict))
        .collect();
    assert_eq!(
        rows,
        [
            (Kind::Library, "all", Verdict::Unknown),
            (Kind::Rlimit, "all", Verdict::Unknown),
        ]
    );
    assert_eq!(d.differences().count(), 0, "{:?}", d.rows);
}

fn dir(path: &str, role: &str, fs_type: &str, source: &str, options: &str) -> DirStorage {
    DirStorage {
        path: path.into(),
        role: role.into(),
        argument: (role == "argument").then_some(2),
        resolved: None,
        mount_point: path
            .rsplit_once('/')
            .map_or("/", |(m, _)| if m.is_empty() { "/" } else { m })
            .into(),
        fs_type: fs_type.into(),
        source: source.into(),
        options: options
            .split(',')
            .filter(|o| !o.is_empty())
            .map(String::from)
            .collect(),
        size_bytes: 16 << 20,
        free_bytes: 1 << 18,
    }
}

/// etcd-like: production in a podman container (root on an overlay), its data directory on
/// a nearly full tmpfs and its WAL behind a symlink on another filesystem; the testbed plain.
fn stored(production: bool) -> Sample {
    let mut s = sample(1, "kvnode --data /var/lib/kv", ProcEnvironment::default());
    let (root, data, wal) = if production {
        let mut wal = dir("/var/lib/kv/wal", "file", "ext4", "/dev/sdb1", "rw,data=journal");
        wal.resolved = Some("/mnt/wal".into());
        (
            dir("/", "root", "overlay", "overlay", "rw"),
            dir("/var/lib/kv", "argument", "tmpfs", "tmpfs", "rw,size=16384k"),
            wal,
        )
    } else {
        (
            dir("/", "root", "ext4", "/dev/vda1", "rw,relatime"),
            dir("/scratch/run-1/kv", "argument", "ext4", "/dev/vda1", "rw,noatime"),
            dir("/scratch/run-1/kv/wal", "file", "ext4", "/dev/vda1", "rw"),
        )
    };
    let cwd = dir("/srv", "cwd", "ext4", "/dev/vda1", "rw,noatime");
    s.environment.storage = vec![root, cwd, data, wal];
    s.container = production.then(|| "podman".to_string());
    s
}

#[test]
fn storage_and_container_are_compared_and_named_first_when_they_differ() {
    let d = compare(&[stored(true)], &[stored(false)], &scenario(), "run");
    let row = |name: &str| {
        d.rows
            .iter()
            .find(|r| r.kind == Kind::Storage && r.name.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row: {:#?}", d.rows))
    };
    assert_eq!(row("root").verdict, Verdict::Different);
    assert_eq!(
        row("working directory").verdict,
        Verdict::Same,
        "noatime is no durability option"
    );
    let data = row("argument 2");
    assert_eq!(data.verdict, Verdict::Different);
    assert!(
        data.detail.starts_with("tmpfs (tmpfs) vs ext4 (block)"),
        "{}",
        data.detail
    );
    assert!(
        data.production
            .as_deref()
            .unwrap()
            .contains("tmpfs (16.0 MiB, 1% free) at /var/lib"),
        "{data:?}"
    );
    let wal = row("directory wal");
    assert_eq!(wal.verdict, Verdict::Different);
    assert!(
        wal.detail.starts_with("options data=journal vs (none)"),
        "{}",
        wal.detail
    );
    assert!(
        wal.production
            .as_deref()
            .unwrap()
            .contains("through a symlink to /mnt/wal"),
        "{wal:?}"
    );
    let container = d.rows.iter().find(|r| r.kind == Kind::Container).unwrap();
    assert_eq!(
        (
            container.verdict,
            container.production.as_deref(),
            container.testbed.as_deref()
        ),
        (Verdict::Different, Some("podman"), Some("none"))
    );
    let lines = headlines(&d);
    assert!(
        lines.iter().any(|l| l.starts_with("the testbed's argument 2 (node db) is not on production's kind of storage: tmpfs (tmpfs) vs ext4 (block)")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "the testbed's db ran in container none, production's in podman"),
        "{lines:#?}"
    );
    // the same storage on both sides: nothing named
    let same = compare(&[stored(false)], &[stored(false)], &scenario(), "run");
    assert_eq!(same.differences().count(), 0, "{:#?}", same.rows);
}
