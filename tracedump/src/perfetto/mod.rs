//! Dumps as a Perfetto trace: the protobuf format that Perfetto's UI (ui.perfetto.dev, "Open
//! trace file") and trace_processor open, so a window of events can be looked at on a
//! timeline. Tracks: one per host, and per process and thread under it (TrackDescriptor with
//! ProcessDescriptor / ThreadDescriptor, the thread's parent its process, the process's its
//! host). Failed syscalls, function hits, exits and kills are instant events on their
//! thread's track; pauses are slices there; network gaps are slices on a track per
//! connection under the process; each dump is an instant on its host's track. What the
//! events say is in their debug annotations (the arguments Perfetto shows for a selected
//! event). A causal chain (the reproducer's, from a fault to the failure) is drawn as flow
//! arrows between the chain's events ([`write_with_flows`]): one flow id per chain, which
//! passes through every event but the last and ends there.
//!
//! Times are wall-clock time, the clock several dumps merge on ([`crate::merge`]): packets
//! are stamped with CLOCK_REALTIME, and one clock snapshot at the start says that the trace
//! clock reads the same, so the UI shows wall-clock times. An interval still going on when
//! its dump was taken ends at that dump's time. The same event seen in two dumps of one
//! host and boot (overlapping windows) is written once, known by its boot-time stamp; of an
//! interval seen twice, the longer stays (the one that had ended).
mod flows;
mod marks;
mod proto;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;

use anyhow::Result;
use prost::Message;

use crate::atomic;
use crate::dump::DumpMeta;
use crate::event::{Event, NetworkGap, State, What};
use crate::merge::{Merged, MergedEvent};
use crate::process::ProcInfo;
use flows::{flows_of, Flows};
use marks::{function_mark, gap_mark, process_mark, short_io_mark, syscall_mark};
use proto::{
    Clock, ClockSnapshot, DebugAnnotation, ProcessDescriptor, ThreadDescriptor, TracePacket, TrackDescriptor,
    TrackEvent, CLOCK_BOOTTIME, CLOCK_REALTIME, SEQ_INCREMENTAL_STATE_CLEARED, TYPE_INSTANT,
    TYPE_SLICE_BEGIN, TYPE_SLICE_END,
};

/// Every packet is on one sequence (one writer, in Perfetto's terms).
const SEQUENCE: u32 = 1;

/// What an export holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// events of the dumps written (instants and slices), duplicates left out
    pub events: usize,
    pub hosts: usize,
    pub processes: usize,
    pub threads: usize,
}

/// Writes `merged` as a Perfetto trace to `path`, atomically and with the dumps' own mode
/// (0600: it holds what they hold).
pub fn write(merged: &Merged, path: &Path) -> Result<Summary> {
    write_with_flows(merged, path, &[])
}

/// Writes `merged` like [`write`], with each of `chains` (indexes into `merged.events`, in
/// the order the arrows go) drawn as flow arrows from event to event.
pub fn write_with_flows(merged: &Merged, path: &Path, chains: &[Vec<usize>]) -> Result<Summary> {
    let (packets, summary) = packets(merged, chains);
    atomic::write_with(path, atomic::PRIVATE, |w| {
        for p in &packets {
            write_packet(w, p)?;
        }
        Ok(())
    })?;
    Ok(summary)
}

/// The trace as bytes (what [`write`] writes).
pub fn encode(merged: &Merged) -> Result<(Vec<u8>, Summary)> {
    encode_with_flows(merged, &[])
}

/// The trace with flows as bytes (what [`write_with_flows`] writes).
pub fn encode_with_flows(merged: &Merged, chains: &[Vec<usize>]) -> Result<(Vec<u8>, Summary)> {
    let (packets, summary) = packets(merged, chains);
    let mut out = Vec::new();
    for p in &packets {
        write_packet(&mut out, p)?;
    }
    Ok((out, summary))
}

