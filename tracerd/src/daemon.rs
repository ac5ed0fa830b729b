//! The long-running daemon: starts the engine, answers dump, status and reload requests
//! (signals and the control socket) without stopping the tracing, and on SIGTERM/SIGINT
//! writes the window as a last dump (`dump_on_stop`) before it exits cleanly.
use std::ops::ControlFlow;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use crossbeam_channel::{Receiver, Sender};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};

use crate::capture::take_dump_with;
use crate::config::Config;
use crate::control::{Reply, Request};
use crate::dump::{ClockPair, TriggerInfo};
use crate::engine::Engine;
use crate::metrics::{Exporter, Snapshot};
use crate::recorder::Recorder;
use crate::status::{LastDump, RateWindow, Reloads, Status};
use crate::triggers::OngoingPause;
use tracedump::abi::comm_bytes;

/// The longest a dump on stop may take: within the unit's TimeoutStopSec (30 s) and
/// Kubernetes' default terminationGracePeriodSeconds (30 s), with room to exit.
pub const STOP_DUMP_WITHIN: Duration = Duration::from_secs(20);

fn spawn_signal_thread(tx: Sender<Request>) -> Result<signal_hook::iterator::Handle> {
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGHUP, SIGTERM, SIGINT])?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                let request = match sig {
                    SIGUSR1 => Request::Dump(None),
                    SIGHUP => Request::Reload(None),
                    SIGTERM => Request::Stop("SIGTERM"),
                    _ => Request::Stop("SIGINT"),
                };
                if tx.send(request).is_err() {
                    break;
                }
            }
        })?;
    Ok(handle)
}

fn create_dump_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Dumps written and failed since start, and the last of each.
#[derive(Default)]
struct DumpLog {
    seq: u64,
    written: u64,
    failed: u64,
    removed: u64,
    last: Option<LastDump>,
    last_error: Option<String>,
}

/// Everything the daemon's loop keeps besides the engine and the recorder.
struct Daemon {
    config: Config,
    reread: Box<dyn Fn() -> Result<Config>>,
    started: Instant,
    dumps: DumpLog,
    rates: RateWindow,
    reloads: Reloads,
    exporter: Option<Exporter>,
    pauses_looked: Instant,
}

impl Daemon {
    /// Writes a dump; `why` says what asked for it (request, signal, stop, a trigger rule).
    fn dump(
        &mut self,
        engine: &Engine,
        rec: &mut Recorder,
        trigger: Option<TriggerInfo>,
        why: &str,
    ) -> std::result::Result<PathBuf, String> {
        let dir = self.config.dump_dir.clone();
        let started = Instant::now();
        self.dumps.seq += 1;
        let result = create_dump_dir(&dir)
            .map_err(anyhow::Error::from)
            .and_then(|_| take_dump_with(engine, rec, &self.config, &dir, self.dumps.seq, trigger));
        match result {
            Ok(path) => {
                self.dumps.written += 1;
                self.dumps.last_error = None;
                self.dumps.last = Some(LastDump {
                    path: path.display().to_string(),
                    time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
                    trigger: why.to_string(),
                });
                log::info!(
                    "dump written: {} ({} events, {} ms)",
                    path.display(),
                    rec.ring.len(),
                    started.elapsed().as_millis()
                );
                let c = &self.config;
                self.dumps.removed += crate::dumpdir::enforce_cap(
                    &dir,
                    c.dump_dir_max_bytes,
                    c.dump_dir_max_files,
                    Some(&path),
                );
                Ok(path)
            }
            Err(e) => {
                self.dumps.failed += 1;
                let line = crate::dumpdir::failure_line(&dir, &e);
                log::error!("dump failed: {line}");
                self.dumps.last_error = Some(line.clone());
                Err(line)
            }
        }
    }

