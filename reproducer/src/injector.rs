//! Loads the injector (bpf/injector.bpf.c): the schedule goes into maps as data, one uprobe
//! per context probe (function entry or function + offset), the process-tree hooks that
//! keep every process of a node mapped to its node, and the partition filter on the nodes'
//! veths. Owns every link and TC hook it creates.
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use crossbeam_channel::{unbounded, Receiver};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, OpenObject, RingBuffer, RingBufferBuilder, TcHook, TcHookBuilder, UprobeOpts, TC_INGRESS};

use crate::schedule::{Direction, FaultKind, ResolvedFault};

mod bpf {
    #![allow(clippy::all, non_camel_case_types, non_upper_case_globals, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/injector.skel.rs"));
}
use bpf::types::{inj_event, inj_fault, inj_partition};

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

pub const INJ_SYSCALL: u32 = 1;

pub struct Injector {
    // the ring buffer goes first: it must be dropped before the maps it reads
    ring: RingBuffer<'static>,
    events: Receiver<InjEvent>,
    skel: bpf::InjectorSkel<'static>,
    _uprobes: Vec<Link>,
    tc_hooks: Vec<TcHook>,
    pub probes: Vec<ProbeSite>,
    nfaults: usize,
}

fn ipv4(addr: &str) -> Result<u32> {
    let ip: Ipv4Addr = addr.parse().with_context(|| format!("address {addr}"))?;
    Ok(u32::from_ne_bytes(ip.octets()))
}

fn kind_code(kind: FaultKind) -> u32 {
    match kind {
        FaultKind::Syscall => INJ_SYSCALL,
        FaultKind::Crash => 2,
        FaultKind::Pause => 3,
        FaultKind::Partition => 4,
    }
}

/// What the injector needs to know about each node.
pub struct NodeInfo {
    /// the node's executable, where its context functions are looked up
    pub binary: PathBuf,
    pub address: Option<String>,
    pub host_veth: Option<String>,
}

fn probe_site(function: &str, node: &NodeInfo, offset: u64) -> ProbeSite {
    match function.rsplit_once(':') {
        Some((binary, symbol)) if !binary.is_empty() => ProbeSite { binary: binary.into(), symbol: symbol.into(), offset },
        _ => ProbeSite { binary: node.binary.clone(), symbol: function.into(), offset },
    }
}

