//! The scenario file (TOML): how to start the system under test (nodes), drive it
//! (workload) and tell whether the bug happened (oracle); placeholders and their expansion.
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use super::address::{self, NodeAddress};
use super::toml_error::{line_of_key, toml_error};

fn default_timeout() -> u64 {
    60
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default = "default_timeout")]
    pub run_timeout_s: u64,
    /// how long each node's `ready` may take to succeed (default: run_timeout_s, at most 60):
    /// a clustered server that syncs with its peers at start may need longer
    #[serde(default)]
    pub ready_timeout_s: Option<u64>,
    /// commands run in the run's workdir before the nodes start, in order
    #[serde(default)]
    pub setup: Vec<SetupStep>,
    pub nodes: Vec<Node>,
    pub workload: CommandSpec,
    pub oracle: CommandSpec,
    /// each `user` of the file with where it is written ("scenario F, line L: node N field
    /// user"), for the test bed's check that the accounts exist before a run; the analysis
    /// never needs the accounts, so a host without them can still diagnose
    #[serde(skip)]
    pub accounts: Vec<(String, String)>,
}

fn default_setup_timeout() -> u64 {
    60
}

/// One `[[setup]]` command: prepares a run (initialize a data directory, write a config).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SetupStep {
    pub command: Vec<String>,
    /// the account it runs as (root when absent)
    #[serde(default)]
    pub user: Option<String>,
    /// it fails when it has not finished after this long
    #[serde(default = "default_setup_timeout")]
    pub timeout_s: u64,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub name: String,
    pub command: Vec<String>,
    #[serde(default)]
    pub ready: Option<Vec<String>>,
    /// IPv4, IPv6 or one of each (see `address`): its own network namespace on the bridge
    #[serde(default)]
    pub address: Option<NodeAddress>,
    /// substring of a traced process's command line that identifies this node
    #[serde(default, rename = "match")]
    pub match_: Option<String>,
    #[serde(default)]
    pub restart: bool,
    /// the account the node runs as (root when absent); it owns `{workdir}/NAME`
    #[serde(default)]
    pub user: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    pub command: Vec<String>,
}

impl Node {
    /// The node's addresses in the order written (none on the host network).
    pub fn ips(&self) -> Vec<IpAddr> {
        self.address.as_ref().map(NodeAddress::ips).unwrap_or_default()
    }
}

/// Values for the placeholders of one run.
#[derive(Clone, Debug, Default)]
pub struct Placeholders {
    pub workdir: String,
    /// node name -> its addresses, in the order written
    pub addresses: HashMap<String, Vec<IpAddr>>,
    pub pids: HashMap<String, u32>,
}

