//! The flags of `tlslab load`, `tlslab sweep` and `tlslab merge`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tlslab_load::{Arrivals, ResumeWith, SweepOver, Workload};
use tlslab_workload::replay::PathMode;

use crate::parse::{parse_duration, parse_threads, parse_timeout};

/// `tlslab load`.
#[derive(Clone, Debug, Args)]
#[command(
    after_help = "Example:\n  tlslab load https://127.0.0.1:8443/specweb96/class1_3 --cacert certs/ca.pem \\\n      \
    -c 16 -d 10s --requests-per-conn 1 --reuse 50 --tls 1.3 --json run.json --log run.csv\n  \
    tlslab load https://127.0.0.1:8443 --workload specweb96 --seed 7 --think-time exp:mean=100ms -c 32\n  \
    tlslab load https://127.0.0.1:8443/dyn?work=1000 --rate 500 --arrivals poisson -d 10s\n  \
    tlslab load https://127.0.0.1:8443/specweb96/class1_0 --cacert certs/ca.pem --h2 -c 2 -m 10 \\\n      \
    --requests-per-conn 0 -n 2000\n\n\
    --reuse follows seed 000's running counter: each client offers resumption whenever the share \
    of its connections that resumed is below P, so 50 gives N R N R ..., 100 gives N R R R ....\n\
    With --h2, -c is the number of connections at a time and -m the streams in flight on each \
    (as h2load's -c and -m); every stream is one request and one --log row, and a connection's \
    first stream carries its connect and handshake times. --h2 runs every loop and workload \
    HTTP/1.1 does (closed, --rate, --think-time, --retry-on-failure, urls, specweb96, \
    ecommerce, replay, --early-data); an e-commerce page is then one connection, its inline \
    objects parallel streams.\n\
    All figures are client-observed over the measurement window printed with them.\n\
    Exit code 1 when no request succeeded (every one failed, answered non-2xx or was cut off \
    unfinished) or when more than --max-error-rate percent failed; the report is still printed."
)]
#[command(group = clap::ArgGroup::new("mux").args(["h2", "h3"]).multiple(true))]
pub struct LoadArgs {
    #[command(flatten)]
    pub h3: crate::args::h3::LoadH3Args,

    /// Target URLs (http:// or https://); each client walks them in turn.
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,

    /// Concurrent clients (closed loop: each has one request outstanding).
    #[arg(short = 'c', long, default_value_t = 8, value_name = "CLIENTS")]
    pub clients: usize,

    /// How long to measure (e.g. 10s, 1m). Default 10s unless -n is given.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Total requests to send; with -d too, whichever comes first ends the run.
    #[arg(short = 'n', long, value_name = "REQUESTS")]
    pub requests: Option<u64>,

