//! The HTTP/3 (QUIC) flags of `serve` and `load` into their engines'
//! settings: every bad combination is a usage error (exit 2) before any
//! work.

use std::net::SocketAddr;

use tlslab_runtime::qlog::{QlogLimits, QlogOptions};

use tlslab_server::{AdmissionMode, QuicAdmission, QuicShedWith};

use crate::args::h3::{LoadH3Args, QlogArgs, QuicPolicy, QuicShed, Retry, ServeH3Args};
use crate::usage::{Usage, usage};

impl ServeH3Args {
    /// The QUIC listener's settings, or `None` without --h3; `https` is
    /// the TLS listener's address, `admission` the server's `--admission`
    /// and `tls13` whether TLS 1.3 is on.
    pub fn settings(
        &self,
        https: Option<SocketAddr>,
        admission: AdmissionMode,
        tls13: bool,
    ) -> anyhow::Result<Option<tlslab_server::H3Settings>> {
        let Some(addr) = &self.h3 else {
            if self.quic_idle_timeout.is_some()
                || self.quic_max_connections.is_some()
                || self.quic_retry.is_some()
                || self.quic_new_tokens.is_some()
                || self.quic_admission.is_some()
                || self.quic_shed_with.is_some()
                || self.quic_retry_threshold.is_some()
                || self.qlog.qlog.is_some()
                || self.quic_lb.is_some()
                || self.quic_recv_buffer.is_some()
            {
                return Err(usage(
                    "--quic-idle-timeout, --quic-max-connections, --quic-recv-buffer, --quic-retry, --quic-new-tokens, --quic-admission, --quic-shed-with, --quic-retry-threshold, --quic-lb and --qlog need --h3; add --h3",
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
        if let Some(n) = self.quic_recv_buffer {
            if !(MIN_RECV_BUFFER..=MAX_RECV_BUFFER).contains(&n) {
                return Err(usage(format!(
                    "--quic-recv-buffer {n}: give {MIN_RECV_BUFFER} to {MAX_RECV_BUFFER} bytes (a few MB holds a burst of Initials)"
                )));
            }
            s.recv_buffer = Some(n);
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
        if let Some(c) = &self.quic_lb {
            s.quic_lb = Some(tlslab_crypto::quic::LbConfig::parse(c).map_err(|e| {
                usage(format!(
                    "--quic-lb: {}; the form is server-id=HEX,nonce-len=N,config-id=N[,key=HEX], e.g. server-id=01,nonce-len=6,config-id=0",
                    e.0
                ))
            })?);
        }
        s.qlog = self.qlog.options()?;
        self.admission(&mut s, admission)?;
        Ok(Some(s))
    }

    /// `--quic-admission` and its companions, checked against
    /// `--admission` (the server's).
    fn admission(
        &self,
        s: &mut tlslab_server::H3Settings,
        server: AdmissionMode,
    ) -> anyhow::Result<()> {
        let policy = match (self.quic_admission, self.quic_retry_threshold) {
            (Some(p), _) => p,
            (None, Some(_)) => QuicPolicy::RetryThreshold,
            (None, None) => match server {
                AdmissionMode::Off => QuicPolicy::Off,
                AdmissionMode::Static => QuicPolicy::Static,
                AdmissionMode::Session => QuicPolicy::Session,
            },
        };
        s.admission = match policy {
            QuicPolicy::Off => QuicAdmission::Off,
            QuicPolicy::Static => {
                if self.quic_max_connections.is_none() {
                    return Err(usage(
                        "--quic-admission static needs --quic-max-connections N (the static limit); or give --quic-admission off",
                    ));
                }
                QuicAdmission::Static
            }
            QuicPolicy::RetryThreshold => {
                let n = match self.quic_retry_threshold {
                    None => {
                        return Err(usage(
                            "--quic-admission retry-threshold needs --quic-retry-threshold N (half-open handshakes)",
                        ));
                    }
                    Some(0) => {
                        return Err(usage(
                            "--quic-retry-threshold 0 retries every attempt; use --quic-retry always, or a threshold of at least 1",
                        ));
                    }
                    Some(n) => n,
                };
                if self.quic_retry.is_some() {
                    return Err(usage(
                        "--quic-admission retry-threshold decides Retry itself; drop --quic-retry",
                    ));
                }
                QuicAdmission::RetryThreshold(n)
            }
            QuicPolicy::Session => {
                if server != AdmissionMode::Session {
                    return Err(usage(
                        "--quic-admission session needs --admission session (one controller for both transports)",
                    ));
                }
                QuicAdmission::Session
            }
        };
        if self.quic_retry_threshold.is_some() && policy != QuicPolicy::RetryThreshold {
            return Err(usage(
                "--quic-retry-threshold is the retry-threshold policy's; drop it or give --quic-admission retry-threshold",
            ));
        }
        if let Some(w) = self.quic_shed_with {
            if policy != QuicPolicy::Session {
                return Err(usage(
                    "--quic-shed-with needs session admission over QUIC: add --admission session",
                ));
            }
            s.shed_with = match w {
                QuicShed::Refuse => QuicShedWith::Refuse,
                QuicShed::Retry => QuicShedWith::Retry,
                QuicShed::Ignore => QuicShedWith::Ignore,
            };
        }
        Ok(())
    }
}

impl QlogArgs {
    /// `--qlog DIR` with its caps, checked; the directory is created
    /// (if missing) and must be writable.
    pub fn options(&self) -> anyhow::Result<Option<QlogOptions>> {
        let Some(dir) = &self.qlog else {
            return Ok(None);
        };
        let mut limits = QlogLimits::default();
        if let Some(n) = self.qlog_max_files {
            if n == 0 {
                return Err(usage(
                    "--qlog-max-files 0 logs nothing; give at least 1, or drop --qlog",
                ));
            }
            limits.max_files = n;
        }
        if let Some(b) = &self.qlog_max_bytes {
            let n =
                tlslab_path::parse_bytes(b).map_err(|e| usage(format!("--qlog-max-bytes: {e}")))?;
            if n == 0 {
                return Err(usage(
                    "--qlog-max-bytes 0 logs nothing; give a size such as 64MiB, or drop --qlog",
                ));
            }
            limits.max_bytes = n;
        }
        let o = QlogOptions {
            dir: dir.clone(),
            limits,
        };
        // A usage error now, not a failed run: the directory can be made
        // and written (the engine opens it again).
        tlslab_runtime::qlog::QlogDir::open(&o, "cli").map_err(|e| {
            usage(format!(
                "--qlog {}: {e}; give a directory this user can create or write",
                dir.display()
            ))
        })?;
        Ok(Some(o))
    }
}

/// The most NEW_TOKEN tokens `--quic-new-tokens` sends per connection.
const MAX_NEW_TOKENS: u32 = 16;

/// `--quic-recv-buffer`'s bounds: the kernel's own floor (SOCK_MIN_RCVBUF
/// is about 2.3 KB) and 1 GiB (the kernel takes an int, doubled).
const MIN_RECV_BUFFER: usize = 4096;
const MAX_RECV_BUFFER: usize = 1 << 30;

/// `--flood-rate` when not given.
const DEFAULT_FLOOD_RATE: u32 = 100;

impl LoadH3Args {
    /// The flood of `--flood`, checked: a usage error without --h3, without
    /// --confirm-flood, or with a flood flag but no --flood.
    pub fn flood(&self) -> anyhow::Result<Option<tlslab_load::FloodPlan>> {
        let Some(kind) = self.flood else {
            if self.flood_rate.is_some()
                || self.flood_max.is_some()
                || self.confirm_flood
                || self.flood_allow_remote
            {
                return Err(usage(
                    "--flood-rate, --flood-max, --confirm-flood and --flood-allow-remote need \
                     --flood KIND; add --flood valid|junk|mixed|ping-only",
                ));
            }
            return Ok(None);
        };
        if !self.h3 {
            return Err(usage(format!(
                "--flood {} floods a QUIC server; add --h3",
                kind.name()
            )));
        }
        if !self.confirm_flood {
            return Err(usage(format!(
                "--flood {} sends hostile traffic (a denial-of-service test); add \
                 --confirm-flood to run it against a server you run",
                kind.name()
            )));
        }
        Ok(Some(tlslab_load::FloodPlan {
            kind,
            rate: self.flood_rate.unwrap_or(DEFAULT_FLOOD_RATE),
            max: self.flood_max,
            allow_remote: self.flood_allow_remote,
        }))
    }

    /// Runs the load over HTTP/3 with --h3, else over TCP.
    pub fn run(
        &self,
        cfg: &tlslab_load::LoadConfig,
        streams: u32,
    ) -> anyhow::Result<tlslab_report::LoadReport> {
        let flood = self.flood()?;
        if !self.h3 {
            if self.quic_new_socket || self.quic_rebind_after.is_some() {
                return Err(usage(
                    "--quic-new-socket and --quic-rebind-after move QUIC clients: they need --h3",
                ));
            }
            if self.qlog.qlog.is_some() {
                return Err(usage(
                    "--qlog logs QUIC connections: it needs --h3; add --h3 or drop --qlog",
                ));
            }
            return Ok(tlslab_load::run(cfg)?);
        }
        let qlog = self.qlog.options()?;
        crate::flags::note_qlog("load", "client", qlog.as_ref());
        let mut cfg = cfg.clone();
        cfg.http3 = Some(tlslab_load::Http3 {
            max_concurrent_streams: streams,
            flood,
            qlog,
            new_socket: self.quic_new_socket,
            rebind_after: self.quic_rebind_after,
        });
        tlslab_load::validate(&cfg).map_err(|e| anyhow::Error::new(Usage(e.to_string())))?;
        if let Some(f) = flood {
            let first = &cfg.targets[0];
            let what = match f.kind {
                tlslab_load::quic::flood::FloodKind::PingOnly => "new PING-only clients",
                _ => "Initials",
            };
            eprintln!(
                "tlslab: WARNING: --flood {}: sending hostile QUIC traffic to {}:{} (UDP), \
                 {} {what} per second{}, beside the load, for {}; a denial-of-service test \
                 for a server you run",
                f.kind.name(),
                first.host,
                first.port,
                f.rate,
                f.max.map_or(String::new(), |m| format!(", at most {m}")),
                cfg.duration
                    .map_or("the run (at most 1 h)".to_string(), |d| {
                        format!("{:.0} s", (d + cfg.warmup).as_secs_f64())
                    }),
            );
        }
        Ok(tlslab_load::run(&cfg)?)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::usage::Usage;

    fn load_args(extra: &[&str]) -> Result<crate::args::load::LoadArgs, clap::Error> {
        let mut v = vec!["tlslab", "load", "https://127.0.0.1:1/", "-d", "2s"];
        v.extend_from_slice(extra);
        match crate::args::Cli::try_parse_from(v)?.command {
            crate::args::Command::Load(a) => Ok(a),
            _ => unreachable!(),
        }
    }

    /// The usage error of `load` with `extra`.
    fn refused(extra: &[&str]) -> String {
        let a = load_args(extra).unwrap();
        let e = a.h3.flood().unwrap_err();
        assert!(e.downcast_ref::<Usage>().is_some(), "{e}");
        e.to_string()
    }

    #[test]
    fn a_flood_needs_h3_and_its_confirmation() {
        assert!(refused(&["--flood", "valid", "--confirm-flood"]).contains("add --h3"));
        let e = refused(&["--h3", "--flood", "junk"]);
        assert!(e.contains("--confirm-flood"), "{e}");
        let e = refused(&["--h3", "--flood-rate", "10"]);
        assert!(e.contains("--flood KIND"), "{e}");
        let a = load_args(&[
            "--h3",
            "--flood",
            "ping-only",
            "--flood-rate",
            "20/s",
            "--flood-max",
            "50",
            "--confirm-flood",
        ])
        .unwrap();
        let f = a.h3.flood().unwrap().expect("a flood");
        assert_eq!(f.kind, tlslab_load::quic::flood::FloodKind::PingOnly);
        assert_eq!((f.rate, f.max, f.allow_remote), (20, Some(50), false));
        let f = load_args(&["--h3", "--flood", "valid", "--confirm-flood"])
            .unwrap()
            .h3
            .flood()
            .unwrap()
            .expect("a flood");
        assert_eq!(f.rate, super::DEFAULT_FLOOD_RATE);
        assert!(load_args(&["--h3", "--flood", "bogus"]).is_err());
        assert!(load_args(&["--h3", "--flood", "junk", "--flood-rate", "0"]).is_err());
        assert!(load_args(&["--h3", "--flood", "junk", "--flood-rate", "x/s"]).is_err());
    }

    #[test]
    fn a_flood_refuses_a_remote_target_and_rates_out_of_range() {
        let check = |url: &str, extra: &[&str]| {
            let mut v = vec!["tlslab", "load", url, "-d", "2s", "--h3", "--confirm-flood"];
            v.extend_from_slice(extra);
            let crate::args::Command::Load(a) =
                crate::args::Cli::try_parse_from(v).unwrap().command
            else {
                unreachable!()
            };
            let cfg = crate::flags::load::config(&a).unwrap().cfg;
            let mut cfg = cfg;
            cfg.http3 = Some(tlslab_load::Http3 {
                max_concurrent_streams: 1,
                flood: a.h3.flood().unwrap(),
                qlog: None,
                new_socket: false,
                rebind_after: None,
            });
            tlslab_load::validate(&cfg).map_err(|e| e.to_string())
        };
        let e = check("https://192.0.2.1:8443/", &["--flood", "valid"]).unwrap_err();
        assert!(e.contains("--flood-allow-remote"), "{e}");
        assert!(
            check(
                "https://192.0.2.1:8443/",
                &["--flood", "valid", "--flood-allow-remote"]
            )
            .is_ok()
        );
        assert!(check("https://localhost:8443/", &["--flood", "junk"]).is_ok());
        let e = check(
            "https://127.0.0.1:8443/",
            &["--flood", "ping-only", "--flood-rate", "1001"],
        )
        .unwrap_err();
        assert!(e.contains("1 to 1000"), "{e}");
        let e = check(
            "https://127.0.0.1:8443/",
            &["--flood", "junk", "--flood-max", "0"],
        )
        .unwrap_err();
        assert!(e.contains("--flood-max 0"), "{e}");
    }
}
