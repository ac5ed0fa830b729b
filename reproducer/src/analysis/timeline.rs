//! The production timeline: the events of one or more tracerd dumps merged on one clock
//! (tracedump's merge: each dump's clock pair turns its boot-time stamps into wall-clock
//! time), each event tagged with the scenario node its process belongs to. Dumps of several
//! hosts are mapped to nodes each on its own (a pid names a process only within its dump),
//! so a fault in one host's dump and the symptom it caused in another's land on one timeline.
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use anyhow::{bail, Result};
use tracedump::dump::Interface;
use tracedump::event::{Event, What};
use tracedump::merge::{Merged, MergedDump};

use super::nodemap::NodeMap;
use crate::model::scenario::Scenario;

#[derive(Clone, Debug)]
pub struct TimedEvent {
    /// wall-clock nanoseconds (the dumps' common clock)
    pub at_ns: u64,
    pub node: Option<usize>,
    pub dump: usize,
    pub event: Event,
}

#[derive(Clone, Debug)]
pub struct DumpInfo {
    pub path: PathBuf,
    pub host: String,
    pub events: usize,
    pub mapped_processes: usize,
    pub processes: usize,
    /// the scenario nodes the dump's processes belong to (indexes, ascending)
    pub nodes: Vec<usize>,
    pub interfaces: Vec<Interface>,
    /// wall-clock time the dump was taken
    pub taken_ns: u64,
    pub lost_events: u64,
    /// pid -> wall-clock time its process started (exec or fork), from the dump's process table
    pub process_starts: HashMap<u32, u64>,
    /// pid -> its parent's pid, from the dump's process table (who forked a crash's helpers)
    pub parents: HashMap<u32, u32>,
    /// (node, wall-clock start of its first process in the dump), ascending by node: where
    /// the node's start-up began (the diagnosis tells start-up exits from later ones)
    pub node_starts: Vec<(usize, u64)>,
    /// the run directory the nodes' command lines name (`profile::workdir_of`): path
    /// signatures say `{workdir}` for it
    pub workdir: Option<String>,
}

/// A datagram flow of a dump's flow table (a process's UDP or raw IP traffic with one peer, as
/// tracerd held it when the dump was taken), on the wall clock, with its node.
#[derive(Clone, Debug, PartialEq)]
pub struct TimedFlow {
    pub node: Option<usize>,
    pub dump: usize,
    pub protocol: u16,
    pub peer: std::net::SocketAddr,
    /// from when to when it steadily received (no silence over the gap threshold), and sent;
    /// None when it never did
    pub receiving: Option<(u64, u64)>,
    pub sending: Option<(u64, u64)>,
}

#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub events: Vec<TimedEvent>,
    pub dumps: Vec<DumpInfo>,
    /// the datagram flows of every dump's flow table
    pub flows: Vec<TimedFlow>,
    /// BINARY:SYMBOL of every function production traced, with the node whose events name it
    pub functions: Vec<(Option<usize>, String)>,
    /// the nodes' processes with the environment tracerd recorded (builds, configuration
    /// files, limits), for the comparison with a testbed run (`drift`)
    pub environments: Vec<super::drift::Sample>,
}

impl Timeline {
    /// Reads `paths` and merges them on the wall clock (tracedump's merge); with a scenario,
    /// maps processes to nodes and refuses a dump none of whose processes is a node.
    pub fn load(paths: &[PathBuf], scenario: Option<&Scenario>) -> Result<Timeline> {
        if paths.is_empty() {
            bail!("no --trace given: name at least one tracerd dump");
        }
        let merged = Merged::read(paths)?;
        let mut t = Timeline::default();
        let mut maps = Vec::with_capacity(merged.dumps.len());
        for (i, d) in merged.dumps.iter().enumerate() {
            maps.push(t.add_dump(&merged, i, d, scenario)?);
        }
        t.events = merged
            .events
            .into_iter()
            .map(|e| TimedEvent {
                at_ns: e.at_ns,
                node: maps[e.dump].node(e.event.pid),
                dump: e.dump,
                event: e.event,
            })
            .collect();
        Ok(t)
    }

