//! One probe of one target: DNS, TCP connect, a full handshake and a GET,
//! then a second connection offering the first one's session (a resumed
//! handshake, accepted or not) and a GET on it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::HandshakeKind;
use rustls::client::{Resumption, Tls12Resumption};
use rustls::pki_types::ServerName;
use tlslab_crypto::store::ClientSessions;
use tlslab_load::Target;
use tlslab_load::client::{RoundTrips, classify};
use tlslab_runtime::CountingIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::body::{Body, Framing};
use crate::config::{ProbeConfig, parse_target};
use crate::failed::Failed;
use crate::sample::{Phase, Sample, now_ms};
use crate::timed::{micros, resolve, timed};

fn io_failed(e: &std::io::Error) -> Failed {
    Failed(classify(e), e.to_string())
}

/// Probes `url` once. Never fails: a failure is recorded in the sample
/// with its phase and class, and later phases are left empty.
pub async fn probe_target(cfg: &ProbeConfig, url: &str) -> Sample {
    let mut s = Sample {
        target: url.to_string(),
        started_at_ms: now_ms(),
        ..Sample::default()
    };
    let target = match parse_target(url) {
        Ok(t) => t,
        Err(e) => {
            s.fail(Phase::Dns, "bad_url", e);
            return s;
        }
    };
    let start = Instant::now();
    // DNS
    let Some(addr) = resolve(&mut s, cfg.timeout, &target.host, target.port).await else {
        return s;
    };
    let name = match ServerName::try_from(cfg.sni.clone().unwrap_or(target.host.clone())) {
        Ok(n) => n,
        Err(e) => {
            s.fail(Phase::Dns, "bad_server_name", e.to_string());
            return s;
        }
    };
    let sessions = ClientSessions::new();
    let mut tls = (*cfg.tls).clone();
    tls.resumption =
        Resumption::store(sessions.clone()).tls12_resumption(Tls12Resumption::SessionIdOrTickets);
    let connector = TlsConnector::from(Arc::new(tls));

    // First connection: full handshake.
    sessions.set_offer(false);
    let first = match connection(cfg, &connector, &name, addr, &target).await {
        Ok(c) => c,
        Err((phase, Failed(k, m), partial)) => {
            partial.fill_first(&mut s);
            s.fail(phase.first(), k, m);
            return s;
        }
    };
    s.total_us = Some(micros(start.elapsed()));
    first.fill_first(&mut s);
    if let Some(code) = s.status
        && code >= 400
    {
        s.fail(Phase::Get, "http_status", format!("HTTP status {code}"));
    }

    // Second connection: offer the session.
    sessions.set_offer(true);
    let second = connection(cfg, &connector, &name, addr, &target).await;
    s.resumption_offered = Some(sessions.take_offered());
    match second {
        Ok(c) => c.fill_second(&mut s),
        Err((phase, Failed(k, m), partial)) => {
            partial.fill_second(&mut s);
            if s.error_kind.is_none() {
                s.fail(phase.second(), k, m);
            }
        }
    }
    s
}

/// Which step of a connection failed.
#[derive(Clone, Copy)]
enum Step {
    Connect,
    Handshake,
    Get,
}

impl Step {
    fn first(self) -> Phase {
        match self {
            Step::Connect => Phase::Connect,
            Step::Handshake => Phase::TlsFull,
            Step::Get => Phase::Get,
        }
    }

    fn second(self) -> Phase {
        match self {
            Step::Connect => Phase::Connect,
            Step::Handshake => Phase::TlsResumed,
            Step::Get => Phase::Get,
        }
    }
}

/// What one connection measured.
#[derive(Default)]
struct Conn {
    connect: Option<Duration>,
    handshake: Option<Duration>,
    ttfb: Option<Duration>,
    get: Option<Duration>,
    status: Option<u16>,
    body_bytes: Option<u64>,
    resumed: Option<bool>,
    version: Option<String>,
    suite: Option<String>,
    group: Option<String>,
    alpn: Option<String>,
    not_after: Option<i64>,
    chain_len: Option<i64>,
    bytes: Option<i64>,
    round_trips: Option<i64>,
    alt_svc: Option<String>,
}

