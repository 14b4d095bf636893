//! The server suites' fixtures: configurations, and a real client
//! (tokio-rustls and hyper) that reports the handshake kind and version.
//! Every address is loopback. The generic pieces (bounded waits, loopback,
//! a test CA, a runtime, raw-socket requests, metrics) are the one test
//! kit's (`tlslab-testkit`), re-exported here.
#![allow(dead_code, missing_docs, unused_imports)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, HandshakeKind, ProtocolVersion};
use tlslab_crypto::pki::Generated;
use tlslab_crypto::provider::{self, Algorithms, Version};
use tlslab_crypto::store::ClientSessions;
use tlslab_server::{CertSource, Content, ServeConfig, SessionCache, TlsSettings};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

pub use tlslab_testkit::{
    eventually, generated, loopback, metric, plain_get, raw, read_within, rt, split_response,
};

/// An HTTPS-only config on an ephemeral loopback port, 2 worker threads.
pub fn config(g: &Generated, content: Content) -> ServeConfig {
    let mut c = ServeConfig::new(
        loopback(),
        content,
        TlsSettings::new(CertSource::Generated(g.clone())),
    );
    c.threads = 2;
    c
}

/// A session cache in memory holding `capacity` sessions for a minute.
pub fn memory_cache(capacity: usize) -> SessionCache {
    SessionCache::Memory {
        capacity,
        ttl: Duration::from_secs(60),
    }
}

/// A TLS 1.3-only config of empty responses with a memory session cache
/// of `capacity` and metrics on a loopback port.
pub fn tls13_cached(g: &Generated, capacity: usize) -> ServeConfig {
    let mut cfg = config(g, Content::Empty);
    cfg.tls.versions = vec![Version::Tls13];
    cfg.tls.session_cache = memory_cache(capacity);
    cfg.metrics = Some(loopback());
    cfg
}

/// `cfg` with a plain-HTTP listener on a loopback port and no TLS one.
pub fn plain_only(mut cfg: ServeConfig) -> ServeConfig {
    cfg.https = None;
    cfg.http = Some(loopback());
    cfg
}

pub fn client_config(
    g: &Generated,
    versions: &[Version],
    sessions: Option<Arc<ClientSessions>>,
    alpn: &[&[u8]],
) -> Arc<ClientConfig> {
    let p = provider::build(versions, &Algorithms::default()).unwrap();
    let mut c = ClientConfig::builder_with_provider(p)
        .with_protocol_versions(&provider::protocol_versions(versions))
        .unwrap()
        .with_root_certificates(g.roots().unwrap())
        .with_no_client_auth();
    if let Some(s) = sessions {
        c.resumption = Resumption::store(s);
    }
    c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Arc::new(c)
}

/// What one HTTPS request saw.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub body: Vec<u8>,
    pub headers: http::HeaderMap,
    pub kind: Option<HandshakeKind>,
    pub version: Option<ProtocolVersion>,
    pub http_version: http::Version,
}

/// One HTTPS connection with one HTTP/1.1 (or HTTP/2 if ALPN says so)
/// GET of each of `paths`, in order, on the same connection.
pub async fn https_get_many(
    addr: SocketAddr,
    cfg: Arc<ClientConfig>,
    paths: &[&str],
) -> std::io::Result<Vec<Got>> {
    let tcp = TcpStream::connect(addr).await?;
    let tls = TlsConnector::from(cfg)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    let (_, conn) = tls.get_ref();
    let kind = conn.handshake_kind();
    let version = conn.protocol_version();
    let h2 = conn.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let mut out = Vec::new();
    let err = |e: hyper::Error| std::io::Error::other(e.to_string());
    if h2 {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(TokioExecutor::new(), io)
                .await
                .map_err(err)?;
        tokio::spawn(conn);
        for p in paths {
            let req = http::Request::get(format!("https://localhost{p}"))
                .body(Empty::new())
                .unwrap();
            out.push(collect(send.send_request(req).await.map_err(err)?, kind, version).await?);
        }
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io)
            .await
            .map_err(err)?;
        tokio::spawn(conn);
        for p in paths {
            let req = http::Request::get(*p)
                .header(http::header::HOST, "localhost")
                .body(Empty::new())
                .unwrap();
            out.push(collect(send.send_request(req).await.map_err(err)?, kind, version).await?);
        }
    }
    Ok(out)
}

async fn collect(
    resp: http::Response<hyper::body::Incoming>,
    kind: Option<HandshakeKind>,
    version: Option<ProtocolVersion>,
) -> std::io::Result<Got> {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let http_version = resp.version();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?
        .to_bytes()
        .to_vec();
    Ok(Got {
        status,
        body,
        headers,
        kind,
        version,
        http_version,
    })
}

pub async fn https_get(addr: SocketAddr, cfg: Arc<ClientConfig>, path: &str) -> Got {
    https_get_many(addr, cfg, &[path])
        .await
        .expect("HTTPS request")
        .remove(0)
}
