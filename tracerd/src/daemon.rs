//! The long-running daemon: starts the engine, answers dump requests (SIGUSR1 and the
//! root-only control socket) without stopping the tracing, and exits cleanly on
//! SIGTERM/SIGINT.
use std::io::{BufRead, BufReader, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossbeam_channel::{Receiver, Sender};
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

use crate::capture::take_dump_with;
use crate::config::Config;
use crate::dump::{ClockPair, TriggerInfo};
use crate::engine::Engine;
use crate::metrics::{Exporter, Snapshot};
use crate::recorder::Recorder;
use crate::triggers::OngoingPause;
use tracedump::abi::comm_bytes;

type Reply = Sender<std::result::Result<PathBuf, String>>;

enum Command {
    Dump(Option<Reply>),
    Stop(&'static str),
}

fn spawn_signal_thread(tx: Sender<Command>) -> Result<signal_hook::iterator::Handle> {
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGTERM, SIGINT])?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                let cmd = match sig {
                    SIGUSR1 => Command::Dump(None),
                    SIGTERM => Command::Stop("SIGTERM"),
                    _ => Command::Stop("SIGINT"),
                };
                if tx.send(cmd).is_err() {
                    break;
                }
            }
        })?;
    Ok(handle)
}

/// Binds the control socket, refusing to steal it from a live daemon.
fn bind_control_socket(path: &Path) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("control socket directory {}", dir.display()))?;
    }
    if UnixStream::connect(path).is_ok() {
        bail!(
            "another tracerd is already running (its control socket {} answers)",
            path.display()
        );
    }
    let _ = std::fs::remove_file(path);
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

fn peer_is_root(stream: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(stream, PeerCredentials)
        .map(|c| c.uid() == 0)
        .unwrap_or(false)
}

fn serve_client(stream: UnixStream, tx: &Sender<Command>) -> Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut writer = stream.try_clone()?;
    if !peer_is_root(&stream) {
        writeln!(writer, "error only root may ask for dumps")?;
        return Ok(());
    }
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    if line.trim() != "dump" {
        writeln!(
            writer,
            "error unknown request '{}'; the only request is 'dump'",
            line.trim()
        )?;
        return Ok(());
    }
    let (reply_tx, reply_rx) = crossbeam_channel::bounded(1);
    tx.send(Command::Dump(Some(reply_tx)))?;
    match reply_rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Ok(path)) => writeln!(writer, "ok {}", path.display())?,
        Ok(Err(e)) => writeln!(writer, "error {e}")?,
        Err(_) => writeln!(writer, "error the daemon did not answer in time")?,
    }
    Ok(())
}

fn spawn_control_thread(listener: UnixListener, tx: Sender<Command>) -> Result<()> {
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let tx = tx.clone();
                // one thread per request: a slow client must not hold up the next one
                let _ = std::thread::Builder::new()
                    .name("control-client".into())
                    .spawn(move || {
                        if let Err(e) = serve_client(stream, &tx) {
                            log::warn!("control socket client: {e:#}");
                        }
                    });
            }
        })?;
    Ok(())
}

pub(crate) struct DumpState<'a> {
    config: &'a Config,
    seq: u64,
    /// dumps written and failed since start (metrics)
    pub(crate) written: u64,
    pub(crate) failed: u64,
}

impl DumpState<'_> {
    fn dump(
        &mut self,
        engine: &Engine,
        rec: &mut Recorder,
        trigger: Option<TriggerInfo>,
    ) -> std::result::Result<PathBuf, String> {
        let dir = &self.config.dump_dir;
        let started = Instant::now();
        self.seq += 1;
        let result = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("dump directory {}", dir.display()))
            .and_then(|_| take_dump_with(engine, rec, self.config, dir, self.seq, trigger));
        match result {
            Ok(path) => {
                self.written += 1;
                log::info!(
                    "dump written: {} ({} events, {} ms)",
                    path.display(),
                    rec.ring.len(),
                    started.elapsed().as_millis()
                );
                Ok(path)
            }
            Err(e) => {
                self.failed += 1;
                let msg = format!("{e:#}");
                log::error!("dump failed, still tracing: {msg}");
                Err(msg)
            }
        }
    }
}

/// Handles every queued command; several queued dump requests share one dump.
fn handle_commands(
    rx: &Receiver<Command>,
    state: &mut DumpState<'_>,
    engine: &Engine,
    rec: &mut Recorder,
) -> ControlFlow<&'static str> {
    let mut waiting: Vec<Option<Reply>> = Vec::new();
    let mut stop = None;
    while let Ok(cmd) = rx.try_recv() {
        match cmd {
            Command::Dump(reply) => waiting.push(reply),
            Command::Stop(why) => stop = Some(why),
        }
    }
    if let Some(info) = rec.triggers.as_mut().and_then(|t| t.take_due(Instant::now())) {
        // a triggered dump also answers the requests that are waiting
        let rule = info.rule.clone();
        let result = state.dump(engine, rec, Some(info));
        if let Ok(path) = &result {
            log::info!("triggered dump ({rule}): {}", path.display());
        }
        for reply in std::mem::take(&mut waiting).into_iter().flatten() {
            let _ = reply.send(result.clone());
        }
    }
    if !waiting.is_empty() {
        let result = state.dump(engine, rec, None);
        for reply in waiting.into_iter().flatten() {
            let _ = reply.send(result.clone());
        }
    }
    match stop {
        Some(why) => ControlFlow::Break(why),
        None => ControlFlow::Continue(()),
    }
}