/// A trace is a `Trace` message: its packets as field 1, one after another, so each can
/// be written as it comes.
fn write_packet(w: &mut dyn Write, p: &TracePacket) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(p.encoded_len() + 16);
    prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut buf);
    p.encode_length_delimited(&mut buf)
        .map_err(std::io::Error::other)?;
    w.write_all(&buf)
}

fn packets(merged: &Merged, chains: &[Vec<usize>]) -> (Vec<TracePacket>, Summary) {
    let mut b = Builder {
        flows: flows_of(chains),
        ..Default::default()
    };
    for d in &merged.dumps {
        let host = b.host_track(&d.meta);
        b.dump_taken(host, d.taken_ns(), &d.path, &d.meta);
    }
    for (i, e) in merged.events.iter().enumerate() {
        b.event(merged, i, e);
    }
    b.finish(merged)
}

/// A debug annotation's value.
enum Value {
    Str(String),
    Int(i64),
    Uint(u64),
    Bool(bool),
}

fn arg(name: &str, value: Value) -> DebugAnnotation {
    let mut a = DebugAnnotation {
        name: Some(name.to_string()),
        ..Default::default()
    };
    match value {
        Value::Str(s) => a.string_value = Some(s),
        Value::Int(v) => a.int_value = Some(v),
        Value::Uint(v) => a.uint_value = Some(v),
        Value::Bool(v) => a.bool_value = Some(v),
    }
    a
}

/// An event of the trace before it becomes packets.
struct Mark {
    track: u64,
    at_ns: u64,
    /// None: an instant
    end_ns: Option<u64>,
    name: String,
    category: &'static str,
    args: Vec<DebugAnnotation>,
    flows: Flows,
}

#[derive(Default)]
struct Builder {
    next_uuid: u64,
    descriptors: Vec<TrackDescriptor>,
    /// (host, boot id) -> track
    hosts: HashMap<(String, String), u64>,
    /// (host track, pid) -> track
    processes: HashMap<(u64, u32), u64>,
    /// (process track, tid) -> track
    threads: HashMap<(u64, u32), u64>,
    /// (process track, "local -> peer") -> track
    connections: HashMap<(u64, String), u64>,
    /// host track of each dump, by index
    dump_hosts: Vec<u64>,
    instants: Vec<Mark>,
    seen_instants: HashSet<(u64, u64, String)>,
    /// (track, start as CLOCK_BOOTTIME) -> the slice; a second one of the same start is the
    /// same interval
    slices: HashMap<(u64, u64), Mark>,
    /// the flow arrows to draw, by event index
    flows: HashMap<usize, Flows>,
}

impl Builder {
    fn new_track(&mut self, d: TrackDescriptor) -> u64 {
        self.next_uuid += 1;
        let uuid = self.next_uuid;
        self.descriptors.push(TrackDescriptor {
            uuid: Some(uuid),
            ..d
        });
        uuid
    }

    /// The track of the host that took `meta`'s dump (one per host and boot).
    fn host_track(&mut self, meta: &DumpMeta) -> u64 {
        let key = (meta.host.clone(), meta.boot_id.clone());
        if let Some(&uuid) = self.hosts.get(&key) {
            self.dump_hosts.push(uuid);
            return uuid;
        }
        let host = if meta.host.is_empty() {
            "unknown host"
        } else {
            &meta.host
        };
        let rebooted = self.hosts.keys().any(|(h, _)| *h == meta.host);
        let name = if rebooted {
            let boot: String = meta.boot_id.chars().take(8).collect();
            format!("{host} (boot {boot})")
        } else {
            host.to_string()
        };
        let uuid = self.new_track(TrackDescriptor {
            name: Some(name),
            ..Default::default()
        });
        self.hosts.insert(key, uuid);
        self.dump_hosts.push(uuid);
        uuid
    }

