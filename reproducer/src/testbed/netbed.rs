//! The test network of one run, and what makes runs side by side possible. A scenario
//! whose nodes all have an address gets a network namespace of its own for the run (the
//! "run namespace", `rpr{id}`) that holds the run's bridge (`rpb{id}`, address `.254` of
//! the nodes' /24 and `::fe` of their /64, per family the nodes have) and the bridge ends of
//! the nodes' veths; each node has its own namespace (`rp{id}-{node}`) joined to the bridge.
//! IPv6 addresses skip duplicate address detection (`nodad`): the run owns the link, and a
//! node may bind its address at once instead of a second later. The bridge floods multicast
//! (no snooping): with no querier on the link, a member it did not hear join would miss
//! IPv6 neighbour solicitations and a cluster's multicast heartbeats. The thread that creates the Netbed enters the run
//! namespace until it is dropped, so the setup steps, the ready checks, the workload and the
//! oracle it starts reach the nodes at the scenario's own addresses, and two runs with the
//! same addresses do not meet on the host's routes. A scenario with a node without an
//! address (host network, loopback ports) cannot run beside another such run: its bridge
//! (if any) stays on the host as before and the run holds the host-network lock
//! (`/run/reproducer/host-network.lock`) from start to end. Run ids are claimed with a lock
//! file each, so concurrent runs of any number of reproducer processes never share a name.
//! Everything is created with iproute2 and removed on drop, also when the run fails or is
//! interrupted.
use std::fs::File;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::model::address;
use crate::model::scenario::Scenario;

/// Where run-id and host-network locks live (tmpfs: nothing survives a reboot).
const LOCK_DIR: &str = "/run/reproducer";
/// Run ids are 6 digits: `rpb` + 6 fits IFNAMSIZ, and they never meet the ids of reproducers
/// from before the lock files (5 digits at most), which would not see the locks.
const FIRST_RUN_ID: u32 = 100_000;
const RUN_IDS: u32 = 900_000;

/// A node's place on the test network.
#[derive(Clone, Debug)]
pub struct NodeNet {
    pub node: String,
    pub netns: String,
    /// the bridge-side end of the node's veth, where its traffic can be filtered (in the
    /// run namespace when there is one, which the creating thread is in)
    pub host_veth: String,
    pub addresses: Vec<IpAddr>,
}

pub struct Netbed {
    pub bridge: Option<String>,
    /// one per family of the nodes' addresses
    pub bridge_addresses: Vec<IpAddr>,
    pub nodes: Vec<NodeNet>,
    created_netns: Vec<String>,
    /// the run namespace, and the namespace the creating thread came from
    run_netns: Option<(String, File)>,
    /// held while the run lasts: the run id, and for host-network runs the host lock
    _locks: Vec<File>,
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

/// Whether runs of `scenario` can happen side by side: every node has an address, so each
/// run gets its own run namespace. A node on the host network shares the host's ports.
pub fn runs_side_by_side(scenario: &Scenario) -> bool {
    !scenario.nodes.is_empty() && scenario.nodes.iter().all(|n| n.address.is_some())
}

/// Takes an exclusive lock on `path` (created), without waiting: None when another process
/// holds it. The kernel releases it when the file is closed, also when the process dies.
fn try_lock(path: &str) -> Result<Option<File>> {
    std::fs::create_dir_all(LOCK_DIR).with_context(|| format!("lock directory {LOCK_DIR}"))?;
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("lock file {path}"))?;
    // SAFETY: flock(2) on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(file));
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(e).with_context(|| format!("locking {path}"))
    }
}

/// Where this process's run ids start: [`FIRST_RUN_ID`], or `REPRODUCER_RUN_ID_BASE` when it
/// names an id in the range. A test suite gives each of its processes a block of its own, so
/// that a namespace or bridge left behind is known to be its own by its name, and one of
/// another reproducer on the host is not.
fn first_run_id() -> u32 {
    std::env::var("REPRODUCER_RUN_ID_BASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|id| (FIRST_RUN_ID..FIRST_RUN_ID + RUN_IDS).contains(id))
        .unwrap_or(FIRST_RUN_ID)
}

/// The lowest run id from [`first_run_id`] on that no other run holds now: ids (and their
/// lock files) are reused, so there are never more lock files than runs that were at the
/// same time.
fn claim_run_id() -> Result<(u32, File)> {
    for id in first_run_id()..FIRST_RUN_ID + RUN_IDS {
        if let Some(lock) = try_lock(&format!("{LOCK_DIR}/run-{id}.lock"))? {
            remove_stale(id);
            return Ok((id, lock));
        }
    }
    bail!("no free run id: {RUN_IDS} runs hold one")
}

/// Removes what a run with id `id` that was killed before its cleanup left behind: whoever
/// holds the id's lock owns every name made from it.
fn remove_stale(id: u32) {
    let node_prefix = format!("rp{id}-");
    let run_netns = format!("rpr{id}");
    let stale: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| *n == run_netns || n.starts_with(&node_prefix))
                .collect()
        })
        .unwrap_or_default();
    for ns in stale {
        log::warn!("removing network namespace {ns}, left behind by a run that did not clean up");
        let _ = ip(&["netns", "del", &ns]);
    }
    let bridge = format!("rpb{id}");
    if std::path::Path::new("/sys/class/net").join(&bridge).exists() {
        log::warn!("removing bridge {bridge}, left behind by a run that did not clean up");
        let _ = ip(&["link", "del", &bridge]);
    }
}

