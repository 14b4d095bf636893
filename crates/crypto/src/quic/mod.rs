//! QUIC without a connection: what a load balancer or an admission check
//! computes from a datagram.
//!
//! - [`lb`]: QUIC-LB connection IDs (draft-ietf-quic-load-balancers-21):
//!   a server's CIDs carry its server ID, in plaintext or under AES-128
//!   (one block, or a four-pass Feistel network), and a balancer reads it
//!   back.
//! - [`initial`]: a client's Initial packets opened with the keys derived
//!   from their DCID (RFC 9001, RFC 9369), and its ClientHello reassembled
//!   across datagrams (`tlslab_wire::quic` does the parsing).

pub mod initial;
pub mod lb;

pub use initial::{
    ClientHeaderKey, HelloReader, InitialError, InitialHello, OpenedInitial, Read,
    ServerInitialKeys, open_initial, open_server_initial, retry_tag_v1,
};
pub use lb::{
    Cid, CidIssuer, Codec, LbConfig, LbConfigError, LbParams, LbRouter, Mode, Route, ServerId,
};
