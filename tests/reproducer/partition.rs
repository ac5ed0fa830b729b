//! A network partition between two nodes, each with its own address in its own network
//! namespace: the connection goes silent for the partition and recovers after it.

use crate::replay::*;

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn partitions_two_nodes_for_three_seconds() {
    let scenario = format!(
        r#"name = "partition"
run_timeout_s = 30
[[nodes]]
name = "server"
command = ["FAULTY", "serve", "7000"]
address = "10.219.0.11"
ready = ["sh", "-c", "grep -q listening {{workdir}}/server.log"]
[[nodes]]
name = "client"
command = ["FAULTY", "ping", "{{node.server.address}}", "7000", "6000"]
address = "10.219.0.12"
[workload]
command = {}
[oracle]
command = ["sh", "-c", "w=$(sed -n 's/worst rtt \\([0-9]*\\) ms/\\1/p' {{workdir}}/client.log); [ \"$w\" -ge 2500 ]"]
"#,
        wait_for("client", "worst rtt")
    );
    // after the connect: a partition before it would only delay the handshake
    let schedule = "[[faults]]\nnode = \"client\"\nkind = \"partition\"\npeers = [\"server\"]\nduration_ms = 3000\nafter_functions = [\"stage_c\"]\n";
    let (out, workdir) = replay_and_keep(&scenario, schedule);
    assert!(
        out.contains("fault 1 partition on client") && out.contains("at stage_c"),
        "{out}"
    );
    let client = log(&workdir, "client");
    assert!(
        client.contains("worst rtt"),
        "the connection recovered after the partition: {client}"
    );
    let gap = trace_events(&workdir)
        .into_iter()
        .any(|e| e["kind"] == "network_gap" && e["duration_ms"].as_u64().unwrap_or(0) >= 2500);
    assert!(gap, "the trace shows the silence");
    let _ = std::fs::remove_dir_all(&workdir);
}
