//! Health figures in the Prometheus text format (0.0.4), written as a node_exporter
//! textfile-collector file (`metrics_textfile`): loss counters, events per kind, window fill,
//! processes traced (in all, and per container), dumps written, triggers fired and
//! suppressed, attach failures.
//!
//! A textfile rather than a listening port: a systemd host already runs node_exporter, the
//! daemon opens no socket, and a stale file is visible as `node_textfile_mtime_seconds`. The
//! `prometheus` crate's text encoder writes the format node_exporter parses (0.0.4, counters
//! named `*_total` in their TYPE lines).
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use std::collections::HashMap;

use anyhow::{Context, Result};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};

use crate::engine::KernelCounters;
use crate::procs::ProcInfo;
use crate::recorder::RecorderCounters;

/// Everything the metrics file shows, read on the engine's thread.
pub struct Snapshot<'a> {
    pub kernel: KernelCounters,
    pub recorder: RecorderCounters,
    /// records received per kind (index: `tracerd_event_kind`)
    pub received_by_kind: [u64; 8],
    /// network gaps received per IP protocol (6 TCP, 17 UDP, a raw socket's own)
    pub gaps_by_protocol: Vec<(u16, u64)>,
    pub window_events: usize,
    pub window_capacity: usize,
    /// processes in the kernel's target set (0 without a target filter)
    pub targets: u64,
    pub dumps_written: u64,
    pub dumps_failed: u64,
    /// old dumps removed to keep the dump directory within its bounds
    pub dumps_removed: u64,
    /// reloads refused (the configuration did not parse, validate or apply)
    pub reloads_failed: u64,
    /// (rule, fired, suppressed)
    pub triggers: Vec<(&'a str, u64, u64)>,
    pub uprobe_attach_failed: u64,
    pub uprobes: usize,
    /// function list entries whose binary was found nowhere ("BINARY:SYMBOL")
    pub unmatched_functions: Vec<String>,
    /// live traced processes per container (see [`per_container`])
    pub containers: Vec<ContainerProcesses>,
}

/// Live traced processes of one container (or pod), for `tracerd_container_processes`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContainerProcesses {
    pub runtime: String,
    pub container_id: String,
    pub pod_uid: String,
    pub processes: u64,
}

/// Most containers with a series of their own; the rest are summed as container_id "other",
/// so that a host that runs many short-lived containers keeps a bounded number of series.
pub const MAX_CONTAINER_SERIES: usize = 100;

/// Live processes of `procs` per container, the largest first, at most
/// [`MAX_CONTAINER_SERIES`] of them plus "other".
pub fn per_container<'p>(procs: impl Iterator<Item = &'p ProcInfo>) -> Vec<ContainerProcesses> {
    let mut counts: HashMap<(String, String, String), u64> = HashMap::new();
    for p in procs.filter(|p| p.exit_ns.is_none()) {
        if p.container_id.is_none() && p.pod_uid.is_none() {
            continue;
        }
        let key = (
            p.container_runtime.clone().unwrap_or_default(),
            p.container_id.clone().unwrap_or_default(),
            p.pod_uid.clone().unwrap_or_default(),
        );
        *counts.entry(key).or_default() += 1;
    }
    let mut all: Vec<ContainerProcesses> = counts
        .into_iter()
        .map(
            |((runtime, container_id, pod_uid), processes)| ContainerProcesses {
                runtime,
                container_id,
                pod_uid,
                processes,
            },
        )
        .collect();
    all.sort_by(|a, b| b.processes.cmp(&a.processes).then_with(|| a.cmp(b)));
    if all.len() > MAX_CONTAINER_SERIES {
        let other: u64 = all[MAX_CONTAINER_SERIES..].iter().map(|c| c.processes).sum();
        all.truncate(MAX_CONTAINER_SERIES);
        all.push(ContainerProcesses {
            container_id: "other".into(),
            processes: other,
            ..Default::default()
        });
    }
    all
}

