//! Which scenario node a traced process belongs to. A process is a node's when its pid was
//! launched as that node (test runs know this), when the node's `match` text is in its
//! command line, when its parent is the node's (forked children), or when it runs the node's
//! program and no other node runs that program. On a redacted dump, a `match` text is
//! compared redacted by the dump's own rules, so it matches what remains of the command line.
//! [`PeerMap`] does the same for the far ends of connections, whose production addresses
//! are not the scenario's.
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use tracedump::dump::DumpMeta;
use tracedump::process::ProcInfo;
use tracedump::redact::Redactor;

use crate::model::scenario::{Node, Scenario};

#[derive(Clone, Debug, Default)]
pub struct NodeMap {
    by_pid: HashMap<u32, usize>,
    /// each node's `match`, as the dump's redaction rules would have left it
    redacted_match: Vec<Option<String>>,
    /// processes that ran a program several nodes run, with no `match` to tell them apart
    pub ambiguous: Vec<(u32, String)>,
    /// per node: the names its program goes by (`program_names`)
    programs: Vec<Vec<String>>,
}

/// The names a node's program goes by: its command's file name and, when the command is a
/// symlink on this host, the file name it resolves to — a process's exe is the target
/// (Debian's `/usr/bin/redis-server` is a link to `redis-check-rdb`).
pub fn program_names(node: &Node) -> Vec<String> {
    let command = node.command[0].as_str();
    let mut names = vec![file_name(command).to_string()];
    let target = std::fs::canonicalize(crate::model::resolve_binary(command)).ok();
    if let Some(t) = target
        .as_deref()
        .and_then(|t| t.file_name())
        .and_then(|n| n.to_str())
    {
        if !names.iter().any(|n| n == t) {
            names.push(t.to_string());
        }
    }
    names
}

fn file_name(s: &str) -> &str {
    Path::new(s).file_name().and_then(|n| n.to_str()).unwrap_or(s)
}

/// The program a process ran: its exe, else the first word of the command line it started
/// with (not the title it may have given itself since), else its first comm.
pub(crate) fn program_of(p: &ProcInfo) -> String {
    let exe = p.exe.as_deref().map(|e| e.trim_end_matches(" (deleted)"));
    let first = p.started_cmdline().and_then(|c| c.first()).map(String::as_str);
    let comm = p.exec_comm.as_deref().unwrap_or(&p.comm);
    file_name(exe.or(first).unwrap_or(comm)).to_string()
}

impl NodeMap {
    /// Maps the processes of a dump, matching as its redaction rules left the command lines.
    pub fn build_for(scenario: &Scenario, meta: &DumpMeta, launched: &[(usize, u32)]) -> NodeMap {
        Self::build_redacted(
            scenario,
            &meta.processes,
            launched,
            &Redactor::of_dump_config(&meta.config),
        )
    }

    /// Maps the processes of one dump. `launched` lists (node index, pid) pairs known for sure.
    pub fn build(scenario: &Scenario, processes: &[ProcInfo], launched: &[(usize, u32)]) -> NodeMap {
        Self::build_redacted(scenario, processes, launched, &Redactor::default())
    }

    fn build_redacted(
        scenario: &Scenario,
        processes: &[ProcInfo],
        launched: &[(usize, u32)],
        redactor: &Redactor,
    ) -> NodeMap {
        let mut map = NodeMap::default();
        map.redacted_match = scenario
            .nodes
            .iter()
            .map(|n| n.match_.as_deref().and_then(|m| redactor.apply(m)))
            .collect();
        map.programs = scenario.nodes.iter().map(program_names).collect();
        map.by_pid.extend(launched.iter().map(|&(n, pid)| (pid, n)));
        let by_pid: HashMap<u32, &ProcInfo> = processes.iter().map(|p| (p.pid, p)).collect();
        for p in processes {
            if let Some(n) = map.resolve(scenario, p, &by_pid, 0) {
                map.by_pid.insert(p.pid, n);
            }
        }
        map
    }

