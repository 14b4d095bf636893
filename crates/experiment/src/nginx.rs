//! nginx as the unprotected reference of `tlslab overload`: a config with
//! `limit_conn`, one process pinned to the server CPU, its access log read
//! back for the server-observed figures and its CPU read from `/proc`.
//!
//! Every path nginx uses lives under one prefix directory (`-p`); it listens
//! on 127.0.0.1 only, on a port picked free just before it starts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tlslab_crypto::pki;

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
    /// The CPU to pin nginx to (`taskset -c`), if any.
    pub cpu: Option<usize>,
    /// Response body bytes of the file served at `/bytes/<size>`.
    pub body_bytes: usize,
}

/// Finds `nginx` on `PATH` or in `/usr/sbin`.
pub fn find_nginx() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

/// The nginx.conf text for `prefix`, `port` and `s`.
pub fn render_config(prefix: &Path, port: u16, s: &NginxSettings) -> String {
    let p = prefix.display();
    format!(
        "# Written by tlslab overload: the unprotected reference.\n\
         # One process (master_process off) serves everything: the one worker.\n\
         worker_processes 1;\n\
         worker_rlimit_nofile {files};\n\
         pid {p}/nginx.pid;\n\
         error_log {p}/error.log warn;\n\
         events {{ worker_connections {conns}; multi_accept on; }}\n\
         http {{\n\
         \x20   client_body_temp_path {p}/tmp/client_body;\n\
         \x20   proxy_temp_path {p}/tmp/proxy;\n\
         \x20   fastcgi_temp_path {p}/tmp/fastcgi;\n\
         \x20   uwsgi_temp_path {p}/tmp/uwsgi;\n\
         \x20   scgi_temp_path {p}/tmp/scgi;\n\
         \x20   default_type application/octet-stream;\n\
         \x20   log_format tlslab '{LOG_FORMAT}';\n\
         \x20   access_log {p}/access.log tlslab;\n\
         \x20   keepalive_timeout 10s;\n\
         \x20   limit_conn_zone $server_name zone=perserver:1m;\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{port} ssl;\n\
         \x20       server_name localhost;\n\
         \x20       ssl_certificate {p}/server.pem;\n\
         \x20       ssl_certificate_key {p}/server.key;\n\
         \x20       ssl_protocols TLSv1.2 TLSv1.3;\n\
         \x20       ssl_session_cache shared:SSL:20m;\n\
         \x20       ssl_session_timeout 10m;\n\
         \x20       ssl_session_tickets on;\n\
         \x20       limit_conn perserver {limit};\n\
         \x20       limit_conn_status 503;\n\
         \x20       root {p}/www;\n\
         \x20   }}\n\
         }}\n",
        files = 2 * s.worker_connections + 64,
        conns = s.worker_connections,
        limit = s.limit_conn,
    )
}

/// A running nginx, killed (with its log kept) on [`Nginx::stop`] or drop.
pub struct Nginx {
    child: Child,
    prefix: PathBuf,
    port: u16,
}

impl Nginx {
    /// Writes the certificate, key, config and `www/bytes/<size>` under
    /// `prefix` and starts nginx on a free loopback port (foreground, one
    /// process), waiting up to 10 s until it accepts.
    pub fn start(prefix: &Path, g: &pki::Generated, s: &NginxSettings) -> Result<Nginx, Error> {
        let io = |what: &str, e: std::io::Error| Error::Nginx(format!("{what}: {e}"));
        for d in [
            "tmp/client_body",
            "tmp/proxy",
            "tmp/fastcgi",
            "tmp/uwsgi",
            "tmp/scgi",
            "www/bytes",
        ] {
            std::fs::create_dir_all(prefix.join(d))
                .map_err(|e| io(&format!("creating {}", prefix.join(d).display()), e))?;
        }
        g.write_to(prefix)?;
        std::fs::write(
            prefix.join("www/bytes").join(s.body_bytes.to_string()),
            vec![b'x'; s.body_bytes],
        )
        .map_err(|e| io("writing the response body", e))?;
        let mut last = String::new();
        for _ in 0..5 {
            let port = std::net::TcpListener::bind(("127.0.0.1", 0))
                .and_then(|l| l.local_addr())
                .map_err(|e| io("picking a loopback port", e))?
                .port();
            let conf = prefix.join("nginx.conf");
            std::fs::write(&conf, render_config(prefix, port, s))
                .map_err(|e| io("writing nginx.conf", e))?;
            let _ = std::fs::remove_file(prefix.join("error.log"));
            let mut cmd = match s.cpu {
                Some(cpu) => {
                    let mut c = Command::new("taskset");
                    c.arg("-c").arg(cpu.to_string()).arg(&s.bin);
                    c
                }
                None => Command::new(&s.bin),
            };
            cmd.arg("-p")
                .arg(prefix)
                .arg("-c")
                .arg(&conf)
                .args(["-g", "daemon off; master_process off;"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().map_err(|e| {
                Error::Nginx(format!(
                    "cannot start {}{}: {e} (install nginx, e.g. apt-get install nginx, or pass --nginx-bin)",
                    if s.cpu.is_some() { "taskset with " } else { "" },
                    s.bin.display()
                ))
            })?;
            let deadline = Instant::now() + Duration::from_secs(10);
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return Ok(Nginx {
                        child,
                        prefix: prefix.to_path_buf(),
                        port,
                    });
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read as _;
                let _ = e.read_to_string(&mut stderr);
            }
            last = format!(
                "{stderr}{}",
                std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default()
            );
            if !last.contains("Address already in use") {
                break;
            }
        }
        Err(Error::Nginx(format!(
            "nginx did not start within 10 s: {}",
            last.trim()
        )))
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// CPU time nginx's one process has used so far (`/proc/PID/schedstat`,
    /// first field: nanoseconds on a CPU).
    pub fn cpu_time(&self) -> Duration {
        std::fs::read_to_string(format!("/proc/{}/schedstat", self.child.id()))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(Duration::ZERO, Duration::from_nanos)
    }

    /// nginx's resident set size (`VmRSS` of `/proc/PID/status`), KiB.
    pub fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0)
    }

    /// The access log's path.
    pub fn access_log(&self) -> PathBuf {
        self.prefix.join("access.log")
    }

    /// Stops nginx (it writes each log line as the request completes, so
    /// nothing is lost) and returns its access log, parsed.
    pub fn stop(mut self) -> Result<LogCounts, Error> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let text = std::fs::read_to_string(self.access_log())
            .map_err(|e| Error::Nginx(format!("reading {}: {e}", self.access_log().display())))?;
        LogCounts::parse(&text).map_err(Error::Nginx)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
