//! The rustls server configuration, and naming why a handshake failed.

use std::io;
use std::sync::Arc;

use rustls::server::{NoServerSessionStorage, ServerConfig, StoresServerSessions};
use rustls::{AlertDescription, PeerIncompatible};
use tlslab_crypto::meter::{self, Ablation, AblationSet, Meter, MeteredStore, MeteredTicketer};
use tlslab_crypto::pki;
use tlslab_crypto::provider;
use tlslab_crypto::store::{CountingTicketer, ServerSessionCache};

use tlslab_crypto::ticket_keys::TicketKeyRing;

use crate::config::{CertSource, SessionCache, TicketKeys, TlsSettings};
use crate::error::{Error, Result};
use crate::redis_cache::RedisStore;

/// A built TLS configuration and the counting parts it shares with the stats.
pub(crate) struct Built {
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) cache: Option<Arc<ServerSessionCache>>,
    pub(crate) ticketer: Option<Arc<CountingTicketer>>,
    /// The Redis-shared cache, when `--session-cache` names one.
    pub(crate) redis: Option<Arc<RedisStore>>,
    /// The shared ticket keys, when `--ticket-keys` names them.
    pub(crate) ring: Option<Arc<TicketKeyRing>>,
    /// What `--cert-compression` sent.
    pub(crate) compression: Arc<crate::cert_compression::CompressionStats>,
}

/// Builds the server configuration. The provider is always metered into
/// `meter`, after `s.ablation` (if any) has replaced its ablated stages;
/// the session store and the ticketer record into `meter` too.
pub(crate) fn build(s: &TlsSettings, meter: &Arc<Meter>) -> Result<Built> {
    if s.versions.is_empty() {
        return Err(Error::Usage(
            "no TLS version enabled; use --tls 1.2, 1.3 or 1.2,1.3".into(),
        ));
    }
    if s.max_early_data > 0 {
        if s.tickets {
            return Err(Error::Usage(
                "--max-early-data needs --tickets off: rustls accepts 0-RTT only on stateful (single-use, unreplayable) TLS 1.3 tickets".into(),
            ));
        }
        if s.session_cache == SessionCache::None && s.remote_cache.is_none() {
            return Err(Error::Usage(
                "--max-early-data needs a session cache (stateful TLS 1.3 tickets live there); enable --session-cache".into(),
            ));
        }
        if !s.versions.contains(&provider::Version::Tls13) {
            return Err(Error::Usage(
                "--max-early-data needs TLS 1.3; add 1.3 to --tls or set --max-early-data 0".into(),
            ));
        }
    }
    if s.ablation.contains(Ablation::Cache) && s.session_cache == SessionCache::None {
        return Err(Error::Usage(
            "--ablate cache replaces the session cache with a perfect one, but the cache is off; enable --session-cache or drop cache from --ablate".into(),
        ));
    }
    let base = (*provider::build(&s.versions, &s.algorithms)?).clone();
    let crypto = if s.ablation.is_empty() {
        base
    } else {
        meter::ablated(base, &s.ablation)?
    };
    let crypto = Arc::new(meter::metered(crypto, meter.clone()));
    let (chain, key) = match &s.cert {
        CertSource::Files { chain, key } => (pki::load_chain(chain)?, pki::load_key(key)?),
        CertSource::Generated(g) => (g.chain_der()?, g.key_der()?),
    };
    let mut config = ServerConfig::builder_with_provider(crypto)
        .with_protocol_versions(&provider::protocol_versions(&s.versions))?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    // Set explicitly: rustls' default (with its brotli and zlib features)
    // would compress whenever the client offers it. Counted per handshake.
    let compression = crate::cert_compression::install(&mut config, &s.cert_compression);
    config.cert_decompressors = Vec::new();
    config.key_log = tlslab_crypto::keylog::open(s.key_log.as_deref())?;
    let mut redis = None;
    let (storage, cache): (Arc<dyn StoresServerSessions>, _) = match s.session_cache {
        _ if s.remote_cache.is_some() => {
            let r = RedisStore::new(s.remote_cache.as_ref().expect("checked"))?;
            redis = Some(r.clone());
            let local = r.local().clone();
            (r as Arc<dyn StoresServerSessions>, Some(local))
        }
        SessionCache::None => (Arc::new(NoServerSessionStorage {}), None),
        SessionCache::Memory { capacity, ttl } => {
            if capacity == 0 {
                return Err(Error::Usage(
                    "a session cache of capacity 0 holds nothing; give a capacity of at least 1 or turn the cache off".into(),
                ));
            }
            let c = ServerSessionCache::new(capacity, ttl);
            (c.clone() as Arc<dyn StoresServerSessions>, Some(c))
        }
    };
    config.session_storage = MeteredStore::new(s.ablation.server_store(storage), meter.clone());
    let mut ring = None;
    if !s.tickets && s.ticket_keys != TicketKeys::Local {
        return Err(Error::Usage(
            "--ticket-keys seals session tickets, but --tickets is off; use --tickets on or drop --ticket-keys".into(),
        ));
    }
    let ticketer = if s.tickets {
        let inner: Arc<dyn rustls::server::ProducesTickets> = match &s.ticket_keys {
            TicketKeys::Local => provider::ticketer()?,
            TicketKeys::File(path) => {
                let r = crate::ticket_keys::load(path, ticket_lifetime(s))?;
                ring = Some(r.clone());
                r
            }
            TicketKeys::Redis { rotation, .. } => {
                if rotation.is_zero() {
                    return Err(Error::Usage(
                        "--ticket-key-rotation 0 cannot rotate; give a duration such as 12h".into(),
                    ));
                }
                // Local keys (version 0) until Redis answers.
                let local = tlslab_crypto::ticket_keys::KeyMaterial::generate()?;
                let r = TicketKeyRing::new(&[local], 0, 0, ticket_lifetime(s))?;
                ring = Some(r.clone());
                r
            }
        };
        // --node-tag: stateless tickets carry the node prefix too, so a
        // dispatcher routes them on first use like session IDs.
        let inner = match &s.algorithms.random_prefix {
            Some(p) => Arc::new(TaggedTicketer {
                inner,
                prefix: p.clone(),
            }) as Arc<dyn rustls::server::ProducesTickets>,
            None => inner,
        };
        let t = CountingTicketer::new(inner);
        config.ticketer = MeteredTicketer::new(t.clone(), meter.clone());
        Some(t)
    } else {
        None
    };
    config.max_early_data_size = s.max_early_data;
    // Answers to safe requests in early data leave before the client's
    // Finished (0.5-RTT data, crate::early); without early data the server
    // has nothing to send then, so this changes nothing.
    config.send_half_rtt_data = s.max_early_data > 0;
    config.alpn_protocols = s.alpn.clone();
    Ok(Built {
        config: Arc::new(config),
        cache,
        ticketer,
        redis,
        ring,
        compression,
    })
}

