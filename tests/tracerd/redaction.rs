//! Redaction: secrets in command lines and paths are replaced before a dump is written, by
//! the default rule and by the operator's own.

use crate::common::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn dumps_are_redacted_before_they_are_written() {
    require_root();
    let prog = program_as("crasher", "cr_redact");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("redact.toml");
    // the default rule plus one of the operator's own (rules given replace the default)
    std::fs::write(
        &config,
        format!(
            "[[redact]]\npattern = '{}'\nreplacement = \"{}\"\n[[redact]]\npattern = 'customer-[0-9]+'\nreplacement = \"customer-N\"\n",
            tracerd::redact::DEFAULT_PATTERN,
            tracerd::redact::DEFAULT_REPLACEMENT
        ),
    )
    .unwrap();
    let d = Daemon::start(&["--config", config.to_str().unwrap(), "--target-comm", "cr_redact"]);
    let argv_pid = run_to_end(
        &prog,
        &[
            "argv",
            "--password=hunter2",
            "--port=7001",
            "https://db/x?token=tok3n&y=1",
        ],
    );
    let path = "/nonexistent/customer-4711/api_key=k3y";
    let fail_pid = run_to_end(&prog, &["fail", path]);
    let dump = d.dump();

    let parsed = tracerd::dump::Dump::read(&dump).unwrap();
    let meta_json = serde_json::to_string(&parsed.meta).unwrap();
    let window = String::from_utf8_lossy(&parsed.blobs.bytes).into_owned();
    for secret in ["hunter2", "tok3n", "4711", "k3y"] {
        assert!(!meta_json.contains(secret), "{secret} is in the dump's header");
        assert!(!window.contains(secret), "{secret} is in the dump's blobs");
    }
    let p = parsed
        .meta
        .processes
        .iter()
        .find(|p| p.pid == argv_pid)
        .expect("the process is in the table");
    let argv = p.cmdline.as_ref().unwrap();
    assert_eq!(
        &argv[1..],
        [
            "argv",
            "--password=<redacted>",
            "--port=7001",
            "https://db/x?token=<redacted>&y=1"
        ]
    );
    let events = inspect_json(&dump);
    let failure = events
        .iter()
        .find(|e| e["pid"] == fail_pid && e["path"].as_str().is_some_and(|p| p.starts_with("/nonexistent/")))
        .expect("the failed open");
    assert_eq!(failure["path"], "/nonexistent/customer-N/api_key=<redacted>");
}
