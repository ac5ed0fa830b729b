//! Where a process keeps its files: the filesystem of its working directory, of the
//! directories its command line names, of its root (a container's is an overlay) and of the
//! directories of the files its recorded failures and short writes named — type, source,
//! mount options, size and free space, and the real directory when a symlink led elsewhere
//! (a WAL directory on a filesystem of its own). Read in the process's own mount namespace
//! (`/proc/PID/mountinfo`, and the directory below `/proc/PID/root`); for a process that has ended, in
//! tracerd's, when the process shared it.
use std::path::Path;

use tracedump::environment::DirStorage;

/// One line of a mountinfo file: what a directory's filesystem is.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Mount {
    pub device: (u64, u64),
    pub mount_point: String,
    pub fs_type: String,
    pub source: String,
    /// the mount's options, then the filesystem's, each once
    pub options: Vec<String>,
}

/// The mounts of a mountinfo file, in its order (later ones cover earlier ones).
pub(super) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            let (major, minor) = l.get(2)?.split_once(':')?;
            let mut options: Vec<String> = Vec::new();
            for o in l
                .get(5)?
                .split(',')
                .chain(r.get(2).copied().unwrap_or("").split(','))
            {
                if !o.is_empty() && !options.iter().any(|x| x == o) {
                    options.push(o.to_string());
                }
            }
            Some(Mount {
                device: (major.parse().ok()?, minor.parse().ok()?),
                mount_point: unescape(l.get(4)?),
                fs_type: r.first()?.to_string(),
                source: unescape(r.get(1).copied().unwrap_or("")),
                options,
            })
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(c as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The mount of `dir` (a path as the process names it, device `device`): of the mounts of
/// that device, the one whose mount point is the longest prefix of `dir`, else the last
/// (a directory reached through a symlink or a bind mount).
pub(super) fn mount_of<'m>(mounts: &'m [Mount], dir: &str, device: (u64, u64)) -> Option<&'m Mount> {
    let under =
        |mp: &str| mp == "/" || dir == mp || dir.starts_with(&format!("{}/", mp.trim_end_matches('/')));
    let same: Vec<&Mount> = mounts.iter().filter(|m| m.device == device).collect();
    same.iter()
        .filter(|m| under(&m.mount_point))
        .max_by_key(|m| m.mount_point.len())
        .or(same.last())
        .copied()
}

/// Where `pid`'s files are: its root as tracerd reaches it and its mountinfo; tracerd's own
/// for a process that has ended (`shared`: it ran in tracerd's mount namespace).
fn view(pid: u32, shared: bool) -> Option<(String, String)> {
    let root = format!("/proc/{pid}/root");
    if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")) {
        return Some((root, text));
    }
    shared.then(|| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .map(|t| (String::new(), t))
    })?
}

/// The storage of directory `dir` of `pid` (an absolute path as the process names it).
pub(super) fn lookup(
    pid: u32,
    dir: &str,
    role: &str,
    argument: Option<u32>,
    shared: bool,
) -> Option<DirStorage> {
    use std::os::unix::fs::MetadataExt;
    let (root, mountinfo) = view(pid, shared)?;
    let at = format!("{root}{dir}");
    let meta = std::fs::metadata(&at).ok().filter(|m| m.is_dir())?;
    let device = (
        nix::sys::stat::major(meta.dev()),
        nix::sys::stat::minor(meta.dev()),
    );
    let mounts = parse_mountinfo(&mountinfo);
    let mount = mount_of(&mounts, dir, device)?;
    let real_root = std::fs::canonicalize(if root.is_empty() { "/" } else { &root }).ok()?;
    let resolved = std::fs::canonicalize(&at)
        .ok()
        .and_then(|p| {
            p.strip_prefix(&real_root)
                .ok()
                .map(|r| format!("/{}", r.display()))
        })
        .filter(|r| r.trim_end_matches('/') != dir.trim_end_matches('/'));
    let (size_bytes, free_bytes) = nix::sys::statvfs::statvfs(Path::new(&at))
        .map(|s| {
            let unit = s.fragment_size();
            (s.blocks() * unit, s.blocks_available() * unit)
        })
        .unwrap_or((0, 0));
    Some(DirStorage {
        path: dir.to_string(),
        role: role.to_string(),
        argument,
        resolved,
        mount_point: mount.mount_point.clone(),
        fs_type: mount.fs_type.clone(),
        source: mount.source.clone(),
        options: mount.options.clone(),
        size_bytes,
        free_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
30 22 0:25 / /srv/wal rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=16384k
31 22 8:1 /srv/data /mnt/data\\040copy rw,relatime shared:1 - ext4 /dev/sda1 rw,data=journal,barrier=1
40 22 0:50 / /var/lib/x/merged rw - overlay overlay rw,lowerdir=/l,upperdir=/u
";

    #[test]
    fn a_directory_s_mount_is_its_device_s_with_the_longest_prefix() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.len(), 4);
        assert_eq!(m[2].mount_point, "/mnt/data copy");
        assert_eq!(m[2].options, ["rw", "relatime", "data=journal", "barrier=1"]);
        assert_eq!(m[1].options, ["rw", "nosuid", "nodev", "size=16384k"]);
        let wal = mount_of(&m, "/srv/wal/pg_wal", (0, 25)).unwrap();
        assert_eq!(
            (wal.fs_type.as_str(), wal.mount_point.as_str()),
            ("tmpfs", "/srv/wal")
        );
        let data = mount_of(&m, "/mnt/data copy/base", (8, 1)).unwrap();
        assert_eq!(data.mount_point, "/mnt/data copy");
        assert_eq!(mount_of(&m, "/srv/pg", (8, 1)).unwrap().mount_point, "/");
        // reached through a symlink: the path names no mount point of its device
        let linked = mount_of(&m, "/srv/pg/pg_wal", (0, 25)).unwrap();
        assert_eq!(linked.mount_point, "/srv/wal");
        assert!(mount_of(&m, "/x", (9, 9)).is_none());
    }

    #[test]
    fn this_process_s_working_directory_has_a_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        let s = lookup(std::process::id(), &d, "cwd", None, true).expect("a filesystem");
        assert!(!s.fs_type.is_empty() && s.size_bytes > 0, "{s:?}");
        assert_eq!(s.resolved, None, "{s:?}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/", &link).unwrap();
        let s = lookup(
            std::process::id(),
            &link.display().to_string(),
            "file",
            None,
            true,
        )
        .unwrap();
        assert_eq!(s.resolved.as_deref(), Some("/"), "{s:?}");
        assert!(lookup(std::process::id(), "/nonexistent/dir", "file", None, true).is_none());
    }
}