/// Prepends the node prefix (`--node-tag`) to each sealed ticket and strips
/// the same number of bytes before opening one, whichever node's prefix
/// they are (nodes sharing `--ticket-keys` open each other's tickets).
#[derive(Debug)]
struct TaggedTicketer {
    inner: Arc<dyn rustls::server::ProducesTickets>,
    prefix: Vec<u8>,
}

impl rustls::server::ProducesTickets for TaggedTicketer {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }

    fn lifetime(&self) -> u32 {
        self.inner.lifetime()
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let sealed = self.inner.encrypt(plain)?;
        let mut out = Vec::with_capacity(self.prefix.len() + sealed.len());
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(&sealed);
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.inner.decrypt(cipher.get(self.prefix.len()..)?)
    }
}

/// How long shared-key tickets say they live: the session lifetime.
fn ticket_lifetime(s: &TlsSettings) -> std::time::Duration {
    match (&s.remote_cache, s.session_cache) {
        (Some(r), _) => r.ttl,
        (None, SessionCache::Memory { ttl, .. }) => ttl,
        (None, SessionCache::None) => std::time::Duration::from_secs(300),
    }
}

/// The failure reason of a handshake that ended in `e` on a server using
/// the ablations `ours`, and for the reason `ablation_mismatch` a sentence
/// saying what differs and how to fix it (for the log).
///
/// A failure is an ablation mismatch when [`meter::mismatch_hint`] names
/// one, except "no key-exchange group in common" on a server without the
/// `kx` ablation (that is an ordinary `no_shared_group`: the server cannot
/// tell a kx-ablated client from one that just offers other groups); and,
/// on a server with an ablation, when the client answers with the alert
/// `decrypt_error` (it rejected the constant signature or the Finished) or
/// `bad_record_mac` (it could not open our records).
pub(crate) fn handshake_failure(e: &io::Error, ours: AblationSet) -> (String, Option<String>) {
    let Some(r) = rustls_error(e) else {
        return (failure_reason(e), None);
    };
    match ablation_hint(r, ours) {
        Some(hint) => ("ablation_mismatch".into(), Some(hint)),
        None => (rustls_reason(r), None),
    }
}

fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
}

