//! A reload's function list applied to the running probes, in two steps so that a reload
//! refused later (a target that cannot be applied) leaves the probes as they were: `relist`
//! attaches what the new list adds, then `commit` detaches what it drops, or `undo` drops
//! what `relist` attached.
//!
//! Ids are indexes into the dump's function table, and events in the window carry them: an
//! entry the table has keeps its id (also one a reload dropped and a later one lists again),
//! a new one gets the next id, and a dropped one keeps its id and entry, no longer probed.
use std::collections::{HashMap, HashSet, VecDeque};

use anyhow::Result;

use super::{drop_together, raise_fd_limit, HitPrograms, ListBinary, Uprobes};
use crate::config::FunctionSpec;

/// What a new list does to the probes.
pub enum Relist {
    /// the same functions as now
    Same,
    /// more ids than the call counters have entries (sized at start): needs a restart
    TooMany { needed: usize, room: usize },
    /// attached; to be committed or undone
    Changed(Relisted),
}

/// A new list whose additions are attached, and whose drops are still probed.
pub struct Relisted {
    before: Saved,
    dropped: Vec<usize>,
    /// functions the list adds (new ones, and ones a reload had dropped)
    pub added: usize,
    /// binaries not on the list before: their copies in targets' file systems are to be probed
    pub new_binaries: bool,
}

impl Relisted {
    /// Functions the list drops.
    pub fn dropped(&self) -> usize {
        self.dropped.len()
    }
}

/// The state `undo` restores.
struct Saved {
    functions: usize,
    links: usize,
    binaries: Vec<ListBinary>,
    removed: Vec<usize>,
    unattached: Vec<usize>,
    attach_failed: u64,
}

impl Uprobes {
    /// The id of each entry of `list`: the table's for an entry it has (in order, so that an
    /// entry listed twice keeps both of its ids), else the next new one; and the new entries.
    fn ids_for(&self, list: &[FunctionSpec]) -> (Vec<usize>, Vec<FunctionSpec>) {
        let mut known: HashMap<&FunctionSpec, VecDeque<usize>> = HashMap::new();
        for (id, f) in self.functions.iter().enumerate() {
            known.entry(f).or_default().push_back(id);
        }
        let mut appended = Vec::new();
        let ids = list
            .iter()
            .map(|f| match known.get_mut(f).and_then(VecDeque::pop_front) {
                Some(id) => id,
                None => {
                    appended.push(f.clone());
                    self.functions.len() + appended.len() - 1
                }
            })
            .collect();
        (ids, appended)
    }

    /// Attaches the functions `list` adds to the one in force (a function that cannot be
    /// attached is an error unless `tolerate`, and then nothing has changed).
    pub fn relist(&mut self, progs: &HitPrograms, list: &[FunctionSpec], tolerate: bool) -> Result<Relist> {
        let (ids, appended) = self.ids_for(list);
        let listed: HashSet<usize> = self.binaries.iter().flat_map(|b| b.ids.iter().copied()).collect();
        let now: HashSet<usize> = ids.iter().copied().collect();
        if appended.is_empty() && now == listed {
            return Ok(Relist::Same);
        }
        let needed = self.functions.len() + appended.len();
        if needed > self.capacity {
            return Ok(Relist::TooMany {
                needed,
                room: self.capacity,
            });
        }
        let before = Saved {
            functions: self.functions.len(),
            links: self.links.len(),
            binaries: self.binaries.clone(),
            removed: self.removed.clone(),
            unattached: self.unattached.clone(),
            attach_failed: self.attach_failed,
        };
        let mut dropped: Vec<usize> = listed.difference(&now).copied().collect();
        dropped.sort_unstable();
        let added: Vec<usize> = ids.iter().copied().filter(|id| !listed.contains(id)).collect();
        self.functions.extend(appended);
        self.removed.retain(|id| !now.contains(id));
        // a function that could not be attached before is tried again
        self.unattached.retain(|id| !added.contains(id));
        let mut relisted = Relisted {
            before,
            dropped,
            added: added.len(),
            new_binaries: false,
        };
        if !self.multi {
            raise_fd_limit(self.functions.len() as u64 + 4096);
        }
        if let Err(e) = self.attach_added(progs, &added, tolerate, &mut relisted.new_binaries) {
            self.undo(relisted);
            return Err(e);
        }
        Ok(Relist::Changed(relisted))
    }

    /// Puts `added` on their binaries' lists and probes them on every file those are probed
    /// on (a binary new to the list: on the host's file).
    fn attach_added(
        &mut self,
        progs: &HitPrograms,
        added: &[usize],
        tolerate: bool,
        new_binaries: &mut bool,
    ) -> Result<()> {
        let mut by_binary: HashMap<usize, Vec<usize>> = HashMap::new();
        for &id in added {
            let path = &self.functions[id].binary;
            let i = match self.binaries.iter().position(|b| &b.path == path) {
                Some(i) => i,
                None => {
                    *new_binaries = true;
                    self.binaries.push(ListBinary::new(path.clone(), Vec::new()));
                    self.binaries.len() - 1
                }
            };
            self.binaries[i].ids.push(id);
            // one detached at the call limit stays detached: it is as hot as it was
            if !self.detached.contains(&id) {
                by_binary.entry(i).or_default().push(id);
            }
        }
        for (i, ids) in by_binary {
            if self.binaries[i].files.is_empty() {
                // nothing of it is probed yet: its whole list on the host's file, if there
                self.attach_on_host(progs, i, tolerate)?;
                continue;
            }
            for (_, file) in self.binaries[i].files.clone() {
                // a target's copy without the function (another build) is counted, not fatal
                let copy = file != self.binaries[i].path;
                self.attach_on(progs, &file, &ids, tolerate || copy)?;
            }
        }
        Ok(())
    }

    /// Detaches the functions the new list drops (they keep their ids and counts).
    pub fn commit(&mut self, progs: &HitPrograms, relisted: Relisted) -> Result<()> {
        let dropped = relisted.dropped;
        self.unlink(progs, |id| dropped.binary_search(&id).is_ok())?;
        for b in &mut self.binaries {
            b.ids.retain(|id| dropped.binary_search(id).is_err());
        }
        self.binaries.retain(|b| !b.ids.is_empty());
        self.removed.extend(dropped);
        Ok(())
    }

    /// Detaches what `relist` attached and restores the list in force before it.
    pub fn undo(&mut self, relisted: Relisted) {
        let before = relisted.before;
        drop_together(self.links.split_off(before.links));
        self.functions.truncate(before.functions);
        self.binaries = before.binaries;
        self.removed = before.removed;
        self.unattached = before.unattached;
        self.attach_failed = before.attach_failed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(binary: &str, symbol: &str) -> FunctionSpec {
        FunctionSpec {
            binary: binary.into(),
            symbol: symbol.into(),
        }
    }

    #[test]
    fn listed_entries_keep_their_ids_and_new_ones_are_appended() {
        let (a, b, c) = (spec("/x", "a"), spec("/x", "b"), spec("/y", "c"));
        let u = Uprobes::new(vec![a.clone(), b.clone(), a.clone()], 10, true, 0);
        let (ids, appended) = u.ids_for(&[c.clone(), a.clone(), b.clone(), a.clone(), c.clone()]);
        assert_eq!(
            ids,
            [3, 0, 1, 2, 4],
            "a listed twice keeps both ids, c twice gets two"
        );
        assert_eq!(appended, [c.clone(), c]);
        let (ids, appended) = u.ids_for(&[b]);
        assert_eq!((ids, appended), (vec![1], vec![]));
    }
}
