//! The one way files that matter are written (dumps, profiles, schedules, reports, attempt
//! logs): a hidden temp file in the same directory, created exclusively with the final
//! mode, filled, fsynced, renamed over the final name, then the directory fsynced. A reader
//! never sees a partial file under the final name; a failure leaves no temp file behind.
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Mode of files that hold production data (dumps: paths, command lines).
pub const PRIVATE: u32 = 0o600;
/// Mode of results meant to be read and shared (profiles, schedules, reports).
pub const SHARED: u32 = 0o644;

/// The temp name a write of `path` uses: `.NAME.PID.tmp` beside it.
pub fn temp_path(path: &Path) -> Result<PathBuf> {
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file name", path.display()))?;
    Ok(dir_of(path).join(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id())))
}

fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes `path` atomically with `mode`; `fill` writes the contents (buffered).
pub fn write_with(path: &Path, mode: u32, fill: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    let temp = temp_path(path)?;
    let result = (|| -> Result<()> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        fill(&mut w)?;
        w.flush()?;
        drop(w);
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        File::open(dir_of(path))?.sync_all()?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(e.context(format!("writing {}", path.display())));
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically with `mode`.
pub fn write_bytes(path: &Path, mode: u32, bytes: &[u8]) -> Result<()> {
    write_with(path, mode, |w| Ok(w.write_all(bytes)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        write_bytes(&path, PRIVATE, b"one").unwrap();
        write_bytes(&path, PRIVATE, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let e = write_with(&path, SHARED, |_| anyhow::bail!("disk on fire")).unwrap_err();
        assert!(
            format!("{e:#}").contains("out.json") && format!("{e:#}").contains("disk on fire"),
            "{e:#}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"two",
            "a failed write keeps the old file"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("out.json")]);
        let e = write_bytes(&dir.path().join("missing/x"), SHARED, b"").unwrap_err();
        assert!(format!("{e:#}").contains("missing/x"), "{e:#}");
    }
}