    fn resolve(
        &mut self,
        scenario: &Scenario,
        p: &ProcInfo,
        all: &HashMap<u32, &ProcInfo>,
        depth: u32,
    ) -> Option<usize> {
        if let Some(&n) = self.by_pid.get(&p.pid) {
            return Some(n);
        }
        // the command line it shows now, and the one it started with if it rewrote it
        let cmdlines: Vec<String> = [&p.cmdline, &p.exec_cmdline]
            .into_iter()
            .flatten()
            .map(|c| c.join(" "))
            .collect();
        let contains = |m: &str| cmdlines.iter().any(|c| c.contains(m));
        let matches = |i: usize, m: &str| {
            !m.is_empty()
                && (contains(m)
                    || self
                        .redacted_match
                        .get(i)
                        .and_then(|r| r.as_deref())
                        .is_some_and(contains))
        };
        let by_match = scenario
            .nodes
            .iter()
            .enumerate()
            .position(|(i, n)| n.match_.as_deref().is_some_and(|m| matches(i, m)));
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
            .filter(|&i| scenario.nodes[i].match_.is_none() && self.programs[i].contains(&program))
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

/// Which scenario node an address of a production connection belongs to. The scenario's
/// addresses are the test bed's, and production's usually differ: then an endpoint is the
/// node whose traced process owns it (its local end in another event), an address is the
/// node of the host it belongs to (the traced endpoints on it, or the interfaces of a dump
/// whose events are all one node's), and else a port one node's command line says it listens
/// on (and no other's) is that node's service.
#[derive(Clone, Debug, Default)]
pub struct PeerMap {
    /// None: owned by processes of several nodes
    endpoints: HashMap<SocketAddr, Option<usize>>,
    /// None: several nodes on that address
    hosts: HashMap<IpAddr, Option<usize>>,
    ports: HashMap<u16, usize>,
}

/// Records `key` as `node`'s, or as ambiguous when another node has it already.
fn claim<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Option<usize>>, key: K, node: usize) {
    let entry = map.entry(key).or_insert(Some(node));
    if *entry != Some(node) {
        *entry = None;
    }
}

/// The ports a node's command line says it listens on: the value of an option whose name
/// ends in `port` (`--port 7001`, `--port=7001`, `-p 7001`), or `HOST:PORT` (also as an
/// option's value) where HOST is one of the node's own addresses or any (`:7001`,
/// `0.0.0.0:7001`, `[::]:7001`, `[fd77::1]:7001`, `--listen=*:7001`); an IPv6 HOST is in
/// brackets, so a bare `fd77::1` is no port. A port of another
/// host (`--follower 10.0.0.2:7001`) is where the node connects to, not its service.
fn listening_ports(node: &Node) -> Vec<u16> {
    let own: Vec<String> = node.ips().iter().map(|ip| ip.to_string()).collect();
    let port = |p: &str| p.parse::<u16>().ok().filter(|&p| p != 0);
    let is_port_option = |name: &str| {
        let name = name.trim_start_matches('-').to_ascii_lowercase();
        name == "p" || name.ends_with("port")
    };
    let mut out = Vec::new();
    for (i, arg) in node.command.iter().enumerate() {
        if i > 0 && is_port_option(&node.command[i - 1]) {
            out.extend(port(arg));
        }
        if let Some((name, value)) = arg.split_once('=') {
            if is_port_option(name) {
                out.extend(port(value));
            }
        }
        let address = arg.split_once('=').map_or(arg.as_str(), |(_, v)| v);
        if let Some((host, value)) = address.rsplit_once(':') {
            let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                Some(v6) => v6,
                None if host.contains(':') => continue,
                None => host,
            };
            if ["", "0.0.0.0", "::", "*"].contains(&host) || own.iter().any(|a| a == host) {
                out.extend(port(value));
            }
        }
    }
    out
}

impl PeerMap {
    /// `owned`: endpoints that traced processes of a node had as their local end;
    /// `hosts`: addresses of hosts whose traced processes were all one node's.
    pub fn new(
        scenario: &Scenario,
        owned: impl Iterator<Item = (SocketAddr, usize)>,
        hosts: impl Iterator<Item = (IpAddr, usize)>,
    ) -> PeerMap {
        let mut map = PeerMap::default();
        for (endpoint, node) in owned {
            claim(&mut map.endpoints, endpoint, node);
            if !endpoint.ip().is_loopback() {
                claim(&mut map.hosts, endpoint.ip(), node);
            }
        }
        for (ip, node) in hosts.filter(|(ip, _)| !ip.is_loopback()) {
            claim(&mut map.hosts, ip, node);
        }
        let mut ports: HashMap<u16, Option<usize>> = HashMap::new();
        for (i, n) in scenario.nodes.iter().enumerate() {
            for port in listening_ports(n) {
                claim(&mut ports, port, i);
            }
        }
        map.ports = ports.into_iter().filter_map(|(p, n)| Some((p, n?))).collect();
        map
    }

    /// The node `addr` belongs to: the scenario's address first, then production's owners.
    pub fn node(&self, scenario: &Scenario, addr: SocketAddr) -> Option<usize> {
        scenario
            .node_at(addr.ip())
            .or_else(|| self.endpoints.get(&addr).copied().flatten())
            .or_else(|| self.hosts.get(&addr.ip()).copied().flatten())
            .or_else(|| self.ports.get(&addr.port()).copied())
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
        assert_eq!(
            m.node(14),
            None,
            "kvnode without --id: the nodes that run it have match"
        );
        let m = NodeMap::build(&s, &procs, &[(0, 13)]);
        assert_eq!(m.node(13), Some(0), "launched pids win");
    }

