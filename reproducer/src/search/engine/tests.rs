//! The engines that need no cluster: `--runner`'s words, and a command engine's attempt
//! read back from its directory (the Slurm engine is tested on a real single-host Slurm,
//! tests/reproducer/slurm.rs).
use super::*;

#[derive(Debug, serde::Deserialize, PartialEq)]
struct Report {
    bug: bool,
    spec: String,
}

#[test]
fn runner_names_and_templates_parse() {
    assert_eq!("local".parse::<Engine>(), Ok(Engine::Local));
    assert_eq!(" slurm ".parse::<Engine>(), Ok(Engine::Slurm));
    assert_eq!(
        "kube-attempt --image 'a b' {spec} {dir}".parse::<Engine>(),
        Ok(Engine::Command(
            ["kube-attempt", "--image", "a b", "{spec}", "{dir}"]
                .map(String::from)
                .to_vec()
        ))
    );
    let e = "ssh node reproducer run-attempt --spec {spec}"
        .parse::<Engine>()
        .unwrap_err();
    assert!(e.contains("has no {dir}"), "{e}");
    let e = "sh -c 'run {spec} {dir}".parse::<Engine>().unwrap_err();
    assert!(e.contains("unbalanced quotes"), "{e}");
    assert!("".parse::<Engine>().is_err());
}

#[test]
fn a_command_engine_runs_the_attempt_and_its_report_is_read_back_from_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("attempt.toml");
    std::fs::write(&spec, "").unwrap();
    // a stale report of an earlier run in the same directory is not taken for this one's
    std::fs::write(
        dir.path().join(REPORT_FILE),
        "{\"bug\": false, \"spec\": \"old\"}",
    )
    .unwrap();
    let engine: Engine =
        "sh -c 'printf \"{\\\"bug\\\": true, \\\"spec\\\": \\\"%s\\\"}\" \"$0\" > \"$1/attempt-report.json\"' {spec} {dir}"
            .parse()
            .unwrap();
    let report: Report = engine.run_attempt(&spec, dir.path()).unwrap();
    assert_eq!(
        report,
        Report {
            bug: true,
            spec: spec.display().to_string()
        }
    );
}

#[test]
fn a_failed_attempt_s_error_is_its_own_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("attempt.toml");
    let engine: Engine =
        "sh -c 'echo \"reproducer: error: node db1 has no such program\" >&2; exit 2' {spec} {dir}"
            .parse()
            .unwrap();
    let e = format!(
        "{:#}",
        engine.run_attempt::<Report>(&spec, dir.path()).unwrap_err()
    );
    assert_eq!(e, "node db1 has no such program");
    let engine: Engine = "sh -c 'exit 3' {spec} {dir}".parse().unwrap();
    let e = format!(
        "{:#}",
        engine.run_attempt::<Report>(&spec, dir.path()).unwrap_err()
    );
    assert!(e.contains("attempt.toml") && e.contains("exit status: 3"), "{e}");
}

#[test]
fn an_attempt_that_ended_without_its_report_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let ended = Ended {
        success: true,
        how: "Slurm job 7 ended COMPLETED".into(),
        messages: String::new(),
    };
    let e = read_back::<Report>(
        &dir.path().join(REPORT_FILE),
        ended,
        Path::new("/s/attempt.toml"),
        Duration::ZERO,
    )
    .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("Slurm job 7 ended COMPLETED without its report") && e.contains(REPORT_FILE),
        "{e}"
    );
}
