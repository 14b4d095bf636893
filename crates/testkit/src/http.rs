//! Talking to a listener by hand: a bounded HTTP/1.0 GET, the Prometheus
//! `/metrics` text parsed into samples, a raw TCP exchange, and a rustls
//! client configuration for a test CA.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// A minimal blocking HTTP/1.0 GET (no TLS): status and body. Enough for
/// `/metrics` and `/health` without external clients.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_http_response(&raw)
}

/// Splits a raw HTTP/1.x response into status and body (de-chunked if the
/// response was chunked).
pub fn parse_http_response(raw: &[u8]) -> std::io::Result<(u16, String)> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let status: u16 = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body).ok_or_else(|| bad("bad chunked body"))?
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// Decodes an HTTP/1.1 chunked body.
pub fn dechunk(mut s: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        s = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// One Prometheus sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Metric name (with `_total` etc.).
    pub name: String,
    /// Labels, in order.
    pub labels: Vec<(String, String)>,
    /// Value.
    pub value: f64,
}

/// Parsed Prometheus text exposition.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Every sample.
    pub samples: Vec<Sample>,
}

impl Metrics {
    /// `tlslab_transport_handshakes_total{transport="quic",kind}`: serve
    /// --h3's handshakes of one kind.
    pub fn quic_handshakes(&self, kind: &str) -> f64 {
        self.count(
            "tlslab_transport_handshakes_total",
            &[("transport", "quic"), ("kind", kind)],
        )
    }

    /// Parses the text format (comments skipped; lines that do not parse
    /// are ignored).
    pub fn parse(text: &str) -> Metrics {
        let samples = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(parse_sample)
            .collect();
        Metrics { samples }
    }

    /// The sum over every series of `name` whose labels include all of
    /// `labels`; `None` if no series matches.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut found = None;
        for s in self.samples.iter().filter(|s| s.name == name) {
            let all = labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v));
            if all {
                *found.get_or_insert(0.0) += s.value;
            }
        }
        found
    }

    /// Like [`get`](Self::get) with a missing series read as 0 (counters
    /// with labels appear only once incremented).
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }

    /// The series of `name`, for messages.
    pub fn series(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = open + line[open..].find('}')?;
            (
                &line[..open],
                parse_labels(&line[open + 1..close])?,
                &line[close + 1..],
            )
        }
        None => {
            let (n, r) = line.split_once(' ')?;
            (n, Vec::new(), r)
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.trim().to_string(),
        labels,
        value,
    })
}

fn parse_labels(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let (k, after) = rest.split_once('=')?;
        let after = after.strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => {
                    let (_, e) = chars.next()?;
                    value.push(match e {
                        'n' => '\n',
                        other => other,
                    });
                }
                '"' => break i,
                c => value.push(c),
            }
        };
        out.push((k.trim().to_string(), value));
        rest = after[end + 1..].trim_start_matches([',', ' ']);
    }
    Some(out)
}

/// Sends `bytes` on a fresh TCP connection to `addr`, optionally closes the
/// write half, and waits (≤ `limit`) for the peer to close. Returns what
/// the peer sent back and whether it closed (EOF or reset) in time.
pub fn raw_exchange(
    addr: SocketAddr,
    bytes: &[u8],
    shutdown_write: bool,
    limit: Duration,
) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(limit)).expect("set timeout");
    s.write_all(bytes).expect("write raw bytes");
    if shutdown_write {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + limit;
    loop {
        if Instant::now() >= deadline {
            return (got, false);
        }
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (got, false);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Reset or aborted: the peer closed.
            Err(_) => return (got, true),
        }
    }
}

/// A rustls client configuration that trusts the CA certificates in the
/// PEM file `ca` and offers ALPN `alpn` only.
pub fn tls_client(ca: &Path, alpn: &[u8]) -> rustls::ClientConfig {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("the CA PEM") {
        roots
            .add(c.expect("a CA certificate"))
            .expect("a usable CA");
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("rustls's default versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    config
}

/// `GET /health` over HTTPS (HTTP/1.1, `Connection: close`) to `addr`,
/// trusting the CA in `ca`: the whole response as text (empty if the
/// server closed first), read within 10 s.
pub fn https_get_health(addr: SocketAddr, ca: &Path) -> String {
    let config = std::sync::Arc::new(tls_client(ca, b"http/1.1"));
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let conn = rustls::ClientConnection::new(config, name).expect("a TLS client");
    let wait = Duration::from_secs(10);
    let tcp = TcpStream::connect_timeout(&addr, wait).expect("connect");
    tcp.set_read_timeout(Some(wait)).expect("a read timeout");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("send the request");
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

/// The value of the sample line that starts with `prefix` (its name and
/// labels as printed); fails the test, showing the text, if there is none.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("no sample {prefix} in:\n{text}"))
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("sample {prefix} has no number in:\n{text}"))
}

/// Sends `bytes` on a fresh connection, half-closes if asked, and returns
/// everything the server sent until it closed (or 5 s passed).
pub fn raw(addr: SocketAddr, bytes: &[u8], half_close: bool) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    if half_close {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// One read from `s` within `limit`: what it read (empty at EOF), or the
/// error (a timeout when nothing came).
pub fn read_within(s: &mut TcpStream, limit: Duration) -> std::io::Result<Vec<u8>> {
    s.set_read_timeout(Some(limit))?;
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf)?;
    Ok(buf[..n].to_vec())
}

/// A plain HTTP/1.1 GET with `Connection: close`; returns (status, body).
pub fn plain_get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let resp = raw(addr, req.as_bytes(), false);
    split_response(&resp)
}

pub fn split_response(resp: &[u8]) -> (u16, Vec<u8>, String) {
    let end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(resp)));
    let head = String::from_utf8_lossy(&resp[..end]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, resp[end + 4..].to_vec(), head)
}
