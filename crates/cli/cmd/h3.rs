//! The HTTP/3 (QUIC) flags of `serve` and `load` into their engines'
//! settings: every bad combination is a usage error (exit 2) before any
//! work.

use std::net::SocketAddr;

use crate::args::h3::{LoadH3Args, Retry, ServeH3Args};
use crate::usage::{Usage, usage};

impl ServeH3Args {
    /// The QUIC listener's settings, or `None` without --h3; `https` is
    /// the TLS listener's address and `tls13` whether TLS 1.3 is on.
    pub fn settings(
        &self,
        https: Option<SocketAddr>,
        tls13: bool,
    ) -> anyhow::Result<Option<tlslab_server::H3Settings>> {
        let Some(addr) = &self.h3 else {
            if self.quic_idle_timeout.is_some()
                || self.quic_max_connections.is_some()
                || self.quic_retry.is_some()
                || self.quic_new_tokens.is_some()
            {
                return Err(usage(
                    "--quic-idle-timeout, --quic-max-connections, --quic-retry and --quic-new-tokens need --h3; add --h3",
                ));
            }
            return Ok(None);
        };
        let Some(https) = https else {
            return Err(usage("--h3 needs the TLS listener; give --https too"));
        };
        if !tls13 {
            return Err(usage(
                "--h3 needs TLS 1.3 (QUIC has no other); use --tls 1.3 or 1.2,1.3",
            ));
        }
        let addr = if addr.is_empty() {
            https
        } else {
            addr.parse().map_err(|e| {
                usage(format!(
                    "--h3 {addr}: {e}; give IP:PORT, e.g. 127.0.0.1:8443"
                ))
            })?
        };
        let mut s = tlslab_server::H3Settings::new(addr);
        if let Some(d) = self.quic_idle_timeout {
            if d.is_zero() {
                return Err(usage(
                    "--quic-idle-timeout 0 closes every connection; give a positive duration",
                ));
            }
            s.idle_timeout = d;
        }
        if let Some(n) = self.quic_max_connections {
            if n == 0 {
                return Err(usage(
                    "--quic-max-connections 0 admits nobody; use at least 1",
                ));
            }
            s.max_connections = n;
        }
        s.retry = match self.quic_retry {
            Some(Retry::Off) => tlslab_server::QuicRetry::Off,
            Some(Retry::Always) => tlslab_server::QuicRetry::Always,
            None | Some(Retry::UnderLoad) => tlslab_server::QuicRetry::UnderLoad,
        };
        if let Some(n) = self.quic_new_tokens {
            if n > MAX_NEW_TOKENS {
                return Err(usage(format!(
                    "--quic-new-tokens {n}: give 0 to {MAX_NEW_TOKENS} (a client keeps one token per server; quinn sends 2)"
                )));
            }
            s.new_tokens = Some(n);
        }
        Ok(Some(s))
    }
}

/// The most NEW_TOKEN tokens `--quic-new-tokens` sends per connection.
const MAX_NEW_TOKENS: u32 = 16;

impl LoadH3Args {
    /// Runs the load over HTTP/3 with --h3, else over TCP.
    pub fn run(
        &self,
        cfg: &tlslab_load::LoadConfig,
        streams: u32,
    ) -> anyhow::Result<tlslab_report::LoadReport> {
        if !self.h3 {
            return Ok(tlslab_load::run(cfg)?);
        }
        let h3 = tlslab_load::quic::Http3 {
            max_concurrent_streams: streams,
            flood: None,
        };
        tlslab_load::quic::validate(cfg, &h3)
            .map_err(|e| anyhow::Error::new(Usage(e.to_string())))?;
        Ok(tlslab_load::quic::run(cfg, &h3)?)
    }
}