impl Placeholders {
    /// Replaces {workdir}, {node.NAME.address} (its first address), {node.NAME.host} (the
    /// same as a URL's host: IPv6 in brackets), {node.NAME.ipv4} and {node.NAME.ipv6} (its
    /// address of that family) and {node.NAME.pid} in `s`; `{{` and `}}` stand for a literal
    /// brace (server configurations written by a setup step need them).
    pub fn expand(&self, s: &str) -> Result<String> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(at) = rest.find(['{', '}']) {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            if tail.starts_with("{{") || tail.starts_with("}}") {
                out.push_str(&tail[..1]);
                rest = &tail[2..];
                continue;
            }
            if let Some(after) = tail.strip_prefix('}') {
                out.push('}');
                rest = after;
                continue;
            }
            let Some(len) = tail.find('}') else {
                out.push_str(tail);
                return Ok(out);
            };
            out.push_str(&self.value(&tail[1..len])?);
            rest = &tail[len + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn value(&self, name: &str) -> Result<String> {
        if name == "workdir" {
            return Ok(self.workdir.clone());
        }
        let parts: Vec<&str> = name.split('.').collect();
        match parts.as_slice() {
            ["node", node, what @ ("address" | "host" | "ipv4" | "ipv6")] => {
                let ips = self.addresses.get(*node).map(Vec::as_slice).unwrap_or(&[]);
                let ip = match *what {
                    "ipv4" => ips.iter().find(|ip| ip.is_ipv4()),
                    "ipv6" => ips.iter().find(|ip| ip.is_ipv6()),
                    _ => ips.first(),
                };
                let family = if what.starts_with("ipv") { " of that family" } else { "" };
                let ip = ip.ok_or_else(|| anyhow::anyhow!("placeholder {{{name}}}: node {node} has no address{family}"))?;
                Ok(if *what == "host" { address::url_host(*ip) } else { ip.to_string() })
            }
            ["node", node, "pid"] => self
                .pids
                .get(*node)
                .map(|p| p.to_string())
                .ok_or_else(|| anyhow::anyhow!("placeholder {{{name}}}: node {node} is not running")),
            _ => bail!("unknown placeholder {{{name}}} (known: {{workdir}}, {{node.NAME.address}}, {{node.NAME.host}}, {{node.NAME.ipv4}}, {{node.NAME.ipv6}}, {{node.NAME.pid}})"),
        }
    }

    pub fn expand_all(&self, argv: &[String]) -> Result<Vec<String>> {
        argv.iter().map(|a| self.expand(a)).collect()
    }
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Scenario> {
        let text =
            std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("scenario {}: {e}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<Scenario> {
        let mut s: Scenario =
            toml::from_str(text).map_err(|e| toml_error(&e, text, &format!("scenario {origin}")))?;
        s.validate(text, origin)?;
        s.accounts = s.accounts_where_written(text, origin);
        Ok(s)
    }

    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The node one of whose addresses is `ip`.
    pub fn node_at(&self, ip: IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.ips().contains(&ip))
    }

    fn validate(&self, text: &str, origin: &str) -> Result<()> {
        let at = |i: usize, field: &str| match line_of_key(text, "nodes", i, field) {
            Some(l) => format!("scenario {origin}, line {l}: node {} field {field}", i + 1),
            None => format!("scenario {origin}: node {} field {field}", i + 1),
        };
        if self.nodes.is_empty() {
            bail!("scenario {origin}: no [[nodes]]");
        }
        if self.run_timeout_s == 0 {
            bail!("scenario {origin}: run_timeout_s must be positive");
        }
        if self.ready_timeout_s == Some(0) {
            bail!("scenario {origin}: ready_timeout_s must be positive");
        }
        let with_address: Vec<(usize, &NodeAddress)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| Some((i, n.address.as_ref()?)))
            .collect();
        address::check(&with_address).map_err(|(i, e)| anyhow::anyhow!("{}: {e}", at(i, "address")))?;
        // a dry expansion with every node known catches unknown placeholders before any run
        // (a node without an address is given both families: it fails at run time)
        let mut probe = Placeholders {
            workdir: "/w".into(),
            ..Default::default()
        };
        let unchecked: Vec<IpAddr> = vec![
            Ipv4Addr::new(10, 0, 0, 1).into(),
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into(),
        ];
        for n in &self.nodes {
            let ips = if n.address.is_some() {
                n.ips()
            } else {
                unchecked.clone()
            };
            probe.addresses.insert(n.name.clone(), ips);
            probe.pids.insert(n.name.clone(), 1);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.name.is_empty()
                || !n
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                bail!("{}: '{}' must be letters, digits, - or _", at(i, "name"), n.name);
            }
            if self.nodes[..i].iter().any(|m| m.name == n.name) {
                bail!("{}: node name '{}' is used twice", at(i, "name"), n.name);
            }
            if n.command.is_empty() {
                bail!("{}: empty command", at(i, "command"));
            }
            for arg in n.command.iter().chain(n.ready.iter().flatten()) {
                probe
                    .expand(arg)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", at(i, "command")))?;
            }
        }
        self.validate_setup(text, origin, &probe)?;
        for (what, c) in [("workload", &self.workload), ("oracle", &self.oracle)] {
            if c.command.is_empty() {
                bail!("scenario {origin}: [{what}] command is empty");
            }
            for arg in &c.command {
                probe
                    .expand(arg)
                    .map_err(|e| anyhow::anyhow!("scenario {origin}: [{what}] command: {e}"))?;
            }
        }
        Ok(())
    }

    fn validate_setup(&self, text: &str, origin: &str, probe: &Placeholders) -> Result<()> {
        let at = |i: usize, field: &str| match line_of_key(text, "setup", i, field) {
            Some(l) => format!("scenario {origin}, line {l}: setup {} field {field}", i + 1),
            None => format!("scenario {origin}: setup {} field {field}", i + 1),
        };
        // setup runs before any node: no {node.NAME.pid} yet
        let before_nodes = Placeholders {
            pids: HashMap::new(),
            ..probe.clone()
        };
        for (i, step) in self.setup.iter().enumerate() {
            if step.command.is_empty() {
                bail!("{}: empty command", at(i, "command"));
            }
            for arg in &step.command {
                before_nodes
                    .expand(arg)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", at(i, "command")))?;
            }
            if step.timeout_s == 0 {
                bail!("{}: must be positive", at(i, "timeout_s"));
            }
        }
        Ok(())
    }

