//! Path signatures: a path as a test run and a production host both see it, so that a
//! benign failure recorded in the profile matches the same file in another run.

/// A path as test runs and production hosts both see it, as a glob: "*/" and the last
/// component, with what differs from run to run replaced by "*" — every run of ASCII digits
/// and a random temporary-name suffix ("/srv/x/temp-4123.rdb" -> "*/temp-*.rdb",
/// "/scratch/reproducer-run-UF3ENM" -> "*/reproducer-run-*"). A component left with nothing
/// literal keeps its parent ("/proc/15881" -> "*/proc/*"), so that a signature never
/// matches every path.
pub fn normalize_path(path: &str) -> String {
    let mut kept = Vec::new();
    for part in path.split('/').rev().filter(|p| !p.is_empty()) {
        let part = normalize_component(part);
        let literal = part.chars().any(|c| c != '*');
        kept.push(part);
        if literal {
            break;
        }
    }
    kept.reverse();
    format!("*/{}", kept.join("/"))
}

/// Shortest random suffix taken for a temporary name's (mkstemp's and mkdtemp's are 6).
const RANDOM_SUFFIX_MIN: usize = 6;

/// Whether `s` looks like the random part of a temporary name: letters and digits of at
/// least two kinds (upper, lower, digit), as mkstemp draws them.
fn looks_random(s: &str) -> bool {
    let kinds = [
        s.bytes().any(|b| b.is_ascii_uppercase()),
        s.bytes().any(|b| b.is_ascii_lowercase()),
        s.bytes().any(|b| b.is_ascii_digit()),
    ];
    s.len() >= RANDOM_SUFFIX_MIN
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
        && kinds.iter().filter(|&&k| k).count() >= 2
}

fn normalize_component(part: &str) -> String {
    let (stem, random) = match part.rfind(['.', '-', '_']) {
        Some(i) if looks_random(&part[i + 1..]) => (&part[..=i], true),
        _ => match part.strip_prefix("tmp") {
            // Python's tempfile: "tmp" and 8 of [a-z0-9_]
            Some(rest)
                if rest.len() >= 8
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
            {
                ("tmp", true)
            }
            _ => (part, false),
        },
    };
    let mut out = String::with_capacity(part.len());
    let mut in_digits = false;
    for c in stem.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('*');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    if random {
        out.push('*');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_paths() {
        assert_eq!(normalize_path("/srv/x/temp-4123.rdb"), "*/temp-*.rdb");
        assert_eq!(
            normalize_path("appendonly.aof.1.incr.aof"),
            "*/appendonly.aof.*.incr.aof"
        );
        assert_eq!(normalize_path("/var/lib/db/"), "*/db");
        assert_eq!(normalize_path("/a/b/12345"), "*/b/*");
        assert_eq!(normalize_path("/scratch/run-42/node1/log"), "*/log");
        assert_eq!(normalize_path("x1y22z333"), "*/x*y*z*");
        assert_eq!(normalize_path("/"), "*/");
        // what differs between runs: the run directory's random name, /proc/PID, temp names
        assert_eq!(
            normalize_path("/scratch/reproducer-run-UF3ENM"),
            "*/reproducer-run-*"
        );
        assert_eq!(
            normalize_path("/scratch/reproducer-run-cdVApe/"),
            "*/reproducer-run-*"
        );
        assert_eq!(normalize_path("/proc/15881"), "*/proc/*");
        assert_eq!(normalize_path("/proc/15881/task/15882"), "*/task/*");
        assert_eq!(normalize_path("/scratch/tmpa8xk2p_q"), "*/tmp*");
        assert_eq!(normalize_path("/scratch/tracerd-demo.W0PtLV"), "*/tracerd-demo.*");
        // names that only look alike keep their text
        assert_eq!(normalize_path("/usr/bin/redis-server"), "*/redis-server");
        assert_eq!(normalize_path("/lib/libc.so.6"), "*/libc.so.*");
    }

    #[test]
    fn a_signature_matches_the_same_file_in_another_run_and_never_every_path() {
        let matches = |sig: &str, path: &str| glob::Pattern::new(sig).unwrap().matches(path);
        for (a, b) in [
            (
                "/scratch/reproducer-run-UF3ENM",
                "/var/scratch/reproducer-run-x9QpLm",
            ),
            (
                "/scratch/reproducer-run-UF3ENM/db1/temp-41.rdb",
                "/srv/w/db1/temp-7.rdb",
            ),
            ("/proc/15881", "/proc/2"),
        ] {
            assert!(
                matches(&normalize_path(a), b),
                "{a} -> {} vs {b}",
                normalize_path(a)
            );
        }
        for p in [
            "/proc/15881",
            "/a/b/12345",
            "/scratch/tmpa8xk2p_q",
            "/scratch/x.AbC123",
        ] {
            let sig = normalize_path(p);
            assert!(
                !matches(&sig, "/usr/lib/x86_64-linux-gnu/libssl.so.3"),
                "{p}: {sig} matches anything"
            );
        }
    }
}
