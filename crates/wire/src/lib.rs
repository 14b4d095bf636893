//! TLS on the wire, without decryption: the one place in tlslab that knows
//! the TLS byte layout.
//!
//! This crate is for reading the plaintext parts of a TLS connection from
//! bytes someone else has read (or peeked) off a socket:
//! - [`sniff()`]: is this connection TLS, plain HTTP on a TLS port, or junk?
//! - the record layer ([`parse_record_header`], [`records`]) and handshake
//!   messages ([`handshake_messages`], [`Reassembler`] for messages that
//!   span records, [`first_handshake_message`] for a peeked connection start);
//! - [`ClientHello`], [`ServerHello`] (including HelloRetryRequest) and the
//!   TLS 1.2 [`NewSessionTicket`], with the fields a session-aware load
//!   balancer routes on (session ID, ticket, PSK identities, SNI);
//! - [`Tap`]: counting records and plaintext handshake messages in one
//!   direction of a byte stream fed in arbitrary chunks, without buffering.
//!
//! - [`quic`]: a client's QUIC Initial packets (long header, CRYPTO
//!   frames, the ClientHello reassembled across datagrams), read after
//!   `tlslab_crypto::quic` removed their protection.
//!
//! It is not for I/O, decryption, or validating a handshake: it does no
//! cryptography and keeps no state beyond what a caller asks for. Parsers
//! take `&[u8]`, borrow from it, never panic, and report
//! [`Error::Incomplete`] when the bytes stop before the structure ends.

/// `Debug` for a code-point newtype with a `name()`: the RFC name, or
/// `Type(value)` for values TLS does not define.
macro_rules! debug_by_name {
    ($t:ident) => {
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, concat!(stringify!($t), "({})"), self.0),
                }
            }
        }
    };
}

mod ext;
mod handshake;
mod hello;
mod list;
pub mod quic;
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

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub use fuzzing::{fuzz_entry, fuzz_quic_entry};
