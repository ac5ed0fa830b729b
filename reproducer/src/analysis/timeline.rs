//! The production timeline: the events of one or more tracerd dumps merged on one clock
//! (tracedump's merge: each dump's clock pair turns its boot-time stamps into wall-clock
//! time), each event tagged with the scenario node its process belongs to.
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
        let mut events = 0;
        for e in merged.events_of(index) {
            events += 1;
            let What::Function(hit) = &e.event.what else {
                continue;
            };
            if let Some(spec) = hit.spec() {
                let node = map.node(e.event.pid);
                if !self.functions.iter().any(|(n, s)| *n == node && *s == spec) {
                    self.functions.push((node, spec));
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
