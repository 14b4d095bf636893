//! The QUIC listener's Initial keys, derived as far as each attempt needs
//! them.
//!
//! quinn derives a connection attempt's Initial keys on its first Initial
//! (`crypto::ServerConfig::initial_keys`), before the application decides
//! what to do with the attempt (`Incoming`): both directions, packet and
//! header keys, nine HKDF expansions and four AES key schedules. To read the
//! Initial's header it needs only the client's header protection key; a
//! Retry and an ignored attempt need nothing more, a refusal needs the
//! server's keys (its CONNECTION_CLOSE), and only an accepted attempt
//! needs all four. Under a flood of Initials that the door sheds, deriving
//! everything up front is most of quinn's own work per attempt.
//!
//! So the client's header protection key is derived at once, alone
//! ([`ClientHeaderKey`]). The four keys rustls derives (through the
//! metered crypto provider, as before: `breakdown --h3` sees the same key
//! schedule and packet protection for every connection it handshakes) come
//! on the first use of the client's packet key, which only an accepted
//! attempt makes (quinn opens its first Initial's payload before it sends
//! anything); from then on every key, the client's header key too, is
//! rustls's. An attempt the server seals something for before that (a
//! refusal's CONNECTION_CLOSE) gets the server's keys alone
//! ([`ServerInitialKeys`]: the same bytes rustls's would seal). QUIC v1
//! only (the version quinn serves); for any other the keys are rustls's
//! from the start. And only when the listener's provider derives RFC
//! 9001's Initial keys ([`rfc_initial_keys`], checked once): under an
//! `--ablate` set that replaces QUIC's key schedule or its protection
//! (`breakdown --h3`), the keys are rustls's throughout, as the ablated
//! client's are.

use std::sync::{Arc, OnceLock};

use bytes::BytesMut;
use quinn::ConnectionId;
use quinn::crypto::{self, CryptoError, HeaderKey, KeyPair, Keys, PacketKey};
use tlslab_crypto::quic::{ClientHeaderKey, ServerInitialKeys};

/// QUIC v1, quinn's version.
const V1: u32 = 1;

/// The Initial keys of one attempt: `inner`'s, derived when first needed
/// (`lazy`: [`rfc_initial_keys`] of `inner`), or all at once.
pub(super) fn initial_keys(
    inner: &Arc<quinn::crypto::rustls::QuicServerConfig>,
    lazy: bool,
    version: u32,
    dcid: &ConnectionId,
) -> Result<Keys, crypto::UnsupportedVersion> {
    use quinn::crypto::ServerConfig as _;
    if lazy
        && version == V1
        && let Ok(header) = ClientHeaderKey::derive(version, dcid)
    {
        return Ok(Lazy::new(inner.clone(), dcid, header).keys_boxed());
    }
    inner.initial_keys(version, dcid)
}

/// Whether `inner` derives and applies RFC 9001's v1 Initial keys, so that
/// tlslab's own client header key and server keys stand in for its until
/// they are derived: the same bytes out of both for one DCID. Not so with
/// an `--ablate` set that replaces QUIC's key schedule, packet or header
/// protection (or TLS's HKDF).
pub(super) fn rfc_initial_keys(inner: &quinn::crypto::rustls::QuicServerConfig) -> bool {
    use quinn::crypto::ServerConfig as _;
    let dcid = ConnectionId::new(&[0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08]);
    let (Ok(want), Ok(header), Ok(local)) = (
        inner.initial_keys(V1, &dcid),
        ClientHeaderKey::derive(V1, &dcid),
        ServerInitialKeys::derive(V1, &dcid),
    ) else {
        return false;
    };
    // A client's long header (packet number at 20), its sample after it.
    let mut a = [0u8; 64];
    for (i, b) in a.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37) | 0x80;
    }
    let mut b = a;
    want.header.remote.decrypt(20, &mut a);
    let header_ok = unprotect(&header, 20, &mut b) && a == b;
    // A server's packet: 20 bytes of header, 28 of payload, the tag.
    let mut c = [0xc3u8; 64];
    let mut d = c;
    want.packet.local.encrypt(7, &mut c, 20);
    want.header.local.encrypt(19, &mut c);
    let (head, rest) = d.split_at_mut(20);
    let (payload, tag) = rest.split_at_mut(44 - ServerInitialKeys::TAG_LEN);
    let sealed = match local.seal(7, head, payload) {
        Ok(t) => {
            tag.copy_from_slice(&t);
            protect(&local, 19, &mut d)
        }
        Err(_) => false,
    };
    header_ok && sealed && c == d
}

struct Lazy {
    inner: Arc<quinn::crypto::rustls::QuicServerConfig>,
    dcid: ConnectionId,
    /// The client's header protection key, until `keys` are derived.
    header: ClientHeaderKey,
    /// The server's keys alone, when it seals before `keys` are derived.
    local: OnceLock<Option<ServerInitialKeys>>,
    keys: OnceLock<Keys>,
}

impl Lazy {
    fn new(
        inner: Arc<quinn::crypto::rustls::QuicServerConfig>,
        dcid: &ConnectionId,
        header: ClientHeaderKey,
    ) -> Arc<Self> {
        Arc::new(Lazy {
            inner,
            dcid: *dcid,
            header,
            local: OnceLock::new(),
            keys: OnceLock::new(),
        })
    }

