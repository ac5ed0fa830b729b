//! Test fixtures: a two-node scenario, candidate functions of its binary, and synthetic
//! runs to aggregate.
use super::{Candidate, Dropped, FailureKey, RunData};

pub(super) const SCENARIO: &str = "name = \"kv\"\n[[nodes]]\nname = \"db1\"\ncommand = [\"kvnode\", \"1\"]\n\
    [[nodes]]\nname = \"db2\"\ncommand = [\"kvnode\", \"2\"]\n[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n";

pub(super) fn candidate(symbol: &str) -> Candidate {
    Candidate {
        nodes: vec!["db1".into(), "db2".into()],
        node_index: 0,
        binary: "/opt/kvnode".into(),
        symbol: symbol.into(),
        source_file: Some("kvnode.c".into()),
    }
}

pub(super) fn run(seconds: f64, enoent: u64, writes: u64, snapshot: u64, loop_calls: u64) -> RunData {
    let mut r = RunData {
        seconds,
        ..Default::default()
    };
    let key = FailureKey {
        node: "db1".into(),
        syscall: "openat".into(),
        errno: "ENOENT".into(),
        path: Some("*/optional.conf".into()),
    };
    r.failures.insert(key, enoent);
    r.syscalls.insert(("db1".into(), "write".into()), writes);
    r.function_calls
        .insert(("/opt/kvnode".into(), "store_snapshot".into()), snapshot);
    r.function_calls
        .insert(("/opt/kvnode".into(), "event_loop".into()), loop_calls);
    r.unattached.insert(("/opt/kvnode".into(), "ambiguous".into()));
    r.dropped = Dropped {
        events: 1,
        counters: 2,
    };
    r.unmapped_events = 3;
    r
}
