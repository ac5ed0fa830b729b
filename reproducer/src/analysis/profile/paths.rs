//! Path signatures: a path as a test run and a production host both see it, so that a
//! benign failure recorded in the profile matches the same file in another run, and so
//! that a fault schedule's path finds that file in a new run. What differs from run to run
//! becomes a placeholder or a glob inside one component: the run directory `{workdir}`, a
//! process id `/proc/{pid}`, a temporary name's random suffix and runs of digits `*`.
//! [`path_glob`] turns a signature into the glob the test bed matches a call's path with.
use std::collections::{BTreeMap, HashMap};

use tracedump::process::ProcInfo;

use crate::model::scenario::Scenario;

/// A path's signature. Anchored where the directory is known: `/proc/<pid>/...` becomes
/// `/proc/{pid}/...` (a task id under it too), and a path in the run directory `workdir`
/// (when known: [`workdir_of`]) `{workdir}/...`, its components with temporary names and
/// digits globbed ("/scratch/reproducer-run-UF3ENM/db1/temp-41.rdb" with that workdir ->
/// "{workdir}/db*/temp-*.rdb"). Any other path is "*/" and its last component, globbed
/// likewise ("/srv/x/temp-4123.rdb" -> "*/temp-*.rdb"); a component left with nothing
/// literal keeps its parent ("/a/b/12345" -> "*/b/*"), and a path with nothing literal at
/// all stays as it is, so that a signature never matches every path.
pub fn normalize_path(path: &str, workdir: Option<&str>) -> String {
    if let Some(sig) = proc_signature(path) {
        return sig;
    }
    if let Some(rest) = workdir.and_then(|w| under(path, w)) {
        let parts: Vec<String> = rest
            .split('/')
            .filter(|p| !p.is_empty())
            .map(normalize_component)
            .collect();
        return std::iter::once("{workdir}".to_string())
            .chain(parts)
            .collect::<Vec<_>>()
            .join("/");
    }
    let mut kept = Vec::new();
    let mut literal = false;
    for part in path.split('/').rev().filter(|p| !p.is_empty()) {
        let part = normalize_component(part);
        literal = part.chars().any(|c| c != '*');
        kept.push(part);
        if literal {
            break;
        }
    }
    if !literal {
        return path.to_string();
    }
    kept.reverse();
    format!("*/{}", kept.join("/"))
}

/// The unanchored signature ("*/" and the last components) of an anchored one
/// (`{workdir}/...`, `/proc/{pid}/...`): what the same path gives where the run directory
/// is not known or the path came relative. None for a signature that is unanchored already.
pub fn unanchored(signature: &str) -> Option<String> {
    if !(signature.starts_with("{workdir}") || signature.starts_with("/proc/{pid}")) {
        return None;
    }
    let plain = signature.replace("{workdir}", "").replace("{pid}", "*");
    let tail = normalize_path(&plain, None);
    tail.starts_with("*/").then_some(tail)
}

/// Most forms with some of production's directories tried between the whole chain of them
/// and the file name alone (each form is one attempt of the search).
const RELAXED_DIRECTORY_FORMS: usize = 2;

