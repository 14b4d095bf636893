//! One probe of one target over HTTP/3: DNS, then a fresh client's *full*
//! QUIC handshake and a GET sent after it (1-RTT), then a second
//! connection that offers the first one's session ticket (a *resumed*
//! handshake, accepted or not) and sends its GET in 0-RTT, beside the
//! handshake. There is no connect: the first packet already carries the
//! ClientHello. The connections are `tlslab-load`'s (its HTTP/3 client
//! pieces, [`tlslab_load::quic::http3`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustls::client::Resumption;
use tlslab_crypto::store::ClientSessions;
use tlslab_load::Target;
use tlslab_load::quic::http3::{self, CountingVerifier, Got, conn_kind, h3_open, request};

use crate::config::{ProbeConfig, parse_target};
use crate::failed::Failed;
use crate::sample::{Phase, Sample, Transport, now_ms};
use crate::timed::{micros, resolve};

/// Where a target's HTTP/3 is: the URL's own host and UDP port, or the
/// endpoint its `Alt-Svc` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The host (`None`: the URL's).
    pub host: Option<String>,
    /// The UDP port.
    pub port: u16,
}

/// Probes `url` once over HTTP/3 at `at` (`None`: the URL's host and
/// port). Never fails: a failure is recorded in the sample with its phase
/// and class, and later phases are left empty.
pub async fn probe_h3(cfg: &ProbeConfig, url: &str, at: Option<&Endpoint>) -> Sample {
    let mut s = Sample {
        target: url.to_string(),
        transport: Transport::H3,
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
    let Some(quic) = &cfg.quic else {
        s.fail(
            Phase::Dns,
            "no_quic_client",
            "the probe was configured for TCP only; give --transport h3 or both",
        );
        return s;
    };
    let start = Instant::now();
    let host = at
        .and_then(|e| e.host.clone())
        .unwrap_or_else(|| target.host.clone());
    let port = at.map_or(target.port, |e| e.port);
    let lookup_host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let Some(addr) = resolve(&mut s, cfg.timeout, &lookup_host, port).await else {
        return s;
    };
    // The origin's name, whichever endpoint serves it (RFC 7838 §2.1).
    let name = cfg.sni.clone().unwrap_or_else(|| target.host.clone());
    let uri: http::Uri = match format!("https://{}{}", target.host_header(), target.path).parse() {
        Ok(u) => u,
        Err(e) => {
            s.fail(Phase::Dns, "bad_url", e.to_string());
            return s;
        }
    };
    let sessions = ClientSessions::new();
    let mut tls = quic.tls.clone();
    tls.resumption = Resumption::store(sessions.clone());
    let (counting, verified) = CountingVerifier::wrap(quic.verifier.clone());
    tls.dangerous().set_certificate_verifier(counting);
    let config = match http3::client_config(tls, cfg.timeout.min(Duration::from_secs(600))) {
        Ok(c) => c,
        Err(e) => {
            s.fail(Phase::TlsFull, "quic_config", e);
            return s;
        }
    };
    let endpoint = match quinn::Endpoint::client(http3::local_for(addr)) {
        Ok(e) => e,
        Err(e) => {
            s.fail(Phase::TlsFull, "udp_bind", e.to_string());
            return s;
        }
    };
    let c = Conn {
        cfg,
        endpoint: &endpoint,
        config,
        addr,
        name: &name,
        uri,
        verified,
    };

    // First connection: the full handshake, then a 1-RTT GET.
    sessions.set_offer(false);
    match c.full(&mut s, &target).await {
        Ok(conn) => {
            s.total_us = Some(micros(start.elapsed()));
            // The server sends its tickets once it has the client's
            // Finished; wait for one (bounded) before closing.
            let wait = cfg.timeout.min(Duration::from_secs(1));
            let _ = tokio::time::timeout(wait, async {
                while !sessions.has_session() && conn.close_reason().is_none() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await;
            conn.close(0u32.into(), b"done");
        }
        Err(()) => {
            endpoint.close(0u32.into(), b"done");
            return s;
        }
    }
    if let Some(code) = s.status
        && code >= 400
    {
        s.fail(Phase::Get, "http_status", format!("HTTP status {code}"));
    }

    // Second connection: offer the ticket, the GET in 0-RTT.
    sessions.set_offer(true);
    c.resumed(&mut s).await;
    s.resumption_offered = Some(sessions.take_offered());
    endpoint.close(0u32.into(), b"done");
    // Let the CONNECTION_CLOSE frames out (bounded).
    let _ = tokio::time::timeout(Duration::from_millis(100), endpoint.wait_idle()).await;
    s
}

/// What both connections of one probe share.
struct Conn<'a> {
    cfg: &'a ProbeConfig,
    endpoint: &'a quinn::Endpoint,
    config: quinn::ClientConfig,
    addr: SocketAddr,
    name: &'a str,
    uri: http::Uri,
    /// Calls of the verifier: a full handshake makes one, a resumed none.
    verified: Arc<AtomicU64>,
}

impl Conn<'_> {
    fn connect(&self) -> Result<quinn::Connecting, Failed> {
        self.endpoint
            .connect_with(self.config.clone(), self.addr, self.name)
            .map_err(|e| Failed("quic_connect".into(), e.to_string()))
    }

    /// The full handshake and a GET after it, into `s`; the connection,
    /// or `Err` once the failure is recorded.
    async fn full(&self, s: &mut Sample, target: &Target) -> Result<quinn::Connection, ()> {
        let t0 = Instant::now();
        let conn = match self.connect() {
            Ok(connecting) => match tokio::time::timeout(self.cfg.timeout, connecting).await {
                Ok(Ok(c)) => Ok(c),
                Ok(Err(e)) => Err(Failed(conn_kind(&e), e.to_string())),
                Err(_) => Err(Failed(
                    "timeout".into(),
                    format!(
                        "no QUIC handshake with {} within {:?} (--timeout); is HTTP/3 served \
                             on UDP port {}?",
                        self.addr,
                        self.cfg.timeout,
                        self.addr.port()
                    ),
                )),
            },
            Err(f) => Err(f),
        };
        let conn = match conn {
            Ok(c) => c,
            Err(Failed(k, m)) => {
                s.fail(Phase::TlsFull, k, m);
                return Err(());
            }
        };
        s.tls_full_us = Some(micros(t0.elapsed()));
        describe(&conn, s);
        tracing::debug!(host = %target.host, "QUIC handshake with {}", self.addr);
        match self.get(&conn).await {
            Ok(g) => {
                s.status = Some(g.status);
                s.ttfb_us = Some(micros(g.ttfb_at.saturating_duration_since(g.sent_at)));
                s.get_us = Some(micros(g.end.saturating_duration_since(g.sent_at)));
                s.body_bytes = Some(i64::try_from(g.body).unwrap_or(i64::MAX));
                Ok(conn)
            }
            Err(Failed(k, m)) => {
                s.fail(Phase::Get, k, m);
                conn.close(0u32.into(), b"failed");
                Err(())
            }
        }
    }

    /// HTTP/3 on `conn` and one GET.
    async fn get(&self, conn: &quinn::Connection) -> Result<Got, Failed> {
        let h3 = h3_open(conn.clone()).await.map_err(h3_failed)?;
        request(h3.send.clone(), self.uri.clone(), self.cfg.timeout)
            .await
            .map_err(h3_failed)
    }

    /// The resumed handshake, its GET in 0-RTT when the ticket allows
    /// early data (sent again after the handshake if the server rejects
    /// it), into `s`.
    async fn resumed(&self, s: &mut Sample) {
        let verified0 = self.verified.load(Ordering::Relaxed);
        let t0 = Instant::now();
        let connecting = match self.connect() {
            Ok(c) => c,
            Err(Failed(k, m)) => {
                s.fail(Phase::TlsResumed, k, m);
                return;
            }
        };
        let timeout = self.cfg.timeout;
        let (conn, first) = match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                let (done, first) = tokio::join!(
                    async {
                        let ok = tokio::time::timeout(timeout, accepted).await;
                        s.resumed_handshake_bytes = handshake_bytes(&conn);
                        (ok, Instant::now())
                    },
                    self.get(&conn)
                );
                let ok = match done {
                    (Ok(ok), at) => {
                        s.tls_resumed_us = Some(micros(at.saturating_duration_since(t0)));
                        ok
                    }
                    (Err(_), _) => {
                        s.fail(
                            Phase::TlsResumed,
                            "timeout",
                            format!("no resumed QUIC handshake within {timeout:?} (--timeout)"),
                        );
                        conn.close(0u32.into(), b"failed");
                        return;
                    }
                };
                s.early_data_accepted = Some(ok);
                match first {
                    Ok(g) if ok => {
                        s.zero_rtt_ttfb_us = Some(micros(g.ttfb_at.saturating_duration_since(t0)));
                        (conn, Ok(g))
                    }
                    // Rejected: quinn dropped every 0-RTT stream, HTTP/3's
                    // control streams too; start HTTP/3 again and resend.
                    _ => {
                        let again = self.get(&conn).await;
                        (conn, again)
                    }
                }
            }
            Err(connecting) => {
                // The ticket allows no early data: a resumed handshake,
                // then the GET.
                let conn = match tokio::time::timeout(timeout, connecting).await {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => {
                        s.fail(Phase::TlsResumed, conn_kind(&e), e.to_string());
                        return;
                    }
                    Err(_) => {
                        s.fail(
                            Phase::TlsResumed,
                            "timeout",
                            format!("no resumed QUIC handshake within {timeout:?} (--timeout)"),
                        );
                        return;
                    }
                };
                s.tls_resumed_us = Some(micros(t0.elapsed()));
                s.resumed_handshake_bytes = handshake_bytes(&conn);
                let first = self.get(&conn).await;
                (conn, first)
            }
        };
        s.resumption_accepted = Some(self.verified.load(Ordering::Relaxed) == verified0);
        match first {
            Ok(g) => {
                s.resumed_get_us = Some(micros(g.end.saturating_duration_since(g.sent_at)));
                if g.status >= 400 && s.error_kind.is_none() {
                    s.fail(
                        Phase::Get,
                        "http_status",
                        format!("HTTP status {}", g.status),
                    );
                }
            }
            Err(Failed(k, m)) => {
                if s.error_kind.is_none() {
                    s.fail(Phase::Get, k, m);
                }
            }
        }
        conn.close(0u32.into(), b"done");
    }
}

