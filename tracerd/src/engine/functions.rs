//! The engine's function probes: the list in force, a reload's changes to it, the probes in
//! targets' own mount namespaces, and the call counters. The uprobes and their links are
//! `uprobes`'; this is what the rest of tracerd asks of them through the engine.
use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use super::{sum_per_cpu, Engine};
use crate::config::{Config, FunctionSpec};
use crate::uprobes::{HitPrograms, Relist, Relisted, Uprobes};

/// Checks the binaries of `functions` (`config`'s list): an `uprobe` entry names a file of
/// the host; a functions file's binary may be only in the targets' containers (see `uprobes`).
pub fn check_functions(config: &Config, functions: &[FunctionSpec]) -> Result<()> {
    for (id, f) in functions.iter().enumerate() {
        if id < config.uprobe.len() || f.binary.exists() {
            check_function(f)?;
        }
    }
    Ok(())
}

fn check_function(spec: &FunctionSpec) -> Result<()> {
    let md = std::fs::metadata(&spec.binary).with_context(|| {
        format!(
            "uprobe {}:{}: binary {}",
            spec.binary.display(),
            spec.symbol,
            spec.binary.display()
        )
    })?;
    if !md.is_file() {
        bail!(
            "uprobe {}:{}: {} is not a file",
            spec.binary.display(),
            spec.symbol,
            spec.binary.display()
        );
    }
    Ok(())
}

impl Engine {
    pub(super) fn hit_programs(&self) -> HitPrograms<'_, 'static> {
        HitPrograms {
            single: &self.skel.progs.function_hit,
            multi: &self.skel.progs.function_hit_multi,
        }
    }

    /// Uprobe targets, indexed by function id: every function listed since start.
    pub fn functions(&self) -> std::cell::Ref<'_, [FunctionSpec]> {
        std::cell::Ref::map(self.uprobes.borrow(), Uprobes::functions)
    }

    /// Functions on the list now (a reload may have dropped some of [`Engine::functions`]).
    pub fn listed_functions(&self) -> usize {
        self.uprobes.borrow().listed()
    }

    /// Function ids a reload took off the list (counted up to then).
    pub fn removed_functions(&self) -> std::cell::Ref<'_, [usize]> {
        std::cell::Ref::map(self.uprobes.borrow(), Uprobes::removed)
    }

    /// Attaches what the function list `list` adds to the one in force (see `uprobes::relist`);
    /// what it drops stays attached until [`Engine::commit_functions`].
    pub fn relist_functions(&self, list: &[FunctionSpec], tolerate: bool) -> Result<Relist> {
        self.uprobes
            .borrow_mut()
            .relist(&self.hit_programs(), list, tolerate)
    }

    /// Detaches the functions the new list drops; when it names binaries not listed before,
    /// probes them in the targets' mount namespaces as well.
    pub fn commit_functions(&self, relisted: Relisted) -> Result<()> {
        let new_binaries = relisted.new_binaries;
        self.uprobes.borrow_mut().commit(&self.hit_programs(), relisted)?;
        if new_binaries {
            for pid in self.traced_pids() {
                self.probe_functions_in_root_of(pid)?;
            }
        }
        Ok(())
    }

    /// Detaches what [`Engine::relist_functions`] attached: the list in force before stays.
    pub fn undo_functions(&self, relisted: Relisted) {
        self.uprobes.borrow_mut().undo(relisted);
    }

    /// The processes in the kernel's target set.
    pub(super) fn traced_pids(&self) -> Vec<u32> {
        self.skel
            .maps
            .targets
            .keys()
            .filter_map(|k| Some(u32::from_ne_bytes(k.get(..4)?.try_into().ok()?)))
            .collect()
    }

    pub fn uprobe_attach_failed(&self) -> u64 {
        self.uprobes.borrow().attach_failed()
    }

    /// Function ids whose uprobe could not be attached (their calls are never counted).
    pub fn unattached_functions(&self) -> std::cell::Ref<'_, [usize]> {
        std::cell::Ref::map(self.uprobes.borrow(), Uprobes::unattached)
    }

    /// Function list entries ("BINARY:SYMBOL") whose binary was found neither on the host nor
    /// in a target's file system.
    pub fn unmatched_functions(&self) -> Vec<String> {
        self.uprobes.borrow().unmatched()
    }

    /// Probes the function list's binaries as process `pid` sees them, where they are files
    /// not probed yet (a container's copies).
    pub(super) fn probe_functions_in_root_of(&self, pid: u32) -> Result<()> {
        if self.uprobes.borrow().listed() == 0 {
            return Ok(());
        }
        self.uprobes
            .borrow_mut()
            .attach_in_root_of(&self.hit_programs(), pid)?;
        Ok(())
    }

    /// Function ids detached at `detach_functions_after_calls` (counted up to then).
    pub fn detached_functions(&self) -> std::cell::Ref<'_, [usize]> {
        std::cell::Ref::map(self.uprobes.borrow(), Uprobes::detached)
    }

    /// Detaches the functions past the call limit, when a look is due.
    pub(super) fn detach_hot_functions(&self) -> Result<()> {
        if !self.uprobes.borrow().detach_due() {
            return Ok(());
        }
        let calls = self.function_calls()?;
        self.uprobes
            .borrow_mut()
            .detach_past_limit(&self.hit_programs(), &calls)?;
        Ok(())
    }

    /// Calls of each function so far, indexed by function id, summed over CPUs.
    pub fn function_calls(&self) -> Result<Vec<u64>> {
        let n = self.functions().len();
        let mut out = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let per_cpu = self
                .skel
                .maps
                .function_calls
                .lookup_percpu(&id.to_ne_bytes(), MapFlags::ANY)?;
            out.push(per_cpu.map(|v| sum_per_cpu(&v)).unwrap_or(0));
        }
        Ok(out)
    }
}
