//! QUIC's own stages (RFC 9001), replaced by no-ops for `breakdown --h3`:
//! packet protection (`quic-packet`), header protection (`quic-header`)
//! and QUIC's key schedule (`quic-keys`).
//!
//! rustls builds every QUIC key, the Initial keys that quinn derives from
//! the client's first Destination Connection ID included, from the TLS 1.3
//! suite's `quic` algorithm and its HKDF, so replacing those two in the
//! ablated provider reaches every packet on both sides.

use std::sync::OnceLock;

use rustls::Error;
use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::crypto::hmac;
use rustls::crypto::tls13::{Hkdf, HkdfExpander, OkmBlock, OutputLengthError};
use rustls::quic::{Algorithm, HeaderProtectionKey, PacketKey, Tag};

/// The tag length of every AEAD rustls offers (records and QUIC packets
/// alike).
pub(crate) const TAG_LEN: usize = 16;

/// The Initial salts of QUIC v1 (RFC 9001 §5.2), v2 (RFC 9369 §3.3.1)
/// and the last draft: an HKDF-Extract with one of them is the Initial
/// secret's.
const INITIAL_SALTS: [[u8; 20]; 3] = [
    [
        0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c,
        0xad, 0xcc, 0xbb, 0x7f, 0x0a,
    ],
    [
        0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d,
        0xcb, 0xf9, 0xbd, 0x2e, 0xd9,
    ],
    [
        0xaf, 0xbf, 0xec, 0x28, 0x99, 0x93, 0xd2, 0x4c, 0x9e, 0x97, 0x86, 0xf1, 0x9c, 0x61, 0x11,
        0xe0, 0x43, 0x90, 0xa8, 0x99,
    ],
];

/// A suite's QUIC algorithm with packet and/or header protection made
/// no-ops.
pub(crate) struct AblatedQuic {
    pub(crate) inner: &'static dyn Algorithm,
    pub(crate) packet: bool,
    pub(crate) header: bool,
    /// The real AEAD's limits (RFC 9001 §6.6), so that key updates happen
    /// when they would with the real cipher.
    pub(crate) limits: (u64, u64),
}

impl Algorithm for AblatedQuic {
    fn packet_key(&self, key: AeadKey, iv: Iv) -> Box<dyn PacketKey> {
        if self.packet {
            Box::new(NullPacketKey {
                confidentiality: self.limits.0,
                integrity: self.limits.1,
            })
        } else {
            self.inner.packet_key(key, iv)
        }
    }
    fn header_protection_key(&self, key: AeadKey) -> Box<dyn HeaderProtectionKey> {
        if self.header {
            Box::new(NullHeaderKey)
        } else {
            self.inner.header_protection_key(key)
        }
    }
    fn aead_key_len(&self) -> usize {
        self.inner.aead_key_len()
    }
}

/// The RFC 9001 §6.6 limits of a suite's AEAD: AES-GCM's, or
/// ChaCha20-Poly1305's.
pub(crate) fn limits(aes_gcm: bool) -> (u64, u64) {
    if aes_gcm {
        (1 << 23, 1 << 52)
    } else {
        (u64::MAX, 1 << 36)
    }
}

/// Packet protection as a no-op: the payload stays as it is and the tag
/// is 16 zero bytes, so every packet keeps its size.
struct NullPacketKey {
    confidentiality: u64,
    integrity: u64,
}

impl PacketKey for NullPacketKey {
    fn encrypt_in_place(
        &self,
        _packet_number: u64,
        _header: &[u8],
        _payload: &mut [u8],
    ) -> Result<Tag, Error> {
        Ok(Tag::from(&[0u8; TAG_LEN][..]))
    }
    fn decrypt_in_place<'a>(
        &self,
        _packet_number: u64,
        _header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        let Some(body) = payload.len().checked_sub(TAG_LEN) else {
            return Err(Error::DecryptError);
        };
        // A real tag is (almost) never all zero: the peer protects its
        // packets for real, and quinn drops them as undecryptable.
        if payload[body..].iter().any(|b| *b != 0) {
            return Err(Error::DecryptError);
        }
        Ok(&payload[..body])
    }
    fn tag_len(&self) -> usize {
        TAG_LEN
    }
    fn confidentiality_limit(&self) -> u64 {
        self.confidentiality
    }
    fn integrity_limit(&self) -> u64 {
        self.integrity
    }
}

/// Header protection as a no-op: the first byte and the packet number go
/// out as they are.
struct NullHeaderKey;