fn ablation_hint(e: &rustls::Error, ours: AblationSet) -> Option<String> {
    use rustls::Error as E;
    match e {
        E::PeerIncompatible(PeerIncompatible::NoKxGroupsInCommon)
            if !ours.contains(Ablation::Kx) =>
        {
            None
        }
        E::AlertReceived(a @ (AlertDescription::DecryptError | AlertDescription::BadRecordMac))
            if !ours.is_empty() =>
        {
            Some(format!(
                "the client rejected this server's handshake or records (alert {}) and this server uses --ablate {ours}, whose signatures, digests, keys or records only a client with the same ablations accepts; start client and server with the same --ablate set",
                alert_name(*a)
            ))
        }
        _ => meter::mismatch_hint(e),
    }
}

/// The failure reason of a handshake that ended in `e`.
pub(crate) fn failure_reason(e: &io::Error) -> String {
    if let Some(r) = rustls_error(e) {
        return rustls_reason(r);
    }
    match e.kind() {
        io::ErrorKind::UnexpectedEof => "eof".into(),
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => "reset".into(),
        io::ErrorKind::TimedOut => "timeout".into(),
        _ => "io_error".into(),
    }
}

/// A short snake_case name for a rustls error.
pub(crate) fn rustls_reason(e: &rustls::Error) -> String {
    use rustls::Error as E;
    match e {
        E::AlertReceived(a) => format!("alert_{}", alert_name(*a)),
        E::InvalidMessage(_) => "decode_error".into(),
        E::PeerIncompatible(p) => match p {
            PeerIncompatible::NoCipherSuitesInCommon => "no_shared_cipher".into(),
            PeerIncompatible::NoKxGroupsInCommon => "no_shared_group".into(),
            PeerIncompatible::NoSignatureSchemesInCommon => "no_shared_signature_scheme".into(),
            PeerIncompatible::SupportedVersionsExtensionRequired
            | PeerIncompatible::Tls12NotOffered
            | PeerIncompatible::Tls12NotOfferedOrEnabled
            | PeerIncompatible::ServerDoesNotSupportTls12Or13 => "protocol_version".into(),
            _ => "handshake_failure".into(),
        },
        E::PeerMisbehaved(_) => "peer_misbehaved".into(),
        E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => {
            "unexpected_message".into()
        }
        E::NoApplicationProtocol => "no_application_protocol".into(),
        E::DecryptError => "decrypt_error".into(),
        E::PeerSentOversizedRecord => "record_overflow".into(),
        E::InvalidCertificate(_) | E::NoCertificatesPresented => "bad_certificate".into(),
        _ => "other".into(),
    }
}

/// `BadCertificate` → `bad_certificate`, `UnknownCA` → `unknown_ca`;
/// unknown codes → `unknown`.
fn alert_name(a: AlertDescription) -> String {
    let debug = format!("{a:?}");
    if debug.contains('(') {
        return "unknown".into();
    }
    snake_case(&debug)
}