    /// Unrecorded warm-up before the measurement window.
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = parse_duration)]
    pub warmup: Duration,

    /// Engine threads, 1 to 1024 (default: the number of CPUs this process may use).
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,

    /// Requests per connection: 1 opens a new connection for every request
    /// (as the papers did); 0 keeps each connection alive for the whole run.
    /// With --h2, streams per connection (0: as h2load, one connection per client).
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub requests_per_conn: u32,

    /// Speak HTTP/2: offer ALPN h2 only over TLS (a server that does not select it fails
    /// the connection as `alpn_not_h2`), prior knowledge (h2c) over http://. Every loop
    /// and workload of HTTP/1.1, and --early-data (the preface and first request in TLS 1.3
    /// early data).
    #[arg(long)]
    pub h2: bool,

    /// With --h2 or --h3: streams each client keeps in flight on its connection (h2load's -m).
    #[arg(
        short = 'm',
        long,
        default_value_t = 1,
        value_name = "N",
        requires = "mux"
    )]
    pub max_concurrent_streams: u32,

    /// Target share of connections that resume a session, in percent (0-100).
    /// (`sweep` takes a comma-separated list: one series per value.)
    #[arg(
        long,
        default_value = "0",
        value_name = "PERCENT",
        value_delimiter = ','
    )]
    pub reuse: Vec<f64>,

    /// How to resume: id (TLS 1.2 session IDs), ticket (TLS 1.2 tickets), auto (both).
    /// TLS 1.3 always resumes with PSK tickets.
    #[arg(long, default_value = "auto", value_name = "HOW")]
    pub resume_with: ResumeWith,

    /// TLS versions to offer, comma separated: 1.2, 1.3.
    #[arg(long, default_value = "1.2,1.3", value_name = "VERSIONS")]
    pub tls: String,

    /// Cipher suites to offer, comma separated, by IANA name. Default: rustls's.
    #[arg(long, alias = "suite", value_name = "SUITES", value_delimiter = ',')]
    pub suites: Option<Vec<String>>,

    /// Key-exchange groups to offer, in preference order, comma separated. Default: rustls's.
    #[arg(long, alias = "group", value_name = "GROUPS", value_delimiter = ',')]
    pub groups: Option<Vec<String>>,

    /// Server name to send in SNI and verify (default: the URL's host).
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,

    /// Trust only the CA certificates in this PEM file (e.g. the ca.pem of `tlslab certs`).
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub cacert: Option<PathBuf>,

    /// Do not verify the server certificate. Measurements stay valid, security does not.
    #[arg(long)]
    pub insecure: bool,

    /// RFC 8879 certificate compression to offer: `none`, or algorithms in
    /// preference order, comma separated: brotli, zlib. The report gives the
    /// certificate's compressed and uncompressed sizes.
    #[arg(long, default_value = "none", value_name = "none|brotli|zlib[,...]")]
    pub cert_compression: String,

    /// Announce this TCP maximum segment size (TCP_MAXSEG, 88 to 65495), so that
    /// over loopback (MTU 64 KiB) the server's flights come in Internet-sized
    /// segments, e.g. --mss 1460; the report's TCP segment counts and initial-window
    /// figures then mean what they would on a path. Default: the route's.
    #[arg(long, value_name = "BYTES")]
    pub mss: Option<u32>,

    /// Send the request as TLS 1.3 early data (0-RTT) on resumed connections, where the server allows it.
    #[arg(long)]
    pub early_data: bool,

    /// Replace these client TLS stages with no-ops, comma separated: sig, kx, cipher, mac, hash,
    /// rng, cache, kdf, with --h3 also quic-packet, quic-header, quic-keys, or skeleton /
    /// quic-skeleton / minimal (see crates/crypto/ABLATIONS.md), to load a
    /// `tlslab serve --ablate` with the same set. INSECURE: for measuring what each stage costs.
    /// Needs --insecure-ablation and --cacert.
    #[arg(long, value_name = "LIST")]
    pub ablate: Option<String>,

    /// Confirm that --ablate makes every connection of this run insecure.
    #[arg(long)]
    pub insecure_ablation: bool,

    /// Give up on a connection or request after this long (e.g. 10s), or `inf`.
    #[arg(long, default_value = "10s", value_name = "DURATION|inf", value_parser = parse_timeout)]
    pub timeout: Duration,

    /// After a connection that could not be made (refused, reset, unreachable, timed out),
    /// wait a random time below min(B x 2^(n-1), 32 x B) before the n-th attempt in a row
    /// (exponential backoff with full jitter, as `overload --retry-backoff`), so a dead
    /// server is not hammered in a tight loop. 0 tries again at once.
    #[arg(long, default_value = "10ms", value_name = "B", value_parser = parse_duration)]
    pub retry_backoff: Duration,

    /// Exit 1 when more than this share of the attempted requests failed (errors, non-2xx
    /// included; requests cut off at the end of -d are not counted), in percent. The default,
    /// 100, passes any run in which a request succeeded; a run with no success always exits 1.
    #[arg(long, value_name = "PERCENT")]
    pub max_error_rate: Option<f64>,

    /// Bind each client's sockets to a local address from RANGE: one address (127.0.0.2),
    /// a range (127.0.0.2-127.0.0.254) or a CIDR block (127.0.0.0/24). Client i uses address
    /// (i / --clients-per-ip) mod the range's size, so a balancer sees many client addresses
    /// (source-IP affinity). Any local address works; all of 127.0.0.0/8 is local on Linux.
    #[arg(long, value_name = "RANGE")]
    pub source_ip: Option<String>,

    /// With --source-ip: put N clients behind each address, as behind a NAT or proxy.
    #[arg(long, value_name = "N", requires = "source_ip")]
    pub clients_per_ip: Option<u32>,

    /// Write the report as JSON to FILE (schema: docs/schema.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write one CSV row per request to FILE.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,

    /// Append every connection's TLS secrets (TCP and QUIC) to FILE in the NSS key log
    /// format, created 0600, so Wireshark/tshark can decrypt a capture of the run
    /// (docs/debugging.md). Without it, the SSLKEYLOGFILE environment variable is honoured
    /// as curl honours it. The file holds secrets: a WARNING is printed.
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,

    /// Write per-interval latency histograms (Tag=total, handshake, ttfb; microseconds) to
    /// FILE in the HdrHistogram interval log format (V2 compressed, base64), which python's
    /// hdrh and HdrHistogram's HistogramLogProcessor read. An agent (--out) writes
    /// DIR/intervals.hlog instead, which `tlslab merge --hdr-log` merges.
    #[arg(long, value_name = "FILE", conflicts_with = "out")]
    pub hdr_log: Option<PathBuf>,

    /// The interval of --hdr-log.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_duration)]
    pub hdr_interval: Duration,

    /// Distributed load: --shard, --start-at, --out.
    #[command(flatten)]
    pub dist: ShardArgs,

    /// Never show the live progress line (it is shown only on a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,

    /// Where request paths come from: urls (the URLs in turn), specweb96
    /// (the SPECweb96 mix) or ecommerce (browsers making purchase sessions; with --rate,
    /// sessions arriving at that rate, each a new browser); the last two take one base URL
    /// such as https://host:8443.
    #[arg(long, default_value = "urls", value_name = "MODEL")]
    pub workload: Workload,

    /// TOML file of the e-commerce model (pages, flows, think time, new-customer share,
    /// parallel connections); default: the built-in Amazon-shaped model.
    #[arg(long, value_name = "FILE")]
    pub workload_config: Option<PathBuf>,

    /// Replay: the access log (Common or Combined Log Format, nginx `combined`).
    #[arg(long, value_name = "FILE")]
    pub access_log: Option<PathBuf>,

    /// Replay: bound on LP - LS, the last request issued minus the last served in log order.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub window: usize,

    /// Replay: follow the log's timing sped up X times (default: as fast as possible).
    #[arg(long, value_name = "X")]
    pub speed: Option<f64>,

    /// Replay: drop the requests of the clients listed in FILE, one IP address or host
    /// name per line as the log writes them (proxies). Alias: --exclude-ips.
    #[arg(long, visible_alias = "exclude-ips", value_name = "FILE")]
    pub exclude_clients: Option<PathBuf>,

    /// Replay: drop every client (IP address or host name) that made more than N
    /// requests within any PERIOD (e.g. 100/min, 10/s, 600/10m): a proxy in disguise.
    /// Alias: --ip-rate-limit.
    #[arg(long, visible_alias = "ip-rate-limit", value_name = "N/PERIOD")]
    pub client_rate_limit: Option<String>,

    /// Replay: a malformed log line is an error (exit 1, naming the line and why) instead
    /// of being skipped; without it, more than 1 % skipped lines print a warning.
    #[arg(long)]
    pub strict: bool,

    /// Replay: request paths: bytes (/bytes/<logged size>) or original (the log's paths).
    #[arg(long, default_value = "bytes", value_name = "MODE")]
    pub replay_paths: PathMode,

    /// Seed of every random stream (paths, think times, arrivals): the same
    /// seed gives the same requests in the same order.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// Pause of each client after each request, not counted in latency:
    /// 0, const:2s, exp:mean=7s, uniform:1s..5s or pareto:min=1s,shape=1.5.
    #[arg(long, default_value = "0", value_name = "DIST")]
    pub think_time: String,

    /// After a failed request (no complete response), the same client retries it and
    /// keeps its sessions. Without it, a failure makes the client a new client
    /// (stored sessions and reuse counters cleared).
    #[arg(long)]
    pub retry_on_failure: bool,

    /// Open loop: R arrivals per second, each one request on a new connection, timed
    /// from its intended start. -c is then the pool of client identities (session
    /// stores), not a cap on concurrency.
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,

    /// Open-loop arrival process: poisson or constant.
    #[arg(
        long,
        default_value = "poisson",
        value_name = "PROCESS",
        requires = "rate"
    )]
    pub arrivals: Arrivals,

    /// Open loop: at most N requests in flight; further arrivals are dropped and counted.
    #[arg(long, default_value_t = 10_000, value_name = "N", requires = "rate")]
    pub max_in_flight: usize,
}

