//! Loads the injector (bpf/injector.bpf.c): the schedule goes into maps as data, one uprobe
//! per context probe (function entry or function + offset), the process-tree hooks that
//! keep every process of a node mapped to its node, and the partition filter on the nodes'
//! veths. Owns every link and TC hook it creates.
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use crossbeam_channel::{unbounded, Receiver};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{
    Link, MapCore, MapFlags, MapHandle, OpenObject, RingBuffer, RingBufferBuilder, TcHook, TcHookBuilder,
    UprobeOpts, TC_INGRESS,
};

use crate::model::plan::{FaultPlan, Planned, PlannedFault};
use crate::model::schedule::Direction;

mod bpf {
    #![allow(clippy::all, non_camel_case_types, non_upper_case_globals, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/injector.skel.rs"));
}
use bpf::types::{inj_addr, inj_direction, inj_event, inj_event_kind, inj_fault, inj_kind, inj_partition};
use tracedump::abi::{bytes_of, read_struct, Plain};
use tracerd::skel::OwnedSkel;

// SAFETY (all three): generated from injector.h, #[repr(C)], integers and arrays of them
// (inj_addr is four u32), no implicit padding (the header keeps explicit `reserved` fields).
unsafe impl Plain for inj_event {}
unsafe impl Plain for inj_fault {}
unsafe impl Plain for inj_partition {}

/// INJ_MAX_FUNCS, INJ_MAX_PEERS and INJ_NODE_ADDRS, checked against the generated arrays.
const MAX_FUNCS: usize = 8;
const MAX_PEERS: usize = 8;
const NODE_ADDRS: usize = 2;
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(
        offset_of!(inj_fault, duration_ns) - offset_of!(inj_fault, probes) == MAX_FUNCS * size_of::<u32>()
    );
    assert!(size_of::<inj_addr>() == 16);
    assert!(
        offset_of!(inj_partition, peer_addrs) - offset_of!(inj_partition, node_addrs)
            == NODE_ADDRS * size_of::<inj_addr>()
    );
    assert!(
        size_of::<inj_partition>() - offset_of!(inj_partition, peer_addrs)
            == MAX_PEERS * NODE_ADDRS * size_of::<inj_addr>()
    );
};

/// Where a context probe sits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProbeSite {
    pub binary: PathBuf,
    pub symbol: String,
    pub offset: u64,
}

/// Something the injector saw or did, as reported by its probes.
#[derive(Clone, Debug)]
pub struct InjEvent {
    pub ts_ns: u64,
    pub fired: bool,
    pub fault: usize,
    pub pid: u32,
    pub tid: u32,
    pub probe: u32,
    pub step: u32,
}

pub struct Injector {
    // the ring buffer goes first: it must be dropped before the maps it reads
    ring: RingBuffer<'static>,
    events: Receiver<InjEvent>,
    skel: OwnedSkel<bpf::InjectorSkel<'static>>,
    _uprobes: Vec<Link>,
    tc_hooks: Vec<TcHook>,
    pub probes: Vec<ProbeSite>,
    nfaults: usize,
    /// slots of the `partitions` map (INJ_MAX_PARTITIONS)
    max_partitions: u32,
}

/// `ip` as the partition filter compares it: IPv6 bytes, IPv4 mapped into IPv6.
fn inj_address(ip: IpAddr) -> inj_addr {
    let bytes = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    let mut a = inj_addr::default();
    for (w, b) in a.words.iter_mut().zip(bytes.chunks_exact(4)) {
        *w = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    }
    a
}

fn kind_code(action: &Planned) -> u32 {
    let code = match action {
        Planned::Syscall { .. } => inj_kind::INJ_SYSCALL,
        Planned::Crash { .. } => inj_kind::INJ_CRASH,
        Planned::Pause { .. } => inj_kind::INJ_PAUSE,
        Planned::Partition { .. } => inj_kind::INJ_PARTITION,
    };
    code.0
}

