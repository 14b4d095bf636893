//! Reading a client's ClientHello: record reassembly, parsing and the
//! routing keys ([`inspect_hello`], pure so the fuzz target runs exactly
//! it), bounded in size ([`MAX_HELLO`]) and time.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::config::MAX_HELLO;
use crate::inspect::Offer;
use crate::metrics::BadInput;

/// The raw resumption bytes of a ClientHello, for prefix (tag) matching.
pub(crate) struct RawKeys {
    pub(crate) session_id: Vec<u8>,
    ticket: Vec<u8>,
    psks: Vec<Vec<u8>>,
}

impl RawKeys {
    /// The raw keys of a parsed ClientHello.
    pub(crate) fn of(ch: &tlslab_wire::ClientHello<'_>) -> RawKeys {
        RawKeys {
            session_id: ch.session_id.to_vec(),
            ticket: ch.session_ticket.unwrap_or_default().to_vec(),
            psks: ch
                .pre_shared_key
                .map(|p| p.identities.iter().map(|i| i.identity.to_vec()).collect())
                .unwrap_or_default(),
        }
    }

    pub(crate) fn all(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.session_id.as_slice())
            .chain(std::iter::once(self.ticket.as_slice()))
            .chain(self.psks.iter().map(Vec::as_slice))
            .filter(|b| !b.is_empty())
    }
}

/// Reading the ClientHello: the bytes read and what they are.
pub(crate) enum Hello {
    Parsed(Vec<u8>, Offer, RawKeys),
    Bad(Vec<u8>, BadInput),
}

/// What the client's first bytes so far are.
pub(crate) enum HelloStep {
    /// Not a whole ClientHello yet.
    Incomplete,
    /// A ClientHello and its routing keys.
    Parsed(Offer, RawKeys),
    /// Not a valid ClientHello.
    Bad(BadInput),
}

/// Inspects the client's first bytes: the dispatcher's whole ClientHello
/// path (record reassembly, parsing, routing keys), pure so the fuzz
/// target runs exactly this.
pub(crate) fn inspect_hello(buf: &[u8]) -> HelloStep {
    match tlslab_wire::first_handshake_message(buf, MAX_HELLO) {
        Ok(msg) => match tlslab_wire::ClientHello::parse(&msg) {
            Ok(ch) => {
                let offer = Offer::of(&ch);
                HelloStep::Parsed(offer, RawKeys::of(&ch))
            }
            Err(_) => HelloStep::Bad(BadInput::Malformed),
        },
        Err(tlslab_wire::Error::Incomplete { .. }) => HelloStep::Incomplete,
        Err(tlslab_wire::Error::UnexpectedRecord { .. }) => HelloStep::Bad(BadInput::NotTls),
        Err(_) => HelloStep::Bad(if buf.first() == Some(&22) {
            BadInput::Malformed
        } else {
            BadInput::NotTls
        }),
    }
}

pub(crate) async fn read_hello(sock: &mut TcpStream, limit: Duration) -> Hello {
    let mut buf = Vec::with_capacity(2048);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match inspect_hello(&buf) {
            HelloStep::Parsed(offer, raw) => return Hello::Parsed(buf, offer, raw),
            HelloStep::Bad(kind) => return Hello::Bad(buf, kind),
            HelloStep::Incomplete => {}
        }
        let mut chunk = [0u8; 4096];
        match tokio::time::timeout_at(deadline, sock.read(&mut chunk)).await {
            Err(_) => return Hello::Bad(buf, BadInput::Timeout),
            Ok(Ok(0)) | Ok(Err(_)) => return Hello::Bad(buf, BadInput::Truncated),
            Ok(Ok(k)) => buf.extend_from_slice(&chunk[..k]),
        }
    }
}

