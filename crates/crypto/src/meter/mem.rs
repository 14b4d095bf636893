//! In-memory TLS: drives a rustls client and server connection against each
//! other through byte buffers, no sockets. Used by the tests and the
//! criterion benches to measure the crypto-only bound of a handshake, and
//! to look at what went over the "wire".

use std::io::{Read, Write};

use rustls::{ClientConnection, ConnectionCommon, ServerConnection};

/// Which side of an in-memory connection failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PumpError {
    /// The client rejected what the server sent (or could not proceed).
    #[error(
        "client side failed: {0}; if an ablation is in use, make sure client and server use the same --ablate set"
    )]
    Client(rustls::Error),
    /// The server rejected what the client sent (or could not proceed).
    #[error(
        "server side failed: {0}; if an ablation is in use, make sure client and server use the same --ablate set"
    )]
    Server(rustls::Error),
    /// Neither side produced bytes but the exchange is not finished.
    #[error(
        "in-memory exchange stalled after {0} rounds with the handshake unfinished; this is a bug in the pump or a peer waiting for input that never comes"
    )]
    Stalled(usize),
}

/// Every byte each side wrote, in order.
#[derive(Clone, Debug, Default)]
pub struct Wire {
    /// Client-to-server bytes (TLS records).
    pub client_to_server: Vec<u8>,
    /// Server-to-client bytes (TLS records).
    pub server_to_client: Vec<u8>,
}

const MAX_ROUNDS: usize = 64;

/// Appends what `conn` wants to write to `out`; returns how many bytes.
fn flush<D>(conn: &mut ConnectionCommon<D>, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    while conn.wants_write() {
        // Writing into a Vec cannot fail.
        if conn.write_tls(out).is_err() {
            break;
        }
    }
    out.len() - start
}

/// Reads `bytes` into `conn` and processes them.
fn feed<D>(conn: &mut ConnectionCommon<D>, mut bytes: &[u8]) -> Result<(), rustls::Error> {
    while !bytes.is_empty() {
        match conn.read_tls(&mut bytes) {
            Ok(0) => break,
            Ok(_) => {
                conn.process_new_packets()?;
            }
            Err(e) => return Err(rustls::Error::General(e.to_string())),
        }
    }
    Ok(())
}

/// Moves bytes between `client` and `server` until neither has anything
/// to send and neither is handshaking (at most 64 rounds), appending every
/// byte written to `wire`. On a failure the failing side's alert is still
/// delivered to its peer, so the peer fails too rather than waiting.
pub fn pump(
    client: &mut ClientConnection,
    server: &mut ServerConnection,
    wire: &mut Wire,
) -> Result<(), PumpError> {
    for _ in 0..MAX_ROUNDS {
        let from = wire.client_to_server.len();
        let c2s = flush(client, &mut wire.client_to_server);
        if let Err(e) = feed(server, &wire.client_to_server[from..]) {
            let from = wire.server_to_client.len();
            flush(server, &mut wire.server_to_client);
            let _ = feed(client, &wire.server_to_client[from..]);
            return Err(PumpError::Server(e));
        }
        let from = wire.server_to_client.len();
        let s2c = flush(server, &mut wire.server_to_client);
        if let Err(e) = feed(client, &wire.server_to_client[from..]) {
            let from = wire.client_to_server.len();
            flush(client, &mut wire.client_to_server);
            let _ = feed(server, &wire.client_to_server[from..]);
            return Err(PumpError::Client(e));
        }
        if c2s == 0 && s2c == 0 {
            if client.is_handshaking() || server.is_handshaking() {
                return Err(PumpError::Stalled(MAX_ROUNDS));
            }
            return Ok(());
        }
    }
    Err(PumpError::Stalled(MAX_ROUNDS))
}

/// An I/O error on one side's plaintext stream, as that side's failure.
fn io_error(side: fn(rustls::Error) -> PumpError) -> impl FnOnce(std::io::Error) -> PumpError {
    move |e| side(rustls::Error::General(e.to_string()))
}

/// Completes a handshake, then sends `request` client→server and
/// `response` server→client as application data and reads them back.
/// Returns the bytes each side received.
pub fn exchange(
    client: &mut ClientConnection,
    server: &mut ServerConnection,
    request: &[u8],
    response: &[u8],
    wire: &mut Wire,
) -> Result<(Vec<u8>, Vec<u8>), PumpError> {
    pump(client, server, wire)?;
    client
        .writer()
        .write_all(request)
        .map_err(io_error(PumpError::Client))?;
    pump(client, server, wire)?;
    let mut got_req = vec![0u8; request.len()];
    server
        .reader()
        .read_exact(&mut got_req)
        .map_err(io_error(PumpError::Server))?;
    server
        .writer()
        .write_all(response)
        .map_err(io_error(PumpError::Server))?;
    pump(client, server, wire)?;
    let mut got_resp = vec![0u8; response.len()];
    client
        .reader()
        .read_exact(&mut got_resp)
        .map_err(io_error(PumpError::Client))?;
    Ok((got_req, got_resp))
}

/// The TLS records in `bytes`: (content type, version, payload). Stops at
/// a truncated record.
pub fn records(bytes: &[u8]) -> Vec<(u8, u16, &[u8])> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if rest.len() < 5 + len {
            break;
        }
        out.push((
            rest[0],
            u16::from_be_bytes([rest[1], rest[2]]),
            &rest[5..5 + len],
        ));
        rest = &rest[5 + len..];
    }
    out
}
