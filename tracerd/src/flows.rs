//! The user-space half of datagram flows (bpf/tracer/flows.h): the silences still going on
//! when a dump is taken, and the table's upkeep. The kernel records a flow's silence when the
//! datagram that ends it arrives; a flow still silent, or whose process ended while it was, is
//! found here. Flows of ended processes, and flows idle (nothing sent, nothing received) for
//! `FLOW_IDLE`, leave the table, so that a process's share of it goes to its live peers; one
//! that leaves while silent after a steady stream goes into the window as that silence.
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use libbpf_rs::{MapCore, MapFlags};

use tracedump::abi::{bytes_of, c_bytes, comm_bytes, read_struct};
use tracedump::addr::{decode_addr, encode_addr, FlowTrailer, ENCODED_ADDR_LEN};
use tracedump::dump::FlowInfo;
use tracedump::record::{Payload, Record};

use crate::bpf::types::{tracerd_addr, tracerd_flow, tracerd_flow_key};
use crate::engine::Engine;
use crate::mapdump::for_each_entry;
use crate::recorder::{busy_ms, Recorder};

/// How long a flow may carry nothing before it leaves the table.
pub const FLOW_IDLE: Duration = Duration::from_secs(600);
/// How often the table is walked for flows to remove.
pub const EXPIRE_EVERY: Duration = Duration::from_secs(10);
/// Datagrams since a flow's previous silence for its next silence to be a gap: the kernel's
/// STEADY_PACKETS (bpf/tracer/flows.h).
const STEADY_PACKETS: u32 = 2;

/// One entry of the kernel's flow table.
pub struct Flow {
    pub key: tracerd_flow_key,
    pub flow: tracerd_flow,
}

impl Engine {
    /// Every flow of the kernel's table now.
    pub fn flows(&self) -> Result<Vec<Flow>> {
        let mut out = Vec::new();
        for_each_entry(&self.skel().maps.flows, |k, v| {
            if let (Some(key), Some(flow)) = (read_struct(k), read_struct(v)) {
                out.push(Flow { key, flow });
            }
        })?;
        Ok(out)
    }

    /// Removes `gone` from the kernel's table and their processes' counts.
    fn forget_flows(&self, gone: &[Flow]) -> Result<()> {
        let maps = &self.skel().maps;
        let mut per_process: Vec<(u32, u32)> = Vec::new();
        for f in gone {
            if maps.flows.delete(bytes_of(&f.key)).is_err() {
                continue; // removed meanwhile
            }
            match per_process.iter_mut().find(|(tgid, _)| *tgid == f.key.tgid) {
                Some((_, n)) => *n += 1,
                None => per_process.push((f.key.tgid, 1)),
            }
        }
        for (tgid, removed) in per_process {
            let key = tgid.to_ne_bytes();
            let held = maps
                .flow_counts
                .lookup(&key, MapFlags::ANY)?
                .and_then(|v| v.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes));
            let Some(held) = held else { continue };
            // a flow started meanwhile may be undercounted: the map's size still bounds the table
            let left = held.saturating_sub(removed);
            if left == 0 {
                let _ = maps.flow_counts.delete(&key);
            } else {
                maps.flow_counts
                    .update(&key, &left.to_ne_bytes(), MapFlags::ANY)?;
            }
        }
        Ok(())
    }

    /// Removes the flows of ended processes and those idle for `FLOW_IDLE`; one that was
    /// silent after a steady stream goes into the window as that silence.
    pub fn expire_flows(&self, rec: &mut Recorder, gap_ms: u64, now_boot: u64) -> Result<()> {
        let idle_ns = FLOW_IDLE.as_nanos() as u64;
        let mut gone = Vec::new();
        for f in self.flows()? {
            let end = match process_end(rec, f.key.tgid) {
                Liveness::Running => {
                    let last = f.flow.last_rx_ns.max(f.flow.last_tx_ns);
                    if now_boot.saturating_sub(last) < idle_ns {
                        continue;
                    }
                    Some(now_boot)
                }
                Liveness::Ended(at) => at,
            };
            if let Some(r) = end.and_then(|end| silence_record(rec, &f, gap_ms, end, false)) {
                rec.ring.push(r);
            }
            gone.push(f);
        }
        self.forget_flows(&gone)
    }
}

