//! The pieces of one HTTP/3 connection that tlslab's QUIC clients share:
//! `load --h3`'s clients (the load engine's `h3` connections) and `tlslab-probe`'s HTTP/3 rounds.
//! The client TLS configuration (ALPN `h3`, early data on), a certificate
//! verifier that counts its calls (a resumed TLS 1.3 handshake verifies no
//! certificate, which is how a client learns that it resumed), the
//! connection's transport, the error classes of a failed connection, and
//! HTTP/3 on a QUIC connection with one timed GET.
//!
//! It is not a client loop: who connects when, and what is recorded, is
//! the caller's.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::config::{LoadConfig, Trust};
use crate::error::Error;

/// A certificate verifier that counts its calls: a full handshake makes
/// one, a resumed TLS 1.3 handshake none.
#[derive(Debug)]
pub struct CountingVerifier {
    inner: Arc<dyn ServerCertVerifier>,
    calls: Arc<AtomicU64>,
}

impl CountingVerifier {
    /// `inner`, counting into the returned counter.
    pub fn wrap(inner: Arc<dyn ServerCertVerifier>) -> (Arc<CountingVerifier>, Arc<AtomicU64>) {
        let calls = Arc::new(AtomicU64::new(0));
        let v = Arc::new(CountingVerifier {
            inner,
            calls: calls.clone(),
        });
        (v, calls)
    }
}

impl ServerCertVerifier for CountingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The rustls client configuration `load --h3 --early-data` would use for
/// `cfg` (trust, versions, algorithms; ALPN `h3`; early data on), without
/// a session store, and the verifier its trust asks for, to wrap in a
/// [`CountingVerifier`]. QUIC needs TLS 1.3 among `cfg`'s versions.
pub fn client_tls(
    cfg: &LoadConfig,
) -> Result<(rustls::ClientConfig, Arc<dyn ServerCertVerifier>), Error> {
    if !cfg
        .versions
        .contains(&tlslab_crypto::provider::Version::Tls13)
    {
        return Err(Error::Invalid(
            "QUIC needs TLS 1.3; use --tls 1.3 or 1.2,1.3".into(),
        ));
    }
    let mut base = crate::tls::base_config(cfg, &tlslab_crypto::meter::Meter::new())?;
    base.alpn_protocols = vec![b"h3".to_vec()];
    base.enable_early_data = true;
    let verifier = verifier(cfg, &base)?;
    Ok((base, verifier))
}

/// The verifier the run's trust asks for, on the metering provider; with
/// `--ablate`, the ablation's (see `tls::base_config`, which has already
/// refused a run without the lab server's CA).
pub fn verifier(
    cfg: &LoadConfig,
    base: &rustls::ClientConfig,
) -> Result<Arc<dyn ServerCertVerifier>, Error> {
    let prov = base.crypto_provider().clone();
    if !cfg.ablation.is_empty() {
        let roots = match &cfg.trust {
            Trust::CaFile(path) => tlslab_crypto::pki::load_roots(path)?,
            Trust::Roots(r) => r.clone(),
            Trust::WebPki | Trust::Insecure => {
                return Err(Error::Invalid(
                    "--ablate runs only against a lab server whose CA you give: use --cacert FILE"
                        .into(),
                ));
            }
        };
        return Ok(cfg.ablation.server_cert_verifier(&prov, roots)?);
    }
    let roots = match &cfg.trust {
        Trust::Insecure => return Ok(tlslab_crypto::pki::any_certificate(prov)),
        Trust::CaFile(path) => tlslab_crypto::pki::load_roots(path)?,
        Trust::Roots(r) => r.clone(),
        Trust::WebPki => rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    };
    rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), prov)
        .build()
        .map(|v| v as Arc<dyn ServerCertVerifier>)
        .map_err(|e| Error::Invalid(format!("--cacert: {e}; give a PEM file of CA certificates")))
}

/// The transport of every client connection: quinn's defaults, idle
/// after `idle`.
pub fn transport(idle: Duration) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
    t
}

/// A QUIC client configuration on `tls` (its session store and verifier
/// already set) with [`transport`]`(idle)`.
pub fn client_config(
    tls: rustls::ClientConfig,
    idle: Duration,
) -> Result<quinn::ClientConfig, String> {
    let q = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls))
        .map_err(|e| format!("{e}; QUIC needs TLS 1.3 with TLS_AES_128_GCM_SHA256"))?;
    let mut config = quinn::ClientConfig::new(Arc::new(q));
    config.transport_config(Arc::new(transport(idle)));
    Ok(config)
}