    /// Records dump `index` (its info, the functions it traced); returns its node map.
    fn add_dump(
        &mut self,
        merged: &Merged,
        index: usize,
        dump: &MergedDump,
        scenario: Option<&Scenario>,
    ) -> Result<NodeMap> {
        let (path, meta) = (&dump.path, &dump.meta);
        let map = scenario
            .map(|s| NodeMap::build_for(s, meta, &[]))
            .unwrap_or_default();
        let mapped = meta
            .processes
            .iter()
            .filter(|p| map.node(p.pid).is_some())
            .count();
        if let Some(s) = scenario {
            if mapped == 0 {
                let seen: Vec<String> = meta
                    .processes
                    .iter()
                    .take(6)
                    .map(|p| format!("{} ({})", p.pid, super::nodemap::program_of(p)))
                    .collect();
                let ambiguous = if map.ambiguous.is_empty() {
                    String::new()
                } else {
                    "; several nodes run the same program: give each a `match`".to_string()
                };
                bail!(
                    "dump {}: none of its {} processes is a node of scenario {} (programs compared: processes {}; nodes {}){ambiguous}",
                    path.display(),
                    meta.processes.len(),
                    s.name,
                    if seen.is_empty() { "none".into() } else { seen.join(", ") },
                    s.nodes.iter().map(|n| super::nodemap::program_names(n).join(" or ")).collect::<Vec<_>>().join(", ")
                );
            }
        }
        // the functions in the order of their first hit; a set, not a scan of the list per
        // hit (a dump can hold hundreds of thousands of hits)
        let mut known: HashSet<(Option<usize>, String)> = self.functions.iter().cloned().collect();
        let mut events = 0;
        for e in merged.events_of(index) {
            events += 1;
            let What::Function(hit) = &e.event.what else {
                continue;
            };
            if let Some(spec) = hit.spec() {
                let key = (map.node(e.event.pid), spec);
                if !known.contains(&key) {
                    known.insert(key.clone());
                    self.functions.push(key);
                }
            }
        }
        let mut nodes: Vec<usize> = meta.processes.iter().filter_map(|p| map.node(p.pid)).collect();
        nodes.sort_unstable();
        nodes.dedup();
        // a process's start is on the boot clock: the dump's clock pair puts it on the wall
        let clock = &meta.clock;
        let wall = |boot: u64| {
            clock
                .realtime_ns
                .saturating_sub(clock.boottime_ns.saturating_sub(boot))
        };
        let mut node_starts: std::collections::BTreeMap<usize, u64> = Default::default();
        for p in &meta.processes {
            if let Some(n) = map.node(p.pid) {
                let e = node_starts.entry(n).or_insert(u64::MAX);
                *e = (*e).min(wall(p.start_ns));
            }
        }
        self.environments.extend(super::drift::samples(meta, &map));
        let span =
            |since: u64, last: u64| (last > 0).then(|| (clock.realtime_of(since), clock.realtime_of(last)));
        self.flows.extend(meta.flows.iter().map(|f| TimedFlow {
            node: map.node(f.pid),
            dump: index,
            protocol: f.protocol,
            peer: f.peer,
            receiving: span(f.receiving_since_ns, f.last_received_ns),
            sending: span(f.sending_since_ns, f.last_sent_ns),
        }));
        self.dumps.push(DumpInfo {
            path: path.to_path_buf(),
            host: meta.host.clone(),
            events,
            mapped_processes: mapped,
            processes: meta.processes.len(),
            nodes,
            interfaces: meta.interfaces.clone(),
            taken_ns: dump.taken_ns(),
            lost_events: meta.counters.lost_events(),
            process_starts: meta
                .processes
                .iter()
                .filter(|p| p.start_ns > 0)
                .map(|p| (p.pid, meta.clock.realtime_of(p.start_ns)))
                .collect(),
            parents: meta.processes.iter().map(|p| (p.pid, p.ppid)).collect(),
            node_starts: node_starts.into_iter().collect(),
            workdir: scenario
                .and_then(|s| super::profile::workdir_of(s, &meta.processes, |pid| map.node(pid))),
        });
        Ok(map)
    }

