//! Parses real handshake bytes produced by rustls, driven in memory.

use rustls::HandshakeKind;
use tlslab_wire::{
    ClientHello, DEFAULT_MAX_MESSAGE_LEN, Error, HandshakeType, NewSessionTicket, ServerHello,
    Sniff, Tap, first_handshake_message, sniff, version,
};

mod support;
use support::*;

#[test]
fn tls13_full_then_resumed() {
    let (cc, sc) = Setup::new(TLS13).configs();
    let full = handshake(&cc, &sc);
    assert_eq!(full.kind, Some(HandshakeKind::Full));
    assert_eq!(sniff(&full.c2s), Sniff::TlsHandshake);
    assert_eq!(sniff(&full.s2c), Sniff::TlsHandshake);

    let chm = client_hello(&full.c2s);
    let ch = ClientHello::parse(&chm).unwrap();
    assert_eq!(ch.legacy_version, version::TLS12);
    assert_eq!(ch.server_name_str(), Some("localhost"));
    assert_eq!(ch.session_id.len(), 32, "TLS 1.3 compatibility session id");
    assert!(ch.offers_tls13());
    let alpn: Vec<&[u8]> = ch.alpn.unwrap().iter().collect();
    assert_eq!(alpn, vec![&b"h2"[..], b"http/1.1"]);
    assert!(ch.cipher_suites.contains(&0x1301));
    assert!(ch.supported_groups.unwrap().contains(&X25519));
    assert!(ch.key_share_groups().count() >= 1);
    assert!(ch.signature_algorithms.unwrap().contains(&0x0403));
    assert!(ch.pre_shared_key.is_none());
    assert!(!ch.offers_ticket_or_psk());
    assert_eq!(ch.compression_methods, &[0]);

    let msgs = plaintext_messages(&full.s2c, false);
    assert_eq!(
        msgs.len(),
        1,
        "only the ServerHello is plaintext in TLS 1.3"
    );
    let sh = ServerHello::parse(&msgs[0].1).unwrap();
    assert!(!sh.is_hello_retry_request);
    assert_eq!(sh.version(), version::TLS13);
    assert_eq!(sh.selected_version, Some(version::TLS13));
    assert_eq!(
        sh.session_id, ch.session_id,
        "TLS 1.3 echoes the session id"
    );
    assert_eq!(sh.cipher_suite, full.suite);
    assert_eq!(sh.key_share_group, full.group);
    assert!(ch.key_share_groups().any(|g| Some(g) == sh.key_share_group));
    assert_eq!(sh.pre_shared_key, None);
    // In TLS 1.3 ALPN is in EncryptedExtensions, not the ServerHello.
    assert_eq!(sh.alpn, None);

    let resumed = handshake(&cc, &sc);
    assert_eq!(resumed.kind, Some(HandshakeKind::Resumed));
    let chm = client_hello(&resumed.c2s);
    let ch = ClientHello::parse(&chm).unwrap();
    assert!(ch.offers_ticket_or_psk());
    let psk = ch.pre_shared_key.unwrap();
    let ids: Vec<_> = psk.identities.iter().collect();
    assert_eq!(ids.len(), 1);
    assert!(!ids[0].identity.is_empty());
    assert_eq!(psk.binders_count(), 1);
    assert!(psk.binders.iter().all(|b| b.len() == 32 || b.len() == 48));
    assert!(ch.psk_key_exchange_modes.unwrap().contains(&1));
    assert_eq!(
        ch.extensions.types().last(),
        Some(tlslab_wire::ext_type::PRE_SHARED_KEY)
    );
    let s_msgs = plaintext_messages(&resumed.s2c, false);
    let sh = ServerHello::parse(&s_msgs[0].1).unwrap();
    assert_eq!(sh.pre_shared_key, Some(0));
}

#[test]
fn tls13_hello_retry_request() {
    // The client sends an x25519 share; the server only accepts P-256.
    let (cc, sc) = Setup::hello_retry().configs();
    let t = handshake(&cc, &sc);
    assert_eq!(t.kind, Some(HandshakeKind::FullWithHelloRetryRequest));

    let c_msgs = plaintext_messages(&t.c2s, false);
    let hellos: Vec<ClientHello<'_>> = c_msgs
        .iter()
        .filter(|(ty, _)| *ty == HandshakeType::CLIENT_HELLO)
        .map(|(_, m)| ClientHello::parse(m).unwrap())
        .collect();
    assert_eq!(hellos.len(), 2);
    assert_eq!(
        hellos[0].key_share_groups().collect::<Vec<_>>(),
        vec![X25519]
    );
    assert_eq!(
        hellos[1].key_share_groups().collect::<Vec<_>>(),
        vec![SECP256R1]
    );

    let s_msgs = plaintext_messages(&t.s2c, false);
    assert_eq!(s_msgs.len(), 2, "HelloRetryRequest and ServerHello");
    let hrr = ServerHello::parse(&s_msgs[0].1).unwrap();
    assert!(hrr.is_hello_retry_request);
    assert_eq!(hrr.key_share_group, Some(SECP256R1));
    assert_eq!(hrr.selected_version, Some(version::TLS13));
    let sh = ServerHello::parse(&s_msgs[1].1).unwrap();
    assert!(!sh.is_hello_retry_request);
    assert_eq!(sh.key_share_group, Some(SECP256R1));

    // The tap sees both hellos in each direction, across the compat CCS.
    let mut tap = Tap::new();
    tap.feed(&t.c2s).unwrap();
    assert_eq!(tap.stats().messages_of(HandshakeType::CLIENT_HELLO), 2);
    assert_eq!(tap.stats().protected_handshake_records, 0);
    let mut tap = Tap::new();
    for b in t.s2c.chunks(3) {
        tap.feed(b).unwrap();
    }
    assert_eq!(tap.stats().messages_of(HandshakeType::SERVER_HELLO), 2);
    assert_eq!(tap.stats().handshake_messages, 2);
    assert!(tap.stats().application_data_records >= 1);
}

