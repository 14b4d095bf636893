//! TCP + TLS 1.3: tokio + tokio-rustls, the reference the QUIC engines are
//! divided by. The server closes (close_notify + FIN) right after the
//! handshake; the client reads to EOF, so it knows the server counted it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{rustls_client, rustls_server, Identity, Params, Window, SERVER_NAME};

pub async fn serve(port: u16, id: &Identity, p: Params, window: Arc<Window>) -> Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(rustls_server(id, p)?));
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{port}: pick a free port with --port"))?;
    eprintln!("tcp: listening on 127.0.0.1:{port}");
    let mut printed = false;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tcp: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let window = window.clone();
        let first = !printed;
        printed = true;
        tokio::spawn(async move {
            let mut tls = match acceptor.accept(stream).await {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("tcp: handshake: {e}");
                    return;
                }
            };
            if first {
                let (_, conn) = tls.get_ref();
                eprintln!(
                    "tcp: negotiated {:?} {:?} group {:?}",
                    conn.protocol_version(),
                    conn.negotiated_cipher_suite().map(|s| s.suite()),
                    conn.negotiated_key_exchange_group().map(|g| g.name())
                );
            }
            window.handshake();
            let _ = tls.shutdown().await;
        });
    }
}

/// One full handshake: connect, handshake, read to the server's close.
async fn one(
    connector: &tokio_rustls::TlsConnector,
    port: u16,
    name: &rustls::pki_types::ServerName<'static>,
) -> Result<()> {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .context("connect")?;
    let _ = stream.set_nodelay(true);
    let mut tls = connector
        .connect(name.clone(), stream)
        .await
        .context("handshake")?;
    let mut buf = [0u8; 256];
    // Bounded: the server sends nothing but close_notify; stop at EOF or error.
    for _ in 0..16 {
        match tls.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    Ok(())
}

pub async fn client(port: u16, id: &Identity, p: Params, n: u64, c: u64) -> Result<(u64, u64)> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(rustls_client(id, p)?));
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME)?.to_owned();
    crate::common::drive(
        "tcp client",
        n,
        c,
        (connector, name),
        move |(connector, name): (
            tokio_rustls::TlsConnector,
            rustls::pki_types::ServerName<'static>,
        )| async move { one(&connector, port, &name).await },
    )
    .await
}
