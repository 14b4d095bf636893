//! What is probed and how: the target URL ([`parse_target`]), the TLS
//! client of each transport and the transports ([`ProbeConfig`]).

use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls::client::danger::ServerCertVerifier;
use tlslab_load::Target;

use crate::error::Error;

/// How targets are probed.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    /// The client TLS configuration (trust, versions, ALPN), as
    /// [`tlslab_load::client::tls_config`] builds it; its session store is
    /// replaced per probe.
    pub tls: Arc<ClientConfig>,
    /// The server name to send and verify instead of the URL's host.
    pub sni: Option<String>,
    /// Each phase (DNS, connect, handshake, GET) gives up after this long.
    pub timeout: Duration,
    /// The transports each probe of a target uses.
    pub transports: Transports,
    /// HTTP/3's client configuration, when [`ProbeConfig::transports`]
    /// uses QUIC.
    pub quic: Option<QuicTls>,
}

impl ProbeConfig {
    /// A probe configuration over TCP from a load configuration's TLS
    /// settings.
    pub fn from_load(cfg: &tlslab_load::LoadConfig, timeout: Duration) -> Result<Self, Error> {
        if timeout.is_zero() {
            return Err(Error::ZeroTimeout);
        }
        Ok(ProbeConfig {
            tls: Arc::new(tlslab_load::client::tls_config(cfg)?),
            sni: cfg.sni.clone(),
            timeout,
            transports: Transports::Tcp,
            quic: None,
        })
    }

    /// This configuration probing over `transports`, with HTTP/3's client
    /// built from `cfg` (the same trust and algorithms; QUIC needs TLS 1.3
    /// among its versions) when they use QUIC.
    pub fn over(
        mut self,
        transports: Transports,
        cfg: &tlslab_load::LoadConfig,
    ) -> Result<Self, Error> {
        self.quic = match transports {
            Transports::Tcp => None,
            Transports::H3 | Transports::Both => Some(QuicTls::new(cfg)?),
        };
        self.transports = transports;
        Ok(self)
    }
}

/// The transports each probe of a target uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transports {
    /// TCP + TLS (HTTP/1.1) only.
    #[default]
    Tcp,
    /// QUIC (HTTP/3) only, on the URL's host and UDP port.
    H3,
    /// TCP first, then HTTP/3 at the endpoint the TCP response's
    /// `Alt-Svc` names.
    Both,
}

/// HTTP/3's client TLS: `tlslab load --h3`'s configuration (ALPN `h3`,
/// early data on) and the verifier its trust asks for.
#[derive(Clone, Debug)]
pub struct QuicTls {
    pub(crate) tls: rustls::ClientConfig,
    pub(crate) verifier: Arc<dyn ServerCertVerifier>,
}

impl QuicTls {
    /// From a load configuration's TLS settings; QUIC needs TLS 1.3.
    pub fn new(cfg: &tlslab_load::LoadConfig) -> Result<QuicTls, Error> {
        let (tls, verifier) = tlslab_load::quic::http3::client_tls(cfg)?;
        Ok(QuicTls { tls, verifier })
    }
}

/// Parses a probe target: an `https://` URL. An `http://` one is refused
/// (the probe times TLS handshakes), with the fix in the message.
pub fn parse_target(url: &str) -> Result<Target, String> {
    let t = Target::parse(url).map_err(|e| e.to_string())?;
    if t.scheme != tlslab_load::Scheme::Https {
        let rest = url.trim().split_once("://").map_or(url, |(_, r)| r);
        return Err(format!(
            "{url}: the probe times TLS handshakes, so it needs an https:// URL \
             (write https://{rest})"
        ));
    }
    Ok(t)
}
