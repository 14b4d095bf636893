//! `tlslab peers` (hidden): the config files of outside peers, written by
//! tlslab-peers so that the benchmark scripts (bench/) do not write their
//! own. Prints the text, or writes it with `--out`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use tlslab_peers::apache::{ApacheConf, builtin_modules};
use tlslab_peers::haproxy::HaproxyConf;
use tlslab_peers::nginx::{AccessLog, NginxConf, Tickets};

/// `tlslab peers`.
#[derive(Debug, Args)]
pub struct PeersArgs {
    /// Which peer's config.
    #[command(subcommand)]
    pub what: PeerConf,
}

/// The peers whose config tlslab writes.
#[derive(Debug, Subcommand)]
pub enum PeerConf {
    /// nginx.conf: one TLS server on 127.0.0.1, every path under --prefix.
    #[command(name = "nginx-conf")]
    Nginx(NginxArgs),
    /// httpd.conf for Apache (mpm_event, mod_ssl), every path under --dir.
    #[command(name = "apache-conf")]
    Apache(ApacheArgs),
    /// haproxy.cfg: TCP mode in front of --server nodes.
    #[command(name = "haproxy-conf")]
    Haproxy(HaproxyArgs),
    /// redis-server's arguments, one per line: a cache on 127.0.0.1,
    /// persistence off.
    #[command(name = "redis-args")]
    Redis(RedisArgs),
}

/// `tlslab peers redis-args`.
#[derive(Debug, Args)]
pub struct RedisArgs {
    /// The port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// Its working directory (log, no dump files).
    #[arg(long)]
    pub dir: PathBuf,
}

/// What nginx and Apache share.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// The port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// Certificate chain (PEM).
    #[arg(long)]
    pub cert: PathBuf,
    /// Private key (PEM).
    #[arg(long)]
    pub key: PathBuf,
    /// Document root.
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// TLS versions, comma separated.
    #[arg(long, default_value = "1.2,1.3", value_delimiter = ',')]
    pub tls: Vec<String>,
    /// Session tickets.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub tickets: String,
    /// TLS 1.2 cipher list (OpenSSL names).
    #[arg(long)]
    pub tls12_ciphers: Option<String>,
    /// TLS 1.3 suites (OpenSSL names).
    #[arg(long)]
    pub tls13_suites: Option<String>,
    /// Groups (OpenSSL names, `:` separated).
    #[arg(long)]
    pub curves: Option<String>,
    /// The access log's format (the server's own syntax); needs --access-log.
    #[arg(long, requires = "access_log")]
    pub log_format: Option<String>,
    /// The access log file (none: no access log).
    #[arg(long, requires = "log_format")]
    pub access_log: Option<PathBuf>,
    /// Write the config here (nginx: also create the temp dirs) instead of printing it.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `tlslab peers nginx-conf`.
#[derive(Debug, Args)]
pub struct NginxArgs {
    /// The prefix directory (pid, error log, temp dirs).
    #[arg(long)]
    pub prefix: PathBuf,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// worker_connections.
    #[arg(long, default_value_t = 512)]
    pub worker_connections: usize,
    /// worker_rlimit_nofile.
    #[arg(long)]
    pub rlimit_nofile: Option<usize>,
    /// ssl_session_cache.
    #[arg(long, default_value = "shared:SSL:10m")]
    pub session_cache: String,
    /// ssl_session_timeout.
    #[arg(long, default_value = "10m")]
    pub session_timeout: String,
    /// keepalive_requests.
    #[arg(long)]
    pub keepalive_requests: Option<u64>,
    /// keepalive_timeout.
    #[arg(long)]
    pub keepalive_timeout: Option<String>,
    /// The listen socket's backlog.
    #[arg(long)]
    pub backlog: Option<u32>,
    /// HTTP/2 on, spelled for the version of this nginx binary.
    #[arg(long, value_name = "NGINX")]
    pub h2_for: Option<PathBuf>,
}

/// `tlslab peers apache-conf`.
#[derive(Debug, Args)]
pub struct ApacheArgs {
    /// ServerRoot (pid, mutexes, error log, session cache).
    #[arg(long)]
    pub dir: PathBuf,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Where the mod_*.so files are.
    #[arg(long, default_value = "/usr/lib/apache2/modules")]
    pub modules: PathBuf,
    /// The apache2 binary (its compiled-in modules are not loaded again).
    #[arg(long, default_value = "apache2")]
    pub apache2: PathBuf,
    /// The thread pool of the one child process.
    #[arg(long, default_value_t = 64)]
    pub threads: usize,
    /// The session cache, bytes.
    #[arg(long, default_value_t = 512_000)]
    pub cache_bytes: usize,
}

