//! 0-RTT on the server: safe requests in early data are answered before
//! the client's Finished; unsafe ones wait for the handshake; a replayed
//! 0-RTT ClientHello is refused early data and falls back to 1-RTT.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rustls::{ClientConfig, ClientConnection};
use tlslab_crypto::provider::Version;
use tlslab_server::{Content, Server};

fn server(g: &tlslab_crypto::pki::Generated) -> Server {
    let mut cfg = config(g, Content::Specweb96);
    cfg.tls.versions = vec![Version::Tls13];
    cfg.tls.max_early_data = 16 * 1024;
    cfg.tls.alpn = vec![b"http/1.1".to_vec()];
    Server::start(cfg).unwrap()
}

fn client(g: &tlslab_crypto::pki::Generated) -> Arc<ClientConfig> {
    let mut c = (*client_config(g, &[Version::Tls13], None, &[b"http/1.1"])).clone();
    c.enable_early_data = true;
    Arc::new(c)
}

fn name() -> rustls::pki_types::ServerName<'static> {
    rustls::pki_types::ServerName::try_from("localhost").unwrap()
}

const GET: &[u8] =
    b"GET /specweb96/class0_4 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

/// A full handshake and one request: leaves 0-RTT tickets in `client`.
fn prime(addr: SocketAddr, client: &Arc<ClientConfig>) {
    let mut conn = ClientConnection::new(client.clone(), name()).unwrap();
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(GET).unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    assert_eq!(split_response(&out).0, 200);
}

/// The client's first flight: ClientHello and `early` as 0-RTT data.
fn first_flight(conn: &mut ClientConnection, early: &[u8]) -> Vec<u8> {
    conn.early_data()
        .expect("the client has a 0-RTT ticket")
        .write_all(early)
        .unwrap();
    let mut flight = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut flight).unwrap();
    }
    flight
}

/// A 0-RTT server, and a client primed with a ticket whose first flight
/// carries `early`: the server, its address, the client and the flight.
fn primed(early: &[u8]) -> (Server, SocketAddr, ClientConnection, Vec<u8>) {
    let g = generated();
    let server = server(&g);
    let addr = server.https_addr().unwrap();
    let client = client(&g);
    prime(addr, &client);
    let mut conn = ClientConnection::new(client, name()).unwrap();
    let flight = first_flight(&mut conn, early);
    (server, addr, conn, flight)
}

/// Reads what the server sends for `window`, without answering it.
fn listen(sock: &mut TcpStream, window: Duration) -> Vec<u8> {
    sock.set_read_timeout(Some(window)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = sock.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    got
}

#[test]
fn a_safe_early_request_is_answered_before_the_clients_finished() {
    let (server, addr, mut conn, flight) = primed(GET);
    // The client never sends its Finished: whatever the server answers
    // was sent before the handshake completed.
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.write_all(&flight).unwrap();
    let got = listen(&mut sock, Duration::from_millis(500));
    eventually("the early request", || {
        server.snapshot().early_data.requests == 1
    });
    // The server's flight and, after it, the response as 0.5-RTT data.
    let mut rest = &got[..];
    while !rest.is_empty() {
        let n = conn.read_tls(&mut rest).unwrap();
        assert!(n > 0);
        conn.process_new_packets().unwrap();
    }
    assert!(conn.is_early_data_accepted());
    let mut out = Vec::new();
    let _ = conn.reader().read_to_end(&mut out);
    let (status, body, _) = split_response(&out);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    assert_eq!(body.len(), tlslab_workload::specweb96::size(0, 4));
    drop(sock);
    let snap = server.shutdown();
    assert_eq!(
        snap.early_data.connections, 0,
        "the handshake never completed"
    );
    assert_eq!(snap.early_data.refused, 0);
    assert_eq!(snap.requests.https, 2);
}

#[test]
fn an_unsafe_early_request_waits_for_the_handshake() {
    let post = b"POST /specweb96/class0_4 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi";
    let (server, addr, mut conn, flight) = primed(post);
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.write_all(&flight).unwrap();
    // Without the client's Finished, no request is run.
    let got = listen(&mut sock, Duration::from_millis(500));
    assert_eq!(server.snapshot().requests.https, 1, "the POST ran early");
    let mut rest = &got[..];
    while !rest.is_empty() {
        conn.read_tls(&mut rest).unwrap();
        conn.process_new_packets().unwrap();
    }
    assert!(conn.is_early_data_accepted());
    assert!(!conn.is_handshaking());
    // The Finished completes the handshake; then the POST is answered.
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.flush().unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    assert_eq!(
        split_response(&out).0,
        405,
        "{}",
        String::from_utf8_lossy(&out)
    );
    let snap = server.shutdown();
    assert_eq!(snap.requests.https, 2);
    assert_eq!(snap.early_data.requests, 0);
    assert_eq!(snap.early_data.connections, 1);
    assert_eq!(snap.early_data.bytes, post.len() as u64);
}

#[test]
fn a_replayed_zero_rtt_client_hello_is_refused_early_data() {
    let (server, addr, mut conn, flight) = primed(GET);

    // The original: accepted, answered in early data.
    let mut original = TcpStream::connect(addr).unwrap();
    original.write_all(&flight).unwrap();
    let _ = listen(&mut original, Duration::from_millis(300));
    drop(original);
    eventually("the early request", || {
        server.snapshot().early_data.requests == 1
    });

    // The same bytes again: the single-use ticket is spent, so no early
    // data; the handshake falls back to a full 1-RTT one, which the client
    // (holding the key share) completes, and then it resends.
    let mut replay = TcpStream::connect(addr).unwrap();
    replay
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    replay.write_all(&flight).unwrap();
    let tls = rustls::Stream::new(&mut conn, &mut replay);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(tls.sock).unwrap();
    }
    assert!(!conn.is_early_data_accepted(), "the replay got 0-RTT");
    let mut tls = rustls::Stream::new(&mut conn, &mut replay);
    tls.write_all(GET).unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    assert_eq!(split_response(&out).0, 200);
    assert_eq!(
        conn.handshake_kind(),
        Some(rustls::HandshakeKind::Full),
        "the replay resumed"
    );
    let snap = server.shutdown();
    assert_eq!(snap.early_data.refused, 1, "{snap:?}");
    assert_eq!(snap.early_data.requests, 1, "the replay ran early");
    assert_eq!(snap.requests.https, 3);
    let text = snap.summary();
    assert!(text.contains("1 offers refused"), "{text}");
}
