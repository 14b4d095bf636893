//! nginx as a reference TLS server: a config writer that keeps every path
//! inside one temporary prefix, a start/stop guard, and a parser for the
//! access-log format the interop suite asks nginx to write.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{Certs, Proc, free_port, tool};

/// The access-log format: one line per request, space separated.
pub const LOG_FORMAT: &str = "$ssl_session_reused $ssl_protocol $status $request_uri";

/// The second access log's format: request URI and response body bytes
/// (headers excluded), one line per request.
pub const SIZES_FORMAT: &str = "$request_uri $body_bytes_sent";

/// What an nginx instance is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The prefix (`-p`): config, pid, logs, temp dirs and docroot live here.
    pub prefix: PathBuf,
    /// Port on 127.0.0.1.
    pub port: u16,
    /// Server certificate chain.
    pub chain: PathBuf,
    /// Server key.
    pub key: PathBuf,
    /// `ssl_session_tickets on|off`.
    pub tickets: bool,
}

impl Config {
    /// The access log file.
    pub fn access_log(&self) -> PathBuf {
        self.prefix.join("access.log")
    }

    /// The second access log, in [`SIZES_FORMAT`].
    pub fn sizes_log(&self) -> PathBuf {
        self.prefix.join("sizes.log")
    }

    /// The error log file.
    pub fn error_log(&self) -> PathBuf {
        self.prefix.join("error.log")
    }

    /// The document root.
    pub fn docroot(&self) -> PathBuf {
        self.prefix.join("www")
    }

    /// The config file path.
    pub fn conf_path(&self) -> PathBuf {
        self.prefix.join("nginx.conf")
    }

    /// The nginx.conf text.
    pub fn render(&self) -> String {
        let p = self.prefix.display();
        let tickets = if self.tickets { "on" } else { "off" };
        format!(
            "# Written by tlslab's interop tests.\n\
             worker_processes 1;\n\
             pid {p}/nginx.pid;\n\
             error_log {p}/error.log info;\n\
             events {{ worker_connections 512; }}\n\
             http {{\n\
             \x20   client_body_temp_path {p}/tmp/client_body;\n\
             \x20   proxy_temp_path {p}/tmp/proxy;\n\
             \x20   fastcgi_temp_path {p}/tmp/fastcgi;\n\
             \x20   uwsgi_temp_path {p}/tmp/uwsgi;\n\
             \x20   scgi_temp_path {p}/tmp/scgi;\n\
             \x20   default_type application/octet-stream;\n\
             \x20   log_format tlslab '{LOG_FORMAT}';\n\
             \x20   access_log {log} tlslab;\n\
             \x20   log_format tlslab_sizes '{SIZES_FORMAT}';\n\
             \x20   access_log {sizes} tlslab_sizes;\n\
             \x20   keepalive_requests 1000;\n\
             \x20   server {{\n\
             \x20       listen 127.0.0.1:{port} ssl;\n\
             \x20       ssl_certificate {chain};\n\
             \x20       ssl_certificate_key {key};\n\
             \x20       ssl_protocols TLSv1.2 TLSv1.3;\n\
             \x20       ssl_session_cache shared:SSL:10m;\n\
             \x20       ssl_session_timeout 10m;\n\
             \x20       ssl_session_tickets {tickets};\n\
             \x20       root {root};\n\
             \x20   }}\n\
             }}\n",
            log = self.access_log().display(),
            sizes = self.sizes_log().display(),
            port = self.port,
            chain = self.chain.display(),
            key = self.key.display(),
            root = self.docroot().display(),
        )
    }

    /// Writes nginx.conf, the temp dirs and the docroot with `4k.bin`
    /// (4096 bytes).
    pub fn write(&self) -> std::io::Result<()> {
        for d in [
            "tmp/client_body",
            "tmp/proxy",
            "tmp/fastcgi",
            "tmp/uwsgi",
            "tmp/scgi",
            "www",
        ] {
            std::fs::create_dir_all(self.prefix.join(d))?;
        }
        std::fs::write(self.docroot().join("4k.bin"), vec![b'x'; 4096])?;
        std::fs::write(self.conf_path(), self.render())
    }
}

