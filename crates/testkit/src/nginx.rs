//! nginx as a reference TLS server: the interop suite's config (written
//! by tlslab-peers' builder, every path inside one temporary prefix), a
//! start/stop guard, and a parser for the access-log format it asks nginx
//! to write.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tlslab_peers::nginx::{NginxConf, Tickets};
pub use tlslab_peers::nginx::{parse_version, version};

use crate::{Certs, poll, tool};

/// How long the log helpers wait for nginx to log a request: it logs one
/// when it completes, which may be just after the client has its last byte.
const LOG_WAIT: Duration = Duration::from_secs(3);

/// The access-log format: one line per request, space separated.
pub const LOG_FORMAT: &str = "$ssl_session_reused $ssl_protocol $status $request_uri";

/// The second access log's format: request URI and response body bytes
/// (headers excluded), one line per request.
pub const SIZES_FORMAT: &str = "$request_uri $body_bytes_sent";

/// The third access log's format, with HTTP/2 on: protocol, status,
/// connection serial number and request URI.
pub const H2_FORMAT: &str = "$server_protocol $status $connection $request_uri";

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

    /// The access log in [`H2_FORMAT`] (HTTP/2 configs only).
    pub fn h2_log(&self) -> PathBuf {
        self.prefix.join("h2.log")
    }

    /// The document root.
    pub fn docroot(&self) -> PathBuf {
        self.prefix.join("www")
    }

    /// The config file path.
    pub fn conf_path(&self) -> PathBuf {
        self.prefix.join("nginx.conf")
    }

    /// The listen address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The config, with HTTP/2 on for nginx `h2` (and the [`H2_FORMAT`]
    /// log) if given.
    fn conf(&self, h2: Option<(u32, u32, u32)>) -> NginxConf {
        let mut c = NginxConf::new(&self.prefix, self.port, &self.chain, &self.key)
            .log("tlslab", LOG_FORMAT, "access.log")
            .log("tlslab_sizes", SIZES_FORMAT, "sizes.log");
        c.comment = "# Written by tlslab's interop tests.".into();
        c.error_level = "info";
        c.keepalive_requests = Some(1000);
        c.tickets = if self.tickets {
            Tickets::On
        } else {
            Tickets::Off
        };
        if let Some(v) = h2 {
            c.http2 = Some(v);
            c = c.log("tlslab_h2", H2_FORMAT, "h2.log");
        }
        c
    }

    /// The nginx.conf text.
    pub fn render(&self) -> String {
        self.conf(None).render()
    }

    /// [`Config::render`] with HTTP/2 on for nginx `version` and the
    /// [`H2_FORMAT`] log.
    pub fn render_h2(&self, version: (u32, u32, u32)) -> String {
        self.conf(Some(version)).render()
    }

    /// Writes nginx.conf, the temp dirs and the docroot with `4k.bin`
    /// (4096 bytes).
    pub fn write(&self) -> std::io::Result<()> {
        self.conf(None).write().map_err(std::io::Error::other)?;
        std::fs::write(self.docroot().join("4k.bin"), vec![b'x'; 4096])
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

/// A running nginx (single process, foreground), killed on drop.
pub struct Nginx {
    /// Its configuration.
    pub config: Config,
    /// The process.
    pub proc: tlslab_peers::Proc,
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
        let version = http2.then(|| {
            version(&nginx)
                .unwrap_or_else(|| panic!("cannot read the version of {}", nginx.display()))
        });
        let config = |port| Config {
            prefix: prefix.to_path_buf(),
            port,
            chain: certs.chain.clone(),
            key: certs.key.clone(),
            tickets,
        };
        config(0).write().expect("write the nginx docroot");
        let (proc, c) = tlslab_peers::nginx::start(&nginx, &[], |port| config(port).conf(version))
            .unwrap_or_else(|e| panic!("nginx did not start: {e}"));
        Nginx {
            config: config(c.port),
            proc,
        }
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
        poll(LOG_WAIT, || self.log(), |l| l.len() >= n)
    }

    /// [`Nginx::log_for`] once it holds `n` lines (polled like
    /// [`Nginx::log_at_least`]).
    pub fn log_for_at_least(&self, uri: &str, n: usize) -> Vec<LogLine> {
        poll(LOG_WAIT, || self.log_for(uri), |l| l.len() >= n)
    }

    /// The [`H2_FORMAT`] lines ([`Config::h2_lines`]) whose URI is `uri`,
    /// once there are `n` (polled like [`Nginx::log_at_least`]).
    pub fn h2_lines_for(&self, uri: &str, n: usize) -> Vec<(String, u16, u64, String)> {
        let read = || {
            let all = self.config.h2_lines().into_iter();
            all.filter(|l| l.3 == uri).collect::<Vec<_>>()
        };
        poll(LOG_WAIT, read, |l| l.len() >= n)
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
        self.log().into_iter().filter(|l| l.uri == uri).collect()
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
