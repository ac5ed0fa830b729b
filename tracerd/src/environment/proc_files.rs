//! What /proc and the cgroup hierarchy say about a live process's environment: the files it
//! maps executable (its libraries), the files its command line names, its rlimits, its cgroup
//! v2 limits. Pure parsing is kept apart from the reads so that it is unit-tested.
use std::path::{Path, PathBuf};

use tracedump::environment::{CgroupLimit, Rlimit};

/// The rlimits a fault can hit, by their names in /proc/PID/limits.
pub const RLIMITS: [&str; 7] = [
    "Max open files",
    "Max processes",
    "Max address space",
    "Max locked memory",
    "Max core file size",
    "Max file size",
    "Max stack size",
];

/// The cgroup v2 limit files recorded when the process's cgroup has them.
pub const CGROUP_LIMITS: [&str; 4] = ["memory.max", "memory.high", "pids.max", "cpu.max"];

/// Where tracerd reads a path the process named: through its root (`/proc/PID/root`), so that
/// a container's files are its own, when that is readable; else the path itself.
pub fn in_root_of(pid: u32, path: &str) -> PathBuf {
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    if root.join(".").exists() {
        root.join(path.trim_start_matches('/'))
    } else {
        PathBuf::from(path)
    }
}

/// The files mapped executable in a /proc/PID/maps text, each once, in the order of the maps,
/// without `exe` and the pseudo mappings ([vdso], anonymous).
pub fn executable_mappings(maps: &str, exe: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.splitn(6, ' ');
        let perms = fields.nth(1).unwrap_or("");
        let path = fields.nth(3).unwrap_or("").trim_start();
        if !perms.contains('x') || !path.starts_with('/') {
            continue;
        }
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        if Some(path) == exe || out.iter().any(|p| p == path) {
            continue;
        }
        out.push(path.to_string());
    }
    out
}

/// The libraries of a live process (None when its maps cannot be read: it is gone).
pub fn libraries(pid: u32, exe: Option<&str>) -> Option<Vec<String>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    Some(executable_mappings(&maps, exe))
}

/// The recorded rlimits of a /proc/PID/limits text.
pub fn parse_limits(text: &str) -> Vec<Rlimit> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        // "Max open files            1024                 524288               files"
        let Some(name) = RLIMITS.iter().find(|n| line.starts_with(**n)) else {
            continue;
        };
        let mut values = line[name.len()..].split_whitespace();
        if let (Some(soft), Some(hard)) = (values.next(), values.next()) {
            out.push(Rlimit {
                resource: name.to_string(),
                soft: soft.into(),
                hard: hard.into(),
            });
        }
    }
    out
}

pub fn rlimits(pid: u32) -> Option<Vec<Rlimit>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    Some(parse_limits(&text))
}

/// The limit files of the cgroup v2 directory `cgroup` (a path as /proc/PID/cgroup shows it)
/// under the hierarchy mounted at `mount`, those present.
pub fn cgroup_limits(mount: &Path, cgroup: &str) -> Vec<CgroupLimit> {
    let dir = mount.join(cgroup.trim_start_matches('/'));
    CGROUP_LIMITS
        .iter()
        .filter_map(|file| {
            let value = std::fs::read_to_string(dir.join(file)).ok()?;
            Some(CgroupLimit {
                file: file.to_string(),
                value: value.trim().to_string(),
            })
        })
        .collect()
}

/// Candidate configuration files of a command line: (argument index, path as named, made
/// absolute against `cwd`). Each argument after the program's name that is not an option,
/// and the value of `--opt=VALUE`; the caller keeps those that are regular files.
pub fn argument_paths(argv: &[String], cwd: Option<&str>) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for (i, arg) in argv.iter().enumerate().skip(1) {
        let named = match arg.split_once('=') {
            Some((opt, value)) if opt.starts_with('-') => value,
            _ if arg.starts_with('-') => continue,
            _ => arg.as_str(),
        };
        if named.is_empty() || named.contains('\0') {
            continue;
        }
        let absolute = if named.starts_with('/') {
            named.to_string()
        } else {
            match cwd {
                Some(cwd) => format!("{}/{named}", cwd.trim_end_matches('/')),
                None => continue,
            }
        };
        out.push((i as u32, absolute));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_from_maps() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /usr/bin/redis-server
55d0c0001000-55d0c0100000 r-xp 00001000 08:01 123 /usr/bin/redis-server
7f0000000000-7f0000100000 r-xp 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000100000-7f0000110000 r--p 00100000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000200000-7f0000210000 r-xp 00000000 08:01 789 /opt/lib/with space.so (deleted)
7f0000300000-7f0000310000 r-xp 00000000 00:00 0 
7ffc00000000-7ffc00002000 r-xp 00000000 00:00 0                          [vdso]
";
        assert_eq!(
            executable_mappings(maps, Some("/usr/bin/redis-server")),
            vec!["/usr/lib/x86_64-linux-gnu/libc.so.6", "/opt/lib/with space.so"]
        );
    }

    #[test]
    fn limits_parsed_by_name() {
        let text = "\
Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max file size             unlimited            unlimited            bytes     
Max open files            1024                 524288               files     
Max locked memory         8388608              8388608              bytes     
";
        let l = parse_limits(text);
        assert_eq!(l.len(), 3);
        assert_eq!(
            l[1],
            Rlimit {
                resource: "Max open files".into(),
                soft: "1024".into(),
                hard: "524288".into()
            }
        );
    }

    #[test]
    fn argument_paths_of_a_command_line() {
        let argv: Vec<String> = [
            "redis-server",
            "redis.conf",
            "--port",
            "7000",
            "--include=/etc/x.conf",
            "-v",
            "--flag=",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            argument_paths(&argv, Some("/srv/")),
            vec![
                (1, "/srv/redis.conf".to_string()),
                (3, "/srv/7000".to_string()),
                (4, "/etc/x.conf".to_string())
            ]
        );
        assert_eq!(argument_paths(&argv[..2], None), vec![]);
    }
}