impl HeaderProtectionKey for NullHeaderKey {
    fn encrypt_in_place(
        &self,
        _sample: &[u8],
        _first: &mut u8,
        _packet_number: &mut [u8],
    ) -> Result<(), Error> {
        Ok(())
    }
    fn decrypt_in_place(
        &self,
        _sample: &[u8],
        _first: &mut u8,
        _packet_number: &mut [u8],
    ) -> Result<(), Error> {
        Ok(())
    }
    fn sample_len(&self) -> usize {
        16
    }
}

/// HKDF with QUIC's own derivations made free (`quic-keys`): the Initial
/// secret (an extract with an Initial salt, and everything expanded from
/// it) and every expansion with a QUIC label (`quic key`, `quic iv`,
/// `quic hp`, `quic ku` and their v2 spellings) give zeros without
/// computing anything. TLS's own key schedule (traffic secrets, Finished,
/// resumption) is untouched, and an expander made for a secret is built
/// only when a TLS derivation needs it, so the QUIC key builder's HMAC
/// key set-up is skipped too.
pub(crate) struct QuicKeysHkdf {
    pub(crate) inner: &'static dyn Hkdf,
    /// The hash's output length.
    pub(crate) len: usize,
}

fn quic_label(info: &[&[u8]]) -> bool {
    // HKDF-Expand-Label's info: length, label length, "tls13 ", label,
    // context length, context.
    info.len() >= 4 && info[2] == b"tls13 " && info[3].starts_with(b"quic")
}

fn zero_slice(len: usize, output: &mut [u8]) -> Result<(), OutputLengthError> {
    if output.len() > 255 * len {
        return Err(OutputLengthError);
    }
    output.fill(0);
    Ok(())
}

fn zero_block(len: usize) -> OkmBlock {
    OkmBlock::new(&[0u8; 64][..len.min(64)])
}

/// Every expansion zero: the Initial secret's expander.
struct InitialZero(usize);

impl HkdfExpander for InitialZero {
    fn expand_slice(&self, _info: &[&[u8]], output: &mut [u8]) -> Result<(), OutputLengthError> {
        zero_slice(self.0, output)
    }
    fn expand_block(&self, _info: &[&[u8]]) -> OkmBlock {
        zero_block(self.0)
    }
    fn hash_len(&self) -> usize {
        self.0
    }
}

/// QUIC labels zero; anything else from the real expander, built on first
/// use.
struct QuicZero {
    len: usize,
    make: Make,
    real: OnceLock<Box<dyn HkdfExpander>>,
}

enum Make {
    Built,
    Okm(&'static dyn Hkdf, OkmBlock),
}

impl QuicZero {
    fn real(&self) -> &dyn HkdfExpander {
        self.real
            .get_or_init(|| match &self.make {
                Make::Okm(h, okm) => h.expander_for_okm(okm),
                // `Built` expanders are set at construction.
                Make::Built => Box::new(InitialZero(self.len)),
            })
            .as_ref()
    }
}

impl HkdfExpander for QuicZero {
    fn expand_slice(&self, info: &[&[u8]], output: &mut [u8]) -> Result<(), OutputLengthError> {
        if quic_label(info) {
            return zero_slice(self.len, output);
        }
        self.real().expand_slice(info, output)
    }
    fn expand_block(&self, info: &[&[u8]]) -> OkmBlock {
        if quic_label(info) {
            return zero_block(self.len);
        }
        self.real().expand_block(info)
    }
    fn hash_len(&self) -> usize {
        self.len
    }
}

impl QuicKeysHkdf {
    fn built(&self, e: Box<dyn HkdfExpander>) -> Box<dyn HkdfExpander> {
        let real = OnceLock::new();
        let _ = real.set(e);
        Box::new(QuicZero {
            len: self.len,
            make: Make::Built,
            real,
        })
    }
}

impl Hkdf for QuicKeysHkdf {
    fn extract_from_zero_ikm(&self, salt: Option<&[u8]>) -> Box<dyn HkdfExpander> {
        self.built(self.inner.extract_from_zero_ikm(salt))
    }
    fn extract_from_secret(&self, salt: Option<&[u8]>, secret: &[u8]) -> Box<dyn HkdfExpander> {
        if salt.is_some_and(|s| INITIAL_SALTS.iter().any(|i| i[..] == *s)) {
            return Box::new(InitialZero(self.len));
        }
        self.built(self.inner.extract_from_secret(salt, secret))
    }
    fn expander_for_okm(&self, okm: &OkmBlock) -> Box<dyn HkdfExpander> {
        Box::new(QuicZero {
            len: self.len,
            make: Make::Okm(self.inner, okm.clone()),
            real: OnceLock::new(),
        })
    }
    fn hmac_sign(&self, key: &OkmBlock, message: &[u8]) -> hmac::Tag {
        self.inner.hmac_sign(key, message)
    }
}
