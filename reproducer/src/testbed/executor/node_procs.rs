//! A run's node processes: launching one (with its seccomp supervisor), waiting until it is
//! ready, and restarting the nodes that died and want it.
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::{NodeProc, NotStarted, Run};
use crate::testbed::nodes::{self, Launch};
use crate::testbed::supervisor;

impl Run<'_> {
    pub(super) fn launch(&mut self, i: usize) -> Result<()> {
        let node = &self.scenario.nodes[i];
        let argv = self.vars.expand_all(&node.command)?;
        let netns = self.netbed.of(&node.name).map(|n| n.netns.clone());
        let syscalls = &self.notify_syscalls[i];
        let filter = (!syscalls.is_empty()).then(|| crate::testbed::seccomp::notify_filter(syscalls));
        let (parent_end, child_end) = UnixStream::pair()?;
        let log = self.log_of(&node.name);
        let launch = Launch {
            argv: &argv,
            log: &log,
            netns: netns.as_deref(),
            cwd: &self.workdir,
            seccomp: filter
                .as_deref()
                .map(|f| (f, std::os::fd::AsRawFd::as_raw_fd(&child_end))),
            register: &[(self.injector.node_map_fd(), (i as u32).to_ne_bytes())],
            trace: Some(self.session.register_target_fd()),
            user: self.users[i].as_ref(),
        };
        if filter.is_some() {
            self.supervisors
                .push(supervisor::spawn(self.shared.clone(), i, parent_end)?);
        }
        let child = nodes::spawn(&launch)?;
        drop(child_end);
        let pid = child.id();
        self.vars.pids.insert(node.name.clone(), pid);
        self.report.launched.push((node.name.clone(), pid));
        let proc = NodeProc {
            child: Some(child),
            pid,
            ready: false,
        };
        if i < self.procs.len() {
            self.procs[i] = proc;
        } else {
            self.procs.push(proc);
        }
        self.wait_ready(i)
    }

    fn wait_ready(&mut self, i: usize) -> Result<()> {
        let node = &self.scenario.nodes[i];
        let Some(ready) = &node.ready else {
            self.procs[i].ready = true;
            return Ok(());
        };
        let argv = self.vars.expand_all(ready)?;
        let netns = self.netbed.of(&node.name).map(|n| n.netns.clone());
        let log = self.workdir.join(format!("{}.ready.log", node.name));
        let give_up = Instant::now() + Duration::from_secs(self.scenario.ready_timeout_s());
        while Instant::now() < give_up {
            if crate::interrupt::requested() {
                bail!("interrupted");
            }
            if let Some(status) = self.procs[i]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let log = nodes::log_tail(&self.log_of(&node.name), 10);
                return Err(NotStarted(format!(
                    "node {} exited ({status}) before it was ready; its log ends: {log}",
                    node.name
                ))
                .into());
            }
            let status = nodes::run_until(
                &argv,
                netns.as_deref(),
                &self.workdir,
                &log,
                Instant::now() + Duration::from_secs(5),
            )?;
            if status.is_some_and(|s| s.success()) {
                self.procs[i].ready = true;
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = nodes::log_tail(&self.log_of(&node.name), 10);
        Err(NotStarted(format!(
            "node {} never became ready ({}); its log ends: {log}",
            node.name,
            ready.join(" ")
        ))
        .into())
    }

    /// Restarts nodes that died and want it; marks the others down.
    pub(super) fn watch_nodes(&mut self) -> Result<()> {
        for i in 0..self.procs.len() {
            let exited = self.procs[i]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .is_some();
            if !exited {
                continue;
            }
            self.procs[i].child = None;
            self.procs[i].ready = false;
            if self.scenario.nodes[i].restart {
                self.launch(i)?;
            }
        }
        Ok(())
    }
}
