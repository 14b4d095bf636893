//! nginx: one config builder for every use (the overload reference, the
//! cluster nodes, the interop tests, the benchmarks) and a starter that
//! runs it in the foreground as one process.
//!
//! Every path nginx uses lives under one prefix directory (`-p`); it
//! listens on 127.0.0.1 only.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{Error, mkdirs, write};
use crate::proc::{Proc, start_on_free_port};

/// One `log_format` and the `access_log` that uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessLog {
    /// The format's name.
    pub name: String,
    /// The format (nginx variables, space separated).
    pub format: String,
    /// The log file.
    pub path: PathBuf,
    /// Lines are batched and written at most every 100 ms, or at 64 KiB
    /// (`buffer=64k flush=100ms`), as `tlslab serve --access-log` writes
    /// its own; false: one `write` per request, nginx's default.
    pub buffered: bool,
}

/// Session tickets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tickets {
    /// `ssl_session_tickets off`.
    Off,
    /// On, with keys nginx makes at start.
    On,
    /// On, with the keys in this file (`ssl_session_ticket_key`, 80 bytes).
    Keys(PathBuf),
}

/// An nginx.conf: one TLS server block on 127.0.0.1. [`NginxConf::new`]
/// sets the defaults; the fields say what else may change.
#[derive(Clone, Debug)]
pub struct NginxConf {
    /// The first line, a comment saying who wrote it.
    pub comment: String,
    /// The prefix (`-p`): config, pid, error log and temp dirs live here.
    pub prefix: PathBuf,
    /// The port on 127.0.0.1.
    pub port: u16,
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
    /// Document root (default `PREFIX/www`).
    pub root: PathBuf,
    /// `ssl_protocols` (default `TLSv1.2 TLSv1.3`).
    pub protocols: String,
    /// `worker_connections` (default 512).
    pub worker_connections: usize,
    /// `worker_rlimit_nofile`, if set.
    pub rlimit_nofile: Option<usize>,
    /// `multi_accept on`.
    pub multi_accept: bool,
    /// The error log's level (default `warn`).
    pub error_level: &'static str,
    /// Access logs; none: `access_log off`.
    pub logs: Vec<AccessLog>,
    /// `keepalive_requests`, if set.
    pub keepalive_requests: Option<u64>,
    /// `keepalive_timeout`, if set (such as `10s`).
    pub keepalive_timeout: Option<String>,
    /// `limit_conn` for the server (keyed on `$server_name`, status 503).
    pub limit_conn: Option<usize>,
    /// The listen socket's `backlog`, if set.
    pub backlog: Option<u32>,
    /// `open_file_cache`: keep the descriptors and metadata of up to 1,000
    /// served files open (revalidated hourly), so a request does not open,
    /// stat and close its file; `tlslab serve` holds its files in memory.
    pub open_file_cache: bool,
    /// HTTP/2 on, written for this nginx version ([`version`]).
    pub http2: Option<(u32, u32, u32)>,
    /// `ssl_ciphers` (TLS 1.2), if set.
    pub tls12_ciphers: Option<String>,
    /// TLS 1.3 suites (`ssl_conf_command Ciphersuites`), if set.
    pub tls13_suites: Option<String>,
    /// `ssl_ecdh_curve` (OpenSSL names, `:` separated), if set.
    pub curves: Option<String>,
    /// `ssl_session_cache` (default `shared:SSL:10m`).
    pub session_cache: String,
    /// `ssl_session_timeout` (default `10m`).
    pub session_timeout: String,
    /// Session tickets (default on).
    pub tickets: Tickets,
}

impl NginxConf {
    /// The defaults for a server on `port` with every path under `prefix`.
    pub fn new(prefix: &Path, port: u16, cert: &Path, key: &Path) -> NginxConf {
        NginxConf {
            comment: "# Written by tlslab.".into(),
            prefix: prefix.to_path_buf(),
            port,
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            root: prefix.join("www"),
            protocols: "TLSv1.2 TLSv1.3".into(),
            worker_connections: 512,
            rlimit_nofile: None,
            multi_accept: false,
            error_level: "warn",
            logs: Vec::new(),
            keepalive_requests: None,
            keepalive_timeout: None,
            limit_conn: None,
            backlog: None,
            open_file_cache: false,
            http2: None,
            tls12_ciphers: None,
            tls13_suites: None,
            curves: None,
            session_cache: "shared:SSL:10m".into(),
            session_timeout: "10m".into(),
            tickets: Tickets::On,
        }
    }

