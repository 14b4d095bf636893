//! The user sessions over HTTP/3 (`overload --h3`): each request of a
//! session on a new QUIC connection, from the session's own UDP socket,
//! with the session's TLS session store, as a browser opens one QUIC
//! connection per visit. It uses the HTTP/3 client of `load --h3`
//! ([`crate::quic::http3`]), not a client of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustls::client::Resumption;
use rustls::client::danger::ServerCertVerifier;
use tlslab_crypto::store::ClientSessions;

use crate::config::LoadConfig;
use crate::error::Error;
use crate::quic::http3::{self, CountingVerifier};

/// What every user's QUIC connections share: the TLS configuration
/// without a session store, its verifier, and the request's URI.
pub(super) struct QuicBase {
    tls: rustls::ClientConfig,
    verifier: Arc<dyn ServerCertVerifier>,
    uri: http::Uri,
    server_name: String,
}

impl QuicBase {
    /// The HTTP/3 side of `cfg`'s first target.
    pub(super) fn new(cfg: &LoadConfig, target: &crate::target::Target) -> Result<QuicBase, Error> {
        let (tls, verifier) = http3::client_tls(cfg)?;
        let uri = format!("https://{}{}", target.host_header(), target.path)
            .parse()
            .map_err(|_| Error::BadUrl {
                url: target.to_string(),
                reason: "the path is not valid in a request".into(),
            })?;
        Ok(QuicBase {
            tls,
            verifier,
            uri,
            server_name: cfg.sni.clone().unwrap_or_else(|| target.host.clone()),
        })
    }
}

/// One user session's QUIC side: its socket, session store and the count
/// of certificate verifications (a full handshake makes one, a resumed
/// one none).
pub(super) struct QuicUser {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    pub(super) sessions: Arc<ClientSessions>,
    verified: Arc<AtomicU64>,
}

impl QuicUser {
    /// A new user: a UDP socket of its own and an empty session store.
    pub(super) fn new(
        base: &QuicBase,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Self, &'static str> {
        let sessions = ClientSessions::new();
        let mut tls = base.tls.clone();
        // No early data: the overload workload's requests are 1-RTT, as
        // over TCP.
        tls.enable_early_data = false;
        tls.resumption = Resumption::store(sessions.clone());
        let (counting, verified) = CountingVerifier::wrap(base.verifier.clone());
        tls.dangerous().set_certificate_verifier(counting);
        let config = http3::client_config(tls, timeout.min(Duration::from_secs(600)))
            .map_err(|_| "quic_config")?;
        let endpoint = quinn::Endpoint::client(http3::local_for(addr)).map_err(|_| "udp_bind")?;
        Ok(QuicUser {
            endpoint,
            config,
            sessions,
            verified,
        })
    }

    /// One GET on a new connection, within `timeout` (the caller's);
    /// whether its handshake was resumed. Errors are failure reasons.
    pub(super) async fn request(
        &self,
        base: &QuicBase,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<bool, &'static str> {
        let verified0 = self.verified.load(Ordering::Relaxed);
        let connecting = self
            .endpoint
            .connect_with(self.config.clone(), addr, &base.server_name)
            .map_err(|_| "quic_connect")?;
        let conn = connecting.await.map_err(|e| match e {
            quinn::ConnectionError::ConnectionClosed(_) => "refused",
            quinn::ConnectionError::TimedOut => "timeout",
            _ => "quic_handshake",
        })?;
        let resumed = self.verified.load(Ordering::Relaxed) == verified0;
        let h3 = http3::h3_open(conn.clone()).await.map_err(|_| "http")?;
        let got = http3::request(h3.send.clone(), base.uri.clone(), timeout)
            .await
            .map_err(|e| if e == "timeout" { "timeout" } else { "http" })?;
        // The server sends its tickets once it has the client's Finished;
        // wait (briefly) for one before closing, or the next request
        // could not resume.
        let _ = tokio::time::timeout(timeout.min(Duration::from_millis(200)), async {
            while !self.sessions.has_session() && conn.close_reason().is_none() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        drop(h3);
        conn.close(0u32.into(), b"done");
        if !(200..300).contains(&got.status) {
            return Err("status");
        }
        Ok(resumed)
    }
}

impl Drop for QuicUser {
    fn drop(&mut self) {
        self.endpoint.close(0u32.into(), b"done");
    }
}
