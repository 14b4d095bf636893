//! The user sessions over HTTP/3 (`overload --h3`): each request of a
//! session on a new QUIC connection, with the session's TLS session store,
//! from one of a few UDP sockets the users share ([`ENDPOINTS`]). It uses
//! the HTTP/3 client of `load --h3` ([`crate::quic::http3`]), not a client
//! of its own.

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
/// without a session store, its verifier, the request's URI, and the UDP
/// endpoints the users take in turn.
pub(super) struct QuicBase {
    tls: rustls::ClientConfig,
    verifier: Arc<dyn ServerCertVerifier>,
    uri: http::Uri,
    server_name: String,
    endpoints: parking_lot::Mutex<(Vec<quinn::Endpoint>, usize)>,
}

/// UDP endpoints (sockets) the users share, each taken by every
/// [`ENDPOINTS`]-th user. One per user cost the client a socket, a driver
/// task and quinn's receive buffer (sized for GRO batches, megabytes once
/// touched) per arrival: at 200 users/s the overload client's memory grew
/// to 1.9 GB and its thread saturated, and the point measured the client.
/// Connections, not sockets, are what the server admits and serves.
const ENDPOINTS: usize = 16;

/// The receive buffer asked for on each shared socket (the server's
/// `--quic-recv-buffer` default; the kernel caps it at
/// `net.core.rmem_max`).
const RECV_BUFFER: usize = 4 << 20;

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
            endpoints: parking_lot::Mutex::new((Vec::new(), 0)),
        })
    }

    /// The next shared endpoint, bound on first use (loopback or
    /// unspecified, of `addr`'s family).
    fn endpoint(&self, addr: SocketAddr) -> Result<quinn::Endpoint, &'static str> {
        let mut g = self.endpoints.lock();
        let (pool, next) = &mut *g;
        let i = *next % ENDPOINTS;
        *next = next.wrapping_add(1);
        if let Some(e) = pool.get(i) {
            return Ok(e.clone());
        }
        let socket = std::net::UdpSocket::bind(http3::local_for(addr)).map_err(|_| "udp_bind")?;
        // Best effort: a burst of server flights to a socket the users
        // share must not overflow the kernel's default buffer (overload
        // at 3x saw 9,682 drops on one), or the client, not the server,
        // stalls the handshakes it loses.
        let _ =
            nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::RcvBuf, &RECV_BUFFER);
        let runtime = quinn::default_runtime().ok_or("udp_bind")?;
        let e = quinn::Endpoint::new(quinn::EndpointConfig::default(), None, socket, runtime)
            .map_err(|_| "udp_bind")?;
        pool.push(e.clone());
        Ok(e)
    }

    /// Closes the shared endpoints (each connection has closed its own).
    pub(super) fn close(&self) {
        for e in self.endpoints.lock().0.drain(..) {
            e.close(0u32.into(), b"done");
        }
    }
}

/// One user session's QUIC side: the shared endpoint it uses, its session
/// store and the count of certificate verifications (a full handshake
/// makes one, a resumed one none).
pub(super) struct QuicUser {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    pub(super) sessions: Arc<ClientSessions>,
    verified: Arc<AtomicU64>,
}

impl QuicUser {
    /// A new user: the next shared endpoint and an empty session store.
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
        let endpoint = base.endpoint(addr)?;
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
