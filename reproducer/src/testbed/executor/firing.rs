//! The faults a run fires: what the probes and the seccomp supervisors report, the faults
//! without a context injected from here, and pauses ended when they are due.
use std::time::Instant;

use anyhow::Result;

use super::{Fired, Run};
use crate::model::plan::Planned;
use crate::model::schedule::Until;
use crate::testbed::injector::{boottime_ns, probe_names, InjEvent};
use crate::testbed::supervisor::SyscallFired;

/// What a fired syscall fault did, for run.json and `run`: the path, and for a short or
/// persistent fault what it wrote and how long it goes on.
fn syscall_detail(s: &SyscallFired, action: &Planned) -> String {
    let mut detail = s.path.clone().unwrap_or_default();
    if let Some((done, asked)) = s.short {
        detail += &format!(" (short: wrote {done} of {asked} bytes)");
    }
    if let Planned::Syscall {
        until: Some(until), ..
    } = action
    {
        detail += &match until {
            Until::End => "; every later matching call fails until the end".to_string(),
            Until::For(d) => format!(
                "; every later matching call fails for {}",
                humantime::format_duration(*d)
            ),
        };
    }
    detail
}

impl Run<'_> {
    fn record(&mut self, fault: usize, pid: u32, tid: u32, ts_ns: u64, detail: String) {
        let f = &self.plan.faults[fault];
        self.report.fired.push(Fired {
            fault: fault + 1,
            kind: f.kind().name().to_string(),
            node: f.fault.node.clone(),
            at_ms: ts_ns.saturating_sub(self.started_boot_ns) / 1_000_000,
            pid,
            tid,
            detail,
        });
        if let Planned::Pause { duration, .. } = f.action {
            self.resumes.push((Instant::now() + duration, pid));
        }
    }

    pub(super) fn handle_probe_events(&mut self, events: Vec<InjEvent>) {
        let names = probe_names(&self.injector.probes);
        for e in events {
            let name = names.get(&e.probe).cloned().unwrap_or_default();
            self.report.context.push(format!(
                "fault {}: {name} (step {}) in pid {}",
                e.fault + 1,
                e.step,
                e.pid
            ));
            if e.fired {
                self.record(e.fault, e.pid, e.tid, e.ts_ns, format!("at {name}"));
            }
        }
        while let Ok(s) = self.fired_rx.try_recv() {
            let detail = syscall_detail(&s, &self.plan.faults[s.fault].action);
            self.record(s.fault, s.pid, s.tid, s.ts_ns, detail);
        }
    }

    /// Injects the current process or network fault from here when it has no context and its
    /// node is up; called from the loop that starts once every node is ready and the workload
    /// runs (docs/reproducer.md says so).
    pub(super) fn fire_contextless(&mut self) -> Result<()> {
        let (index, _) = self.injector.state()?;
        let Some(f) = self.plan.faults.get(index) else {
            return Ok(());
        };
        if !f.context().after_functions.is_empty() {
            return Ok(());
        }
        let proc = &self.procs[f.node];
        if !proc.ready || proc.child.is_none() {
            return Ok(());
        }
        let pid = proc.pid;
        match f.action {
            Planned::Syscall { .. } => return Ok(()),
            Planned::Partition { duration, .. } => self.injector.activate_partition(index, duration)?,
            Planned::Crash { signal } | Planned::Pause { signal, .. } => {
                // SAFETY: kill(2) of a node process we started.
                unsafe { libc::kill(pid as i32, signal as i32) };
            }
        }
        self.injector.advance_past(index)?;
        self.record(
            index,
            pid,
            pid,
            boottime_ns(),
            "no context: injected when it became current".into(),
        );
        Ok(())
    }

    pub(super) fn resume_due(&mut self, all: bool) {
        let now = Instant::now();
        self.resumes.retain(|(at, pid)| {
            if all || *at <= now {
                // SAFETY: kill(2) of a node process we paused.
                unsafe { libc::kill(*pid as i32, libc::SIGCONT) };
                false
            } else {
                true
            }
        });
    }
}
