//! One file's identity as the dump records it (size, mtime, SHA-256, ELF build id), and the
//! cache that hashes each version of a file once: a library mapped by a hundred processes is
//! read once, until it changes on disk.
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use object::Object;
use sha2::{Digest, Sha256};
use tracedump::environment::FileIdentity;

/// A version of a file: the same (device, inode, size, mtime) is taken to be the same contents.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct FileVersion {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: u64,
}

/// What hashing a version found.
#[derive(Clone, Debug, Default)]
struct Digests {
    sha256: Option<String>,
    build_id: Option<String>,
}

/// The hashes of the file versions seen, at most `capacity` (then it starts over: a miss
/// costs a hash, never a wrong answer).
pub struct IdentityCache {
    known: HashMap<FileVersion, Digests>,
    capacity: usize,
    /// files hashed (cache misses), for tests and logs
    pub hashed: u64,
}

/// A file opened to be identified: what the process named it, and where tracerd reads it.
pub struct FileRef<'a> {
    /// the path as the process saw it (recorded)
    pub shown: &'a str,
    /// where tracerd opens it (through /proc/PID/root, /proc/PID/exe)
    pub open: &'a Path,
}

impl IdentityCache {
    pub fn new(capacity: usize) -> Self {
        IdentityCache {
            known: HashMap::new(),
            capacity: capacity.max(1),
            hashed: 0,
        }
    }

    /// The identity of a regular file, with its build id when `elf`; None when it cannot be
    /// opened or is not a regular file. `first_bytes`: also return up to that many bytes of
    /// its contents (0 = none).
    pub fn identify(
        &mut self,
        file: &FileRef<'_>,
        elf: bool,
        first_bytes: u64,
    ) -> Option<(FileIdentity, Vec<u8>)> {
        let f = File::open(file.open).ok()?;
        let md = f.metadata().ok()?;
        if !md.is_file() {
            return None;
        }
        let version = FileVersion {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime_ns: (md.mtime().max(0) as u64) * 1_000_000_000 + md.mtime_nsec().max(0) as u64,
        };
        let head = if first_bytes > 0 {
            read_head(&f, first_bytes)
        } else {
            Vec::new()
        };
        let digests = match self.known.get(&version) {
            Some(d) => d.clone(),
            None => {
                let d = digests_of(f, elf);
                if self.known.len() >= self.capacity {
                    self.known.clear();
                }
                self.known.insert(version, d.clone());
                self.hashed += 1;
                d
            }
        };
        let identity = FileIdentity {
            path: file.shown.to_string(),
            size: version.size,
            mtime_ns: version.mtime_ns,
            sha256: digests.sha256,
            build_id: digests.build_id,
        };
        Some((identity, head))
    }
}

/// Up to `limit` bytes from the start of `f` (one more tells the caller it was cut).
fn read_head(f: &File, limit: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut reader = f;
    let _ = reader.by_ref().take(limit + 1).read_to_end(&mut out);
    out
}

fn digests_of(mut f: File, elf: bool) -> Digests {
    use std::io::Seek;
    let mut hasher = Sha256::new();
    let sha256 = f
        .rewind()
        .and_then(|_| std::io::copy(&mut f, &mut hasher))
        .ok()
        .map(|_| hex(&hasher.finalize()));
    let build_id = if elf { build_id_of(f) } else { None };
    Digests { sha256, build_id }
}

/// The ELF NT_GNU_BUILD_ID note, read through the headers only (not the whole file).
fn build_id_of(f: File) -> Option<String> {
    let cache = object::ReadCache::new(f);
    let parsed = object::File::parse(&cache).ok()?;
    parsed.build_id().ok().flatten().map(hex)
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_hashed_once_and_again_after_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.conf");
        std::fs::write(&path, "maxmemory 1gb\n").unwrap();
        let mut cache = IdentityCache::new(16);
        let file = FileRef {
            shown: "/etc/a.conf",
            open: &path,
        };
        let (id, head) = cache.identify(&file, false, 4).unwrap();
        assert_eq!(id.path, "/etc/a.conf");
        assert_eq!(id.size, 14);
        // sha256("maxmemory 1gb\n"), as sha256sum says
        let want = hex(&Sha256::digest(b"maxmemory 1gb\n"));
        assert_eq!(id.sha256.as_deref(), Some(want.as_str()));
        assert_eq!(head, b"maxme", "one byte past the bound says it was cut");
        cache.identify(&file, false, 0).unwrap();
        assert_eq!(cache.hashed, 1);
        std::fs::write(&path, "maxmemory 2gb, longer\n").unwrap();
        let (id, _) = cache.identify(&file, false, 0).unwrap();
        assert_eq!(cache.hashed, 2);
        assert_eq!(id.size, 22);
        assert!(cache
            .identify(
                &FileRef {
                    shown: "d",
                    open: dir.path()
                },
                false,
                0
            )
            .is_none());
    }

    #[test]
    fn the_test_binary_has_a_build_id() {
        let exe = std::env::current_exe().unwrap();
        let mut cache = IdentityCache::new(4);
        let shown = exe.display().to_string();
        let (id, _) = cache
            .identify(
                &FileRef {
                    shown: &shown,
                    open: &exe,
                },
                true,
                0,
            )
            .unwrap();
        let build_id = id.build_id.expect("rustc links with --build-id");
        assert!(build_id.len() >= 16 && build_id.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
