//! Wrappers that make every provider component record into a [`Meter`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rustls::crypto::cipher::{
    AeadKey, InboundOpaqueMessage, InboundPlainMessage, Iv, KeyBlockShape, MessageDecrypter,
    MessageEncrypter, OutboundOpaqueMessage, OutboundPlainMessage, Tls12AeadAlgorithm,
    Tls13AeadAlgorithm, UnsupportedOperationError,
};
use rustls::crypto::tls13::{Hkdf, HkdfExpander, OkmBlock, OutputLengthError};
use rustls::crypto::{
    ActiveKeyExchange, CipherSuiteCommon, CompletedKeyExchange, CryptoProvider, GetRandomFailed,
    KeyProvider, SecureRandom, SharedSecret, SupportedKxGroup, WebPkiSupportedAlgorithms, hash,
    hmac, tls12,
};
use rustls::pki_types::{
    AlgorithmIdentifier, InvalidSignature, PrivateKeyDer, SignatureVerificationAlgorithm,
};
use rustls::sign::{Signer, SigningKey};
use rustls::{
    ConnectionTrafficSecrets, ContentType, Error, NamedGroup, ProtocolVersion, SignatureAlgorithm,
    SignatureScheme, SupportedCipherSuite, SupportedProtocolVersion, Tls12CipherSuite,
    Tls13CipherSuite,
};

use super::{Meter, Op, group_label, scheme_label};

fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

/// Wraps every component of `base` so that it records calls, nanoseconds
/// and bytes into `meter`: cipher suites (hash, HKDF or PRF, AEAD with
/// handshake and application records counted apart), key-exchange groups,
/// the key provider (so signing keys it loads are metered), signature
/// verification algorithms and the random source.
///
/// rustls wants `&'static` components, so each call leaks one small wrapper
/// per suite, group and algorithm (a few KiB): build the metered provider
/// once per process side and share the `Arc`, not once per connection.
pub fn metered(base: CryptoProvider, meter: Arc<Meter>) -> CryptoProvider {
    let cipher_suites = base
        .cipher_suites
        .iter()
        .map(|s| wrap_suite(*s, &meter))
        .collect();
    let kx_groups = base
        .kx_groups
        .iter()
        .map(|g| {
            let w: &'static dyn SupportedKxGroup = leak(MeteredKxGroup {
                inner: *g,
                meter: meter.clone(),
            });
            w
        })
        .collect();
    CryptoProvider {
        cipher_suites,
        kx_groups,
        signature_verification_algorithms: wrap_verify_algs(
            base.signature_verification_algorithms,
            &meter,
        ),
        secure_random: leak(MeteredRandom {
            inner: base.secure_random,
            meter: meter.clone(),
        }),
        key_provider: leak(MeteredKeyProvider {
            inner: base.key_provider,
            meter,
        }),
    }
}

fn wrap_suite(s: SupportedCipherSuite, meter: &Arc<Meter>) -> SupportedCipherSuite {
    let common = |c: &CipherSuiteCommon| CipherSuiteCommon {
        suite: c.suite,
        hash_provider: leak(MeteredHash {
            inner: c.hash_provider,
            meter: meter.clone(),
        }),
        confidentiality_limit: c.confidentiality_limit,
    };
    match s {
        SupportedCipherSuite::Tls13(t) => SupportedCipherSuite::Tls13(leak(Tls13CipherSuite {
            common: common(&t.common),
            hkdf_provider: leak(MeteredHkdf {
                inner: t.hkdf_provider,
                meter: meter.clone(),
            }),
            aead_alg: leak(MeteredAead {
                inner: t.aead_alg,
                meter: meter.clone(),
            }),
            quic: t.quic.map(|q| super::quic::metered(q, meter)),
        })),
        SupportedCipherSuite::Tls12(t) => SupportedCipherSuite::Tls12(leak(Tls12CipherSuite {
            common: common(&t.common),
            prf_provider: leak(MeteredPrf {
                inner: t.prf_provider,
                meter: meter.clone(),
            }),
            kx: t.kx,
            sign: t.sign,
            aead_alg: leak(MeteredAead {
                inner: t.aead_alg,
                meter: meter.clone(),
            }),
        })),
    }
}

