//! The `tracerd` command line's definition (clap): the binary parses it, and the packaging
//! generator (`xtask`) renders man pages and shell completions from the same `command()`.
use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use crate::config::Config;

/// The command line as clap sees it, for man pages and completions.
pub fn command() -> clap::Command {
    Cli::command()
}

#[derive(Parser)]
#[command(
    name = "tracerd",
    version,
    about = "Always-on flight recorder: failed syscalls, function hits, network gaps, process states"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(clap::Args, Clone)]
pub struct RunArgs {
    /// TOML configuration file (default /etc/tracerd/tracerd.toml, if present)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory for dump files
    #[arg(long, value_name = "DIR")]
    pub dump_dir: Option<PathBuf>,
    /// Events kept in the in-memory window
    #[arg(long, value_name = "N")]
    pub ring_events: Option<usize>,
    /// Trace processes with this comm (and their descendants)
    #[arg(long, value_name = "NAME")]
    pub target_comm: Vec<String>,
    /// Trace processes running this executable (and their descendants)
    #[arg(long, value_name = "PATH")]
    pub target_exe: Vec<PathBuf>,
    /// Trace this process (and its descendants)
    #[arg(long, value_name = "PID")]
    pub target_pid: Vec<u32>,
    /// Trace the processes of this systemd unit (e.g. redis-server.service)
    #[arg(long, value_name = "UNIT")]
    pub target_unit: Vec<String>,
    /// Trace every process in this cgroup v2 subtree, present and future (e.g.
    /// /system.slice/docker-ID.scope, as /proc/PID/cgroup shows it)
    #[arg(long, value_name = "PATH")]
    pub target_cgroup: Vec<String>,
    /// Trace every process of this container (docker, containerd, CRI-O, podman; a unique
    /// prefix of its id)
    #[arg(long, value_name = "ID")]
    pub target_container: Vec<String>,
    /// Record every call of this function
    #[arg(long, value_name = "BINARY:SYMBOL")]
    pub uprobe: Vec<String>,
    /// File of BINARY:SYMBOL lines to record (as written by `reproducer profile`)
    #[arg(long, value_name = "FILE")]
    pub functions: Option<PathBuf>,
    /// Silence on a TCP connection that counts as a network gap
    #[arg(long, value_name = "MS")]
    pub gap_ms: Option<u64>,
    /// Stop or uninterruptible sleep that counts as a pause
    #[arg(long, value_name = "MS")]
    pub pause_ms: Option<u64>,
    /// Control socket for `tracerd dump`
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<PathBuf>,
    /// Write metrics to this node_exporter textfile (.prom)
    #[arg(long, value_name = "FILE")]
    pub metrics_textfile: Option<PathBuf>,
    /// Rewrite the metrics file this often
    #[arg(long, value_name = "MS")]
    pub metrics_interval_ms: Option<u64>,
    /// Do not dump when a target dies of its own SIGSEGV/SIGABRT/SIGBUS/SIGILL/SIGFPE
    #[arg(long)]
    pub no_trigger_fatal_signal: bool,
    /// Dump when a target exits with a non-zero status
    #[arg(long)]
    pub trigger_nonzero_exit: bool,
    /// Dump when the OOM killer kills a target
    #[arg(long)]
    pub trigger_oom_kill: bool,
    /// Dump when a target was paused longer than this
    #[arg(long, value_name = "MS")]
    pub trigger_pause_ms: Option<u64>,
    /// Dump when a failed syscall matches (each part optional, e.g. write:ENOSPC or ::/data/*)
    #[arg(long, value_name = "SYSCALL:ERRNO:PATHGLOB")]
    pub trigger_syscall: Vec<String>,
    /// At most one triggered dump per rule in this interval
    #[arg(long, value_name = "MS")]
    pub trigger_min_interval_ms: Option<u64>,
    /// Delay between a trigger and its dump
    #[arg(long, value_name = "MS")]
    pub trigger_settle_ms: Option<u64>,
}

