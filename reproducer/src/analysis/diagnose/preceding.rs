//! Each candidate's production context: the functions its node ran since the previous
//! fault on the same node, nearest first.
use std::collections::HashMap;

use super::{Builder, ContextQuery, FaultGuess, Preceding, Verdict};

impl Builder<'_> {
    /// Each candidate's production context: the functions its node entered since the
    /// previous fault on the same node, all asked of `preceding` at once.
    pub(super) fn contexts(&mut self, preceding: Preceding) {
        let mut order: Vec<usize> = (0..self.candidates.len()).collect();
        order.sort_by_key(|&i| self.candidates[i].at_ns);
        // the previous cause seen on each node, walking in time order
        let mut previous: HashMap<Option<usize>, u64> = HashMap::new();
        let queries: Vec<ContextQuery> = order
            .iter()
            .map(|&i| {
                let c = &self.candidates[i];
                let since_ns = previous.get(&c.node).copied().unwrap_or(0);
                if c.verdict == Verdict::Cause {
                    previous.insert(c.node, c.at_ns);
                }
                // the signal of a crash or pause lands in the process that completes its
                // context: the context is what the killed or stopped process itself ran (a
                // forked worker's functions, not its master's)
                let process_fault = matches!(c.guess, FaultGuess::Crash { .. } | FaultGuess::Pause { .. });
                ContextQuery {
                    node: if process_fault { None } else { c.node },
                    dump: c.dump,
                    pid: c.pid,
                    since_ns,
                    before_ns: c.at_ns,
                }
            })
            .collect();
        for (&i, fns) in order.iter().zip(preceding(self.timeline, &queries)) {
            self.candidates[i].preceding_functions = fns;
        }
    }
}
