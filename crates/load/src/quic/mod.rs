//! QUIC pieces beside the load engine: the HTTP/3 client's connection
//! pieces ([`http3`]: its TLS configuration, counting verifier, transport,
//! error classes and one timed GET), shared by `load --h3` (the engine's
//! HTTP/3 connections, behind the same seam as HTTP/1.1 and HTTP/2) and by
//! `tlslab-probe`; and the bounded flood `load --h3 --flood` sends beside
//! the load ([`flood`], with its PING-only clients).

pub mod flood;
pub mod http3;
mod ping;
