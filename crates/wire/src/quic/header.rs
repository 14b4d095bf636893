//! QUIC long and short headers (RFC 9000 §17, RFC 9369 §3.2), as far as
//! they can be read before header protection is removed.

use super::QuicError;

/// The QUIC versions whose Initials tlslab reads.
pub mod version {
    /// QUIC version 1 (RFC 9000).
    pub const V1: u32 = 0x0000_0001;
    /// QUIC version 2 (RFC 9369).
    pub const V2: u32 = 0x6b33_43cf;
    /// The Version Negotiation packet's version field (RFC 9000 §17.2.1).
    pub const NEGOTIATION: u32 = 0;
}

/// The longest connection ID QUIC versions 1 and 2 allow (RFC 9000 §17.2).
pub const MAX_CID_LEN: usize = 20;

/// What a long-header packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketType {
    /// An Initial packet: token, Length, protected packet number.
    Initial,
    /// A 0-RTT packet: Length, protected packet number.
    ZeroRtt,
    /// A Handshake packet: Length, protected packet number.
    Handshake,
    /// A Retry packet: the rest of the datagram.
    Retry,
    /// A Version Negotiation packet, or a version tlslab does not know:
    /// only the version-invariant fields (RFC 8999) were read.
    Other,
}

/// A long header, read up to the protected packet number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongHeader<'a> {
    /// The first byte, still under header protection (its low 4 bits).
    pub first: u8,
    /// The version field.
    pub version: u32,
    /// The packet type, by the version's encoding of the type bits.
    pub packet_type: PacketType,
    /// The Destination Connection ID.
    pub dcid: &'a [u8],
    /// The Source Connection ID.
    pub scid: &'a [u8],
    /// The Initial's token (empty for other packet types).
    pub token: &'a [u8],
    /// Where the packet number starts, from the start of the packet.
    pub pn_offset: usize,
    /// The whole packet's length in the datagram: header, packet number and
    /// protected payload. The next coalesced packet starts here.
    pub len: usize,
}

impl LongHeader<'_> {
    /// True for a version this module reads fully (v1 and v2).
    pub fn known_version(&self) -> bool {
        matches!(self.version, version::V1 | version::V2)
    }
}

/// Reads a variable-length integer (RFC 9000 §16) at the start of `buf`:
/// its value and its encoded length, or `None` if `buf` is too short.
pub fn read_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for b in &bytes[1..] {
        v = (v << 8) | u64::from(*b);
    }
    Some((v, len))
}

/// A cursor whose every short read is malformed (a datagram never grows).
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], QuicError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or(QuicError::Malformed { what })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, QuicError> {
        Ok(self.take(1, what)?[0])
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, QuicError> {
        let (v, n) = read_varint(&self.buf[self.pos..]).ok_or(QuicError::Malformed { what })?;
        self.pos += n;
        Ok(v)
    }

    fn cid(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], QuicError> {
        let n = usize::from(self.u8(what)?);
        if n > max {
            return Err(QuicError::TooLarge {
                what: "connection ID",
                len: n,
                max,
            });
        }
        self.take(n, what)
    }
}

/// Parses the long header at the start of `datagram` (RFC 9000 §17.2): the
/// fields before the packet number, and the packet's extent. A short header
/// (the first bit clear) is malformed here; see [`short_header_dcid`].
pub fn parse_long_header(datagram: &[u8]) -> Result<LongHeader<'_>, QuicError> {
    let mut c = Cursor {
        buf: datagram,
        pos: 0,
    };
    let first = c.u8("empty datagram")?;
    if first & 0x80 == 0 {
        return Err(QuicError::Malformed {
            what: "a short header where a long header was expected",
        });
    }
    let v = c.take(4, "long header ends in the version field")?;
    let version = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
    let known = matches!(version, version::V1 | version::V2);
    // RFC 8999 allows 255-byte CIDs in versions it does not know.
    let max_cid = if known { MAX_CID_LEN } else { 255 };
    let dcid = c.cid(max_cid, "long header ends in the Destination Connection ID")?;
    let scid = c.cid(max_cid, "long header ends in the Source Connection ID")?;
    let type_bits = (first >> 4) & 0x03;
    let packet_type = match (version, type_bits) {
        (version::V1, 0) | (version::V2, 1) => PacketType::Initial,
        (version::V1, 1) | (version::V2, 2) => PacketType::ZeroRtt,
        (version::V1, 2) | (version::V2, 3) => PacketType::Handshake,
        (version::V1, 3) | (version::V2, 0) => PacketType::Retry,
        _ => PacketType::Other,
    };
    // The fixed bit (0x40) is not checked: a client may grease it (RFC
    // 9287) once it knows the server allows that, which a resuming client
    // knows from the start (quinn remembers `grease_quic_bit` with the
    // ticket and greases its very first Initial).
    let mut token: &[u8] = &[];
    match packet_type {
        PacketType::Retry | PacketType::Other => {
            return Ok(LongHeader {
                first,
                version,
                packet_type,
                dcid,
                scid,
                token,
                pn_offset: c.pos,
                len: datagram.len(),
            });
        }
        PacketType::Initial => {
            let n = c.varint("Initial ends in the token length")?;
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            token = c.take(n, "the Initial's token runs past the datagram")?;
        }
        PacketType::ZeroRtt | PacketType::Handshake => {}
    }
    let length = c.varint("long header ends in the Length field")?;
    let pn_offset = c.pos;
    let len = usize::try_from(length)
        .ok()
        .and_then(|l| pn_offset.checked_add(l))
        .filter(|end| *end <= datagram.len())
        .ok_or(QuicError::Malformed {
            what: "the packet's Length runs past the datagram",
        })?;
    // A packet number of at least 1 byte, and the 16-byte header protection
    // sample taken 4 bytes after the packet number's start (RFC 9001 §5.4.2).
    if len < pn_offset + 4 + 16 {
        return Err(QuicError::Malformed {
            what: "the packet is too short for a packet number and a header protection sample",
        });
    }
    Ok(LongHeader {
        first,
        version,
        packet_type,
        dcid,
        scid,
        token,
        pn_offset,
        len,
    })
}

