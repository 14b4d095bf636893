//! Classifying the first bytes of a connection: TLS, plain HTTP, or neither.

use crate::record::{ContentType, MAX_CIPHERTEXT_LEN, RECORD_HEADER_LEN};

/// What the first bytes of a connection look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sniff {
    /// Too few bytes to decide; read more and sniff again.
    Incomplete,
    /// A TLS handshake record header: content type 22, version `0x03xx`
    /// and a length between 1 and the TLS record limit.
    TlsHandshake,
    /// Not the start of a TLS handshake.
    NotTls {
        /// The bytes start like a plain HTTP/1.x request line or the
        /// HTTP/2 prior-knowledge preface (`GET `, `POST`, `PRI `, ...):
        /// someone spoke HTTP to a TLS port.
        looks_like_http: bool,
    },
}

/// Four-byte prefixes of HTTP/1.x request lines and the HTTP/2 preface.
const HTTP_PREFIXES: [&[u8; 4]; 9] = [
    b"GET ", b"POST", b"HEAD", b"PUT ", b"OPTI", b"PRI ", b"DELE", b"PATC", b"CONN",
];

/// Classifies the first bytes of a connection (at most 5 are examined).
///
/// Returns [`Sniff::Incomplete`] only while the bytes seen so far could
/// still become a TLS handshake record header or an HTTP request; it
/// decides as early as the bytes allow, so a server can reject garbage
/// after a single byte. Given five or more bytes it never returns
/// `Incomplete`.
pub fn sniff(buf: &[u8]) -> Sniff {
    let Some(&first) = buf.first() else {
        return Sniff::Incomplete;
    };
    if first == ContentType::HANDSHAKE.0 {
        return sniff_tls(buf);
    }
    let n = buf.len().min(4);
    let http_prefix = HTTP_PREFIXES.iter().any(|p| p[..n] == buf[..n]);
    match (http_prefix, n) {
        (true, 4) => Sniff::NotTls {
            looks_like_http: true,
        },
        (true, _) => Sniff::Incomplete,
        (false, _) => Sniff::NotTls {
            looks_like_http: false,
        },
    }
}

fn sniff_tls(buf: &[u8]) -> Sniff {
    const NOT_TLS: Sniff = Sniff::NotTls {
        looks_like_http: false,
    };
    // Version major byte: every TLS and SSLv3 record says 3.
    match buf.get(1) {
        None => return Sniff::Incomplete,
        Some(3) => {}
        Some(_) => return NOT_TLS,
    }
    // Version minor byte: SSL 3.0 (0) to TLS 1.3 (4); TLS 1.3 itself
    // writes 1 or 3 here, but older minor values are seen in the wild.
    match buf.get(2) {
        None => return Sniff::Incomplete,
        Some(0..=4) => {}
        Some(_) => return NOT_TLS,
    }
    if buf.len() < RECORD_HEADER_LEN {
        return Sniff::Incomplete;
    }
    let len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
    if len == 0 || len > MAX_CIPHERTEXT_LEN {
        return NOT_TLS;
    }
    Sniff::TlsHandshake
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT_HTTP: Sniff = Sniff::NotTls {
        looks_like_http: false,
    };
    const HTTP: Sniff = Sniff::NotTls {
        looks_like_http: true,
    };

    #[test]
    fn tls_handshake_headers() {
        assert_eq!(sniff(&[22, 3, 1, 0, 200]), Sniff::TlsHandshake);
        assert_eq!(sniff(&[22, 3, 3, 0x02, 0x00, 1, 0]), Sniff::TlsHandshake);
        assert_eq!(sniff(&[22, 3, 0, 0x40, 0x00]), Sniff::TlsHandshake);
    }

    #[test]
    fn tls_prefixes_are_incomplete() {
        let hdr = [22u8, 3, 1, 0, 200];
        for n in 0..hdr.len() {
            assert_eq!(sniff(&hdr[..n]), Sniff::Incomplete, "prefix {n}");
        }
    }

    #[test]
    fn bad_tls_headers_are_not_tls() {
        assert_eq!(sniff(&[22, 2]), NOT_HTTP);
        assert_eq!(sniff(&[22, 3, 9]), NOT_HTTP);
        assert_eq!(sniff(&[22, 3, 1, 0, 0]), NOT_HTTP);
        assert_eq!(sniff(&[22, 3, 1, 0x50, 0x00]), NOT_HTTP);
        // Other TLS content types are not a connection start.
        assert_eq!(sniff(&[23, 3, 3, 0, 10]), NOT_HTTP);
        assert_eq!(sniff(&[21, 3, 3, 0, 2]), NOT_HTTP);
        // An SSLv2-style hello.
        assert_eq!(sniff(&[0x80, 0x2e, 0x01, 0x03, 0x01]), NOT_HTTP);
    }

    #[test]
    fn http_requests() {
        for req in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"POST /x HTTP/1.1\r\n",
            b"HEAD / HTTP/1.0\r\n",
            b"PUT /a HTTP/1.1\r\n",
            b"OPTIONS * HTTP/1.1\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"DELETE /a HTTP/1.1\r\n",
            b"PATCH /a HTTP/1.1\r\n",
            b"CONNECT a:443 HTTP/1.1\r\n",
        ] {
            assert_eq!(sniff(req), HTTP, "{:?}", String::from_utf8_lossy(req));
            for n in 1..4 {
                assert_eq!(sniff(&req[..n]), Sniff::Incomplete, "prefix {n} of {req:?}");
            }
        }
    }

    #[test]
    fn five_bytes_always_decide() {
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let b = x.to_le_bytes();
            let first = [22, b[0], b[1], b[2], b[3]];
            assert_ne!(sniff(&first), Sniff::Incomplete, "{first:?}");
            assert_ne!(sniff(&[b[0], b[1], b[2], b[3], 0]), Sniff::Incomplete);
        }
        for p in HTTP_PREFIXES {
            assert_ne!(sniff(&[p[0], p[1], p[2], p[3], b'/']), Sniff::Incomplete);
        }
    }

    #[test]
    fn garbage_decides_early() {
        assert_eq!(sniff(b"\x00"), NOT_HTTP);
        assert_eq!(sniff(b"SSH-2.0-OpenSSH"), NOT_HTTP);
        assert_eq!(sniff(b"GEX "), NOT_HTTP);
        assert_eq!(sniff(b"get / HTTP/1.1"), NOT_HTTP);
    }
}
