//! Suite-level ablations: NULL and cipher-only AEADs, constant hashes and
//! zero key derivation.

use aws_lc_rs::cipher::{AES_128, AES_256, EncryptingKey, EncryptionContext, UnboundCipherKey};
use aws_lc_rs::iv::FixedLength;
use rustls::crypto::CipherSuiteCommon;
use rustls::crypto::cipher::{
    AeadKey, InboundOpaqueMessage, InboundPlainMessage, Iv, KeyBlockShape, MessageDecrypter,
    MessageEncrypter, Nonce, OutboundOpaqueMessage, OutboundPlainMessage, PrefixedPayload,
    Tls12AeadAlgorithm, Tls13AeadAlgorithm, UnsupportedOperationError,
};
use rustls::crypto::tls13::{Hkdf, HkdfExpander, OkmBlock, OutputLengthError};
use rustls::crypto::{ActiveKeyExchange, hash, hmac, tls12};
use rustls::{
    ConnectionTrafficSecrets, ContentType, Error, ProtocolVersion, SupportedCipherSuite,
    Tls12CipherSuite, Tls13CipherSuite,
};

use super::quic::TAG_LEN;
use super::{Ablation, AblationSet};

/// The largest plaintext a record may carry.
const MAX_FRAGMENT: usize = 16384;
/// Every byte of an ablated digest.
pub(crate) const HASH_FILL: u8 = 0x48;

fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Null,
    CtrOnly,
}

fn mode(set: AblationSet) -> Option<Mode> {
    if set.contains(Ablation::Cipher) {
        Some(Mode::Null)
    } else if set.contains(Ablation::Mac) {
        Some(Mode::CtrOnly)
    } else {
        None
    }
}

fn is_aes_gcm(s: SupportedCipherSuite) -> bool {
    let name = format!("{:?}", s.suite());
    name.contains("AES") && name.contains("GCM")
}

/// The suite with the ablations of `set` that live in cipher suites, or
/// `None` if the suite cannot take them (ChaCha20 under `mac`).
pub(crate) fn ablate_suite(
    s: SupportedCipherSuite,
    set: AblationSet,
) -> Option<SupportedCipherSuite> {
    let m = mode(set);
    if m == Some(Mode::CtrOnly) && !is_aes_gcm(s) {
        return None;
    }
    if m.is_none()
        && !set.has_quic()
        && !set.contains(Ablation::Hash)
        && !set.contains(Ablation::Kdf)
        && !set.contains(Ablation::Mac)
    {
        return Some(s);
    }
    let common = |c: &CipherSuiteCommon| CipherSuiteCommon {
        suite: c.suite,
        hash_provider: if set.contains(Ablation::Hash) {
            leak(ConstHash(c.hash_provider))
        } else {
            c.hash_provider
        },
        confidentiality_limit: c.confidentiality_limit,
    };
    // The suite's AEAD, wrapped in `$wrap` (`Ablated13`, `Ablated12`) when
    // the record layer is ablated.
    macro_rules! ablated_aead {
        ($t:expr, $m:expr, $wrap:ident) => {
            $m.map_or($t.aead_alg, |mode| {
                leak($wrap {
                    inner: $t.aead_alg,
                    mode,
                })
            })
        };
    }
    Some(match s {
        SupportedCipherSuite::Tls13(t) => {
            let hkdf_provider: &'static dyn Hkdf = if set.contains(Ablation::Kdf) {
                leak(ZeroHkdf {
                    len: t.common.hash_provider.output_len(),
                })
            } else if set.contains(Ablation::Mac) {
                leak(ConstFinishedHkdf(t.hkdf_provider))
            } else {
                t.hkdf_provider
            };
            let hkdf_provider: &'static dyn Hkdf = if set.contains(Ablation::QuicKeys) {
                leak(super::quic::QuicKeysHkdf {
                    inner: hkdf_provider,
                    len: t.common.hash_provider.output_len(),
                })
            } else {
                hkdf_provider
            };
            // QUIC takes its keys from the suite's `quic` algorithm; the
            // TLS record layer (`cipher`, `mac`) is not used over QUIC.
            let quic = t.quic.map(|q| -> &'static dyn rustls::quic::Algorithm {
                if set.contains(Ablation::QuicPacket) || set.contains(Ablation::QuicHeader) {
                    leak(super::quic::AblatedQuic {
                        inner: q,
                        packet: set.contains(Ablation::QuicPacket),
                        header: set.contains(Ablation::QuicHeader),
                        limits: super::quic::limits(is_aes_gcm(s)),
                    })
                } else {
                    q
                }
            });
            SupportedCipherSuite::Tls13(leak(Tls13CipherSuite {
                common: common(&t.common),
                hkdf_provider,
                aead_alg: ablated_aead!(t, m, Ablated13),
                quic,
            }))
        }
        SupportedCipherSuite::Tls12(t) => {
            let prf_provider: &'static dyn tls12::Prf = if set.contains(Ablation::Kdf) {
                leak(ZeroPrf)
            } else {
                t.prf_provider
            };
            SupportedCipherSuite::Tls12(leak(Tls12CipherSuite {
                common: common(&t.common),
                prf_provider,
                kx: t.kx,
                sign: t.sign,
                aead_alg: ablated_aead!(t, m, Ablated12),
            }))
        }
    })
}

