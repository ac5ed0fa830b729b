//! What each traced process was built from and configured with (the dump's
//! `ProcInfo::environment`, tracedump/src/environment.rs): its executable and libraries, the
//! configuration files its command line names or it opened read-only under /etc at its start
//! (the kernel reports those: bpf/tracer/config_opens.h), its rlimits and cgroup limits, and
//! the filesystems of its working, data and root directories and of the directories its
//! recorded events named (storage.rs).
//!
//! The recorder tells [`Environments`] what happens (a process learned at its exec or by the
//! start-up scan, a fork, a configuration file opened, an exit) through a bounded queue that
//! never waits; a worker thread (worker.rs) does the reading and hashing, with every version
//! of a file hashed once (files.rs). A dump collects the environments of its process table,
//! refreshed for the processes still alive (libraries a dlopen added, limits changed since),
//! waiting at most [`COLLECT_WAIT`] for the worker.
mod files;
mod proc_files;
mod storage;
mod worker;

use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Sender, TrySendError};
use tracedump::environment::ProcEnvironment;
use tracedump::process::ProcInfo;

use crate::config::Config;
use worker::{Learned, Limits, Msg, Worker};

/// Messages queued for the worker at most; more are counted as lost.
const QUEUE: usize = 4096;

/// How long a dump waits for the worker's answer (it may be hashing a large file); past it,
/// the dump has the environments of the previous dump.
pub const COLLECT_WAIT: Duration = Duration::from_secs(3);

/// The recorder's handle on the environment worker. Inert when `environment_files` is 0.
pub struct Environments {
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    /// messages that found the queue full
    queue_full: u64,
    /// what the worker reported dropping, as of the last collect
    worker_lost: u64,
    /// the last answer, for a dump whose collect timed out
    last: HashMap<u32, ProcEnvironment>,
}

impl Environments {
    pub fn new(config: &Config) -> Self {
        let mut envs = Environments {
            tx: None,
            thread: None,
            queue_full: 0,
            worker_lost: 0,
            last: HashMap::new(),
        };
        if config.environment_files == 0 {
            return envs;
        }
        let limits = Limits {
            files: config.environment_files,
            capture: config.capture_config_files,
            window: Duration::from_millis(config.config_window_ms),
            processes: config.processes,
        };
        let (tx, rx) = bounded(QUEUE);
        let spawned = std::thread::Builder::new()
            .name("environments".into())
            .spawn(move || Worker::new(limits).run(rx));
        match spawned {
            Ok(thread) => {
                envs.tx = Some(tx);
                envs.thread = Some(thread);
            }
            Err(e) => log::error!("no process environments: cannot start their thread: {e}"),
        }
        envs
    }

    /// Messages about processes that never reached the worker or found no room there.
    pub fn lost(&self) -> u64 {
        self.queue_full + self.worker_lost
    }

    fn send(&mut self, msg: Msg) {
        let Some(tx) = &self.tx else { return };
        match tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.queue_full += 1,
            Err(TrySendError::Disconnected(_)) => {
                log::error!("the process environments' thread ended; no more environments");
                self.tx = None;
            }
        }
    }

    /// A process exec'd (`running`: found by the start-up scan, its start long over).
    pub fn learn(&mut self, p: &ProcInfo, running: bool) {
        if self.tx.is_none() {
            return;
        }
        self.send(Msg::Learn(Learned {
            pid: p.pid,
            exe: p.exe.clone(),
            argv: p.cmdline.clone().unwrap_or_default(),
            cwd: p.cwd.clone(),
            cgroup: p.cgroup.clone(),
            running,
        }));
    }

    pub fn fork(&mut self, child: u32, parent: u32) {
        self.send(Msg::Fork { child, parent });
    }

    /// The kernel saw `pid` open `path` under /etc, `after_ns` into its life.
    pub fn config_open(&mut self, pid: u32, path: String, after_ns: u64) {
        self.send(Msg::ConfigOpen { pid, path, after_ns });
    }

    pub fn exited(&mut self, pid: u32) {
        self.send(Msg::Exit(pid));
    }

    /// Sets the environment of every process of `procs` (a dump's table), with the
    /// filesystems of the directories `touched` (pid -> directories its recorded events
    /// named). The worker forgets the processes not in it (the table evicted them).
    pub fn fill(&mut self, procs: &mut [ProcInfo], touched: HashMap<u32, Vec<String>>) {
        let Some(tx) = &self.tx else { return };
        let (reply, answer) = bounded(1);
        let pids = procs.iter().map(|p| p.pid).collect();
        // blocking: the collect must follow what is queued, and the worker drains the queue
        if tx
            .send_timeout(Msg::Collect(pids, touched, reply), COLLECT_WAIT)
            .is_ok()
        {
            match answer.recv_timeout(COLLECT_WAIT) {
                Ok(c) => {
                    self.worker_lost = c.lost;
                    self.last = c.environments.into_iter().collect();
                }
                Err(_) => log::warn!(
                    "process environments: no answer within {COLLECT_WAIT:?}; the dump has the previous ones"
                ),
            }
        }
        for p in procs.iter_mut() {
            p.environment = self.last.get(&p.pid).cloned();
        }
    }
}

impl Drop for Environments {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
