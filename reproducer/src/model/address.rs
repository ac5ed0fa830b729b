//! A node's `address` on the test network: one IPv4 or IPv6 address, or a list of one of
//! each (dual-stack). The rules that let the test bed put every node on one bridge: the
//! nodes' addresses of a family share one /24 (IPv4) or /64 (IPv6), in which the bridge takes
//! host .254 or interface identifier ::fe; every node with an address has the same families.
//! Also how an address is written where a URL wants it (IPv6 in brackets).
use std::fmt;
use std::net::IpAddr;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

/// The prefix the nodes of a family share, and the bridge's own place in it.
pub const IPV4_PREFIX_LEN: u8 = 24;
pub const IPV6_PREFIX_LEN: u8 = 64;
const IPV4_BRIDGE_HOST: u8 = 254;
const IPV6_BRIDGE_ID: u128 = 0xfe;

/// A node's `address` as written: `"10.77.8.1"`, `"fd77:8::1"` or
/// `["10.77.8.1", "fd77:8::1"]`. Checked by [`check`], where the scenario knows the lines.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeAddress(pub Vec<String>);

impl NodeAddress {
    /// The addresses that parse, in the order written (all of them once checked).
    pub fn ips(&self) -> Vec<IpAddr> {
        self.0.iter().filter_map(|a| a.parse().ok()).collect()
    }
}

impl Serialize for NodeAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            all => all.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for NodeAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = NodeAddress;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an IPv4 or IPv6 address, or a list of one of each")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NodeAddress, E> {
                Ok(NodeAddress(vec![v.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NodeAddress, A::Error> {
                let mut all = Vec::new();
                while let Some(a) = seq.next_element::<String>()? {
                    all.push(a);
                }
                Ok(NodeAddress(all))
            }
        }
        d.deserialize_any(Either)
    }
}

fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// The part of `ip` its family's nodes share (the /24 or the /64).
fn prefix(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4) >> (32 - IPV4_PREFIX_LEN)),
        IpAddr::V6(v6) => u128::from(v6) >> (128 - IPV6_PREFIX_LEN),
    }
}

pub fn prefix_len(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        IPV4_PREFIX_LEN
    } else {
        IPV6_PREFIX_LEN
    }
}

/// The bridge's address in the /24 or /64 of a node address `ip`.
pub fn bridge_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            IpAddr::from([o[0], o[1], o[2], IPV4_BRIDGE_HOST])
        }
        IpAddr::V6(v6) => {
            let net = u128::from(v6) >> (128 - IPV6_PREFIX_LEN) << (128 - IPV6_PREFIX_LEN);
            IpAddr::V6((net | IPV6_BRIDGE_ID).into())
        }
    }
}

/// `ip` as a URL's host: IPv6 in brackets (`[fd77:8::1]`), IPv4 as it is.
pub fn url_host(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// Why `ip` cannot be a node's address on the bridge, if it cannot.
fn unusable(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => {
            let host = v4.octets()[3];
            (host == 0 || host >= IPV4_BRIDGE_HOST)
                .then(|| format!("the host part must be 1..253 (.{IPV4_BRIDGE_HOST} is the test bridge)"))
        }
        IpAddr::V6(v6) => {
            let id = u128::from(v6) & ((1u128 << (128 - IPV6_PREFIX_LEN)) - 1);
            if v6.is_unspecified() || v6.is_loopback() || v6.is_multicast() || v6.to_ipv4_mapped().is_some() {
                Some("not a unicast address a node can own".into())
            } else if v6.segments()[0] & 0xffc0 == 0xfe80 {
                Some("a link-local address (fe80::/10) is every interface's own; give a ULA (fd00::/8) or global one".into())
            } else if id == 0 || id == IPV6_BRIDGE_ID {
                Some(format!(
                    "the interface identifier must be neither ::0 (the subnet's anycast) nor ::{IPV6_BRIDGE_ID:x} (the test bridge)"
                ))
            } else {
                None
            }
        }
    }
}

