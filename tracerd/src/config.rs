//! The daemon's configuration: the TOML file, its defaults, and validation that turns
//! every mistake into one line naming the setting.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config_error::ConfigError;

pub const DEFAULT_CONFIG: &str = "/etc/tracerd/tracerd.toml";

/// Most functions (uprobes) one engine traces; bounds the per-CPU call counters.
pub const MAX_FUNCTIONS: usize = 100_000;
/// Most (process, syscall) pairs `syscall_count_entries` may ask for.
pub const MAX_SYSCALL_COUNT_ENTRIES: u32 = 1 << 22;
/// Most bytes of one configuration file `capture_config_files` may copy into a dump.
pub const MAX_CAPTURE_CONFIG_FILES: u64 = 1 << 20;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where dumps are written.
    pub dump_dir: PathBuf,
    /// The most bytes and files of tracerd's own dumps (`tracerd-*.tdump`) kept in `dump_dir`:
    /// past either, the oldest are removed after a dump is written (never that dump).
    pub dump_dir_max_bytes: u64,
    pub dump_dir_max_files: u64,
    /// Write the window as a dump (trigger `stop`) on SIGTERM and SIGINT before exiting.
    pub dump_on_stop: bool,
    /// Unix socket that `tracerd dump` talks to.
    pub control_socket: PathBuf,
    /// Events kept in memory (the window).
    pub ring_events: usize,
    /// Bytes kept for paths and addresses of the events in the window.
    pub blob_bytes: usize,
    /// A TCP connection or a datagram flow silent for longer than this is a network gap.
    pub gap_ms: u64,
    /// A process stopped or in uninterruptible sleep for longer than this is a pause.
    pub pause_ms: u64,
    /// Targets: processes matching any of these, and their descendants. None = every process.
    pub target_comm: Vec<String>,
    pub target_exe: Vec<PathBuf>,
    pub target_pid: Vec<u32>,
    /// systemd units (the name of the process's cgroup, e.g. "redis-server.service").
    pub target_unit: Vec<String>,
    /// cgroup v2 subtrees: every process in them, present and future (a path as
    /// /proc/PID/cgroup shows it, e.g. "/system.slice/docker-ID.scope", or a directory of
    /// the mounted hierarchy).
    pub target_cgroup: Vec<String>,
    /// Containers by (a unique prefix of) their id: the cgroup of their runtime's scope.
    pub target_container: Vec<String>,
    /// Uprobes, each "BINARY:SYMBOL".
    pub uprobe: Vec<String>,
    /// A file of "BINARY:SYMBOL" lines (as written by `reproducer profile`).
    pub functions: Option<PathBuf>,
    /// Size of the kernel-to-daemon buffer, bytes (a power of two).
    pub kernel_buffer_bytes: u32,
    /// Entries of the kernel's open-file table: the cwds of the targets that changed theirs
    /// (files behind fds are named from the fd table when a call fails, not kept).
    pub open_files: u32,
    /// TCP connections watched for gaps.
    pub connections: u32,
    /// Datagram flows (a process's UDP or raw IP traffic with one peer) watched for gaps, in
    /// all and per process.
    pub flows: u32,
    pub flows_per_process: u32,
    /// Processes remembered for the dump's process table.
    pub processes: usize,
    /// Count every syscall of the targets per (process, syscall) into the dump's
    /// `syscall_counts` (for profiles; costs a map update per syscall).
    pub count_syscalls: bool,
    /// How failed syscalls are caught: `auto` uses fexit programs on the syscall entry points
    /// of bpf/fexit_syscalls.h where the kernel allows them (no cost for other syscalls),
    /// else the sys_exit tracepoint; `tracepoint` always uses the tracepoint (every syscall).
    /// Counting syscalls (`count_syscalls`) always uses the tracepoint.
    pub syscall_hook: SyscallHook,
    /// (process, syscall) pairs counted at most when `count_syscalls` is on.
    pub syscall_count_entries: u32,
    /// Record a function event per uprobe hit. Off: calls are only counted (the dump's
    /// `function_calls`), so a frequently called function cannot flood the window.
    pub function_events: bool,
    /// With `function_events` off: a function's uprobe is detached once it has been called
    /// this often (its count stays; the dump lists it in `detached_functions`), so that hot
    /// functions stop costing a trap per call; 0 = never. For profiles.
    pub detach_functions_after_calls: u64,
    /// Prometheus textfile (node_exporter textfile collector) rewritten every
    /// `metrics_interval_ms`; None = no metrics.
    pub metrics_textfile: Option<PathBuf>,
    pub metrics_interval_ms: u64,
    /// Files (libraries and configuration files) recorded at most per process in its
    /// `environment` (what it was built from and configured with); 0 = no environments.
    pub environment_files: usize,
    /// How long after a target's start its read-only opens of regular files under /etc count
    /// as its configuration; 0 = none are recorded (command-line files still are).
    pub config_window_ms: u64,
    /// Bytes of each configuration file's contents copied into the dump (after `[[redact]]`);
    /// 0 = only its size and hash. Off by default: configuration files can hold secrets.
    pub capture_config_files: u64,
    /// Rewrites of command lines and paths before a dump is written (`[[redact]]`).
    pub redact: Vec<tracedump::redact::RedactRule>,
    /// Dumps that write themselves (`[triggers]`).
    pub triggers: crate::triggers::TriggerConfig,
    /// Count uprobes that cannot be attached (the dump's `unattached_functions`) instead of
    /// failing. Not a file setting: for programs that embed the engine (profiles).
    #[serde(skip)]
    pub tolerate_unattachable_functions: bool,
    /// Trace only the targets even when none is configured yet (they are added later
    /// through the engine). Not a file setting: for programs that embed the engine.
    #[serde(skip)]
    pub targets_added_later: bool,
    /// At dump time, record every watched connection with its current silence, however
    /// short (profiles: which connections exist and how idle they are). Not a file setting.
    #[serde(skip)]
    pub dump_every_connection: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dump_dir: PathBuf::from("/var/lib/tracerd"),
            dump_dir_max_bytes: 1 << 30,
            dump_dir_max_files: 1000,
            dump_on_stop: true,
            control_socket: PathBuf::from("/run/tracerd/control.sock"),
            ring_events: 1_000_000,
            blob_bytes: 16 << 20,
            gap_ms: 5000,
            pause_ms: 3000,
            target_comm: Vec::new(),
            target_exe: Vec::new(),
            target_pid: Vec::new(),
            target_unit: Vec::new(),
            target_cgroup: Vec::new(),
            target_container: Vec::new(),
            uprobe: Vec::new(),
            functions: None,
            kernel_buffer_bytes: 8 << 20,
            open_files: 32768,
            connections: 16384,
            flows: 16384,
            flows_per_process: 256,
            processes: 16384,
            count_syscalls: false,
            syscall_hook: SyscallHook::Auto,
            syscall_count_entries: 16384,
            function_events: true,
            detach_functions_after_calls: 0,
            metrics_textfile: None,
            metrics_interval_ms: 15_000,
            environment_files: 256,
            config_window_ms: 5000,
            capture_config_files: 0,
            redact: tracedump::redact::default_rules(),
            triggers: Default::default(),
            tolerate_unattachable_functions: false,
            targets_added_later: false,
            dump_every_connection: false,
        }
    }
}