/// `tlslab sweep`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  tlslab sweep https://127.0.0.1:8443/specweb96/class1_3 --cacert certs/ca.pem \\\n      \
    -c 1 --factor 2 --steps 8 -d 2s --reuse 0,50,100 --json sweep.json\n\n\
    Each step is a `tlslab load` run (every load flag applies) with the client count (or, with \
    --rate, the arrival rate) multiplied by --factor. A series stops at the knee: the step after \
    which requests/s grew by less than --knee percent; the knee is the last step that still grew."
)]
pub struct SweepArgs {
    /// The load of every step; -c or --rate is the starting point, --reuse may list values.
    #[command(flatten)]
    pub load: LoadArgs,

    /// What to step: clients (default) or rate (default when --rate is given).
    #[arg(long, value_name = "WHAT")]
    pub over: Option<SweepOver>,

    /// Multiply the client count or rate by this at each step (> 1).
    #[arg(long, default_value_t = 2.0, value_name = "F")]
    pub factor: f64,

    /// At most this many steps per --reuse value.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub steps: usize,

    /// Stop when requests/s grew by less than this many percent over the previous step.
    #[arg(long, default_value_t = 10.0, value_name = "PERCENT")]
    pub knee: f64,
}

/// The distributed-load flags of `tlslab load`.
#[derive(Clone, Debug, Default, Args)]
#[command(next_help_heading = "Distributed load")]
pub struct ShardArgs {
    /// Run as agent I of N (1-based): this agent runs 1/N of the clients
    /// (-c), requests (-n) and rate (--rate); replayed client IPs are split
    /// by a stable hash. Give every agent the same other flags.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,

