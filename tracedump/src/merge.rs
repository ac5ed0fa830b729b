//! Several dumps on one clock. Each dump stamps its events with CLOCK_BOOTTIME, which starts
//! at each host's boot; its clock pair (boot time and wall time read together when it was
//! taken) turns them into wall-clock time, the clock dumps of different hosts share. The
//! reproducer's production timeline and the Perfetto export both read dumps through this.
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::dump::{Dump, DumpMeta};
use crate::event::Event;

/// One event on the common clock.
#[derive(Clone, Debug)]
pub struct MergedEvent {
    /// wall-clock nanoseconds (the dumps' common clock); for gaps and pauses, when the
    /// interval began
    pub at_ns: u64,
    /// index into [`Merged::dumps`]
    pub dump: usize,
    /// gaps and pauses: how long the interval lasted, in ns (to the dump, for ongoing ones)
    pub span_ns: Option<u64>,
    pub event: Event,
}

/// A dump's header, and where it was read from.
#[derive(Clone, Debug)]
pub struct MergedDump {
    pub path: PathBuf,
    pub meta: DumpMeta,
}

impl MergedDump {
    /// Wall-clock time the dump was taken (the end of its ongoing intervals).
    pub fn taken_ns(&self) -> u64 {
        self.meta.clock.realtime_ns
    }
}

/// The events of several dumps, ordered by wall-clock time (events of equal time keep the
/// order of their dumps).
#[derive(Clone, Debug, Default)]
pub struct Merged {
    pub dumps: Vec<MergedDump>,
    pub events: Vec<MergedEvent>,
}

impl Merged {
    /// Reads `paths` in order; a dump that cannot be read is an error naming it.
    pub fn read(paths: &[PathBuf]) -> Result<Merged> {
        if paths.is_empty() {
            bail!("no dump given: name at least one tracerd dump");
        }
        let mut merged = Merged::default();
        for path in paths {
            merged.push(path, &Dump::read(path)?);
        }
        merged.events.sort_by_key(|e| e.at_ns);
        Ok(merged)
    }

    fn push(&mut self, path: &Path, dump: &Dump) {
        let index = self.dumps.len();
        self.events.extend(
            dump.events_with_spans()
                .into_iter()
                .map(|(event, span_ns)| MergedEvent {
                    at_ns: event.realtime_ns,
                    dump: index,
                    span_ns,
                    event,
                }),
        );
        self.dumps.push(MergedDump {
            path: path.to_path_buf(),
            meta: dump.meta.clone(),
        });
    }

    /// The events of dump `index`, in time order.
    pub fn events_of(&self, index: usize) -> impl Iterator<Item = &MergedEvent> {
        self.events.iter().filter(move |e| e.dump == index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::{write_dump, ClockPair, DumpContents, FORMAT_VERSION};
    use crate::record::{BlobRef, Payload, Record};

    fn dump_at(dir: &Path, name: &str, boot_ns: u64, realtime_ns: u64, events: &[u64]) -> PathBuf {
        let records: Vec<Record> = events
            .iter()
            .map(|&ts_ns| Record {
                ts_ns,
                pid: 7,
                tid: 7,
                comm: [b'x'; 16],
                payload: Payload::NetworkGap {
                    gap_ns: 3,
                    packets: 1,
                    endpoints: BlobRef::NONE,
                    ongoing: false,
                    busy_ms: 0,
                    busy_packets: 0,
                },
            })
            .collect();
        let meta = DumpMeta {
            format: "tracerd-dump".into(),
            version: FORMAT_VERSION,
            host: name.into(),
            clock: ClockPair {
                boottime_ns: boot_ns,
                monotonic_ns: boot_ns,
                realtime_ns,
            },
            ..DumpMeta::default()
        };
        let contents = DumpContents {
            meta,
            records: records.iter().copied(),
            blobs: (0, Vec::new()),
        };
        write_dump(dir, &format!("{name}.tdump"), contents).unwrap()
    }

    #[test]
    fn dumps_of_hosts_booted_at_different_times_merge_on_wall_clock() {
        let dir = tempfile::tempdir().unwrap();
        // host a booted 1000 s before its dump at wall 5000 s; host b 10 s before 5001 s
        let s = 1_000_000_000u64;
        let a = dump_at(dir.path(), "a", 1000 * s, 5000 * s, &[990 * s, 998 * s]);
        let b = dump_at(dir.path(), "b", 10 * s, 5001 * s, &[5 * s]);
        let m = Merged::read(&[a.clone(), b]).unwrap();
        let order: Vec<(usize, u64)> = m.events.iter().map(|e| (e.dump, e.at_ns / s)).collect();
        assert_eq!(order, vec![(0, 4990), (1, 4996), (0, 4998)]);
        assert!(m.events.iter().all(|e| e.span_ns == Some(3)));
        assert_eq!(m.dumps[1].taken_ns(), 5001 * s);
        assert_eq!(m.events_of(0).count(), 2);
        assert!(Merged::read(&[]).is_err());
        let err = Merged::read(&[a, dir.path().join("missing.tdump")]).unwrap_err();
        assert!(format!("{err:#}").contains("missing.tdump"), "{err:#}");
    }
}