// ------------------------------------------------------------ record layer

/// AES-CTR keyed like the GCM suite, starting at the block GCM uses for
/// the first byte of data (counter 2), so the ciphertext is GCM's minus
/// the tag.
struct Ctr(EncryptingKey);

impl Ctr {
    fn new(key: &AeadKey) -> Option<Ctr> {
        let alg = match key.as_ref().len() {
            16 => &AES_128,
            32 => &AES_256,
            _ => return None,
        };
        let k = UnboundCipherKey::new(alg, key.as_ref()).ok()?;
        EncryptingKey::ctr(k).ok().map(Ctr)
    }

    fn apply(&self, nonce: &Nonce, data: &mut [u8]) -> Result<(), Error> {
        let mut block = [0u8; 16];
        block[..12].copy_from_slice(&nonce.0);
        block[15] = 2;
        self.0
            .less_safe_encrypt(data, EncryptionContext::Iv128(FixedLength::from(block)))
            .map(|_| ())
            .map_err(|_| Error::EncryptError)
    }
}

enum Body {
    Null,
    Ctr(Option<Box<Ctr>>),
}

impl Body {
    fn new(mode: Mode, key: &AeadKey) -> Body {
        match mode {
            Mode::Null => Body::Null,
            Mode::CtrOnly => Body::Ctr(Ctr::new(key).map(Box::new)),
        }
    }

    fn apply(&self, nonce: &Nonce, data: &mut [u8]) -> Result<(), Error> {
        match self {
            Body::Null => Ok(()),
            Body::Ctr(Some(c)) => c.apply(nonce, data),
            Body::Ctr(None) => Err(Error::General(
                "mac ablation: key is not an AES key; use an AES-GCM suite".into(),
            )),
        }
    }
}

fn tag_ok(tag: &[u8]) -> Result<(), Error> {
    if tag.iter().all(|b| *b == 0) {
        Ok(())
    } else {
        Err(Error::General(
            "cipher/mac ablation: the record's tag is not the ablation's zero tag; the peer encrypts for real, so start both sides with the same --ablate set".into(),
        ))
    }
}

struct Ablated13 {
    inner: &'static dyn Tls13AeadAlgorithm,
    mode: Mode,
}

impl Tls13AeadAlgorithm for Ablated13 {
    fn encrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageEncrypter> {
        Box::new(Enc {
            body: Body::new(self.mode, &key),
            iv,
            layout: Layout::Tls13,
        })
    }
    fn decrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageDecrypter> {
        Box::new(Dec {
            body: Body::new(self.mode, &key),
            iv,
            layout: Layout::Tls13,
        })
    }
    fn key_len(&self) -> usize {
        self.inner.key_len()
    }
    fn extract_keys(
        &self,
        _key: AeadKey,
        _iv: Iv,
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        Err(UnsupportedOperationError)
    }
}

/// How a record lays out around its encrypted body.
#[derive(Clone, Copy)]
enum Layout {
    /// TLS 1.3: the content type is encrypted after the data, and the
    /// record goes out as application data.
    Tls13,
    /// TLS 1.2: `explicit` bytes of the nonce lead the record in clear.
    Tls12 { explicit: usize },
}

impl Layout {
    /// The bytes a record carries besides the data and the tag: the
    /// encrypted content type (1.3) or the explicit nonce (1.2).
    fn overhead(self) -> usize {
        match self {
            Layout::Tls13 => 1,
            Layout::Tls12 { explicit } => explicit,
        }
    }
}

/// The ablated record encrypter of either version: the body under
/// `body` and a zero tag in place of the AEAD's.
struct Enc {
    body: Body,
    iv: Iv,
    layout: Layout,
}

