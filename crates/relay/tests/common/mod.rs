//! Helpers shared by the relay tests: loopback upstreams and relay
//! configurations. Every address is loopback.
#![allow(dead_code, missing_docs)]

use std::net::SocketAddr;
use std::time::Duration;

use tlslab_relay::{Conditions, RelayConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

pub use tlslab_testkit::loopback;

/// An upstream that answers each read with the same bytes, and at EOF
/// writes "bye" and closes.
pub async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind(loopback()).await.unwrap();
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

pub fn cfg(upstream: SocketAddr, cond: Conditions) -> RelayConfig {
    RelayConfig::new(loopback(), upstream, cond)
}

pub fn delay(ms: u64) -> Conditions {
    Conditions {
        delay: Duration::from_millis(ms),
        ..Conditions::default()
    }
}
