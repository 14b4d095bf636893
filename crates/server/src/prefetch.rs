//! The pre-handshake stage of a remote session cache: read the whole
//! ClientHello, find the session it offers with `tlslab-wire`, fetch that
//! session from Redis into the local layer (asynchronously, bounded by
//! `--redis-timeout`), and hand the bytes read back for rustls to replay.
//!
//! It is called from one place in `serve_tls`, between the sniff of the
//! first bytes and the rustls accept, and does nothing without a remote
//! cache.

use std::sync::Arc;

use tlslab_wire::{ClientHello, Error as WireError, first_handshake_message};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::redis_cache::RedisStore;

/// The largest ClientHello read ahead of rustls (rustls's own limit on a
/// handshake message is 64 KiB).
const MAX_HELLO: usize = 65_535;

/// What a ClientHello offers to resume with.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Offer {
    /// TLS 1.2 session ID (looked up when no non-empty ticket is sent).
    pub(crate) session_id: Option<Vec<u8>>,
    /// TLS 1.3 PSK identities (stateful tickets), at most two.
    pub(crate) psk_identities: Vec<Vec<u8>>,
}

/// The keys a ClientHello offers. `stateless_tickets`: the server seals
/// tickets itself, so PSK identities and TLS 1.2 tickets are not in the
/// cache.
pub(crate) fn offer(hello: &ClientHello<'_>, stateless_tickets: bool) -> Offer {
    let mut o = Offer::default();
    let sends_ticket = hello.session_ticket.is_some_and(|t| !t.is_empty());
    // With stateless tickets, a ClientHello that sends a ticket resumes by
    // the ticket, not by the session ID.
    let by_ticket = stateless_tickets && sends_ticket;
    if !hello.session_id.is_empty() && !by_ticket {
        o.session_id = Some(hello.session_id.to_vec());
    }
    if !stateless_tickets && let Some(psk) = hello.pre_shared_key {
        o.psk_identities = psk
            .identities
            .iter()
            .take(2)
            .map(|p| p.identity.to_vec())
            .collect();
    }
    o
}

/// The remote cache and what the server does with the offers.
#[derive(Debug)]
pub(crate) struct Prefetcher {
    pub(crate) store: Arc<RedisStore>,
    /// `--tickets on`: tickets are sealed, not stored.
    pub(crate) stateless_tickets: bool,
    /// TLS 1.3 is enabled, so a client that offers it never resumes a
    /// TLS 1.2 session ID here.
    pub(crate) tls13: bool,
}

/// With a remote cache, reads the rest of the ClientHello after `first`
/// (the sniffed bytes), prefetches what it offers, and returns every byte
/// read; without one, returns `first`. A ClientHello that does not parse
/// is left for rustls to refuse. Errors are failure reasons.
pub(crate) async fn stage<T: AsyncRead + Unpin>(
    io: &mut T,
    first: Vec<u8>,
    p: Option<&Prefetcher>,
) -> Result<Vec<u8>, String> {
    match p {
        None => Ok(first),
        Some(p) => prefetch(io, first, p)
            .await
            .map_err(|e| crate::tls::failure_reason(&e)),
    }
}

async fn prefetch<T: AsyncRead + Unpin>(
    io: &mut T,
    first: Vec<u8>,
    p: &Prefetcher,
) -> std::io::Result<Vec<u8>> {
    let (store, stateless_tickets) = (&p.store, p.stateless_tickets);
    let first = read_hello(io, first).await?;
    if let Ok(msg) = first_handshake_message(&first, MAX_HELLO)
        && let Ok(hello) = ClientHello::parse(&msg)
    {
        let o = offer(&hello, stateless_tickets);
        // A TLS 1.3 ClientHello that offers a PSK resumes by
        // the PSK; the legacy session ID is then not a session.
        if !o.psk_identities.is_empty() {
            store.prefetch(&o.psk_identities, true).await;
        } else if let Some(id) = o.session_id
            && !(p.tls13 && hello.offers_tls13())
        {
            store.prefetch(&[id], false).await;
        }
    }
    Ok(first)
}

/// Reads after `first` until it holds the whole first handshake message
/// (the ClientHello), the peer stops sending, or the bytes cannot be one;
/// returns every byte read. Returns `first` at once when it is complete.
pub(crate) async fn read_hello<T: AsyncRead + Unpin>(
    io: &mut T,
    mut first: Vec<u8>,
) -> std::io::Result<Vec<u8>> {
    loop {
        match first_handshake_message(&first, MAX_HELLO) {
            Ok(_) => return Ok(first),
            Err(WireError::Incomplete { needed }) => {
                let at = first.len();
                first.resize(at + needed.clamp(1, MAX_HELLO), 0);
                let n = io.read(&mut first[at..]).await?;
                first.truncate(at + n);
                if n == 0 {
                    return Ok(first);
                }
            }
            Err(_) => return Ok(first),
        }
    }
}

/// The parsed ClientHello in `bytes` (the output of [`read_hello`]), if
/// it is one.
pub(crate) fn with_hello<R>(bytes: &[u8], f: impl FnOnce(&ClientHello<'_>) -> R) -> Option<R> {
    let msg = first_handshake_message(bytes, MAX_HELLO).ok()?;
    let hello = ClientHello::parse(&msg).ok()?;
    Some(f(&hello))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rustls::pki_types::ServerName;

    /// The first flight of a rustls client: its ClientHello record(s).
    pub(crate) fn client_hello(tls13: bool) -> Vec<u8> {
        let roots = rustls::RootCertStore::empty();
        let versions: &[&rustls::SupportedProtocolVersion] = if tls13 {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS12]
        };
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut c =
            rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from("x").unwrap())
                .unwrap();
        let mut out = Vec::new();
        c.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn offers_come_from_the_client_hello() {
        let raw = client_hello(true);
        let msg = first_handshake_message(&raw, MAX_HELLO).unwrap();
        let hello = ClientHello::parse(&msg).unwrap();
        // A fresh TLS 1.3 client sends a random legacy session ID and no PSK.
        let o = offer(&hello, false);
        assert_eq!(o.session_id.as_ref().map(Vec::len), Some(32));
        assert!(o.psk_identities.is_empty());
        let raw12 = client_hello(false);
        let msg = first_handshake_message(&raw12, MAX_HELLO).unwrap();
        let hello = ClientHello::parse(&msg).unwrap();
        assert!(!hello.offers_tls13());
    }

    #[tokio::test]
    async fn the_rest_of_a_split_client_hello_is_read_and_returned_whole() {
        let raw = client_hello(true);
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let (first, rest) = raw.split_at(5);
        let rest = rest.to_vec();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for chunk in rest.chunks(100) {
                b.write_all(chunk).await.unwrap();
                tokio::task::yield_now().await;
            }
            b
        });
        let store = crate::redis_cache::RedisStore::new(&crate::config::RemoteCache {
            url: "redis://127.0.0.1:1".into(),
            memory: None,
            ttl: std::time::Duration::from_secs(60),
            prefix: "t:".into(),
            timeout: std::time::Duration::from_millis(5),
        })
        .unwrap();
        let p = Prefetcher {
            store,
            stateless_tickets: false,
            tls13: true,
        };
        // Not started: no connection, so the prefetch itself is a no-op.
        let got = stage(&mut a, first.to_vec(), Some(&p)).await.unwrap();
        assert_eq!(got, raw);
        drop(writer.await.unwrap());
    }
}