impl MessageEncrypter for Enc {
    fn encrypt(
        &mut self,
        msg: OutboundPlainMessage<'_>,
        seq: u64,
    ) -> Result<OutboundOpaqueMessage, Error> {
        let total = self.encrypted_payload_len(msg.payload.len());
        let nonce = Nonce::new(&self.iv, seq);
        let mut payload = PrefixedPayload::with_capacity(total);
        let (typ, version) = match self.layout {
            Layout::Tls13 => {
                payload.extend_from_chunks(&msg.payload);
                payload.extend_from_slice(&msg.typ.to_array());
                self.body.apply(&nonce, payload.as_mut())?;
                (ContentType::ApplicationData, ProtocolVersion::TLSv1_2)
            }
            Layout::Tls12 { explicit } => {
                payload.extend_from_slice(&nonce.0[12 - explicit..]);
                payload.extend_from_chunks(&msg.payload);
                self.body.apply(&nonce, &mut payload.as_mut()[explicit..])?;
                (msg.typ, msg.version)
            }
        };
        payload.extend_from_slice(&[0u8; TAG_LEN]);
        Ok(OutboundOpaqueMessage::new(typ, version, payload))
    }
    fn encrypted_payload_len(&self, payload_len: usize) -> usize {
        payload_len + self.layout.overhead() + TAG_LEN
    }
}

struct Ablated12 {
    inner: &'static dyn Tls12AeadAlgorithm,
    mode: Mode,
}

fn full_iv(iv: &[u8], extra: &[u8]) -> Iv {
    let mut b = [0u8; 12];
    let joined: Vec<u8> = iv.iter().chain(extra.iter()).copied().collect();
    if joined.len() == 12 {
        b.copy_from_slice(&joined);
    }
    Iv::new(b)
}

impl Tls12AeadAlgorithm for Ablated12 {
    fn encrypter(&self, key: AeadKey, iv: &[u8], extra: &[u8]) -> Box<dyn MessageEncrypter> {
        Box::new(Enc {
            body: Body::new(self.mode, &key),
            iv: full_iv(iv, extra),
            layout: Layout::Tls12 {
                explicit: self.inner.key_block_shape().explicit_nonce_len,
            },
        })
    }
    fn decrypter(&self, key: AeadKey, iv: &[u8]) -> Box<dyn MessageDecrypter> {
        let explicit = self.inner.key_block_shape().explicit_nonce_len;
        Box::new(Dec {
            body: Body::new(self.mode, &key),
            iv: full_iv(iv, &[0u8; 12][..explicit]),
            layout: Layout::Tls12 { explicit },
        })
    }
    fn key_block_shape(&self) -> KeyBlockShape {
        self.inner.key_block_shape()
    }
    fn extract_keys(
        &self,
        _key: AeadKey,
        _iv: &[u8],
        _explicit: &[u8],
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        Err(UnsupportedOperationError)
    }
}

/// The ablated record decrypter of either version: it checks the zero
/// tag and undoes `body`. `iv` is the TLS 1.2 salt followed by zeros where
/// the record carries an explicit nonce.
struct Dec {
    body: Body,
    iv: Iv,
    layout: Layout,
}

impl MessageDecrypter for Dec {
    fn decrypt<'a>(
        &mut self,
        mut msg: InboundOpaqueMessage<'a>,
        seq: u64,
    ) -> Result<InboundPlainMessage<'a>, Error> {
        let len = msg.payload.len();
        if len < self.layout.overhead() + TAG_LEN {
            return Err(Error::DecryptError);
        }
        if let Layout::Tls12 { explicit } = self.layout
            && len - explicit - TAG_LEN > MAX_FRAGMENT
        {
            return Err(Error::PeerSentOversizedRecord);
        }
        tag_ok(&msg.payload[len - TAG_LEN..])?;
        let end = len - TAG_LEN;
        let (start, nonce) = match self.layout {
            Layout::Tls12 { explicit } if explicit > 0 => {
                let mut n = [0u8; 12];
                n.copy_from_slice(self.iv.as_ref());
                n[12 - explicit..].copy_from_slice(&msg.payload[..explicit]);
                (explicit, Nonce(n))
            }
            _ => (0, Nonce::new(&self.iv, seq)),
        };
        self.body.apply(&nonce, &mut msg.payload[start..end])?;
        match self.layout {
            Layout::Tls13 => {
                msg.payload.truncate(end);
                msg.into_tls13_unpadded_message()
            }
            Layout::Tls12 { .. } => Ok(msg.into_plain_message_range(start..end)),
        }
    }
}

