//! `tracerd status`: what a running daemon answers about itself (version and uptime, the
//! kernel paths it took, its targets, the window, event rates, losses, dumps, functions not
//! found, reloads), as JSON over the control socket, and the text the command prints.
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::engine::Engine;
use crate::recorder::Recorder;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub pid: u32,
    pub uptime_s: u64,
    /// the kernel and the paths taken on it (`tracerd kernel`'s line)
    pub kernel: String,
    /// how failed syscalls are caught, in words
    pub failed_syscalls: String,
    pub targets: Targets,
    pub window: Window,
    /// records received per second over the last minute, by kind (kinds with none left out)
    pub events_per_second: BTreeMap<String, f64>,
    /// what was lost or not recorded since start, by reason (the metrics' reasons)
    pub lost: BTreeMap<String, u64>,
    pub dumps: Dumps,
    pub functions: Functions,
    pub reloads: Reloads,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Targets {
    /// no target configured: every process but tracerd
    pub every_process: bool,
    /// the selectors, as "target_comm redis-server", "target_pid 42", ...
    pub selectors: Vec<String>,
    /// processes in the kernel's target set now
    pub processes: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Window {
    pub events: usize,
    pub capacity: usize,
    /// age of the oldest event in the window (None: empty)
    pub oldest_event_age_ms: Option<u64>,
    /// bytes of the records held, and of the ring when full
    pub record_bytes: usize,
    pub record_capacity_bytes: usize,
    /// bytes of paths and addresses held, and the arena's size (blob_bytes)
    pub blob_bytes: usize,
    pub blob_capacity_bytes: usize,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Dumps {
    pub dir: String,
    pub written: u64,
    pub failed: u64,
    /// old dumps removed to keep the directory within dump_dir_max_bytes / dump_dir_max_files
    pub removed: u64,
    pub last: Option<LastDump>,
    /// the last failure's message, if the last dump failed
    pub last_error: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LastDump {
    pub path: String,
    /// wall-clock time it was written (RFC 3339)
    pub time: String,
    /// what asked for it: request (tracerd dump), signal (SIGUSR1), stop, or a trigger rule
    pub trigger: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Functions {
    pub configured: usize,
    pub attach_failed: u64,
    /// list entries whose binary is no file a target runs, on the host or in a target's
    /// mount namespace ("BINARY:SYMBOL")
    pub unmatched: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Reloads {
    pub done: u64,
    pub failed: u64,
    pub last_error: Option<String>,
}

/// Counts per kind sampled once a second, for the rates over the last minute.
pub struct RateWindow {
    samples: VecDeque<(Instant, [u64; 8])>,
}

/// The span the rates are taken over.
pub const RATE_SPAN: Duration = Duration::from_secs(60);

impl RateWindow {
    /// Rates from `start` on (nothing counted before it), until a minute has passed.
    pub fn new(start: Instant) -> RateWindow {
        let mut samples = VecDeque::with_capacity(RATE_SPAN.as_secs() as usize + 2);
        samples.push_back((start, [0; 8]));
        RateWindow { samples }
    }

    /// Adds a sample of the counts if a second has passed since the last one.
    pub fn sample(&mut self, now: Instant, counts: &[u64; 8]) {
        if self
            .samples
            .back()
            .is_some_and(|(t, _)| now.duration_since(*t) < Duration::from_secs(1))
        {
            return;
        }
        self.samples.push_back((now, *counts));
        // keep one sample at least RATE_SPAN old: the base of the rates
        while self.samples.len() > 2 && now.duration_since(self.samples[1].0) >= RATE_SPAN {
            self.samples.pop_front();
        }
    }

    /// Per-second rates of each count from the oldest sample to `counts` at `now`.
    pub fn rates(&self, now: Instant, counts: &[u64; 8]) -> [f64; 8] {
        let mut out = [0.0; 8];
        let Some((since, base)) = self.samples.front() else {
            return out;
        };
        let secs = now.duration_since(*since).as_secs_f64();
        if secs <= 0.0 {
            return out;
        }
        for (i, rate) in out.iter_mut().enumerate() {
            *rate = counts[i].saturating_sub(base[i]) as f64 / secs;
        }
        out
    }
}

/// The selectors of `config`'s target selection, one "setting value" each.
fn selectors(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let mut add = |setting: &str, values: Vec<String>| {
        out.extend(values.into_iter().map(|v| format!("{setting} {v}")));
    };
    add("target_comm", config.target_comm.clone());
    add(
        "target_exe",
        config
            .target_exe
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
    );
    add(
        "target_pid",
        config.target_pid.iter().map(u32::to_string).collect(),
    );
    add("target_unit", config.target_unit.clone());
    add("target_cgroup", config.target_cgroup.clone());
    add("target_container", config.target_container.clone());
    out
}

/// The status of a running engine; the daemon fills in its dumps and reloads.
pub fn gather(
    started: Instant,
    config: &Config,
    engine: &Engine,
    rec: &Recorder,
    rates: &RateWindow,
) -> Status {
    let now = Instant::now();
    let boot_now = crate::dump::ClockPair::now().boottime_ns;
    let record = std::mem::size_of::<tracedump::record::Record>();
    let per_second = rates.rates(now, rec.received_by_kind());
    let lost = match engine.kernel_counters() {
        Ok(k) => crate::metrics::loss_reasons(&k, &rec.counters())
            .iter()
            .map(|&(why, n)| (why.to_string(), n))
            .collect(),
        Err(e) => {
            log::warn!("status: reading the kernel's counters: {e:#}");
            BTreeMap::new()
        }
    };
    Status {
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        uptime_s: started.elapsed().as_secs(),
        kernel: crate::kernel::summary(),
        failed_syscalls: engine.syscall_hook().to_string(),
        targets: Targets {
            every_process: !config.has_targets(),
            selectors: selectors(config),
            processes: engine.targets_now(),
        },
        window: Window {
            events: rec.ring.len(),
            capacity: rec.ring.capacity(),
            oldest_event_age_ms: rec
                .ring
                .get(0)
                .map(|r| boot_now.saturating_sub(r.ts_ns) / 1_000_000),
            record_bytes: rec.ring.len() * record,
            record_capacity_bytes: rec.ring.capacity() * record,
            blob_bytes: rec.blobs.used_bytes(),
            blob_capacity_bytes: rec.blobs.capacity(),
        },
        events_per_second: crate::metrics::KINDS
            .iter()
            .filter(|&&(i, _)| per_second[i] > 0.0)
            .map(|&(i, kind)| (kind.to_string(), (per_second[i] * 10.0).round() / 10.0))
            .collect(),
        lost,
        dumps: Dumps {
            dir: config.dump_dir.display().to_string(),
            ..Default::default()
        },
        functions: Functions {
            configured: engine.listed_functions(),
            attach_failed: engine.uprobe_attach_failed(),
            unmatched: engine.unmatched_functions(),
        },
        reloads: Reloads::default(),
    }
}

fn duration_words(s: u64) -> String {
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{:.1} h", s as f64 / 3600.0),
        _ => format!("{:.1} days", s as f64 / 86400.0),
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

impl Status {
    /// What `tracerd status` prints.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = self.write_text(&mut out);
        out
    }

    fn write_text(&self, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "tracerd {} (pid {}), up {}",
            self.version,
            self.pid,
            duration_words(self.uptime_s)
        )?;
        writeln!(out, "{}", self.kernel)?;
        writeln!(out, "failed syscalls caught by {}", self.failed_syscalls)?;
        let t = &self.targets;
        let selection = if t.every_process {
            "every process".to_string()
        } else {
            t.selectors.join(", ")
        };
        writeln!(out, "targets: {selection}; {} processes traced now", t.processes)?;
        let w = &self.window;
        let oldest = w.oldest_event_age_ms.map_or("empty".to_string(), |ms| {
            format!("oldest event {} old", duration_words(ms / 1000))
        });
        writeln!(
            out,
            "window: {} of {} events ({:.0}%), {oldest}; records {} of {}, paths and addresses {} of {}",
            w.events,
            w.capacity,
            100.0 * w.events as f64 / w.capacity.max(1) as f64,
            mib(w.record_bytes),
            mib(w.record_capacity_bytes),
            mib(w.blob_bytes),
            mib(w.blob_capacity_bytes)
        )?;
        let rates: Vec<String> = self
            .events_per_second
            .iter()
            .map(|(k, v)| format!("{k} {v:.1}"))
            .collect();
        let rates = if rates.is_empty() {
            "none".into()
        } else {
            rates.join(", ")
        };
        writeln!(out, "events per second (last minute): {rates}")?;
        let lost: Vec<String> = self
            .lost
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let lost = if lost.is_empty() {
            "nothing".into()
        } else {
            lost.join(", ")
        };
        writeln!(out, "lost since start: {lost}")?;
        let d = &self.dumps;
        let last = d.last.as_ref().map_or("none yet".to_string(), |l| {
            format!("{} at {} ({})", l.path, l.time, l.trigger)
        });
        writeln!(
            out,
            "dumps to {}: {} written, {} failed, {} old ones removed; last: {last}",
            d.dir, d.written, d.failed, d.removed
        )?;
        if let Some(e) = &d.last_error {
            writeln!(out, "last dump failed: {e}")?;
        }
        let f = &self.functions;
        write!(
            out,
            "functions: {} configured, {} not attached",
            f.configured, f.attach_failed
        )?;
        if f.unmatched.is_empty() {
            writeln!(out)?;
        } else {
            writeln!(
                out,
                ", {} match no file a target runs: {}",
                f.unmatched.len(),
                f.unmatched.join(", ")
            )?;
        }
        let r = &self.reloads;
        write!(out, "reloads: {} done, {} refused", r.done, r.failed)?;
        match &r.last_error {
            Some(e) => writeln!(out, "; last refused: {e}"),
            None => writeln!(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_taken_over_the_last_minute() {
        let t0 = Instant::now();
        let mut w = RateWindow::new(t0);
        let mut counts = [0u64; 8];
        for s in 0..=120u64 {
            // 10 a second up to 60 s, 100 a second after
            counts[1] += if s <= 60 { 10 } else { 100 };
            w.sample(t0 + Duration::from_secs(s), &counts);
        }
        let r = w.rates(t0 + Duration::from_secs(120), &counts);
        assert!((r[1] - 100.0).abs() < 2.0, "{r:?}");
        assert_eq!(r[2], 0.0);
        // younger than a minute: since the start, counted from zero
        let young = RateWindow::new(t0);
        let r = young.rates(t0 + Duration::from_secs(10), &counts);
        assert_eq!(r[1], counts[1] as f64 / 10.0);
    }

    #[test]
    fn text_names_every_part() {
        let s = Status {
            version: "0.1.0".into(),
            targets: Targets {
                selectors: vec!["target_comm redis-server".into()],
                processes: 3,
                ..Default::default()
            },
            lost: [
                ("malformed".to_string(), 0),
                ("window_overwritten".to_string(), 7),
            ]
            .into(),
            functions: Functions {
                configured: 2,
                unmatched: vec!["/usr/bin/x:f".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        let text = s.text();
        for part in [
            "targets: target_comm redis-server; 3 processes",
            "lost since start: window_overwritten 7\n",
            "window: 0 of 0 events",
            "last: none yet",
            "1 match no file a target runs: /usr/bin/x:f",
            "reloads: 0 done, 0 refused",
        ] {
            assert!(text.contains(part), "{part:?} in:\n{text}");
        }
    }
}
