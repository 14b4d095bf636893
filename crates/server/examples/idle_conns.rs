//! Opens idle TLS 1.3 keep-alive connections to an in-process `tlslab`
//! server and exits while they are open, so that a heap profiler reports
//! what each connection holds as "leaked" at exit, by allocation site.
//!
//! Each connection does what `tlslab load --think-time const:1h` does in
//! `bench/peers.sh --sections conns`: a TLS 1.3 handshake with ALPN
//! http/1.1, one `GET /bytes/4096` read to its end, then nothing.
//! This binary uses the system allocator (the `tlslab` binary uses
//! mimalloc, which heap profilers do not see).
//!
//! ```text
//! cargo build --release -p tlslab-server --example idle_conns
//! heaptrack target/release/examples/idle_conns 400
//! heaptrack_print -f heaptrack.idle_conns.*.zst --print-leaks 1 | less
//! ```
//!
//! It prints how many connections it holds and how many the server counts
//! open; the bytes are the profiler's to report (BENCHMARKS.md, "Memory per
//! idle connection: `tlslab serve`", has the table and how it was read).

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tlslab_crypto::pki::{self, KeyType};
use tlslab_crypto::provider::{self, Algorithms, Version};
use tlslab_server::{CertSource, Content, ServeConfig, Server, TlsSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

fn main() {
    let n: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 400,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: idle_conns [CONNECTIONS]  (a positive count; default 400)");
            std::process::exit(2);
        }
    };
    let g = pki::generate(KeyType::EcdsaP256, &[]).expect("generate a certificate");
    let mut tls = TlsSettings::new(CertSource::Generated(g.clone()));
    tls.tickets = true;
    let mut cfg = ServeConfig::new("127.0.0.1:0".parse().unwrap(), Content::Empty, tls);
    cfg.threads = 1;
    let server = Server::start(cfg).expect("start the server");
    let addr = server.https_addr().expect("an HTTPS address");

    let versions = [Version::Tls13];
    let p = provider::build(&versions, &Algorithms::default()).unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(p)
        .with_protocol_versions(&provider::protocol_versions(&versions))
        .unwrap()
        .with_root_certificates(g.roots().unwrap())
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = TlsConnector::from(Arc::new(c));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let held = rt.block_on(async {
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            let tcp = TcpStream::connect(addr).await.expect("connect");
            let mut tls = connector
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await
                .expect("TLS handshake");
            tls.write_all(b"GET /bytes/4096 HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .await
                .expect("send the request");
            let mut got = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                let k = tls.read(&mut buf).await.expect("read the response");
                assert!(k > 0, "the server closed a keep-alive connection");
                got.extend_from_slice(&buf[..k]);
                if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n")
                    && got.len() >= end + 4 + 4096
                {
                    break;
                }
            }
            assert!(got.starts_with(b"HTTP/1.1 200"), "not a 200 response");
            held.push(tls);
        }
        held
    });
    std::thread::sleep(Duration::from_millis(300));
    let open = server.snapshot().open_connections;
    println!(
        "{} connections held open, {open} open on the server",
        held.len()
    );
    // Exit with everything open: what the connections hold is "leaked".
    std::process::exit(0);
}