/// Checks the addresses of the nodes that have one (node index, address) against the rules
/// of the module comment; Err(node index, message) names the first node that breaks one.
pub fn check(nodes: &[(usize, &NodeAddress)]) -> Result<(), (usize, String)> {
    let mut seen: Vec<(usize, IpAddr)> = Vec::new();
    let mut families: Option<(usize, Vec<&str>)> = None;
    for &(i, address) in nodes {
        let mut own = Vec::new();
        for text in &address.0 {
            let ip: IpAddr = text
                .parse()
                .map_err(|_| (i, format!("'{text}' is not an IPv4 or IPv6 address")))?;
            if let Some(why) = unusable(ip) {
                return Err((i, format!("{text}: {why}")));
            }
            if let Some((_, other)) = seen
                .iter()
                .find(|(_, s)| prefix(*s) != prefix(ip) && s.is_ipv4() == ip.is_ipv4())
            {
                let len = prefix_len(ip);
                return Err((
                    i,
                    format!("{text}: all node addresses must share one /{len} ({other} does not share it)"),
                ));
            }
            if seen.iter().any(|(_, s)| *s == ip) {
                return Err((i, format!("{text} is used twice")));
            }
            own.push(ip);
        }
        let fams: Vec<&str> = own.iter().map(|ip| family(*ip)).collect();
        match fams.as_slice() {
            [_] => {}
            [a, b] if a != b => {}
            _ => {
                return Err((
                    i,
                    "a list holds one IPv4 and one IPv6 address (dual-stack)".into(),
                ))
            }
        }
        let mut sorted = fams.clone();
        sorted.sort();
        match &families {
            None => families = Some((i, sorted)),
            Some((first, theirs)) if *theirs != sorted => {
                return Err((
                    i,
                    format!(
                        "mixed families: this node has {} and node {} has {}; every node needs the same ones (both for dual-stack: address = [\"IPv4\", \"IPv6\"])",
                        sorted.join(" and "),
                        first + 1,
                        theirs.join(" and ")
                    ),
                ))
            }
            _ => {}
        }
        seen.extend(own.into_iter().map(|ip| (i, ip)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(lists: &[&[&str]]) -> Result<(), (usize, String)> {
        let all: Vec<NodeAddress> = lists
            .iter()
            .map(|l| NodeAddress(l.iter().map(|s| s.to_string()).collect()))
            .collect();
        check(&all.iter().enumerate().collect::<Vec<_>>())
    }

    fn err(lists: &[&[&str]]) -> (usize, String) {
        of(lists).expect_err("refused")
    }

    #[test]
    fn one_family_or_both_sharing_one_prefix() {
        assert_eq!(of(&[&["10.7.0.1"], &["10.7.0.2"]]), Ok(()));
        assert_eq!(of(&[&["fd77:8::1"], &["fd77:8::2"], &["fd77:8::ab:3"]]), Ok(()));
        assert_eq!(of(&[&["10.7.0.1", "fd77::1"], &["fd77::2", "10.7.0.2"]]), Ok(()));
        assert_eq!(of(&[&["2001:db8:1:2::1"], &["2001:db8:1:2:ffff::2"]]), Ok(()));
    }

    #[test]
    fn mixed_families_without_both_are_refused() {
        let (i, e) = err(&[&["10.7.0.1"], &["fd77::2"]]);
        assert_eq!(i, 1);
        assert!(
            e.starts_with("mixed families: this node has IPv6 and node 1 has IPv4"),
            "{e}"
        );
        let (i, e) = err(&[&["10.7.0.1", "fd77::1"], &["fd77::2"]]);
        assert_eq!(i, 1);
        assert!(e.contains("node 1 has IPv4 and IPv6"), "{e}");
        let (_, e) = err(&[&["10.7.0.1", "10.7.0.3"]]);
        assert!(e.contains("one IPv4 and one IPv6"), "{e}");
        let (_, e) = err(&[&[]]);
        assert!(e.contains("one IPv4 and one IPv6"), "{e}");
    }

    #[test]
    fn a_prefix_the_nodes_do_not_share_is_refused() {
        let (i, e) = err(&[&["fd77:8::1"], &["fd77:9::2"]]);
        assert_eq!(i, 1);
        assert_eq!(
            e,
            "fd77:9::2: all node addresses must share one /64 (fd77:8::1 does not share it)"
        );
        let (_, e) = err(&[&["10.7.0.1", "fd77::1"], &["10.7.1.2", "fd77::2"]]);
        assert!(e.contains("one /24"), "{e}");
    }

    #[test]
    fn the_bridge_s_and_addresses_no_node_can_own_are_refused() {
        for bad in [
            "fd77::fe",
            "fd77::",
            "fe80::1",
            "::1",
            "ff02::1",
            "::ffff:10.0.0.1",
            "10.7.0.254",
            "10.7.0.0",
        ] {
            assert!(of(&[&[bad]]).is_err(), "{bad}");
        }
        let (_, e) = err(&[&["fd77::1"], &["fd77::1"]]);
        assert_eq!(e, "fd77::1 is used twice");
        let (_, e) = err(&[&["fd77::1::2"]]);
        assert_eq!(e, "'fd77::1::2' is not an IPv4 or IPv6 address");
    }

    #[test]
    fn bridge_and_url_forms() {
        let v6: IpAddr = "fd77:8::ab:3".parse().unwrap();
        assert_eq!(bridge_address(v6).to_string(), "fd77:8::fe");
        assert_eq!(
            bridge_address("10.7.0.3".parse().unwrap()).to_string(),
            "10.7.0.254"
        );
        assert_eq!(url_host(v6), "[fd77:8::ab:3]");
        assert_eq!(url_host("10.7.0.3".parse().unwrap()), "10.7.0.3");
    }
}