    #[test]
    fn a_child_that_renamed_itself_maps_by_what_it_started_as() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        // parents gone from the table, exe unknown (exited before /proc was read): only the
        // command lines they started with tell, as their titles name neither node nor program
        let renamed = |pid: u32, started: &str, title: &str, comm: &str| {
            let mut p = proc(pid, 1, started.split(' ').next().unwrap(), started);
            p.ppid = 999;
            p.exe = None;
            p.retitle(comm, Some(vec![title.to_string()]));
            p
        };
        let procs = vec![
            renamed(20, "kvnode --id 1", "kvnode: compactor", "compactor"),
            renamed(
                21,
                "/usr/bin/redis-server --port 1",
                "redis-rdb-bgsave *:1",
                "redis-rdb-bgsav",
            ),
        ];
        assert_eq!(procs[1].comm, "redis-rdb-bgsav");
        assert_eq!(program_of(&procs[1]), "redis-server");
        let m = NodeMap::build(&s, &procs, &[]);
        assert_eq!(
            m.node(20),
            Some(0),
            "by match, in the command line it started with"
        );
        assert_eq!(m.node(21), Some(2), "by program");
        // a match text that only the new title holds matches too
        let mut by_title = s.clone();
        by_title.nodes[0].match_ = Some("compactor".into());
        let m = NodeMap::build(&by_title, &procs, &[]);
        assert_eq!(m.node(20), Some(0));
    }

    #[test]
    fn a_containerised_process_maps_to_its_node_as_on_the_host() {
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        // pids are the host's; the container's shim (not traced) is the parent; exe and
        // command line are as the container sees its files
        let id = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";
        let contained = |mut p: ProcInfo, ns_pid: u32| {
            p.set_cgroup(&format!("/system.slice/docker-{id}.scope"));
            p.ns_pid = Some(ns_pid);
            p
        };
        let bare = vec![
            proc(4312, 4300, "/usr/local/bin/kvnode", "kvnode --id 1 --dir /data"),
            proc(4320, 4312, "/usr/local/bin/kvnode", "kvnode-snapshotter"),
            proc(4400, 4390, "/usr/bin/redis-server", "redis-server *:6379"),
        ];
        let in_containers: Vec<ProcInfo> = bare
            .iter()
            .cloned()
            .zip([1, 7, 1])
            .map(|(p, n)| contained(p, n))
            .collect();
        assert_eq!(in_containers[0].container_id.as_deref(), Some(id));
        for procs in [&bare, &in_containers] {
            let m = NodeMap::build(&s, procs, &[]);
            assert_eq!(m.node(4312), Some(0), "by match");
            assert_eq!(m.node(4320), Some(0), "a forked child, by its parent's host pid");
            assert_eq!(m.node(4400), Some(2), "by program");
            assert_eq!(m.node(1), None, "the pid inside a container is no key");
        }
    }

    #[test]
    fn a_node_whose_command_is_a_symlink_maps_the_processes_of_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("redis-check-rdb");
        std::fs::write(&target, b"").unwrap();
        let link = dir.path().join("redis-server");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let text = SCENARIO.replace("/usr/bin/redis-server", &link.display().to_string());
        let s = Scenario::parse(&text, "t").unwrap();
        assert_eq!(program_names(&s.nodes[2]), ["redis-server", "redis-check-rdb"]);
        // production's path differs; its exe is the link's target, as the kernel reports it
        let procs = vec![proc(
            12,
            1,
            "/usr/bin/redis-check-rdb",
            "/usr/bin/redis-server *:6379",
        )];
        assert_eq!(NodeMap::build(&s, &procs, &[]).node(12), Some(2));
    }

    #[test]
    fn matches_what_redaction_left() {
        let s = Scenario::parse(
            &SCENARIO.replace("match = \"--id 2\"", "match = \"--id 2 --token=s3cret\""),
            "t",
        )
        .unwrap();
        let redactor = Redactor::new(&tracedump::redact::default_rules(), "t").unwrap();
        let mut p = proc(10, 1, "/opt/kv/kvnode", "/opt/kv/kvnode --id 2 --token=s3cret");
        redactor.process(&mut p);
        assert_eq!(p.cmdline.as_ref().unwrap()[3], "--token=<redacted>");
        let meta = DumpMeta {
            processes: vec![p],
            config: serde_json::json!({ "redact": tracedump::redact::default_rules() }),
            ..Default::default()
        };
        assert_eq!(NodeMap::build_for(&s, &meta, &[]).node(10), Some(1));
        assert_eq!(
            NodeMap::build(&s, &meta.processes, &[]).node(10),
            None,
            "unredacted, the match misses"
        );
    }

    #[test]
    fn reports_ambiguous_programs() {
        let s = Scenario::parse(
            &SCENARIO
                .replace("match = \"--id 1\"\n", "")
                .replace("match = \"--id 2\"\n", ""),
            "t",
        )
        .unwrap();
        let m = NodeMap::build(&s, &[proc(10, 1, "/opt/kvnode", "kvnode --id 1")], &[]);
        assert_eq!(m.node(10), None);
        assert_eq!(m.ambiguous, vec![(10, "kvnode".to_string())]);
    }

    const CLUSTER: &str = r#"
