//! The fuzzing entry point (`fuzz/fuzz_targets/wire.rs` and the property
//! tests): every parser of the crate on one input, with their invariants
//! asserted. Compiled only for tests and under the `fuzzing` feature, so it
//! is not part of the public API.

use crate::*;

/// Runs every parser in this crate on `data` and checks their invariants;
/// panics only if the crate has a bug. The fuzz target and the property
/// tests call this.
pub fn fuzz_entry(data: &[u8]) {
    let _ = sniff(data);
    let _ = parse_record_header(data);

    // Records, and the handshake messages inside handshake records.
    let mut reasm = Reassembler::new();
    let mut it = records(data);
    for rec in it.by_ref() {
        let Ok(rec) = rec else { break };
        assert_eq!(rec.payload.len(), usize::from(rec.header.length));
        if rec.header.content_type == ContentType::HANDSHAKE {
            for m in handshake_messages(rec.payload) {
                exercise_message(m);
            }
            if reasm.push(rec.payload).is_ok() {
                while let Ok(Some(m)) = reasm.next_message() {
                    exercise_message(m);
                }
            }
        }
    }
    assert!(it.consumed() + it.remainder().len() == data.len());

    match first_handshake_message(data, DEFAULT_MAX_MESSAGE_LEN) {
        Ok(m) => {
            let m = parse_handshake(&m).expect("first_handshake_message returns a whole message");
            exercise_message(m);
        }
        Err(Error::Incomplete { needed }) => assert!(needed > 0),
        Err(_) => {}
    }

    // The data as a bare handshake message stream.
    for m in handshake_messages(data) {
        exercise_message(m);
    }
    check_prefixes(data);

    // A tap must count the same whatever the chunking.
    let mut whole = Tap::new();
    let r_whole = whole.feed(data);
    let mut split = Tap::new();
    let mut r_split = Ok(());
    for c in data.chunks(7) {
        r_split = split.feed(c);
        if r_split.is_err() {
            break;
        }
    }
    assert_eq!(r_whole.is_ok(), r_split.is_ok());
    if r_whole.is_ok() {
        assert_eq!(whole.stats(), split.stats());
    }
}

/// Parses `m` with every message parser and walks every decoded list.
fn exercise_message(m: HandshakeMessage<'_>) {
    if let Ok(ch) = ClientHello::parse_body(m.body) {
        let _ = ch.server_name_str();
        let _ = ch.offers_tls13();
        let _ = ch.offers_ticket_or_psk();
        let _ = ch.key_share_groups().count();
        let _ = ch.cipher_suites.iter().count();
        let _ = ch.extensions.types().count();
        let _ = format!("{ch:?}");
        if let Some(p) = ch.pre_shared_key {
            assert_eq!(p.identities.len(), p.binders_count());
        }
    }
    if let Ok(sh) = ServerHello::parse_body(m.body) {
        let _ = sh.version();
        let _ = format!("{sh:?}");
    }
    let _ = NewSessionTicket::parse_body(m.body);
}

/// A parser given a strict prefix of a message it accepts must say
/// `Incomplete`, never succeed or call it malformed.
fn check_prefixes(data: &[u8]) {
    let Ok(m) = parse_handshake(data) else { return };
    let full = &data[..m.encoded_len()];
    let ch = ClientHello::parse(full).is_ok();
    let sh = ServerHello::parse(full).is_ok();
    let nst = NewSessionTicket::parse(full).is_ok();
    if !(ch || sh || nst) {
        return;
    }
    // Every prefix length would be quadratic on big inputs; sample them.
    let step = (full.len() / 64).max(1);
    for n in (0..full.len()).step_by(step) {
        let p = &full[..n];
        for (ok, r) in [
            (ch, ClientHello::parse(p).map(|_| ())),
            (sh, ServerHello::parse(p).map(|_| ())),
            (nst, NewSessionTicket::parse(p).map(|_| ())),
        ] {
            if ok {
                assert!(
                    matches!(r, Err(Error::Incomplete { needed }) if needed > 0 && needed <= full.len() - n),
                    "prefix {n} of {}: {r:?}",
                    full.len()
                );
            }
        }
    }
}

/// Runs the QUIC parsers (`quic`) on `data` as a datagram, as a decrypted
/// Initial payload, and through the ClientHello reassembler, and checks
/// their invariants; panics only if the crate has a bug. The `quic_initial`
/// fuzz target and the property tests call this.
pub fn fuzz_quic_entry(data: &[u8]) {
    use crate::quic::*;
    use std::time::{Duration, Instant};

    if let Ok(h) = parse_long_header(data) {
        assert!(h.pn_offset <= h.len && h.len <= data.len());
        assert!(h.dcid.len() <= 255 && h.scid.len() <= 255);
        if h.known_version() {
            assert!(h.dcid.len() <= MAX_CID_LEN && h.scid.len() <= MAX_CID_LEN);
        }
    }
    let mut total = 0;
    for p in coalesced(data) {
        let Ok((h, packet)) = p else { break };
        assert_eq!(h.len, packet.len());
        total += packet.len();
    }
    assert!(total <= data.len());
    let _ = short_header_dcid(data, 8);

    // As a decrypted payload: every CRYPTO frame lies inside it.
    let mut stream = CryptoStream::new(4096);
    for f in crypto_frames(data) {
        let Ok(f) = f else { break };
        assert!(f.data.len() <= data.len());
        if stream.push(f.offset, f.data).is_err() {
            break;
        }
    }
    if let Ok(Some(hello)) = stream.client_hello() {
        let len =
            (usize::from(hello[1]) << 16) | (usize::from(hello[2]) << 8) | usize::from(hello[3]);
        assert_eq!(hello.len(), 4 + len);
        for m in handshake_messages(hello) {
            exercise_message(m);
        }
    }

    // Through the reassembler in two halves under two DCIDs, with tight
    // bounds: the counts stay inside them.
    let limits = AssemblerLimits {
        max_entries: 2,
        max_hello_len: 2048,
        max_bytes: 3000,
        expiry: Duration::from_secs(1),
    };
    let mut a = HelloAssembler::new(limits);
    let t = Instant::now();
    let mid = data.len() / 2;
    for (i, part) in [&data[..mid], &data[mid..], data].into_iter().enumerate() {
        let dcid = [i as u8 % 2];
        if let Ok(Some(hello)) = a.push(&dcid, part, t + Duration::from_millis(i as u64)) {
            assert!(hello.len() >= 4 && hello.len() <= limits.max_hello_len);
        }
        assert!(a.len() <= limits.max_entries);
        assert!(a.bytes() <= limits.max_bytes);
    }
    a.purge(t + Duration::from_secs(5));
    assert!(a.is_empty());
    assert_eq!(a.bytes(), 0);
}
