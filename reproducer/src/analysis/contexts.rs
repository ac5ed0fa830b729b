//! Production contexts of fault candidates: the functions a node (or, without a node, a
//! process) entered in a time window before the fault, nearest first, each once.
//!
//! A diagnosis asks this for every candidate, and a large dump has a million events and
//! hundreds of candidates, so the timeline is not walked per candidate: the function hits
//! of the nodes and processes asked about are indexed once (in timeline order, names
//! interned), each window becomes a position range by binary search on time, and all the
//! questions about one node are answered in one sweep over its hits that keeps each
//! function's latest position: the answer to a window is the functions whose latest
//! position so far is inside it, latest first. Cost: O(hits + questions × functions of the
//! node), where a walk per candidate cost O(events × candidates).
use std::collections::HashMap;

use tracedump::event::What;

use super::timeline::Timeline;

/// One question: which functions did `node` (or, when `node` is None, process `pid` of dump
/// `dump`: a pid names a process only on its host) enter strictly between `since_ns` and
/// `before_ns`?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextQuery {
    pub node: Option<usize>,
    pub dump: usize,
    pub pid: u32,
    pub since_ns: u64,
    pub before_ns: u64,
}

/// Whose hits a question is about: a node's, or an unmapped question's process's (every
/// hit of that pid, whatever its node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Node(usize),
    /// (dump, pid)
    Process(usize, u32),
}

impl ContextQuery {
    fn key(&self) -> Key {
        match self.node {
            Some(n) => Key::Node(n),
            None => Key::Process(self.dump, self.pid),
        }
    }
}

/// The function hits of the asked-about nodes and processes, in timeline order.
struct HitIndex {
    /// BINARY:SYMBOL of each interned function
    specs: Vec<String>,
    /// per node (by index), when asked about: (time, function) of each hit
    nodes: Vec<Option<Vec<(u64, u32)>>>,
    /// the same per process asked about (questions without a node)
    pids: HashMap<(usize, u32), Vec<(u64, u32)>>,
}

impl HitIndex {
    /// One pass over the timeline; hits whose function the dump does not know are left out
    /// (they have no BINARY:SYMBOL to report).
    fn build(t: &Timeline, keys: impl Iterator<Item = Key>) -> HitIndex {
        let mut index = HitIndex {
            specs: Vec::new(),
            nodes: Vec::new(),
            pids: HashMap::new(),
        };
        for key in keys {
            match key {
                Key::Node(n) => {
                    if index.nodes.len() <= n {
                        index.nodes.resize(n + 1, None);
                    }
                    index.nodes[n] = Some(Vec::new());
                }
                Key::Process(dump, pid) => {
                    index.pids.insert((dump, pid), Vec::new());
                }
            }
        }
        let mut by_name: HashMap<(&str, &str), u32> = HashMap::new();
        // two (binary, symbol) pairs could spell the same BINARY:SYMBOL; the context is a
        // list of those strings, so they are one function
        let mut by_spec: HashMap<String, u32> = HashMap::new();
        for e in &t.events {
            let What::Function(hit) = &e.event.what else {
                continue;
            };
            let (Some(binary), Some(symbol)) = (hit.binary.as_deref(), hit.function.as_deref()) else {
                continue;
            };
            let node_asked = e
                .node
                .is_some_and(|n| matches!(index.nodes.get(n), Some(Some(_))));
            let process = (e.dump, e.event.pid);
            let pid_asked = !index.pids.is_empty() && index.pids.contains_key(&process);
            if !node_asked && !pid_asked {
                continue;
            }
            let specs = &mut index.specs;
            let id = *by_name.entry((binary, symbol)).or_insert_with(|| {
                let spec = format!("{binary}:{symbol}");
                let next = by_spec.len() as u32;
                *by_spec.entry(spec.clone()).or_insert_with(|| {
                    specs.push(spec);
                    next
                })
            });
            if let (true, Some(n)) = (node_asked, e.node) {
                if let Some(Some(hits)) = index.nodes.get_mut(n) {
                    hits.push((e.at_ns, id));
                }
            }
            if pid_asked {
                if let Some(hits) = index.pids.get_mut(&process) {
                    hits.push((e.at_ns, id));
                }
            }
        }
        index
    }

    fn hits(&self, key: Key) -> &[(u64, u32)] {
        let hits = match key {
            Key::Node(n) => self.nodes.get(n).and_then(Option::as_ref),
            Key::Process(dump, pid) => self.pids.get(&(dump, pid)),
        };
        hits.map(Vec::as_slice).unwrap_or_default()
    }
}

/// The answers to `queries`, in their order. The timeline's events must be in time order
/// (as [`Timeline::load`] leaves them).
pub fn preceding_functions(t: &Timeline, queries: &[ContextQuery]) -> Vec<Vec<String>> {
    let index = HitIndex::build(t, queries.iter().map(ContextQuery::key));
    let mut by_key: HashMap<Key, Vec<usize>> = HashMap::new();
    for (i, q) in queries.iter().enumerate() {
        by_key.entry(q.key()).or_default().push(i);
    }
    let mut answers: Vec<Vec<String>> = vec![Vec::new(); queries.len()];
    for (key, asked) in by_key {
        let hits = index.hits(key);
        for (i, ids) in sweep(hits, index.specs.len(), asked.iter().map(|&i| (i, &queries[i]))) {
            answers[i] = ids
                .into_iter()
                .map(|id| index.specs[id as usize].clone())
                .collect();
        }
    }
    answers
}