    /// Adds an access log `PREFIX/FILE` in `format`, named `name`.
    pub fn log(mut self, name: &str, format: &str, file: &str) -> NginxConf {
        self.logs.push(AccessLog {
            name: name.into(),
            format: format.into(),
            path: self.prefix.join(file),
            buffered: false,
        });
        self
    }

    /// The listen address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `PREFIX/nginx.conf`.
    pub fn conf_path(&self) -> PathBuf {
        self.prefix.join("nginx.conf")
    }

    /// `PREFIX/error.log`.
    pub fn error_log(&self) -> PathBuf {
        self.prefix.join("error.log")
    }

    /// The nginx.conf text.
    pub fn render(&self) -> String {
        let p = self.prefix.display();
        let mut c = format!("{}\nworker_processes 1;\n", self.comment);
        if let Some(n) = self.rlimit_nofile {
            let _ = writeln!(c, "worker_rlimit_nofile {n};");
        }
        let multi = if self.multi_accept {
            " multi_accept on;"
        } else {
            ""
        };
        let _ = write!(
            c,
            "pid {p}/nginx.pid;\n\
             error_log {p}/error.log {level};\n\
             events {{ worker_connections {conns};{multi} }}\n\
             http {{\n",
            level = self.error_level,
            conns = self.worker_connections,
        );
        for t in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            let _ = writeln!(c, "    {t}_temp_path {p}/tmp/{t};");
        }
        c.push_str("    default_type application/octet-stream;\n");
        if self.open_file_cache {
            c.push_str(
                "    open_file_cache max=1000 inactive=3600s;\n    open_file_cache_valid 3600s;\n",
            );
        }
        for l in &self.logs {
            let _ = writeln!(c, "    log_format {} '{}';", l.name, l.format);
            let buffer = if l.buffered {
                " buffer=64k flush=100ms"
            } else {
                ""
            };
            let _ = writeln!(c, "    access_log {} {}{buffer};", l.path.display(), l.name);
        }
        if self.logs.is_empty() {
            c.push_str("    access_log off;\n");
        }
        if let Some(n) = self.keepalive_requests {
            let _ = writeln!(c, "    keepalive_requests {n};");
        }
        if let Some(t) = &self.keepalive_timeout {
            let _ = writeln!(c, "    keepalive_timeout {t};");
        }
        if self.limit_conn.is_some() {
            c.push_str("    limit_conn_zone $server_name zone=perserver:1m;\n");
        }
        let mut listen = format!("listen 127.0.0.1:{} ssl", self.port);
        if let Some(b) = self.backlog {
            let _ = write!(listen, " backlog={b}");
        }
        match self.http2 {
            // `http2 on;` from 1.25.1; before (Debian 12 has 1.22) only
            // the listen parameter exists.
            Some(v) if v >= (1, 25, 1) => listen.push_str(";\n        http2 on"),
            Some(_) => listen.push_str(" http2"),
            None => {}
        }
        let _ = write!(
            c,
            "    server {{\n\
             \x20       {listen};\n\
             \x20       server_name localhost;\n\
             \x20       ssl_certificate {cert};\n\
             \x20       ssl_certificate_key {key};\n\
             \x20       ssl_protocols {protocols};\n",
            cert = self.cert.display(),
            key = self.key.display(),
            protocols = self.protocols,
        );
        let mut line = |d: &str, v: &Option<String>| {
            if let Some(v) = v {
                let _ = writeln!(c, "        {d} {v};");
            }
        };
        line("ssl_ciphers", &self.tls12_ciphers);
        line("ssl_conf_command Ciphersuites", &self.tls13_suites);
        line("ssl_ecdh_curve", &self.curves);
        let _ = writeln!(
            c,
            "        ssl_session_cache {};\n        ssl_session_timeout {};",
            self.session_cache, self.session_timeout
        );
        match &self.tickets {
            Tickets::Off => c.push_str("        ssl_session_tickets off;\n"),
            Tickets::On => c.push_str("        ssl_session_tickets on;\n"),
            Tickets::Keys(k) => {
                let _ = writeln!(
                    c,
                    "        ssl_session_tickets on;\n        ssl_session_ticket_key {};",
                    k.display()
                );
            }
        }
        if let Some(n) = self.limit_conn {
            let _ = writeln!(
                c,
                "        limit_conn perserver {n};\n        limit_conn_status 503;"
            );
        }
        let _ = write!(c, "        root {};\n    }}\n}}\n", self.root.display());
        c
    }

    /// Creates the temp dirs and the document root, and writes
    /// [`conf_path`](NginxConf::conf_path).
    pub fn write(&self) -> Result<(), Error> {
        for t in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            mkdirs(&self.prefix.join("tmp").join(t))?;
        }
        mkdirs(&self.root)?;
        write(&self.conf_path(), self.render())
    }

    /// Writes the config and runs nginx in the foreground as one process
    /// (`daemon off; master_process off;`), pinned to `cpus` (none: not
    /// pinned), waiting up to 10 s until it accepts. An error carries
    /// nginx's stderr and error.log.
    pub fn start(&self, bin: &Path, cpus: &[usize]) -> Result<Proc, Error> {
        self.write()?;
        let _ = std::fs::remove_file(self.error_log());
        let mut cmd = Command::new(bin);
        cmd.arg("-p")
            .arg(&self.prefix)
            .arg("-c")
            .arg(self.conf_path())
            .args(["-g", "daemon off; master_process off;"]);
        let mut proc = Proc::spawn(cmd, "nginx", Some(&self.prefix.join("stderr.log")))?;
        proc.pin(cpus)?;
        proc.wait_port(self.addr(), Duration::from_secs(10))
            .map_err(|e| {
                e.with_log(&std::fs::read_to_string(self.error_log()).unwrap_or_default())
            })?;
        Ok(proc)
    }
}