/// A wrapper whose methods time `inner`'s and record them into `meter`.
macro_rules! metered {
    ($(#[$a:meta])* struct $name:ident($inner:ty);) => {
        $(#[$a])*
        struct $name {
            inner: $inner,
            meter: Arc<Meter>,
        }
    };
}

// ---------------------------------------------------------------- hash

metered! { struct MeteredHash(&'static dyn hash::Hash); }

impl hash::Hash for MeteredHash {
    fn start(&self) -> Box<dyn hash::Context> {
        Box::new(MeteredHashContext {
            inner: self.inner.start(),
            meter: self.meter.clone(),
        })
    }
    fn hash(&self, data: &[u8]) -> hash::Output {
        let t = Instant::now();
        let out = self.inner.hash(data);
        self.meter.record(Op::Hash, 0, data.len(), t);
        out
    }
    fn output_len(&self) -> usize {
        self.inner.output_len()
    }
    fn algorithm(&self) -> rustls::crypto::hash::HashAlgorithm {
        self.inner.algorithm()
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

metered! { struct MeteredHashContext(Box<dyn hash::Context>); }

impl hash::Context for MeteredHashContext {
    fn fork_finish(&self) -> hash::Output {
        let t = Instant::now();
        let out = self.inner.fork_finish();
        self.meter.record(Op::Hash, 0, 0, t);
        out
    }
    fn fork(&self) -> Box<dyn hash::Context> {
        Box::new(MeteredHashContext {
            inner: self.inner.fork(),
            meter: self.meter.clone(),
        })
    }
    fn finish(self: Box<Self>) -> hash::Output {
        let t = Instant::now();
        let out = self.inner.finish();
        self.meter.record(Op::Hash, 0, 0, t);
        out
    }
    fn update(&mut self, data: &[u8]) {
        let t = Instant::now();
        self.inner.update(data);
        self.meter.record(Op::Hash, 0, data.len(), t);
    }
}

// ---------------------------------------------------------------- hkdf

metered! { struct MeteredHkdf(&'static dyn Hkdf); }

impl MeteredHkdf {
    fn expander(&self, inner: Box<dyn HkdfExpander>) -> Box<dyn HkdfExpander> {
        Box::new(MeteredExpander {
            inner,
            meter: self.meter.clone(),
        })
    }
}

impl Hkdf for MeteredHkdf {
    fn extract_from_zero_ikm(&self, salt: Option<&[u8]>) -> Box<dyn HkdfExpander> {
        let t = Instant::now();
        let e = self.inner.extract_from_zero_ikm(salt);
        self.meter.record(Op::Extract, 0, 0, t);
        self.expander(e)
    }
    fn extract_from_secret(&self, salt: Option<&[u8]>, secret: &[u8]) -> Box<dyn HkdfExpander> {
        let t = Instant::now();
        let e = self.inner.extract_from_secret(salt, secret);
        self.meter.record(Op::Extract, 0, secret.len(), t);
        self.expander(e)
    }
    // `extract_from_kx_shared_secret` keeps its default, which completes the
    // (metered) key exchange and then calls our `extract_from_secret`, so
    // the two are counted apart.
    fn expander_for_okm(&self, okm: &OkmBlock) -> Box<dyn HkdfExpander> {
        self.expander(self.inner.expander_for_okm(okm))
    }
    fn hmac_sign(&self, key: &OkmBlock, message: &[u8]) -> hmac::Tag {
        let t = Instant::now();
        let tag = self.inner.hmac_sign(key, message);
        self.meter.record(Op::Hmac, 0, message.len(), t);
        tag
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

metered! { struct MeteredExpander(Box<dyn HkdfExpander>); }

impl HkdfExpander for MeteredExpander {
    fn expand_slice(&self, info: &[&[u8]], output: &mut [u8]) -> Result<(), OutputLengthError> {
        let t = Instant::now();
        let r = self.inner.expand_slice(info, output);
        self.meter.record(Op::Expand, 0, output.len(), t);
        r
    }
    fn expand_block(&self, info: &[&[u8]]) -> OkmBlock {
        let t = Instant::now();
        let b = self.inner.expand_block(info);
        self.meter.record(Op::Expand, 0, b.as_ref().len(), t);
        b
    }
    fn hash_len(&self) -> usize {
        self.inner.hash_len()
    }
}

// ---------------------------------------------------------------- prf

metered! { struct MeteredPrf(&'static dyn tls12::Prf); }

/// A key exchange that has already been completed, so the PRF's own timing
/// does not include the (separately metered) key-exchange completion.
struct Completed {
    secret: SharedSecret,
    pub_key: Vec<u8>,
    group: NamedGroup,
}

impl ActiveKeyExchange for Completed {
    fn complete(self: Box<Self>, _peer: &[u8]) -> Result<SharedSecret, Error> {
        Ok(self.secret)
    }
    fn complete_for_tls_version(
        self: Box<Self>,
        _peer: &[u8],
        _v: &SupportedProtocolVersion,
    ) -> Result<SharedSecret, Error> {
        // Already completed (and zero-stripped if DHE) for this version.
        Ok(self.secret)
    }
    fn pub_key(&self) -> &[u8] {
        &self.pub_key
    }
    fn group(&self) -> NamedGroup {
        self.group
    }
}

impl tls12::Prf for MeteredPrf {
    fn for_key_exchange(
        &self,
        output: &mut [u8; 48],
        kx: Box<dyn ActiveKeyExchange>,
        peer_pub_key: &[u8],
        label: &[u8],
        seed: &[u8],
    ) -> Result<(), Error> {
        let pub_key = kx.pub_key().to_vec();
        let group = kx.group();
        let secret = kx.complete_for_tls_version(peer_pub_key, &rustls::version::TLS12)?;
        let done = Box::new(Completed {
            secret,
            pub_key,
            group,
        });
        let t = Instant::now();
        let r = self
            .inner
            .for_key_exchange(output, done, peer_pub_key, label, seed);
        self.meter.record(Op::Extract, 0, output.len(), t);
        r
    }
    fn for_secret(&self, output: &mut [u8], secret: &[u8], label: &[u8], seed: &[u8]) {
        let t = Instant::now();
        self.inner.for_secret(output, secret, label, seed);
        self.meter.record(Op::Expand, 0, output.len(), t);
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

// ---------------------------------------------------------------- aead

/// A TLS 1.3 or 1.2 AEAD whose encrypters and decrypters are metered.
struct MeteredAead<A: ?Sized + 'static> {
    inner: &'static A,
    meter: Arc<Meter>,
}

impl<A: ?Sized> MeteredAead<A> {
    fn wrap_encrypter(&self, inner: Box<dyn MessageEncrypter>) -> Box<dyn MessageEncrypter> {
        Box::new(MeteredEncrypter {
            inner,
            meter: self.meter.clone(),
        })
    }
    fn wrap_decrypter(&self, inner: Box<dyn MessageDecrypter>) -> Box<dyn MessageDecrypter> {
        Box::new(MeteredDecrypter {
            inner,
            meter: self.meter.clone(),
        })
    }
}

impl Tls13AeadAlgorithm for MeteredAead<dyn Tls13AeadAlgorithm> {
    fn encrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageEncrypter> {
        self.wrap_encrypter(self.inner.encrypter(key, iv))
    }
    fn decrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageDecrypter> {
        self.wrap_decrypter(self.inner.decrypter(key, iv))
    }
    fn key_len(&self) -> usize {
        self.inner.key_len()
    }
    fn extract_keys(
        &self,
        key: AeadKey,
        iv: Iv,
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        self.inner.extract_keys(key, iv)
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

impl Tls12AeadAlgorithm for MeteredAead<dyn Tls12AeadAlgorithm> {
    fn encrypter(&self, key: AeadKey, iv: &[u8], extra: &[u8]) -> Box<dyn MessageEncrypter> {
        self.wrap_encrypter(self.inner.encrypter(key, iv, extra))
    }
    fn decrypter(&self, key: AeadKey, iv: &[u8]) -> Box<dyn MessageDecrypter> {
        self.wrap_decrypter(self.inner.decrypter(key, iv))
    }
    fn key_block_shape(&self) -> KeyBlockShape {
        self.inner.key_block_shape()
    }
    fn extract_keys(
        &self,
        key: AeadKey,
        iv: &[u8],
        explicit: &[u8],
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        self.inner.extract_keys(key, iv, explicit)
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

metered! { struct MeteredEncrypter(Box<dyn MessageEncrypter>); }

impl MessageEncrypter for MeteredEncrypter {
    fn encrypt(
        &mut self,
        msg: OutboundPlainMessage<'_>,
        seq: u64,
    ) -> Result<OutboundOpaqueMessage, Error> {
        let op = if msg.typ == ContentType::ApplicationData {
            Op::SealApplication
        } else {
            Op::SealHandshake
        };
        let len = msg.payload.len();
        let t = Instant::now();
        let r = self.inner.encrypt(msg, seq);
        self.meter.record(op, 0, len, t);
        r
    }
    fn encrypted_payload_len(&self, payload_len: usize) -> usize {
        self.inner.encrypted_payload_len(payload_len)
    }
}

metered! { struct MeteredDecrypter(Box<dyn MessageDecrypter>); }

impl MessageDecrypter for MeteredDecrypter {
    fn decrypt<'a>(
        &mut self,
        msg: InboundOpaqueMessage<'a>,
        seq: u64,
    ) -> Result<InboundPlainMessage<'a>, Error> {
        let len = msg.payload.len();
        let t = Instant::now();
        let r = self.inner.decrypt(msg, seq);
        // TLS 1.3 hides the real type until decryption; use the plain type.
        let op = match &r {
            Ok(p) if p.typ == ContentType::ApplicationData => Op::OpenApplication,
            _ => Op::OpenHandshake,
        };
        self.meter.record(op, 0, len, t);
        r
    }
}

// ---------------------------------------------------------------- kx

metered! { #[derive(Debug)] struct MeteredKxGroup(&'static dyn SupportedKxGroup); }

impl SupportedKxGroup for MeteredKxGroup {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        let label = group_label(self.inner.name());
        let t = Instant::now();
        let inner = self.inner.start()?;
        self.meter
            .record(Op::KxStart, label, inner.pub_key().len(), t);
        Ok(Box::new(MeteredActiveKx {
            inner,
            label,
            meter: self.meter.clone(),
        }))
    }
    fn start_and_complete(&self, peer_pub_key: &[u8]) -> Result<CompletedKeyExchange, Error> {
        let label = group_label(self.inner.name());
        let t = Instant::now();
        let r = self.inner.start_and_complete(peer_pub_key);
        self.meter
            .record(Op::KxStartAndComplete, label, peer_pub_key.len(), t);
        r
    }
    fn ffdhe_group(&self) -> Option<rustls::ffdhe_groups::FfdheGroup<'static>> {
        self.inner.ffdhe_group()
    }
    fn name(&self) -> NamedGroup {
        self.inner.name()
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
    fn usable_for_version(&self, version: ProtocolVersion) -> bool {
        self.inner.usable_for_version(version)
    }
}

struct MeteredActiveKx {
    inner: Box<dyn ActiveKeyExchange>,
    label: u8,
    meter: Arc<Meter>,
}

impl ActiveKeyExchange for MeteredActiveKx {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> Result<SharedSecret, Error> {
        let t = Instant::now();
        let r = self.inner.complete(peer_pub_key);
        self.meter
            .record(Op::KxComplete, self.label, peer_pub_key.len(), t);
        r
    }
    fn complete_for_tls_version(
        self: Box<Self>,
        peer_pub_key: &[u8],
        v: &SupportedProtocolVersion,
    ) -> Result<SharedSecret, Error> {
        let t = Instant::now();
        let r = self.inner.complete_for_tls_version(peer_pub_key, v);
        self.meter
            .record(Op::KxComplete, self.label, peer_pub_key.len(), t);
        r
    }
    fn hybrid_component(&self) -> Option<(NamedGroup, &[u8])> {
        self.inner.hybrid_component()
    }
    fn complete_hybrid_component(
        self: Box<Self>,
        peer_pub_key: &[u8],
    ) -> Result<SharedSecret, Error> {
        let label = self
            .inner
            .hybrid_component()
            .map(|(g, _)| group_label(g))
            .unwrap_or(self.label);
        let t = Instant::now();
        let r = self.inner.complete_hybrid_component(peer_pub_key);
        self.meter
            .record(Op::KxComplete, label, peer_pub_key.len(), t);
        r
    }
    fn pub_key(&self) -> &[u8] {
        self.inner.pub_key()
    }
    fn ffdhe_group(&self) -> Option<rustls::ffdhe_groups::FfdheGroup<'static>> {
        self.inner.ffdhe_group()
    }
    fn group(&self) -> NamedGroup {
        self.inner.group()
    }
}

// ---------------------------------------------------------------- random

metered! { #[derive(Debug)] struct MeteredRandom(&'static dyn SecureRandom); }

impl SecureRandom for MeteredRandom {
    fn fill(&self, buf: &mut [u8]) -> Result<(), GetRandomFailed> {
        let t = Instant::now();
        let r = self.inner.fill(buf);
        self.meter.record(Op::Random, 0, buf.len(), t);
        r
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

// ---------------------------------------------------------------- signing

metered! { #[derive(Debug)] struct MeteredKeyProvider(&'static dyn KeyProvider); }

impl KeyProvider for MeteredKeyProvider {
    fn load_private_key(
        &self,
        key_der: PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn SigningKey>, Error> {
        Ok(Arc::new(MeteredSigningKey {
            inner: self.inner.load_private_key(key_der)?,
            meter: self.meter.clone(),
        }))
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

/// Wraps a signing key so the signers it hands out are metered.
#[derive(Debug)]
pub(crate) struct MeteredSigningKey {
    pub(crate) inner: Arc<dyn SigningKey>,
    pub(crate) meter: Arc<Meter>,
}

impl SigningKey for MeteredSigningKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        let inner = self.inner.choose_scheme(offered)?;
        Some(Box::new(MeteredSigner {
            inner,
            meter: self.meter.clone(),
        }))
    }
    fn public_key(&self) -> Option<rustls::pki_types::SubjectPublicKeyInfoDer<'_>> {
        self.inner.public_key()
    }
    fn algorithm(&self) -> SignatureAlgorithm {
        self.inner.algorithm()
    }
}

metered! { #[derive(Debug)] struct MeteredSigner(Box<dyn Signer>); }

impl Signer for MeteredSigner {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        let t = Instant::now();
        let r = self.inner.sign(message);
        self.meter.record(
            Op::Sign,
            scheme_label(self.inner.scheme()),
            message.len(),
            t,
        );
        r
    }
    fn scheme(&self) -> SignatureScheme {
        self.inner.scheme()
    }
}

// ---------------------------------------------------------------- verify

#[derive(Debug)]
struct MeteredVerify {
    inner: &'static dyn SignatureVerificationAlgorithm,
    label: u8,
    meter: Arc<Meter>,
}

impl SignatureVerificationAlgorithm for MeteredVerify {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        let t = Instant::now();
        let r = self.inner.verify_signature(public_key, message, signature);
        self.meter.record(Op::Verify, self.label, message.len(), t);
        r
    }
    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        self.inner.public_key_alg_id()
    }
    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        self.inner.signature_alg_id()
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

type AlgPtr = *const ();

fn ptr(a: &'static dyn SignatureVerificationAlgorithm) -> AlgPtr {
    a as *const dyn SignatureVerificationAlgorithm as *const ()
}

/// Rebuilds both tables of `base` with each distinct verification algorithm
/// replaced once by `make(algorithm)`; an algorithm listed under several
/// schemes maps to the same replacement. Replacements are `'static` (leaked)
/// because rustls's tables hold `&'static` references.
pub(crate) fn replace_verify_algs(
    base: WebPkiSupportedAlgorithms,
    mut make: impl FnMut(
        &'static dyn SignatureVerificationAlgorithm,
    ) -> &'static dyn SignatureVerificationAlgorithm,
) -> WebPkiSupportedAlgorithms {
    let mut done: HashMap<AlgPtr, &'static dyn SignatureVerificationAlgorithm> = HashMap::new();
    let mut replace = |a: &'static dyn SignatureVerificationAlgorithm| {
        *done.entry(ptr(a)).or_insert_with(|| make(a))
    };
    let all: Vec<&'static dyn SignatureVerificationAlgorithm> =
        base.all.iter().map(|a| replace(*a)).collect();
    let mapping: Vec<(
        SignatureScheme,
        &'static [&'static dyn SignatureVerificationAlgorithm],
    )> = base
        .mapping
        .iter()
        .map(|(s, algs)| {
            let v: Vec<_> = algs.iter().map(|a| replace(*a)).collect();
            let v: &'static [&'static dyn SignatureVerificationAlgorithm] = v.leak();
            (*s, v)
        })
        .collect();
    WebPkiSupportedAlgorithms {
        all: all.leak(),
        mapping: mapping.leak(),
    }
}

/// Wraps each distinct verification algorithm once, labelled with the first
/// TLS scheme that maps to it (or "other" for chain-only algorithms such as
/// ECDSA P-256 with SHA-384), and rebuilds both tables from the wrappers.
pub(crate) fn wrap_verify_algs(
    base: WebPkiSupportedAlgorithms,
    meter: &Arc<Meter>,
) -> WebPkiSupportedAlgorithms {
    let mut label_of: HashMap<AlgPtr, u8> = HashMap::new();
    for (scheme, algs) in base.mapping {
        for a in algs.iter() {
            label_of.entry(ptr(*a)).or_insert(scheme_label(*scheme));
        }
    }
    replace_verify_algs(base, |a| {
        leak(MeteredVerify {
            inner: a,
            label: label_of.get(&ptr(a)).copied().unwrap_or(u8::MAX),
            meter: meter.clone(),
        })
    })
}