    fn accounts_where_written(&self, text: &str, origin: &str) -> Vec<(String, String)> {
        let place = |table: &str, label: &str, i: usize| match line_of_key(text, table, i, "user") {
            Some(l) => format!("scenario {origin}, line {l}: {label} {} field user", i + 1),
            None => format!("scenario {origin}: {label} {} field user", i + 1),
        };
        let nodes = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| Some((place("nodes", "node", i), n.user.clone()?)));
        let steps = self
            .setup
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((place("setup", "setup", i), s.user.clone()?)));
        nodes.chain(steps).collect()
    }

    /// How long a node's `ready` command may take to succeed.
    pub fn ready_timeout_s(&self) -> u64 {
        self.ready_timeout_s.unwrap_or(self.run_timeout_s.min(60))
    }

    /// Whether anything runs as another account (then the run directory must be reachable).
    pub fn has_users(&self) -> bool {
        self.nodes.iter().any(|n| n.user.is_some()) || self.setup.iter().any(|s| s.user.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "kv"
[[nodes]]
name = "db1"
command = ["server", "--dir", "{workdir}/db1"]
address = "10.213.0.11"
[[nodes]]
name = "db2"
command = ["server", "--peer", "{node.db1.address}"]
address = "10.213.0.12"
[workload]
command = ["client", "{node.db1.pid}"]
[oracle]
command = ["true"]
"#;

    #[test]
    fn ready_timeout_defaults_to_the_run_timeout_up_to_a_minute() {
        let s = Scenario::parse(
            &GOOD.replace("name = \"kv\"", "name = \"kv\"\nrun_timeout_s = 20"),
            "t",
        )
        .unwrap();
        assert_eq!(s.ready_timeout_s(), 20);
        let s = Scenario::parse(
            &GOOD.replace("name = \"kv\"", "name = \"kv\"\nready_timeout_s = 180"),
            "t",
        )
        .unwrap();
        assert_eq!(s.ready_timeout_s(), 180);
        let err = Scenario::parse(
            &GOOD.replace("name = \"kv\"", "name = \"kv\"\nready_timeout_s = 0"),
            "t",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("ready_timeout_s must be positive"),
            "{err}"
        );
    }

    #[test]
    fn parses_and_expands() {
        let s = Scenario::parse(GOOD, "t").unwrap();
        assert_eq!(s.run_timeout_s, 60);
        assert_eq!(s.ready_timeout_s(), 60);
        let mut p = Placeholders {
            workdir: "/srv/w".into(),
            ..Default::default()
        };
        p.addresses
            .insert("db1".into(), vec!["10.213.0.11".parse().unwrap()]);
        p.pids.insert("db1".into(), 42);
        assert_eq!(
            p.expand("{workdir}/x-{node.db1.address}:{node.db1.pid}").unwrap(),
            "/srv/w/x-10.213.0.11:42"
        );
        // doubled braces are literal ones, also around a placeholder; a lone `}` stays
        assert_eq!(
            p.expand("events {{ use epoll; }} {{{workdir}}} a}b").unwrap(),
            "events { use epoll; } {/srv/w} a}b"
        );
        assert!(p.expand("{{workdir}").unwrap() == "{workdir}");
    }

    #[test]
    fn errors_point_at_the_line() {
        let bad = GOOD.replace("10.213.0.12", "10.214.0.12");
        let e = Scenario::parse(&bad, "s.toml").unwrap_err().to_string();
        assert!(e.contains("line 10") && e.contains("address"), "{e}");
        let bad = GOOD.replace("{node.db1.pid}", "{node.db9.pid}");
        let e = Scenario::parse(&bad, "s.toml").unwrap_err().to_string();
        assert!(e.contains("db9"), "{e}");
        let bad = GOOD.replace("name = \"db2\"", "name = \"db2\"\nrestrat = true");
        let e = Scenario::parse(&bad, "s.toml").unwrap_err().to_string();
        assert!(e.contains("line 9") && e.contains("restrat"), "{e}");
    }

    #[test]
    fn ipv6_and_dual_stack_addresses_and_their_placeholders() {
        let v6 = GOOD
            .replace("10.213.0.11", "fd77:8::11")
            .replace("10.213.0.12", "fd77:8::12")
            .replace("{node.db1.address}", "http://{node.db1.host}:80/{node.db1.ipv6}");
        let s = Scenario::parse(&v6, "t").unwrap();
        assert_eq!(s.node_at("fd77:8::12".parse().unwrap()), Some(1));
        let mut p = Placeholders::default();
        p.addresses.insert("db1".into(), s.nodes[0].ips());
        assert_eq!(
            p.expand_all(&s.nodes[1].command).unwrap()[2],
            "http://[fd77:8::11]:80/fd77:8::11"
        );
        // {node.NAME.ipv4} of a node with IPv6 only: refused where it is written
        let e = Scenario::parse(&v6.replace("{node.db1.ipv6}", "{node.db1.ipv4}"), "s.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 9: node 2 field command: placeholder {node.db1.ipv4}: node db1 has no address of that family"),
            "{e}"
        );
        let dual = GOOD
            .replace("\"10.213.0.11\"", "[\"10.213.0.11\", \"fd77:8::11\"]")
            .replace("\"10.213.0.12\"", "[\"fd77:8::12\", \"10.213.0.12\"]");
        let s = Scenario::parse(&dual, "t").unwrap();
        assert_eq!(s.node_at("10.213.0.12".parse().unwrap()), Some(1));
        assert_eq!(s.node_at("fd77:8::12".parse().unwrap()), Some(1));
        // a copy of the scenario (an attempt's spec) writes each form as it was read
        let back = toml::to_string(&s).unwrap();
        assert!(
            back.contains("address = [\"fd77:8::12\", \"10.213.0.12\"]"),
            "{back}"
        );
        let one = toml::to_string(&Scenario::parse(GOOD, "t").unwrap()).unwrap();
        assert!(one.contains("address = \"10.213.0.11\""), "{one}");
        // bad input: one line naming the field
        for (bad, needle) in [
            (GOOD.replace("10.213.0.12", "fd77:8::12"), "line 10: node 2 field address: mixed families"),
            (v6.replace("fd77:8::12", "fd77:9::12"), "line 10: node 2 field address: fd77:9::12: all node addresses must share one /64"),
            (v6.replace("fd77:8::12", "fd77:8::fe"), "line 10: node 2 field address: fd77:8::fe: the interface identifier"),
            (dual.replace("[\"fd77:8::12\", \"10.213.0.12\"]", "\"fd77:8::12\""), "line 10: node 2 field address: mixed families: this node has IPv6 and node 1 has IPv4 and IPv6"),
            (GOOD.replace("\"10.213.0.12\"", "7"), "line 10: invalid type: integer `7`, expected an IPv4 or IPv6 address, or a list of one of each"),
        ] {
            let e = Scenario::parse(&bad, "s.toml").unwrap_err().to_string();
            assert!(e.contains(needle) && !e.contains('\n'), "{needle}: {e}");
        }
    }

    #[test]
    fn setup_and_user_are_checked_where_written() {
        let with = |extra: &str| format!("{extra}\n{}", GOOD.replace("name = \"kv\"\n", ""));
        let ok = Scenario::parse(
            &with("name = \"kv\"\n[[setup]]\ncommand = [\"initdb\", \"{workdir}/db1\"]\nuser = \"nobody\"\n"),
            "s",
        )
        .unwrap();
        assert_eq!(ok.setup[0].timeout_s, 60);
        assert!(ok.has_users());
        for (extra, needle) in [
            (
                "[[setup]]\ncommand = []",
                "line 3: setup 1 field command: empty command",
            ),
            (
                "[[setup]]\ncommand = [\"x\", \"{node.db1.pid}\"]",
                "setup 1 field command: placeholder {node.db1.pid}",
            ),
            (
                "[[setup]]\ncommand = [\"x\"]\ntimeout_s = 0",
                "line 4: setup 1 field timeout_s",
            ),
        ] {
            let e = Scenario::parse(&format!("name = \"kv\"\n{}", with(extra)), "s.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{extra}: {e}");
        }
        // an unknown account is no parse error (the analysis runs where it does not exist);
        // the test bed's check names it where it is written
        let bad = GOOD.replace("name = \"db2\"", "name = \"db2\"\nuser = \"no-such-user-here\"");
        let s = Scenario::parse(&bad, "s.toml").unwrap();
        assert_eq!(
            s.accounts,
            [(
                "scenario s.toml, line 9: node 2 field user".to_string(),
                "no-such-user-here".to_string()
            )]
        );
        let s = Scenario::parse(
            &format!(
                "name = \"kv\"\n{}",
                with("[[setup]]\ncommand = [\"x\"]\nuser = \"nobody\"")
            ),
            "s.toml",
        )
        .unwrap();
        assert_eq!(s.accounts[0].0, "scenario s.toml, line 4: setup 1 field user");
    }
}
