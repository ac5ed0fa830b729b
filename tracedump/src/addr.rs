//! Endpoints as the window stores them (an address blob) and as everyone else uses them
//! (`SocketAddr`). A blob is a 0 marker byte (paths never start with NUL), family and port
//! little-endian, then 16 address bytes; a gap's endpoints blob holds local then peer, and for
//! a datagram flow's gap a trailer after them: the IP protocol (u16), the datagrams sent to the
//! peer during the silence (u32) and before it (u32, saturating), little-endian. A TCP gap has
//! no trailer.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Bytes of one encoded address.
pub const ENCODED_ADDR_LEN: usize = 21;
/// Bytes of a gap's endpoints blob without and with a datagram flow's trailer.
pub const GAP_ENDPOINTS_LEN: usize = 2 * ENCODED_ADDR_LEN;
pub const FLOW_ENDPOINTS_LEN: usize = GAP_ENDPOINTS_LEN + 10;
/// The IP protocol number of TCP: a gap without a flow trailer is a TCP connection's.
pub const IPPROTO_TCP: u16 = 6;

/// What a datagram flow's gap adds to its endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowTrailer {
    /// the IP protocol: 17 for UDP, a raw socket's own (112 for VRRP)
    pub protocol: u16,
    /// datagrams the process sent to the peer during the silence
    pub sent: u32,
    /// and before it (0: it only listens to that peer)
    pub sent_before: u32,
}

/// Appends a flow's trailer to a gap's encoded endpoints (`out`: FLOW_ENDPOINTS_LEN bytes).
pub fn encode_flow_trailer(t: FlowTrailer, out: &mut [u8]) {
    out[GAP_ENDPOINTS_LEN..GAP_ENDPOINTS_LEN + 2].copy_from_slice(&t.protocol.to_le_bytes());
    out[GAP_ENDPOINTS_LEN + 2..GAP_ENDPOINTS_LEN + 6].copy_from_slice(&t.sent.to_le_bytes());
    out[GAP_ENDPOINTS_LEN + 6..FLOW_ENDPOINTS_LEN].copy_from_slice(&t.sent_before.to_le_bytes());
}

/// A gap's endpoints blob: local, peer and, for a datagram flow, its trailer.
pub fn decode_gap_endpoints(b: &[u8]) -> (Option<SocketAddr>, Option<SocketAddr>, Option<FlowTrailer>) {
    let local = decode_addr(b);
    let peer = b.get(ENCODED_ADDR_LEN..).and_then(decode_addr);
    let trailer = b.get(GAP_ENDPOINTS_LEN..FLOW_ENDPOINTS_LEN).map(|t| FlowTrailer {
        protocol: u16::from_le_bytes([t[0], t[1]]),
        sent: u32::from_le_bytes([t[2], t[3], t[4], t[5]]),
        sent_before: u32::from_le_bytes([t[6], t[7], t[8], t[9]]),
    });
    (local, peer, trailer)
}

/// The name of an IP protocol number as `/etc/protocols` spells the common ones (lowercase),
/// else `ip-N`.
pub fn protocol_name(protocol: u16) -> String {
    let name = match protocol {
        1 => "icmp",
        2 => "igmp",
        6 => "tcp",
        17 => "udp",
        33 => "dccp",
        47 => "gre",
        50 => "esp",
        58 => "ipv6-icmp",
        89 => "ospf",
        103 => "pim",
        112 => "vrrp",
        132 => "sctp",
        136 => "udplite",
        _ => return format!("ip-{protocol}"),
    };
    name.to_string()
}

/// Encodes an endpoint (`struct tracerd_addr`: family, port in host order, address bytes).
pub fn encode_addr(family: u16, port: u16, addr: &[u8; 16], out: &mut [u8]) {
    out[0] = 0;
    out[1..3].copy_from_slice(&family.to_le_bytes());
    out[3..5].copy_from_slice(&port.to_le_bytes());
    out[5..21].copy_from_slice(addr);
}

/// Decodes an encoded address; None for anything but AF_INET / AF_INET6. An IPv4-mapped
/// IPv6 address comes back as IPv4: a dual-stack socket names the same peer either way.
pub fn decode_addr(b: &[u8]) -> Option<SocketAddr> {
    if b.len() < ENCODED_ADDR_LEN || b[0] != 0 {
        return None;
    }
    let family = u16::from_le_bytes([b[1], b[2]]);
    let port = u16::from_le_bytes([b[3], b[4]]);
    let ip = match family as i32 {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(b[5], b[6], b[7], b[8])),
        libc::AF_INET6 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[5..21]);
            let v6 = Ipv6Addr::from(a);
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(family: i32, port: u16, addr: [u8; 16]) -> [u8; ENCODED_ADDR_LEN] {
        let mut out = [0u8; ENCODED_ADDR_LEN];
        encode_addr(family as u16, port, &addr, &mut out);
        out
    }

    #[test]
    fn gap_endpoints_carry_a_flow_trailer_only_for_datagrams() {
        let mut v4 = [0u8; 16];
        v4[..4].copy_from_slice(&[10, 0, 0, 2]);
        let mut tcp = [0u8; GAP_ENDPOINTS_LEN];
        encode_addr(libc::AF_INET as u16, 5000, &v4, &mut tcp[..ENCODED_ADDR_LEN]);
        encode_addr(libc::AF_INET as u16, 6379, &v4, &mut tcp[ENCODED_ADDR_LEN..]);
        let (local, peer, trailer) = decode_gap_endpoints(&tcp);
        assert_eq!(local, Some("10.0.0.2:5000".parse().unwrap()));
        assert_eq!(peer, Some("10.0.0.2:6379".parse().unwrap()));
        assert_eq!(trailer, None);
        let mut flow = [0u8; FLOW_ENDPOINTS_LEN];
        flow[..GAP_ENDPOINTS_LEN].copy_from_slice(&tcp);
        let vrrp = FlowTrailer {
            protocol: 112,
            sent: 4,
            sent_before: 70,
        };
        encode_flow_trailer(vrrp, &mut flow);
        assert_eq!(decode_gap_endpoints(&flow).2, Some(vrrp));
        assert_eq!(protocol_name(112), "vrrp");
        assert_eq!(protocol_name(17), "udp");
        assert_eq!(protocol_name(253), "ip-253");
    }

    #[test]
    fn round_trips_v4_v6_and_mapped() {
        let mut v4 = [0u8; 16];
        v4[..4].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(
            decode_addr(&encoded(libc::AF_INET, 6379, v4)),
            Some("10.0.0.2:6379".parse().unwrap())
        );
        let v6: Ipv6Addr = "fd00::1".parse().unwrap();
        assert_eq!(
            decode_addr(&encoded(libc::AF_INET6, 80, v6.octets())),
            Some("[fd00::1]:80".parse().unwrap())
        );
        let mapped: Ipv6Addr = "::ffff:10.0.0.3".parse().unwrap();
        let a = decode_addr(&encoded(libc::AF_INET6, 7, mapped.octets())).unwrap();
        assert_eq!(a.to_string(), "10.0.0.3:7");
        assert_eq!(decode_addr(&encoded(libc::AF_UNIX, 0, [0; 16])), None);
        assert_eq!(
            decode_addr(b"/a/path/that/is/long/enough"),
            None,
            "a path blob is no address"
        );
    }
}