/// UDP bytes both ways so far: read as the handshake completes, the
/// handshake's (with a 0-RTT request, the request's too).
fn handshake_bytes(conn: &quinn::Connection) -> Option<i64> {
    let stats = conn.stats();
    i64::try_from(stats.udp_tx.bytes + stats.udp_rx.bytes).ok()
}

fn h3_failed(e: String) -> Failed {
    let kind = e.split(':').next().unwrap_or("h3").to_string();
    Failed(kind, e)
}

/// What the full handshake negotiated: TLS 1.3 always, the ALPN, the
/// certificate chain, and its UDP bytes both ways.
fn describe(conn: &quinn::Connection, s: &mut Sample) {
    s.version = Some("1.3".into());
    s.alpn = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.protocol.clone())
        .map(|a| String::from_utf8_lossy(&a).into_owned());
    s.full_handshake_bytes = handshake_bytes(conn);
    if let Some(chain) = conn.peer_identity().and_then(|id| {
        id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
            .ok()
    }) {
        s.chain_len = i64::try_from(chain.len()).ok();
        s.cert_not_after = chain.first().and_then(|leaf| {
            x509_parser::parse_x509_certificate(leaf.as_ref())
                .ok()
                .map(|(_, cert)| cert.validity().not_after.timestamp())
        });
    }
}