    /// The four keys quinn takes, each this one's.
    fn keys_boxed(self: Arc<Self>) -> Keys {
        Keys {
            header: KeyPair {
                local: Box::new(LazyHeader(self.clone(), Side::Local)),
                remote: Box::new(LazyHeader(self.clone(), Side::Remote)),
            },
            packet: KeyPair {
                local: Box::new(LazyPacket(self.clone(), Side::Local)),
                remote: Box::new(LazyPacket(self, Side::Remote)),
            },
        }
    }

    /// The server's keys alone while rustls's are not derived (`None`:
    /// use rustls's).
    fn local(&self) -> Option<&ServerInitialKeys> {
        if self.keys.get().is_some() {
            return None;
        }
        self.local
            .get_or_init(|| ServerInitialKeys::derive(V1, &self.dcid).ok())
            .as_ref()
    }

    /// rustls's four keys, derived on the first call.
    fn keys(&self) -> &Keys {
        use quinn::crypto::ServerConfig as _;
        self.keys.get_or_init(|| {
            self.inner
                .initial_keys(V1, &self.dcid)
                .expect("quinn derives Initial keys for QUIC v1, its own version")
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Local,
    Remote,
}

fn pick<T>(pair: &KeyPair<T>, side: Side) -> &T {
    match side {
        Side::Local => &pair.local,
        Side::Remote => &pair.remote,
    }
}

struct LazyHeader(Arc<Lazy>, Side);

impl HeaderKey for LazyHeader {
    fn decrypt(&self, pn_offset: usize, packet: &mut [u8]) {
        let lazy = &self.0;
        if self.1 == Side::Remote
            && lazy.keys.get().is_none()
            && unprotect(&lazy.header, pn_offset, packet)
        {
            return;
        }
        pick(&lazy.keys().header, self.1).decrypt(pn_offset, packet);
    }

    fn encrypt(&self, pn_offset: usize, packet: &mut [u8]) {
        if self.1 == Side::Local
            && let Some(k) = self.0.local()
            && protect(k, pn_offset, packet)
        {
            return;
        }
        pick(&self.0.keys().header, self.1).encrypt(pn_offset, packet);
    }

    fn sample_size(&self) -> usize {
        ClientHeaderKey::SAMPLE_LEN
    }
}

/// Removes the header protection of a client's long-header packet with
/// `key`, as rustls's key does (RFC 9001 §5.4.1); false (nothing changed)
/// if the packet is too short for its sample.
fn unprotect(key: &ClientHeaderKey, pn_offset: usize, packet: &mut [u8]) -> bool {
    mask_header(|s| key.mask(s).ok(), pn_offset, packet, false)
}

/// Applies the header protection of a server's long-header packet with
/// `key`, as rustls's key does; false (nothing changed) if the packet is
/// too short for its sample.
fn protect(key: &ServerInitialKeys, pn_offset: usize, packet: &mut [u8]) -> bool {
    mask_header(|s| key.mask(s).ok(), pn_offset, packet, true)
}

/// XORs the header protection mask `mask` makes of the packet's sample
/// into its first byte (4 bits of a long header, 5 of a short one) and its
/// packet number, whose length the first byte gives: read before masking
/// when `protecting`, after when removing.
fn mask_header(
    mask: impl FnOnce(&[u8]) -> Option<[u8; 5]>,
    pn_offset: usize,
    packet: &mut [u8],
    protecting: bool,
) -> bool {
    let sample_at = pn_offset + 4;
    let Some(mask) = packet
        .get(sample_at..sample_at + ClientHeaderKey::SAMPLE_LEN)
        .and_then(mask)
    else {
        return false;
    };
    let Some(first) = packet.first_mut() else {
        return false;
    };
    let pn_bits = |b: u8| usize::from(b & 0x03) + 1;
    let plain = *first;
    *first ^= mask[0] & if *first & 0x80 != 0 { 0x0f } else { 0x1f };
    let pn_len = pn_bits(if protecting { plain } else { *first });
    for (b, m) in packet[pn_offset..pn_offset + pn_len]
        .iter_mut()
        .zip(&mask[1..])
    {
        *b ^= m;
    }
    true
}

struct LazyPacket(Arc<Lazy>, Side);

impl PacketKey for LazyPacket {
    fn encrypt(&self, packet: u64, buf: &mut [u8], header_len: usize) {
        if self.1 == Side::Local
            && let Some(k) = self.0.local()
            && buf.len() >= header_len + ServerInitialKeys::TAG_LEN
        {
            let (header, rest) = buf.split_at_mut(header_len);
            let (payload, tag) = rest.split_at_mut(rest.len() - ServerInitialKeys::TAG_LEN);
            if let Ok(t) = k.seal(packet, header, payload) {
                tag.copy_from_slice(&t);
                return;
            }
        }
        pick(&self.0.keys().packet, self.1).encrypt(packet, buf, header_len);
    }

    fn decrypt(
        &self,
        packet: u64,
        header: &[u8],
        payload: &mut BytesMut,
    ) -> Result<(), CryptoError> {
        pick(&self.0.keys().packet, self.1).decrypt(packet, header, payload)
    }

    // The Initial packet key is AES-128-GCM (RFC 9001 §5.2): its tag and
    // limits are known without deriving it (§6.6).
    fn tag_len(&self) -> usize {
        16
    }

    fn confidentiality_limit(&self) -> u64 {
        1 << 23
    }

    fn integrity_limit(&self) -> u64 {
        1 << 52
    }
}

#[cfg(test)]
#[path = "initial_keys_tests.rs"]
mod tests;
