//! A client's Initial packets opened without a connection: header
//! protection removed and the payload decrypted with the Initial keys that
//! anyone derives from the Destination Connection ID and the version's salt
//! (RFC 9001 §5.2, RFC 9369 §3.3.1), on aws-lc-rs. Only the direction read
//! is derived (rustls's `quic::Keys::initial` derives both, and builds the
//! sending direction's keys too), and a [`HelloReader`] keeps the keys of
//! its last few DCIDs: a ClientHello in two datagrams (a post-quantum key
//! share) costs one derivation, not two. The CRYPTO frames then go to
//! `tlslab_wire::quic`'s reassembler, and the ClientHello to
//! `tlslab_wire::ClientHello::parse`.

use std::sync::OnceLock;
use std::time::Instant;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey, quic::HeaderProtectionKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, KeyType, Prk, Salt};
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
    let keys = InitialKeys::derive(header, header.dcid, Direction::Client)?;
    opened(header, keys.open(header, packet)?)
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
    let keys = InitialKeys::derive(header, client_dcid, Direction::Server)?;
    opened(header, keys.open(header, packet)?)
}

fn opened(
    header: &LongHeader<'_>,
    (packet_number, payload): (u64, Vec<u8>),
) -> Result<OpenedInitial, InitialError> {
    Ok(OpenedInitial {
        version: header.version,
        dcid: header.dcid.to_vec(),
        scid: header.scid.to_vec(),
        token: header.token.to_vec(),
        packet_number,
        payload,
    })
}

/// Whose Initial packets a key opens: the client's ("client in") or the
/// server's ("server in").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Client,
    Server,
}

/// An HKDF output length for aws-lc-rs.
struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context, into `out`.
fn expand_label(prk: &Prk, label: &[u8], out: &mut [u8]) -> Result<(), InitialError> {
    let len = (out.len() as u16).to_be_bytes();
    let label_len = [(b"tls13 ".len() + label.len()) as u8];
    let info: [&[u8]; 5] = [&len, &label_len, b"tls13 ", label, &[0]];
    prk.expand(&info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| InitialError::Decrypt("HKDF-Expand-Label"))
}

/// One direction's Initial keys (AES-128-GCM and AES-128 header
/// protection, the only Initial suite of v1 and v2), for one DCID.
struct InitialKeys {
    version: u32,
    direction: Direction,
    /// The DCID the keys derive from.
    dcid: Vec<u8>,
    header: HeaderProtectionKey,
    packet: LessSafeKey,
    iv: [u8; 12],
}

impl InitialKeys {
    /// The keys of `direction` for `header`'s version from `key_dcid`.
    fn derive(
        header: &LongHeader<'_>,
        key_dcid: &[u8],
        direction: Direction,
    ) -> Result<Self, InitialError> {
        if header.packet_type != PacketType::Initial {
            return Err(InitialError::NotInitial(header.packet_type));
        }
        Self::derive_for(header.version, key_dcid, direction)
    }

    /// The keys of `direction` for `version` from `key_dcid`.
    fn derive_for(
        version: u32,
        key_dcid: &[u8],
        direction: Direction,
    ) -> Result<Self, InitialError> {
        let (secret, labels) = secret(version, key_dcid, direction)?;
        let (mut key, mut iv) = ([0u8; 16], [0u8; 12]);
        expand_label(&secret, labels[0], &mut key)?;
        expand_label(&secret, labels[1], &mut iv)?;
        let packet = UnboundKey::new(&aead::AES_128_GCM, &key)
            .map(LessSafeKey::new)
            .map_err(|_| InitialError::Decrypt("AES-128-GCM key"))?;
        Ok(InitialKeys {
            version,
            direction,
            dcid: key_dcid.to_vec(),
            header: header_key(&secret, labels[2])?,
            packet,
            iv,
        })
    }

    /// The AEAD nonce of packet number `pn` (RFC 9001 §5.3).
    fn nonce(&self, pn: u64) -> Nonce {
        let mut nonce = self.iv;
        for (n, p) in nonce[4..].iter_mut().zip(pn.to_be_bytes()) {
            *n ^= p;
        }
        Nonce::assume_unique_for_key(nonce)
    }

    fn fits(&self, version: u32, dcid: &[u8], direction: Direction) -> bool {
        self.version == version && self.direction == direction && self.dcid == dcid
    }

