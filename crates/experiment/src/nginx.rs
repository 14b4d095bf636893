//! nginx as the unprotected reference of `tlslab overload`: a config with
//! `limit_conn`, one process pinned to the server CPU, its access log read
//! back for the server-observed figures and its CPU read from `/proc`.
//! Finding, configuring, starting and metering nginx is tlslab-peers'.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tlslab_crypto::pki;
use tlslab_peers::Proc;
use tlslab_peers::nginx::NginxConf;

use crate::Error;

/// The access-log format: `$ssl_session_reused $status
/// $connection_requests $request_time`, space separated.
pub const LOG_FORMAT: &str = "$ssl_session_reused $status $connection_requests $request_time";

/// How nginx is run.
#[derive(Clone, Debug)]
pub struct NginxSettings {
    /// The nginx binary.
    pub bin: PathBuf,
    /// `limit_conn` of the one server block (key `$server_name`).
    pub limit_conn: usize,
    /// `worker_connections` (and `worker_rlimit_nofile`).
    pub worker_connections: usize,
    /// The CPU to pin nginx to, if any.
    pub cpu: Option<usize>,
    /// Response body bytes of the file served at `/bytes/<size>`.
    pub body_bytes: usize,
}

/// Finds `nginx` on `PATH` or in the sbin directories.
pub fn find_nginx() -> Option<PathBuf> {
    tlslab_peers::find_tool("nginx")
}

/// The nginx.conf of `prefix`, `port` and `s`.
fn conf(prefix: &Path, port: u16, s: &NginxSettings) -> NginxConf {
    let mut c = NginxConf::new(
        prefix,
        port,
        &prefix.join("server.pem"),
        &prefix.join("server.key"),
    )
    .log("tlslab", LOG_FORMAT, "access.log");
    c.comment = "# Written by tlslab overload: the unprotected reference.\n\
                 # One process (master_process off) serves everything: the one worker."
        .into();
    c.worker_connections = s.worker_connections;
    c.rlimit_nofile = Some(2 * s.worker_connections + 64);
    c.multi_accept = true;
    c.keepalive_timeout = Some("10s".into());
    c.limit_conn = Some(s.limit_conn);
    c.session_cache = "shared:SSL:20m".into();
    c
}

/// The nginx.conf text for `prefix`, `port` and `s`.
pub fn render_config(prefix: &Path, port: u16, s: &NginxSettings) -> String {
    conf(prefix, port, s).render()
}

/// A running nginx, killed (with its log kept) on [`Nginx::stop`] or drop.
pub struct Nginx {
    proc: Proc,
    conf: NginxConf,
}

impl Nginx {
    /// Writes the certificate, key, config and `www/bytes/<size>` under
    /// `prefix` and starts nginx on a free loopback port (foreground, one
    /// process), waiting up to 10 s until it accepts.
    pub fn start(prefix: &Path, g: &pki::Generated, s: &NginxSettings) -> Result<Nginx, Error> {
        let bytes = prefix.join("www/bytes");
        std::fs::create_dir_all(&bytes)
            .and_then(|()| {
                std::fs::write(
                    bytes.join(s.body_bytes.to_string()),
                    vec![b'x'; s.body_bytes],
                )
            })
            .map_err(|e| {
                Error::Nginx(format!(
                    "writing the response body in {}: {e}",
                    bytes.display()
                ))
            })?;
        g.write_to(prefix)?;
        let cpus: Vec<usize> = s.cpu.into_iter().collect();
        let (proc, conf) = tlslab_peers::nginx::start(&s.bin, &cpus, |port| conf(prefix, port, s))
            .map_err(|e| match e {
                tlslab_peers::Error::Spawn { .. } => Error::Nginx(format!(
                    "{e} (install nginx, e.g. apt-get install nginx, or pass --nginx-bin)"
                )),
                e => Error::Nginx(e.to_string()),
            })?;
        Ok(Nginx { proc, conf })
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.conf.port
    }