/// Answers the questions about one key's hits: each window's distinct functions by their
/// latest position in it, latest first. `functions` bounds the function numbers.
fn sweep<'q>(
    hits: &[(u64, u32)],
    functions: usize,
    queries: impl Iterator<Item = (usize, &'q ContextQuery)>,
) -> Vec<(usize, Vec<u32>)> {
    // each window as positions [lo, hi): hits after since_ns and before before_ns
    let mut ranges: Vec<(usize, usize, usize)> = queries
        .map(|(i, q)| {
            let lo = hits.partition_point(|&(at, _)| at <= q.since_ns);
            let hi = hits.partition_point(|&(at, _)| at < q.before_ns);
            (hi, lo, i)
        })
        .collect();
    ranges.sort_unstable();
    // the position of each function's latest hit so far, and the functions hit so far
    let mut latest: Vec<usize> = vec![usize::MAX; functions];
    let mut seen: Vec<u32> = Vec::new();
    let mut swept = 0;
    let mut out = Vec::with_capacity(ranges.len());
    for (hi, lo, i) in ranges {
        while swept < hi {
            let id = hits[swept].1;
            if latest[id as usize] == usize::MAX {
                seen.push(id);
            }
            latest[id as usize] = swept;
            swept += 1;
        }
        let mut found: Vec<(usize, u32)> = if lo < hi {
            seen.iter()
                .map(|&id| (latest[id as usize], id))
                .filter(|&(at, _)| at >= lo)
                .collect()
        } else {
            Vec::new()
        };
        found.sort_unstable_by(|a, b| b.cmp(a));
        out.push((i, found.into_iter().map(|(_, id)| id).collect()));
    }
    out
}

/// The walk the index replaces, kept for the tests to compare with: the whole timeline,
/// newest first, per question.
#[cfg(test)]
pub(crate) fn walk_per_query(t: &Timeline, queries: &[ContextQuery]) -> Vec<Vec<String>> {
    queries.iter().map(|q| tests::naive(t, q)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::timeline::TimedEvent;
    use tracedump::event::{Event, FunctionHit};

    pub(super) fn naive(t: &Timeline, q: &ContextQuery) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in t.events.iter().rev() {
            let What::Function(hit) = &e.event.what else {
                continue;
            };
            if e.at_ns >= q.before_ns {
                continue;
            }
            if e.at_ns <= q.since_ns {
                break;
            }
            let same = match q.node {
                Some(n) => e.node == Some(n),
                None => e.event.pid == q.pid && e.dump == q.dump,
            };
            if !same {
                continue;
            }
            if let Some(spec) = hit.spec() {
                if !out.contains(&spec) {
                    out.push(spec);
                }
            }
        }
        out
    }

    /// xorshift: deterministic timelines without a dependency
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Hits of 12 functions (one the dump does not know, two spelled alike) by 3 nodes'
    /// processes and an unmapped one, on a coarse clock so that many share a time stamp.
    fn timeline(rng: &mut Rng, events: usize) -> Timeline {
        let mut events: Vec<TimedEvent> = (0..events)
            .map(|_| {
                let at_ns = rng.below(400) * 1000;
                let pid = 10 + rng.below(5) as u32;
                let node = (pid < 13).then_some(pid as usize % 3);
                let f = rng.below(12);
                let hit = match f {
                    0 => FunctionHit {
                        binary: None,
                        function: None,
                    },
                    1 => FunctionHit {
                        binary: Some("/opt/a:b".into()),
                        function: Some("c".into()),
                    },
                    2 => FunctionHit {
                        binary: Some("/opt/a".into()),
                        function: Some("b:c".into()),
                    },
                    _ => FunctionHit {
                        binary: Some(format!("/opt/bin{}", f % 2)),
                        function: Some(format!("f{f}")),
                    },
                };
                let event = Event {
                    ts_ns: at_ns,
                    realtime_ns: at_ns,
                    host: "h".into(),
                    pid,
                    tid: pid,
                    comm: "x".into(),
                    what: What::Function(hit),
                };
                TimedEvent {
                    at_ns,
                    node,
                    // the same pids on two hosts
                    dump: rng.below(2) as usize,
                    event,
                }
            })
            .collect();
        events.sort_by_key(|e| e.at_ns);
        Timeline {
            events,
            ..Default::default()
        }
    }

    #[test]
    fn the_index_answers_as_the_walk_over_the_whole_timeline() {
        let mut rng = Rng(0x1234_5678);
        for round in 0..20 {
            let t = timeline(&mut rng, 50 + round * 40);
            let queries: Vec<ContextQuery> = (0..60)
                .map(|_| {
                    let (a, b) = (rng.below(420) * 1000, rng.below(420) * 1000);
                    let pid = 10 + rng.below(6) as u32;
                    ContextQuery {
                        node: (rng.below(3) > 0).then_some(rng.below(4) as usize),
                        dump: rng.below(2) as usize,
                        pid,
                        // some windows are empty or backwards
                        since_ns: a.min(b) + rng.below(2) * 1000,
                        before_ns: a.max(b),
                    }
                })
                .collect();
            let fast = preceding_functions(&t, &queries);
            for (q, got) in queries.iter().zip(&fast) {
                assert_eq!(got, &naive(&t, q), "{q:?} in round {round}");
            }
        }
    }

    #[test]
    fn nothing_to_answer_from_an_empty_timeline() {
        let q = ContextQuery {
            node: Some(0),
            dump: 0,
            pid: 1,
            since_ns: 0,
            before_ns: u64::MAX,
        };
        assert_eq!(
            preceding_functions(&Timeline::default(), &[q]),
            vec![Vec::<String>::new()]
        );
    }
}