impl Conn {
    fn fill_first(&self, s: &mut Sample) {
        s.connect_us = self.connect.map(micros);
        s.tls_full_us = self.handshake.map(micros);
        s.ttfb_us = self.ttfb.map(micros);
        s.get_us = self.get.map(micros);
        s.status = self.status;
        s.body_bytes = self
            .body_bytes
            .map(|b| i64::try_from(b).unwrap_or(i64::MAX));
        s.version.clone_from(&self.version);
        s.suite.clone_from(&self.suite);
        s.group.clone_from(&self.group);
        s.alpn.clone_from(&self.alpn);
        s.cert_not_after = self.not_after;
        s.chain_len = self.chain_len;
        s.full_handshake_bytes = self.bytes;
        s.full_handshake_round_trips = self.round_trips;
        s.alt_svc.clone_from(&self.alt_svc);
    }

    fn fill_second(&self, s: &mut Sample) {
        s.resumed_connect_us = self.connect.map(micros);
        s.tls_resumed_us = self.handshake.map(micros);
        s.resumed_get_us = self.get.map(micros);
        s.resumption_accepted = self.resumed;
        s.resumed_handshake_bytes = self.bytes;
        s.resumed_handshake_round_trips = self.round_trips;
    }
}

type ConnResult = Result<Conn, (Step, Failed, Conn)>;

async fn connection(
    cfg: &ProbeConfig,
    connector: &TlsConnector,
    name: &ServerName<'static>,
    addr: SocketAddr,
    target: &Target,
) -> ConnResult {
    let mut c = Conn::default();
    let tcp = match timed(cfg.timeout, async {
        TcpStream::connect(addr).await.map_err(|e| io_failed(&e))
    })
    .await
    {
        Ok((t, d)) => {
            c.connect = Some(d);
            t
        }
        Err(f) => return Err((Step::Connect, f, c)),
    };
    let _ = tcp.set_nodelay(true);
    let io = CountingIo::new(tcp, RoundTrips::default());
    let mut tls = match timed(cfg.timeout, async {
        connector
            .connect(name.clone(), io)
            .await
            .map_err(|e| io_failed(&e))
    })
    .await
    {
        Ok((t, d)) => {
            c.handshake = Some(d);
            t
        }
        Err(f) => return Err((Step::Handshake, f, c)),
    };
    describe(&tls, &mut c);
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tlslab-probe\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        target.path,
        target.host_header()
    );
    match get(&mut tls, req.as_bytes(), cfg.timeout).await {
        Ok(g) => {
            tracing::debug!(
                body_bytes = g.body_bytes,
                held = g.peak_held,
                "GET {} read",
                target.path
            );
            c.status = Some(g.status);
            c.ttfb = Some(g.ttfb);
            c.get = Some(g.total);
            c.body_bytes = Some(g.body_bytes);
            c.alt_svc = g.alt_svc;
        }
        Err(f) => return Err((Step::Get, f, c)),
    }
    Ok(c)
}

fn describe<T>(tls: &TlsStream<CountingIo<T, RoundTrips>>, c: &mut Conn) {
    let (io, conn) = tls.get_ref();
    let (w, r, rt) = io.observer().counts();
    c.bytes = Some(i64::try_from(w + r).unwrap_or(i64::MAX));
    c.round_trips = Some(i64::from(rt));
    c.resumed = Some(conn.handshake_kind() == Some(HandshakeKind::Resumed));
    c.version = conn.protocol_version().map(|v| match v {
        rustls::ProtocolVersion::TLSv1_3 => "1.3".to_string(),
        rustls::ProtocolVersion::TLSv1_2 => "1.2".to_string(),
        other => format!("{other:?}"),
    });
    c.suite = conn
        .negotiated_cipher_suite()
        .and_then(|s| s.suite().as_str())
        .map(str::to_string);
    c.group = conn.negotiated_key_exchange_group().map(|g| {
        g.name()
            .as_str()
            .map_or_else(|| format!("{:?}", g.name()), str::to_string)
    });
    c.alpn = conn
        .alpn_protocol()
        .map(|a| String::from_utf8_lossy(a).into_owned());
    if let Some(chain) = conn.peer_certificates() {
        c.chain_len = Some(i64::try_from(chain.len()).unwrap_or(i64::MAX));
        c.not_after = chain.first().and_then(|leaf| {
            x509_parser::parse_x509_certificate(leaf.as_ref())
                .ok()
                .map(|(_, cert)| cert.validity().not_after.timestamp())
        });
    }
}

