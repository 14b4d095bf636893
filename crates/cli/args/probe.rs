//! The flags of `tlslab probe` and its `report` and `exporter`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

/// `tlslab probe`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  tlslab probe https://example.com/ --interval 10m --jitter 1m --db probe.sqlite\n  \
    tlslab probe report --db probe.sqlite --since 2026-11-01\n  \
    tlslab probe https://example.com/ --db postgres://probe@127.0.0.1/probe\n  \
    tlslab probe https://example.com/ --transport both --rounds 10 --interval 1m\n  \
    tlslab probe https://127.0.0.1:8443/ --h3 --cacert certs/ca.pem --rounds 5 --interval 1s\n  \
    tlslab probe exporter --listen 127.0.0.1:9115\n  \
    sudo tlslab probe --path delay=25ms,rate=10mbit --rounds 20 --interval 1s --db wan.sqlite\n  \
    sudo tlslab path --delay 25ms --ready-port 8443 -- tlslab serve --listen 10.201.0.1:8443 ::: \
    tlslab probe https://10.201.0.1:8443/health --insecure --rounds 20 --interval 1s\n\n\
    Each round probes every target once, concurrently, one connection at a time per target: \
    DNS, TCP connect, a full handshake and a GET, then a new connection offering that session \
    (a resumed handshake, accepted or not) and a GET. Over HTTP/3 (--transport h3|both) there \
    is no connect: a full QUIC handshake and a 1-RTT GET, then a resumed handshake whose GET \
    leaves in 0-RTT. Each round is committed to the database in one transaction; SIGTERM or \
    Ctrl-C finishes the current round and exits."
)]
pub struct ProbeArgs {
    /// `report` or `exporter`; without one, probe the targets.
    #[command(subcommand)]
    pub command: Option<ProbeCommand>,

    /// Probe rounds.
    #[command(flatten)]
    pub run: ProbeRunArgs,
}

/// The `probe` subcommands.
#[derive(Debug, Subcommand)]
pub enum ProbeCommand {
    /// Per-phase statistics, 10 ms histograms, seed 003's Table 2 and a daily series from a probe database.
    Report(ProbeReportArgs),
    /// Serve blackbox_exporter-style `GET /probe?target=URL` for Prometheus.
    Exporter(ProbeExporterArgs),
}

/// How to reach the targets (shared by rounds and the exporter).
#[derive(Debug, Args)]
pub struct ProbeTlsArgs {
    /// Trust the CA certificates in this PEM file (e.g. the ca.pem of `tlslab certs`)
    /// instead of the webpki roots.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,

    /// Do not verify server certificates. INSECURE; prints a warning.
    #[arg(long)]
    pub insecure: bool,

    /// TLS versions to offer, comma separated: 1.2, 1.3.
    #[arg(long, default_value = "1.2,1.3", value_name = "VERSIONS")]
    pub tls: String,

    /// Server name to send and verify instead of the URL's host.
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,

    /// Append every probe connection's TLS secrets to FILE in the NSS key log format,
    /// created 0600 (docs/debugging.md). Without it, the SSLKEYLOGFILE environment
    /// variable is honoured as curl honours it. The file holds secrets: a WARNING is printed.
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,

    /// Give up on a phase (DNS, connect, handshake, GET) after this long.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,

    /// What to probe over. tcp: TCP connect, TLS handshakes, HTTP/1.1 GETs. h3: HTTP/3 over
    /// QUIC at the URL's host and UDP port (no connect): a full QUIC handshake and a GET after
    /// it (1-RTT), then a connection resuming with the ticket that sends its GET in 0-RTT
    /// (timed from the first packet to the response's first byte); needs TLS 1.3. both: TCP,
    /// then HTTP/3 at the endpoint the TCP response's Alt-Svc header names (h3=":PORT", as
    /// browsers find it; a target that advertises none stops the rounds before the first,
    /// exit 1, and fails the exporter's HTTP/3 sample as alt_svc:no_alt_svc). The report
    /// and the exporter keep the transports apart.
    #[arg(long, value_enum, default_value_t = ProbeTransport::Tcp, value_name = "TRANSPORT")]
    pub transport: ProbeTransport,

    /// Short for --transport h3.
    #[arg(long, conflicts_with = "transport")]
    pub h3: bool,
}

/// `--transport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeTransport {
    /// TCP + TLS, HTTP/1.1.
    Tcp,
    /// HTTP/3 over QUIC.
    H3,
    /// TCP, then HTTP/3 where Alt-Svc says.
    Both,
}

