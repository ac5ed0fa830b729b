//! Packaging helper, run by `scripts/package` (not installed): writes the man pages and the
//! bash, zsh and fish completions of `tracerd` and `reproducer` from the same clap definitions
//! their binaries parse (`tracerd::cli::command`, `reproducer::cli::command`), so the pages
//! cannot drift from the flags.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use clap_complete::Shell;

#[derive(Parser)]
#[command(
    name = "xtask",
    about = "Man pages and shell completions for the Debian packages"
)]
enum Cli {
    /// Write OUT/<binary>/man/*.1 (one page per command and subcommand) and
    /// OUT/<binary>/completions/{bash,zsh,fish}/
    PackageDocs {
        /// Directory to write into (created)
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// The binaries that get pages and completions, with their command lines.
fn binaries() -> [(&'static str, clap::Command); 2] {
    [
        ("tracerd", tracerd::cli::command()),
        ("reproducer", reproducer::cli::command()),
    ]
}

/// Where each shell looks for a vendor's completion, as the file name under `completions/SHELL/`.
fn completion_file(shell: Shell, bin: &str) -> String {
    match shell {
        Shell::Zsh => format!("_{bin}"),
        Shell::Fish => format!("{bin}.fish"),
        _ => bin.to_string(),
    }
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// One page per command and subcommand (`tracerd.1`, `tracerd-run.1`, ...), each footed with
/// the program's name and version (clap_mangen's own `generate_to` leaves the version off the
/// subcommands' pages).
fn write_man_pages(cmd: clap::Command, dir: &Path) -> Result<()> {
    fn write(cmd: clap::Command, source: &str, dir: &Path) -> Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            write(sub.clone(), source, dir)?;
        }
        let page = clap_mangen::Man::new(cmd).source(source);
        page.generate_to(dir)
            .with_context(|| format!("writing a man page into {}", dir.display()))?;
        Ok(())
    }
    create_dir(dir)?;
    let source = format!("{} {}", cmd.get_name(), cmd.get_version().unwrap_or_default());
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    write(cmd, &source, dir)
}

fn write_completions(mut cmd: clap::Command, bin: &str, dir: &Path) -> Result<()> {
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let shell_dir = dir.join(shell.to_string());
        create_dir(&shell_dir)?;
        let path = shell_dir.join(completion_file(shell, bin));
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut cmd, bin, &mut text);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn package_docs(out: &Path) -> Result<()> {
    for (bin, cmd) in binaries() {
        let dir = out.join(bin);
        write_man_pages(cmd.clone(), &dir.join("man"))?;
        write_completions(cmd, bin, &dir.join("completions"))?;
        println!("{}: man pages and completions", dir.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let result = match Cli::parse() {
        Cli::PackageDocs { out } => package_docs(&out),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}
