//! The `tracerd` command line: run the daemon, ask it for a dump, read a dump, export dumps
//! as a timeline.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use tracerd::cli::{Cli, Command, ExportFormat, RunArgs};
use tracerd::config::{Config, DEFAULT_CONFIG};
use tracerd::dump::Dump;

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
