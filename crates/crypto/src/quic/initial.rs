//! A client's Initial packets opened without a connection: header
//! protection removed and the payload decrypted with the Initial keys that
//! anyone derives from the Destination Connection ID and the version's salt
//! (RFC 9001 §5.2, RFC 9369 §3.3.1), by rustls's `quic::Keys::initial` on
//! aws-lc-rs. The CRYPTO frames then go to `tlslab_wire::quic`'s
//! reassembler, and the ClientHello to `tlslab_wire::ClientHello::parse`.

use std::time::Instant;

use rustls::Side;
use rustls::quic::{Keys, Version};
use tlslab_wire::quic::{
    AssemblerLimits, AssemblerStats, HelloAssembler, LongHeader, PacketType, QuicError, coalesced,
    version,
};

/// Why an Initial could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InitialError {
    /// The packet or its payload is not valid QUIC.
    #[error(transparent)]
    Wire(#[from] QuicError),
    /// The packet is not an Initial.
    #[error("not a QUIC Initial packet ({0:?}); only a client's Initials carry its ClientHello")]
    NotInitial(PacketType),
    /// A version whose Initial keys tlslab does not derive.
    #[error(
        "QUIC version {0:#010x} is not one tlslab reads (v1 0x00000001, v2 0x6b3343cf); the client must use QUIC v1 or v2"
    )]
    UnsupportedVersion(u32),
    /// Header protection or the AEAD refused the packet.
    #[error(
        "the Initial does not decrypt under the keys of its DCID ({0}); it is corrupt, or not a client's Initial"
    )]
    Decrypt(&'static str),
}

/// One opened Initial packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenedInitial {
    /// The version.
    pub version: u32,
    /// The Destination Connection ID (the Initial keys' input).
    pub dcid: Vec<u8>,
    /// The Source Connection ID.
    pub scid: Vec<u8>,
    /// The token (empty, or a Retry's or a NEW_TOKEN's).
    pub token: Vec<u8>,
    /// The packet number (as sent; an Initial's first is 0).
    pub packet_number: u64,
    /// The decrypted frames.
    pub payload: Vec<u8>,
}

/// Opens one Initial packet (`packet`: its header and protected payload,
/// `header`: its parsed long header) as the server would: with the client's
/// Initial keys.
pub fn open_initial(header: &LongHeader<'_>, packet: &[u8]) -> Result<OpenedInitial, InitialError> {
    open_with(header, packet, header.dcid, Side::Server)
}

/// Opens one of a server's Initial packets as its client would: with the
/// server's Initial keys, which derive from the Destination Connection ID
/// of the client's first Initial (`client_dcid`), not from this packet's
/// (RFC 9001 §5.2). A balancer that forwarded that Initial reads the
/// server's ServerHello this way.
pub fn open_server_initial(
    header: &LongHeader<'_>,
    packet: &[u8],
    client_dcid: &[u8],
) -> Result<OpenedInitial, InitialError> {
    open_with(header, packet, client_dcid, Side::Client)
}