/// The local address a client endpoint binds to reach `server`: loopback
/// for a loopback server, else unspecified, of the server's family.
pub fn local_for(server: SocketAddr) -> SocketAddr {
    match (server.is_ipv6(), server.ip().is_loopback()) {
        (false, true) => (Ipv4Addr::LOCALHOST, 0).into(),
        (false, false) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        (true, true) => (Ipv6Addr::LOCALHOST, 0).into(),
        (true, false) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// The error kind of a failed QUIC connection.
pub fn conn_kind(e: &quinn::ConnectionError) -> String {
    use quinn::ConnectionError as E;
    match e {
        E::TimedOut => "timeout".into(),
        E::Reset => "reset".into(),
        E::ConnectionClosed(c) if c.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED => {
            "refused".into()
        }
        E::TransportError(t) => format!("quic_{:?}", t.code).to_ascii_lowercase(),
        E::ConnectionClosed(c) => format!("quic_{:?}", c.error_code).to_ascii_lowercase(),
        E::ApplicationClosed(_) | E::LocallyClosed => "closed".into(),
        E::VersionMismatch => "quic_version".into(),
        E::CidsExhausted => "quic_cids".into(),
    }
}

/// A response as the client saw it.
#[derive(Clone, Copy, Debug)]
pub struct Got {
    /// The HTTP status.
    pub status: u16,
    /// When the response's head arrived.
    pub ttfb_at: Instant,
    /// When the request was sent.
    pub sent_at: Instant,
    /// When the body's last byte arrived.
    pub end: Instant,
    /// Body bytes, counted as they arrive (never held).
    pub body: u64,
}

/// HTTP/3's request sender.
pub type Send = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// HTTP/3 over a QUIC connection: the request sender and the task driving
/// the connection (its control streams), aborted when dropped.
pub struct H3 {
    /// Opens request streams.
    pub send: Send,
    drive: tokio::task::JoinHandle<()>,
}

impl Drop for H3 {
    fn drop(&mut self) {
        self.drive.abort();
    }
}

/// Starts HTTP/3 on `conn` (in 0-RTT, if the connection is still in its
/// handshake with early data allowed).
pub async fn h3_open(conn: quinn::Connection) -> Result<H3, String> {
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn))
        .await
        .map_err(|e| format!("h3_connection: {e}"))?;
    let drive = tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok(H3 { send, drive })
}

/// The error kind of a failed request stream: `timeout` when its QUIC
/// connection went idle for the idle timeout (the run's `--timeout`), as a
/// request that outlived the timeout; else `what: ` and h3's message.
fn stream_kind(what: &str, e: &h3::error::StreamError) -> String {
    use h3::error::{ConnectionError, StreamError};
    match e {
        StreamError::ConnectionError {
            0: ConnectionError::Timeout { .. },
            ..
        } => "timeout".into(),
        _ => format!("{what}: {e}"),
    }
}

/// One GET of `uri` on its own stream of `send`'s connection, within
/// `timeout`; an error is its class (`h3_stream: …`, `timeout`).
pub async fn request(mut send: Send, uri: http::Uri, timeout: Duration) -> Result<Got, String> {
    let work = async {
        let sent_at = Instant::now();
        let req = http::Request::get(uri)
            .body(())
            .map_err(|e| format!("h3_request: {e}"))?;
        let mut stream = send
            .send_request(req)
            .await
            .map_err(|e| stream_kind("h3_stream", &e))?;
        // A server may answer before the request's FIN arrives and stop
        // our sending (RFC 9114 §4.1: H3_NO_ERROR); a client must not
        // discard the response then, so a failed finish is not a failure:
        // the response, or its absence, decides.
        let _ = stream.finish().await;
        let resp = stream
            .recv_response()
            .await
            .map_err(|e| stream_kind("h3_response", &e))?;
        let ttfb_at = Instant::now();
        let mut body = 0u64;
        while let Some(chunk) = stream
            .recv_data()
            .await
            .map_err(|e| stream_kind("h3_body", &e))?
        {
            body += chunk.remaining() as u64;
        }
        Ok::<_, String>(Got {
            status: resp.status().as_u16(),
            ttfb_at,
            sent_at,
            end: Instant::now(),
            body,
        })
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err("timeout".into()),
    }
}
