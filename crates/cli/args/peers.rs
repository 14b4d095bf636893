//! `tlslab peers`' flags (hidden): which outside peer's config to write.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};

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
    /// Batch the access log's writes, as `tlslab serve --access-log` does
    /// (nginx: `buffer=64k flush=100ms`; Apache: `BufferedLogs On`), rather
    /// than one `write` per request.
    #[arg(long, requires = "access_log")]
    pub log_buffered: bool,
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
    /// open_file_cache: keep served files' descriptors open, so a request
    /// does not open, stat and close its file (`tlslab serve` holds its
    /// files in memory).
    #[arg(long)]
    pub open_file_cache: bool,
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