    pub fn start_ns(&self) -> u64 {
        self.events.first().map(|e| e.at_ns).unwrap_or(0)
    }

    pub fn end_ns(&self) -> u64 {
        let last = self.events.last().map(|e| e.at_ns).unwrap_or(0);
        self.dumps.iter().map(|d| d.taken_ns).max().unwrap_or(0).max(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use tracedump::dump::Dump;
    use tracedump::dump::{write_dump, ClockPair, DumpContents, DumpMeta, FunctionSpec, ProcInfo};
    use tracedump::event::What;
    use tracedump::record::{BlobRef, Payload, Record};

    const SCENARIO: &str = "name = \"t\"\n\
        [[nodes]]\nname = \"a\"\ncommand = [\"srv\"]\nmatch = \"--a\"\n\
        [[nodes]]\nname = \"b\"\ncommand = [\"srv\"]\nmatch = \"--b\"\n\
        [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";

    fn proc(pid: u32, arg: &str) -> ProcInfo {
        ProcInfo {
            pid,
            ppid: 1,
            comm: "srv".into(),
            cmdline: Some(vec!["srv".into(), arg.into()]),
            ..Default::default()
        }
    }

    /// A dump whose records are not in time order (gaps and pauses are recorded when they
    /// end), several on one time stamp, with function ids that name the same function twice
    /// and one the dump does not know.
    fn write(dir: &Path, name: &str, seed: u64, realtime_ns: u64) -> PathBuf {
        let mut x = seed;
        let mut below = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let records: Vec<Record> = (0..400)
            .map(|_| {
                let payload = if below(4) == 0 {
                    Payload::SyscallFailure {
                        nr: 0,
                        ret: -5,
                        fd: 3,
                        open_id: 0,
                        blob: BlobRef::NONE,
                        requested: 0,
                    }
                } else {
                    Payload::Function {
                        function_id: below(6),
                    }
                };
                Record {
                    ts_ns: 1_000 + below(50) * 10,
                    pid: [10, 11, 12][below(3) as usize],
                    tid: 1,
                    comm: *b"srv\0\0\0\0\0\0\0\0\0\0\0\0\0",
                    payload,
                }
            })
            .collect();
        let spec = |binary: &str, symbol: &str| FunctionSpec {
            binary: binary.into(),
            symbol: symbol.into(),
        };
        let meta = DumpMeta {
            format: "tracerd-dump".into(),
            version: tracedump::dump::FORMAT_VERSION,
            host: name.into(),
            clock: ClockPair {
                boottime_ns: 0,
                monotonic_ns: 0,
                realtime_ns,
            },
            functions: vec![
                spec("/srv", "boot"),
                spec("/srv", "load"),
                spec("/srv:load", "x"),
                spec("/srv", "load:x"),
                spec("/lib", "boot"),
            ],
            processes: vec![proc(10, "--a"), proc(11, "--b"), proc(12, "--a")],
            ..Default::default()
        };
        let contents = DumpContents {
            meta,
            records: records.iter().copied(),
            blobs: (0, Vec::new()),
        };
        write_dump(dir, name, contents).unwrap()
    }

    /// What loading did before it resolved records straight into the timeline: each dump's
    /// sorted events, their functions by name, then one stable sort by time.
    type Loaded = (Vec<(u64, usize, Event)>, Vec<(Option<usize>, String)>);

    fn load_as_before(paths: &[PathBuf], s: &Scenario) -> Loaded {
        let (mut events, mut functions) = (Vec::new(), Vec::new());
        for (i, path) in paths.iter().enumerate() {
            let dump = Dump::read(path).unwrap();
            let map = NodeMap::build_for(s, &dump.meta, &[]);
            for e in dump.events() {
                if let What::Function(hit) = &e.what {
                    if let Some(spec) = hit.spec() {
                        let node = map.node(e.pid);
                        if !functions.iter().any(|(n, f)| *n == node && *f == spec) {
                            functions.push((node, spec));
                        }
                    }
                }
                events.push((e.realtime_ns, i, e));
            }
        }
        events.sort_by_key(|e| e.0);
        (events, functions)
    }

    #[test]
    fn loading_orders_events_and_functions_as_the_sorted_copies_did() {
        let dir = tempfile::tempdir().unwrap();
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        // the second dump's clock puts its events among the first's, some on the same instant
        let paths = vec![
            write(dir.path(), "one.tdump", 0x1234_5678, 1_000_000),
            write(dir.path(), "two.tdump", 0x8765_4321, 1_000_100),
        ];
        let t = Timeline::load(&paths, Some(&s)).unwrap();
        let (events, functions) = load_as_before(&paths, &s);
        let got: Vec<(u64, usize, &Event)> = t.events.iter().map(|e| (e.at_ns, e.dump, &e.event)).collect();
        let want: Vec<(u64, usize, &Event)> = events.iter().map(|(at, d, e)| (*at, *d, e)).collect();
        assert_eq!(got, want);
        assert_eq!(t.functions, functions);
        assert!(t.functions.len() > 4, "{:?}", t.functions);
        assert_eq!(t.dumps[1].events, 400);
    }
}

/// Dumps of two hosts: a cause in one, its symptom in the other.
#[cfg(test)]
mod host_tests {
    use tracedump::abi::ProcessState;
    use tracedump::dump::{write_dump, ClockPair, DumpContents, DumpMeta, OpenFile, FORMAT_VERSION};
    use tracedump::process::ProcInfo;
    use tracedump::record::{BlobRef, Payload, Record};

    use std::path::Path;

    use super::*;
    use crate::analysis::diagnose::{self, FaultGuess};

    const S: u64 = 1_000_000_000;
    /// wall-clock time both hosts' dumps were taken around
    const NOW: u64 = 1_790_000_000 * S;
    /// the same pid on both hosts: a pid names a process only within its host
    const PID: u32 = 100;

    const SCENARIO: &str = r#"
name = "ship"
[[nodes]]
name = "replica"
command = ["logship", "--role", "replica"]
match = "--role replica"
[[nodes]]
name = "primary"
command = ["logship", "--role", "primary"]
match = "--role primary"
[workload]
command = ["true"]
[oracle]
command = ["true"]
"#;

    fn comm() -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..7].copy_from_slice(b"logship");
        c
    }