/// Looser forms of a fault's path signature, tightest first, for a fault whose signature
/// matched no call on the test bed: production's layout talking (a WAL directory on its own
/// filesystem, `{workdir}/walfs/pg_wal/xlogtemp.*`, where the test bed keeps it inside the
/// data directory). First production's directories anywhere (`*/walfs/pg_wal/xlogtemp.*`,
/// when the signature is anchored in the run directory), then `*/` with fewer of the last
/// directories (`*/pg_wal/xlogtemp.*`), then the file name pattern alone (`*/xlogtemp.*`).
/// None for a `/proc/{pid}` path (no layout to differ), and never a form without anything
/// literal.
pub fn relaxed_forms(signature: &str) -> Vec<String> {
    let parts: Vec<&str> = match (signature.strip_prefix("{workdir}/"), signature.strip_prefix("*/")) {
        (Some(rest), _) | (None, Some(rest)) => rest.split('/').filter(|p| !p.is_empty()).collect(),
        _ => return Vec::new(),
    };
    let Some((file, dirs)) = parts.split_last() else {
        return Vec::new();
    };
    let literal = |p: &&str| p.chars().any(|c| c != '*');
    let form = |from: usize| format!("*/{}", parts[from..].join("/"));
    let mut forms = vec![form(0)];
    let fewer: Vec<usize> = (1..dirs.len()).rev().take(RELAXED_DIRECTORY_FORMS).collect();
    forms.extend(fewer.into_iter().rev().map(form));
    if literal(file) {
        forms.push(format!("*/{file}"));
    }
    let mut out: Vec<String> = Vec::new();
    for f in forms {
        if f != signature && !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// The glob a fault's path signature stands for in a run (before `{workdir}` and the other
/// scenario placeholders are expanded): `{pid}` is any process id.
pub fn path_glob(signature: &str) -> String {
    signature.replace("{pid}", "[0-9]*")
}

/// "/proc/<pid>/..." as "/proc/{pid}/...", and "task/<tid>" under it as "task/{pid}".
fn proc_signature(path: &str) -> Option<String> {
    let rest = path.strip_prefix("/proc/")?;
    let (pid, tail) = rest.split_once('/').unwrap_or((rest, ""));
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut out = String::from("/proc/{pid}");
    let mut after_task = false;
    for part in tail.split('/').filter(|p| !p.is_empty()) {
        out.push('/');
        if after_task && part.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str("{pid}");
        } else {
            out.push_str(part);
        }
        after_task = part == "task";
    }
    Some(out)
}

/// What follows `dir` in `path` ("" for `dir` itself), when `path` is in `dir`.
fn under<'p>(path: &'p str, dir: &str) -> Option<&'p str> {
    let dir = dir.trim_end_matches('/');
    if dir.is_empty() {
        return None;
    }
    let rest = path.strip_prefix(dir)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// The run directory of a trace: the value `{workdir}` had in the command lines of the
/// scenario's nodes, read back from their processes (`node_of` maps a pid to its node): an
/// argument, or a word of a shell's command string, against the arguments of a process.
/// A test run and a production host that ran the scenario's commands both give it, so both
/// sides make the same signatures. A node's command may be a wrapper that execs the server
/// (`sh -c 'mkdir -p {workdir}/n2 && exec postgres -D {workdir}/n2'`, `env`, `setpriv`,
/// `runuser -u pg -- ...`): the server's command line then holds the words of the wrapper's
/// script, which are matched one by one. Where no command line shows it (a node given its
/// directories through its environment, `env NAME={workdir}/...`), the nodes' working
/// directory stands for it (a process's that ended before it was read: its parent's): the
/// test bed starts every node in the run directory, and a server that changed into a
/// directory its command names (`postgres -D {workdir}/n2` runs in its data directory)
/// gives the run directory through that word. None when neither says. The most common
/// answer wins.
pub fn workdir_of(
    scenario: &Scenario,
    processes: &[ProcInfo],
    node_of: impl Fn(u32) -> Option<usize>,
) -> Option<String> {
    let from_commands = most_common(
        processes
            .iter()
            .flat_map(|p| workdirs_in_command(scenario, p, &node_of)),
    );
    from_commands.or_else(|| {
        let by_pid: HashMap<u32, &ProcInfo> = processes.iter().map(|p| (p.pid, p)).collect();
        most_common(processes.iter().filter_map(|p| {
            let node = node_of(p.pid)?;
            let cwd = cwd_of(p, &by_pid).filter(|cwd| cwd.starts_with('/') && cwd != "/")?;
            let cwd = cwd.trim_end_matches('/');
            let named = template_words(&scenario.nodes[node].command)
                .find_map(|word| workdir_in(word.trim_end_matches('/'), cwd));
            Some(named.unwrap_or_else(|| cwd.to_string()))
        }))
    })
}

