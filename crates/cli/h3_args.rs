//! The HTTP/3 (QUIC) flags of `serve` and `load` (issue 23), flattened into
//! their arguments, and their checks: every bad combination is a usage
//! error (exit 2) before any work.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::config::{Usage, usage};

/// `--quic-retry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Retry {
    /// No Retry packets.
    Off,
    /// A Retry before every handshake from an address not yet validated.
    Always,
    /// A Retry while half of --quic-max-connections are open.
    UnderLoad,
}

/// `serve --h3 [ADDR]` and its QUIC options.
#[derive(Clone, Debug, Args)]
pub struct ServeH3Args {
    /// Serve HTTP/3 over QUIC on this UDP address too (default with no
    /// value: the --https address and port, over UDP), with the TLS
    /// listener's certificate, session cache, tickets and metering provider
    /// (ALPN h3, TLS 1.3 only), the same content, and `Alt-Svc: h3=":PORT"`
    /// on every TCP response.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "")]
    pub h3: Option<String>,

    /// With --h3: close a QUIC connection that received nothing for this long.
    #[arg(long, value_name = "DURATION", value_parser = crate::args::parse_duration)]
    pub quic_idle_timeout: Option<Duration>,

    /// With --h3: at most this many QUIC connections at once; more are refused.
    #[arg(long, value_name = "N")]
    pub quic_max_connections: Option<usize>,

    /// With --h3: address validation by Retry packets (off, always, under-load).
    #[arg(long, value_enum, value_name = "WHEN")]
    pub quic_retry: Option<Retry>,
}

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
            {
                return Err(usage(
                    "--quic-idle-timeout, --quic-max-connections and --quic-retry need --h3; add --h3",
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
            None | Some(Retry::Off) => tlslab_server::QuicRetry::Off,
            Some(Retry::Always) => tlslab_server::QuicRetry::Always,
            Some(Retry::UnderLoad) => tlslab_server::QuicRetry::UnderLoad,
        };
        Ok(Some(s))
    }
}

/// `load --h3`.
#[derive(Clone, Debug, Args)]
pub struct LoadH3Args {
    /// Speak HTTP/3 over QUIC (ALPN h3, TLS 1.3): closed loop over the
    /// https:// URLs of one origin, -m streams in flight per connection,
    /// --reuse and --early-data (0-RTT) as over TCP. The report adds a
    /// `transport` section (handshakes full / resumed / 0-RTT with times,
    /// bytes and datagrams each way).
    #[arg(long)]
    pub h3: bool,
}

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
        };
        tlslab_load::quic::validate(cfg, &h3)
            .map_err(|e| anyhow::Error::new(Usage(e.to_string())))?;
        Ok(tlslab_load::quic::run(cfg, &h3)?)
    }
}
