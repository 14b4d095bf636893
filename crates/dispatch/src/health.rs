//! Health checks of the nodes: a TCP connect, or a full TLS handshake.
//! The TLS check is the only TLS the dispatcher originates, so it is what
//! `dispatch --keylog` logs ([`TlsCheck::with_key_log`]).
//!
//! The TLS check is a liveness check: it proves the node completes a
//! handshake (its TLS stack, certificate and key are loaded and its
//! accept loop runs), not that its certificate is one clients trust —
//! unless a CA is given (`--health-cacert`), the certificate is not
//! verified (the handshake signature still is). It never resumes (no
//! session store), so each check is one full handshake on the node.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tlslab_crypto::provider::{self, Algorithms, Version};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A TLS health check: the client configuration and the name it sends.
#[derive(Clone)]
pub struct TlsCheck {
    config: Arc<ClientConfig>,
    name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for TlsCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsCheck")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Two checks are equal when they share one client configuration.
impl PartialEq for TlsCheck {
    fn eq(&self, other: &TlsCheck) -> bool {
        Arc::ptr_eq(&self.config, &other.config) && self.name == other.name
    }
}

impl TlsCheck {
    /// A check offering TLS 1.2 and 1.3 that verifies the node's
    /// certificate against `cacert` for `sni` (default: the node's IP
    /// address), or, without `cacert`, accepts any certificate.
    pub fn new(cacert: Option<&Path>, sni: Option<&str>) -> Result<TlsCheck, String> {
        let prov = provider::build(&[Version::Tls12, Version::Tls13], &Algorithms::default())
            .map_err(|e| e.to_string())?;
        let builder = ClientConfig::builder_with_provider(prov.clone())
            .with_protocol_versions(&provider::protocol_versions(&[
                Version::Tls12,
                Version::Tls13,
            ]))
            .map_err(|e| e.to_string())?;
        let mut config = match cacert {
            Some(path) => {
                let roots = tlslab_crypto::pki::load_roots(path)
                    .map_err(|e| format!("--health-cacert: {e}"))?;
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(tlslab_crypto::pki::any_certificate(prov))
                .with_no_client_auth(),
        };
        config.resumption = rustls::client::Resumption::disabled();
        let name = match sni {
            Some(s) => Some(
                ServerName::try_from(s.to_string())
                    .map_err(|_| format!("--health-sni {s:?} is not a DNS name or IP address"))?,
            ),
            None => None,
        };
        Ok(TlsCheck {
            config: Arc::new(config),
            name,
        })
    }

    /// The same check writing its handshakes' secrets to `key_log`
    /// (`dispatch --keylog`): the health checks are the only TLS the
    /// dispatcher originates; clients' TLS passes through it encrypted.
    pub fn with_key_log(self, key_log: Arc<dyn rustls::KeyLog>) -> TlsCheck {
        let mut config = (*self.config).clone();
        config.key_log = key_log;
        TlsCheck {
            config: Arc::new(config),
            name: self.name,
        }
    }

    /// Runs one handshake with `addr` within `limit`.
    pub async fn check(&self, addr: SocketAddr, limit: Duration) -> Result<(), String> {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()));
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let run = async {
            let tcp = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let mut tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            // close_notify, then FIN; the node's answer is not awaited.
            let _ = tls.shutdown().await;
            Ok(())
        };
        tokio::time::timeout(limit, run)
            .await
            .unwrap_or_else(|_| Err(format!("no handshake within {limit:?}")))
    }
}

/// A TCP connect within `limit`.
pub async fn tcp_check(addr: SocketAddr, limit: Duration) -> Result<(), String> {
    match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("connect: {e}")),
        Err(_) => Err(format!("no connect within {limit:?}")),
    }
}