/// Runs the dispatcher's input handling on `data` and checks it cannot
/// panic: the first half as a client's first bytes, fed to the same
/// [`inspect_hello`] the proxy runs, growing by 7 bytes at a time as from
/// a slow client (ClientHello, routing keys, tag matching against a few
/// prefixes), the rest as the server's reply fed to a learner in 5-byte
/// chunks. The fuzz target (`fuzz/fuzz_targets/dispatch.rs`) and a
/// proptest call this. Compiled only for tests and under the `fuzzing`
/// feature, so it is not part of the public API.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub fn fuzz_entry(data: &[u8]) {
    let mid = data.len() / 2;
    let (client, server) = data.split_at(mid);
    let mut offer = Offer::default();
    let mut end = 0;
    loop {
        end = (end + 7).min(client.len());
        match inspect_hello(&client[..end]) {
            HelloStep::Incomplete if end < client.len() => continue,
            HelloStep::Incomplete | HelloStep::Bad(_) => break,
            HelloStep::Parsed(o, raw) => {
                // Once whole, more bytes (the client's next records) must
                // not change the answer.
                if let HelloStep::Parsed(again, _) = inspect_hello(client) {
                    assert_eq!(again.keys().count(), o.keys().count());
                }
                let tags: [&[u8]; 3] = [&[0x67, 0x6b], &[0], &raw.session_id];
                let _ = raw
                    .all()
                    .filter(|b| tags.iter().any(|t| !t.is_empty() && b.starts_with(t)))
                    .count();
                offer = o;
                break;
            }
        }
    }
    let _ = offer.keys().count();
    let mut l = crate::inspect::ServerLearner::new(offer);
    for c in server.chunks(5) {
        l.feed(c);
    }
    assert!(l.learned.keys.len() <= server.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The ClientHello path the proxy runs ([`inspect_hello`] via
        /// [`fuzz_entry`]) on arbitrary bytes, and on bytes framed as a
        /// handshake record holding a ClientHello-typed message whose
        /// lengths agree, so the parser gets past the framing.
        #[test]
        fn hello_path_never_panics(
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            split in 0usize..100,
        ) {
            fuzz_entry(&junk);
            let mut msg = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
            // A plausible start: legacy version 3.3 and a 32-byte random.
            msg.extend_from_slice(&[3, 3]);
            msg.extend_from_slice(&body);
            let len = msg.len() - 4;
            msg[2] = (len >> 8) as u8;
            msg[3] = len as u8;
            let cut = split.min(msg.len());
            let mut wire = Vec::new();
            for part in [&msg[..cut], &msg[cut..]] {
                wire.extend_from_slice(&[22, 3, 1, (part.len() >> 8) as u8, part.len() as u8]);
                wire.extend_from_slice(part);
            }
            let mut both = wire.clone();
            both.extend_from_slice(&junk);
            fuzz_entry(&both);
            let _ = inspect_hello(&wire);
        }
    }

    /// A real ClientHello from rustls (TLS 1.2 and 1.3 offered).
    fn real_hello() -> Vec<u8> {
        let prov = tlslab_crypto::provider::build(
            &[
                tlslab_crypto::provider::Version::Tls12,
                tlslab_crypto::provider::Version::Tls13,
            ],
            &tlslab_crypto::provider::Algorithms::default(),
        )
        .unwrap();
        let cfg = rustls::ClientConfig::builder_with_provider(prov)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let mut c = rustls::ClientConnection::new(
            std::sync::Arc::new(cfg),
            "example.com".try_into().unwrap(),
        )
        .unwrap();
        let mut out = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn a_real_hello_parses_whole_and_in_pieces() {
        let h = real_hello();
        assert!(matches!(inspect_hello(&h), HelloStep::Parsed(..)));
        for cut in [0, 1, 5, 6, h.len() / 2, h.len() - 1] {
            assert!(
                matches!(inspect_hello(&h[..cut]), HelloStep::Incomplete),
                "{cut}"
            );
        }
    }

    proptest::proptest! {
        /// Single-byte and truncation mutations of a real ClientHello.
        #[test]
        fn mutated_real_hellos_never_panic(
            at in 0usize..4096,
            to in proptest::prelude::any::<u8>(),
            keep in 0usize..4096,
        ) {
            let mut h = real_hello();
            let n = h.len();
            h[at % n] = to;
            h.truncate(1 + keep % n);
            let _ = inspect_hello(&h);
            let mut both = h.clone();
            both.extend_from_slice(&h);
            fuzz_entry(&both);
        }
    }

    #[test]
    fn fuzz_entry_survives_junk() {
        let mut x = 1u64;
        for len in 0..400 {
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            fuzz_entry(&v);
            let mut tls = vec![22, 3, 1, 1, 0, 1, 0, 0, 252];
            tls.extend_from_slice(&v);
            fuzz_entry(&tls);
        }
    }
}
