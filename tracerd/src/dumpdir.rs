//! The dump directory as the daemon keeps it: bounded like journald bounds its journal
//! (`dump_dir_max_bytes`, `dump_dir_max_files`: the oldest of tracerd's own dumps go first,
//! never the one just written, and only files named as tracerd names them), and a failed
//! dump told in one line that names the directory and the errno.
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tracedump::syscalls::errno_name;

/// Whether `name` is one of tracerd's dumps (`tracerd-HOST-TIME-PID-SEQ.tdump`).
fn is_own_dump(name: &str) -> bool {
    name.starts_with("tracerd-") && name.ends_with(".tdump")
}

/// tracerd's dumps in `dir`, oldest first, with their sizes.
fn own_dumps(dir: &Path) -> std::io::Result<Vec<(PathBuf, u64, SystemTime)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if !is_own_dump(&name.to_string_lossy()) {
            continue;
        }
        let Ok(md) = entry.metadata() else { continue };
        if md.is_file() {
            out.push((
                entry.path(),
                md.len(),
                md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            ));
        }
    }
    // by time, then by name (whose time and sequence number order dumps of one second)
    out.sort_by(|a, b| a.2.cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
    Ok(out)
}

/// Removes the oldest of tracerd's dumps in `dir` until at most `max_bytes` and `max_files`
/// are left, never `keep`; returns how many it removed.
pub fn enforce_cap(dir: &Path, max_bytes: u64, max_files: u64, keep: Option<&Path>) -> u64 {
    let dumps = match own_dumps(dir) {
        Ok(d) => d,
        Err(e) => {
            log::warn!(
                "dump directory {}: cannot list it to bound it: {e}",
                dir.display()
            );
            return 0;
        }
    };
    let mut bytes: u64 = dumps.iter().map(|d| d.1).sum();
    let mut files = dumps.len() as u64;
    let mut removed = 0;
    for (path, size, _) in &dumps {
        if bytes <= max_bytes && files <= max_files {
            break;
        }
        if Some(path.as_path()) == keep {
            continue;
        }
        match std::fs::remove_file(path) {
            Ok(()) => {
                bytes -= size;
                files -= 1;
                removed += 1;
                log::info!(
                    "removed the old dump {} ({size} bytes): the dump directory keeps at most {max_bytes} bytes and {max_files} files",
                    path.display()
                );
            }
            Err(e) => log::warn!("removing the old dump {}: {e}", path.display()),
        }
    }
    removed
}

/// One line for a dump that could not be written into `dir`: the directory, what the
/// system said and its errno name (`No space left on device (ENOSPC)`), when the error
/// carries one.
pub fn failure_line(dir: &Path, e: &anyhow::Error) -> String {
    let errno = e
        .chain()
        .find_map(|c| c.downcast_ref::<std::io::Error>())
        .and_then(|io| io.raw_os_error());
    match errno {
        Some(n) => {
            let text = std::io::Error::from_raw_os_error(n).to_string();
            let text = text.split(" (os error").next().unwrap_or(&text).to_string();
            format!(
                "dump directory {}: {text} ({}); nothing written, still tracing",
                dir.display(),
                errno_name(n as i64)
            )
        }
        None => format!(
            "dump directory {}: {e:#}; nothing written, still tracing",
            dir.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_own_dumps_go_first_and_never_the_kept_one() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, len: usize, age_s: u64| {
            let p = dir.path().join(name);
            std::fs::write(&p, vec![0u8; len]).unwrap();
            let t = SystemTime::now() - std::time::Duration::from_secs(age_s);
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(t)
                .unwrap();
            p
        };
        write("tracerd-h-1-1-1.tdump", 100, 40);
        write("tracerd-h-2-1-2.tdump", 100, 30);
        write("notes.txt", 1000, 50);
        write("other.tdump", 1000, 50);
        let newest = write("tracerd-h-3-1-3.tdump", 250, 0);
        assert_eq!(enforce_cap(dir.path(), 300, 10, Some(&newest)), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["notes.txt", "other.tdump", "tracerd-h-3-1-3.tdump"]);
        // the newest stays even alone over the cap
        assert_eq!(enforce_cap(dir.path(), 10, 10, Some(&newest)), 0);
        write("tracerd-h-4-1-4.tdump", 1, 0);
        assert_eq!(enforce_cap(dir.path(), 1 << 20, 1, Some(&newest)), 1, "by count");
    }

    #[test]
    fn a_failure_names_the_directory_and_the_errno() {
        let e = anyhow::Error::new(std::io::Error::from_raw_os_error(libc::ENOSPC)).context("writing x");
        let line = failure_line(Path::new("/var/lib/tracerd"), &e);
        assert_eq!(
            line,
            "dump directory /var/lib/tracerd: No space left on device (ENOSPC); nothing written, still tracing"
        );
    }
}