impl RunArgs {
    /// The configuration these flags make: the file's (`--config`, else the default file),
    /// with the flags' lists added and their scalars overriding. Run again at each reload.
    pub fn config(&self) -> anyhow::Result<Config> {
        let a = self.clone();
        let mut c = Config::load(a.config.as_deref())?;
        if let Some(v) = a.dump_dir {
            c.dump_dir = v;
        }
        if let Some(v) = a.ring_events {
            c.ring_events = v;
        }
        if let Some(v) = a.functions {
            c.functions = Some(v);
        }
        if let Some(v) = a.gap_ms {
            c.gap_ms = v;
        }
        if let Some(v) = a.pause_ms {
            c.pause_ms = v;
        }
        if let Some(v) = a.control_socket {
            c.control_socket = v;
        }
        if let Some(v) = a.metrics_textfile {
            c.metrics_textfile = Some(v);
        }
        if let Some(v) = a.metrics_interval_ms {
            c.metrics_interval_ms = v;
        }
        c.target_comm.extend(a.target_comm);
        c.target_exe.extend(a.target_exe);
        c.target_pid.extend(a.target_pid);
        c.target_unit.extend(a.target_unit);
        c.target_cgroup.extend(a.target_cgroup);
        c.target_container.extend(a.target_container);
        c.uprobe.extend(a.uprobe);
        let t = &mut c.triggers;
        if a.no_trigger_fatal_signal {
            t.fatal_signal = false;
        }
        if a.trigger_nonzero_exit {
            t.nonzero_exit = true;
        }
        if a.trigger_oom_kill {
            t.oom_kill = true;
        }
        if let Some(v) = a.trigger_pause_ms {
            t.pause_ms = v;
        }
        if let Some(v) = a.trigger_min_interval_ms {
            t.min_interval_ms = v;
        }
        if let Some(v) = a.trigger_settle_ms {
            t.settle_ms = v;
        }
        for spec in &a.trigger_syscall {
            t.syscall.push(crate::triggers::SyscallRule::parse(spec)?);
        }
        c.validate("after command-line flags")?;
        Ok(c)
    }
}

/// Which daemon a client command talks to.
#[derive(clap::Args)]
pub struct DaemonSocket {
    /// Control socket of the daemon (default: from the configuration)
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<PathBuf>,
    /// TOML configuration file whose control socket to use (default /etc/tracerd/tracerd.toml)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground
    ///
    /// Signals: SIGUSR1 writes a dump (as `tracerd dump` does) and tracing goes on; SIGHUP
    /// re-reads the configuration and applies it, keeping the window (as `tracerd reload`
    /// does); SIGTERM and SIGINT write the window as a dump with trigger `stop`
    /// (`dump_on_stop`, on by default, within 20 s) and exit.
    Run(Box<RunArgs>),
    /// Ask the running daemon to write a dump; prints the dump's path
    Dump(DaemonSocket),
    /// Ask the running daemon how it is doing: targets, window, event rates, losses, dumps,
    /// functions not found, reloads, kernel paths (exit 1 when no daemon answers)
    Status {
        #[command(flatten)]
        to: DaemonSocket,
        /// Print the daemon's answer as one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Ask the running daemon to re-read its configuration (as SIGHUP does), keeping the
    /// window; prints what was applied and what needs a restart
    Reload(DaemonSocket),
    /// Print the paths this kernel gets (probed at start; needs root): fexit programs or the
    /// sys_exit tracepoint, uprobe-multi links or single uprobes, typed loads or helper copies
    /// of fd table slots, and how the end of a process is seen
    Kernel,
    /// Write dumps as one timeline (several dumps merge on their wall clocks)
    Export {
        /// Format of the timeline: a Perfetto trace (opens in ui.perfetto.dev and trace_processor)
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// The dumps to merge
        #[arg(required = true, value_name = "DUMP")]
        dumps: Vec<PathBuf>,
        /// The file to write
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
    },
    /// Print a dump: summary and events, or one JSON object per event
    Inspect {
        /// The dump file (.tdump)
        file: PathBuf,
        /// One JSON object per line per event
        #[arg(long)]
        json: bool,
        /// Print the dump's header (host, clocks, config, loss counters, tables) as JSON
        #[arg(long, conflicts_with = "json")]
        meta: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ExportFormat {
    Perfetto,
}

#[cfg(test)]
mod tests {
    /// clap's own check of the definitions (conflicting names, bad defaults), which otherwise
    /// only fails when the faulty subcommand is parsed.
    #[test]
    fn definitions_are_consistent() {
        super::command().debug_assert();
    }
}
