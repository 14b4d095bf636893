//! Which ClientHellos carry a session this node can resume: the decision
//! admission control takes before rustls sees the ClientHello, with no
//! public-key work.

use std::sync::Arc;

use tlslab_crypto::store::ServerSessionCache;
use tlslab_crypto::ticket_keys::TicketKeyRing;
use tlslab_wire::ClientHello;

/// What a ClientHello asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloKind {
    /// A new full handshake.
    Full,
    /// A resumption this node can serve.
    Resume,
}

impl HelloKind {
    pub(super) fn idx(self) -> usize {
        match self {
            HelloKind::Full => 0,
            HelloKind::Resume => 1,
        }
    }
}

/// What this node can resume from: the state [`classify`] checks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Resumable {
    /// The local session cache (with Redis, its memory layer).
    pub(crate) cache: Option<Arc<ServerSessionCache>>,
    /// `--tickets on`.
    pub(crate) tickets: bool,
    /// Shared ticket keys (their names are checked).
    pub(crate) ring: Option<Arc<TicketKeyRing>>,
    /// The server speaks TLS 1.3.
    pub(crate) tls13: bool,
}

/// The shortest ticket rustls's own ticketer produces: a 16-byte key
/// name, a 12-byte nonce and a 16-byte tag.
const MIN_TICKET: usize = 44;

impl Resumable {
    fn ticket(&self, t: &[u8]) -> bool {
        match &self.ring {
            Some(ring) => ring.knows_name(t),
            None => t.len() >= MIN_TICKET,
        }
    }

    fn cached(&self, key: &[u8]) -> bool {
        self.cache.as_ref().is_some_and(|c| c.contains(key))
    }

    /// A TLS 1.3 PSK identity this node can resume: a ticket it sealed
    /// (with tickets on) or a session ID in its cache.
    fn psk(&self, identity: &[u8]) -> bool {
        if self.tickets {
            self.ticket(identity)
        } else {
            self.cached(identity)
        }
    }
}

/// Whether a QUIC ClientHello (TLS 1.3 only: QUIC has no other) that
/// offers the PSK `identities` carries a session `r` can resume: the same
/// rule as [`classify`]'s for TLS 1.3. `identities` come from the
/// ClientHello read off the Initials (`quic::sniff`), which keeps at most
/// two; none is a full handshake.
pub(crate) fn classify_psk(identities: &[Vec<u8>], r: &Resumable) -> HelloKind {
    if identities.iter().any(|i| r.psk(i)) {
        HelloKind::Resume
    } else {
        HelloKind::Full
    }
}

/// Whether `hello` carries a session `r` can resume.
pub(crate) fn classify(hello: &ClientHello<'_>, r: &Resumable) -> HelloKind {
    let resumable = if r.tls13 && hello.offers_tls13() {
        // The server picks TLS 1.3, which resumes by PSK only; the legacy
        // session ID is random and a TLS 1.2 ticket is ignored.
        hello
            .pre_shared_key
            .is_some_and(|psk| psk.identities.iter().any(|p| r.psk(p.identity)))
    } else {
        tls12_offer(hello, r)
    };
    if resumable {
        HelloKind::Resume
    } else {
        HelloKind::Full
    }
}

