//! The test network: one Linux bridge per run, and for every node with an address its own
//! network namespace joined to the bridge by a veth pair. Everything is created with
//! iproute2 and removed on drop, also when the run fails or is interrupted.
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::model::scenario::Scenario;

/// A node's place on the test network.
#[derive(Clone, Debug)]
pub struct NodeNet {
    pub node: String,
    pub netns: String,
    /// the bridge-side end of the node's veth, where its traffic can be filtered
    pub host_veth: String,
    pub address: String,
}

pub struct Netbed {
    pub bridge: Option<String>,
    pub bridge_address: Option<String>,
    pub nodes: Vec<NodeNet>,
    created_netns: Vec<String>,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Netbed {
    /// Creates the network of `scenario` for run `run_id` (a short unique number).
    pub fn create(scenario: &Scenario, run_id: u32) -> Result<Netbed> {
        let mut bed = Netbed {
            bridge: None,
            bridge_address: None,
            nodes: Vec::new(),
            created_netns: Vec::new(),
        };
        let with_address: Vec<_> = scenario
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.address.is_some())
            .collect();
        if with_address.is_empty() {
            return Ok(bed);
        }
        let bridge = format!("rpb{run_id}");
        let first = with_address[0].1.address.as_deref().unwrap_or_default();
        let prefix = first.rsplit_once('.').map(|(p, _)| p).unwrap_or(first);
        let bridge_address = format!("{prefix}.254");
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        bed.bridge = Some(bridge.clone());
        ip(&["addr", "add", &format!("{bridge_address}/24"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        bed.bridge_address = Some(bridge_address);
        for (i, node) in with_address {
            let address = node.address.clone().unwrap_or_default();
            let netns = format!("rp{run_id}-{}", node.name);
            let host_veth = format!("rp{run_id}n{i}");
            ip(&["netns", "add", &netns])?;
            bed.created_netns.push(netns.clone());
            ip(&[
                "link", "add", &host_veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
            ])?;
            ip(&["link", "set", &host_veth, "master", &bridge, "up"])?;
            ip(&[
                "-n",
                &netns,
                "addr",
                "add",
                &format!("{address}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &netns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &netns, "link", "set", "lo", "up"])?;
            bed.nodes.push(NodeNet {
                node: node.name.clone(),
                netns,
                host_veth,
                address,
            });
        }
        Ok(bed)
    }

    pub fn of(&self, node: &str) -> Option<&NodeNet> {
        self.nodes.iter().find(|n| n.node == node)
    }
}

impl Drop for Netbed {
    fn drop(&mut self) {
        // delete the veth pairs first: a namespace is destroyed asynchronously, and its
        // veth ends would otherwise outlive this call for a while
        for n in &self.nodes {
            let _ = ip(&["link", "del", &n.host_veth]);
        }
        for ns in self.created_netns.drain(..) {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                log::warn!("cleanup: {e:#}");
            }
        }
        if let Some(bridge) = self.bridge.take() {
            if let Err(e) = ip(&["link", "del", &bridge]) {
                log::warn!("cleanup: {e:#}");
            }
        }
    }
}

/// Joins the network namespace `name` (for use between fork and exec).
pub fn enter_netns(name: &str) -> Result<std::fs::File> {
    std::fs::File::open(format!("/run/netns/{name}")).with_context(|| format!("network namespace {name}"))
}