    fn process_track(&mut self, host: u64, meta: &DumpMeta, e: &Event) -> u64 {
        if let Some(&uuid) = self.processes.get(&(host, e.pid)) {
            return uuid;
        }
        // the last entry of a pid is its latest process
        let info = meta.processes.iter().rev().find(|p| p.pid == e.pid);
        let mut name = info.map(|p| p.comm.clone()).unwrap_or_else(|| e.comm.to_string());
        let mut labels = vec![format!("host {}", meta.host)];
        if let Some(container) = info.and_then(ProcInfo::container_label) {
            name = format!("{name} [{container}]");
            labels.push(container);
        }
        if let Some(ns_pid) = info.and_then(|p| p.ns_pid) {
            labels.push(format!("pid {ns_pid} in its namespace"));
        }
        if let Some(cgroup) = info.and_then(|p| p.cgroup.as_ref()) {
            labels.push(format!("cgroup {cgroup}"));
        }
        let uuid = self.new_track(TrackDescriptor {
            parent_uuid: Some(host),
            process: Some(ProcessDescriptor {
                pid: Some(e.pid as i32),
                cmdline: info.and_then(|p| p.cmdline.clone()).unwrap_or_default(),
                process_name: Some(name),
                process_labels: labels,
            }),
            ..Default::default()
        });
        self.processes.insert((host, e.pid), uuid);
        uuid
    }

    fn thread_track(&mut self, process: u64, e: &Event) -> u64 {
        if let Some(&uuid) = self.threads.get(&(process, e.tid)) {
            return uuid;
        }
        let uuid = self.new_track(TrackDescriptor {
            parent_uuid: Some(process),
            thread: Some(ThreadDescriptor {
                pid: Some(e.pid as i32),
                tid: Some(e.tid as i64),
                thread_name: Some(e.comm.to_string()),
            }),
            ..Default::default()
        });
        self.threads.insert((process, e.tid), uuid);
        uuid
    }

