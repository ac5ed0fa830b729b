//! Runs side by side: two runs of one networked scenario at once, each on its own network;
//! runs on the host's network wait for each other.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use crate::replay::*;

/// Starts `reproducer run --keep` of `sc` with `schedule`, output piped.
fn spawn_run(sc: &Path, schedule: Option<&Path>) -> std::process::Child {
    let mut cmd = reproducer_cmd();
    cmd.args(["run", "--keep", "--scenario", sc.to_str().unwrap()]);
    if let Some(s) = schedule {
        cmd.args(["--schedule", s.to_str().unwrap()]);
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting reproducer run")
}

/// Kills the runs still going (on a failed assertion) so that nothing outlives the test.
struct Runs(Vec<std::process::Child>);

impl Drop for Runs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SIGINT: the run tears down what it made
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let _ = c.wait();
        }
    }
}

fn wait_all(runs: &mut Runs) -> Vec<(bool, String)> {
    std::mem::take(&mut runs.0)
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            (out.status.success(), text(&out))
        })
        .collect()
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn two_runs_of_one_networked_scenario_go_side_by_side() {
    require_root();
    // the same addresses in both runs: each run has its own run namespace with its bridge,
    // where the workload and oracle run (the oracle connects to the server's address); the
    // partition filter sits on each run's own veth
    let scenario = format!(
        r#"name = "side-by-side"
run_timeout_s = 30
[[nodes]]
name = "server"
command = ["FAULTY", "serve", "7000"]
address = "10.219.2.11"
ready = ["sh", "-c", "grep -q listening {{workdir}}/server.log"]
[[nodes]]
name = "client"
command = ["FAULTY", "ping", "{{node.server.address}}", "7000", "5000"]
address = "10.219.2.12"
[workload]
command = {}
[oracle]
command = ["bash", "-c", "w=$(sed -n 's/worst rtt \\([0-9]*\\) ms/\\1/p' {{workdir}}/client.log); [ \"$w\" -ge 1500 ] && exec 3<>/dev/tcp/10.219.2.11/7000"]
"#,
        wait_for("client", "worst rtt")
    );
    let schedule = "[[faults]]\nnode = \"client\"\nkind = \"partition\"\npeers = [\"server\"]\nduration_ms = 2000\nafter_functions = [\"stage_c\"]\n";
    let links = own_links();
    let (_d, sc, sch) = files(&scenario, schedule);
    let mut runs = Runs(vec![spawn_run(&sc, Some(&sch)), spawn_run(&sc, Some(&sch))]);
    // each run lasts 5 s: after 2 s both are still going, each on its own network
    std::thread::sleep(Duration::from_secs(2));
    for c in &mut runs.0 {
        assert!(c.try_wait().unwrap().is_none(), "a run ended early");
    }
    let results = wait_all(&mut runs);
    let mut workdirs = Vec::new();
    for (ok, t) in &results {
        assert!(ok, "{t}");
        assert!(
            t.contains("bug: yes") && t.contains("fault 1 partition on client"),
            "{t}"
        );
        let workdir = t
            .lines()
            .find_map(|l| l.strip_prefix("run directory: "))
            .map(PathBuf::from)
            .expect("run directory printed");
        workdirs.push(workdir);
    }
    assert_ne!(workdirs[0], workdirs[1]);
    assert_clean(&links);
    for w in workdirs {
        let _ = std::fs::remove_dir_all(w);
    }
}

#[test]
#[ignore = "system test: needs root (loads BPF programs, creates namespaces); scripts/test runs it"]
fn runs_on_the_host_network_wait_for_each_other() {
    require_root();
    // no address: the node listens on the host's port 7391; a second run at the same time
    // could not bind it, so the second waits for the first
    let scenario = "name = \"host-net\"\nrun_timeout_s = 20\n[[nodes]]\nname = \"a\"\ncommand = [\"FAULTY\", \"serve\", \"7391\"]\nready = [\"sh\", \"-c\", \"grep -q listening {workdir}/a.log\"]\n[workload]\ncommand = [\"sleep\", \"1\"]\n[oracle]\ncommand = [\"false\"]\n";
    let links = own_links();
    let (_d, sc, _) = files(scenario, "");
    let mut runs = Runs(vec![spawn_run(&sc, None), spawn_run(&sc, None)]);
    let results = wait_all(&mut runs);
    for (ok, t) in &results {
        assert!(ok, "{t}");
        assert!(t.contains("bug: no"), "{t}");
        if let Some(w) = t.lines().find_map(|l| l.strip_prefix("run directory: ")) {
            let _ = std::fs::remove_dir_all(w);
        }
    }
    assert_clean(&links);
}