/// What a GET measured.
#[derive(Debug)]
struct Got {
    status: u16,
    /// Request written to the first response byte.
    ttfb: Duration,
    /// Request written to the last response byte.
    total: Duration,
    /// Body bytes (chunked: decoded), counted as they stream.
    body_bytes: u64,
    /// The most bytes [`get`] held at once (the head buffer): bounded by
    /// [`MAX_HEAD`] plus one read, whatever the body's size.
    peak_held: usize,
    /// The response's `Alt-Svc` header, if any.
    alt_svc: Option<String>,
}

/// The longest response head read.
const MAX_HEAD: usize = 64 * 1024;

/// How much one read takes.
const READ: usize = 16 * 1024;

/// Writes `req` and reads the response: its status, time to first byte and
/// to last byte (both from the write) and its body's size. The response
/// ends at its Content-Length, after the last chunk and its trailers, or
/// when the server closes. Only the head is buffered (at most
/// [`MAX_HEAD`]); the body is read into a fixed buffer and counted, so a
/// large response costs no memory.
async fn get<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    req: &[u8],
    limit: Duration,
) -> Result<Got, Failed> {
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + limit;
    let run = async {
        s.write_all(req).await.map_err(|e| io_failed(&e))?;
        s.flush().await.map_err(|e| io_failed(&e))?;
        let mut head_buf = Vec::with_capacity(READ);
        let mut chunk = vec![0u8; READ];
        let mut ttfb = None;
        let mut peak_held = 0;
        let mut head: Option<(u16, Body)> = None;
        let mut alt_svc = None;
        loop {
            let n = match s.read(&mut chunk).await {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && head.is_some() => 0,
                Err(e) => return Err(io_failed(&e)),
            };
            if ttfb.is_none() && n > 0 {
                ttfb = Some(start.elapsed());
            }
            let done = match head.as_mut() {
                Some((_, body)) => body.feed(&chunk[..n])?,
                None => {
                    head_buf.extend_from_slice(&chunk[..n]);
                    peak_held = peak_held.max(head_buf.capacity());
                    match parse_head(&head_buf)? {
                        Some((status, body_at, framing, alt)) => {
                            alt_svc = alt;
                            let mut body = Body::new(framing);
                            let done = body.feed(&head_buf[body_at..])?;
                            head_buf = Vec::new();
                            head = Some((status, body));
                            done
                        }
                        None if n == 0 => {
                            return Err(Failed(
                                "http_protocol".into(),
                                "the server closed the connection before a complete response head"
                                    .into(),
                            ));
                        }
                        None => false,
                    }
                }
            };
            if let Some((status, body)) = &head
                && (done || n == 0)
            {
                let ttfb = ttfb.unwrap_or_else(|| start.elapsed());
                return Ok(Got {
                    status: *status,
                    ttfb,
                    total: start.elapsed(),
                    body_bytes: body.bytes,
                    peak_held: peak_held + chunk.len(),
                    alt_svc: alt_svc.take(),
                });
            }
        }
    };
    match tokio::time::timeout_at(deadline, run).await {
        Ok(r) => r,
        Err(_) => Err(Failed(
            "timeout".into(),
            format!("no complete response within {limit:?} (--timeout)"),
        )),
    }
}

/// A response head: its status, where its body starts, the body's
/// framing and its `Alt-Svc` header (the last one, at most 1 KiB kept).
type Head = (u16, usize, Framing, Option<String>);

