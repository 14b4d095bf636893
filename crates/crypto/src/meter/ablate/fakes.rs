//! Provider-level ablations: constant signatures, fixed key exchange on a
//! private code point, and a counter for random bytes.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::{
    ActiveKeyExchange, CompletedKeyExchange, CryptoProvider, GetRandomFailed, KeyProvider,
    SecureRandom, SharedSecret, SupportedKxGroup, WebPkiSupportedAlgorithms,
};
use rustls::pki_types::{
    AlgorithmIdentifier, InvalidSignature, PrivateKeyDer, SignatureVerificationAlgorithm,
};
use rustls::sign::{Signer, SigningKey};
use rustls::{Error, NamedGroup, ProtocolVersion, SignatureAlgorithm, SignatureScheme};

use crate::Result;

/// Every byte of an ablated signature.
pub(crate) const SIG_FILL: u8 = 0x5A;
/// Every byte of an ablated key share.
pub(crate) const KX_FILL: u8 = 0x4B;
/// Every byte of an ablated shared secret.
pub(crate) const SECRET_FILL: u8 = 0x53;

fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

fn is_const_sig(sig: &[u8]) -> bool {
    !sig.is_empty() && sig.iter().all(|b| *b == SIG_FILL)
}

// ------------------------------------------------------------------ sig

#[derive(Debug)]
struct ConstSigKeyProvider(&'static dyn KeyProvider);

pub(crate) fn const_sig_key_provider(inner: &'static dyn KeyProvider) -> &'static dyn KeyProvider {
    leak(ConstSigKeyProvider(inner))
}

/// The DER length of a typical ECDSA signature (r and s with a 50% chance
/// each of a leading zero): the median of 70..=72 for P-256, and so on.
fn ecdsa_len(s: SignatureScheme) -> Option<usize> {
    match s {
        SignatureScheme::ECDSA_NISTP256_SHA256 => Some(71),
        SignatureScheme::ECDSA_NISTP384_SHA384 => Some(103),
        SignatureScheme::ECDSA_NISTP521_SHA512 => Some(139),
        _ => None,
    }
}

impl KeyProvider for ConstSigKeyProvider {
    fn load_private_key(
        &self,
        key_der: PrivateKeyDer<'static>,
    ) -> std::result::Result<Arc<dyn SigningKey>, Error> {
        let real = self.0.load_private_key(key_der)?;
        // Learn each scheme's signature length once, at load time, so the
        // constant has the right size and no handshake signs for real.
        let mut lens = Vec::new();
        let schemes = crate::meter::SCHEMES.into_iter();
        for s in schemes.filter(|s| *s != SignatureScheme::ED448) {
            if let Some(signer) = real.choose_scheme(&[s]) {
                let len = match ecdsa_len(s) {
                    Some(l) => l,
                    None => signer.sign(b"tlslab sig ablation length probe")?.len(),
                };
                lens.push((s, len));
            }
        }
        Ok(Arc::new(ConstSigKey { real, lens }))
    }
}

#[derive(Debug)]
struct ConstSigKey {
    real: Arc<dyn SigningKey>,
    lens: Vec<(SignatureScheme, usize)>,
}

impl SigningKey for ConstSigKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        let scheme = self.real.choose_scheme(offered)?.scheme();
        let len = self.lens.iter().find(|(s, _)| *s == scheme)?.1;
        Some(Box::new(ConstSigner { scheme, len }))
    }
    fn public_key(&self) -> Option<rustls::pki_types::SubjectPublicKeyInfoDer<'_>> {
        self.real.public_key()
    }
    fn algorithm(&self) -> SignatureAlgorithm {
        self.real.algorithm()
    }
}

#[derive(Debug)]
struct ConstSigner {
    scheme: SignatureScheme,
    len: usize,
}

impl Signer for ConstSigner {
    fn sign(&self, _message: &[u8]) -> std::result::Result<Vec<u8>, Error> {
        Ok(vec![SIG_FILL; self.len])
    }
    fn scheme(&self) -> SignatureScheme {
        self.scheme
    }
}

/// Accepts exactly the constant signature; keeps the real algorithm's
/// identifiers so WebPKI still matches it to the certificate's key.
#[derive(Debug)]
struct ConstSigAlg(&'static dyn SignatureVerificationAlgorithm);

impl SignatureVerificationAlgorithm for ConstSigAlg {
    fn verify_signature(
        &self,
        _public_key: &[u8],
        _message: &[u8],
        signature: &[u8],
    ) -> std::result::Result<(), InvalidSignature> {
        if is_const_sig(signature) {
            Ok(())
        } else {
            Err(InvalidSignature)
        }
    }
    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        self.0.public_key_alg_id()
    }
    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        self.0.signature_alg_id()
    }
}

pub(crate) fn const_sig_algorithms(base: WebPkiSupportedAlgorithms) -> WebPkiSupportedAlgorithms {
    crate::meter::wrap::replace_verify_algs(base, |a| leak(ConstSigAlg(a)))
}

