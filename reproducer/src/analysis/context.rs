//! Why a node's fault candidates have no function context: without one, level 2 can only
//! move a syscall fault to the Nth call, and a crash, pause or partition fires as soon as it
//! is current. The reasons differ in what to do about them -- a program with no symbols (a
//! JVM, an interpreter, a stripped C program), a production tracerd that traced none of the
//! profile's functions, or functions that simply did not run before the fault -- so the
//! diagnosis names the one that holds, node by node.
use std::path::Path;

use super::binary::function_symbols;
use super::diagnose::Diagnosis;
use super::profile::Profile;
use super::timeline::Timeline;
use crate::model::scenario::Scenario;

/// One note per node that has fault candidates none of which has a function context.
pub fn why_no_functions(
    t: &Timeline,
    d: &Diagnosis,
    scenario: &Scenario,
    profile: Option<&Profile>,
) -> Vec<String> {
    let mut notes = Vec::new();
    for (n, node) in scenario.nodes.iter().enumerate() {
        let mut causes = d.causes().filter(|c| c.node == Some(n)).peekable();
        if causes.peek().is_none() || causes.any(|c| !c.preceding_functions.is_empty()) {
            continue;
        }
        let reason = match profile.map(|p| profiled_functions(p, &node.name)) {
            Some(0) => no_candidates(profile.and_then(|p| p.programs.get(&node.name))),
            _ if !t.functions.iter().any(|(m, _)| *m == Some(n)) => {
                "the dumps hold no function event of the node: production tracerd traced none of its functions (deploy the profile's .functions list as tracerd's `functions`), or none of them ran in the dumps' window".to_string()
            }
            _ => "none of the functions production traced ran between the previous fault and this one".to_string(),
        };
        notes.push(format!(
            "node {}: no function context for its faults, so level 2 only moves syscall faults to the Nth call: {reason}",
            node.name
        ));
    }
    notes
}

/// How many candidate functions the profile measured for node `name` (its own or shared).
fn profiled_functions(p: &Profile, name: &str) -> usize {
    p.functions
        .iter()
        .filter(|f| f.node == name || f.shared_with.iter().any(|s| s == name))
        .count()
}

/// Why the profile had no candidate function in `programs` (what the node ran).
fn no_candidates(programs: Option<&Vec<String>>) -> String {
    let Some(programs) = programs.filter(|p| !p.is_empty()) else {
        return "the profile found no program of the node to take functions from (it runs only wrappers)"
            .to_string();
    };
    let each: Vec<String> = programs
        .iter()
        .map(|p| match function_symbols(Path::new(p)) {
            Ok(s) if s.is_empty() => format!(
                "{p} defines no functions (stripped, and not a Go program: code a runtime compiles as it runs, like a JVM's, has no symbols)"
            ),
            Ok(s) => format!("--functions-from matched none of the {} functions of {p}", s.len()),
            Err(e) => format!("{p}: {e:#}"),
        })
        .collect();
    format!("the profile had no candidate function: {}", each.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnose::{Candidate, FaultGuess, Verdict};
    use crate::analysis::profile::FunctionStat;

    const SCENARIO: &str = "name = \"t\"\n[[nodes]]\nname = \"db\"\ncommand = [\"db\"]\n[[nodes]]\nname = \"web\"\ncommand = [\"web\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";

    fn crash(node: usize, functions: &[&str]) -> Candidate {
        Candidate {
            guess: FaultGuess::Crash {
                signal: "SIGKILL".into(),
                sender: "kill (pid 1)".into(),
            },
            node: Some(node),
            who: String::new(),
            host: String::new(),
            dump: 0,
            pid: 10,
            at_ns: 1,
            occurrences: 1,
            profile_per_s: None,
            burst: 1,
            preceding_functions: functions.iter().map(|f| f.to_string()).collect(),
            routine: false,
            verdict: Verdict::Cause,
            why: String::new(),
            evidence: Default::default(),
            score: Default::default(),
            silence: None,
        }
    }

    fn diagnosis(candidates: Vec<Candidate>) -> Diagnosis {
        Diagnosis {
            candidates,
            symptoms: Vec::new(),
            start_ns: 0,
            end_ns: 2,
            unmapped_events: 0,
            notes: Vec::new(),
            dumps: Vec::new(),
        }
    }

    fn profile(programs: &[(&str, &str)], functions: &[&str]) -> Profile {
        let text = r#"{"format":"reproducer-profile","version":1,"scenario":"t","scenario_nodes":{},
            "runs":1,"run_seconds":[1.0],"infrequent_below_per_s":2.0,"failures":[],"syscalls":[],
            "functions":[],"dropped":{"events":0,"counters":0}}"#;
        let mut p: Profile = serde_json::from_str(text).unwrap();
        for (node, program) in programs {
            p.programs.insert(node.to_string(), vec![program.to_string()]);
        }
        p.functions = functions
            .iter()
            .map(|node| FunctionStat {
                node: node.to_string(),
                shared_with: Vec::new(),
                binary: "/opt/db".into(),
                symbol: "f".into(),
                source_file: None,
                per_run: vec![0],
                per_second: 0.0,
                infrequent: true,
            })
            .collect();
        p
    }

    #[test]
    fn each_reason_is_named_for_the_node_that_lacks_a_context() {
        let sc = Scenario::parse(SCENARIO, "t").unwrap();
        let mut t = Timeline::default();
        let d = diagnosis(vec![crash(0, &[]), crash(1, &["/opt/web:serve"])]);
        // a program with no symbols at all: a data file stands in for a stripped binary
        let blank = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(blank.path(), b"").unwrap();
        let blank_path = blank.path().display().to_string();
        let notes = why_no_functions(&t, &d, &sc, Some(&profile(&[("db", &blank_path)], &[])));
        assert_eq!(notes.len(), 1, "only db lacks a context: {notes:?}");
        assert!(notes[0].starts_with("node db: no function context"), "{notes:?}");
        assert!(notes[0].contains(&blank_path), "{notes:?}");

        // functions were profiled, but production traced none of the node's
        let notes = why_no_functions(&t, &d, &sc, Some(&profile(&[], &["db"])));
        assert!(notes[0].contains("hold no function event"), "{notes:?}");
        // ... or traced some that did not run before the fault
        t.functions.push((Some(0), "/opt/db:f".into()));
        let notes = why_no_functions(&t, &d, &sc, None);
        assert!(
            notes[0].contains("none of the functions production traced ran"),
            "{notes:?}"
        );
        // a node with a context, or with no candidates, gets no note
        let d = diagnosis(vec![crash(1, &["/opt/web:serve"])]);
        assert!(why_no_functions(&t, &d, &sc, None).is_empty());
    }
}