/// A running nginx (single process, foreground), killed on drop.
pub struct Nginx {
    /// Its configuration.
    pub config: Config,
    /// The process.
    pub proc: Proc,
}

impl Nginx {
    /// Writes a config under `prefix` and starts nginx on a free port,
    /// retrying on another port if the one picked was taken meanwhile.
    pub fn start(prefix: &Path, certs: &Certs, tickets: bool) -> Nginx {
        Nginx::start_with(prefix, certs, tickets, false)
    }

    /// As [`Nginx::start`], with HTTP/2 enabled (ALPN `h2` and `http/1.1`)
    /// the way this nginx's version wants it, and a third access log in
    /// [`H2_FORMAT`] ([`Config::h2_log`]).
    pub fn start_h2(prefix: &Path, certs: &Certs) -> Nginx {
        Nginx::start_with(prefix, certs, true, true)
    }

    fn start_with(prefix: &Path, certs: &Certs, tickets: bool, http2: bool) -> Nginx {
        let nginx = tool("nginx");
        let version = if http2 {
            let v = version(&nginx);
            Some(v.unwrap_or_else(|| panic!("cannot read the version of {}", nginx.display())))
        } else {
            None
        };
        let mut last = String::new();
        for _ in 0..5 {
            let config = Config {
                prefix: prefix.to_path_buf(),
                port: free_port(),
                chain: certs.chain.clone(),
                key: certs.key.clone(),
                tickets,
            };
            config.write().expect("write nginx config");
            if let Some(v) = version {
                std::fs::write(config.conf_path(), config.render_h2(v))
                    .expect("write nginx config");
            }
            let mut cmd = Command::new(&nginx);
            cmd.arg("-p")
                .arg(&config.prefix)
                .arg("-c")
                .arg(config.conf_path())
                .args(["-g", "daemon off; master_process off;"]);
            let mut proc = Proc::spawn(cmd);
            let addr = config.addr();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if proc.try_status().is_some() {
                    break;
                }
                if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                    return Nginx { config, proc };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            last = format!(
                "{}\n--- error.log\n{}",
                proc.describe(),
                std::fs::read_to_string(config.error_log()).unwrap_or_default()
            );
            drop(proc);
            if !last.contains("Address already in use") {
                break;
            }
        }
        panic!("nginx did not start:\n{last}");
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.config.addr())
    }

    /// Every access-log line, in log order.
    pub fn log(&self) -> Vec<LogLine> {
        let text = std::fs::read_to_string(self.config.access_log()).unwrap_or_default();
        parse_log(&text).unwrap_or_else(|e| panic!("nginx access log: {e}"))
    }

    /// Polls the access log (≤ 3 s) until it holds at least `n` lines —
    /// nginx logs a request when it completes, which may be just after the
    /// client has its last byte — and returns the lines.
    pub fn log_at_least(&self, n: usize) -> Vec<LogLine> {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut lines = self.log();
        while lines.len() < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            lines = self.log();
        }
        lines
    }

    /// Every line of the sizes log: `(request URI, body bytes sent)`.
    pub fn sizes(&self) -> Vec<(String, u64)> {
        let text = std::fs::read_to_string(self.config.sizes_log()).unwrap_or_default();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                l.rsplit_once(' ')
                    .and_then(|(uri, n)| Some((uri.to_string(), n.parse().ok()?)))
                    .unwrap_or_else(|| panic!("nginx sizes log: cannot parse {l:?}"))
            })
            .collect()
    }

    /// The access-log lines whose request URI is exactly `uri`.
    pub fn log_for(&self, uri: &str) -> Vec<LogLine> {
        let text = std::fs::read_to_string(self.config.access_log()).unwrap_or_default();
        parse_log(&text)
            .unwrap_or_else(|e| panic!("nginx access log: {e}"))
            .into_iter()
            .filter(|l| l.uri == uri)
            .collect()
    }
}

