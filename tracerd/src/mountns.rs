//! Where a file a process sees lies on the host: the mount that holds the path in the
//! process's mount namespace (`/proc/PID/mountinfo`), and for an overlay (a container's root)
//! the layer the file comes from. A uprobe attached through `/proc/PID/root/...` sits on the
//! overlay's inode, which no process maps (it maps the layer's file), and never fires
//! (measured on 6.18): the function list's copies in containers are probed at the layer's file.
use std::path::{Component, Path, PathBuf};

/// One line of a mountinfo file: where the mount is, its file system type, its options.
struct Mount {
    point: PathBuf,
    fstype: String,
    options: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\134` for a backslash).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_line(line: &str) -> Option<Mount> {
    let (before, after) = line.split_once(" - ")?;
    let point = before.split(' ').nth(4)?;
    let mut rest = after.split(' ');
    let fstype = rest.next()?.to_string();
    let options = rest.nth(1).unwrap_or("").to_string();
    Some(Mount {
        point: PathBuf::from(unescape(point)),
        fstype,
        options,
    })
}

/// The mount of `mountinfo` that holds `path` (absolute): the deepest mount point above it,
/// the last one of the same point (mounted over the others).
fn holding<'m>(mounts: &'m [Mount], path: &Path) -> Option<&'m Mount> {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
        .and_then(|deepest| mounts.iter().rev().find(|m| m.point == deepest.point))
}

/// An overlay's layers, the upper one first (`upperdir`, then `lowerdir` in order and the
/// `lowerdir+` entries of the newer mount API); paths with their escapes (`\:`) undone.
fn overlay_layers(options: &str) -> Vec<PathBuf> {
    let mut upper = Vec::new();
    let mut lower = Vec::new();
    for option in split_unescaped(options, ',') {
        if let Some(dir) = option.strip_prefix("upperdir=") {
            upper.push(PathBuf::from(dir.replace("\\,", ",")));
        } else if let Some(dirs) = option.strip_prefix("lowerdir=") {
            lower.extend(
                split_unescaped(dirs, ':')
                    .into_iter()
                    .map(|d| PathBuf::from(d.replace("\\:", ":"))),
            );
        } else if let Some(dir) = option.strip_prefix("lowerdir+=") {
            lower.push(PathBuf::from(dir));
        }
    }
    upper.extend(lower);
    upper
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if c == sep && !escaped {
            out.push(String::new());
            continue;
        }
        escaped = c == '\\' && !escaped;
        if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

/// The host path of the file at `path` (absolute, after symbolic links) in process `pid`'s
/// mount namespace: on an overlay, the file of the first layer that has it (None when that
/// is a whiteout or no layer has it, or a layer is named by a relative path); elsewhere the
/// path through `/proc/PID/root`, which reaches the file itself.
pub fn host_file(pid: u32, path: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    let mounts: Vec<Mount> = text.lines().filter_map(parse_line).collect();
    let mount = holding(&mounts, path)?;
    let rel: PathBuf = path
        .strip_prefix(&mount.point)
        .ok()?
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    if mount.fstype != "overlay" {
        return Some(Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(path)));
    }
    for layer in overlay_layers(&mount.options) {
        if !layer.is_absolute() {
            return None;
        }
        let candidate = layer.join(&rel);
        let Ok(md) = std::fs::symlink_metadata(&candidate) else {
            continue;
        };
        // a whiteout: a character device 0:0 hides the lower layers' file
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        if md.file_type().is_char_device() && md.rdev() == 0 {
            return None;
        }
        return Some(candidate);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
75 49 0:40 / / rw,relatime - overlay overlay rw,lowerdir=/s/l/A:/s/l/B,upperdir=/s/u/diff,workdir=/s/u/work,uuid=on
82 75 254:0 /run/x/hosts /etc/hosts rw,relatime - ext4 /dev/vda rw
83 75 254:0 /data /srv/my\\040data rw,relatime - ext4 /dev/vda rw
";

    #[test]
    fn the_mount_holding_a_path_and_its_layers() {
        let mounts: Vec<Mount> = MOUNTINFO.lines().filter_map(parse_line).collect();
        assert_eq!(
            holding(&mounts, Path::new("/usr/bin/etcd")).unwrap().fstype,
            "overlay"
        );
        assert_eq!(holding(&mounts, Path::new("/etc/hosts")).unwrap().fstype, "ext4");
        assert_eq!(
            holding(&mounts, Path::new("/srv/my data/x")).unwrap().point,
            Path::new("/srv/my data")
        );
        let layers = overlay_layers(&mounts[0].options);
        assert_eq!(
            layers,
            [Path::new("/s/u/diff"), Path::new("/s/l/A"), Path::new("/s/l/B")]
        );
        assert_eq!(
            overlay_layers("lowerdir+=/a,lowerdir+=/b,upperdir=/u"),
            [Path::new("/u"), Path::new("/a"), Path::new("/b")]
        );
    }
}
