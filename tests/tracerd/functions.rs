//! Functions probed with uprobes: the functions of one binary share one link where the
//! kernel has uprobe-multi, calls counted without an event each, and the functions of a
//! stripped Go binary (found in its .gopclntab); a function past the call limit detached,
//! re-creating only the link that held it when a binary's functions span several links.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use tracerd::uprobes::MULTI_LINK_FUNCTIONS;

use crate::common::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn counts_function_calls_and_syscalls_without_function_events() {
    require_root();
    let prog = eventgen_as("eg_count");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("count.toml");
    std::fs::write(&config, "count_syscalls = true\nfunction_events = false\n").unwrap();
    let uprobe = format!("{}:tracerd_test_marker", prog.display());
    let d = Daemon::start(&[
        "--config",
        config.to_str().unwrap(),
        "--target-comm",
        "eg_count",
        "--uprobe",
        &uprobe,
    ]);
    const N: u64 = 37;
    const M: u64 = 250;
    let pid = run_prog(&prog, &["calls", &N.to_string(), &M.to_string()]);
    let dump = d.dump();

    let meta = inspect_meta(&dump);
    assert_eq!(
        meta["function_calls"],
        serde_json::json!([N]),
        "every call counted: {}",
        meta["function_calls"]
    );
    assert_eq!(meta["unattached_functions"], serde_json::json!([]));
    let counts = meta["syscall_counts"]
        .as_array()
        .expect("syscall_counts is a list");
    let getppid = counts
        .iter()
        .find(|c| c["pid"] == pid && c["syscall"] == "getppid")
        .unwrap_or_else(|| panic!("getppid of pid {pid} is counted: {counts:#?}"));
    assert!(getppid["count"].as_u64().unwrap() >= M, "{getppid}");
    assert!(counts.iter().all(|c| c["count"].as_u64().unwrap() > 0));
    assert_eq!(meta["counters"]["kernel"]["syscall_counts_full"], 0);
    assert_eq!(meta["config"]["count_syscalls"], true);

    let events = inspect_json(&dump);
    assert!(
        events.iter().all(|e| e["kind"] != "function"),
        "function_events = false records no hits"
    );
    assert!(
        !events_of(&events, "process_state", pid).is_empty(),
        "other events are still recorded"
    );
    let text = run_ok(Command::new(tracerd_bin()).arg("inspect").arg(&dump));
    assert!(
        text.contains(&format!("counted: {N} calls of 1/1 functions")),
        "{text}"
    );
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn functions_of_one_binary_share_a_link_and_are_counted_and_recorded() {
    require_root();
    let prog = eventgen_as("eg_multi");
    let marker = format!("{}:tracerd_test_marker", prog.display());
    let other = format!("{}:tracerd_test_other", prog.display());
    let d = Daemon::start(&[
        "--target-comm",
        "eg_multi",
        "--uprobe",
        &marker,
        "--uprobe",
        &other,
    ]);
    let perf_event_fds = std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("perf_event"))
        .count();
    let pid = run_prog(&prog, &["marker", "5"]);
    let dump = d.dump();
    let meta = inspect_meta(&dump);
    assert_eq!(meta["function_calls"], serde_json::json!([5, 1]));
    assert_eq!(
        meta["syscall_counts"],
        serde_json::json!([]),
        "count_syscalls is off by default"
    );
    let events = inspect_json(&dump);
    let hits = events_of(&events, "function", pid);
    assert_eq!(
        hits.iter()
            .filter(|e| e["function"] == "tracerd_test_marker")
            .count(),
        5
    );
    assert_eq!(
        hits.iter()
            .filter(|e| e["function"] == "tracerd_test_other")
            .count(),
        1
    );
    if tracerd::kernel::uprobe_multi_links() {
        assert_eq!(
            perf_event_fds, 0,
            "one uprobe-multi link for both functions, not a perf event per uprobe"
        );
    } else {
        assert_eq!(
            perf_event_fds, 2,
            "no uprobe-multi links on this kernel: one uprobe per function"
        );
    }
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn a_function_past_the_call_limit_is_detached_and_the_others_still_counted() {
    require_root();
    let prog = eventgen_as("eg_detach");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("detach.toml");
    std::fs::write(
        &config,
        "function_events = false\ndetach_functions_after_calls = 1000\n",
    )
    .unwrap();
    let marker = format!("{}:tracerd_test_marker", prog.display());
    let other = format!("{}:tracerd_test_other", prog.display());
    let d = Daemon::start(&[
        "--config",
        config.to_str().unwrap(),
        "--target-comm",
        "eg_detach",
        "--uprobe",
        &marker,
        "--uprobe",
        &other,
    ]);
    // the marker goes past the limit in the first run and is detached before the second:
    // the second run's calls of it are not counted, the other function's are
    run_prog(&prog, &["marker", "5000"]);
    d.wait_for_log("detached 1 functions", Duration::from_secs(10));
    run_prog(&prog, &["marker", "5000"]);
    let meta = inspect_meta(&d.dump());
    assert_eq!(
        meta["function_calls"],
        serde_json::json!([5000, 2]),
        "{}",
        d.log_text()
    );
    assert_eq!(meta["detached_functions"], serde_json::json!([0]));
    assert_eq!(meta["unattached_functions"], serde_json::json!([]));
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn functions_of_a_stripped_go_binary_are_counted() {
    require_root();
    let prog = go_program("gonode");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("count.toml");
    std::fs::write(&config, "function_events = false\n").unwrap();
    let marker = format!("{}:main.tracerdTestMarker", prog.display());
    let method = format!("{}:main.(*store).storeSnapshot", prog.display());
    let d = Daemon::start(&[
        "--config",
        config.to_str().unwrap(),
        "--target-comm",
        "gonode",
        "--uprobe",
        &marker,
        "--uprobe",
        &method,
    ]);
    let work = tempfile::tempdir().unwrap();
    let status = Command::new(&prog)
        .args(["calls", "7"])
        .current_dir(work.path())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let meta = inspect_meta(&d.dump());
    // a call that grows the goroutine's stack runs the function's entry twice (Go restarts
    // the function after growing the stack), so a count may be higher by one or two
    let calls: Vec<u64> = meta["function_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert!(
        calls.len() == 2 && calls.iter().all(|&n| (7..=9).contains(&n)),
        "Go functions from .gopclntab are probed at their entry: {calls:?}"
    );

    drop(d);
    // one function alone takes the single-uprobe path, which must resolve Go names too
    let single = Daemon::start(&["--target-comm", "gonode", "--uprobe", &method]);
    let status = Command::new(&prog)
        .args(["calls", "3"])
        .current_dir(work.path())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let calls = inspect_meta(&single.dump())["function_calls"][0]
        .as_u64()
        .unwrap();
    assert!((3..=5).contains(&calls), "{calls}");
    let sock = dir.path().join("s.sock");
    let err = tracerd_fails(&[
        "run",
        "--uprobe",
        &format!("{}:main.noSuchFunction", prog.display()),
        "--control-socket",
        sock.to_str().unwrap(),
    ]);
    assert!(
        err.contains("main.noSuchFunction") && err.contains(".gopclntab") && !err.contains("nm -D"),
        "{err}"
    );
}

/// Functions of the generated program: more than one multi link holds.
const MANY: usize = 1000;
/// The ones the test makes hot: on two different links, one of the middle (not the first or
/// last); called in turns, they pass the limit together and one look re-creates both links.
const HOT: [usize; 2] = [100, 600];

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn hot_functions_of_a_large_binary_are_detached_and_the_other_links_keep_counting() {
    require_root();
    let prog = many_functions_program();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("detach.toml");
    std::fs::write(
        &config,
        "function_events = false\ndetach_functions_after_calls = 1000\n",
    )
    .unwrap();
    let functions = dir.path().join("functions");
    let lines: String = (0..MANY)
        .map(|i| format!("{}:many_fn_{i:04}\n", prog.display()))
        .collect();
    std::fs::write(&functions, lines).unwrap();
    let d = Daemon::start(&[
        "--config",
        config.to_str().unwrap(),
        "--target-comm",
        "manyfuncs",
        "--functions",
        functions.to_str().unwrap(),
    ]);
    let multi = tracerd::kernel::uprobe_multi_links();
    let before = uprobe_links(d.pid());
    if multi {
        assert_eq!(
            before.len(),
            MANY.div_ceil(MULTI_LINK_FUNCTIONS),
            "the functions are split over links of at most {MULTI_LINK_FUNCTIONS}: {before:?}"
        );
    } else {
        assert_eq!(
            perf_event_fds(d.pid()),
            MANY,
            "one uprobe per function without multi links"
        );
    }

    // every function once, then each hot one 5,000 times: past the limit, detached before
    // the second run, whose calls of them are then not counted while every other function's are
    let args = ["5000", &HOT[0].to_string(), &HOT[1].to_string()];
    run_prog(&prog, &args);
    d.wait_for_log("(2 in all)", Duration::from_secs(10));
    let after = uprobe_links(d.pid());
    run_prog(&prog, &args);
    let meta = inspect_meta(&d.dump());
    let calls: Vec<u64> = meta["function_calls"]
        .as_array()
        .expect("function_calls is a list")
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(calls.len(), MANY);
    // detached at the first look past 1,000 calls: within the first run's calls (5,001)
    for hot in HOT {
        assert!(
            (1000..=5001).contains(&calls[hot]),
            "hot function {hot} is counted until detached, not in the second run: {}",
            calls[hot]
        );
    }
    let others: Vec<(usize, u64)> = calls
        .iter()
        .enumerate()
        .filter(|&(id, &n)| !HOT.contains(&id) && n != 2)
        .map(|(id, &n)| (id, n))
        .collect();
    assert!(
        others.is_empty(),
        "every other function counted in both runs: {others:?}\n{}",
        d.log_text()
    );
    let mut detached: Vec<u64> = meta["detached_functions"]
        .as_array()
        .expect("detached_functions is a list")
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    detached.sort_unstable();
    assert_eq!(detached, HOT.map(|h| h as u64));
    assert_eq!(meta["unattached_functions"], serde_json::json!([]));

    if multi {
        assert_only_the_hot_links_were_recreated(&before, &after);
    } else {
        assert_eq!(
            perf_event_fds(d.pid()),
            MANY - HOT.len(),
            "the hot functions' uprobes alone are gone"
        );
    }
}

/// The kernel's view (link fdinfo) before and after the detach: the links without a hot
/// function are the same links, each one with one was replaced by one of its other functions.
/// Kernels before 6.13 do not list a link's cookies; then only the number of links is checked.
fn assert_only_the_hot_links_were_recreated(before: &UprobeLinks, after: &UprobeLinks) {
    assert_eq!(after.len(), before.len(), "{after:?}");
    if before.values().all(|cookies| cookies.is_empty()) {
        return;
    }
    let all: Vec<usize> = before.values().flatten().copied().collect();
    assert_eq!(all.len(), MANY, "every function on a link: {before:?}");
    assert!(
        before.values().all(|c| c.len() <= MULTI_LINK_FUNCTIONS),
        "{before:?}"
    );
    let is_hot = |cookies: &Vec<usize>| cookies.iter().any(|c| HOT.contains(c));
    for (id, cookies) in before.iter().filter(|(_, c)| !is_hot(c)) {
        assert_eq!(
            after.get(id),
            Some(cookies),
            "link {id} is left as it was: {after:?}"
        );
    }
    let mut expected: Vec<Vec<usize>> = before
        .values()
        .filter(|c| is_hot(c))
        .map(|c| c.iter().copied().filter(|c| !HOT.contains(c)).collect())
        .collect();
    let mut new: Vec<Vec<usize>> = after
        .iter()
        .filter(|(id, _)| !before.contains_key(*id))
        .map(|(_, c)| c.clone())
        .collect();
    assert_eq!(
        expected.len(),
        HOT.len(),
        "the hot functions are on different links: {before:?}"
    );
    expected.sort();
    new.sort();
    assert_eq!(new, expected, "each hot link re-created with its other functions");
}

/// The daemon's uprobe-multi links: link id -> the function ids (cookies) it probes, sorted
/// (empty where the kernel's fdinfo does not list them).
type UprobeLinks = BTreeMap<u64, Vec<usize>>;

fn uprobe_links(pid: u32) -> UprobeLinks {
    let mut links = UprobeLinks::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let Ok(info) = std::fs::read_to_string(entry.unwrap().path()) else {
            continue;
        };
        if !info
            .lines()
            .any(|l| l.split_whitespace().eq(["link_type:", "uprobe_multi"]))
        {
            continue;
        }
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        let id: u64 = field("link_id:").unwrap().parse().unwrap();
        // after the "cookie offset ref_ctr_offset" header: one line per probed offset
        let mut cookies: Vec<usize> = info
            .lines()
            .skip_while(|l| !l.starts_with("cookie"))
            .skip(1)
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect();
        cookies.sort_unstable();
        links.insert(id, cookies);
    }
    links
}

fn perf_event_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("perf_event"))
        .count()
}