    fn connection_track(&mut self, process: u64, g: &NetworkGap) -> u64 {
        let or_unknown = |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string()).unwrap_or("?".into());
        let name = format!(
            "{} {} -> {}",
            crate::addr::protocol_name(g.protocol),
            or_unknown(g.local),
            or_unknown(g.peer)
        );
        if let Some(&uuid) = self.connections.get(&(process, name.clone())) {
            return uuid;
        }
        let uuid = self.new_track(TrackDescriptor {
            parent_uuid: Some(process),
            name: Some(name.clone()),
            ..Default::default()
        });
        self.connections.insert((process, name), uuid);
        uuid
    }

    /// Adds an instant; `same_ns` tells it apart from others of its track and name (an
    /// event's CLOCK_BOOTTIME stamp: the one thing two dumps of a host say alike, as each
    /// maps it to wall time with its own clock reading).
    fn instant(&mut self, m: Mark, same_ns: u64) {
        if self.seen_instants.insert((m.track, same_ns, m.name.clone())) {
            self.instants.push(m);
        }
    }

    /// Adds a slice; one of the same track and `same_ns` (as for instants) is the same
    /// interval, and the one that lasted longer stays.
    fn slice(&mut self, m: Mark, same_ns: u64) {
        let key = (m.track, same_ns);
        let longer = self.slices.get(&key).is_none_or(|old| old.end_ns < m.end_ns);
        if longer {
            self.slices.insert(key, m);
        }
    }

    fn dump_taken(&mut self, host: u64, at_ns: u64, path: &Path, meta: &DumpMeta) {
        let file = path.file_name().unwrap_or(path.as_os_str()).to_string_lossy();
        let mut args = vec![
            arg("file", Value::Str(file.into_owned())),
            arg("events", Value::Uint(meta.event_count)),
            arg("lost_events", Value::Uint(meta.counters.lost_events())),
        ];
        let name = match &meta.trigger {
            Some(t) => {
                args.push(arg("trigger", Value::Str(t.rule.clone())));
                args.push(arg("trigger_event", Value::Str(t.event.clone())));
                format!("dump (trigger {})", t.rule)
            }
            None => "dump".to_string(),
        };
        self.instant(
            Mark {
                track: host,
                at_ns,
                end_ns: None,
                name,
                category: "dump",
                args,
                flows: Flows::default(),
            },
            at_ns,
        );
    }

    fn event(&mut self, merged: &Merged, index: usize, m: &MergedEvent) {
        let flows = self.flows.remove(&index).unwrap_or_default();
        self.event_mark(merged, m, flows);
    }

    fn event_mark(&mut self, merged: &Merged, m: &MergedEvent, flows: Flows) {
        let meta = &merged.dumps[m.dump].meta;
        let host = self.dump_hosts[m.dump];
        let e = &m.event;
        let same_ns = e.ts_ns;
        let process = self.process_track(host, meta, e);
        match &e.what {
            What::NetworkGap(g) => {
                let track = self.connection_track(process, g);
                let end_ns = interval_end(merged, m, g.ongoing, g.duration_ms);
                self.slice(with(gap_mark(track, m.at_ns, end_ns, g), flows), same_ns);
            }
            What::SyscallFailure(s) => {
                let track = self.thread_track(process, e);
                self.instant(with(syscall_mark(track, m.at_ns, s), flows), same_ns);
            }
            What::ShortIo(io) => {
                let track = self.thread_track(process, e);
                self.instant(with(short_io_mark(track, m.at_ns, io), flows), same_ns);
            }
            What::Function(f) => {
                let track = self.thread_track(process, e);
                self.instant(with(function_mark(track, m.at_ns, f), flows), same_ns);
            }
            What::ProcessState(p) => {
                let track = self.thread_track(process, e);
                match p.state {
                    State::Paused { duration_ms, .. } => {
                        let end_ns = interval_end(merged, m, p.ongoing, duration_ms);
                        let mark = process_mark(track, m.at_ns, Some(end_ns), p);
                        self.slice(with(mark, flows), same_ns);
                    }
                    State::Exited { .. } | State::Killed { .. } => {
                        self.instant(with(process_mark(track, m.at_ns, None, p), flows), same_ns)
                    }
                }
            }
        }
    }

    /// The packets: the clock snapshot, every track, then the events in time order.
    fn finish(self, merged: &Merged) -> (Vec<TracePacket>, Summary) {
        let summary = Summary {
            events: self.instants.iter().filter(|m| m.category != "dump").count() + self.slices.len(),
            hosts: self.hosts.len(),
            processes: self.processes.len(),
            threads: self.threads.len(),
        };
        let start = merged
            .events
            .first()
            .map(|e| e.at_ns)
            .or(merged.dumps.iter().map(|d| d.taken_ns()).min())
            .unwrap_or(0);
        let mut out = vec![clock_snapshot(start)];
        out.extend(self.descriptors.into_iter().map(|d| TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE),
            track_descriptor: Some(d),
            ..Default::default()
        }));
        // at one time on one track: a slice ends before the next begins, and an instant at
        // a slice's start falls inside it
        const END: u8 = 0;
        const BEGIN: u8 = 1;
        const INSTANT: u8 = 2;
        let mut timed: Vec<(u64, u8, TrackEvent)> = Vec::new();
        for m in self.slices.into_values() {
            let end_ns = m.end_ns.unwrap_or(m.at_ns);
            timed.push((
                end_ns,
                END,
                TrackEvent {
                    r#type: Some(TYPE_SLICE_END),
                    track_uuid: Some(m.track),
                    ..Default::default()
                },
            ));
            timed.push((m.at_ns, BEGIN, track_event(TYPE_SLICE_BEGIN, m)));
        }
        for m in self.instants {
            timed.push((m.at_ns, INSTANT, track_event(TYPE_INSTANT, m)));
        }
        timed.sort_by_key(|(at_ns, rank, e)| (*at_ns, *rank, e.track_uuid));
        out.extend(timed.into_iter().map(|(at_ns, _, e)| TracePacket {
            timestamp: Some(at_ns),
            timestamp_clock_id: Some(CLOCK_REALTIME),
            trusted_packet_sequence_id: Some(SEQUENCE),
            track_event: Some(e),
            ..Default::default()
        }));
        (out, summary)
    }
}