fn snapshot<'a>(engine: &Engine, rec: &'a Recorder, state: &DumpState<'_>) -> Result<Snapshot<'a>> {
    Ok(Snapshot {
        kernel: engine.kernel_counters()?,
        recorder: rec.counters(),
        received_by_kind: *rec.received_by_kind(),
        gaps_by_protocol: rec.gaps_by_protocol().to_vec(),
        window_events: rec.ring.len(),
        window_capacity: rec.ring.capacity(),
        targets: engine.targets_now(),
        dumps_written: state.written,
        dumps_failed: state.failed,
        triggers: rec
            .triggers
            .iter()
            .flat_map(|t| t.counts())
            .map(|c| (c.rule, c.fired, c.suppressed))
            .collect(),
        uprobe_attach_failed: engine.uprobe_attach_failed(),
        uprobes: engine.functions().len(),
        containers: crate::metrics::per_container(rec.procs.iter()),
    })
}

/// How often the pause rule looks at the pauses still going on: it fires within this of a
/// pause reaching its threshold.
const PAUSE_LOOK_EVERY: Duration = Duration::from_millis(100);

/// Hands the pauses going on now to the pause rule, at most every [`PAUSE_LOOK_EVERY`]; reads
/// the kernel's map of paused threads (at most its 16384 entries, in a few batch reads) only
/// when the rule is on and some target thread is paused.
fn look_at_ongoing_pauses(engine: &Engine, rec: &mut Recorder, last: &mut Instant) {
    let Some(t) = rec.triggers.as_mut().filter(|t| t.watches_ongoing_pauses()) else {
        return;
    };
    if last.elapsed() < PAUSE_LOOK_EVERY {
        return;
    }
    *last = Instant::now();
    let now_ns = ClockPair::now().boottime_ns;
    if !engine.any_paused() {
        t.check_ongoing_pauses([], now_ns);
        return;
    }
    match engine.pauses() {
        Ok(paused) => t.check_ongoing_pauses(
            paused.into_iter().map(|(tid, p)| OngoingPause {
                pid: p.tgid,
                tid,
                start_ns: p.start_ns,
                cause: p.cause as u8,
                comm: comm_bytes(&p.comm),
            }),
            now_ns,
        ),
        Err(e) => log::debug!("reading the paused threads: {e:#}"),
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(config: Config) -> Result<()> {
    let (tx, rx) = crossbeam_channel::unbounded();
    // Signals first: a SIGUSR1 during start-up must not kill the daemon.
    let signal_handle = spawn_signal_thread(tx.clone())?;
    let listener = bind_control_socket(&config.control_socket)?;
    let mut engine = match Engine::start(&config) {
        Ok(engine) => engine,
        Err(e) => {
            let _ = std::fs::remove_file(&config.control_socket);
            return Err(e);
        }
    };
    let mut rec = Recorder::new(&config);
    rec.add_processes(engine.take_initial_processes());
    rec.triggers = Some(crate::triggers::Triggers::new(&config.triggers)?);
    spawn_control_thread(listener, tx)?;
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.dump_dir)
    {
        log::error!(
            "dump directory {}: {e}; dumps will fail until it is writable",
            config.dump_dir.display()
        );
    }
    log::info!(
        "ready: tracing {}, {} uprobes, window of {} events, dumps to {}",
        if config.has_targets() {
            "the configured targets"
        } else {
            "every process"
        },
        engine.functions().len(),
        config.ring_events,
        config.dump_dir.display()
    );
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    let mut state = DumpState {
        config: &config,
        seq: 0,
        written: 0,
        failed: 0,
    };
    let mut exporter = config
        .metrics_textfile
        .as_deref()
        .map(|p| Exporter::new(p, config.metrics_interval_ms));
    let mut pauses_looked = Instant::now();
    let why = engine.run(&mut rec, Duration::from_millis(100), |engine, rec| {
        look_at_ongoing_pauses(engine, rec, &mut pauses_looked);
        let flow = handle_commands(&rx, &mut state, engine, rec);
        if let Some(x) = &mut exporter {
            x.tick(|| snapshot(engine, rec, &state));
        }
        flow
    })?;
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    log::info!("stopping on {why}");
    signal_handle.close();
    let _ = std::fs::remove_file(&config.control_socket);
    Ok(())
}

/// Asks the running daemon for a dump; returns the path it wrote.
pub fn request_dump(socket: &Path) -> Result<PathBuf> {
    let mut stream = UnixStream::connect(socket).with_context(|| {
        format!(
            "cannot reach tracerd at {} (is it running? are you root?)",
            socket.display()
        )
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(130)))?;
    stream.write_all(b"dump\n")?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    let line = line.trim_end();
    if let Some(path) = line.strip_prefix("ok ") {
        return Ok(PathBuf::from(path));
    }
    match line.strip_prefix("error ") {
        Some(msg) => bail!("tracerd could not dump: {msg}"),
        None => bail!("tracerd gave no answer"),
    }
}