fn parse_head(buf: &[u8]) -> Result<Option<Head>, Failed> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            return Err(Failed(
                "http_protocol".into(),
                "response head longer than 64 KiB".into(),
            ));
        }
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .filter(|_| status_line.starts_with("HTTP/"))
        .ok_or_else(|| {
            Failed(
                "http_protocol".into(),
                format!("not an HTTP status line: {status_line:.80}"),
            )
        })?;
    let mut framing = Framing::Close;
    let mut alt_svc = None;
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            if let Ok(n) = v.parse() {
                framing = Framing::Length(n);
            }
        } else if k.eq_ignore_ascii_case("transfer-encoding")
            && v.to_ascii_lowercase().contains("chunked")
        {
            framing = Framing::Chunked;
        } else if k.eq_ignore_ascii_case("alt-svc") {
            alt_svc = Some(v.chars().take(1024).collect());
        }
    }
    if status == 204 || status == 304 {
        framing = Framing::Length(0);
    }
    Ok(Some((status, end + 4, framing, alt_svc)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_parsed_for_their_framing() {
        let (st, at, f, alt) = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .ok()
            .flatten()
            .expect("complete head");
        assert_eq!((st, at), (200, 38));
        assert!(matches!(f, Framing::Length(5)));
        assert_eq!(alt, None);
        let (_, _, _, alt) =
            parse_head(b"HTTP/1.1 200 OK\r\nalt-svc: h3=\":8443\"; ma=86400\r\n\r\n")
                .ok()
                .flatten()
                .expect("head");
        assert_eq!(alt.as_deref(), Some("h3=\":8443\"; ma=86400"));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n").ok().flatten().is_none());
        assert!(parse_head(b"SSH-2.0\r\n\r\n").is_err());
        let (_, _, f, _) = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            .ok()
            .flatten()
            .expect("head");
        assert!(matches!(f, Framing::Chunked));
    }

    /// Serves one response on 127.0.0.1: `head`, then `body_len` filler
    /// bytes written 64 KiB at a time, framed as `chunked` (in chunks of
    /// varied sizes, with a trailer) or not, then closes.
    async fn streaming_server(head: String, body_len: usize, chunked: bool) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req).await;
            s.write_all(head.as_bytes()).await.unwrap();
            let block = vec![b'x'; 64 * 1024];
            let mut left = body_len;
            let mut i = 0usize;
            while left > 0 {
                // Chunks of 1 to 64 KiB, so sizes and CRLFs straddle reads.
                let k = left.min(1 + (i * 7919) % block.len());
                i += 1;
                if chunked {
                    let line = format!("{k:x};ext=1\r\n");
                    if s.write_all(line.as_bytes()).await.is_err() {
                        return;
                    }
                }
                if s.write_all(&block[..k]).await.is_err() {
                    return;
                }
                if chunked && s.write_all(b"\r\n").await.is_err() {
                    return;
                }
                left -= k;
            }
            if chunked {
                let _ = s.write_all(b"0\r\nX-Trailer: 1\r\n\r\n").await;
                // Held open: the body's own end must end the read.
                let mut rest = [0u8; 16];
                let _ = s.read(&mut rest).await;
            }
        });
        addr
    }

    /// A large body is counted exactly while [`get`] holds no more than
    /// its head buffer and one read, for every framing.
    #[tokio::test]
    async fn a_large_body_is_counted_in_bounded_memory() {
        const LEN: usize = 48 * 1024 * 1024;
        let cases = [
            (
                format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n"),
                false,
                "content-length",
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_string(),
                true,
                "chunked",
            ),
            (
                "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_string(),
                false,
                "close-delimited",
            ),
        ];
        for (head, chunked, what) in cases {
            let addr = streaming_server(head, LEN, chunked).await;
            let mut s = TcpStream::connect(addr).await.unwrap();
            let g = get(&mut s, b"GET / HTTP/1.1\r\n\r\n", Duration::from_secs(30))
                .await
                .unwrap_or_else(|Failed(k, m)| panic!("{what}: {k}: {m}"));
            assert_eq!(g.status, 200, "{what}");
            assert_eq!(g.body_bytes, LEN as u64, "{what}");
            assert!(
                g.peak_held <= MAX_HEAD + 2 * READ,
                "{what}: held {} bytes for a {LEN}-byte body",
                g.peak_held
            );
        }
    }

    #[test]
    fn chunked_bodies_end_after_their_trailers_and_bad_ones_fail() {
        let mut b = Body::new(Framing::Chunked);
        let wire = b"5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nA: b\r\n\r\n";
        // Byte by byte: every state boundary straddles a feed.
        let mut done = false;
        for c in wire.chunks(1) {
            assert!(!done);
            done = b.feed(c).ok().expect("valid");
        }
        assert!(done);
        assert_eq!(b.bytes, 8);
        let mut b = Body::new(Framing::Chunked);
        assert!(b.feed(b"zz\r\n").is_err());
        let mut b = Body::new(Framing::Chunked);
        assert!(b.feed(b"ffffffffffffffffff\r\n").is_err());
        let mut b = Body::new(Framing::Length(4));
        assert!(b.feed(b"abcdef").ok().expect("valid"));
        assert_eq!(b.bytes, 4);
    }
}