    /// Removes header protection and decrypts one Initial packet: its
    /// packet number and decrypted frames.
    fn open(&self, header: &LongHeader<'_>, packet: &[u8]) -> Result<(u64, Vec<u8>), InitialError> {
        let pn_offset = header.pn_offset;
        let sample_at = pn_offset + 4;
        let sample = packet
            .get(sample_at..sample_at + 16)
            .ok_or(QuicError::Malformed {
                what: "the packet is too short for a header protection sample",
            })?;
        let mask = self
            .header
            .new_mask(sample)
            .map_err(|_| InitialError::Decrypt("header protection"))?;
        let mut buf = packet.get(..header.len).unwrap_or(packet).to_vec();
        // Long header: the low 4 bits of the first byte are protected.
        buf[0] ^= mask[0] & 0x0f;
        let pn_len = usize::from(buf[0] & 0x03) + 1;
        let mut packet_number = 0u64;
        for (i, m) in mask[1..=pn_len].iter().enumerate() {
            let b = buf
                .get_mut(pn_offset + i)
                .ok_or(InitialError::Decrypt("header protection"))?;
            *b ^= m;
            packet_number = (packet_number << 8) | u64::from(*b);
        }
        let start = pn_offset + pn_len;
        let (aad, payload) = buf.split_at_mut(start);
        let plain_len = self
            .packet
            .open_in_place(self.nonce(packet_number), Aad::from(&*aad), payload)
            .map_err(|_| InitialError::Decrypt("AEAD authentication"))?
            .len();
        // The frames in place of the header: no second buffer.
        buf.truncate(start + plain_len);
        buf.drain(..start);
        Ok((packet_number, buf))
    }
}

/// The Initial secret of `direction` (RFC 9001 §5.2; RFC 9369 §3.3.1 and
/// §3.3.2), and the version's key, IV and header protection labels.
fn secret(
    version: u32,
    key_dcid: &[u8],
    direction: Direction,
) -> Result<(Prk, [&'static [u8]; 3]), InitialError> {
    let (salt, labels): (&[u8], [&'static [u8]; 3]) = match version {
        version::V1 => (&SALT_V1, [b"quic key", b"quic iv", b"quic hp"]),
        version::V2 => (&SALT_V2, [b"quicv2 key", b"quicv2 iv", b"quicv2 hp"]),
        other => return Err(InitialError::UnsupportedVersion(other)),
    };
    let initial = Salt::new(HKDF_SHA256, salt).extract(key_dcid);
    let mut secret = [0u8; 32];
    let label: &[u8] = match direction {
        Direction::Client => b"client in",
        Direction::Server => b"server in",
    };
    expand_label(&initial, label, &mut secret)?;
    Ok((Prk::new_less_safe(HKDF_SHA256, &secret), labels))
}

fn header_key(secret: &Prk, label: &[u8]) -> Result<HeaderProtectionKey, InitialError> {
    let mut hp = [0u8; 16];
    expand_label(secret, label, &mut hp)?;
    HeaderProtectionKey::new(&aead::quic::AES_128, &hp)
        .map_err(|_| InitialError::Decrypt("AES-128 header protection key"))
}

/// The header protection key of a client's Initials alone (RFC 9001
/// §5.4): what a server needs to read the header of a client's first
/// Initial, before it decides whether to answer it at all. The packet key
/// and the server's keys can wait for that decision (a Retry, or an
/// attempt ignored, never needs them).
pub struct ClientHeaderKey(HeaderProtectionKey);

impl std::fmt::Debug for ClientHeaderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientHeaderKey")
    }
}

impl ClientHeaderKey {
    /// The bytes of ciphertext a mask is made from.
    pub const SAMPLE_LEN: usize = 16;

    /// The key for the Initials of `version` (v1 or v2) sent to `dcid`.
    pub fn derive(version: u32, dcid: &[u8]) -> Result<Self, InitialError> {
        let (secret, labels) = secret(version, dcid, Direction::Client)?;
        header_key(&secret, labels[2]).map(ClientHeaderKey)
    }

    /// The 5-byte mask of `sample` ([`Self::SAMPLE_LEN`] bytes): the first
    /// byte's for the first header byte, the rest for the packet number.
    pub fn mask(&self, sample: &[u8]) -> Result<[u8; 5], InitialError> {
        self.0
            .new_mask(sample)
            .map_err(|_| InitialError::Decrypt("header protection"))
    }
}

/// A server's Initial keys alone (RFC 9001 §5.2, "server in"), to seal
/// what it sends in its Initial space: what a server that refuses an
/// attempt needs (a CONNECTION_CLOSE), without the client's packet key.
pub struct ServerInitialKeys(InitialKeys);

impl std::fmt::Debug for ServerInitialKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerInitialKeys")
    }
}

impl ServerInitialKeys {
    /// The AEAD tag's length.
    pub const TAG_LEN: usize = 16;

    /// The keys of `version` (v1 or v2) for the attempt whose client's
    /// first Initial went to `client_dcid`.
    pub fn derive(version: u32, client_dcid: &[u8]) -> Result<Self, InitialError> {
        InitialKeys::derive_for(version, client_dcid, Direction::Server).map(ServerInitialKeys)
    }