/// Opens an Initial with the keys of `key_dcid`, as `side` receives it.
fn open_with(
    header: &LongHeader<'_>,
    packet: &[u8],
    key_dcid: &[u8],
    side: Side,
) -> Result<OpenedInitial, InitialError> {
    if header.packet_type != PacketType::Initial {
        return Err(InitialError::NotInitial(header.packet_type));
    }
    let v = match header.version {
        version::V1 => Version::V1,
        version::V2 => Version::V2,
        other => return Err(InitialError::UnsupportedVersion(other)),
    };
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .ok_or(InitialError::Decrypt("no TLS 1.3 AES-128-GCM suite"))?;
    let quic = suite
        .quic
        .ok_or(InitialError::Decrypt("no QUIC AES-128-GCM in aws-lc-rs"))?;
    let keys = Keys::initial(v, suite, quic, key_dcid, side);
    let mut buf = packet.get(..header.len).unwrap_or(packet).to_vec();
    let pn_offset = header.pn_offset;
    let sample_at = pn_offset + 4;
    let sample_len = keys.remote.header.sample_len();
    let sample = buf
        .get(sample_at..sample_at + sample_len)
        .ok_or(QuicError::Malformed {
            what: "the packet is too short for a header protection sample",
        })?
        .to_vec();
    let (head, rest) = buf.split_at_mut(pn_offset);
    let pn_max = rest.len().min(4);
    keys.remote
        .header
        .decrypt_in_place(&sample, &mut head[0], &mut rest[..pn_max])
        .map_err(|_| InitialError::Decrypt("header protection"))?;
    let pn_len = usize::from(buf[0] & 0x03) + 1;
    let packet_number = buf[pn_offset..pn_offset + pn_len]
        .iter()
        .fold(0u64, |n, b| (n << 8) | u64::from(*b));
    let (aad, payload) = buf.split_at_mut(pn_offset + pn_len);
    let plain = keys
        .remote
        .packet
        .decrypt_in_place(packet_number, aad, payload)
        .map_err(|_| InitialError::Decrypt("AEAD authentication"))?
        .to_vec();
    Ok(OpenedInitial {
        version: header.version,
        dcid: header.dcid.to_vec(),
        scid: header.scid.to_vec(),
        token: header.token.to_vec(),
        packet_number,
        payload: plain,
    })
}

/// A client's ClientHello, read whole from its Initials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitialHello {
    /// The QUIC version.
    pub version: u32,
    /// The client's chosen Destination Connection ID.
    pub dcid: Vec<u8>,
    /// The client's Source Connection ID.
    pub scid: Vec<u8>,
    /// The token of the Initial that completed the ClientHello.
    pub token: Vec<u8>,
    /// The ClientHello: handshake header and body.
    pub hello: Vec<u8>,
}

impl InitialHello {
    /// The parsed ClientHello (SNI, ALPN, PSK identities, ...).
    pub fn client_hello(&self) -> Result<tlslab_wire::ClientHello<'_>, tlslab_wire::Error> {
        tlslab_wire::ClientHello::parse(&self.hello)
    }
}

/// What one datagram gave a [`HelloReader`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// The ClientHello is whole.
    Hello(InitialHello),
    /// An Initial whose ClientHello needs more datagrams.
    Partial,
    /// No Initial: a short header, or a long header of another type.
    NotInitial,
}

/// Reads clients' ClientHellos from their datagrams, across as many
/// Initials as they take, bounded by [`AssemblerLimits`].
#[derive(Debug)]
pub struct HelloReader {
    assembler: HelloAssembler,
}

impl HelloReader {
    /// A reader with these bounds.
    pub fn new(limits: AssemblerLimits) -> Self {
        HelloReader {
            assembler: HelloAssembler::new(limits),
        }
    }

    /// Counters of the reassembler.
    pub fn stats(&self) -> AssemblerStats {
        self.assembler.stats()
    }

    /// Partial ClientHellos held.
    pub fn pending(&self) -> usize {
        self.assembler.len()
    }

    /// Drops partial ClientHellos past their expiry.
    pub fn purge(&mut self, now: Instant) {
        self.assembler.purge(now);
    }

    /// Reads one datagram from a client: each coalesced Initial is opened
    /// and its CRYPTO frames added; other packets (0-RTT) are skipped.
    pub fn push(&mut self, datagram: &[u8], now: Instant) -> Result<Read, InitialError> {
        let mut seen = false;
        for p in coalesced(datagram) {
            let (header, packet) = p?;
            if header.packet_type != PacketType::Initial {
                continue;
            }
            seen = true;
            let opened = open_initial(&header, packet)?;
            if let Some(hello) = self.assembler.push(&opened.dcid, &opened.payload, now)? {
                return Ok(Read::Hello(InitialHello {
                    version: opened.version,
                    dcid: opened.dcid,
                    scid: opened.scid,
                    token: opened.token,
                    hello,
                }));
            }
        }
        Ok(if seen {
            Read::Partial
        } else {
            Read::NotInitial
        })
    }
}
