//! Which scenario node a traced process belongs to. A process is a node's when its pid was
//! launched as that node (test runs know this), when the node's `match` text is in its
//! command line, when its parent is the node's (forked children), or when it runs the node's
//! program and no other node runs that program.
use std::collections::HashMap;
use std::path::Path;

use tracedump::process::ProcInfo;

use crate::model::scenario::Scenario;

#[derive(Clone, Debug, Default)]
pub struct NodeMap {
    by_pid: HashMap<u32, usize>,
    /// processes that ran a program several nodes run, with no `match` to tell them apart
    pub ambiguous: Vec<(u32, String)>,
}

fn file_name(s: &str) -> &str {
    Path::new(s).file_name().and_then(|n| n.to_str()).unwrap_or(s)
}

/// The program a process ran: its exe, else the first word of its command line, else comm.
fn program_of(p: &ProcInfo) -> String {
    let exe = p.exe.as_deref().map(|e| e.trim_end_matches(" (deleted)"));
    let first = p.cmdline.as_ref().and_then(|c| c.first()).map(String::as_str);
    file_name(exe.or(first).unwrap_or(&p.comm)).to_string()
}

impl NodeMap {
    /// Maps the processes of one dump. `launched` lists (node index, pid) pairs known for sure.
    pub fn build(scenario: &Scenario, processes: &[ProcInfo], launched: &[(usize, u32)]) -> NodeMap {
        let mut map = NodeMap::default();
        map.by_pid.extend(launched.iter().map(|&(n, pid)| (pid, n)));
        let by_pid: HashMap<u32, &ProcInfo> = processes.iter().map(|p| (p.pid, p)).collect();
        for p in processes {
            if let Some(n) = map.resolve(scenario, p, &by_pid, 0) {
                map.by_pid.insert(p.pid, n);
            }
        }
        map
    }

    fn resolve(&mut self, scenario: &Scenario, p: &ProcInfo, all: &HashMap<u32, &ProcInfo>, depth: u32) -> Option<usize> {
        if let Some(&n) = self.by_pid.get(&p.pid) {
            return Some(n);
        }
        let cmdline = p.cmdline.as_ref().map(|c| c.join(" ")).unwrap_or_default();
        let by_match = scenario.nodes.iter().position(|n| n.match_.as_deref().is_some_and(|m| !m.is_empty() && cmdline.contains(m)));
        if by_match.is_some() {
            return by_match;
        }
        if depth < 16 && p.ppid != p.pid {
            if let Some(parent) = all.get(&p.ppid) {
                if let Some(n) = self.resolve(scenario, parent, all, depth + 1) {
                    return Some(n);
                }
            }
        }
        let program = program_of(p);
        let same: Vec<usize> = (0..scenario.nodes.len())
            .filter(|&i| scenario.nodes[i].match_.is_none() && file_name(&scenario.nodes[i].command[0]) == program)
            .collect();
        match same.as_slice() {
            [one] => Some(*one),
            [] => None,
            _ => {
                if !self.ambiguous.iter().any(|(pid, _)| *pid == p.pid) {
                    self.ambiguous.push((p.pid, program));
                }
                None
            }
        }
    }

    pub fn node(&self, pid: u32) -> Option<usize> {
        self.by_pid.get(&pid).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.by_pid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: u32, ppid: u32, exe: &str, cmdline: &str) -> ProcInfo {
        ProcInfo {
            pid,
            ppid,
            comm: file_name(exe).chars().take(15).collect(),
            exe: Some(exe.into()),
            cmdline: Some(cmdline.split(' ').map(String::from).collect()),
            ..Default::default()
        }
    }

    const SCENARIO: &str = r#"
name = "m"
[[nodes]]
name = "a"
command = ["kvnode", "--id", "1"]
match = "--id 1"
[[nodes]]
name = "b"
command = ["kvnode", "--id", "2"]
match = "--id 2"
[[nodes]]
name = "cache"
command = ["/usr/bin/redis-server", "--port", "1"]
[workload]
command = ["true"]
[oracle]
command = ["true"]
"#;

    #[test]
    fn maps_by_match_parent_and_program() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let procs = vec![
            proc(10, 1, "/opt/kv/kvnode", "/opt/kv/kvnode --id 2 --dir /var/x"),
            proc(11, 10, "/opt/kv/kvnode", "kvnode-snapshotter"),
            proc(12, 1, "/usr/sbin/redis-server", "redis-server *:6379"),
            proc(13, 1, "/usr/bin/python3", "python3 load.py"),
            proc(14, 1, "/opt/kv/kvnode", "/opt/kv/kvnode --other"),
        ];
        let m = NodeMap::build(&s, &procs, &[]);
        assert_eq!(m.node(10), Some(1));
        assert_eq!(m.node(11), Some(1), "a forked child belongs to its parent's node");
        assert_eq!(m.node(12), Some(2), "same program file name, other directory");
        assert_eq!(m.node(13), None);
        assert_eq!(m.node(14), None, "kvnode without --id: the nodes that run it have match");
        let m = NodeMap::build(&s, &procs, &[(0, 13)]);
        assert_eq!(m.node(13), Some(0), "launched pids win");
    }

    #[test]
    fn reports_ambiguous_programs() {
        let s = Scenario::parse(&SCENARIO.replace("match = \"--id 1\"\n", "").replace("match = \"--id 2\"\n", ""), "t").unwrap();
        let m = NodeMap::build(&s, &[proc(10, 1, "/opt/kvnode", "kvnode --id 1")], &[]);
        assert_eq!(m.node(10), None);
        assert_eq!(m.ambiguous, vec![(10, "kvnode".to_string())]);
    }
}
