//! `tlslab probe exporter`: a blackbox_exporter-style endpoint. Each
//! `GET /probe?target=URL` runs one round against URL and answers with its
//! Prometheus metrics (text exposition format 0.0.4).
//!
//! Its HTTP listener is bounded ([`Limits`]): a client has
//! [`Limits::request_timeout`] to send each request head (the first, and
//! each next one on a kept-alive connection), and at most
//! [`Limits::max_connections`] are open; at the limit a new client closes
//! the connection idle longest (one not running a probe), so idle and
//! slowloris connections cannot lock a scraper out.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::config::{ProbeConfig, parse_target};
use crate::sample::{Phase, Sample};
use crate::transport::probe_each;

/// One metric family: its HELP text and its series (`labels value`).
struct Family {
    help: &'static str,
    series: Vec<String>,
}

/// The metrics of one probe's samples (one per transport), as the
/// exporter returns them: every series is labelled `transport="tcp"` or
/// `transport="h3"`, and each family's HELP and TYPE come once.
pub fn metrics(samples: &[Sample]) -> String {
    // Family name → its help and series, in the order first seen.
    let mut order: Vec<&'static str> = Vec::new();
    let mut families: HashMap<&'static str, Family> = HashMap::new();
    let mut add = |name: &'static str, help: &'static str, labels: String, v: Option<f64>| {
        let Some(v) = v else { return };
        let f = families.entry(name).or_insert_with(|| {
            order.push(name);
            Family {
                help,
                series: Vec::new(),
            }
        });
        f.series.push(format!("{name}{{{labels}}} {v}"));
    };
    for s in samples {
        let tr = format!("transport=\"{}\"", s.transport.name());
        for p in [
            Phase::Dns,
            Phase::Connect,
            Phase::TlsFull,
            Phase::TlsResumed,
            Phase::Ttfb,
            Phase::ZeroRttTtfb,
            Phase::Total,
        ] {
            add(
                "tlslab_probe_phase_seconds",
                "Duration of each probe phase, client-observed (over h3: quic_full, quic_resumed, ttfb_1rtt, get_0rtt_first_byte).",
                format!("{tr},phase=\"{}\"", p.label(s.transport)),
                s.phase_us(p).map(|us| us as f64 / 1e6),
            );
        }
        // Plain gauges: name, help, value (absent when not measured).
        #[rustfmt::skip]
        let gauges: [(&'static str, &'static str, Option<f64>); 7] = [
            ("tlslab_probe_resumption_accepted", "1 if the server accepted the session offered on the second connection.", s.resumption_accepted.map(|a| f64::from(u8::from(a)))),
            ("tlslab_probe_early_data_accepted", "Over h3: 1 if the server accepted the resumed connection's 0-RTT GET.", s.early_data_accepted.map(|a| f64::from(u8::from(a)))),
            ("tlslab_probe_success", "1 if every phase of the probe succeeded.", Some(if s.error_kind.is_none() { 1.0 } else { 0.0 })),
            ("tlslab_probe_http_body_bytes", "Body bytes of the GET response on the first connection.", s.body_bytes.map(|b| b as f64)),
            ("tlslab_probe_ssl_earliest_cert_expiry", "The leaf certificate's not-after, Unix seconds.", s.cert_not_after.map(|t| t as f64)),
            ("tlslab_probe_handshake_round_trips", "Round trips of the full handshake (TCP only).", s.full_handshake_round_trips.map(|t| t as f64)),
            ("tlslab_probe_handshake_bytes", "Socket bytes (over h3: UDP bytes), both ways, of the full handshake.", s.full_handshake_bytes.map(|t| t as f64)),
        ];
        for (name, help, v) in gauges {
            add(name, help, tr.clone(), v);
        }
        if let Some(v) = &s.version {
            let labels = format!(
                "{tr},version=\"{}\",suite=\"{}\",group=\"{}\"",
                esc(v),
                esc(s.suite.as_deref().unwrap_or("")),
                esc(s.group.as_deref().unwrap_or(""))
            );
            add(
                "tlslab_probe_tls_version_info",
                "The negotiated TLS version.",
                labels,
                Some(1.0),
            );
        }
        if let Some(k) = &s.error_kind {
            let labels = format!(
                "{tr},phase=\"{}\",kind=\"{}\"",
                esc(s.error_phase.as_deref().unwrap_or("")),
                esc(k)
            );
            add(
                "tlslab_probe_error_info",
                "The failed phase and error class.",
                labels,
                Some(1.0),
            );
        }
    }
    let mut out = String::new();
    for name in order {
        let f = &families[name];
        let _ = writeln!(out, "# HELP {name} {}", f.help);
        let _ = writeln!(out, "# TYPE {name} gauge");
        for line in &f.series {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn target_param(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == "target").then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

async fn handle(
    cfg: ProbeConfig,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into()));
    }
    match req.uri().path() {
        "/probe" => match target_param(req.uri().query()) {
            Some(t) if !t.is_empty() => {
                if let Err(e) = parse_target(&t) {
                    return Ok(reply(StatusCode::BAD_REQUEST, format!("{e}\n")));
                }
                let s = probe_each(&cfg, &t, None).await;
                Ok(reply(StatusCode::OK, metrics(&s)))
            }
            _ => Ok(reply(
                StatusCode::BAD_REQUEST,
                "missing ?target=URL, e.g. /probe?target=https://example.com/\n".into(),
            )),
        },
        "/" | "/health" => Ok(reply(
            StatusCode::OK,
            "tlslab probe exporter: GET /probe?target=URL\n".into(),
        )),
        _ => Ok(reply(
            StatusCode::NOT_FOUND,
            "not found; use /probe?target=URL\n".into(),
        )),
    }
}

