//! A tracing session on its own thread, for programs that trace while doing other work
//! (the reproducer's test runs): start it, add processes to trace, take dumps, stop.
//! The BPF objects stay on the session's thread; other threads talk to it over a channel.
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Result};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use crate::capture::take_dump;
use crate::config::Config;
use crate::engine::Engine;
use crate::recorder::Recorder;

enum Cmd {
    AddTarget(u32, Sender<Result<(), String>>),
    Dump(PathBuf, Sender<Result<PathBuf, String>>),
    Stop,
}

pub struct TraceSession {
    tx: Sender<Cmd>,
    thread: Option<JoinHandle<()>>,
    register_target: std::os::fd::OwnedFd,
}

fn serve(
    engine: &Engine,
    rec: &mut Recorder,
    config: &Config,
    rx: &Receiver<Cmd>,
    seq: &mut u64,
) -> ControlFlow<()> {
    while let Ok(cmd) = rx.try_recv() {
        match cmd {
            Cmd::AddTarget(pid, reply) => {
                let _ = reply.send(engine.add_target(pid).map_err(|e| format!("{e:#}")));
            }
            Cmd::Dump(dir, reply) => {
                *seq += 1;
                let _ = reply.send(take_dump(engine, rec, config, &dir, *seq).map_err(|e| format!("{e:#}")));
            }
            Cmd::Stop => return ControlFlow::Break(()),
        }
    }
    ControlFlow::Continue(())
}

impl TraceSession {
    /// Starts tracing as `config` says; returns once every probe is attached.
    pub fn start(config: Config) -> Result<TraceSession> {
        let (tx, rx) = unbounded::<Cmd>();
        let (ready_tx, ready_rx) = bounded::<Result<std::os::fd::OwnedFd, String>>(1);
        let thread = std::thread::Builder::new()
            .name("trace-session".into())
            .spawn(move || {
                let mut engine = match Engine::start(&config) {
                    Ok(e) => e,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                        return;
                    }
                };
                let mut rec = Recorder::new(&config);
                rec.add_processes(engine.take_initial_processes());
                let _ = ready_tx.send(engine.register_target_program().map_err(|e| format!("{e:#}")));
                let mut seq = 0;
                let result = engine.run(&mut rec, Duration::from_millis(20), |engine, rec| {
                    serve(engine, rec, &config, &rx, &mut seq)
                });
                if let Err(e) = result {
                    log::error!("tracing session stopped: {e:#}");
                }
            })?;
        let register_target = ready_rx
            .recv()
            .map_err(|_| anyhow!("tracing session thread died"))?
            .map_err(|e| anyhow!(e))?;
        Ok(TraceSession {
            tx,
            thread: Some(thread),
            register_target,
        })
    }

    /// Raw fd of the BPF program that adds a process to the traced set when run
    /// (`BPF_PROG_TEST_RUN`, the tgid as its first argument): a child can add itself before
    /// exec. The set itself is never written directly (see `Engine::add_target`).
    pub fn register_target_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.register_target.as_raw_fd()
    }

    /// Traces `pid` and, from now on, its descendants.
    pub fn add_target(&self, pid: u32) -> Result<()> {
        let (reply, rx) = bounded(1);
        self.tx
            .send(Cmd::AddTarget(pid, reply))
            .map_err(|_| anyhow!("tracing session is gone"))?;
        rx.recv()
            .map_err(|_| anyhow!("tracing session is gone"))?
            .map_err(|e| anyhow!(e))
    }

    /// Writes the window so far into `dir`; returns the dump's path.
    pub fn dump(&self, dir: &Path) -> Result<PathBuf> {
        let (reply, rx) = bounded(1);
        self.tx
            .send(Cmd::Dump(dir.to_path_buf(), reply))
            .map_err(|_| anyhow!("tracing session is gone"))?;
        rx.recv()
            .map_err(|_| anyhow!("tracing session is gone"))?
            .map_err(|e| anyhow!(e))
    }
}

impl Drop for TraceSession {
    fn drop(&mut self) {
        let _ = self.tx.send(Cmd::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