#[test]
fn tls12_session_id_resumption() {
    let (cc, sc) = Setup::new(TLS12).configs();
    let full = handshake(&cc, &sc);
    assert_eq!(full.kind, Some(HandshakeKind::Full));
    let ch = client_hello(&full.c2s);
    let ch = ClientHello::parse(&ch).unwrap();
    assert!(!ch.offers_tls13());
    assert_eq!(ch.session_ticket, Some(&[][..]), "asks for a ticket");
    let s_msgs = plaintext_messages(&full.s2c, true);
    let sh = ServerHello::parse(&s_msgs[0].1).unwrap();
    assert_eq!(sh.version(), version::TLS12);
    assert_eq!(sh.selected_version, None);
    assert_eq!(sh.cipher_suite, full.suite);
    assert_eq!(sh.alpn, Some(&b"http/1.1"[..]));
    assert!(sh.extended_master_secret);
    assert!(!sh.session_ticket, "no ticketer: no ticket");
    assert_eq!(sh.session_id.len(), 32, "stateful cache assigns an id");
    let types: Vec<HandshakeType> = s_msgs.iter().map(|m| m.0).collect();
    assert_eq!(
        types,
        [
            HandshakeType::SERVER_HELLO,
            HandshakeType::CERTIFICATE,
            HandshakeType::SERVER_KEY_EXCHANGE,
            HandshakeType::SERVER_HELLO_DONE
        ]
    );

    let resumed = handshake(&cc, &sc);
    assert_eq!(resumed.kind, Some(HandshakeKind::Resumed));
    let ch2 = client_hello(&resumed.c2s);
    let ch2 = ClientHello::parse(&ch2).unwrap();
    assert_eq!(ch2.session_id, sh.session_id, "offers the cached session");
    let s_msgs2 = plaintext_messages(&resumed.s2c, true);
    let sh2 = ServerHello::parse(&s_msgs2[0].1).unwrap();
    assert_eq!(sh2.session_id, sh.session_id, "server resumes it");
}

#[test]
fn tls12_ticket_resumption_and_tap() {
    let mut setup = Setup::new(TLS12);
    setup.tickets = true;
    let (cc, sc) = setup.configs();
    let full = handshake(&cc, &sc);
    let s_msgs = plaintext_messages(&full.s2c, true);
    let sh = ServerHello::parse(&s_msgs[0].1).unwrap();
    assert!(sh.session_ticket, "server promises a ticket");
    let nst = s_msgs
        .iter()
        .find(|m| m.0 == HandshakeType::NEW_SESSION_TICKET)
        .expect("a plaintext NewSessionTicket");
    let nst = NewSessionTicket::parse(&nst.1).unwrap();
    assert!(!nst.ticket.is_empty());
    assert!(nst.lifetime_hint > 0);

    // Count the server flight: SH, Certificate, SKE, SHD, then NST, CCS and
    // the encrypted Finished.
    let mut tap = Tap::new();
    for b in full.s2c.chunks(5) {
        tap.feed(b).unwrap();
    }
    let st = tap.stats();
    assert_eq!(st.handshake_messages, 5);
    assert_eq!(st.messages_of(HandshakeType::NEW_SESSION_TICKET), 1);
    assert_eq!(st.change_cipher_spec_records, 1);
    assert_eq!(st.protected_handshake_records, 1);
    assert_eq!(st.record_bytes, full.s2c.len() as u64);
    let mut ctap = Tap::new();
    ctap.feed(&full.c2s).unwrap();
    // ClientHello, ClientKeyExchange; the Finished is protected.
    assert_eq!(ctap.stats().handshake_messages, 2);
    assert_eq!(ctap.stats().protected_handshake_records, 1);

    let resumed = handshake(&cc, &sc);
    assert_eq!(resumed.kind, Some(HandshakeKind::Resumed));
    let ch = client_hello(&resumed.c2s);
    let ch = ClientHello::parse(&ch).unwrap();
    assert_eq!(
        ch.session_ticket,
        Some(nst.ticket),
        "offers the issued ticket"
    );
    assert!(ch.offers_ticket_or_psk());
}

