//! `reproducer profile`: benign failures and infrequent functions counted over fault-free
//! runs (the list production tracerd reads), the programs behind wrappers, the Go functions
//! of a stripped binary as fault context, and what it refuses or warns about.

use std::path::{Path, PathBuf};

use crate::common::*;
use crate::replay::*;

fn profile_scenario(oracle: &str) -> String {
    format!(
        r#"name = "profiled"
[[nodes]]
name = "n1"
command = ["FAULTY", "profile", "{{workdir}}/n1", "1500"]
[workload]
command = {}
[oracle]
command = {oracle}
"#,
        wait_for("n1", "profile done")
    )
}

/// What is left in `tmp` (the TMPDIR a reproducer ran with).
fn leftovers(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect()
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn profile_counts_benign_failures_and_finds_infrequent_functions() {
    require_root();
    let links = own_links();
    let (dir, sc, _) = files(&profile_scenario(r#"["false"]"#), "");
    // its own TMPDIR: the check below must not see other programs' scratch directories
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out_path = dir.path().join("profile.json");
    let out = reproducer_cmd()
        .args([
            "profile",
            "--scenario",
            sc.to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
        ])
        .env("TMPDIR", &tmp)
        .output()
        .expect("running reproducer");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let list_path = dir.path().join("profile.functions");
    assert!(
        t.contains(&format!("infrequent functions: {}", list_path.display())),
        "{t}"
    );
    assert!(t.contains("profile: 3 runs"), "{t}");
    assert_clean(&links);
    assert_eq!(
        leftovers(&tmp),
        Vec::<PathBuf>::new(),
        "the runs' scratch directory is removed"
    );

    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    assert_eq!(p["format"], "reproducer-profile");
    assert_eq!(p["version"], 1);
    assert_eq!(p["scenario"], "profiled");
    assert_eq!(p["runs"], 3);
    assert_eq!(p["run_seconds"].as_array().unwrap().len(), 3);
    assert!(
        p["run_seconds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s.as_f64().unwrap() >= 1.5),
        "{}",
        p["run_seconds"]
    );
    assert_eq!(p["scenario_nodes"]["n1"][1], "profile");

    let failures = p["failures"].as_array().unwrap();
    let optional = failures
        .iter()
        .find(|f| f["path"] == "{workdir}/n*/optional-*.conf")
        .unwrap_or_else(|| {
            panic!("the benign ENOENT signature, three paths normalized into one: {failures:#?}")
        });
    assert_eq!(
        (
            optional["node"].as_str(),
            optional["syscall"].as_str(),
            optional["errno"].as_str()
        ),
        (Some("n1"), Some("openat"), Some("ENOENT"))
    );
    assert_eq!(optional["per_run"], serde_json::json!([3, 3, 3]));
    assert!(optional["per_second"].as_f64().unwrap() > 0.5 / timing_slack() as f64);

    let syscalls = p["syscalls"].as_array().unwrap();
    let openat = syscalls
        .iter()
        .find(|s| s["node"] == "n1" && s["syscall"] == "openat")
        .expect("openat counted for n1");
    assert!(
        openat["per_run"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n.as_u64().unwrap() >= 3),
        "{openat}"
    );

    let functions = p["functions"].as_array().unwrap();
    let function = |name: &str| {
        functions
            .iter()
            .find(|f| f["symbol"] == name)
            .unwrap_or_else(|| panic!("{name} profiled: {functions:#?}"))
    };
    let binary = std::fs::canonicalize(faulty()).unwrap().display().to_string();
    let once = function("stage_once");
    assert_eq!(once["per_run"], serde_json::json!([1, 1, 1]));
    assert_eq!(once["infrequent"], true);
    assert_eq!(once["binary"], binary.as_str());
    assert_eq!(once["node"], "n1");
    // called 20,000 times a run: past the call limit, its uprobe is detached in the run
    // (counted up to then, at least the limit), listed as detached, never infrequent
    let hot = function("stage_hot");
    let counts: Vec<u64> = hot["per_run"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert!(counts.iter().all(|&n| (1000..=20000).contains(&n)), "{counts:?}");
    assert_eq!(hot["infrequent"], false);
    let detached = format!("{binary}:stage_hot");
    assert!(
        p["functions_detached"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == detached.as_str()),
        "{}",
        p["functions_detached"]
    );
    assert_eq!(
        function("stage_g")["per_run"],
        serde_json::json!([0, 0, 0]),
        "never called in this mode"
    );
    assert_eq!(p["dropped"]["events"], 0);

    let list = std::fs::read_to_string(&list_path).unwrap();
    let lines: Vec<&str> = list.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(lines.contains(&format!("{binary}:stage_once").as_str()), "{list}");
    assert!(!list.contains("stage_hot"), "{list}");
    assert!(
        lines.iter().all(|l| l.starts_with(&format!("{binary}:"))),
        "{list}"
    );

    // the list is what production tracerd reads (its `functions` setting)
    let config = tracerd::config::Config {
        functions: Some(list_path.clone()),
        ..Default::default()
    };
    let specs = config.function_specs().expect("tracerd reads the list");
    assert_eq!(specs.len(), lines.len());
    assert!(specs
        .iter()
        .any(|f| f.symbol == "stage_once" && f.binary.display().to_string() == binary));
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn profile_refuses_an_oracle_that_fires_without_faults() {
    require_root();
    let links = own_links();
    let (dir, sc, _) = files(&profile_scenario(r#"["true"]"#), "");
    let out_path = dir.path().join("profile.json");
    let out = reproducer(&[
        "profile",
        "--scenario",
        sc.to_str().unwrap(),
        "--runs",
        "2",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("oracle fired in fault-free run 1 of 2"), "{t}");
    assert!(!out_path.exists(), "no profile is written");
    assert_clean(&links);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn go_functions_of_a_stripped_binary_are_profiled_and_are_fault_context() {
    require_root();
    let links = own_links();
    let gonode = go_program("gonode").display().to_string();
    let scenario = r#"name = "go"
[[nodes]]
name = "n1"
command = ["GONODE", "calls", "5", "50"]
[workload]
command = ["sleep", "1.5"]
[oracle]
command = ["sh", "-c", "! grep -q done {workdir}/n1.log && [ ! -e {workdir}/snapshot-0 ]"]
"#
    .replace("GONODE", &gonode);
    let schedule =
        "[[faults]]\nnode = \"n1\"\nkind = \"crash\"\nafter_functions = [\"main.(*store).storeSnapshot\"]\n";
    let (dir, sc, sch) = files(&scenario, schedule);
    let out_path = dir.path().join("profile.json");
    let out = reproducer(&[
        "profile",
        "--scenario",
        sc.to_str().unwrap(),
        "--runs",
        "2",
        "--functions-from",
        "main.*",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let functions = p["functions"].as_array().unwrap();
    let snapshot = functions
        .iter()
        .find(|f| f["symbol"] == "main.(*store).storeSnapshot")
        .unwrap_or_else(|| panic!("the Go method is a candidate of the stripped binary: {functions:#?}"));
    // a call that grows the goroutine's stack runs the function's entry twice (Go restarts
    // the function after growing the stack), and a garbage collection may shrink the stack
    // again between calls: a run counts each of its 5 calls once or twice
    let counts: Vec<u64> = snapshot["per_run"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert!(
        counts.len() == 2 && counts.iter().all(|&n| (5..=10).contains(&n)),
        "{counts:?}"
    );
    assert_eq!(
        snapshot["binary"],
        std::fs::canonicalize(&gonode).unwrap().display().to_string()
    );
    assert!(
        functions
            .iter()
            .all(|f| f["symbol"].as_str().unwrap().starts_with("main.")),
        "{functions:#?}"
    );
    assert_clean(&links);

    let out = reproducer(&[
        "replay",
        "--scenario",
        sc.to_str().unwrap(),
        "--schedule",
        sch.to_str().unwrap(),
        "--runs",
        "3",
    ]);
    let t = text(&out);
    assert!(out.status.success() && t.contains("replay rate: 3/3"), "{t}");
    assert_clean(&links);
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn profile_finds_the_programs_behind_wrappers_and_warns_about_zero_candidates() {
    require_root();
    let links = own_links();
    let scenario = format!(
        r#"name = "wrapped"
[[nodes]]
name = "n1"
command = ["setpriv", "--no-new-privs", "FAULTY", "profile", "{{workdir}}/n1", "300"]
[[nodes]]
name = "n2"
command = ["runuser", "-u", "root", "--", "FAULTY", "profile", "{{workdir}}/n2", "300"]
[[nodes]]
name = "n3"
command = ["sh", "-c", "exec FAULTY profile {{workdir}}/n3 300"]
[workload]
command = {}
[oracle]
command = ["false"]
"#,
        wait_for("n2", "profile done")
    );
    let (dir, sc, _) = files(&scenario, "");
    let out_path = dir.path().join("profile.json");
    let out = reproducer(&[
        "profile",
        "--scenario",
        sc.to_str().unwrap(),
        "--runs",
        "1",
        "--out",
        out_path.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("repeated with the functions of the programs the nodes really run"),
        "{t}"
    );
    assert!(!t.contains("WARNING"), "{t}");
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let binary = std::fs::canonicalize(faulty()).unwrap().display().to_string();
    for node in ["n1", "n2", "n3"] {
        assert_eq!(
            p["programs"][node],
            serde_json::json!([binary]),
            "{node}: the wrapper is ignored: {}",
            p["programs"]
        );
    }
    let functions = p["functions"].as_array().unwrap();
    let once = functions
        .iter()
        .find(|f| f["symbol"] == "stage_once")
        .unwrap_or_else(|| panic!("{functions:#?}"));
    assert_eq!(
        once["per_run"],
        serde_json::json!([3]),
        "one call in each of the three nodes"
    );
    assert_eq!(once["binary"], binary.as_str());
    assert_eq!(p["runs"], 1);
    assert_clean(&links);

    // nothing to count: loud, with the reason
    for (command, patterns, why) in [
        (
            r#"["sh", "-c", "i=0; while [ $i -lt 50 ]; do i=$((i+1)); done"]"#,
            vec![],
            "node n1 runs only wrappers",
        ),
        (
            r#"["FAULTY", "profile", "{workdir}/n1", "100"]"#,
            vec!["--functions-from", "no_such_*"],
            "--functions-from matched none",
        ),
    ] {
        let scenario = format!("name = \"none\"\n[[nodes]]\nname = \"n1\"\ncommand = {command}\n[workload]\ncommand = [\"sleep\", \"0.5\"]\n[oracle]\ncommand = [\"false\"]\n");
        let (dir, sc, _) = files(&scenario, "");
        let out_path = dir.path().join("profile.json");
        let mut args = vec![
            "profile",
            "--scenario",
            sc.to_str().unwrap(),
            "--runs",
            "1",
            "--out",
            out_path.to_str().unwrap(),
        ];
        args.extend(patterns);
        let out = reproducer(&args);
        let t = text(&out);
        assert!(
            t.contains("WARNING: 0 candidate functions") && t.contains(why),
            "{t}"
        );
    }
    assert_clean(&links);
}
