//! The `tracerd` command line: run the daemon, ask it for a dump, read a dump, export dumps
//! as a timeline.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use tracerd::config::{Config, DEFAULT_CONFIG};
use tracerd::dump::Dump;

#[derive(Parser)]
#[command(
    name = "tracerd",
    version,
    about = "Always-on flight recorder: failed syscalls, function hits, network gaps, process states"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct RunArgs {
    /// TOML configuration file (default /etc/tracerd/tracerd.toml, if present)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory for dump files
    #[arg(long, value_name = "DIR")]
    dump_dir: Option<PathBuf>,
    /// Events kept in the in-memory window
    #[arg(long, value_name = "N")]
    ring_events: Option<usize>,
    /// Trace processes with this comm (and their descendants)
    #[arg(long, value_name = "NAME")]
    target_comm: Vec<String>,
    /// Trace processes running this executable (and their descendants)
    #[arg(long, value_name = "PATH")]
    target_exe: Vec<PathBuf>,
    /// Trace this process (and its descendants)
    #[arg(long, value_name = "PID")]
    target_pid: Vec<u32>,
    /// Trace the processes of this systemd unit (e.g. redis-server.service)
    #[arg(long, value_name = "UNIT")]
    target_unit: Vec<String>,
    /// Trace every process in this cgroup v2 subtree, present and future (e.g.
    /// /system.slice/docker-ID.scope, as /proc/PID/cgroup shows it)
    #[arg(long, value_name = "PATH")]
    target_cgroup: Vec<String>,
    /// Trace every process of this container (docker, containerd, CRI-O, podman; a unique
    /// prefix of its id)
    #[arg(long, value_name = "ID")]
    target_container: Vec<String>,
    /// Record every call of this function
    #[arg(long, value_name = "BINARY:SYMBOL")]
    uprobe: Vec<String>,
    /// File of BINARY:SYMBOL lines to record (as written by `reproducer profile`)
    #[arg(long, value_name = "FILE")]
    functions: Option<PathBuf>,
    /// Silence on a TCP connection that counts as a network gap
    #[arg(long, value_name = "MS")]
    gap_ms: Option<u64>,
    /// Stop or uninterruptible sleep that counts as a pause
    #[arg(long, value_name = "MS")]
    pause_ms: Option<u64>,
    /// Control socket for `tracerd dump`
    #[arg(long, value_name = "PATH")]
    control_socket: Option<PathBuf>,
    /// Write metrics to this node_exporter textfile (.prom)
    #[arg(long, value_name = "FILE")]
    metrics_textfile: Option<PathBuf>,
    /// Rewrite the metrics file this often
    #[arg(long, value_name = "MS")]
    metrics_interval_ms: Option<u64>,
    /// Do not dump when a target dies of its own SIGSEGV/SIGABRT/SIGBUS/SIGILL/SIGFPE
    #[arg(long)]
    no_trigger_fatal_signal: bool,
    /// Dump when a target exits with a non-zero status
    #[arg(long)]
    trigger_nonzero_exit: bool,
    /// Dump when the OOM killer kills a target
    #[arg(long)]
    trigger_oom_kill: bool,
    /// Dump when a target was paused longer than this
    #[arg(long, value_name = "MS")]
    trigger_pause_ms: Option<u64>,
    /// Dump when a failed syscall matches (each part optional, e.g. write:ENOSPC or ::/data/*)
    #[arg(long, value_name = "SYSCALL:ERRNO:PATHGLOB")]
    trigger_syscall: Vec<String>,
    /// At most one triggered dump per rule in this interval
    #[arg(long, value_name = "MS")]
    trigger_min_interval_ms: Option<u64>,
    /// Delay between a trigger and its dump
    #[arg(long, value_name = "MS")]
    trigger_settle_ms: Option<u64>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon in the foreground
    Run(Box<RunArgs>),
    /// Ask the running daemon to write a dump; prints the dump's path
    Dump {
        /// Control socket of the daemon (default: from the configuration)
        #[arg(long, value_name = "PATH")]
        control_socket: Option<PathBuf>,
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print the paths this kernel gets (probed at start; needs root): uprobe-multi links or
    /// single uprobes, and how the end of a process is seen
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
enum ExportFormat {
    Perfetto,
}

/// Refuses an output path that cannot be written before reading any dump.
fn check_output(path: &std::path::Path) -> Result<()> {
    if path.is_dir() {
        anyhow::bail!("-o {}: is a directory; name the file to write", path.display());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        anyhow::bail!(
            "-o {}: directory {} does not exist",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

fn export(format: ExportFormat, dumps: &[PathBuf], output: &std::path::Path) -> Result<()> {
    check_output(output)?;
    let merged = tracedump::merge::Merged::read(dumps)?;
    match format {
        ExportFormat::Perfetto => {
            let s = tracedump::perfetto::write(&merged, output)?;
            println!(
                "{}: {} events of {} dumps ({} hosts, {} processes, {} threads)",
                output.display(),
                s.events,
                merged.dumps.len(),
                s.hosts,
                s.processes,
                s.threads
            );
        }
    }
    Ok(())
}

fn effective_config(a: RunArgs) -> Result<Config> {
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
        t.syscall.push(tracerd::triggers::SyscallRule::parse(spec)?);
    }
    c.validate("after command-line flags")?;
    Ok(c)
}

fn main_inner(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run(args) => {
            env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
                .format_timestamp_millis()
                .init();
            tracerd::daemon::run(effective_config(*args)?)
        }
        Command::Dump {
            control_socket,
            config,
        } => {
            let socket = match control_socket {
                Some(s) => s,
                None => Config::load(config.as_deref())?.control_socket,
            };
            let path = tracerd::daemon::request_dump(&socket)?;
            println!("{}", path.display());
            Ok(())
        }
        Command::Inspect { file, json, meta } => {
            let dump = Dump::read(&file)?;
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            if meta {
                serde_json::to_writer_pretty(&mut out, &dump.meta)?;
                use std::io::Write;
                writeln!(out)?;
            } else if json {
                tracerd::inspect::print_json(&dump, &mut out)?;
            } else {
                tracerd::inspect::print_text(&dump, &mut out)?;
            }
            Ok(())
        }
        Command::Export {
            format,
            dumps,
            output,
        } => export(format, &dumps, &output),
        Command::Kernel => {
            // RUST_LOG=debug shows what each probe saw
            env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
            if !nix::unistd::geteuid().is_root() {
                anyhow::bail!("probing the kernel loads a BPF program: run as root");
            }
            println!("{}", tracerd::kernel::summary());
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let _ = DEFAULT_CONFIG;
    match main_inner(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = format!("{e:#}");
            // a closed stdout (| head) is not an error worth shouting about
            if msg.contains("Broken pipe") {
                return ExitCode::SUCCESS;
            }
            eprintln!("tracerd: error: {}", msg.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}
