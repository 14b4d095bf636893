//! Ablations: replace one TLS stage at a time with a no-op that keeps every
//! message the same size, so the throughput gained measures that stage's
//! cost (seed 001: cost fraction = 1 − 1/speedup). Apply [`ablated`] to
//! the base provider *before* [`metered`](super::metered), so the meter
//! still counts the (now free) calls.
//!
//! Both sides must use the same set. A mismatch fails the handshake with a
//! message naming `--ablate`; it never hangs.
//!
//! | name     | replaces                                                      |
//! |----------|---------------------------------------------------------------|
//! | `sig`    | signing and verifying: a constant signature of the real length, accepted by a verifier only [`AblationSet::server_cert_verifier`] builds |
//! | `kx`     | key exchange: a fixed share and secret on a private-use code point (0xFE00 \| low byte of the real group) |
//! | `cipher` | the AEAD: a NULL AEAD that copies the data and appends a zero tag of the real size |
//! | `mac`    | the AEAD's authentication: AES-CTR with the GCM key stream and a zero tag (cipher only), and a constant TLS 1.3 Finished HMAC |
//! | `hash`   | the suite hash (transcript, session hash): constant digests   |
//! | `rng`    | the provider's random source: a 64-bit counter, big-endian    |
//! | `cache`  | the server session cache: a perfect cache that always hits (TLS 1.2) |
//! | `kdf`    | key derivation (HKDF, TLS 1.2 PRF): all-zero secrets and keys (used by `minimal`) |
//! | `quic-packet` | QUIC packet protection: the payload as it is and a zero tag of the real size |
//! | `quic-header` | QUIC header protection: no mask |
//! | `quic-keys` | QUIC's key schedule: the Initial secrets and every `quic key/iv/hp/ku` expansion are zero, without computing |
//!
//! The three `quic-*` stages change nothing over TCP; `quic-skeleton` is
//! `skeleton` and the three at once. `skeleton` is the first seven at once; `minimal` is seed 001 §2.3.9
//! (minimal connection setup, zero keys, real record encryption) as far as
//! rustls allows: `sig,kx,hash,rng,cache,kdf`. See `crates/crypto/ABLATIONS.md`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::client::ClientSessionStore;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::StoresServerSessions;

use crate::{Error, Result};

mod cache;
mod cipher;
mod fakes;
mod quic;
#[cfg(test)]
mod quic_tests;
#[cfg(test)]
mod tests;

/// One stage that can be replaced by a no-op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Ablation {
    /// Signatures: constant, of the right length, and accepted.
    Sig,
    /// Key exchange: fixed key share and secret on a private code point.
    Kx,
    /// Bulk cipher: NULL AEAD (copy plus zero tag of the right size).
    Cipher,
    /// Record MAC: cipher-only AES-CTR with a zero tag.
    Mac,
    /// Hash: constant digests.
    Hash,
    /// Random bytes: a counter.
    Rng,
    /// Session cache: a perfect cache that always hits.
    Cache,
    /// Key derivation: zero secrets (only part of `minimal`).
    Kdf,
    /// QUIC packet protection: the payload unprotected, a zero tag.
    #[serde(rename = "quic-packet")]
    QuicPacket,
    /// QUIC header protection: no mask.
    #[serde(rename = "quic-header")]
    QuicHeader,
    /// QUIC's key schedule: zero Initial secrets and zero QUIC-labelled
    /// expansions (packet, IV, header-protection and key-update keys).
    #[serde(rename = "quic-keys")]
    QuicKeys,
}

impl Ablation {
    /// Every ablation, in flag order.
    pub const ALL: [Ablation; 11] = [
        Ablation::Sig,
        Ablation::Kx,
        Ablation::Cipher,
        Ablation::Mac,
        Ablation::Hash,
        Ablation::Rng,
        Ablation::Cache,
        Ablation::Kdf,
        Ablation::QuicPacket,
        Ablation::QuicHeader,
        Ablation::QuicKeys,
    ];