/// See `Config::syscall_hook`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SyscallHook {
    #[default]
    Auto,
    Tracepoint,
}

/// One uprobe target (the type is the dump's; the `BINARY:SYMBOL` syntax is the config's).
pub use tracedump::dump::FunctionSpec;

pub trait ParseFunctionSpec: Sized {
    fn parse(spec: &str, origin: &str) -> Result<Self, ConfigError>;
}

impl ParseFunctionSpec for FunctionSpec {
    fn parse(spec: &str, origin: &str) -> Result<Self, ConfigError> {
        let (binary, symbol) = spec
            .rsplit_once(':')
            .filter(|(b, s)| !b.is_empty() && !s.is_empty())
            .ok_or_else(|| ConfigError(format!("{origin}: '{spec}' is not BINARY:SYMBOL")))?;
        Ok(FunctionSpec {
            binary: PathBuf::from(binary),
            symbol: symbol.to_string(),
        })
    }
}

impl Config {
    /// Reads `path`. A missing default file is fine (defaults apply); a missing explicit one is not.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(ConfigError(format!("config {}: {e}", path.display()))),
        };
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let msg = e.message().replace('\n', " ");
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            match line {
                Some(l) => ConfigError(format!("config {origin}, line {l}: {msg}")),
                None => ConfigError(format!("config {origin}: {msg}")),
            }
        })?;
        config.validate(origin)?;
        Ok(config)
    }

    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let bad = |field: &str, why: &str| Err(ConfigError(format!("config {origin}: {field} {why}")));
        if self.ring_events == 0 || self.ring_events > 100_000_000 {
            return bad("ring_events", "must be between 1 and 100000000");
        }
        if self.blob_bytes < 4096 || self.blob_bytes > 1 << 30 {
            return bad("blob_bytes", "must be between 4096 and 1073741824");
        }
        if self.detach_functions_after_calls > 0 && self.function_events {
            // a detached function's later calls would be missing from the window unsaid
            return bad(
                "detach_functions_after_calls",
                "needs function_events = false (calls only counted)",
            );
        }
        if self.dump_dir_max_bytes == 0 || self.dump_dir_max_files == 0 {
            return bad(
                "dump_dir_max_bytes/dump_dir_max_files",
                "must be positive (they bound what the dumps take; the newest dump is always kept)",
            );
        }
        if self.gap_ms == 0 || self.pause_ms == 0 {
            return bad("gap_ms/pause_ms", "must be positive");
        }
        if !self.kernel_buffer_bytes.is_power_of_two() || self.kernel_buffer_bytes < 1 << 16 {
            return bad("kernel_buffer_bytes", "must be a power of two of at least 65536");
        }
        if self.open_files == 0 || self.connections == 0 || self.processes == 0 || self.flows == 0 {
            return bad("open_files/connections/flows/processes", "must be positive");
        }
        if self.flows_per_process == 0 || self.flows_per_process > self.flows {
            return bad("flows_per_process", "must be between 1 and flows");
        }
        if self.syscall_count_entries == 0 || self.syscall_count_entries > MAX_SYSCALL_COUNT_ENTRIES {
            return bad(
                "syscall_count_entries",
                &format!("must be between 1 and {MAX_SYSCALL_COUNT_ENTRIES}"),
            );
        }
        for comm in &self.target_comm {
            if comm.is_empty() || comm.len() > 15 {
                return bad(
                    "target_comm",
                    &format!("'{comm}' must be 1 to 15 bytes (the kernel's comm length)"),
                );
            }
        }
        for unit in &self.target_unit {
            if unit.is_empty() || unit.len() > 63 || unit.contains('/') {
                return bad(
                    "target_unit",
                    &format!("'{unit}' must be a unit name like redis.service"),
                );
            }
        }
        self.validate_cgroups(origin)?;
        if self.target_comm.len() > 64 || self.target_exe.len() > 64 || self.target_unit.len() > 64 {
            return bad("target_*", "lists hold at most 64 entries each");
        }
        for spec in &self.uprobe {
            FunctionSpec::parse(spec, &format!("config {origin}: uprobe"))?;
        }
        if self.metrics_interval_ms < 100 {
            return bad("metrics_interval_ms", "must be at least 100");
        }
        if self
            .metrics_textfile
            .as_ref()
            .is_some_and(|p| p.extension().is_none_or(|e| e != "prom"))
        {
            return bad(
                "metrics_textfile",
                "must end in .prom (node_exporter's textfile collector reads only those)",
            );
        }
        if self.environment_files > 65_536 {
            return bad("environment_files", "must be at most 65536");
        }
        if self.config_window_ms > 600_000 {
            return bad("config_window_ms", "must be at most 600000 (10 minutes)");
        }
        if self.capture_config_files > MAX_CAPTURE_CONFIG_FILES {
            return bad(
                "capture_config_files",
                &format!("must be at most {MAX_CAPTURE_CONFIG_FILES} bytes"),
            );
        }
        tracedump::redact::Redactor::new(&self.redact, origin)?;
        crate::triggers::validate(&self.triggers, origin)?;
        Ok(())
    }

    fn validate_cgroups(&self, origin: &str) -> Result<(), ConfigError> {
        let bad = |field: &str, why: String| Err(ConfigError(format!("config {origin}: {field} {why}")));
        for path in &self.target_cgroup {
            if path.is_empty() || path.split('/').any(|c| c == "..") {
                return bad(
                    "target_cgroup",
                    format!("'{path}' must be a cgroup path like /system.slice/x.scope"),
                );
            }
        }
        for id in &self.target_container {
            if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return bad(
                    "target_container",
                    format!("'{id}' must be (a prefix of) a container's hex id"),
                );
            }
        }
        if self.target_cgroup.len() + self.target_container.len() > 64 {
            return bad(
                "target_cgroup/target_container",
                "hold at most 64 entries together".into(),
            );
        }
        Ok(())
    }

    pub fn has_targets(&self) -> bool {
        self.targets_added_later
            || !(self.target_comm.is_empty()
                && self.target_exe.is_empty()
                && self.target_pid.is_empty()
                && self.target_unit.is_empty()
                && self.target_cgroup.is_empty()
                && self.target_container.is_empty())
    }

    /// Every uprobe to attach: `uprobe` entries, then the lines of `functions`.
    pub fn function_specs(&self) -> Result<Vec<FunctionSpec>, ConfigError> {
        let mut specs = Vec::new();
        for spec in &self.uprobe {
            specs.push(FunctionSpec::parse(spec, "uprobe")?);
        }
        if let Some(path) = &self.functions {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("functions file {}: {e}", path.display())))?;
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let origin = format!("functions file {}, line {}", path.display(), i + 1);
                specs.push(FunctionSpec::parse(line, &origin)?);
            }
        }
        if specs.len() > MAX_FUNCTIONS {
            return Err(ConfigError(format!(
                "{} functions to trace (uprobe and functions file together); at most {MAX_FUNCTIONS}",
                specs.len()
            )));
        }
        Ok(specs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c = Config::parse("ring_events = 10\ntarget_comm = [\"redis-server\"]\n", "t").unwrap();
        assert_eq!(c.ring_events, 10);
        assert_eq!(c.gap_ms, 5000);
        assert!(c.has_targets());
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let e = Config::parse("gap_ms = 5\nbogus = 1\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f.toml") && e.contains("line 2") && e.contains("bogus"),
            "{e}"
        );
        let e = Config::parse("ring_events = 0\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ring_events"), "{e}");
        let e = Config::parse("gap_ms = \"x\"\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1"), "{e}");
        let e = Config::parse("uprobe = [\"nocolon\"]\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("BINARY:SYMBOL"), "{e}");
        let e = Config::parse("syscall_count_entries = 0\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("syscall_count_entries"), "{e}");
    }

    #[test]
    fn example_file_is_the_defaults() {
        let c = Config::parse(include_str!("../../systemd/tracerd.toml"), "systemd/tracerd.toml").unwrap();
        assert_eq!(c, Config::default(), "systemd/tracerd.toml shows every default");
    }

    /// The example (the Debian package's /etc/tracerd/tracerd.toml) names every file setting,
    /// set or in a comment, `[triggers]`' too.
    #[test]
    fn example_file_names_every_setting() {
        let example = include_str!("../../systemd/tracerd.toml");
        let named = |key: &str| {
            example.lines().any(|l| {
                let l = l.trim_start_matches('#').trim_start();
                l.starts_with(&format!("{key} =")) || l == format!("[[{key}]]") || l == format!("[{key}]")
            })
        };
        let defaults = serde_json::to_value(Config::default()).unwrap();
        let top = defaults.as_object().unwrap();
        let triggers = top["triggers"].as_object().unwrap();
        for key in top.keys().chain(triggers.keys()) {
            assert!(named(key), "systemd/tracerd.toml does not name `{key}`");
        }
    }

    /// The DaemonSet's tracerd.toml (deploy/kubernetes) is a valid configuration whose
    /// directories are the ones the DaemonSet mounts.
    #[test]
    fn kubernetes_config_map_is_valid_and_mounted() {
        let manifest = include_str!("../../deploy/kubernetes/tracerd-config.yaml");
        let daemonset = include_str!("../../deploy/kubernetes/tracerd-daemonset.yaml");
        let toml: String = manifest
            .lines()
            .skip_while(|l| l.trim() != "tracerd.toml: |")
            .skip(1)
            .take_while(|l| l.is_empty() || l.starts_with("    "))
            .map(|l| format!("{}\n", l.get(4..).unwrap_or("")))
            .collect();
        let c = Config::parse(&toml, "deploy/kubernetes/tracerd-config.yaml").unwrap();
        let metrics = c
            .metrics_textfile
            .as_deref()
            .expect("the DaemonSet writes metrics");
        for dir in [
            &c.dump_dir,
            c.control_socket.parent().unwrap(),
            metrics.parent().unwrap(),
        ] {
            let mount = format!("mountPath: {}", dir.display());
            assert!(daemonset.contains(&mount), "the DaemonSet has no {mount}");
        }
    }

    #[test]
    fn cgroup_targets() {
        let c = Config::parse("target_cgroup = [\"/system.slice/x.scope\"]\n", "t").unwrap();
        assert!(c.has_targets());
        let c = Config::parse("target_container = [\"3f2a1b\"]\n", "t").unwrap();
        assert!(c.has_targets());
        let e = Config::parse("target_cgroup = [\"/a/../b\"]\n", "t").unwrap_err();
        assert!(e.0.contains("target_cgroup '/a/../b'"), "{e}");
        let e = Config::parse("target_container = [\"my-app\"]\n", "t").unwrap_err();
        assert!(e.0.contains("target_container 'my-app'"), "{e}");
    }

    #[test]
    fn counting_switches() {
        let c = Config::default();
        assert!(!c.count_syscalls && c.function_events);
        let c = Config::parse("count_syscalls = true\nfunction_events = false\n", "t").unwrap();
        assert!(c.count_syscalls && !c.function_events);
        let e = Config::parse("detach_functions_after_calls = 100\n", "t").unwrap_err();
        assert!(
            e.0.contains("detach_functions_after_calls needs function_events = false"),
            "{e}"
        );
        Config::parse(
            "detach_functions_after_calls = 100\nfunction_events = false\n",
            "t",
        )
        .unwrap();
        let e = Config::parse("tolerate_unattachable_functions = true\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tolerate_unattachable_functions"),
            "not a file setting: {e}"
        );
    }
}
