//! The `tracerd` command line: run the daemon, ask it for a dump, read a dump, export dumps
//! as a timeline.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use tracerd::cli::{Cli, Command, DaemonSocket, ExportFormat};
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

/// Asks the daemon that `to` names (its socket, or a configuration's) for `verb`.
fn request(to: &DaemonSocket, verb: &str) -> Result<String> {
    let socket = match &to.control_socket {
        Some(s) => s.clone(),
        None => Config::load(to.config.as_deref())?.control_socket,
    };
    tracerd::control::request(&socket, verb)
}

fn main_inner(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run(args) => {
            env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
                .format_timestamp_millis()
                .init();
            let config = args.config()?;
            tracerd::daemon::run(config, move || args.config())
        }
        Command::Dump(to) => {
            println!("{}", request(&to, "dump")?);
            Ok(())
        }
        Command::Status { to, json } => {
            let answer = request(&to, "status")?;
            if json {
                println!("{answer}");
            } else {
                let status: tracerd::status::Status = serde_json::from_str(&answer).map_err(|e| {
                    anyhow::anyhow!("tracerd's status answer is not what this tracerd reads: {e}")
                })?;
                print!("{}", status.text());
            }
            Ok(())
        }
        Command::Reload(to) => {
            println!("{}", request(&to, "reload")?);
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
