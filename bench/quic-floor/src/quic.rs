//! The QUIC engines: a quinn server, an s2n-quic server (rustls or s2n-tls
//! underneath), and the one quinn client that drives both. Every server
//! closes the connection (application close, code 0) right after its
//! handshake completes; the client waits for that close, so a handshake it
//! counts is one the server counted.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::common::{
    quic_initial_suite, rustls_client, rustls_server, Group, Identity, Params, Window, ALPN,
    SERVER_NAME,
};

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `new_tokens`: NEW_TOKEN frames sent per connection (quinn's default, 2
/// with its `bloom` feature, when None).
pub async fn serve_quinn(
    port: u16,
    id: &Identity,
    p: Params,
    new_tokens: Option<u32>,
    window: Arc<Window>,
) -> Result<()> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::with_initial(
        Arc::new(rustls_server(id, p)?),
        quic_initial_suite(),
    )
    .context("rustls config for QUIC")?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    if let Some(n) = new_tokens {
        let mut tokens = quinn::ValidationTokenConfig::default();
        tokens.sent(n);
        cfg.validation_token_config(tokens);
    }
    let endpoint = quinn::Endpoint::server(cfg, addr(port))
        .with_context(|| format!("binding udp 127.0.0.1:{port}: pick a free port with --port"))?;
    eprintln!("quinn: listening on udp 127.0.0.1:{port}");
    while let Some(incoming) = endpoint.accept().await {
        let window = window.clone();
        tokio::spawn(async move {
            match incoming.await {
                Ok(conn) => {
                    window.handshake();
                    conn.close(0u32.into(), b"");
                }
                Err(e) => eprintln!("quinn: handshake: {e}"),
            }
        });
    }
    bail!("quinn: the endpoint stopped accepting")
}

/// Which TLS library s2n-quic runs the handshake with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum S2nTls {
    Rustls,
    S2nTls,
}

pub async fn serve_s2n(
    port: u16,
    id: &Identity,
    p: Params,
    tls: S2nTls,
    window: Arc<Window>,
) -> Result<()> {
    let builder = s2n_quic::Server::builder();
    let server = match tls {
        S2nTls::Rustls => {
            let tls = s2n_quic::provider::tls::rustls::Server::from(rustls_server(id, p)?);
            builder
                .with_tls(tls)
                .context("s2n-quic rustls provider")?
                .with_io(addr(port))
                .context("s2n-quic io")?
                .start()
        }
        S2nTls::S2nTls => {
            use s2n_quic::provider::tls::s2n_tls as s2n;
            let mut b = s2n::Server::builder()
                .with_certificate(id.cert_pem.as_str(), id.key_pem.as_str())
                .context("s2n-tls certificate")?
                .with_application_protocols([ALPN])
                .context("s2n-tls ALPN")?;
            // default_tls13 accepts X25519 and both AES-GCM suites (the
            // client offers one of each, nothing else); the hybrid group
            // needs the post-quantum policy.
            let policy = match p.group {
                Group::X25519 => "default_tls13",
                Group::X25519MlKem768 => "default_pq",
            };
            let policy = s2n::security::Policy::from_version(policy)
                .with_context(|| format!("s2n-tls security policy {policy}"))?;
            b.config_mut()
                .set_security_policy(&policy)
                .context("s2n-tls security policy")?;
            let tls = b.build().context("s2n-tls config")?;
            builder
                .with_tls(tls)
                .context("s2n-quic s2n-tls provider")?
                .with_io(addr(port))
                .context("s2n-quic io")?
                .start()
        }
    };
    let mut server =
        server.with_context(|| format!("starting s2n-quic on udp 127.0.0.1:{port}"))?;
    eprintln!("s2n-quic ({tls:?}): listening on udp 127.0.0.1:{port}");
    while let Some(conn) = server.accept().await {
        window.handshake();
        conn.close(s2n_quic::application::Error::UNKNOWN);
    }
    bail!("s2n-quic: the server stopped accepting")
}

/// One full handshake: connect, wait for the server's close.
async fn one(endpoint: &quinn::Endpoint, port: u16) -> Result<()> {
    let conn = endpoint
        .connect(addr(port), SERVER_NAME)
        .context("connect")?
        .await
        .context("handshake")?;
    match conn.closed().await {
        quinn::ConnectionError::ApplicationClosed(_) => Ok(()),
        e => bail!("closed by {e}, not by the server's application close"),
    }
}

pub async fn client(port: u16, id: &Identity, p: Params, n: u64, c: u64) -> Result<(u64, u64)> {
    let crypto = quinn::crypto::rustls::QuicClientConfig::with_initial(
        Arc::new(rustls_client(id, p)?),
        quic_initial_suite(),
    )
    .context("rustls config for QUIC")?;
    let mut endpoint = quinn::Endpoint::client(addr(0)).context("binding the client socket")?;
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    crate::common::drive(
        "quic client",
        n,
        c,
        endpoint,
        move |e: quinn::Endpoint| async move { one(&e, port).await },
    )
    .await
}
