//! Flow arrows of an export: which events a chain's arrows start at, pass through and end at.
use std::collections::HashMap;

/// Per event index, the flows through it and the flows ending at it: chain k is flow id
/// k + 1 (0 is not an id); a chain of fewer than two events draws nothing.
pub(super) fn flows_of(chains: &[Vec<usize>]) -> HashMap<usize, Flows> {
    let mut out: HashMap<usize, Flows> = HashMap::new();
    for (k, chain) in chains.iter().enumerate().filter(|(_, c)| c.len() > 1) {
        let id = k as u64 + 1;
        for (j, &event) in chain.iter().enumerate() {
            let f = out.entry(event).or_default();
            match j + 1 == chain.len() {
                true => f.ending.push(id),
                false => f.through.push(id),
            }
        }
    }
    out
}

/// The flows of one event.
#[derive(Clone, Debug, Default)]
pub(super) struct Flows {
    pub through: Vec<u64>,
    pub ending: Vec<u64>,
}