impl ProbeTlsArgs {
    /// The transports asked for (`--h3` or `--transport`).
    pub fn transports(&self) -> tlslab_probe::Transports {
        match (self.h3, self.transport) {
            (true, _) | (false, ProbeTransport::H3) => tlslab_probe::Transports::H3,
            (false, ProbeTransport::Tcp) => tlslab_probe::Transports::Tcp,
            (false, ProbeTransport::Both) => tlslab_probe::Transports::Both,
        }
    }
}

/// `tlslab probe URL...`.
#[derive(Debug, Args)]
pub struct ProbeRunArgs {
    /// Target URLs, https:// only (https://host[:port]/path); an http:// URL is a usage error.
    #[arg(value_name = "URL", required_unless_present_any = ["targets", "path"])]
    pub urls: Vec<String>,

    /// Read more target URLs from FILE, one per line (# starts a comment).
    #[arg(long, value_name = "FILE")]
    pub targets: Option<PathBuf>,

    /// The probe database: a SQLite file (created if missing), or a PostgreSQL server as
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (the tables are created if missing; while
    /// the server is down, up to 1000 rounds wait in memory and are written when it is back).
    #[arg(long, default_value = "tlslab-probe.sqlite", value_name = "FILE|URL")]
    pub db: String,

    /// From the start of one round to the start of the next.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub interval: Duration,

    /// Add a uniform random delay in [0, JITTER] to each interval.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub jitter: Duration,

    /// Stop after N rounds (default: run until SIGTERM or Ctrl-C).
    #[arg(long, value_name = "N")]
    pub rounds: Option<u64>,

    /// Instead of URLs, probe tlslab's embedded server (one worker pinned to one CPU and
    /// metered, ECDSA P-256, https://10.201.0.1:8443/specweb96/class1_3) across a packet-level
    /// WAN path: the server in one network namespace, the probe in another, so the TCP connect
    /// costs the path's round trip. Needs root (see `tlslab path`); e.g.
    /// delay=25ms,rate=10mbit,loss=1% (keys as in `lab --path`). With --transport h3 or both
    /// the server also serves HTTP/3 on UDP 8443 (stateful tickets and 0-RTT on, and Alt-Svc)
    /// and QUIC crosses the path. pcap=FILE captures every packet
    /// the path forwards or drops, both directions, to a pcapng file, as `tlslab path --pcap`
    /// (pcap-size=100MB, pcap-files=N); the report names its files and counts. To probe another
    /// server across a path, run both under `tlslab path -- SERVER ::: tlslab probe URL`.
    #[arg(long, value_name = "SPEC", value_parser = crate::parse::parse_path_spec)]
    pub path: Option<tlslab_path::PathConfig>,

    /// TLS and timeout options.
    #[command(flatten)]
    pub tls: ProbeTlsArgs,
}

/// `tlslab probe report`.
#[derive(Debug, Args)]
pub struct ProbeReportArgs {
    /// The probe database written by `tlslab probe`: a SQLite file or a postgres:// URL.
    #[arg(long, default_value = "tlslab-probe.sqlite", value_name = "FILE|URL")]
    pub db: String,

    /// Only samples started at or after this UTC time (RFC 3339, e.g. 2026-11-01 or 2026-11-01T12:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,

    /// Only samples started before this UTC time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,

    /// Print the report as JSON (schema: docs/schema.md) instead of text.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,

    /// Print one CSV row per target and phase instead of text.
    #[arg(long)]
    pub csv: bool,

    /// Also write one SVG chart per target into DIR (created if missing): the 10 ms histograms
    /// of full against resumed handshakes, and their daily medians.
    #[arg(long, value_name = "DIR")]
    pub svg: Option<PathBuf>,
}

/// `tlslab probe exporter`.
#[derive(Debug, Args)]
pub struct ProbeExporterArgs {
    /// Address to serve `/probe?target=URL` on.
    #[arg(long, default_value = "127.0.0.1:9115", value_name = "ADDR")]
    pub listen: SocketAddr,

    /// Most connections open at once; at the limit a new client closes the connection idle
    /// longest (one not running a probe).
    #[arg(long, default_value_t = tlslab_probe::exporter::DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    pub max_connections: usize,

    /// Time a client has to send each request head (the first and each next on a kept-alive
    /// connection); then the connection is closed.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub request_timeout: Duration,

    /// TLS and timeout options.
    #[command(flatten)]
    pub tls: ProbeTlsArgs,
}