    /// The flag spelling (`sig`).
    pub fn name(self) -> &'static str {
        match self {
            Ablation::Sig => "sig",
            Ablation::Kx => "kx",
            Ablation::Cipher => "cipher",
            Ablation::Mac => "mac",
            Ablation::Hash => "hash",
            Ablation::Rng => "rng",
            Ablation::Cache => "cache",
            Ablation::Kdf => "kdf",
            Ablation::QuicPacket => "quic-packet",
            Ablation::QuicHeader => "quic-header",
            Ablation::QuicKeys => "quic-keys",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of ablations, parsed from `--ablate sig,kx,...`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AblationSet(u16);

impl AblationSet {
    /// No ablation: the real provider.
    pub const NONE: AblationSet = AblationSet(0);

    /// "skeleton": sig, kx, cipher, mac, hash, rng and cache at once.
    pub fn skeleton() -> AblationSet {
        [
            Ablation::Sig,
            Ablation::Kx,
            Ablation::Cipher,
            Ablation::Mac,
            Ablation::Hash,
            Ablation::Rng,
            Ablation::Cache,
        ]
        .into_iter()
        .collect()
    }

    /// "quic-skeleton": the skeleton and QUIC's packet protection, header
    /// protection and key schedule at once: every crypto stage of a QUIC
    /// connection a no-op.
    pub fn quic_skeleton() -> AblationSet {
        AblationSet::skeleton()
            .with(Ablation::QuicPacket)
            .with(Ablation::QuicHeader)
            .with(Ablation::QuicKeys)
    }

    /// Whether the set holds a stage that exists only over QUIC.
    pub fn has_quic(self) -> bool {
        self.contains(Ablation::QuicPacket)
            || self.contains(Ablation::QuicHeader)
            || self.contains(Ablation::QuicKeys)
    }

    /// "minimal": seed 001 §2.3.9 as closely as rustls allows — every
    /// handshake computation removed and the keys set to zero, while the
    /// record layer still encrypts for real.
    pub fn minimal() -> AblationSet {
        [
            Ablation::Sig,
            Ablation::Kx,
            Ablation::Hash,
            Ablation::Rng,
            Ablation::Cache,
            Ablation::Kdf,
        ]
        .into_iter()
        .collect()
    }

    /// Whether `a` is in the set.
    pub fn contains(self, a: Ablation) -> bool {
        self.0 & a.bit() != 0
    }

    /// Whether the set is empty (nothing ablated).
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set with `a` added.
    pub fn with(self, a: Ablation) -> AblationSet {
        AblationSet(self.0 | a.bit())
    }

    /// The ablations in the set, in flag order.
    pub fn iter(self) -> impl Iterator<Item = Ablation> {
        Ablation::ALL.into_iter().filter(move |a| self.contains(*a))
    }

    /// The verifier a client must use with a provider ablated by this set:
    /// the real WebPKI verifier over `roots` unless `sig` is ablated; then
    /// a verifier that skips the chain and accepts exactly the constant
    /// signature. That verifier can only be obtained here, and with a real
    /// verifier an ablated provider's constant signatures are rejected, so
    /// a real verifier can never pass an ablated signature by mistake.
    pub fn server_cert_verifier(
        self,
        provider: &Arc<CryptoProvider>,
        roots: RootCertStore,
    ) -> Result<Arc<dyn ServerCertVerifier>> {
        if self.contains(Ablation::Sig) {
            return Ok(fakes::const_sig_verifier(provider));
        }
        let v = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| Error::Incompatible(format!("cannot build the certificate verifier: {e}")))?;
        Ok(v)
    }

    /// The server session store to use: `real`, or with `cache` ablated a
    /// perfect cache that always hits (see [`AblationSet`] docs).
    pub fn server_store(
        self,
        real: Arc<dyn StoresServerSessions>,
    ) -> Arc<dyn StoresServerSessions> {
        if self.contains(Ablation::Cache) {
            cache::PerfectStore::new(real)
        } else {
            real
        }
    }

    /// The client session store to use: `real`, or with `cache` ablated a
    /// wrapper that offers the universal session whenever `real` would
    /// offer a TLS 1.2 session. Share one such store among all clients.
    pub fn client_store(self, real: Arc<dyn ClientSessionStore>) -> Arc<dyn ClientSessionStore> {
        if self.contains(Ablation::Cache) {
            cache::UniversalClientStore::new(real)
        } else {
            real
        }
    }
}

impl AblationSet {
    /// For clients that each keep their own store (the load engine's
    /// per-client `ClientSessions`): a function wrapping each client's store
    /// like [`client_store`](Self::client_store), all wrappers sharing one
    /// universal session (the first TLS 1.2 session any of them stores).
    /// Each wrapper still asks its own store first, so that store's offer
    /// policy decides full vs. resumed.
    pub fn client_store_factory(
        self,
    ) -> impl Fn(Arc<dyn ClientSessionStore>) -> Arc<dyn ClientSessionStore> + Send + Sync + 'static
    {
        let universal = Arc::new(std::sync::OnceLock::new());
        move |real| {
            if self.contains(Ablation::Cache) {
                cache::UniversalClientStore::sharing(real, universal.clone())
            } else {
                real
            }
        }
    }
}

impl FromIterator<Ablation> for AblationSet {
    fn from_iter<I: IntoIterator<Item = Ablation>>(iter: I) -> Self {
        AblationSet(iter.into_iter().fold(0, |b, a| b | a.bit()))
    }
}

impl FromStr for AblationSet {
    type Err = Error;

