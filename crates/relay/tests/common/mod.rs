//! The relay suites' fixtures: a relay configuration on 127.0.0.1 and
//! delay-only conditions. The generic pieces (loopback, an echo upstream)
//! are the one test kit's (`tlslab-testkit`), re-exported here.
#![allow(dead_code, missing_docs, unused_imports)]

use std::net::SocketAddr;
use std::time::Duration;

use tlslab_relay::{Conditions, RelayConfig};

pub use tlslab_testkit::{echo_server, loopback};

pub fn cfg(upstream: SocketAddr, cond: Conditions) -> RelayConfig {
    RelayConfig::new(loopback(), upstream, cond)
}

pub fn delay(ms: u64) -> Conditions {
    Conditions {
        delay: Duration::from_millis(ms),
        ..Conditions::default()
    }
}