/// A program of MANY small functions `many_fn_NNNN`, generated and compiled once per test
/// process: `manyfuncs N HOT...` calls each function once, then the functions HOT in turns, N times each.
fn many_functions_program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out_dir = workspace_root().join("target").join("test-programs");
            std::fs::create_dir_all(&out_dir).unwrap();
            let mut c = String::from("#include <stdlib.h>\n");
            for i in 0..MANY {
                c += &format!(
                    "__attribute__((noinline)) void many_fn_{i:04}(int i) {{ __asm__ volatile(\"\" : : \"r\"(i) : \"memory\"); }}\n"
                );
            }
            c += "static void (*const fns[])(int) = {\n";
            for i in 0..MANY {
                c += &format!("\tmany_fn_{i:04},\n");
            }
            c += "};\n";
            c += &format!(
                "int main(int argc, char **argv)\n{{\n\tif (argc < 2) return 2;\n\tlong n = atol(argv[1]);\n\tfor (int i = 0; i < {MANY}; i++) fns[i](i);\n\tfor (int a = 2; a < argc; a++)\n\t\tif (atol(argv[a]) < 0 || atol(argv[a]) >= {MANY}) return 2;\n\tfor (long i = 0; i < n; i++)\n\t\tfor (int a = 2; a < argc; a++) fns[atol(argv[a])]((int)i);\n\treturn 0;\n}}\n"
            );
            let src = out_dir.join("manyfuncs.c");
            std::fs::write(&src, c).unwrap();
            let out = out_dir.join("manyfuncs");
            let status = Command::new("cc")
                .args(["-O1", "-o"])
                .arg(&out)
                .arg(&src)
                .status()
                .expect("running cc");
            assert!(status.success(), "compiling {}", src.display());
            out
        })
        .clone()
}