/// The first packet: starts the sequence, and maps the packets' clock (CLOCK_REALTIME) one
/// to one onto the trace clock (Perfetto's default, CLOCK_BOOTTIME of the host that records,
/// here the wall clock of the dumps).
fn clock_snapshot(at_ns: u64) -> TracePacket {
    let clock = |id| Clock {
        clock_id: Some(id),
        timestamp: Some(at_ns),
    };
    TracePacket {
        trusted_packet_sequence_id: Some(SEQUENCE),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        clock_snapshot: Some(ClockSnapshot {
            clocks: vec![clock(CLOCK_REALTIME), clock(CLOCK_BOOTTIME)],
            primary_trace_clock: Some(CLOCK_BOOTTIME as i32),
        }),
        ..Default::default()
    }
}

fn track_event(kind: i32, m: Mark) -> TrackEvent {
    TrackEvent {
        r#type: Some(kind),
        track_uuid: Some(m.track),
        name: Some(m.name),
        categories: vec![m.category.to_string()],
        debug_annotations: m.args,
        flow_ids: m.flows.through,
        terminating_flow_ids: m.flows.ending,
    }
}

/// `m` with the flow arrows through it.
fn with(m: Mark, flows: Flows) -> Mark {
    Mark { flows, ..m }
}

/// When a gap or pause ended: an ongoing one at its dump's time, else after its span.
fn interval_end(merged: &Merged, m: &MergedEvent, ongoing: bool, duration_ms: u64) -> u64 {
    if ongoing {
        return merged.dumps[m.dump].taken_ns().max(m.at_ns);
    }
    m.at_ns + m.span_ns.unwrap_or(duration_ms * 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::ClockPair;
    use crate::event::{PauseCause, ProcessChange, Sender, SyscallFailure};
    use crate::merge::MergedDump;
    use crate::process::ProcInfo;

    /// The packets of a trace, read back with the writer's own message types (the system
    /// tests read it with Perfetto's schema).
    #[derive(Clone, PartialEq, Message)]
    struct Trace {
        #[prost(message, repeated, tag = "1")]
        packet: Vec<TracePacket>,
    }

    const S: u64 = 1_000_000_000;

    fn dump(host: &str, taken_ns: u64) -> MergedDump {
        MergedDump {
            path: format!("/d/{host}-{taken_ns}.tdump").into(),
            meta: DumpMeta {
                host: host.into(),
                boot_id: "b".into(),
                clock: ClockPair {
                    boottime_ns: 1,
                    monotonic_ns: 1,
                    realtime_ns: taken_ns,
                },
                processes: vec![ProcInfo {
                    pid: 10,
                    comm: "server".into(),
                    cmdline: Some(vec!["server".into(), "--port=1".into()]),
                    container_runtime: Some("docker".into()),
                    container_id: Some("0123456789abcdef0123".into()),
                    ns_pid: Some(1),
                    ..ProcInfo::default()
                }],
                ..DumpMeta::default()
            },
        }
    }

    /// An event at boot time `ts_ns`; each dump reads the clocks its own way, the second one
    /// maps boot time to wall time 7 ns later than the first.
    fn event(dump: usize, ts_ns: u64, tid: u32, span_ns: Option<u64>, what: What) -> MergedEvent {
        let realtime_ns = ts_ns + 7 * dump as u64;
        MergedEvent {
            at_ns: realtime_ns,
            dump,
            span_ns,
            event: Event {
                ts_ns,
                realtime_ns,
                host: "".into(),
                pid: 10,
                tid,
                comm: format!("t{tid}").into(),
                what,
            },
        }
    }

    fn pause(ongoing: bool, duration_ms: u64) -> What {
        What::ProcessState(ProcessChange {
            state: State::Paused {
                cause: PauseCause::Stopped,
                duration_ms,
            },
            signal: Some(19),
            sender: Some(Sender {
                pid: 1,
                comm: Some("kill".into()),
            }),
            ongoing,
        })
    }

    fn sample() -> Merged {
        let failure = What::SyscallFailure(SyscallFailure {
            syscall: "openat".into(),
            ret: -2,
            errno: Some("ENOENT".into()),
            fd: None,
            path: Some("/etc/x".into()),
            peer: None,
        });
        let gap = |ongoing| {
            What::NetworkGap(NetworkGap {
                local: Some("10.0.0.1:80".parse().unwrap()),
                peer: Some("10.0.0.2:5000".parse().unwrap()),
                duration_ms: 1500,
                packets: 4,
                ongoing,
                busy_ms: 0,
                busy_packets: 0,
                protocol: 6,
                sent: None,
                sent_before: None,
            })
        };
        let killed = What::ProcessState(ProcessChange {
            state: State::Killed { core_dumped: false },
            signal: Some(9),
            sender: None,
            ongoing: false,
        });
        Merged {
            // two dumps of one host: the second's window holds the first's events again
            dumps: vec![dump("h", 20 * S), dump("h", 30 * S)],
            events: vec![
                event(0, 10 * S, 11, None, failure.clone()),
                event(1, 10 * S, 11, None, failure),
                event(0, 12 * S, 10, Some(8 * S), pause(true, 8000)),
                event(1, 12 * S, 10, Some(9 * S + 5), pause(false, 9000)),
                event(0, 14 * S, 10, Some(1_500_000_123), gap(false)),
                event(1, 21 * S, 10, None, killed),
                event(1, 25 * S, 10, Some(5 * S), gap(true)),
            ],
        }
    }

    #[test]
    fn tracks_nest_and_events_land_on_them_in_time_order() {
        let (bytes, summary) = encode(&sample()).unwrap();
        assert_eq!(
            summary,
            Summary {
                events: 5,
                hosts: 1,
                processes: 1,
                threads: 2
            },
            "the failure and the pause seen twice are written once"
        );
        let packets = Trace::decode(bytes.as_slice()).unwrap().packet;
        let first = &packets[0];
        assert_eq!(first.sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
        assert_eq!(first.clock_snapshot.as_ref().unwrap().clocks.len(), 2);
        let tracks: Vec<&TrackDescriptor> = packets
            .iter()
            .filter_map(|p| p.track_descriptor.as_ref())
            .collect();
        let host = tracks.iter().find(|t| t.name.as_deref() == Some("h")).unwrap();
        let process = tracks.iter().find(|t| t.process.is_some()).unwrap();
        assert_eq!(process.parent_uuid, host.uuid);
        let p = process.process.as_ref().unwrap();
        assert_eq!(
            (p.pid, p.process_name.as_deref()),
            (Some(10), Some("server [docker 0123456789ab]"))
        );
        assert_eq!(p.cmdline, ["server", "--port=1"]);
        assert_eq!(
            p.process_labels,
            ["host h", "docker 0123456789ab", "pid 1 in its namespace"]
        );
        let thread = |tid| {
            tracks
                .iter()
                .find(|t| t.thread.as_ref().is_some_and(|th| th.tid == Some(tid)))
                .unwrap()
        };
        assert_eq!(thread(11).parent_uuid, process.uuid);
        assert_eq!(
            thread(11).thread.as_ref().unwrap().thread_name.as_deref(),
            Some("t11")
        );
        let conn = tracks
            .iter()
            .find(|t| t.name.as_deref() == Some("tcp 10.0.0.1:80 -> 10.0.0.2:5000"))
            .unwrap();
        assert_eq!(conn.parent_uuid, process.uuid);

        let events: Vec<(u64, i32, u64, Option<&str>)> = packets
            .iter()
            .filter_map(|p| {
                let e = p.track_event.as_ref()?;
                assert_eq!(p.timestamp_clock_id, Some(CLOCK_REALTIME));
                Some((p.timestamp?, e.r#type?, e.track_uuid?, e.name.as_deref()))
            })
            .collect();
        let (t10, t11, host, conn) = (
            thread(10).uuid.unwrap(),
            thread(11).uuid.unwrap(),
            host.uuid.unwrap(),
            conn.uuid.unwrap(),
        );
        assert_eq!(
            events,
            vec![
                (10 * S, TYPE_INSTANT, t11, Some("openat ENOENT")),
                // the pause as it ended (second dump), not as it went on at the first
                (12 * S + 7, TYPE_SLICE_BEGIN, t10, Some("paused (stopped)")),
                (14 * S, TYPE_SLICE_BEGIN, conn, Some("network gap")),
                (15 * S + 500_000_123, TYPE_SLICE_END, conn, None),
                (20 * S, TYPE_INSTANT, host, Some("dump")),
                (21 * S + 7, TYPE_INSTANT, t10, Some("killed by SIGKILL")),
                (21 * S + 12, TYPE_SLICE_END, t10, None),
                (25 * S + 7, TYPE_SLICE_BEGIN, conn, Some("network gap")),
                // still silent at the second dump: ends at its time
                (30 * S, TYPE_SLICE_END, conn, None),
                (30 * S, TYPE_INSTANT, host, Some("dump")),
            ]
        );
        let failure = packets
            .iter()
            .filter_map(|p| p.track_event.as_ref())
            .find(|e| e.name.as_deref() == Some("openat ENOENT"))
            .unwrap();
        let args: Vec<(&str, String)> = failure
            .debug_annotations
            .iter()
            .map(|a| {
                let v = a
                    .string_value
                    .clone()
                    .or(a.int_value.map(|v| v.to_string()))
                    .unwrap_or_default();
                (a.name.as_deref().unwrap(), v)
            })
            .collect();
        assert_eq!(
            args,
            vec![
                ("syscall", "openat".into()),
                ("ret", "-2".into()),
                ("errno", "ENOENT".into()),
                ("path", "/etc/x".into())
            ]
        );
    }

    #[test]
    fn a_chain_is_one_flow_through_its_events_ending_at_the_last() {
        // the failure (event 0), the pause as it ended (3), the kill (5)
        let (bytes, _) = encode_with_flows(&sample(), &[vec![0, 3, 5], vec![4]]).unwrap();
        let packets = Trace::decode(bytes.as_slice()).unwrap().packet;
        let flows: Vec<(&str, Vec<u64>, Vec<u64>)> = packets
            .iter()
            .filter_map(|p| p.track_event.as_ref())
            .filter(|e| !e.flow_ids.is_empty() || !e.terminating_flow_ids.is_empty())
            .map(|e| {
                let name = e.name.as_deref().unwrap();
                (name, e.flow_ids.clone(), e.terminating_flow_ids.clone())
            })
            .collect();
        assert_eq!(
            flows,
            vec![
                ("openat ENOENT", vec![1], vec![]),
                ("paused (stopped)", vec![1], vec![]),
                ("killed by SIGKILL", vec![], vec![1]),
            ],
            "a chain of one event draws no arrow"
        );
        // unpacked, as Perfetto's schema declares the fields: one key per id
        let failure = packets
            .iter()
            .filter_map(|p| p.track_event.as_ref())
            .find(|e| !e.flow_ids.is_empty())
            .unwrap();
        let mut buf = Vec::new();
        failure.encode(&mut buf).unwrap();
        let key = (47 << 3) | 1; // field 47, wire type fixed64
        assert!(buf
            .windows(2)
            .any(|w| w == [(key & 0x7f) as u8 | 0x80, (key >> 7) as u8]));
    }
}