/// Record kinds by their `tracerd_event_kind` index.
pub const KINDS: [(usize, &str); 7] = [
    (1, "syscall_failure"),
    (2, "function"),
    (3, "network_gap"),
    (4, "process_state"),
    (5, "process_start"),
    (6, "config_open"),
    (7, "process_rename"),
];

fn family(name: &str, help: &str, kind: MetricType, samples: Vec<(Vec<(&str, &str)>, f64)>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(kind);
    for (labels, value) in samples {
        let mut m = Metric::default();
        m.set_label(
            labels
                .into_iter()
                .map(|(k, v)| {
                    let mut l = LabelPair::default();
                    l.set_name(k.to_string());
                    l.set_value(v.to_string());
                    l
                })
                .collect(),
        );
        if kind == MetricType::COUNTER {
            let mut c = Counter::default();
            c.set_value(value);
            m.set_counter(c);
        } else {
            let mut g = Gauge::default();
            g.set_value(value);
            m.set_gauge(g);
        }
        f.mut_metric().push(m);
    }
    f
}

fn counter(name: &str, help: &str, value: u64) -> MetricFamily {
    family(name, help, MetricType::COUNTER, vec![(Vec::new(), value as f64)])
}

/// Every loss counter by its reason (the metrics' label, `tracerd status`'s names).
pub fn loss_reasons(k: &KernelCounters, r: &RecorderCounters) -> [(&'static str, u64); 17] {
    [
        ("kernel_buffer_full_syscall", k.buffer_full_syscall),
        ("kernel_buffer_full_function", k.buffer_full_function),
        ("kernel_buffer_full_network", k.buffer_full_network),
        ("kernel_buffer_full_process", k.buffer_full_process),
        ("kernel_buffer_full_process_start", k.buffer_full_process_start),
        ("path_unreadable", k.path_unreadable),
        ("targets_full", k.targets_full),
        ("pauses_full", k.pauses_full),
        ("connections_full", k.connections_full),
        ("flows_full", k.flows_full),
        ("syscall_counts_full", k.syscall_counts_full),
        ("fds_unnamed", k.fds_unnamed),
        ("kernel_buffer_full_config", k.buffer_full_config),
        ("environment_lost", r.environment_lost),
        ("malformed", r.malformed),
        ("window_overwritten", r.ring_overwritten),
        ("process_table_evicted", r.process_table_evicted),
    ]
}

/// The metric families of `s`.
pub fn families(s: &Snapshot<'_>) -> Vec<MetricFamily> {
    let lost = loss_reasons(&s.kernel, &s.recorder);
    let gap_protocols: Vec<(String, u64)> = s
        .gaps_by_protocol
        .iter()
        .map(|&(p, n)| (tracedump::addr::protocol_name(p), n))
        .collect();
    let fill = if s.window_capacity == 0 {
        0.0
    } else {
        s.window_events as f64 / s.window_capacity as f64
    };
    vec![
        family(
            "tracerd_events_received_total",
            "Records received from the kernel, by kind.",
            MetricType::COUNTER,
            KINDS
                .iter()
                .map(|&(i, kind)| (vec![("kind", kind)], s.received_by_kind[i] as f64))
                .collect(),
        ),
        family(
            "tracerd_network_gaps_total",
            "Network gaps received from the kernel, by IP protocol (tcp: connections; udp and raw IP protocols: datagram flows).",
            MetricType::COUNTER,
            gap_protocols
                .iter()
                .map(|(name, n)| (vec![("protocol", name.as_str())], *n as f64))
                .collect(),
        ),
        family(
            "tracerd_lost_total",
            "Data lost or not recorded, by where it was lost (the dump's counters).",
            MetricType::COUNTER,
            lost.iter()
                .map(|&(why, n)| (vec![("reason", why)], n as f64))
                .collect(),
        ),
        family(
            "tracerd_window_events",
            "Events in the in-memory window.",
            MetricType::GAUGE,
            vec![(Vec::new(), s.window_events as f64)],
        ),
        family(
            "tracerd_window_capacity_events",
            "Capacity of the window (ring_events).",
            MetricType::GAUGE,
            vec![(Vec::new(), s.window_capacity as f64)],
        ),
        family(
            "tracerd_window_fill_ratio",
            "Window events over capacity.",
            MetricType::GAUGE,
            vec![(Vec::new(), fill)],
        ),
        family(
            "tracerd_targets",
            "Processes traced now (the target set; 0 when every process is traced).",
            MetricType::GAUGE,
            vec![(Vec::new(), s.targets as f64)],
        ),
        counter(
            "tracerd_dumps_written_total",
            "Dumps written (asked for or triggered).",
            s.dumps_written,
        ),
        counter(
            "tracerd_dumps_failed_total",
            "Dumps that could not be written.",
            s.dumps_failed,
        ),
        family(
            "tracerd_triggers_fired_total",
            "Trigger rules that fired (each makes or joins a dump).",
            MetricType::COUNTER,
            s.triggers
                .iter()
                .map(|&(rule, fired, _)| (vec![("rule", rule)], fired as f64))
                .collect(),
        ),
        family(
            "tracerd_triggers_suppressed_total",
            "Triggers suppressed by their rule's rate limit (triggers.min_interval_ms).",
            MetricType::COUNTER,
            s.triggers
                .iter()
                .map(|&(rule, _, suppressed)| (vec![("rule", rule)], suppressed as f64))
                .collect(),
        ),
        counter(
            "tracerd_dumps_removed_total",
            "Old dumps removed to keep the dump directory within dump_dir_max_bytes and dump_dir_max_files.",
            s.dumps_removed,
        ),
        counter(
            "tracerd_reloads_failed_total",
            "Reloads (SIGHUP, tracerd reload) refused; the configuration in force stayed.",
            s.reloads_failed,
        ),
        counter(
            "tracerd_uprobe_attach_failures_total",
            "Functions whose uprobe could not be attached.",
            s.uprobe_attach_failed,
        ),
        family(
            "tracerd_container_processes",
            "Traced processes alive now per container (from the process table; at most 100 containers, the rest as container_id=\"other\").",
            MetricType::GAUGE,
            s.containers
                .iter()
                .map(|c| {
                    let labels = vec![
                        ("runtime", c.runtime.as_str()),
                        ("container_id", c.container_id.as_str()),
                        ("pod_uid", c.pod_uid.as_str()),
                    ];
                    (labels, c.processes as f64)
                })
                .collect(),
        ),
        family(
            "tracerd_functions_unmatched",
            "Function list entries whose binary is neither on the host nor in a target's file system.",
            MetricType::GAUGE,
            vec![(Vec::new(), s.unmatched_functions.len() as f64)],
        ),
        family(
            "tracerd_function_unmatched",
            "A function list entry whose binary was found nowhere (at most 100 entries named).",
            MetricType::GAUGE,
            s.unmatched_functions
                .iter()
                .take(MAX_CONTAINER_SERIES)
                .map(|f| (vec![("function", f.as_str())], 1.0))
                .collect(),
        ),
        family(
            "tracerd_uprobes",
            "Functions configured for uprobes.",
            MetricType::GAUGE,
            vec![(Vec::new(), s.uprobes as f64)],
        ),
    ]
}

pub fn render(s: &Snapshot<'_>) -> Result<String> {
    let mut families = families(s);
    // a family without samples (no trigger rules) is not valid exposition text
    families.retain(|f| !f.get_metric().is_empty());
    Ok(prometheus::TextEncoder::new().encode_to_string(&families)?)
}

/// Replaces `path` atomically (hidden temp name in the same directory, fsync, rename), so
/// node_exporter never reads a half-written file. Mode 0644: metrics are not secret.
pub fn write_textfile(path: &Path, text: &str) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().context("metrics_textfile has no file name")?;
    // node_exporter reads only *.prom: the temp name must not end in it
    let temp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let result = (|| -> Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&temp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&temp, path)?;
        File::open(dir)?.sync_all()?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result.with_context(|| format!("metrics file {}", path.display()))
}