/// What the injector needs to know about each node.
pub struct NodeInfo {
    /// the node's executable, where its context functions are looked up
    pub binary: PathBuf,
    /// its addresses on the test network (none on the host network)
    pub addresses: Vec<IpAddr>,
    pub host_veth: Option<String>,
}

fn probe_site(function: &str, node: &NodeInfo, offset: u64) -> ProbeSite {
    match function.rsplit_once(':') {
        Some((binary, symbol)) if !binary.is_empty() => ProbeSite {
            binary: binary.into(),
            symbol: symbol.into(),
            offset,
        },
        _ => ProbeSite {
            binary: node.binary.clone(),
            symbol: function.into(),
            offset,
        },
    }
}

impl Injector {
    pub fn start(plan: &FaultPlan, nodes: &[NodeInfo]) -> Result<Injector> {
        let faults = &plan.faults;
        let mut max_partitions = 0;
        let mut sections = Vec::new();
        let skel = OwnedSkel::new(|storage: &'static mut MaybeUninit<OpenObject>| -> Result<_> {
            let mut open = bpf::InjectorSkelBuilder::default()
                .open(storage)
                .context("opening the injector")?;
            let max_faults = open.maps.faults.max_entries() as usize;
            if faults.len() > max_faults {
                bail!("a schedule holds at most {max_faults} faults");
            }
            max_partitions = open.maps.partitions.max_entries();
            open.maps
                .rodata_data
                .as_deref_mut()
                .context("injector has no rodata")?
                .nfaults = faults.len() as u32;
            sections = tracerd::kernel::sections(open.open_object());
            tracerd::kernel::diagnose("loading the injector's BPF programs", &sections, || open.load())
        })?;
        let (tx, events) = unbounded();
        let mut builder = RingBufferBuilder::new();
        builder.add(&skel.maps.events, move |data: &[u8]| {
            if let Some(e) = read_struct::<inj_event>(data) {
                let fired = e.kind == inj_event_kind::INJ_EV_FIRED.0;
                let _ = tx.send(InjEvent {
                    ts_ns: e.ts_ns,
                    fired,
                    fault: e.fault as usize,
                    pid: e.pid,
                    tid: e.tid,
                    probe: e.probe,
                    step: e.step,
                });
            }
            0
        })?;
        let ring = builder.build()?;
        let mut inj = Injector {
            ring,
            events,
            skel,
            _uprobes: Vec::new(),
            tc_hooks: Vec::new(),
            probes: Vec::new(),
            nfaults: faults.len(),
            max_partitions,
        };
        inj.load_plan(faults, nodes)?;
        tracerd::kernel::diagnose("attaching the injector's process hooks", &sections, || {
            inj.skel.attach()
        })?;
        inj.attach_probes()?;
        inj.attach_partition_filters(faults, nodes)?;
        Ok(inj)
    }

    fn probe_id(&mut self, site: ProbeSite) -> u32 {
        match self.probes.iter().position(|p| *p == site) {
            Some(i) => i as u32,
            None => {
                self.probes.push(site);
                (self.probes.len() - 1) as u32
            }
        }
    }

    fn load_plan(&mut self, faults: &[PlannedFault], nodes: &[NodeInfo]) -> Result<()> {
        let mut next_slot = 0u32;
        for (i, f) in faults.iter().enumerate() {
            let context = f.context();
            if context.after_functions.len() > MAX_FUNCS {
                bail!("fault {}: at most {MAX_FUNCS} after_functions", i + 1);
            }
            let mut v = inj_fault {
                kind: kind_code(&f.action),
                node: f.node as u32,
                signal: f.signal().unwrap_or(0),
                nfuncs: context.after_functions.len() as u32,
                ..Default::default()
            };
            let node = &nodes[f.node];
            for (j, func) in context.after_functions.iter().enumerate() {
                let offset = if j + 1 == context.after_functions.len() {
                    context.offset.unwrap_or(0)
                } else {
                    0
                };
                v.probes[j] = self.probe_id(probe_site(func, node, offset));
            }
            if let Planned::Partition {
                peers,
                direction,
                duration,
            } = &f.action
            {
                if next_slot >= self.max_partitions {
                    bail!("a schedule holds at most {} partitions", self.max_partitions);
                }
                v.partition = next_slot;
                v.duration_ns = duration.as_nanos() as u64;
                self.write_partition(next_slot, f.node, peers, *direction, nodes)?;
                next_slot += 1;
            }
            self.skel
                .maps
                .faults
                .update(&(i as u32).to_ne_bytes(), bytes_of(&v), MapFlags::ANY)?;
        }
        Ok(())
    }

    fn write_partition(
        &self,
        slot: u32,
        node: usize,
        peers: &[usize],
        direction: Direction,
        nodes: &[NodeInfo],
    ) -> Result<()> {
        let own = &nodes[node].addresses;
        let Some(&first) = own.first() else {
            bail!("a partition's node has no address");
        };
        let mut p = inj_partition::default();
        for (k, slot) in p.node_addrs.iter_mut().enumerate() {
            *slot = inj_address(*own.get(k).unwrap_or(&first));
        }
        let direction = match direction {
            Direction::Both => inj_direction::INJ_BOTH,
            Direction::Out => inj_direction::INJ_OUT,
            Direction::In => inj_direction::INJ_IN,
        };
        p.direction = direction.0;
        if peers.len() > MAX_PEERS {
            bail!("a partition names at most {MAX_PEERS} peers");
        }
        let peer_addrs: Vec<IpAddr> = peers
            .iter()
            .flat_map(|&i| nodes[i].addresses.iter().copied())
            .collect();
        if peer_addrs.len() > p.peer_addrs.len() {
            bail!(
                "a partition's peers have more than {} addresses",
                p.peer_addrs.len()
            );
        }
        for (slot, ip) in p.peer_addrs.iter_mut().zip(&peer_addrs) {
            *slot = inj_address(*ip);
        }
        p.npeer_addrs = peer_addrs.len() as u32;
        self.skel
            .maps
            .partitions
            .update(&slot.to_ne_bytes(), bytes_of(&p), MapFlags::ANY)?;
        Ok(())
    }

    fn attach_probes(&mut self) -> Result<()> {
        for (id, site) in self.probes.clone().iter().enumerate() {
            let opts = UprobeOpts {
                cookie: id as u64,
                func_name: Some(site.symbol.clone()),
                ..Default::default()
            };
            let link = match self.skel.progs.context_probe.attach_uprobe_with_opts(
                -1,
                &site.binary,
                site.offset as usize,
                opts,
            ) {
                Ok(link) => link,
                // libbpf looks names up in .symtab and .dynsym only; a Go function is in .gopclntab,
                // which our own resolution reads
                Err(e) => match tracedump::elf::function_offsets(&site.binary)
                    .ok()
                    .and_then(|o| o.get(&site.symbol).copied())
                {
                    Some(entry) => {
                        let opts = UprobeOpts {
                            cookie: id as u64,
                            ..Default::default()
                        };
                        self.skel.progs.context_probe.attach_uprobe_with_opts(
                            -1,
                            &site.binary,
                            (entry + site.offset) as usize,
                            opts,
                        )
                    }
                    None => Err(e),
                }
                .with_context(|| {
                    format!(
                        "context probe {}:{}+{}: cannot attach (is the symbol in the binary?)",
                        site.binary.display(),
                        site.symbol,
                        site.offset
                    )
                })?,
            };
            self._uprobes.push(link);
        }
        Ok(())
    }

    fn attach_partition_filters(&mut self, faults: &[PlannedFault], nodes: &[NodeInfo]) -> Result<()> {
        if !faults
            .iter()
            .any(|f| matches!(f.action, Planned::Partition { .. }))
        {
            return Ok(());
        }
        for node in nodes {
            let Some(veth) = &node.host_veth else { continue };
            let ifindex =
                nix::net::if_::if_nametoindex(veth.as_str()).with_context(|| format!("interface {veth}"))?;
            let mut hook = TcHookBuilder::new(self.skel.progs.partition_filter.as_fd())
                .ifindex(ifindex as i32)
                .replace(true)
                .handle(1)
                .priority(1)
                .hook(TC_INGRESS);
            hook.create().with_context(|| format!("clsact qdisc on {veth}"))?;
            hook.attach()
                .with_context(|| format!("partition filter on {veth}"))?;
            self.tc_hooks.push(hook);
        }
        Ok(())
    }

    /// Makes `pid` (and its future children) count as node `node`.
    pub fn set_node(&self, pid: u32, node: usize) -> Result<()> {
        self.skel
            .maps
            .node_of
            .update(&pid.to_ne_bytes(), &(node as u32).to_ne_bytes(), MapFlags::ANY)?;
        Ok(())
    }

    /// Raw fd of the process -> node map (a child registers itself with it before exec).
    pub fn node_map_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.skel.maps.node_of.as_fd())
    }

    /// A handle on the state word, for the syscall supervisor threads.
    pub fn state_handle(&self) -> Result<MapHandle> {
        Ok(MapHandle::try_from(&self.skel.maps.state)?)
    }

    /// (current fault, context probes seen).
    pub fn state(&self) -> Result<(usize, u32)> {
        read_state(&self.skel.maps.state)
    }

    pub fn nfaults(&self) -> usize {
        self.nfaults
    }

    /// Marks fault `index` as fired (if it is still the current one).
    pub fn advance_past(&self, index: usize) -> Result<()> {
        advance_past(&self.skel.maps.state, index)
    }

    /// Switches partition fault `slot` on for `duration`.
    pub fn activate_partition(&self, fault_index: usize, duration: Duration) -> Result<()> {
        let key = (fault_index as u32).to_ne_bytes();
        let raw = self
            .skel
            .maps
            .faults
            .lookup(&key, MapFlags::ANY)?
            .context("fault not loaded")?;
        let f: inj_fault = read_struct(&raw).context("fault value too short")?;
        let slot = f.partition.to_ne_bytes();
        let raw = self
            .skel
            .maps
            .partitions
            .lookup(&slot, MapFlags::ANY)?
            .context("partition not loaded")?;
        let mut p: inj_partition = read_struct(&raw).context("partition value too short")?;
        p.until_ns = monotonic_ns() + duration.as_nanos() as u64;
        self.skel
            .maps
            .partitions
            .update(&slot, bytes_of(&p), MapFlags::ANY)?;
        Ok(())
    }

    /// Waits up to `timeout` for probe reports and returns them.
    pub fn poll(&self, timeout: Duration) -> Result<Vec<InjEvent>> {
        match self.ring.poll(timeout) {
            Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => {}
            other => other?,
        }
        Ok(self.events.try_iter().collect())
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        for hook in &mut self.tc_hooks {
            let _ = hook.detach();
            let _ = hook.destroy();
        }
    }
}

pub fn read_state(map: &dyn MapCore) -> Result<(usize, u32)> {
    let raw = map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
        .context("injector state missing")?;
    let v = u64::from_ne_bytes(raw.get(..8).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]));
    Ok(((v >> 32) as usize, v as u32))
}

pub fn advance_past(map: &dyn MapCore, index: usize) -> Result<()> {
    let (cur, _) = read_state(map)?;
    if cur == index {
        let v: u64 = ((index as u64) + 1) << 32;
        map.update(&0u32.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)?;
    }
    Ok(())
}

pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

pub fn boottime_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Probe ids by site, for reports.
pub fn probe_names(probes: &[ProbeSite]) -> HashMap<u32, String> {
    probes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                i as u32,
                if p.offset == 0 {
                    p.symbol.clone()
                } else {
                    format!("{}+{}", p.symbol, p.offset)
                },
            )
        })
        .collect()
}