    fn exit(ts_ns: u64, code: i32) -> Record {
        Record {
            ts_ns,
            pid: PID,
            tid: PID,
            comm: comm(),
            payload: Payload::ProcessState {
                state: ProcessState::Exited as u8,
                cause: 0,
                signal: 0,
                core_dumped: false,
                ongoing: false,
                exit_code: code,
                sender_pid: 0,
                duration_ns: 0,
                sender_comm: BlobRef::NONE,
            },
        }
    }

    /// A dump of `host`, whose boot clock read `boot_ns` at wall-clock time `wall_ns`, with
    /// one process (`role`) and `records`.
    fn host_dump(
        dir: &Path,
        host: &str,
        (boot_ns, wall_ns): (u64, u64),
        role: &str,
        records: &[Record],
    ) -> PathBuf {
        let meta = DumpMeta {
            format: "tracerd-dump".into(),
            version: FORMAT_VERSION,
            host: host.into(),
            clock: ClockPair {
                boottime_ns: boot_ns,
                monotonic_ns: boot_ns,
                realtime_ns: wall_ns,
            },
            processes: vec![ProcInfo {
                pid: PID,
                ppid: 1,
                comm: "logship".into(),
                exe: Some("/usr/bin/logship".into()),
                cmdline: Some(["logship", "--role", role].map(String::from).to_vec()),
                ..Default::default()
            }],
            open_files: vec![OpenFile {
                open_id: 7,
                dir_open_id: 0,
                tgid: PID,
                path: "/srv/ship/journal".into(),
            }],
            ..DumpMeta::default()
        };
        let contents = DumpContents {
            meta,
            records: records.iter().copied(),
            blobs: (0, Vec::new()),
        };
        write_dump(dir, &format!("{host}.tdump"), contents).unwrap()
    }