/// [`NginxConf::start`] on a free port, up to 5 times while the port
/// picked was taken meanwhile: `conf(port)` gives the config.
pub fn start(
    bin: &Path,
    cpus: &[usize],
    mut conf: impl FnMut(u16) -> NginxConf,
) -> Result<(Proc, NginxConf), Error> {
    start_on_free_port(5, |port| {
        let c = conf(port);
        c.start(bin, cpus).map(|p| (p, c))
    })
}

/// The access-log format of a cluster node: one line per request,
/// `$ssl_session_reused` first (`r` or `.`).
pub const NODE_LOG_FORMAT: &str = "$ssl_session_reused $ssl_protocol $status";

/// Node `node` of `tlslab cluster`: one TLS version (`TLSv1.2` or
/// `TLSv1.3`), a session cache of its own, tickets as given, the groups
/// (tlslab names, spelled for OpenSSL) if any, and [`NODE_LOG_FORMAT`] in
/// `PREFIX/access.log`.
pub fn cluster_node(
    node: usize,
    prefix: &Path,
    port: u16,
    (cert, key): (&Path, &Path),
    protocol: &str,
    tickets: Tickets,
    groups: Option<&[String]>,
) -> Result<NginxConf, Error> {
    let mut c =
        NginxConf::new(prefix, port, cert, key).log("cluster", NODE_LOG_FORMAT, "access.log");
    c.comment = format!("# Written by tlslab cluster: node {node}.");
    c.worker_connections = 4096;
    c.keepalive_timeout = Some("5s".into());
    c.protocols = protocol.into();
    c.session_cache = format!("shared:node{node}:10m");
    c.session_timeout = "5m".into();
    c.tickets = tickets;
    if let Some(g) = groups {
        let names = g
            .iter()
            .map(|g| openssl_group(g))
            .collect::<Result<Vec<_>, _>>()?;
        c.curves = Some(names.join(":"));
    }
    Ok(c)
}

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