/// The client's verifier under the `sig` ablation. It does not check the
/// chain (those signatures are part of the ablated stage) and accepts a
/// handshake signature only if it is the ablation constant, checked here
/// and then through the provider's (metered) algorithms. Private: only
/// [`AblationSet::server_cert_verifier`](super::AblationSet::server_cert_verifier) builds it.
pub(crate) fn const_sig_verifier(provider: &Arc<CryptoProvider>) -> Arc<dyn ServerCertVerifier> {
    crate::pki::any_certificate_checked(provider, check_const_sig)
}

fn check_const_sig(sig: &[u8]) -> std::result::Result<(), Error> {
    if is_const_sig(sig) {
        Ok(())
    } else {
        Err(Error::General(
            "sig ablation: the server's signature is real, not the ablation constant; start the server with the same --ablate set (it must include sig)".into(),
        ))
    }
}

// ------------------------------------------------------------------ kx

/// The private-use code point standing in for `real`.
pub(crate) fn private_code_point(real: NamedGroup) -> NamedGroup {
    NamedGroup::from(0xFE00 | (u16::from(real) & 0xFF))
}

#[derive(Debug)]
struct FakeKx {
    name: NamedGroup,
    real: &'static dyn SupportedKxGroup,
    client_share: &'static [u8],
    server_share: &'static [u8],
    secret_len: usize,
}

fn kx_mismatch() -> Error {
    Error::General(
        "kx ablation: the peer's key share is not the fixed ablation share; start both sides with the same --ablate set (it must include kx)".into(),
    )
}

impl FakeKx {
    fn secret(&self) -> SharedSecret {
        SharedSecret::from(vec![SECRET_FILL; self.secret_len])
    }
}

impl SupportedKxGroup for FakeKx {
    fn start(&self) -> std::result::Result<Box<dyn ActiveKeyExchange>, Error> {
        Ok(Box::new(FakeActive(
            self.name,
            self.client_share,
            self.server_share,
            self.secret_len,
        )))
    }
    fn start_and_complete(
        &self,
        peer_pub_key: &[u8],
    ) -> std::result::Result<CompletedKeyExchange, Error> {
        if peer_pub_key != self.client_share {
            return Err(kx_mismatch());
        }
        Ok(CompletedKeyExchange {
            group: self.name,
            pub_key: self.server_share.to_vec(),
            secret: self.secret(),
        })
    }
    fn name(&self) -> NamedGroup {
        self.name
    }
    fn usable_for_version(&self, version: ProtocolVersion) -> bool {
        self.real.usable_for_version(version)
    }
}

struct FakeActive(NamedGroup, &'static [u8], &'static [u8], usize);

impl ActiveKeyExchange for FakeActive {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> std::result::Result<SharedSecret, Error> {
        // TLS 1.3 peers answer with the server share; TLS 1.2 servers use
        // `start` too, so their share is the client-sized one.
        if peer_pub_key != self.2 && peer_pub_key != self.1 {
            return Err(kx_mismatch());
        }
        Ok(SharedSecret::from(vec![SECRET_FILL; self.3]))
    }
    fn pub_key(&self) -> &[u8] {
        self.1
    }
    fn ffdhe_group(&self) -> Option<rustls::ffdhe_groups::FfdheGroup<'static>> {
        None
    }
    fn group(&self) -> NamedGroup {
        self.0
    }
}

/// A fake for each real group, with share and secret lengths measured once
/// from one real exchange.
pub(crate) fn fake_groups(
    real: &[&'static dyn SupportedKxGroup],
) -> Result<Vec<&'static dyn SupportedKxGroup>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for g in real {
        let name = private_code_point(g.name());
        if !seen.insert(u16::from(name)) {
            continue;
        }
        let client = g.start()?;
        let client_len = client.pub_key().len();
        let done = g.start_and_complete(client.pub_key())?;
        let f: &'static dyn SupportedKxGroup = leak(FakeKx {
            name,
            real: *g,
            client_share: vec![KX_FILL; client_len].leak(),
            server_share: vec![KX_FILL; done.pub_key.len()].leak(),
            secret_len: done.secret.secret_bytes().len(),
        });
        out.push(f);
    }
    Ok(out)
}

// ------------------------------------------------------------------ rng

/// Random bytes from a process-wide 64-bit counter, written big-endian, a
/// new value for each 8-byte chunk: cheap, never repeats within a process
/// (so session IDs stay unique), and obviously not random.
#[derive(Debug)]
struct CounterRandom(AtomicU64);

impl SecureRandom for CounterRandom {
    fn fill(&self, buf: &mut [u8]) -> std::result::Result<(), GetRandomFailed> {
        let chunks = buf.len().div_ceil(8) as u64;
        let mut c = self.0.fetch_add(chunks, Ordering::Relaxed);
        for chunk in buf.chunks_mut(8) {
            chunk.copy_from_slice(&c.to_be_bytes()[..chunk.len()]);
            c = c.wrapping_add(1);
        }
        Ok(())
    }
}

pub(crate) fn counter_random() -> &'static dyn SecureRandom {
    leak(CounterRandom(AtomicU64::new(1)))
}