    /// CPU time nginx's one process has used so far (its threads'
    /// schedstat).
    pub fn cpu_time(&self) -> Duration {
        self.proc.cpu_time().total()
    }

    /// nginx's resident set size (`VmRSS`), KiB.
    pub fn rss_kib(&self) -> u64 {
        self.proc.rss_kib()
    }

    /// The access log's path.
    pub fn access_log(&self) -> PathBuf {
        self.conf.prefix.join("access.log")
    }

    /// Stops nginx (it writes each log line as the request completes, so
    /// nothing is lost) and returns its access log, parsed.
    pub fn stop(self) -> Result<LogCounts, Error> {
        let log = self.access_log();
        drop(self.proc.kill());
        let text = std::fs::read_to_string(&log)
            .map_err(|e| Error::Nginx(format!("reading {}: {e}", log.display())))?;
        LogCounts::parse(&text).map_err(Error::Nginx)
    }
}

/// What nginx's access log (in [`LOG_FORMAT`]) says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogCounts {
    /// Lines (requests nginx finished, whatever the status).
    pub lines: u64,
    /// Status 200.
    pub ok: u64,
    /// Status 200 on a resumed session (`$ssl_session_reused` = `r`).
    pub ok_resumed: u64,
    /// Status 503 (`limit_conn` refused the request), on a full handshake.
    pub rejected_full: u64,
    /// Status 503 on a resumed session.
    pub rejected_resumed: u64,
    /// First requests of a connection (`$connection_requests` = 1) whose
    /// handshake was full.
    pub conns_full: u64,
    /// First requests of a connection on a resumed session.
    pub conns_resumed: u64,
}

impl LogCounts {
    /// Parses the whole log; an error names the first bad line.
    pub fn parse(text: &str) -> Result<LogCounts, String> {
        let mut c = LogCounts::default();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = || format!("nginx access log line {}: cannot parse {line:?}", i + 1);
            let mut f = line.split(' ');
            let reused = match f.next() {
                Some("r") => true,
                Some(".") => false,
                _ => return Err(bad()),
            };
            let status: u16 = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let nreq: u64 = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            c.lines += 1;
            match status {
                200 => {
                    c.ok += 1;
                    c.ok_resumed += u64::from(reused);
                }
                503 if reused => c.rejected_resumed += 1,
                503 => c.rejected_full += 1,
                _ => {}
            }
            if nreq == 1 {
                if reused {
                    c.conns_resumed += 1;
                } else {
                    c.conns_full += 1;
                }
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_counted_by_status_and_session() {
        let log = ". 200 1 0.002\nr 200 1 0.001\nr 200 2 0.000\n. 503 1 0.000\nr 503 1 0.000\n. 404 1 0.000\n";
        let c = LogCounts::parse(log).unwrap();
        assert_eq!(
            c,
            LogCounts {
                lines: 6,
                ok: 3,
                ok_resumed: 2,
                rejected_full: 1,
                rejected_resumed: 1,
                conns_full: 3,
                conns_resumed: 2,
            }
        );
        assert!(
            LogCounts::parse("x 200 1 0.1")
                .unwrap_err()
                .contains("line 1")
        );
    }

    #[test]
    fn the_config_limits_connections_per_server_on_loopback() {
        let s = NginxSettings {
            bin: "nginx".into(),
            limit_conn: 16,
            worker_connections: 4000,
            cpu: Some(0),
            body_bytes: 1024,
        };
        let c = render_config(Path::new("/tmp/x"), 4433, &s);
        assert!(c.contains("listen 127.0.0.1:4433 ssl;"), "{c}");
        assert!(c.contains("limit_conn_zone $server_name zone=perserver:1m;"));
        assert!(c.contains("limit_conn perserver 16;"));
        assert!(c.contains("worker_processes 1;"));
        assert!(c.contains("worker_connections 4000;"));
    }
}
