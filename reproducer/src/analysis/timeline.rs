//! The production timeline: the events of one or more tracerd dumps merged on one clock
//! (tracedump's merge: each dump's clock pair turns its boot-time stamps into wall-clock
//! time), each event tagged with the scenario node its process belongs to.
use std::collections::HashSet;
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
    pub interfaces: Vec<Interface>,
    /// wall-clock time the dump was taken
    pub taken_ns: u64,
    pub lost_events: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub events: Vec<TimedEvent>,
    pub dumps: Vec<DumpInfo>,
    /// BINARY:SYMBOL of every function production traced, with the node whose events name it
    pub functions: Vec<(Option<usize>, String)>,
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
                    .map(|p| format!("{} ({})", p.pid, p.comm))
                    .collect();
                let ambiguous = if map.ambiguous.is_empty() {
                    String::new()
                } else {
                    "; several nodes run the same program: give each a `match`".to_string()
                };
                bail!(
                    "dump {}: none of its {} processes is a node of scenario {} (processes: {}; nodes run: {}){ambiguous}",
                    path.display(),
                    meta.processes.len(),
                    s.name,
                    if seen.is_empty() { "none".into() } else { seen.join(", ") },
                    s.nodes.iter().map(|n| n.command[0].as_str()).collect::<Vec<_>>().join(", ")
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
        self.dumps.push(DumpInfo {
            path: path.to_path_buf(),
            host: meta.host.clone(),
            events,
            mapped_processes: mapped,
            processes: meta.processes.len(),
            interfaces: meta.interfaces.clone(),
            taken_ns: dump.taken_ns(),
            lost_events: meta.counters.lost_events(),
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
            records: records.iter().collect(),
            blobs: (0, Vec::new()),
        };
        write_dump(dir, name, &contents).unwrap()
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
