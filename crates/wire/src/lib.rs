//! TLS on the wire, without decryption: the one place in tlslab that knows
//! the TLS byte layout.
//!
//! This crate is for reading the plaintext parts of a TLS connection from
//! bytes someone else has read (or peeked) off a socket:
//! - [`sniff`]: is this connection TLS, plain HTTP on a TLS port, or junk?
//! - the record layer ([`parse_record_header`], [`records`]) and handshake
//!   messages ([`handshake_messages`], [`Reassembler`] for messages that
//!   span records, [`first_handshake_message`] for a peeked connection start);
//! - [`ClientHello`], [`ServerHello`] (including HelloRetryRequest) and the
//!   TLS 1.2 [`NewSessionTicket`], with the fields a session-aware load
//!   balancer routes on (session ID, ticket, PSK identities, SNI);
//! - [`Tap`]: counting records and plaintext handshake messages in one
//!   direction of a byte stream fed in arbitrary chunks, without buffering.
//!
//! It is not for I/O, decryption, or validating a handshake: it does no
//! cryptography and keeps no state beyond what a caller asks for. Parsers
//! take `&[u8]`, borrow from it, never panic, and report
//! [`Error::Incomplete`] when the bytes stop before the structure ends.

mod ext;
mod handshake;
mod hello;
mod list;
mod reader;
mod record;
mod sniff;
mod tap;

pub use ext::{Extension, Extensions, ExtensionsIter, ext_type};
pub use handshake::{
    DEFAULT_MAX_MESSAGE_LEN, HANDSHAKE_HEADER_LEN, HandshakeHeader, HandshakeMessage,
    HandshakeMessages, HandshakeType, Reassembler, first_handshake_message, handshake_messages,
    parse_handshake, parse_handshake_header,
};
pub use hello::{
    ClientHello, HELLO_RETRY_REQUEST_RANDOM, NewSessionTicket, OfferedPsks, ServerHello, version,
};
pub use list::{KeyShareEntry, List, ListItem, ListIter, PskIdentity, U16List};
pub use record::{
    ContentType, MAX_CIPHERTEXT_LEN, MAX_PLAINTEXT_LEN, RECORD_HEADER_LEN, Record, RecordHeader,
    Records, parse_record, parse_record_header, records,
};
pub use sniff::{Sniff, sniff};
pub use tap::{Tap, TapStats};

/// Why bytes could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes end before the structure does.
    #[error(
        "incomplete TLS data: at least {needed} more bytes are needed; read more and parse again"
    )]
    Incomplete {
        /// A lower bound on how many more bytes are needed.
        needed: usize,
    },
    /// The bytes are not valid TLS.
    #[error(
        "malformed TLS data: {what}; the peer is not speaking TLS correctly (or parsing did not start at a record or message boundary)"
    )]
    Malformed {
        /// What is wrong.
        what: &'static str,
    },
    /// A length is over a protocol or configured limit.
    #[error(
        "{what} of {len} bytes exceeds the limit of {max}; treat the peer as misbehaving, or raise the limit if it is configurable"
    )]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its declared length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A [`Reassembler`] holds more undrained bytes than its bound.
    #[error(
        "handshake reassembler would hold {buffered} bytes (limit {limit}); call next_message until it returns None before pushing more"
    )]
    Backlog {
        /// Bytes that would be buffered.
        buffered: usize,
        /// The bound.
        limit: usize,
    },
    /// A record of another content type came where a handshake was expected.
    #[error(
        "expected a handshake record (22) but found content type {found}; the peer did not start with a TLS handshake"
    )]
    UnexpectedRecord {
        /// The content type found.
        found: u8,
    },
    /// A handshake message of another type came where one was expected.
    #[error(
        "expected handshake message type {expected} but found {found}; pass the right message to this parser"
    )]
    UnexpectedMessage {
        /// The type expected.
        expected: u8,
        /// The type found.
        found: u8,
    },
}

/// Runs every parser in this crate on `data` and checks their invariants;
/// panics only if the crate has a bug. The fuzz target and the property
/// tests call this.
#[doc(hidden)]
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
