//! Endpoints as the window stores them (an address blob) and as everyone else uses them
//! (`SocketAddr`). A blob is a 0 marker byte (paths never start with NUL), family and port
//! little-endian, then 16 address bytes; a gap's endpoints blob holds local then peer.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Bytes of one encoded address.
pub const ENCODED_ADDR_LEN: usize = 21;

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