/// Rewrites the metrics file every `interval`; a failure is logged once per failing streak.
pub struct Exporter {
    path: std::path::PathBuf,
    interval: std::time::Duration,
    next: std::time::Instant,
    failing: bool,
}

impl Exporter {
    pub fn new(path: &Path, interval_ms: u64) -> Exporter {
        let interval = std::time::Duration::from_millis(interval_ms);
        Exporter {
            path: path.to_path_buf(),
            interval,
            next: std::time::Instant::now(),
            failing: false,
        }
    }

    /// Writes the file if it is due; `snapshot` is only called then.
    pub fn tick<'a>(&mut self, snapshot: impl FnOnce() -> Result<Snapshot<'a>>) {
        let now = std::time::Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + self.interval;
        match snapshot()
            .and_then(|s| render(&s))
            .and_then(|text| write_textfile(&self.path, &text))
        {
            Ok(()) => self.failing = false,
            Err(e) if !self.failing => {
                self.failing = true;
                log::warn!("metrics not written: {e:#}");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_gauges() {
        let s = Snapshot {
            kernel: KernelCounters {
                buffer_full_syscall: 4,
                ..Default::default()
            },
            recorder: RecorderCounters::default(),
            received_by_kind: [0, 7, 0, 0, 1, 0, 0, 0],
            gaps_by_protocol: vec![(6, 2), (112, 1)],
            window_events: 8,
            window_capacity: 16,
            targets: 3,
            dumps_written: 2,
            dumps_failed: 0,
            dumps_removed: 0,
            reloads_failed: 0,
            triggers: vec![("fatal_signal", 1, 5)],
            uprobe_attach_failed: 0,
            uprobes: 0,
            unmatched_functions: vec!["/usr/bin/etcd:f".into()],
            containers: per_container(
                [
                    container_proc(1, Some("docker"), Some("aa"), None),
                    container_proc(2, Some("docker"), Some("aa"), None),
                    container_proc(3, None, Some("bb"), Some("pod-1")),
                    container_proc(4, None, None, None),
                ]
                .iter(),
            ),
        };
        let text = render(&s).unwrap();
        assert!(
            text.contains(
                "tracerd_container_processes{runtime=\"docker\",container_id=\"aa\",pod_uid=\"\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "tracerd_container_processes{runtime=\"\",container_id=\"bb\",pod_uid=\"pod-1\"} 1"
            ),
            "{text}"
        );
        assert_eq!(text.matches("tracerd_container_processes{").count(), 2, "{text}");
        assert!(
            text.contains("# TYPE tracerd_events_received_total counter"),
            "{text}"
        );
        assert!(
            text.contains("tracerd_events_received_total{kind=\"syscall_failure\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("tracerd_lost_total{reason=\"kernel_buffer_full_syscall\"} 4"),
            "{text}"
        );
        assert!(text.contains("tracerd_window_fill_ratio 0.5"), "{text}");
        assert!(
            text.contains("tracerd_network_gaps_total{protocol=\"vrrp\"} 1"),
            "{text}"
        );
        assert!(text.contains("tracerd_targets 3"), "{text}");
        assert!(text.contains("tracerd_functions_unmatched 1"), "{text}");
        assert!(
            text.contains("tracerd_function_unmatched{function=\"/usr/bin/etcd:f\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("tracerd_triggers_suppressed_total{rule=\"fatal_signal\"} 5"),
            "{text}"
        );
    }

    fn container_proc(pid: u32, runtime: Option<&str>, id: Option<&str>, pod: Option<&str>) -> ProcInfo {
        ProcInfo {
            pid,
            container_runtime: runtime.map(str::to_string),
            container_id: id.map(str::to_string),
            pod_uid: pod.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn container_series_are_bounded() {
        let procs: Vec<ProcInfo> = (0..250u32)
            .map(|i| container_proc(i, Some("docker"), Some(&format!("{i:064x}")), None))
            .collect();
        let series = per_container(procs.iter());
        assert_eq!(series.len(), MAX_CONTAINER_SERIES + 1);
        let other = series.last().unwrap();
        assert_eq!((other.container_id.as_str(), other.processes), ("other", 150));
    }
}