/// A TLS 1.2 resumption offer: a ticket (with tickets on) or a cached
/// session ID.
fn tls12_offer(hello: &ClientHello<'_>, r: &Resumable) -> bool {
    match hello.session_ticket.filter(|t| !t.is_empty()) {
        Some(t) if r.tickets => r.ticket(t),
        _ => !hello.session_id.is_empty() && r.cached(hello.session_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefetch::tests::client_hello;
    use std::time::Duration;
    use tlslab_wire::first_handshake_message;

    /// A handshake message: ClientHello with `session_id`, and the
    /// extensions given as (type, body).
    fn crafted(session_id: &[u8], exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7u8; 32]);
        body.push(session_id.len() as u8);
        body.extend_from_slice(session_id);
        body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[0x01, 0x00]); // null compression
        let mut e = Vec::new();
        for (t, b) in exts {
            e.extend_from_slice(&t.to_be_bytes());
            e.extend_from_slice(&(b.len() as u16).to_be_bytes());
            e.extend_from_slice(b);
        }
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut msg = vec![1u8];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(&body);
        msg
    }

    fn supported_versions_13() -> (u16, Vec<u8>) {
        (43, vec![4, 0x03, 0x04, 0x03, 0x03])
    }

    fn psk(identity: &[u8]) -> (u16, Vec<u8>) {
        let mut ids = Vec::new();
        ids.extend_from_slice(&(identity.len() as u16).to_be_bytes());
        ids.extend_from_slice(identity);
        ids.extend_from_slice(&0u32.to_be_bytes());
        let mut b = (ids.len() as u16).to_be_bytes().to_vec();
        b.extend_from_slice(&ids);
        let binder = [9u8; 32];
        b.extend_from_slice(&33u16.to_be_bytes());
        b.push(32);
        b.extend_from_slice(&binder);
        (41, b)
    }

    fn kind(msg: &[u8], r: &Resumable) -> HelloKind {
        classify(&ClientHello::parse(msg).unwrap(), r)
    }

    fn cache_with(key: &[u8]) -> Arc<ServerSessionCache> {
        use rustls::server::StoresServerSessions;
        let c = ServerSessionCache::new(16, Duration::from_secs(60));
        assert!(c.put(key.to_vec(), b"session".to_vec()));
        c
    }

    /// TLS 1.3 on, no tickets, and a session cache holding `key`.
    fn cached(key: &[u8]) -> Resumable {
        Resumable {
            cache: Some(cache_with(key)),
            tickets: false,
            ring: None,
            tls13: true,
        }
    }

    #[test]
    fn a_fresh_client_hello_is_full() {
        let r = Resumable {
            cache: Some(ServerSessionCache::new(16, Duration::from_secs(60))),
            tickets: true,
            ring: None,
            tls13: true,
        };
        for tls13 in [true, false] {
            let raw = client_hello(tls13);
            let msg = first_handshake_message(&raw, 65_535).unwrap();
            assert_eq!(kind(&msg, &r), HelloKind::Full, "tls13 {tls13}");
        }
    }

    #[test]
    fn a_cached_tls12_session_id_resumes_an_unknown_one_does_not() {
        let id = [5u8; 32];
        let r = cached(&id);
        assert_eq!(kind(&crafted(&id, &[]), &r), HelloKind::Resume);
        assert_eq!(kind(&crafted(&[6u8; 32], &[]), &r), HelloKind::Full);
        // The same ID as a TLS 1.3 legacy session ID is not a session.
        let m = crafted(&id, &[supported_versions_13()]);
        assert_eq!(kind(&m, &r), HelloKind::Full);
        // Without a cache nothing resumes by ID.
        let none = Resumable {
            tls13: true,
            ..Default::default()
        };
        assert_eq!(kind(&crafted(&id, &[]), &none), HelloKind::Full);
    }

    #[test]
    fn tls13_psk_resumes_when_cached_or_when_tickets_are_sealed_here() {
        let ticket = [8u8; 64];
        let stateful = cached(&ticket);
        let m = crafted(&[1u8; 32], &[supported_versions_13(), psk(&ticket)]);
        assert_eq!(kind(&m, &stateful), HelloKind::Resume);
        let other = crafted(&[1u8; 32], &[supported_versions_13(), psk(&[3u8; 64])]);
        assert_eq!(kind(&other, &stateful), HelloKind::Full);
        // Stateless tickets with the process's ticketer: length only.
        let stateless = Resumable {
            tickets: true,
            tls13: true,
            ..Default::default()
        };
        assert_eq!(kind(&other, &stateless), HelloKind::Resume);
        let short = crafted(&[1u8; 32], &[supported_versions_13(), psk(&[3u8; 20])]);
        assert_eq!(kind(&short, &stateless), HelloKind::Full);
    }

    #[test]
    fn a_quic_psk_resumes_by_the_tls13_rule() {
        let ticket = vec![8u8; 64];
        // Stateful tickets: the identity must be in the cache.
        let stateful = cached(&ticket);
        assert_eq!(
            classify_psk(std::slice::from_ref(&ticket), &stateful),
            HelloKind::Resume
        );
        assert_eq!(classify_psk(&[vec![3u8; 64]], &stateful), HelloKind::Full);
        // Either of two identities will do; none is a full handshake.
        assert_eq!(
            classify_psk(&[vec![3u8; 64], ticket.clone()], &stateful),
            HelloKind::Resume
        );
        assert_eq!(classify_psk(&[], &stateful), HelloKind::Full);
        // Stateless tickets of the process's own ticketer: by length.
        let stateless = Resumable {
            tickets: true,
            tls13: true,
            ..Default::default()
        };
        assert_eq!(
            classify_psk(&[vec![3u8; 64]], &stateless),
            HelloKind::Resume
        );
        assert_eq!(classify_psk(&[vec![3u8; 20]], &stateless), HelloKind::Full);
        // The same answer as classify() on the whole ClientHello.
        let m = crafted(&[1u8; 32], &[supported_versions_13(), psk(&ticket)]);
        assert_eq!(
            kind(&m, &stateful),
            classify_psk(std::slice::from_ref(&ticket), &stateful)
        );
    }

    #[test]
    fn shared_ticket_keys_are_checked_by_key_name() {
        use tlslab_crypto::ticket_keys::KeyMaterial;
        let key = KeyMaterial::generate().unwrap();
        let ring = TicketKeyRing::new(&[key], 0, 1, Duration::from_secs(60)).unwrap();
        let sealed = rustls::server::ProducesTickets::encrypt(&*ring, b"state").unwrap();
        let r = Resumable {
            tickets: true,
            ring: Some(ring),
            tls13: true,
            ..Default::default()
        };
        // TLS 1.2 SessionTicket extension (35).
        let ours = crafted(&[], &[(35, sealed.clone())]);
        assert_eq!(kind(&ours, &r), HelloKind::Resume);
        let mut foreign = sealed.clone();
        foreign[0] ^= 0xff;
        assert_eq!(kind(&crafted(&[], &[(35, foreign)]), &r), HelloKind::Full);
        let m = crafted(&[1u8; 32], &[supported_versions_13(), psk(&sealed)]);
        assert_eq!(kind(&m, &r), HelloKind::Resume);
    }
}