    /// Parses `sig,kx,cipher,mac,hash,rng,cache,kdf`, `quic-packet`,
    /// `quic-header`, `quic-keys`, `skeleton`, `quic-skeleton`, `minimal`
    /// and `none` (or empty), comma separated and case-insensitive.
    fn from_str(s: &str) -> Result<Self> {
        let mut set = AblationSet::NONE;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let lower = part.to_ascii_lowercase();
            set = AblationSet(
                set.0
                    | match lower.as_str() {
                        "none" => 0,
                        "skeleton" => AblationSet::skeleton().0,
                        "quic-skeleton" => AblationSet::quic_skeleton().0,
                        "minimal" => AblationSet::minimal().0,
                        name => match Ablation::ALL.into_iter().find(|a| a.name() == name) {
                            Some(a) => a.bit(),
                            None => {
                                return Err(Error::UnknownName {
                                    what: "ablation",
                                    name: part.to_string(),
                                    choices: "sig, kx, cipher, mac, hash, rng, cache, kdf, quic-packet, quic-header, quic-keys, skeleton, quic-skeleton, minimal, none".into(),
                                });
                            }
                        },
                    },
            );
        }
        Ok(set)
    }
}

impl fmt::Display for AblationSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<_> = self.iter().map(Ablation::name).collect();
        f.write_str(&names.join(","))
    }
}

impl serde::Serialize for AblationSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// Applies `set` to `base`: each ablated stage's components are replaced
/// (see the module docs); everything else is kept. The session cache is
/// not part of a provider: use [`AblationSet::server_store`] and
/// [`AblationSet::client_store`], and [`AblationSet::server_cert_verifier`]
/// on the client.
///
/// Like [`metered`](super::metered), this leaks a few small objects per
/// call: build once per process side. Fails if `mac` leaves no cipher suite
/// (only AES-GCM suites have a cipher-only variant).
pub fn ablated(base: CryptoProvider, set: &AblationSet) -> Result<CryptoProvider> {
    let set = *set;
    let mut p = base;
    p.cipher_suites = p
        .cipher_suites
        .iter()
        .filter_map(|s| cipher::ablate_suite(*s, set))
        .collect();
    if p.cipher_suites.is_empty() {
        return Err(Error::Incompatible(
            "--ablate mac needs an AES-GCM cipher suite (ChaCha20 has no cipher-only variant here); add one to --suites".into(),
        ));
    }
    if set.contains(Ablation::Kx) {
        p.kx_groups = fakes::fake_groups(&p.kx_groups)?;
    }
    if set.contains(Ablation::Sig) {
        p.key_provider = fakes::const_sig_key_provider(p.key_provider);
        p.signature_verification_algorithms =
            fakes::const_sig_algorithms(p.signature_verification_algorithms);
    }
    if set.contains(Ablation::Rng) {
        p.secure_random = fakes::counter_random();
    }
    Ok(p)
}

/// If `err` (from a handshake or record) is what a client and server with
/// different `--ablate` sets produce, a sentence saying so and how to fix
/// it, for the server's and load generator's error reports.
pub fn mismatch_hint(err: &rustls::Error) -> Option<String> {
    use rustls::{CertificateError, Error as E, PeerIncompatible};
    let what = match err {
        E::PeerIncompatible(PeerIncompatible::NoKxGroupsInCommon) => {
            "no key-exchange group in common: one side may use --ablate kx (private code points) and the other not"
        }
        E::InvalidCertificate(CertificateError::BadSignature) => {
            "bad signature: one side may use --ablate sig (constant signatures) and the other not"
        }
        E::DecryptError => {
            "a record did not decrypt: the sides may differ in --ablate cipher, mac, hash or kdf"
        }
        E::General(s) if s.contains("ablation") => return Some(s.clone()),
        _ => return None,
    };
    Some(format!(
        "{what}; start client and server with the same --ablate set"
    ))
}