impl Injector {
    pub fn start(faults: &[ResolvedFault], nodes: &[NodeInfo]) -> Result<Injector> {
        if faults.len() > 64 {
            bail!("a schedule holds at most 64 faults");
        }
        let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = bpf::InjectorSkelBuilder::default().open(storage).context("opening the injector")?;
        open.maps.rodata_data.as_deref_mut().context("injector has no rodata")?.nfaults = faults.len() as u32;
        let skel = open.load().context("loading the injector's BPF programs")?;
        let (tx, events) = unbounded();
        let mut builder = RingBufferBuilder::new();
        builder.add(&skel.maps.events, move |data: &[u8]| {
            if data.len() >= std::mem::size_of::<inj_event>() {
                // SAFETY: length checked; inj_event is plain integers.
                let e: inj_event = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
                let _ = tx.send(InjEvent { ts_ns: e.ts_ns, fired: e.kind == 1, fault: e.fault as usize, pid: e.pid, tid: e.tid, probe: e.probe, step: e.step });
            }
            0
        })?;
        let ring = builder.build()?;
        let mut inj = Injector { ring, events, skel, _uprobes: Vec::new(), tc_hooks: Vec::new(), probes: Vec::new(), nfaults: faults.len() };
        inj.load_schedule(faults, nodes)?;
        inj.skel.attach().context("attaching the injector's process hooks")?;
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

    fn load_schedule(&mut self, faults: &[ResolvedFault], nodes: &[NodeInfo]) -> Result<()> {
        let mut next_slot = 0u32;
        for (i, rf) in faults.iter().enumerate() {
            let f = &rf.fault;
            if f.after_functions.len() > 8 {
                bail!("fault {}: at most 8 after_functions", i + 1);
            }
            let mut v = inj_fault { kind: kind_code(f.kind), node: rf.node_index as u32, signal: rf.signal, nfuncs: f.after_functions.len() as u32, ..Default::default() };
            let node = &nodes[rf.node_index];
            for (j, func) in f.after_functions.iter().enumerate() {
                let offset = if j + 1 == f.after_functions.len() { f.offset.unwrap_or(0) } else { 0 };
                v.probes[j] = self.probe_id(probe_site(func, node, offset));
            }
            if f.kind == FaultKind::Partition {
                if next_slot as usize >= 8 {
                    bail!("a schedule holds at most 8 partitions");
                }
                v.partition = next_slot;
                v.duration_ns = f.duration_ms.unwrap_or(0) * 1_000_000;
                self.write_partition(next_slot, rf, nodes)?;
                next_slot += 1;
            }
            // SAFETY: inj_fault is a repr(C) struct of integers.
            let bytes = unsafe { std::slice::from_raw_parts((&v as *const inj_fault).cast::<u8>(), std::mem::size_of::<inj_fault>()) };
            self.skel.maps.faults.update(&(i as u32).to_ne_bytes(), bytes, MapFlags::ANY)?;
        }
        Ok(())
    }

    fn write_partition(&self, slot: u32, rf: &ResolvedFault, nodes: &[NodeInfo]) -> Result<()> {
        let addr = |i: usize| ipv4(nodes[i].address.as_deref().unwrap_or_default());
        let mut p = inj_partition { node_addr: addr(rf.node_index)?, npeers: rf.peer_indexes.len() as u32, ..Default::default() };
        p.direction = match rf.fault.direction.unwrap_or_default() {
            Direction::Both => 0,
            Direction::Out => 1,
            Direction::In => 2,
        };
        for (k, &peer) in rf.peer_indexes.iter().take(8).enumerate() {
            p.peers[k] = addr(peer)?;
        }
        // SAFETY: inj_partition is a repr(C) struct of integers.
        let bytes = unsafe { std::slice::from_raw_parts((&p as *const inj_partition).cast::<u8>(), std::mem::size_of::<inj_partition>()) };
        self.skel.maps.partitions.update(&slot.to_ne_bytes(), bytes, MapFlags::ANY)?;
        Ok(())
    }

    fn attach_probes(&mut self) -> Result<()> {
        for (id, site) in self.probes.clone().iter().enumerate() {
            let opts = UprobeOpts { cookie: id as u64, func_name: Some(site.symbol.clone()), ..Default::default() };
            let link = match self.skel.progs.context_probe.attach_uprobe_with_opts(-1, &site.binary, site.offset as usize, opts) {
                Ok(link) => link,
                // libbpf looks names up in .symtab and .dynsym only; a Go function is in .gopclntab
                Err(e) => match crate::binary::go_function_offset(&site.binary, &site.symbol).ok().flatten() {
                    Some(entry) => {
                        let opts = UprobeOpts { cookie: id as u64, ..Default::default() };
                        self.skel.progs.context_probe.attach_uprobe_with_opts(-1, &site.binary, (entry + site.offset) as usize, opts)
                    }
                    None => Err(e),
                }
                .with_context(|| {
                    format!("context probe {}:{}+{}: cannot attach (is the symbol in the binary?)", site.binary.display(), site.symbol, site.offset)
                })?,
            };
            self._uprobes.push(link);
        }
        Ok(())
    }

    fn attach_partition_filters(&mut self, faults: &[ResolvedFault], nodes: &[NodeInfo]) -> Result<()> {
        if !faults.iter().any(|f| f.fault.kind == FaultKind::Partition) {
            return Ok(());
        }
        for node in nodes {
            let Some(veth) = &node.host_veth else { continue };
            let ifindex = nix::net::if_::if_nametoindex(veth.as_str()).with_context(|| format!("interface {veth}"))?;
            let mut hook = TcHookBuilder::new(self.skel.progs.partition_filter.as_fd())
                .ifindex(ifindex as i32)
                .replace(true)
                .handle(1)
                .priority(1)
                .hook(TC_INGRESS);
            hook.create().with_context(|| format!("clsact qdisc on {veth}"))?;
            hook.attach().with_context(|| format!("partition filter on {veth}"))?;
            self.tc_hooks.push(hook);
        }
        Ok(())
    }

    /// Makes `pid` (and its future children) count as node `node`.
    pub fn set_node(&self, pid: u32, node: usize) -> Result<()> {
        self.skel.maps.node_of.update(&pid.to_ne_bytes(), &(node as u32).to_ne_bytes(), MapFlags::ANY)?;
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
        let raw = self.skel.maps.faults.lookup(&key, MapFlags::ANY)?.context("fault not loaded")?;
        // SAFETY: the value is an inj_fault written by load_schedule.
        let f: inj_fault = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
        let slot = f.partition.to_ne_bytes();
        let raw = self.skel.maps.partitions.lookup(&slot, MapFlags::ANY)?.context("partition not loaded")?;
        // SAFETY: the value is an inj_partition written by write_partition.
        let mut p: inj_partition = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
        p.until_ns = monotonic_ns() + duration.as_nanos() as u64;
        // SAFETY: inj_partition is a repr(C) struct of integers.
        let bytes = unsafe { std::slice::from_raw_parts((&p as *const inj_partition).cast::<u8>(), std::mem::size_of::<inj_partition>()) };
        self.skel.maps.partitions.update(&slot, bytes, MapFlags::ANY)?;
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
    let raw = map.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?.context("injector state missing")?;
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
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64).unwrap_or(0)
}

pub fn boottime_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64).unwrap_or(0)
}

/// Probe ids by site, for reports.
pub fn probe_names(probes: &[ProbeSite]) -> HashMap<u32, String> {
    probes.iter().enumerate().map(|(i, p)| (i as u32, if p.offset == 0 { p.symbol.clone() } else { format!("{}+{}", p.symbol, p.offset) })).collect()
}