    /// Start the measurement at this wall-clock time (RFC 3339, e.g.
    /// 2026-01-01T12:00:00Z), so that agents begin together. At most 2 s in
    /// the past.
    #[arg(long, value_name = "RFC3339")]
    pub start_at: Option<String>,

    /// Write this agent's report.json, requests.csv, histograms.hlog (HdrHistogram
    /// interval log), intervals.hlog (one interval per --hdr-interval), counters.json
    /// and, last, complete.json into DIR, for
    /// `tlslab merge`. DIR is created; it must not hold a finished output.
    #[arg(long, value_name = "DIR", conflicts_with = "log")]
    pub out: Option<PathBuf>,
}

impl ShardArgs {
    /// Returns true if and only if any distributed flag was given.
    pub fn is_set(&self) -> bool {
        self.shard.is_some() || self.start_at.is_some() || self.out.is_some()
    }
}

/// `tlslab merge`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  \
    tlslab merge out/agent-1 out/agent-2 out/agent-3 --json merged.json\n\n\
    Each DIR is one agent's `load --out DIR`. Counts are summed, HDR histograms added (percentiles \
    come from the merged histograms, never from averaged percentiles) and reuse recomputed from the \
    summed counts. An agent whose directory has no complete.json (it died or is still running), or \
    whose shard has no directory, is reported as MISSING and not counted; the exit code is then 1 \
    unless --allow-missing is given. Agents must be from one run: the same seed, --start-at, -c, -n, \
    --rate, URLs and other load flags, with overlapping windows; otherwise merge names the \
    difference and exits 1 (--force merges them anyway, with a WARNING per difference).")]
pub struct MergeArgs {
    /// The agents' --out directories.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,

    /// Write the merged report as JSON to FILE (the `load --json` schema plus `distributed`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Exit 0 even when agents are missing (they are still reported).
    #[arg(long)]
    pub allow_missing: bool,

    /// Merge agents that are not from one run (another seed, start time, URL, -c, -n, ...)
    /// instead of refusing with exit 1; each difference is printed as a WARNING.
    #[arg(long)]
    pub force: bool,

    /// Merge the agents' per-interval HdrHistogram logs (DIR/intervals.hlog, written by
    /// `load --out`) into FILE: histograms of one series whose intervals start at the same
    /// wall-clock time (to the interval) are added.
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
}
