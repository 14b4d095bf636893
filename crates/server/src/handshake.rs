//! A connection on the TLS listener: its first bytes sniffed, the
//! prefetch and admission stages, the TLS handshake (or its start in
//! early data), and the hand-over to HTTP.

use std::io::Read as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tlslab_crypto::provider::Version;
use tlslab_runtime::Corked;
use tlslab_wire::Sniff;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::admission::{HelloKind, InFlight, admit};
use crate::early::{self, EarlyStream, Started};
use crate::http_conn::{HttpTask, serve_http};
use crate::idle::{ConnInfo, Transport};
use crate::io::{CountingIo, Rewind, SocketBytes};
use crate::shared::{Shared, stopping};
use crate::stats::Listener;
use crate::tls;

/// A handshake that completed, or one that goes on in early data.
enum Handshake<T> {
    Done(tokio_rustls::server::TlsStream<T>),
    Early(EarlyStream<T>),
}

/// `$ssl_protocol` and `$ssl_session_reused`.
fn tls_fields(
    version: Option<Version>,
    kind: Option<rustls::HandshakeKind>,
) -> (&'static str, &'static str) {
    (
        match version {
            Some(Version::Tls12) => "TLSv1.2",
            Some(Version::Tls13) => "TLSv1.3",
            None => "-",
        },
        if kind == Some(rustls::HandshakeKind::Resumed) {
            "r"
        } else {
            "."
        },
    )
}

/// Why the first bytes did not start a TLS handshake.
enum Refused {
    /// A named failure reason.
    Reason(String),
    /// Plain HTTP on the TLS port: answered with a 400, then closed.
    Http,
}

/// How much the first read may take. A ClientHello (with a post-quantum key
/// share about 1.3 KiB) usually fits, so rustls gets it without a second
/// `recvfrom`.
const FIRST_READ: usize = 4096;

/// Reads the first bytes until `tlslab_wire::sniff` decides (it looks at
/// 5). The first read takes whatever is there, up to [`FIRST_READ`]: on a
/// TLS handshake all of it is replayed to rustls.
async fn sniff_start<T: AsyncRead + Unpin>(io: &mut T) -> std::result::Result<Vec<u8>, Refused> {
    let mut buf = vec![0u8; FIRST_READ];
    let mut n = 0;
    loop {
        match tlslab_wire::sniff(&buf[..n.min(5)]) {
            Sniff::TlsHandshake => {
                buf.truncate(n);
                return Ok(buf);
            }
            Sniff::NotTls {
                looks_like_http: true,
            } => return Err(Refused::Http),
            Sniff::NotTls {
                looks_like_http: false,
            } => return Err(Refused::Reason("not_tls".into())),
            Sniff::Incomplete => {}
        }
        match io.read(&mut buf[n..]).await {
            Ok(0) => return Err(Refused::Reason("eof".into())),
            Ok(k) => n += k,
            Err(e) => return Err(Refused::Reason(tls::failure_reason(&e))),
        }
    }
}

/// Tells an HTTP client it reached the TLS port, the way nginx does.
async fn answer_http_on_tls_port<T: AsyncRead + AsyncWrite + Unpin>(io: &mut T) {
    const BODY: &str =
        "This port speaks HTTPS: a plain HTTP request was sent to it. Use https://.\n";
    let resp = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    if io.write_all(resp.as_bytes()).await.is_err() {
        return;
    }
    let _ = io.shutdown().await;
    // Read what the client still sends for a moment, so that closing with
    // unread bytes does not reset the connection before it reads the answer.
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        let mut total = 0;
        while total < 64 * 1024 {
            match io.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(k) => total += k,
            }
        }
    })
    .await;
}

/// The TLS stream of a connection on the TLS listener.
type TlsIo = CountingIo<Corked<TcpStream>>;

pub(crate) async fn serve_tls(
    stream: Corked<TcpStream>,
    mut info: ConnInfo,
    shared: Arc<Shared>,
    deadline: tokio::time::Instant,
    mut shutdown: watch::Receiver<bool>,
) {
    let io = CountingIo::new(
        stream,
        SocketBytes(shared.stats.bytes_of(Transport::Tcp, Listener::Https)),
    );
    // The handshake's state (the sniffed bytes, the prefetch stage,
    // rustls's handshake, the timeout) is boxed and freed before HTTP
    // starts: inline, this future would be as large as that state for the
    // whole life of the connection, idle or not.
    let Some((hs, admitted)) = Box::pin(handshake(io, &shared, deadline, &mut shutdown)).await
    else {
        return;
    };
    // The handshake is no longer in flight; a 503 shed lives on in `info`.
    let admitted = admitted.map(|(guard, shed)| {
        info.shed_503 = shed;
        guard.kind
    });
    // The HTTP side is built in a plain function: a binding borrowed while
    // it is built (the TLS stream) would otherwise keep its storage in this
    // future for the life of the connection.
    start_http(hs, admitted, info, shared, shutdown).await;
}