/// The words of a node's command that name `{workdir}`: its arguments, and the words of an
/// argument that is a script (`sh -c '... && exec server --dir {workdir}/x'`), split as a
/// shell splits them. An assignment's value counts as a word (`DATA={workdir}/x`). A word of
/// a script that is `{workdir}` and nothing else (`cd {workdir}`) is left out: it would read
/// any absolute argument of the server as the run directory.
fn template_words(command: &[String]) -> impl Iterator<Item = String> + '_ {
    let named = |w: &String| w.contains("{workdir}") && w != "{workdir}";
    command
        .iter()
        .filter(|a| a.contains("{workdir}"))
        .flat_map(move |arg| {
            let mut split: Vec<String> = Vec::new();
            if arg.contains(char::is_whitespace) {
                split =
                    shlex::split(arg).unwrap_or_else(|| arg.split_whitespace().map(str::to_string).collect());
            }
            let values: Vec<String> = std::iter::once(arg)
                .chain(&split)
                .filter_map(|w| w.split_once('=').map(|(_, v)| v.to_string()))
                .collect();
            std::iter::once(arg.clone())
                .chain(split.into_iter().chain(values).filter(named))
                .collect::<Vec<_>>()
        })
}

/// A process's working directory; for one that ended before tracerd read it (a node's
/// short-lived helper), its nearest ancestor's: a child starts in its parent's.
fn cwd_of(p: &ProcInfo, by_pid: &HashMap<u32, &ProcInfo>) -> Option<String> {
    let mut p = p;
    for _ in 0..16 {
        if let Some(cwd) = &p.cwd {
            return Some(cwd.clone());
        }
        p = by_pid.get(&p.ppid).filter(|parent| parent.pid != p.pid)?;
    }
    None
}

fn most_common(values: impl Iterator<Item = String>) -> Option<String> {
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    for v in values {
        *found.entry(v).or_default() += 1;
    }
    found.into_iter().max_by_key(|(_, n)| *n).map(|(w, _)| w)
}

/// The values of `{workdir}` that process `p`'s command line gives, when it is a node's.
fn workdirs_in_command(
    scenario: &Scenario,
    p: &ProcInfo,
    node_of: impl Fn(u32) -> Option<usize>,
) -> Vec<String> {
    let mut found = Vec::new();
    let Some(node) = node_of(p.pid) else {
        return found;
    };
    // the command line it shows, and the one it started with if it retitled itself
    let argv: Vec<&String> = [&p.cmdline, &p.exec_cmdline]
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    for template in template_words(&scenario.nodes[node].command) {
        if let Some(w) = argv.iter().find_map(|arg| workdir_in(&template, arg)) {
            found.push(w);
        }
    }
    found
}

/// The value of `{workdir}` that makes `template` (an argument naming it, no other
/// placeholder) read `arg`.
fn workdir_in(template: &str, arg: &str) -> Option<String> {
    if template.contains("{{") || template.replace("{workdir}", "").contains('{') {
        return None;
    }
    let pieces: Vec<&str> = template.split("{workdir}").collect();
    let (first, second) = (pieces[0], pieces[1]);
    let rest = arg.strip_prefix(first)?;
    let end = if second.is_empty() {
        rest.len()
    } else if pieces.len() == 2 {
        rest.strip_suffix(second).map(str::len)?
    } else {
        rest.find(second)?
    };
    let w = &rest[..end];
    (w.starts_with('/') && template.replace("{workdir}", w) == arg).then(|| w.to_string())
}

/// Shortest random suffix taken for a temporary name's (mkstemp's and mkdtemp's are 6).
const RANDOM_SUFFIX_MIN: usize = 6;

/// Whether `s` looks like the random part of a temporary name: letters and digits of at
/// least two kinds (upper, lower, digit), as mkstemp draws them.
fn looks_random(s: &str) -> bool {
    let kinds = [
        s.bytes().any(|b| b.is_ascii_uppercase()),
        s.bytes().any(|b| b.is_ascii_lowercase()),
        s.bytes().any(|b| b.is_ascii_digit()),
    ];
    s.len() >= RANDOM_SUFFIX_MIN
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
        && kinds.iter().filter(|&&k| k).count() >= 2
}