    /// Seals `payload` in place as packet number `pn` after `header` (the
    /// associated data); the tag.
    pub fn seal(
        &self,
        pn: u64,
        header: &[u8],
        payload: &mut [u8],
    ) -> Result<[u8; 16], InitialError> {
        let k = &self.0;
        let tag = k
            .packet
            .seal_in_place_separate_tag(k.nonce(pn), Aad::from(header), payload)
            .map_err(|_| InitialError::Decrypt("AES-128-GCM seal"))?;
        tag.as_ref()
            .try_into()
            .map_err(|_| InitialError::Decrypt("AES-128-GCM tag length"))
    }

    /// The 5-byte header protection mask of `sample` (16 bytes).
    pub fn mask(&self, sample: &[u8]) -> Result<[u8; 5], InitialError> {
        self.0
            .header
            .new_mask(sample)
            .map_err(|_| InitialError::Decrypt("header protection"))
    }
}

/// The Retry Integrity Tag of a QUIC v1 Retry (RFC 9001 §5.8): `retry` is
/// the Retry packet up to its tag, `orig_dst_cid` the DCID of the client's
/// first Initial. The AES-128-GCM key is fixed, so it is built once, not per
/// Retry (quinn builds it per Retry). `None` only if aws-lc-rs refuses the
/// fixed key or the seal.
pub fn retry_tag_v1(orig_dst_cid: &[u8], retry: &[u8]) -> Option<[u8; 16]> {
    static KEY: OnceLock<Option<LessSafeKey>> = OnceLock::new();
    const K: [u8; 16] = [
        0xbe, 0x0c, 0x69, 0x0b, 0x9f, 0x66, 0x57, 0x5a, 0x1d, 0x76, 0x6b, 0x54, 0xe3, 0x68, 0xc8,
        0x4e,
    ];
    const N: [u8; 12] = [
        0x46, 0x15, 0x99, 0xd3, 0x5d, 0x63, 0x2b, 0xf2, 0x23, 0x98, 0x25, 0xbb,
    ];
    let key = KEY
        .get_or_init(|| {
            UnboundKey::new(&aead::AES_128_GCM, &K)
                .ok()
                .map(LessSafeKey::new)
        })
        .as_ref()?;
    let mut pseudo = Vec::with_capacity(1 + orig_dst_cid.len() + retry.len());
    pseudo.push(u8::try_from(orig_dst_cid.len()).ok()?);
    pseudo.extend_from_slice(orig_dst_cid);
    pseudo.extend_from_slice(retry);
    let tag = key
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(N), Aad::from(&pseudo), &mut [])
        .ok()?;
    tag.as_ref().try_into().ok()
}

/// RFC 9001 §5.2.
const SALT_V1: [u8; 20] = [
    0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad,
    0xcc, 0xbb, 0x7f, 0x0a,
];

/// RFC 9369 §3.3.1.
const SALT_V2: [u8; 20] = [
    0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb,
    0xf9, 0xbd, 0x2e, 0xd9,
];

/// The DCIDs whose client Initial keys a [`HelloReader`] keeps: a
/// ClientHello's datagrams follow one another, so a handful covers the
/// attempts whose datagrams interleave.
const KEY_CACHE: usize = 16;

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
/// Initials as they take, bounded by [`AssemblerLimits`]; the client
/// Initial keys of its last `KEY_CACHE` DCIDs are kept.
pub struct HelloReader {
    assembler: HelloAssembler,
    /// Most recently used last.
    keys: Vec<InitialKeys>,
}

impl std::fmt::Debug for HelloReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelloReader")
            .field("assembler", &self.assembler)
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl HelloReader {
    /// A reader with these bounds.
    pub fn new(limits: AssemblerLimits) -> Self {
        HelloReader {
            assembler: HelloAssembler::new(limits),
            keys: Vec::with_capacity(KEY_CACHE),
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

    /// The client Initial keys of `header`'s DCID: kept, or derived (and
    /// kept, in place of the least recently used).
    fn keys(&mut self, header: &LongHeader<'_>) -> Result<&InitialKeys, InitialError> {
        let hit = self
            .keys
            .iter()
            .position(|k| k.fits(header.version, header.dcid, Direction::Client));
        let keys = match hit {
            Some(i) => self.keys.remove(i),
            None => {
                let k = InitialKeys::derive(header, header.dcid, Direction::Client)?;
                if self.keys.len() >= KEY_CACHE {
                    self.keys.remove(0);
                }
                k
            }
        };
        self.keys.push(keys);
        Ok(&self.keys[self.keys.len() - 1])
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
            let (_, payload) = self.keys(&header)?.open(&header, packet)?;
            if let Some(hello) = self.assembler.push(header.dcid, &payload, now)? {
                return Ok(Read::Hello(InitialHello {
                    version: header.version,
                    dcid: header.dcid.to_vec(),
                    scid: header.scid.to_vec(),
                    token: header.token.to_vec(),
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
