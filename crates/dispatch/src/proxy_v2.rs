//! The PROXY protocol version 2 header (HAProxy's proxy-protocol.txt §2.2):
//! sent first to a backend so it sees the client's address.

use std::net::SocketAddr;

/// The 12-byte v2 signature.
pub const SIGNATURE: [u8; 12] = [
    0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a,
];

/// The header for a proxied TCP connection from `src` to `dst`
/// (version 2, command PROXY). Mixed address families are sent as
/// IPv6, with IPv4 addresses mapped.
pub fn header(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut h = Vec::with_capacity(16 + 36);
    h.extend_from_slice(&SIGNATURE);
    h.push(0x21); // version 2, PROXY
    match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            h.push(0x11); // TCP over IPv4
            h.extend_from_slice(&12u16.to_be_bytes());
            h.extend_from_slice(&s.ip().octets());
            h.extend_from_slice(&d.ip().octets());
            h.extend_from_slice(&s.port().to_be_bytes());
            h.extend_from_slice(&d.port().to_be_bytes());
        }
        _ => {
            let v6 = |a: SocketAddr| match a {
                SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
                SocketAddr::V6(a) => *a.ip(),
            };
            h.push(0x21); // TCP over IPv6
            h.extend_from_slice(&36u16.to_be_bytes());
            h.extend_from_slice(&v6(src).octets());
            h.extend_from_slice(&v6(dst).octets());
            h.extend_from_slice(&src.port().to_be_bytes());
            h.extend_from_slice(&dst.port().to_be_bytes());
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_layout() {
        let h = header(
            "127.0.0.2:40000".parse().unwrap(),
            "127.0.0.1:443".parse().unwrap(),
        );
        assert_eq!(h.len(), 28);
        assert_eq!(&h[..12], &SIGNATURE);
        assert_eq!(&h[12..16], &[0x21, 0x11, 0, 12]);
        assert_eq!(&h[16..20], &[127, 0, 0, 2]);
        assert_eq!(&h[20..24], &[127, 0, 0, 1]);
        assert_eq!(&h[24..26], &40000u16.to_be_bytes());
        assert_eq!(&h[26..28], &443u16.to_be_bytes());
    }

    #[test]
    fn mixed_families_use_ipv6() {
        let h = header("[::1]:5".parse().unwrap(), "127.0.0.1:443".parse().unwrap());
        assert_eq!(h.len(), 16 + 36);
        assert_eq!(h[13], 0x21);
    }
}