/// Bounds on the exporter's HTTP listener.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once; at the limit a new one closes the one
    /// idle longest, or is refused (503) if every one runs a probe.
    pub max_connections: usize,
    /// Time a client has to send a whole request head, the first on a
    /// connection and each next one (so it is also the keep-alive idle
    /// timeout).
    pub request_timeout: Duration,
}

/// The default [`Limits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// The default [`Limits::request_timeout`]: 10 s, shorter than nginx's
/// `client_header_timeout` (60 s) because a scraper sends its request at
/// once.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// One open connection: whether it runs a request, since when it is idle,
/// and how to close it.
struct Entry {
    busy: usize,
    idle_since: Instant,
    close: Arc<Notify>,
}

/// The open connections, for the limit and for closing the idle first.
#[derive(Default)]
struct Conns {
    open: parking_lot::Mutex<HashMap<u64, Entry>>,
}

impl Conns {
    /// Admits a new connection: under the limit at once; at it, by closing
    /// the connection idle longest. `None`: every slot runs a probe.
    fn admit(&self, id: u64, max: usize) -> Option<Arc<Notify>> {
        let mut open = self.open.lock();
        if open.len() >= max {
            let victim = open
                .iter()
                .filter(|(_, e)| e.busy == 0)
                .min_by_key(|(_, e)| e.idle_since)
                .map(|(k, _)| *k)?;
            if let Some(e) = open.remove(&victim) {
                e.close.notify_one();
            }
        }
        let close = Arc::new(Notify::new());
        open.insert(
            id,
            Entry {
                busy: 0,
                idle_since: Instant::now(),
                close: close.clone(),
            },
        );
        Some(close)
    }

    fn set_busy(&self, id: u64, busy: bool) {
        if let Some(e) = self.open.lock().get_mut(&id) {
            if busy {
                e.busy += 1;
            } else {
                e.busy = e.busy.saturating_sub(1);
                e.idle_since = Instant::now();
            }
        }
    }

    fn remove(&self, id: u64) {
        self.open.lock().remove(&id);
    }
}

/// Marks a connection busy while a request runs (idle again when dropped,
/// also if the request is cancelled).
struct Busy {
    conns: Arc<Conns>,
    id: u64,
}

impl Busy {
    fn new(conns: Arc<Conns>, id: u64) -> Self {
        conns.set_busy(id, true);
        Busy { conns, id }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.conns.set_busy(self.id, false);
    }
}

/// Serves `/probe?target=URL` on `listener` with the default [`Limits`]
/// until the task is dropped.
pub async fn serve(listener: TcpListener, cfg: ProbeConfig) -> std::io::Result<()> {
    serve_with(listener, cfg, Limits::default()).await
}

/// Serves `/probe?target=URL` on `listener` within `limits` until the task
/// is dropped.
pub async fn serve_with(
    listener: TcpListener,
    cfg: ProbeConfig,
    limits: Limits,
) -> std::io::Result<()> {
    let conns = Arc::new(Conns::default());
    let max = limits.max_connections.max(1);
    let mut next_id: u64 = 0;
    loop {
        let (mut tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                tracing::warn!("exporter accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        let Some(close) = conns.admit(id, max) else {
            tokio::spawn(async move {
                const BODY: &str = "every connection is running a probe; retry later\n";
                let msg = format!(
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{BODY}",
                    BODY.len()
                );
                let _ = tokio::time::timeout(Duration::from_secs(1), tcp.write_all(msg.as_bytes()))
                    .await;
            });
            continue;
        };
        let cfg = cfg.clone();
        let conns = conns.clone();
        tokio::spawn(async move {
            let svc_conns = conns.clone();
            let svc = service_fn(move |req| {
                let busy = Busy::new(svc_conns.clone(), id);
                let cfg = cfg.clone();
                async move {
                    let r = handle(cfg, req).await;
                    drop(busy);
                    r
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.request_timeout)
                .serve_connection(TokioIo::new(tcp), svc);
            tokio::select! {
                _ = conn => {}
                () = close.notified() => {}
            }
            conns.remove(id);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_parameter_is_decoded() {
        assert_eq!(
            target_param(Some("module=x&target=https%3A%2F%2Fa.test%3A8443%2Fp")).as_deref(),
            Some("https://a.test:8443/p")
        );
        assert_eq!(target_param(Some("x=1")), None);
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn metrics_name_every_phase_measured_and_success() {
        let s = Sample {
            dns_us: Some(10),
            tls_full_us: Some(2_000),
            resumption_accepted: Some(true),
            version: Some("1.3".into()),
            ..Sample::default()
        };
        let h3 = Sample {
            transport: crate::sample::Transport::H3,
            zero_rtt_ttfb_us: Some(1_000),
            early_data_accepted: Some(true),
            ..s.clone()
        };
        let m = metrics(&[s, h3]);
        for line in [
            "tlslab_probe_phase_seconds{transport=\"tcp\",phase=\"tls_full\"} 0.002",
            "tlslab_probe_phase_seconds{transport=\"h3\",phase=\"quic_full\"} 0.002",
            "tlslab_probe_phase_seconds{transport=\"h3\",phase=\"get_0rtt_first_byte\"} 0.001",
            "tlslab_probe_resumption_accepted{transport=\"tcp\"} 1",
            "tlslab_probe_early_data_accepted{transport=\"h3\"} 1",
            "tlslab_probe_success{transport=\"h3\"} 1",
        ] {
            assert!(m.contains(line), "no {line} in {m}");
        }
        assert!(m.contains("version=\"1.3\""), "{m}");
        // One HELP and TYPE per family, whatever the transports.
        assert_eq!(
            m.matches("# TYPE tlslab_probe_phase_seconds gauge").count(),
            1,
            "{m}"
        );
    }
}