/// Every strict prefix of a real first flight is Incomplete, never an error
/// or a wrong success, at both the record and the message level.
#[test]
fn every_prefix_is_incomplete() {
    let (cc, sc) = Setup::new(BOTH).configs();
    let t = handshake(&cc, &sc);
    let (first, n) = tlslab_wire::parse_record(&t.c2s).unwrap();
    let record = &t.c2s[..n];
    let msg = client_hello(record);
    assert_eq!(&msg[..], first.payload);
    ClientHello::parse(&msg).unwrap();
    for k in 0..record.len() {
        match first_handshake_message(&record[..k], DEFAULT_MAX_MESSAGE_LEN) {
            Err(Error::Incomplete { needed }) => assert!(needed >= 1 && needed <= n - k),
            other => panic!("record prefix {k}: {other:?}"),
        }
        assert_ne!(
            sniff(&record[..k]),
            Sniff::NotTls {
                looks_like_http: false
            }
        );
    }
    for k in 0..msg.len() {
        match ClientHello::parse(&msg[..k]) {
            Err(Error::Incomplete { needed }) => {
                assert_eq!(needed, if k < 4 { 4 - k } else { msg.len() - k })
            }
            other => panic!("message prefix {k}: {other:?}"),
        }
    }
    let sh = &plaintext_messages(&t.s2c, false)[0].1;
    ServerHello::parse(sh).unwrap();
    for k in 0..sh.len() {
        assert!(matches!(
            ServerHello::parse(&sh[..k]),
            Err(Error::Incomplete { .. })
        ));
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    Set(usize, u8),
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
}

fn apply(data: &mut Vec<u8>, m: &Mutation) {
    let len = data.len().max(1);
    match m {
        Mutation::Set(i, b) => {
            if let Some(x) = data.get_mut(i % len) {
                *x = *b;
            }
        }
        Mutation::Flip(i, bit) => {
            if let Some(x) = data.get_mut(i % len) {
                *x ^= 1 << (bit % 8);
            }
        }
        Mutation::Truncate(n) => data.truncate(n % len),
        Mutation::Insert(i, bytes) => {
            let at = i % (data.len() + 1);
            data.splice(at..at, bytes.iter().copied());
        }
        Mutation::Remove(i, n) => {
            let at = i % len;
            let end = (at + n % 16).min(data.len());
            if at < end {
                data.drain(at..end);
            }
        }
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
            4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
            1 => any::<usize>().prop_map(Mutation::Truncate),
            1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
                .prop_map(|(i, v)| Mutation::Insert(i, v)),
            1 => (any::<usize>(), any::<usize>()).prop_map(|(i, n)| Mutation::Remove(i, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
            tlslab_wire::fuzz_entry(&data);
        }

        #[test]
        fn random_bytes_behind_a_handshake_header_never_panic(
            t in 0u8..26,
            body in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let n = body.len() as u32;
            let mut msg = vec![t, (n >> 16) as u8, (n >> 8) as u8, n as u8];
            msg.extend(body);
            tlslab_wire::fuzz_entry(&msg);
            let mut rec = vec![22, 3, 1, (msg.len() >> 8) as u8, msg.len() as u8];
            rec.extend(msg);
            tlslab_wire::fuzz_entry(&rec);
        }

        #[test]
        fn mutated_real_handshakes_never_panic(
            pick in any::<usize>(),
            muts in proptest::collection::vec(mutation(), 1..6),
        ) {
            let c = corpus();
            let mut data = c[pick % c.len()].clone();
            for m in &muts {
                apply(&mut data, m);
            }
            tlslab_wire::fuzz_entry(&data);
        }

        /// A mutated ClientHello either parses or fails; when it parses, its
        /// decoded fields lie inside the message (they borrow from it).
        #[test]
        fn mutated_client_hello_borrows_from_input(
            pick in any::<usize>(),
            muts in proptest::collection::vec(mutation(), 1..4),
        ) {
            let hellos: Vec<&Vec<u8>> = corpus().iter().filter(|m| m.first() == Some(&1)).collect();
            let mut data = hellos[pick % hellos.len()].clone();
            for m in &muts {
                apply(&mut data, m);
            }
            if let Ok(ch) = ClientHello::parse(&data) {
                let range = data.as_ptr_range();
                for s in [Some(ch.session_id), ch.server_name, ch.session_ticket].into_iter().flatten() {
                    prop_assert!(range.start <= s.as_ptr() && s.as_ptr_range().end <= range.end);
                }
                if let Some(p) = ch.pre_shared_key {
                    for id in p.identities {
                        prop_assert!(!id.identity.is_empty());
                    }
                }
            }
        }
    }
}