name = "raft"
[[nodes]]
name = "follower"
command = ["raftlet", "--id", "2", "--port", "7501"]
address = "10.77.5.2"
[[nodes]]
name = "leader"
command = ["raftlet", "--id", "1", "--listen=10.77.5.1:7500", "--follower", "10.77.5.2:7501"]
address = "10.77.5.1"
[[nodes]]
name = "witness"
command = ["raftlet", "--id", "3", "--admin-port=9100", ":7502"]
address = "10.77.5.3"
[workload]
command = ["true"]
[oracle]
command = ["true"]
"#;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn production_addresses_map_to_nodes_by_owner_host_then_port() {
        let s = Scenario::parse(CLUSTER, "t").unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let m = PeerMap::new(
            &s,
            [
                // the follower's and the leader's processes own these ends
                (at("192.168.7.20:7501"), 0),
                (at("192.168.7.10:41000"), 1),
                // two nodes on one host: its address says nothing, its endpoints do
                (at("192.168.7.30:7502"), 2),
                (at("192.168.7.30:7503"), 0),
            ]
            .into_iter(),
            // a host whose dump held the witness only
            [(ip("192.168.7.40"), 2), (ip("127.0.0.1"), 2)].into_iter(),
        );
        let node = |a: &str| m.node(&s, at(a));
        assert_eq!(node("10.77.5.1:1234"), Some(1), "the scenario's addresses first");
        assert_eq!(node("192.168.7.20:7501"), Some(0), "the owner of the endpoint");
        assert_eq!(
            node("192.168.7.10:7500"),
            Some(1),
            "another endpoint of the owner's host"
        );
        assert_eq!(node("192.168.7.30:7503"), Some(0));
        assert_eq!(
            node("192.168.7.30:7500"),
            Some(1),
            "a shared host: by the port the leader listens on"
        );
        assert_eq!(node("192.168.7.40:60001"), Some(2), "a dump's host");
        assert_eq!(
            node("10.1.1.1:7502"),
            Some(2),
            "an untraced host: by the witness's port"
        );
        assert_eq!(node("10.1.1.1:9100"), Some(2), "--admin-port=");
        assert_eq!(node("10.1.1.1:7501"), Some(0), "the leader only connects to 7501");
        assert_eq!(node("10.1.1.1:41000"), None, "a client's port names no node");
        assert_eq!(node("127.0.0.1:41000"), None, "loopback is every host's");
        assert_eq!(node("10.1.1.1:2"), None, "--id 2 is no port");
    }

    #[test]
    fn ipv6_production_addresses_map_to_nodes_like_ipv4_ones() {
        let s = Scenario::parse(
            &CLUSTER
                .replace("10.77.5.1:7500", "[fd77:5::1]:7500")
                .replace("10.77.5.2:7501", "[fd77:5::2]:7501")
                .replace("\":7502\"", "\"--bind\", \"fd77:5::3\", \"[::]:7502\"")
                .replace("10.77.5.", "fd77:5::"),
            "t",
        )
        .unwrap();
        let m = PeerMap::new(
            &s,
            [(at("[2001:db8::20]:7501"), 0)].into_iter(),
            [("2001:db8::40".parse().unwrap(), 2)].into_iter(),
        );
        let node = |a: &str| m.node(&s, at(a));
        assert_eq!(
            node("[fd77:5::1]:1234"),
            Some(1),
            "the scenario's addresses first"
        );
        assert_eq!(node("[2001:db8::20]:40000"), Some(0), "the owner's host");
        assert_eq!(node("[2001:db8::40]:60001"), Some(2), "a dump's host");
        assert_eq!(node("[2001:db8::99]:7500"), Some(1), "[own]:7500");
        assert_eq!(node("[2001:db8::99]:7502"), Some(2), "[::]:7502");
        assert_eq!(
            node("[2001:db8::99]:7501"),
            Some(0),
            "the leader only connects to 7501"
        );
        assert_eq!(node("[2001:db8::99]:3"), None, "a bare fd77:5::3 is no port 3");
        assert_eq!(node("[::1]:7502"), Some(2), "loopback by the port, as for IPv4");
    }
}