/// The long-header packets coalesced in one datagram (RFC 9000 §12.2), in
/// order; it stops at a short header (which runs to the datagram's end),
/// after a Retry or unknown-version packet, or after the first error.
pub fn coalesced(datagram: &[u8]) -> Coalesced<'_> {
    Coalesced {
        rest: datagram,
        done: false,
    }
}

/// The iterator [`coalesced`] returns.
#[derive(Clone, Debug)]
pub struct Coalesced<'a> {
    rest: &'a [u8],
    done: bool,
}

impl<'a> Iterator for Coalesced<'a> {
    /// A packet's header and its bytes (header and protected payload).
    type Item = Result<(LongHeader<'a>, &'a [u8]), QuicError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.rest.is_empty() || self.rest[0] & 0x80 == 0 {
            return None;
        }
        match parse_long_header(self.rest) {
            Ok(h) => {
                let (packet, rest) = self.rest.split_at(h.len);
                self.rest = rest;
                if matches!(h.packet_type, PacketType::Retry | PacketType::Other) {
                    self.done = true;
                }
                Some(Ok((h, packet)))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The Destination Connection ID of a short-header (1-RTT) packet, whose
/// length is not on the wire: the reader must know it (`cid_len`, the
/// length its servers issue). `None` for a long header or a datagram
/// shorter than the CID.
pub fn short_header_dcid(datagram: &[u8], cid_len: usize) -> Option<&[u8]> {
    let first = *datagram.first()?;
    if first & 0x80 != 0 {
        return None;
    }
    datagram.get(1..1 + cid_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_of_every_length() {
        // RFC 9000 §A.1's examples.
        assert_eq!(
            read_varint(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
            Some((151_288_809_941_952_652, 8))
        );
        assert_eq!(
            read_varint(&[0x9d, 0x7f, 0x3e, 0x7d]),
            Some((494_878_333, 4))
        );
        assert_eq!(read_varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(read_varint(&[0x25]), Some((37, 1)));
        assert_eq!(read_varint(&[0x7b]), None);
    }

    #[test]
    fn short_headers_are_not_long_ones() {
        assert!(parse_long_header(&[0x40, 1, 2, 3]).is_err());
        assert_eq!(short_header_dcid(&[0x40, 1, 2, 3], 2), Some(&[1u8, 2][..]));
        assert_eq!(short_header_dcid(&[0x40, 1], 2), None);
        assert_eq!(coalesced(&[0x40, 1, 2]).count(), 0);
    }

    #[test]
    fn a_greased_fixed_bit_is_still_a_long_header() {
        // RFC 9287: a v1 Initial with the QUIC bit 0, as a resuming quinn
        // client sends its first one. DCID 1 byte, SCID 0, token 0, then
        // a Length of 20: a packet number and a header protection sample.
        let mut d = vec![0x80, 0, 0, 0, 1, 1, 0xaa, 0, 0, 20];
        d.extend([0u8; 20]);
        let h = parse_long_header(&d).expect("a greased Initial parses");
        assert_eq!(h.packet_type, PacketType::Initial);
        assert_eq!(h.dcid, &[0xaa][..]);
    }

    #[test]
    fn oversized_cids_in_v1_are_refused() {
        let mut d = vec![0xc0, 0, 0, 0, 1, 21];
        d.extend([0u8; 40]);
        assert!(matches!(
            parse_long_header(&d),
            Err(QuicError::TooLarge { len: 21, .. })
        ));
    }
}