/// Gives `dev` (in network namespace `netns`, "" for this thread's) address `addr` with its
/// family's prefix; IPv6 without duplicate address detection (see the module comment).
fn add_address(netns: &str, dev: &str, addr: IpAddr) -> Result<()> {
    let with_prefix = format!("{addr}/{}", address::prefix_len(addr));
    let mut args = vec!["addr", "add", &with_prefix, "dev", dev];
    if addr.is_ipv6() {
        args.push("nodad");
    }
    if !netns.is_empty() {
        args.splice(0..0, ["-n", netns]);
    }
    ip(&args)
}

/// Waits for the host-network lock: one run with host-network nodes at a time, across every
/// reproducer process. Gives up on Ctrl-C.
fn lock_host_network() -> Result<File> {
    let path = format!("{LOCK_DIR}/host-network.lock");
    let mut said = false;
    loop {
        if let Some(lock) = try_lock(&path)? {
            return Ok(lock);
        }
        if crate::interrupt::requested() {
            bail!("interrupted while waiting for {path}");
        }
        if !said {
            log::info!("waiting for another run on the host network ({path})");
            said = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Moves the calling thread into the network namespace at `path`.
fn set_netns(file: &File, what: &str) -> Result<()> {
    // SAFETY: setns(2) on a namespace file descriptor we own; affects this thread only.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("entering {what}"));
    }
    Ok(())
}

impl Netbed {
    /// Creates the network of `scenario` for one run; see the module comment for where.
    pub fn create(scenario: &Scenario) -> Result<Netbed> {
        let (run_id, id_lock) = claim_run_id()?;
        let mut bed = Netbed {
            bridge: None,
            bridge_addresses: Vec::new(),
            nodes: Vec::new(),
            created_netns: Vec::new(),
            run_netns: None,
            _locks: vec![id_lock],
        };
        if runs_side_by_side(scenario) {
            bed.enter_run_netns(run_id)?;
        } else {
            bed._locks.push(lock_host_network()?);
        }
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
        ip(&["link", "add", &bridge, "type", "bridge", "mcast_snooping", "0"])?;
        bed.bridge = Some(bridge.clone());
        for node_ip in with_address[0].1.ips() {
            let bridge_ip = address::bridge_address(node_ip);
            add_address("", &bridge, bridge_ip)?;
            bed.bridge_addresses.push(bridge_ip);
        }
        ip(&["link", "set", &bridge, "up"])?;
        for (i, node) in with_address {
            let addresses = node.ips();
            let netns = format!("rp{run_id}-{}", node.name);
            let host_veth = format!("rp{run_id}n{i}");
            ip(&["netns", "add", &netns])?;
            bed.created_netns.push(netns.clone());
            ip(&[
                "link", "add", &host_veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
            ])?;
            ip(&["link", "set", &host_veth, "master", &bridge, "up"])?;
            for &a in &addresses {
                add_address(&netns, "eth0", a)?;
            }
            ip(&["-n", &netns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &netns, "link", "set", "lo", "up"])?;
            bed.nodes.push(NodeNet {
                node: node.name.clone(),
                netns,
                host_veth,
                addresses,
            });
        }
        Ok(bed)
    }

    /// Creates the run namespace and moves this thread into it; what this thread starts
    /// from now on (ip included) is there.
    fn enter_run_netns(&mut self, run_id: u32) -> Result<()> {
        let name = format!("rpr{run_id}");
        let home = File::open("/proc/thread-self/ns/net").context("this thread's network namespace")?;
        ip(&["netns", "add", &name])?;
        let ns = match enter_netns(&name) {
            Ok(ns) => ns,
            Err(e) => {
                let _ = ip(&["netns", "del", &name]);
                return Err(e);
            }
        };
        self.run_netns = Some((name.clone(), home));
        set_netns(&ns, &format!("network namespace {name}"))?;
        ip(&["link", "set", "lo", "up"])
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
        if let Some((name, home)) = self.run_netns.take() {
            // back home first: the namespace goes when its last user leaves it
            if let Err(e) = set_netns(&home, "the thread's own network namespace") {
                log::warn!("cleanup: {e:#}");
            }
            if let Err(e) = ip(&["netns", "del", &name]) {
                log::warn!("cleanup: {e:#}");
            }
        }
    }
}

/// Joins the network namespace `name` (for use between fork and exec).
pub fn enter_netns(name: &str) -> Result<std::fs::File> {
    std::fs::File::open(format!("/run/netns/{name}")).with_context(|| format!("network namespace {name}"))
}