enum Liveness {
    Running,
    /// when it ended, if the process table saw it
    Ended(Option<u64>),
}

fn process_end(rec: &Recorder, tgid: u32) -> Liveness {
    if let Some(exit) = rec.procs.get(tgid).and_then(|p| p.exit_ns) {
        return Liveness::Ended(Some(exit));
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(tgid as i32), None) {
        Err(nix::errno::Errno::ESRCH) => Liveness::Ended(None),
        _ => Liveness::Running,
    }
}

/// The silence of `f` until `end_ns` as an ongoing gap record: when it lasted past `gap_ms`
/// after a steady stream, or (`every`: profiles) whenever the flow has received anything.
pub fn silence_record(rec: &mut Recorder, f: &Flow, gap_ms: u64, end_ns: u64, every: bool) -> Option<Record> {
    let c = &f.flow;
    let silent_ns = end_ns.checked_sub(c.last_rx_ns)?;
    let steady = c.busy_packets >= STEADY_PACKETS && silent_ns > gap_ms * 1_000_000;
    if c.last_rx_ns == 0 || !(steady || every) {
        return None;
    }
    let trailer = FlowTrailer {
        protocol: f.key.protocol.min(u16::MAX as u32) as u16,
        sent: c.sent_since_rx,
        sent_before: (c.sent - c.sent_since_rx as u64).min(u32::MAX as u64) as u32,
    };
    Some(Record {
        ts_ns: c.last_rx_ns,
        pid: f.key.tgid,
        tid: f.key.tgid,
        comm: comm_bytes(&c.comm),
        payload: Payload::NetworkGap {
            gap_ns: silent_ns,
            packets: c.packets,
            endpoints: rec.endpoints_blob(&c.local, &f.key.peer, Some(trailer)),
            ongoing: true,
            busy_ms: busy_ms(c.last_rx_ns.saturating_sub(c.busy_ns)),
            busy_packets: c.busy_packets.min(u16::MAX as u32) as u16,
        },
    })
}

/// Every flow of the kernel's table, as the dump describes it.
pub fn flow_table(engine: &Engine) -> Result<Vec<FlowInfo>> {
    let mut out: Vec<FlowInfo> = engine
        .flows()?
        .iter()
        .filter_map(|f| {
            let c = &f.flow;
            Some(FlowInfo {
                pid: f.key.tgid,
                comm: String::from_utf8_lossy(c_bytes(&c.comm, 0)).into_owned(),
                protocol: f.key.protocol.min(u16::MAX as u32) as u16,
                local: socket_addr(&c.local),
                peer: socket_addr(&f.key.peer)?,
                received: c.packets,
                sent: c.sent,
                last_received_ns: c.last_rx_ns,
                receiving_since_ns: if c.last_rx_ns > 0 { c.busy_ns } else { 0 },
                last_sent_ns: c.last_tx_ns,
                sending_since_ns: c.tx_busy_ns,
            })
        })
        .collect();
    out.sort_by_key(|f| (f.pid, f.protocol, f.peer));
    Ok(out)
}

fn socket_addr(a: &tracerd_addr) -> Option<SocketAddr> {
    let mut buf = [0u8; ENCODED_ADDR_LEN];
    encode_addr(a.family, a.port, &a.addr, &mut buf);
    decode_addr(&buf)
}

/// The flows still silent at `now_boot` (a dump's), each until now or its process's end.
pub fn ongoing_silences(
    engine: &Engine,
    rec: &mut Recorder,
    gap_ms: u64,
    every: bool,
    now_boot: u64,
) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for f in engine.flows()? {
        let end = match process_end(rec, f.key.tgid) {
            Liveness::Ended(Some(exit)) => exit.min(now_boot),
            _ => now_boot,
        };
        out.extend(silence_record(rec, &f, gap_ms, end, every));
    }
    Ok(out)
}