    /// Host a (up for 1000 s) has the cause: the primary's journal write fails, and later the
    /// primary exits too. Host b (up for 50 s) has the symptom in between: the replica exits.
    /// By boot-time stamps host b's exit would come first; on the wall clock it comes after
    /// the failure.
    fn two_hosts(dir: &Path) -> (PathBuf, PathBuf) {
        let enospc = Record {
            ts_ns: 1000 * S - S / 2,
            pid: PID,
            tid: PID,
            comm: comm(),
            payload: Payload::SyscallFailure {
                nr: 1, // write
                ret: -28,
                fd: 3,
                open_id: 7,
                blob: BlobRef::NONE,
                requested: 0,
            },
        };
        let a = host_dump(
            dir,
            "host-a",
            (1000 * S, NOW),
            "primary",
            &[enospc, exit(1000 * S + S / 10 * 2, 1)],
        );
        let b = host_dump(
            dir,
            "host-b",
            (50 * S, NOW + S / 10 * 3),
            "replica",
            &[exit(50 * S - S / 10 * 2, 1)],
        );
        (a, b)
    }

    #[test]
    fn dumps_of_two_hosts_merge_on_the_wall_clock() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two_hosts(dir.path());
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let t = Timeline::load(&[a, b], Some(&s)).unwrap();
        let order: Vec<(usize, Option<usize>, u64)> =
            t.events.iter().map(|e| (e.dump, e.node, e.at_ns)).collect();
        assert_eq!(
            order,
            vec![
                (0, Some(1), NOW - S / 2),
                (1, Some(0), NOW + S / 10),
                (0, Some(1), NOW + S / 10 * 2)
            ],
            "the failure on host a, the replica's exit on host b, the primary's exit on host a"
        );
        assert_eq!(t.dumps[0].nodes, vec![1], "host a holds the primary");
        assert_eq!(
            t.dumps[1].nodes,
            vec![0],
            "host b holds the replica, under the same pid"
        );
        assert_eq!(
            t.events.iter().map(|e| &*e.event.host).collect::<Vec<_>>(),
            ["host-a", "host-b", "host-a"]
        );
    }

    #[test]
    fn the_cause_in_one_hosts_dump_explains_the_symptom_in_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two_hosts(dir.path());
        let s = Scenario::parse(SCENARIO, "t").unwrap();
        let t = Timeline::load(&[a, b.clone()], Some(&s)).unwrap();
        let d = diagnose::diagnose(&t, Some(&s), None);
        let symptoms: Vec<(&str, &str)> = d
            .symptoms
            .iter()
            .map(|s| (s.who.as_str(), s.host.as_str()))
            .collect();
        assert_eq!(
            symptoms,
            [("replica", "host-b"), ("primary", "host-a")],
            "both exits count, though both processes had pid {PID}"
        );
        let causes: Vec<_> = d.causes().collect();
        assert_eq!(causes.len(), 1, "{causes:#?}");
        let c = causes[0];
        assert!(
            matches!(&c.guess, FaultGuess::Syscall { syscall, errno, .. } if syscall == "write" && errno == "ENOSPC"),
            "{c:#?}"
        );
        assert_eq!(
            (c.who.as_str(), c.host.as_str(), c.dump),
            ("primary", "host-a", 0)
        );
        let text = diagnose::render(&d, Some(&s));
        for want in [
            "dumps (2), merged on wall-clock time",
            "host-b: ",
            "nodes: replica",
            "replica@host-b: exited with status 1",
            "primary@host-a: write failed with ENOSPC on /srv/ship/journal",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        let mut report = String::new();
        crate::report::timeline_section(&mut report, &t, &d, &s);
        for want in [
            "primary@host-a write(fd 3 /srv/ship/journal) = -28 ENOSPC",
            "replica@host-b exited with code 1",
        ] {
            assert!(report.contains(want), "{want:?} missing from\n{report}");
        }
        // host b's dump alone shows the symptom and nothing that caused it
        let alone = Timeline::load(&[b], Some(&s)).unwrap();
        let d = diagnose::diagnose(&alone, Some(&s), None);
        assert_eq!((d.symptoms.len(), d.causes().count()), (1, 0));
        assert!(
            !diagnose::render(&d, Some(&s)).contains("@host-b"),
            "one dump: no host tags"
        );
    }
}