/// The third access log's format, with HTTP/2 on: protocol, status,
/// connection serial number and request URI.
pub const H2_FORMAT: &str = "$server_protocol $status $connection $request_uri";

/// `nginx -v`'s version, such as `(1, 22, 1)`.
pub fn version(nginx: &Path) -> Option<(u32, u32, u32)> {
    let out = Command::new(nginx).arg("-v").output().ok()?;
    parse_version(&String::from_utf8_lossy(&out.stderr))
}

/// The version in `nginx version: nginx/1.22.1` (what `nginx -v` prints).
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.split("nginx/").nth(1)?.split_whitespace().next()?;
    let mut it = v.split('.').map(|n| n.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
}

/// The directives that turn HTTP/2 on for a TLS listener on `port`: the
/// `http2` parameter of `listen` before nginx 1.25.1 (Debian 12 has 1.22),
/// the `http2 on;` directive from 1.25.1, where the parameter is deprecated.
pub fn h2_listen(version: (u32, u32, u32), port: u16) -> String {
    if version >= (1, 25, 1) {
        format!("listen 127.0.0.1:{port} ssl;\n        http2 on;")
    } else {
        format!("listen 127.0.0.1:{port} ssl http2;")
    }
}

impl Config {
    /// The access log in [`H2_FORMAT`] (HTTP/2 configs only).
    pub fn h2_log(&self) -> PathBuf {
        self.prefix.join("h2.log")
    }

    /// [`Config::render`] with HTTP/2 on for nginx `version` and the
    /// [`H2_FORMAT`] log.
    pub fn render_h2(&self, version: (u32, u32, u32)) -> String {
        let listen = format!("listen 127.0.0.1:{} ssl;", self.port);
        self.render()
            .replace(&listen, &h2_listen(version, self.port))
            .replace(
                "    keepalive_requests 1000;\n",
                &format!(
                    "    log_format tlslab_h2 '{H2_FORMAT}';\n    access_log {} tlslab_h2;\n    keepalive_requests 1000;\n",
                    self.h2_log().display()
                ),
            )
    }

    /// Every line of the [`H2_FORMAT`] log: (protocol, status, connection,
    /// URI).
    pub fn h2_lines(&self) -> Vec<(String, u16, u64, String)> {
        let text = std::fs::read_to_string(self.h2_log()).unwrap_or_default();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let parsed = (f.len() == 4)
                    .then(|| {
                        Some((
                            f[0].to_string(),
                            f[1].parse().ok()?,
                            f[2].parse().ok()?,
                            f[3].to_string(),
                        ))
                    })
                    .flatten();
                parsed.unwrap_or_else(|| panic!("nginx h2 log: cannot parse {l:?}"))
            })
            .collect()
    }
}

impl Config {
    /// The listen address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

/// One access-log line in [`LOG_FORMAT`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// `$ssl_session_reused == "r"`.
    pub reused: bool,
    /// `$ssl_protocol`, such as `TLSv1.3`.
    pub protocol: String,
    /// `$status`.
    pub status: u16,
    /// `$request_uri` (path and query).
    pub uri: String,
}

/// Parses an access log in [`LOG_FORMAT`]; an error names the bad line.
pub fn parse_log(text: &str) -> Result<Vec<LogLine>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| parse_line(l).ok_or_else(|| format!("line {}: cannot parse {l:?}", i + 1)))
        .collect()
}

fn parse_line(line: &str) -> Option<LogLine> {
    let mut f = line.split(' ');
    let reused = match f.next()? {
        "r" => true,
        "." => false,
        _ => return None,
    };
    let protocol = f.next()?.to_string();
    let status = f.next()?.parse().ok()?;
    let uri = f.next()?.to_string();
    if f.next().is_some() {
        return None;
    }
    Some(LogLine {
        reused,
        protocol,
        status,
        uri,
    })
}