/// OpenSSL's name (`ssl_ecdh_curve`) of a tlslab group name; an error
/// names the groups nginx can be given.
pub fn openssl_group(group: &str) -> Result<&'static str, Error> {
    match group.to_ascii_lowercase().as_str() {
        "x25519" => Ok("X25519"),
        "secp256r1" => Ok("prime256v1"),
        "secp384r1" => Ok("secp384r1"),
        "secp521r1" => Ok("secp521r1"),
        "x25519mlkem768" => Ok("X25519MLKEM768"),
        _ => Err(Error::UnknownGroup(group.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts that the config `c` holds every line of `wants`.
    fn has_all(c: &str, wants: &[&str]) {
        for w in wants {
            assert!(c.contains(w), "missing {w:?} in\n{c}");
        }
    }

    fn conf() -> NginxConf {
        NginxConf::new(
            Path::new("/tmp/x"),
            4433,
            Path::new("/c.pem"),
            Path::new("/k.pem"),
        )
    }

    #[test]
    fn defaults_listen_on_loopback_with_tickets_and_no_log() {
        let c = conf().render();
        has_all(
            &c,
            &[
                "listen 127.0.0.1:4433 ssl;",
                "ssl_protocols TLSv1.2 TLSv1.3;",
                "ssl_session_tickets on;",
                "access_log off;",
                "scgi_temp_path /tmp/x/tmp/scgi;",
                "root /tmp/x/www;",
            ],
        );
        assert!(!c.contains("limit_conn"));
        assert!(!c.contains("open_file_cache"));
    }

    #[test]
    fn a_buffered_log_and_the_open_file_cache_are_directives() {
        let mut n = conf().log("tlslab", "$status", "access.log");
        n.logs[0].buffered = true;
        n.open_file_cache = true;
        has_all(
            &n.render(),
            &[
                "access_log /tmp/x/access.log tlslab buffer=64k flush=100ms;",
                "open_file_cache max=1000 inactive=3600s;",
                "open_file_cache_valid 3600s;",
            ],
        );
    }

    #[test]
    fn options_become_directives() {
        let mut n = conf().log("tlslab", "$status", "access.log");
        n.limit_conn = Some(16);
        n.multi_accept = true;
        n.rlimit_nofile = Some(100);
        n.backlog = Some(4096);
        n.tickets = Tickets::Keys("/keys".into());
        n.curves = Some("X25519".into());
        let c = n.render();
        has_all(
            &c,
            &[
                "log_format tlslab '$status';",
                "access_log /tmp/x/access.log tlslab;",
                "limit_conn_zone $server_name zone=perserver:1m;",
                "limit_conn perserver 16;",
                "server_name localhost;",
                "events { worker_connections 512; multi_accept on; }",
                "worker_rlimit_nofile 100;",
                "listen 127.0.0.1:4433 ssl backlog=4096;",
                "ssl_session_ticket_key /keys;",
                "ssl_ecdh_curve X25519;",
            ],
        );
    }

    #[test]
    fn http2_is_spelled_for_the_version() {
        let mut n = conf();
        n.http2 = Some((1, 22, 1));
        assert!(n.render().contains("listen 127.0.0.1:4433 ssl http2;"));
        n.http2 = Some((1, 25, 1));
        let c = n.render();
        assert!(
            c.contains("listen 127.0.0.1:4433 ssl;\n        http2 on;"),
            "{c}"
        );
        assert_eq!(
            parse_version("nginx version: nginx/1.22.1\n"),
            Some((1, 22, 1))
        );
        assert_eq!(parse_version("nginx/1.25"), Some((1, 25, 0)));
        assert_eq!(parse_version("nope"), None);
    }

    #[test]
    fn a_cluster_node_has_its_own_cache_and_one_version() {
        let keys = (Path::new("/c.pem"), Path::new("/k.pem"));
        let groups = ["x25519".to_string(), "secp256r1".to_string()];
        let n = cluster_node(
            2,
            Path::new("/p"),
            9000,
            keys,
            "TLSv1.2",
            Tickets::Keys("/t".into()),
            Some(&groups),
        );
        let c = n.unwrap().render();
        has_all(
            &c,
            &[
                "# Written by tlslab cluster: node 2.",
                "ssl_protocols TLSv1.2;",
                "ssl_session_cache shared:node2:10m;",
                "ssl_session_timeout 5m;",
                "ssl_session_ticket_key /t;",
                "ssl_ecdh_curve X25519:prime256v1;",
                "log_format cluster '$ssl_session_reused $ssl_protocol $status';",
                "keepalive_timeout 5s;",
                "worker_connections 4096;",
            ],
        );
        let bad = ["ffdhe2048".to_string()];
        assert!(
            cluster_node(
                0,
                Path::new("/p"),
                1,
                keys,
                "TLSv1.3",
                Tickets::Off,
                Some(&bad)
            )
            .is_err()
        );
    }

    #[test]
    fn groups_are_spelled_for_openssl() {
        assert_eq!(openssl_group("secp256r1").unwrap(), "prime256v1");
        assert!(
            openssl_group("ffdhe2048")
                .unwrap_err()
                .to_string()
                .contains("ffdhe2048")
        );
    }
}