    /// Handles every queued request; several queued dump requests share one dump.
    fn handle(
        &mut self,
        rx: &Receiver<Request>,
        engine: &Engine,
        rec: &mut Recorder,
    ) -> ControlFlow<&'static str> {
        let mut waiting: Vec<Option<Reply>> = Vec::new();
        let mut stop = None;
        while let Ok(request) = rx.try_recv() {
            match request {
                Request::Dump(reply) => waiting.push(reply),
                Request::Status(reply) => {
                    let _ = reply
                        .send(serde_json::to_string(&self.status(engine, rec)).map_err(|e| e.to_string()));
                }
                Request::Reload(reply) => {
                    let result = self.reload(engine, rec);
                    if let Some(reply) = reply {
                        let _ = reply.send(result);
                    }
                }
                Request::Stop(why) => stop = Some(why),
            }
        }
        if let Some(info) = rec.triggers.as_mut().and_then(|t| t.take_due(Instant::now())) {
            // a triggered dump also answers the requests that are waiting
            let rule = info.rule.clone();
            let result = self.dump(engine, rec, Some(info.clone()), &rule);
            match &result {
                Ok(path) => log::info!("triggered dump ({rule}): {}", path.display()),
                // retried at the rule's next event, not after min_interval_ms
                Err(_) => {
                    if let Some(t) = rec.triggers.as_mut() {
                        t.dump_failed(&info)
                    }
                }
            }
            answer(std::mem::take(&mut waiting), &result);
        }
        if !waiting.is_empty() {
            let why = if waiting.iter().any(Option::is_some) {
                "request"
            } else {
                "signal"
            };
            let result = self.dump(engine, rec, None, why);
            answer(waiting, &result);
        }
        match stop {
            Some(why) => ControlFlow::Break(why),
            None => ControlFlow::Continue(()),
        }
    }

    /// Re-reads the configuration and applies it; a configuration that does not parse or
    /// validate, or cannot be applied, is refused and the one in force stays.
    fn reload(&mut self, engine: &Engine, rec: &mut Recorder) -> std::result::Result<String, String> {
        let result = (self.reread)().and_then(|new| crate::reload::apply(engine, rec, &self.config, new));
        match result {
            Ok(r) => {
                self.reloads.done += 1;
                log::info!("{}", r.summary);
                if r.config.metrics_textfile != self.config.metrics_textfile
                    || r.config.metrics_interval_ms != self.config.metrics_interval_ms
                {
                    self.exporter = exporter_of(&r.config);
                }
                if let Err(e) = create_dump_dir(&r.config.dump_dir) {
                    log::error!(
                        "dump directory {}: {e}; dumps will fail until it is writable",
                        r.config.dump_dir.display()
                    );
                }
                self.config = r.config;
                Ok(r.summary)
            }
            Err(e) => {
                self.reloads.failed += 1;
                let line = format!("{e:#}").replace('\n', " ");
                log::error!("reload refused, the configuration in force stays: {line}");
                self.reloads.last_error = Some(line.clone());
                Err(line)
            }
        }
    }

    fn status(&self, engine: &Engine, rec: &Recorder) -> Status {
        let mut s = crate::status::gather(self.started, &self.config, engine, rec, &self.rates);
        s.dumps.written = self.dumps.written;
        s.dumps.failed = self.dumps.failed;
        s.dumps.removed = self.dumps.removed;
        s.dumps.last = self.dumps.last.clone();
        s.dumps.last_error = self.dumps.last_error.clone();
        s.reloads = self.reloads.clone();
        s
    }

    fn snapshot<'a>(&self, engine: &Engine, rec: &'a Recorder) -> Result<Snapshot<'a>> {
        Ok(Snapshot {
            kernel: engine.kernel_counters()?,
            recorder: rec.counters(),
            received_by_kind: *rec.received_by_kind(),
            gaps_by_protocol: rec.gaps_by_protocol().to_vec(),
            window_events: rec.ring.len(),
            window_capacity: rec.ring.capacity(),
            targets: engine.targets_now(),
            dumps_written: self.dumps.written,
            dumps_failed: self.dumps.failed,
            dumps_removed: self.dumps.removed,
            reloads_failed: self.reloads.failed,
            triggers: rec
                .triggers
                .iter()
                .flat_map(|t| t.counts())
                .map(|c| (c.rule, c.fired, c.suppressed))
                .collect(),
            uprobe_attach_failed: engine.uprobe_attach_failed(),
            uprobes: engine.listed_functions(),
            unmatched_functions: engine.unmatched_functions(),
            containers: crate::metrics::per_container(rec.procs.iter()),
        })
    }

    /// The window as a last dump, within [`STOP_DUMP_WITHIN`]: past it the daemon exits
    /// without it (the unit would kill it anyway), leaving no partial file.
    fn dump_on_stop(&mut self, engine: &Engine, rec: &mut Recorder, why: &str) {
        let (done, finished) = crossbeam_channel::bounded::<()>(1);
        let dir = self.config.dump_dir.clone();
        let _ = std::thread::Builder::new()
            .name("stop-dump-limit".into())
            .spawn(move || {
                if finished.recv_timeout(STOP_DUMP_WITHIN).is_err() {
                    log::error!(
                        "the dump on stop did not finish within {} s; exiting without it",
                        STOP_DUMP_WITHIN.as_secs()
                    );
                    remove_temp_dumps(&dir);
                    std::process::exit(1);
                }
            });
        let info = TriggerInfo {
            rule: "stop".into(),
            ts_ns: ClockPair::now().boottime_ns,
            pid: std::process::id(),
            tid: std::process::id(),
            comm: "tracerd".into(),
            event: why.to_string(),
            suppressed_before: 0,
            joined: Vec::new(),
        };
        if let Ok(path) = self.dump(engine, rec, Some(info), "stop") {
            log::info!("dump on stop ({why}): {}", path.display());
        }
        let _ = done.send(());
    }
}

