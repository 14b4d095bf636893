//! Async pieces for the crates' tests: a runtime for one test and an echo
//! upstream on 127.0.0.1.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A current-thread tokio runtime with I/O and timers, for one test.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An upstream that answers each read with the same bytes, and at EOF
/// writes "bye" and closes.
pub async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind(crate::loopback()).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) => {
                            let _ = s.write_all(b"bye").await;
                            return;
                        }
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                        Err(_) => return,
                    }
                }
            });
        }
    });
    addr
}