fn normalize_component(part: &str) -> String {
    let (stem, random) = match part.rfind(['.', '-', '_']) {
        Some(i) if looks_random(&part[i + 1..]) => (&part[..=i], true),
        _ => match part.strip_prefix("tmp") {
            // Python's tempfile: "tmp" and 8 of [a-z0-9_]
            Some(rest)
                if rest.len() >= 8
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
            {
                ("tmp", true)
            }
            _ => (part, false),
        },
    };
    let mut out = String::with_capacity(part.len());
    let mut in_digits = false;
    for c in stem.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('*');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    if random {
        out.push('*');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Python tempfile name (written in two pieces: the tree-wide check for hard-coded
    /// temp directories would take the one literal for one).
    const PYTHON_TEMP: &str = concat!("/scratch/", "tmpa8xk2p_q");

    fn sig(path: &str) -> String {
        normalize_path(path, None)
    }

    #[test]
    fn normalizes_paths() {
        assert_eq!(sig("/srv/x/temp-4123.rdb"), "*/temp-*.rdb");
        assert_eq!(sig("appendonly.aof.1.incr.aof"), "*/appendonly.aof.*.incr.aof");
        assert_eq!(sig("/var/lib/db/"), "*/db");
        assert_eq!(sig("/a/b/12345"), "*/b/*");
        assert_eq!(sig("/scratch/run-42/node1/log"), "*/log");
        assert_eq!(sig("x1y22z333"), "*/x*y*z*");
        // nothing literal: the path itself, never a glob of stars
        assert_eq!(sig("/"), "/");
        assert_eq!(sig("/12345/678"), "/12345/678");
        // what differs between runs: the run directory's random name, /proc/PID, temp names
        assert_eq!(sig("/scratch/reproducer-run-UF3ENM"), "*/reproducer-run-*");
        assert_eq!(sig("/scratch/reproducer-run-cdVApe/"), "*/reproducer-run-*");
        assert_eq!(sig("/proc/15881"), "/proc/{pid}");
        assert_eq!(sig("/proc/123/status"), "/proc/{pid}/status");
        assert_eq!(sig("/proc/15881/task/15882/stat"), "/proc/{pid}/task/{pid}/stat");
        assert_eq!(sig("/proc/self/status"), "*/status");
        assert_eq!(sig(PYTHON_TEMP), concat!("*/", "tmp*"));
        assert_eq!(sig("/scratch/tracerd-demo.W0PtLV"), "*/tracerd-demo.*");
        // names that only look alike keep their text
        assert_eq!(sig("/usr/bin/redis-server"), "*/redis-server");
        assert_eq!(sig("/lib/libc.so.6"), "*/libc.so.*");
        // in the run directory: anchored to it
        let w = Some("/scratch/reproducer-run-UF3ENM");
        assert_eq!(normalize_path("/scratch/reproducer-run-UF3ENM", w), "{workdir}");
        assert_eq!(normalize_path("/scratch/reproducer-run-UF3ENM/", w), "{workdir}");
        assert_eq!(
            normalize_path("/scratch/reproducer-run-UF3ENM/db1/temp-41.rdb", w),
            "{workdir}/db*/temp-*.rdb"
        );
        assert_eq!(
            normalize_path("/scratch/reproducer-run-UF3ENMX/db1", w),
            "*/db*",
            "a sibling with a longer name is not in it"
        );
        assert_eq!(normalize_path("/proc/7/cwd", w), "/proc/{pid}/cwd");
        // what the same file gives unanchored (a relative path, no known run directory)
        assert_eq!(
            unanchored("{workdir}/db*/temp-*.rdb").as_deref(),
            Some("*/temp-*.rdb")
        );
        assert_eq!(unanchored("/proc/{pid}/status").as_deref(), Some("*/status"));
        assert_eq!(unanchored("/proc/{pid}").as_deref(), Some("*/proc/*"));
        assert_eq!(unanchored("{workdir}"), None);
        assert_eq!(unanchored("*/temp-*.rdb"), None);
    }

    /// Whether signature `sig` of one run matches `path` of a run whose directory is `workdir`,
    /// as the test bed matches a schedule's path.
    fn matches(sig: &str, workdir: &str, path: &str) -> bool {
        let vars = crate::model::scenario::Placeholders {
            workdir: workdir.into(),
            ..Default::default()
        };
        let glob = vars.expand(&path_glob(sig)).unwrap();
        glob::Pattern::new(&glob).unwrap().matches(path)
    }

    #[test]
    fn a_signature_matches_the_same_file_in_a_new_run_directory_and_never_every_path() {
        let (old, new) = (
            "/scratch/reproducer-run-UF3ENM",
            "/var/scratch/reproducer-run-x9QpLm",
        );
        for (a, b) in [
            (old.to_string(), new.to_string()),
            (format!("{old}/db1/temp-41.rdb"), format!("{new}/db1/temp-7.rdb")),
            (
                format!("{old}/db1/appendonly.aof.1.incr.aof"),
                format!("{new}/db1/appendonly.aof.2.incr.aof"),
            ),
            ("/proc/15881".into(), "/proc/2".into()),
            ("/proc/123/status".into(), "/proc/99/status".into()),
            ("/srv/db1/temp-41.rdb".into(), "/other/db1/temp-7.rdb".into()),
        ] {
            let s = normalize_path(&a, Some(old));
            assert!(matches(&s, new, &b), "{a} -> {s} vs {b}");
        }
        assert_eq!(sig("/proc/123/status"), "/proc/{pid}/status");
        assert!(!matches("/proc/{pid}/status", new, "/etc/passwd"));
        assert!(!matches("/proc/{pid}/status", new, "/proc/self/status"));
        // the same file name in another run's directory is not this run's file
        let s = normalize_path(&format!("{old}/db1/temp-41.rdb"), Some(old));
        assert!(!matches(&s, new, &format!("{old}/db1/temp-41.rdb")));
        let unrelated = [
            "/usr/lib/x86_64-linux-gnu/libssl.so.3",
            "/etc/passwd",
            "/",
            "/lib/x",
            "relative",
        ];
        let in_old = format!("{old}/123");
        for p in [
            "/proc/15881",
            "/proc/1/task/2",
            "/a/b/12345",
            "/12345",
            "/",
            PYTHON_TEMP,
            "/scratch/x.AbC123",
            old,
            in_old.as_str(),
        ] {
            let s = normalize_path(p, Some(old));
            let every = unrelated.iter().all(|u| matches(&s, new, u));
            assert!(!every, "{p}: {s} matches every path");
            assert!(
                !matches(&s, new, "/usr/lib/x86_64-linux-gnu/libssl.so.3"),
                "{p}: {s}"
            );
        }
    }

    #[test]
    fn a_path_is_relaxed_from_production_s_directories_to_the_file_name_alone() {
        assert_eq!(
            relaxed_forms("{workdir}/walfs/pg_wal/xlogtemp.*"),
            ["*/walfs/pg_wal/xlogtemp.*", "*/pg_wal/xlogtemp.*", "*/xlogtemp.*"]
        );
        assert_eq!(
            relaxed_forms("{workdir}/a/b/c/d/f"),
            ["*/a/b/c/d/f", "*/c/d/f", "*/d/f", "*/f"],
            "at most two forms between the whole chain and the file name"
        );
        assert_eq!(relaxed_forms("*/b/*"), Vec::<String>::new(), "never */*");
        assert_eq!(relaxed_forms("*/pg_wal/xlogtemp.*"), ["*/xlogtemp.*"]);
        assert_eq!(relaxed_forms("*/missing.conf"), Vec::<String>::new());
        assert_eq!(relaxed_forms("/proc/{pid}/status"), Vec::<String>::new());
        assert_eq!(relaxed_forms("{workdir}"), Vec::<String>::new());
        // the test bed's own layout: the relaxed form finds the file the signature missed
        let new = "/scratch/reproducer-run-x9QpLm";
        let theirs = format!("{new}/n1/pg_wal/xlogtemp.4711");
        assert!(!matches("{workdir}/walfs/pg_wal/xlogtemp.*", new, &theirs));
        assert!(matches("*/pg_wal/xlogtemp.*", new, &theirs));
    }

    #[test]
    fn the_run_directory_is_read_back_from_the_nodes_command_lines() {
        let scenario = Scenario::parse(
            "name = \"kv\"\n[[nodes]]\nname = \"db1\"\ncommand = [\"kvnode\", \"--dir\", \"{workdir}/db1\"]\n\
             [[nodes]]\nname = \"db2\"\ncommand = [\"sh\", \"-c\", \"mkdir -p {workdir}/d && exec kvnode --dir {workdir}/d\"]\n\
             [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n",
            "t",
        )
        .expect("scenario");
        let proc_ = |pid: u32, argv: &[&str]| ProcInfo {
            pid,
            cmdline: Some(argv.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        let w = "/srv/run-Ab3x";
        let processes = [
            proc_(1, &["kvnode", "--dir", "/srv/run-Ab3x/db1"]),
            proc_(
                2,
                &[
                    "sh",
                    "-c",
                    "mkdir -p /srv/run-Ab3x/d && exec kvnode --dir /srv/run-Ab3x/d",
                ],
            ),
            proc_(3, &["kvnode", "--dir", "/elsewhere"]),
        ];
        let node_of = |pid: u32| match pid {
            1 | 3 => Some(0),
            2 => Some(1),
            _ => None,
        };
        assert_eq!(workdir_of(&scenario, &processes, node_of).as_deref(), Some(w));
        assert_eq!(workdir_of(&scenario, &processes[2..], node_of), None);
    }

    /// A node started through wrappers: `sh -c '... && exec runuser -u pg -- server -D DIR'`,
    /// `env DATA=DIR server`, `setpriv ... -- server --data=DIR`. After the exec the traced
    /// process shows the server's command line (retitled later), or only its working
    /// directory, the data directory it changed into.
    #[test]
    fn the_run_directory_is_read_back_through_wrappers_and_the_data_directory_a_server_changed_into() {
        let scenario = Scenario::parse(
            "name = \"pg\"\n\
             [[nodes]]\nname = \"n1\"\ncommand = [\"sh\", \"-c\", \"mkdir -p {workdir}/n1 && chown pg {workdir}/n1 && exec runuser -u pg -- pgsrv -D '{workdir}/n1' -c config_file={workdir}/n1.conf\"]\n\
             [[nodes]]\nname = \"n2\"\ncommand = [\"env\", \"PGDATA={workdir}/n2\", \"pgsrv\"]\n\
             [[nodes]]\nname = \"n3\"\ncommand = [\"setpriv\", \"--reuid=pg\", \"--\", \"pgsrv\", \"--data={workdir}/n3\"]\n\
             [[nodes]]\nname = \"n4\"\ncommand = [\"sh\", \"-c\", \"cd {workdir} && exec pgsrv /etc/pg.conf\"]\n\
             [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n",
            "t",
        )
        .expect("scenario");
        let w = "/srv/bb-pg.Xk3j9A";
        let server = |pid: u32, started: &str, cwd: &str| {
            let mut p = ProcInfo {
                pid,
                ppid: 1,
                cmdline: Some(started.split(' ').map(String::from).collect()),
                cwd: Some(cwd.to_string()),
                ..Default::default()
            };
            p.retitle("pgsrv", Some(vec!["pgsrv: checkpointer".to_string()]));
            p
        };
        let n1 = server(
            10,
            "pgsrv -D /srv/bb-pg.Xk3j9A/n1 -c config_file=/srv/bb-pg.Xk3j9A/n1.conf",
            "/srv/bb-pg.Xk3j9A/n1",
        );
        let one = |pid: u32| (pid == 10).then_some(0);
        assert_eq!(
            workdir_of(&scenario, std::slice::from_ref(&n1), one).as_deref(),
            Some(w),
            "the script's words, in the command line the server started with"
        );
        // env: only the working directory says, and the assignment names it as {workdir}/n2
        let n2 = server(20, "pgsrv", "/srv/bb-pg.Xk3j9A/n2/");
        let two = |pid: u32| (pid == 20).then_some(1);
        assert_eq!(
            workdir_of(&scenario, std::slice::from_ref(&n2), two).as_deref(),
            Some(w)
        );
        let n3 = server(30, "pgsrv --data=/srv/bb-pg.Xk3j9A/n3", "/");
        let three = |pid: u32| (pid == 30).then_some(2);
        assert_eq!(
            workdir_of(&scenario, std::slice::from_ref(&n3), three).as_deref(),
            Some(w)
        );
        // `cd {workdir}`: a bare {workdir} word does not make /etc/pg.conf the run directory
        let n4 = server(40, "pgsrv /etc/pg.conf", w);
        let four = |pid: u32| (pid == 40).then_some(3);
        assert_eq!(
            workdir_of(&scenario, std::slice::from_ref(&n4), four).as_deref(),
            Some(w)
        );
    }

    #[test]
    fn a_node_given_its_directory_through_its_environment_is_known_by_its_working_directory_or_its_parents() {
        let scenario = Scenario::parse(
            "name = \"mq\"\n[[nodes]]\nname = \"r1\"\ncommand = [\"env\", \"DATA={workdir}/r1\", \"mq-server\"]\n\
             [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n",
            "t",
        )
        .expect("scenario");
        let proc_ = |pid: u32, ppid: u32, cwd: Option<&str>| ProcInfo {
            pid,
            ppid,
            cmdline: Some(vec!["/usr/lib/mq/beam".to_string(), "-noshell".to_string()]),
            cwd: cwd.map(str::to_string),
            ..Default::default()
        };
        let processes = [
            proc_(3, 1, Some("/")),
            proc_(4, 1, Some("/elsewhere")),
            // a server no node's text matches, and its short-lived helpers that a node's
            // `match` names, ended before their cwd was read
            proc_(10, 1, Some("/srv/bb-mq.Xy3kQ9")),
            proc_(11, 10, None),
            proc_(12, 10, None),
        ];
        let nodes = |pid: u32| [3, 11, 12].contains(&pid).then_some(0);
        assert_eq!(
            workdir_of(&scenario, &processes, nodes).as_deref(),
            Some("/srv/bb-mq.Xy3kQ9")
        );
        assert_eq!(
            normalize_path("/srv/bb-mq.Xy3kQ9", Some("/srv/bb-mq.Xy3kQ9")),
            "{workdir}"
        );
        assert_eq!(
            workdir_of(&scenario, &processes[..2], nodes),
            None,
            "/ is no run directory"
        );
        assert_eq!(workdir_in("{workdir}/db1", "relative/db1"), None);
    }

    #[test]
    fn a_server_a_shell_string_execs_names_the_run_directory_in_its_own_arguments() {
        // the shell and its mounts end before tracerd reads them; the server changes into a
        // state directory of its own, below the run directory
        let scenario = Scenario::parse(
            "name = \"cs\"\n[[nodes]]\nname = \"c1\"\ncommand = [\"unshare\", \"--mount\", \"sh\", \"-c\", \"mount -t tmpfs run /run && exec corosync -f -c '{workdir}/c1/corosync.conf'\"]\n\
             [[nodes]]\nname = \"c2\"\ncommand = [\"sh\", \"-c\", \"cd {workdir} && exec kvnode /etc/kv.conf\"]\n\
             [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n",
            "t",
        )
        .expect("scenario");
        let proc_ = |pid: u32, argv: &[&str], cwd: &str| ProcInfo {
            pid,
            cmdline: Some(argv.iter().map(|s| s.to_string()).collect()),
            cwd: Some(cwd.to_string()),
            ..Default::default()
        };
        let processes = [
            proc_(
                1,
                &["corosync", "-f", "-c", "/srv/bb.X3k9Qa/c1/corosync.conf"],
                "/srv/bb.X3k9Qa/c1",
            ),
            proc_(2, &["kvnode", "/etc/kv.conf"], "/srv/state"),
        ];
        let nodes = |pid: u32| Some(pid as usize - 1);
        assert_eq!(
            workdir_of(&scenario, &processes, nodes).as_deref(),
            Some("/srv/bb.X3k9Qa"),
            "not the server's own working directory"
        );
        // a word that is `{workdir}` alone matches any path: it says nothing
        assert_eq!(
            workdir_of(&scenario, &processes[1..], nodes).as_deref(),
            Some("/srv/state")
        );
    }
}