/// Removes this process's temp files of unfinished dumps in `dir` (see tracedump's atomic
/// writer: `.NAME.PID.tmp`).
fn remove_temp_dumps(dir: &Path) {
    let suffix = format!(".{}.tmp", std::process::id());
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tracerd-") && name.ends_with(&suffix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn answer(waiting: Vec<Option<Reply>>, result: &std::result::Result<PathBuf, String>) {
    let text = result
        .as_ref()
        .map(|p| p.display().to_string())
        .map_err(Clone::clone);
    for reply in waiting.into_iter().flatten() {
        let _ = reply.send(text.clone());
    }
}

fn exporter_of(config: &Config) -> Option<Exporter> {
    config
        .metrics_textfile
        .as_deref()
        .map(|p| Exporter::new(p, config.metrics_interval_ms))
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

/// Runs the daemon until SIGTERM or SIGINT; `reread` makes the configuration again at each
/// reload (the file and the command line's flags).
pub fn run(config: Config, reread: impl Fn() -> Result<Config> + 'static) -> Result<()> {
    let (tx, rx) = crossbeam_channel::unbounded();
    // Signals first: a SIGUSR1 or SIGHUP during start-up must not kill the daemon.
    let signal_handle = spawn_signal_thread(tx.clone())?;
    let listener = crate::control::bind(&config.control_socket)?;
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
    rec.watch_execs = engine.listed_functions() > 0;
    crate::control::spawn_listener(listener, tx)?;
    let mut daemon = Daemon {
        exporter: exporter_of(&config),
        config,
        reread: Box::new(reread),
        started: Instant::now(),
        dumps: DumpLog::default(),
        rates: RateWindow::new(Instant::now()),
        reloads: Reloads::default(),
        pauses_looked: Instant::now(),
    };
    let c = &daemon.config;
    match create_dump_dir(&c.dump_dir) {
        // dumps of earlier runs (on stop, triggered) count against the cap too
        Ok(()) => {
            daemon.dumps.removed +=
                crate::dumpdir::enforce_cap(&c.dump_dir, c.dump_dir_max_bytes, c.dump_dir_max_files, None)
        }
        Err(e) => log::error!(
            "dump directory {}: {e}; dumps will fail until it is writable",
            c.dump_dir.display()
        ),
    }
    log::info!(
        "ready: tracing {}, {} uprobes, window of {} events, dumps to {}",
        if c.has_targets() {
            "the configured targets"
        } else {
            "every process"
        },
        engine.listed_functions(),
        c.ring_events,
        c.dump_dir.display()
    );
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    let why = engine.run(&mut rec, Duration::from_millis(100), |engine, rec| {
        look_at_ongoing_pauses(engine, rec, &mut daemon.pauses_looked);
        daemon.rates.sample(Instant::now(), rec.received_by_kind());
        let flow = daemon.handle(&rx, engine, rec);
        if let Some(mut x) = daemon.exporter.take() {
            x.tick(|| daemon.snapshot(engine, rec));
            daemon.exporter = Some(x);
        }
        flow
    })?;
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    log::info!("stopping on {why}");
    if daemon.config.dump_on_stop {
        daemon.dump_on_stop(&engine, &mut rec, why);
    }
    signal_handle.close();
    let _ = std::fs::remove_file(&daemon.config.control_socket);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seconds of `key=NNs` or `key: NN` in `text`.
    fn seconds(text: &str, key: &str) -> u64 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no {key}"));
        let digits: String = line[line.find(key).unwrap() + key.len()..]
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    }

    /// The dump on stop ends before systemd or Kubernetes kill the daemon, with room to exit.
    #[test]
    fn the_dump_on_stop_fits_the_stop_timeouts() {
        let unit = include_str!("../../systemd/tracerd.service");
        let daemonset = include_str!("../../deploy/kubernetes/tracerd-daemonset.yaml");
        let limit = STOP_DUMP_WITHIN.as_secs();
        assert!(seconds(unit, "TimeoutStopSec=") >= limit + 5);
        assert!(seconds(daemonset, "terminationGracePeriodSeconds:") >= limit + 5);
        assert!(
            unit.contains("ExecReload=/usr/bin/tracerd reload"),
            "systemctl reload applies the configuration"
        );
    }
}
