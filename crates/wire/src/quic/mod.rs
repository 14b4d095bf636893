//! QUIC on the wire, without decryption: what a UDP load balancer or an
//! admission check reads from a client's datagrams before any connection
//! state exists.
//!
//! - [`parse_long_header`] and [`coalesced`]: the long header of QUIC
//!   version 1 (RFC 9000 §17.2) and version 2 (RFC 9369 §3.2): version,
//!   connection IDs, the Initial's token, the Length field and where the
//!   (still protected) packet number starts; [`short_header_dcid`] for
//!   1-RTT packets whose connection ID length the reader knows.
//! - [`crypto_frames`]: the CRYPTO frames of a decrypted Initial payload,
//!   skipping PADDING, PING, ACK and CONNECTION_CLOSE (the other frames an
//!   Initial may carry, RFC 9000 Table 3).
//! - [`CryptoStream`] and [`HelloAssembler`]: the ClientHello reassembled
//!   from CRYPTO frames that may span several Initials (rustls's default
//!   ClientHello with X25519MLKEM768 takes two), bounded in bytes, entries
//!   and age, keyed by the client's Destination Connection ID.
//!
//! Removing header protection and decrypting the payload needs keys
//! derived from the DCID: that is `tlslab_crypto::quic`, which calls these
//! parsers. The ClientHello itself goes to [`crate::ClientHello::parse`].

mod assemble;
mod frame;
mod header;

pub use assemble::{AssemblerLimits, AssemblerStats, CryptoStream, HelloAssembler};
pub use frame::{CryptoFrame, CryptoFrames, crypto_frames};
pub use header::{
    Coalesced, LongHeader, MAX_CID_LEN, PacketType, coalesced, parse_long_header, read_varint,
    short_header_dcid, version,
};

/// Why QUIC bytes could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuicError {
    /// The bytes are not a valid QUIC packet or payload.
    #[error(
        "malformed QUIC packet: {what}; the sender is not speaking QUIC v1/v2 correctly (or this is not a QUIC datagram)"
    )]
    Malformed {
        /// What is wrong.
        what: &'static str,
    },
    /// A length is over a protocol or configured limit.
    #[error(
        "{what} of {len} bytes exceeds the limit of {max}; treat the client as misbehaving, or raise the limit"
    )]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The CRYPTO stream of an Initial does not start with a ClientHello.
    #[error(
        "the client's Initial CRYPTO stream starts with handshake message type {found}, not a ClientHello (1); this is not a client's first flight"
    )]
    NotClientHello {
        /// The handshake message type found.
        found: u8,
    },
}