fn snake_case(camel: &str) -> String {
    let chars: Vec<char> = camel
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_lower)
            {
                out.push('_');
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::InvalidMessage;

    #[test]
    fn reasons_are_short_names() {
        let alert = rustls::Error::AlertReceived(AlertDescription::BadCertificate);
        assert_eq!(rustls_reason(&alert), "alert_bad_certificate");
        assert_eq!(
            rustls_reason(&rustls::Error::AlertReceived(AlertDescription::UnknownCA)),
            "alert_unknown_ca"
        );
        assert_eq!(snake_case("HTTPServerError"), "http_server_error");
        assert_eq!(
            snake_case("NoApplicationProtocol"),
            "no_application_protocol"
        );
        assert_eq!(
            rustls_reason(&rustls::Error::AlertReceived(AlertDescription::Unknown(
                200
            ))),
            "alert_unknown"
        );
        assert_eq!(
            rustls_reason(&rustls::Error::InvalidMessage(
                InvalidMessage::InvalidContentType
            )),
            "decode_error"
        );
        assert_eq!(
            rustls_reason(&rustls::Error::PeerIncompatible(
                PeerIncompatible::NoCipherSuitesInCommon
            )),
            "no_shared_cipher"
        );
        let io = io::Error::new(io::ErrorKind::InvalidData, alert);
        assert_eq!(failure_reason(&io), "alert_bad_certificate");
        let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "tls handshake eof");
        assert_eq!(failure_reason(&eof), "eof");
    }

    #[test]
    fn ablation_mismatches_are_named_with_the_fix() {
        let none = AblationSet::NONE;
        let kx: AblationSet = "kx".parse().unwrap();
        let sig: AblationSet = "sig".parse().unwrap();
        let io = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let no_group = || rustls::Error::PeerIncompatible(PeerIncompatible::NoKxGroupsInCommon);
        // No shared group: an ablation mismatch only if this server ablates kx.
        assert_eq!(
            handshake_failure(&io(no_group()), none),
            ("no_shared_group".into(), None)
        );
        let (r, hint) = handshake_failure(&io(no_group()), kx);
        assert_eq!(r, "ablation_mismatch");
        assert!(hint.unwrap().contains("same --ablate set"));
        // A record that does not decrypt: whatever this server's set.
        let (r, hint) = handshake_failure(&io(rustls::Error::DecryptError), none);
        assert_eq!(r, "ablation_mismatch");
        assert!(hint.unwrap().contains("--ablate"));
        // The ablated side's own check.
        let general = rustls::Error::General(
            "cipher/mac ablation: the record's tag is not the ablation's zero tag".into(),
        );
        assert_eq!(handshake_failure(&io(general), sig).0, "ablation_mismatch");
        // The client rejected our constant signature.
        let alert = || rustls::Error::AlertReceived(AlertDescription::DecryptError);
        let (r, hint) = handshake_failure(&io(alert()), sig);
        assert_eq!(r, "ablation_mismatch");
        let hint = hint.unwrap();
        assert!(
            hint.contains("alert decrypt_error") && hint.contains("--ablate sig"),
            "{hint}"
        );
        assert_eq!(
            handshake_failure(&io(alert()), none).0,
            "alert_decrypt_error"
        );
        // Everything else keeps its reason.
        let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "eof");
        assert_eq!(handshake_failure(&eof, sig), ("eof".into(), None));
    }

    #[test]
    fn ablated_cache_needs_a_memory_cache() {
        let mut s = settings();
        s.ablation = "cache".parse().unwrap();
        s.session_cache = SessionCache::None;
        let e = build(&s, &Meter::new()).err().unwrap().to_string();
        assert!(
            e.contains("--ablate cache") && e.contains("--session-cache"),
            "{e}"
        );
        // `mac` with only ChaCha20 leaves no suite: the crypto crate's error.
        let mut s = settings();
        s.ablation = "mac".parse().unwrap();
        s.algorithms.suites = Some(vec!["TLS13_CHACHA20_POLY1305_SHA256".into()]);
        s.versions = vec![provider::Version::Tls13];
        let e = build(&s, &Meter::new()).err().unwrap().to_string();
        assert!(e.contains("--ablate mac"), "{e}");
    }

    fn settings() -> TlsSettings {
        let g = pki::generate(pki::KeyType::EcdsaP256, &[]).unwrap();
        TlsSettings::new(CertSource::Generated(g))
    }

    #[test]
    fn early_data_needs_stateful_tls13_resumption() {
        let mut s = settings();
        s.max_early_data = 1024;
        s.tickets = true;
        let e = build(&s, &Meter::new()).err().unwrap().to_string();
        assert!(e.contains("--tickets off"), "{e}");
        s.tickets = false;
        s.session_cache = SessionCache::None;
        let e = build(&s, &Meter::new()).err().unwrap().to_string();
        assert!(e.contains("session cache"), "{e}");
        s = settings();
        s.max_early_data = 1024;
        let built = build(&s, &Meter::new()).unwrap();
        assert_eq!(built.config.max_early_data_size, 1024);
        assert!(built.cache.is_some() && built.ticketer.is_none());
    }

    #[test]
    fn mismatched_key_says_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let a = pki::generate(pki::KeyType::EcdsaP256, &[]).unwrap();
        let b = pki::generate(pki::KeyType::EcdsaP256, &[]).unwrap();
        std::fs::write(dir.path().join("chain.pem"), &a.chain_pem).unwrap();
        std::fs::write(dir.path().join("key.pem"), &b.key_pem).unwrap();
        let mut s = settings();
        s.cert = CertSource::Files {
            chain: dir.path().join("chain.pem"),
            key: dir.path().join("key.pem"),
        };
        let e = build(&s, &Meter::new()).err().unwrap().to_string();
        assert!(e.contains("key matches"), "{e}");
    }

    #[test]
    fn node_prefix_tags_stateless_tickets() {
        use rustls::server::ProducesTickets;
        let t = TaggedTicketer {
            inner: provider::ticketer().unwrap(),
            prefix: vec![1, 2, 3, 4],
        };
        let sealed = t.encrypt(b"session").unwrap();
        assert_eq!(&sealed[..4], &[1, 2, 3, 4]);
        assert_eq!(t.decrypt(&sealed).unwrap(), b"session");
        // Another node's prefix over the same keys still opens.
        let mut other = sealed.clone();
        other[..4].copy_from_slice(&[9, 9, 9, 9]);
        assert_eq!(t.decrypt(&other).unwrap(), b"session");
        assert!(t.decrypt(&sealed[4..]).is_none());
        assert!(t.decrypt(&[1, 2]).is_none());
    }
}