// ------------------------------------------------------------ hash

struct ConstHash(&'static dyn hash::Hash);

impl hash::Hash for ConstHash {
    fn start(&self) -> Box<dyn hash::Context> {
        Box::new(ConstContext(self.0.output_len()))
    }
    fn hash(&self, _data: &[u8]) -> hash::Output {
        const_digest(self.0.output_len())
    }
    fn output_len(&self) -> usize {
        self.0.output_len()
    }
    fn algorithm(&self) -> hash::HashAlgorithm {
        self.0.algorithm()
    }
}

fn const_digest(len: usize) -> hash::Output {
    hash::Output::new(&[HASH_FILL; 64][..len.min(64)])
}

struct ConstContext(usize);

impl hash::Context for ConstContext {
    fn fork_finish(&self) -> hash::Output {
        const_digest(self.0)
    }
    fn fork(&self) -> Box<dyn hash::Context> {
        Box::new(ConstContext(self.0))
    }
    fn finish(self: Box<Self>) -> hash::Output {
        const_digest(self.0)
    }
    fn update(&mut self, _data: &[u8]) {}
}

// ------------------------------------------------------------ kdf

/// HKDF whose Finished HMAC is constant (the handshake half of `mac`).
struct ConstFinishedHkdf(&'static dyn Hkdf);

impl Hkdf for ConstFinishedHkdf {
    fn extract_from_zero_ikm(&self, salt: Option<&[u8]>) -> Box<dyn HkdfExpander> {
        self.0.extract_from_zero_ikm(salt)
    }
    fn extract_from_secret(&self, salt: Option<&[u8]>, secret: &[u8]) -> Box<dyn HkdfExpander> {
        self.0.extract_from_secret(salt, secret)
    }
    fn expander_for_okm(&self, okm: &OkmBlock) -> Box<dyn HkdfExpander> {
        self.0.expander_for_okm(okm)
    }
    fn hmac_sign(&self, key: &OkmBlock, _message: &[u8]) -> hmac::Tag {
        hmac::Tag::new(&[0u8; 64][..key.as_ref().len().min(64)])
    }
}

/// HKDF that derives all-zero secrets (the `kdf` ablation).
struct ZeroHkdf {
    len: usize,
}

struct ZeroExpander(usize);

impl HkdfExpander for ZeroExpander {
    fn expand_slice(&self, _info: &[&[u8]], output: &mut [u8]) -> Result<(), OutputLengthError> {
        if output.len() > 255 * self.0 {
            return Err(OutputLengthError);
        }
        output.fill(0);
        Ok(())
    }
    fn expand_block(&self, _info: &[&[u8]]) -> OkmBlock {
        OkmBlock::new(&[0u8; 64][..self.0.min(64)])
    }
    fn hash_len(&self) -> usize {
        self.0
    }
}

impl Hkdf for ZeroHkdf {
    fn extract_from_zero_ikm(&self, _salt: Option<&[u8]>) -> Box<dyn HkdfExpander> {
        Box::new(ZeroExpander(self.len))
    }
    fn extract_from_secret(&self, _salt: Option<&[u8]>, _secret: &[u8]) -> Box<dyn HkdfExpander> {
        Box::new(ZeroExpander(self.len))
    }
    fn expander_for_okm(&self, _okm: &OkmBlock) -> Box<dyn HkdfExpander> {
        Box::new(ZeroExpander(self.len))
    }
    fn hmac_sign(&self, _key: &OkmBlock, _message: &[u8]) -> hmac::Tag {
        hmac::Tag::new(&[0u8; 64][..self.len.min(64)])
    }
}

/// TLS 1.2 PRF that outputs zeros (the `kdf` ablation). It still completes
/// the key exchange, so a kx mismatch is still detected.
struct ZeroPrf;

impl tls12::Prf for ZeroPrf {
    fn for_key_exchange(
        &self,
        output: &mut [u8; 48],
        kx: Box<dyn ActiveKeyExchange>,
        peer_pub_key: &[u8],
        _label: &[u8],
        _seed: &[u8],
    ) -> Result<(), Error> {
        kx.complete_for_tls_version(peer_pub_key, &rustls::version::TLS12)?;
        output.fill(0);
        Ok(())
    }
    fn for_secret(&self, output: &mut [u8], _secret: &[u8], _label: &[u8], _seed: &[u8]) {
        output.fill(0);
    }
}