/// The HTTP side of a TLS connection whose handshake is done, or goes on
/// in early data.
fn start_http(
    hs: Handshake<Rewind<TlsIo>>,
    admitted: Option<HelloKind>,
    mut info: ConnInfo,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) -> HttpTask {
    match hs {
        Handshake::Done(mut tls) => {
            let conn = tls.get_mut().1;
            let version = conn.protocol_version().and_then(Version::from_rustls);
            shared.stats.handshake(version, conn.handshake_kind());
            if admitted == Some(HelloKind::Resume)
                && conn.handshake_kind() != Some(rustls::HandshakeKind::Resumed)
                && let Some(adm) = &shared.admission
            {
                adm.misclassified();
            }
            info.tls = tls_fields(version, conn.handshake_kind());
            let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
            // TLS 1.3 early data arrived before the client's Finished, so it
            // comes before anything still unread: hand it to HTTP first.
            let mut early = Vec::new();
            if let Some(mut ed) = conn.early_data() {
                let _ = ed.read_to_end(&mut early);
                shared.stats.early_data(early.len());
            }
            serve_http(
                Rewind::new(early, tls),
                Listener::Https,
                alpn,
                None,
                info,
                shared,
                shutdown,
            )
        }
        Handshake::Early(s) => {
            // The handshake completes inside the stream, while HTTP runs.
            let Some(conn) = s.connection() else {
                return Box::pin(std::future::ready(()));
            };
            let version = conn.protocol_version().and_then(Version::from_rustls);
            info.tls = tls_fields(version, conn.handshake_kind());
            let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
            let requests = s.requests();
            serve_http(
                s,
                Listener::Https,
                alpn,
                Some(requests),
                info,
                shared,
                shutdown,
            )
        }
    }
}

/// Sniffs, runs the prefetch stage, and completes the TLS handshake (or
/// starts one that goes on in early data) by `deadline` (the handshake
/// timeout from accept). `None` when the connection ends here: the
/// failure is counted.
async fn handshake(
    mut io: TlsIo,
    shared: &Shared,
    deadline: tokio::time::Instant,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<(Handshake<Rewind<TlsIo>>, Option<(InFlight, bool)>)> {
    let acceptor = shared.acceptor.as_ref()?;
    let stats = &shared.stats;
    let ablation = shared.ablation;
    let handshake = async {
        let first = match sniff_start(&mut io).await {
            Ok(first) => first,
            Err(Refused::Reason(r)) => return Err(r),
            Err(Refused::Http) => {
                answer_http_on_tls_port(&mut io).await;
                return Err("http_on_tls_port".to_string());
            }
        };
        // The prefetch stage reads the whole ClientHello before rustls when
        // a remote session cache needs the session fetched first.
        let first = crate::prefetch::stage(&mut io, first, shared.prefetch.as_ref()).await?;
        // Admission control decides on the whole ClientHello (after the
        // prefetch, so a session fetched from Redis counts as held here).
        let (first, admitted) = match &shared.admission {
            None => (first, None),
            Some(adm) => admit(adm, &mut io, first).await?,
        };
        let accept = if shared.early_data && early::offers_early_data(&first) {
            // 0-RTT: rustls reads the ClientHello and early data here, so
            // that safe requests are answered before the handshake completes.
            match early::start(
                acceptor,
                &first,
                Rewind::new(Vec::new(), io),
                stats.clone(),
                ablation,
                shared.handshake_timeout,
            ) {
                Ok(Started::Early(s)) => return Ok((Handshake::Early(s), admitted)),
                Ok(Started::Refused(accept)) => accept,
                Err(e) => return Err(tls::failure_reason(&e)),
            }
        } else {
            acceptor.accept(Rewind::new(first, io))
        };
        accept
            .await
            .map(|tls| (Handshake::Done(tls), admitted))
            .map_err(|e| {
                let (reason, hint) = tls::handshake_failure(&e, ablation);
                if let Some(hint) = hint {
                    // The first at warn level, the rest at debug: a load
                    // generator with the wrong set fails every connection.
                    if shared.mismatch_warned.swap(true, Ordering::Relaxed) {
                        tracing::debug!("TLS handshake failed: {e}; {hint}");
                    } else {
                        tracing::warn!(
                            "TLS handshake failed: {e}; {hint} (further ablation mismatches are counted as handshake failure reason ablation_mismatch and logged at debug level)"
                        );
                    }
                }
                reason
            })
    };
    let mut hs = tokio::select! {
        r = tokio::time::timeout_at(deadline, handshake) => match r {
            Ok(Ok(hs)) => hs,
            Ok(Err(reason)) => {
                stats.failure(Transport::Tcp, &reason);
                return None;
            }
            Err(_) => {
                stats.failure(Transport::Tcp, "timeout");
                return None;
            }
        },
        // Handshakes in progress are abandoned at shutdown, not counted.
        _ = stopping(shutdown) => return None,
    };
    if let (Handshake::Done(tls), _) = &mut hs {
        // Session tickets leave now, as nginx sends them, not with the first
        // response: a client that gives up on a slow first request keeps them.
        let (raw, _) = tls.get_mut();
        if let Err(e) = std::future::poll_fn(|cx| raw.get_mut().get_mut().poll_send_held(cx)).await
        {
            stats.failure(Transport::Tcp, &tls::failure_reason(&e));
            return None;
        }
    }
    Some(hs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_early_data_connection_holds_little_more_than_an_ordinary_one() {
        // What an idle connection keeps of its stream lives in hyper's
        // connection; the 0-RTT stream must not make it grow by more than
        // its own bookkeeping (its handshake state is boxed and freed).
        let ordinary =
            std::mem::size_of::<Rewind<tokio_rustls::server::TlsStream<Rewind<TlsIo>>>>();
        let early = std::mem::size_of::<EarlyStream<Rewind<TlsIo>>>();
        println!("stream in an idle connection: early-data {early} B, ordinary {ordinary} B");
        assert!(
            early <= ordinary + 128,
            "early {early} B, ordinary {ordinary} B"
        );
    }
}