/// `tlslab peers haproxy-conf`.
#[derive(Debug, Args)]
pub struct HaproxyArgs {
    /// The port on 127.0.0.1.
    #[arg(long)]
    pub port: u16,
    /// A node (repeat).
    #[arg(long = "server", required = true)]
    pub servers: Vec<SocketAddr>,
    /// roundrobin, leastconn, random or source.
    #[arg(long, default_value = "roundrobin")]
    pub balance: String,
    /// Stick TLS 1.2 session IDs to their node (issue 10's recipe).
    #[arg(long)]
    pub stick_session_ids: bool,
    /// Write the config here instead of printing it.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn emit(text: &str, out: Option<&PathBuf>) -> anyhow::Result<ExitCode> {
    match out {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `tlslab peers`.
pub fn run(a: &PeersArgs) -> anyhow::Result<ExitCode> {
    match &a.what {
        PeerConf::Nginx(n) => {
            let t = &n.tls;
            let mut c = NginxConf::new(&n.prefix, t.port, &t.cert, &t.key);
            c.comment = "# Written by tlslab peers nginx-conf.".into();
            if let Some(r) = &t.root {
                c.root = r.clone();
            }
            c.protocols = versions(&t.tls, "TLSv", " ");
            c.tickets = if t.tickets == "on" {
                Tickets::On
            } else {
                Tickets::Off
            };
            (c.tls12_ciphers, c.tls13_suites) = (t.tls12_ciphers.clone(), t.tls13_suites.clone());
            c.curves = t.curves.clone();
            if let (Some(format), Some(path)) = (&t.log_format, &t.access_log) {
                let (name, format, path) = ("tlslab".into(), format.clone(), path.clone());
                c.logs.push(AccessLog { name, format, path });
            }
            c.worker_connections = n.worker_connections;
            c.rlimit_nofile = n.rlimit_nofile;
            (c.session_cache, c.session_timeout) =
                (n.session_cache.clone(), n.session_timeout.clone());
            c.keepalive_requests = n.keepalive_requests;
            c.keepalive_timeout = n.keepalive_timeout.clone();
            c.backlog = n.backlog;
            if let Some(bin) = &n.h2_for {
                let v = tlslab_peers::nginx::version(bin)
                    .with_context(|| format!("cannot read the version of {}", bin.display()))?;
                c.http2 = Some(v);
            }
            match &t.out {
                Some(p) => {
                    c.write()?;
                    emit(&c.render(), Some(p))
                }
                None => emit(&c.render(), None),
            }
        }
        PeerConf::Apache(a) => {
            let t = &a.tls;
            let c = ApacheConf {
                dir: a.dir.clone(),
                port: t.port,
                cert: t.cert.clone(),
                key: t.key.clone(),
                root: t.root.clone().unwrap_or_else(|| a.dir.join("www")),
                modules: a.modules.clone(),
                builtin: builtin_modules(&a.apache2),
                versions: t.tls.clone(),
                tickets: t.tickets == "on",
                threads: a.threads,
                cache_bytes: a.cache_bytes,
                tls12_ciphers: t.tls12_ciphers.clone(),
                tls13_suites: t.tls13_suites.clone(),
                curves: t.curves.clone(),
                log: t.log_format.clone().zip(t.access_log.clone()),
            };
            emit(&c.render(), t.out.as_ref())
        }
        PeerConf::Haproxy(h) => {
            let c = HaproxyConf {
                bind: std::net::Ipv4Addr::LOCALHOST.into(),
                port: h.port,
                balance: h.balance.clone(),
                stick_session_ids: h.stick_session_ids,
                servers: h.servers.clone(),
            };
            emit(&c.render(), h.out.as_ref())
        }
        PeerConf::Redis(r) => {
            let args = tlslab_peers::redis::args(r.port, &r.dir);
            let lines: Vec<String> = args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            emit(&format!("{}\n", lines.join("\n")), None)
        }
    }
}

/// `1.2,1.3` → `TLSv1.2 TLSv1.3`.
fn versions(v: &[String], prefix: &str, sep: &str) -> String {
    let v: Vec<String> = v.iter().map(|v| format!("{prefix}{v}")).collect();
    v.join(sep)
}
