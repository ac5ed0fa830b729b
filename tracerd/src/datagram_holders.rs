//! The start-up scan for processes that already hold an IPv4 or IPv6 datagram socket. The
//! kernel learns of the others where they make or inherit one (bpf/tracer/targets.h), and looks
//! at a target's send and recv calls only in processes it knows of; these made theirs before
//! the programs were attached.
//!
//! A socket fd names only its inode (`socket:[N]`); the kernel's per-protocol tables in
//! `/proc/PID/net` name the inodes of one network namespace's sockets, so they are read once
//! per namespace.
use std::collections::{HashMap, HashSet};

/// The tables of datagram sockets: UDP, UDP-Lite, ping (ICMP) and raw IP, each IPv4 and IPv6.
const DATAGRAM_TABLES: [&str; 8] = [
    "udp", "udp6", "udplite", "udplite6", "icmp", "icmp6", "raw", "raw6",
];

/// The pids of the processes that hold a datagram socket now. Processes that end or deny
/// access during the scan are left out.
pub fn datagram_socket_holders() -> Vec<u32> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    let mut tables: HashMap<u64, HashSet<u64>> = HashMap::new();
    let mut holders = Vec::new();
    for process in all.flatten() {
        let sockets = socket_inodes(&process);
        if sockets.is_empty() {
            continue;
        }
        let Some(netns) = netns_of(process.pid) else {
            continue;
        };
        let datagram = tables
            .entry(netns)
            .or_insert_with(|| datagram_inodes(process.pid));
        if sockets.iter().any(|ino| datagram.contains(ino)) {
            holders.push(process.pid as u32);
        }
    }
    holders
}

fn socket_inodes(process: &procfs::process::Process) -> Vec<u64> {
    let Ok(fds) = process.fd() else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| match fd.target {
            procfs::process::FDTarget::Socket(ino) => Some(ino),
            _ => None,
        })
        .collect()
}

fn netns_of(pid: i32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// The inodes of every datagram socket in `pid`'s network namespace.
fn datagram_inodes(pid: i32) -> HashSet<u64> {
    DATAGRAM_TABLES
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .flat_map(|text| table_inodes(&text))
        .collect()
}

/// The inode column of a /proc/net socket table (udp, raw and the others share the layout:
/// a header line, then the tenth field of each line).
fn table_inodes(text: &str) -> Vec<u64> {
    text.lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(9)?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inode_is_the_tenth_field_of_each_socket_line() {
        let udp = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
            \x20 110: 00000000:14ED 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 31337 2 0000000000000000 0\n\
            \x20 254: 3500007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 42 2 0000000000000000 0\n";
        assert_eq!(table_inodes(udp), vec![31337, 42]);
        assert!(table_inodes("   sl  local_address\n").is_empty());
    }

    #[test]
    fn a_process_with_a_udp_socket_is_found_and_one_without_is_not() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("binding a UDP socket");
        // std's sockets are close-on-exec: the child holds none
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawning sleep");
        // until its exec, the child holds a copy of every fd
        let comm = format!("/proc/{}/comm", child.id());
        while std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() != "sleep") {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let holders = datagram_socket_holders();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            holders.contains(&std::process::id()),
            "this process holds {socket:?}"
        );
        assert!(!holders.contains(&child.id()), "sleep holds none");
    }
}
