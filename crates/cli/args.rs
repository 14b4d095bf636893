//! Step one of flag parsing: the raw command line, as clap sees it. Nothing
//! here does I/O; `config.rs` turns these into validated engine configs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// tlslab: measure what TLS costs an HTTPS server, and what wins it back.
#[derive(Debug, Parser)]
#[command(
    name = "tlslab",
    version,
    about = "A laboratory for measuring what TLS costs an HTTPS server",
    long_about = "tlslab measures what TLS costs an HTTPS server.\n\n\
        `serve` is an HTTPS/HTTP server whose session cache, tickets, versions, suites, groups and \
        certificates can all be switched, with Prometheus metrics. `load` is a load generator with \
        a session-reuse knob that times TCP connect, full and resumed handshakes, first byte and \
        transfer separately, closed- or open-loop, over URLs, the SPECweb96 mix, an e-commerce \
        browser model or a replayed access log. `sweep` steps `load` to the knee. `relay` emulates a WAN \
        path (delay, jitter, bandwidth, loss) in user space. `fileset` writes \
        a workload's files (SPECweb96, e-commerce, replay) for other servers. `lab` runs serve and load on this machine and prints \
        what TLS costs here.\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 usage error.",
    after_help = "Start with `tlslab lab --quick`. Every subcommand has its own --help."
)]
pub struct Cli {
    /// Log verbosity for diagnostics on stderr (error, warn, info, debug, trace).
    #[arg(long, global = true, default_value = "warn", value_name = "LEVEL")]
    pub log_level: String,

    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a CA and a server certificate chain signed by it.
    Certs(CertsArgs),
    /// Run the HTTPS (and optional plain HTTP) server.
    Serve(ServeArgs),
    /// Generate HTTPS load against one or more URLs and report per-phase timings.
    Load(LoadArgs),
    /// Run serve and load together on this machine and print what TLS costs here.
    Lab(LabArgs),
    /// Replace TLS stages with no-ops one at a time and print seed 001's Amdahl cost table.
    Breakdown(BreakdownArgs),
    /// Write a workload's files (specweb96, ecommerce, replay) to a directory, for nginx, Apache or `serve --root`.
    Fileset(FilesetArgs),
    /// Step `load`'s client count or rate until throughput stops growing (the knee),
    /// one latency-vs-throughput series per --reuse value.
    Sweep(SweepArgs),
    /// Time full against resumed handshakes of HTTPS sites over days (seed 003's WebPerf),
    /// store them in SQLite, report them, or serve them to Prometheus.
    Probe(crate::probe::ProbeArgs),
    /// Relay TCP to a server through an emulated WAN path (delay, jitter, bandwidth, loss).
    Relay(RelayArgs),
    /// Run a server and a client command in two network namespaces joined by a packet-level WAN
    /// path (delay, jitter, rate or mahimahi trace, drop-tail queue, loss); needs root.
    Path(crate::path_cmd::PathArgs),
    /// A TLS-session-aware L4 load balancer: routes resumptions to the node that holds the session.
    Dispatch(crate::dispatch_cmd::DispatchArgs),
    /// Merge the `load --shard I/N --out DIR` outputs of N agents into one exact report.
    Merge(crate::distributed::MergeArgs),
    /// Drive an embedded server from 0.5x to 4x its capacity with user sessions (seed 002's
    /// collapse) and compare admission control off, static and session-aware.
    Overload(crate::overload_args::OverloadArgs),
    /// Seed 000's cluster experiment (Fig. 9): N nodes behind a blind or session-aware dispatcher,
    /// or sharing session state, swept over reuse and resumption mechanisms.
    Cluster(crate::cluster_args::ClusterArgs),
    /// Write a self-contained HTML (inline SVG charts) or Markdown report of experiment results,
    /// `load --json` and `sweep --json` files.
    Report(crate::report_args::ReportArgs),
    /// The capacity model: connections/s and requests/s per core, cores for a load, response
    /// time by M/M/c and seed 004's 300/(1-ρ); `--check` measures it.
    Plan(crate::report_args::PlanArgs),
    /// Run a declared matrix, or a seed paper's study, into one resumable results document
    /// with the paper's figures beside today's (`experiment list` names the studies).
    Experiment(crate::experiment_args::ExperimentArgs),
}

/// `tlslab relay`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  tlslab relay --listen 127.0.0.1:9443 --upstream 127.0.0.1:8443 --delay 50ms\n  \
    tlslab load https://127.0.0.1:9443/ --cacert certs/ca.pem -c 1 -n 20\n\n\
    Each direction delays every segment (of at most 1448 bytes) by --delay, so the RTT is twice \
    --delay and every TLS flight pays it: a full TLS 1.3 handshake takes one RTT, a TLS 1.2 one \
    two. The client's TCP connect is accepted locally and is NOT delayed. Loss is emulated as the \
    delay of a retransmission (TCP over loopback cannot lose). The first line on stdout is \
    `relay listening on ADDR`; SIGINT or SIGTERM stops the relay and prints its counters."
)]
pub struct RelayArgs {
    /// Address to accept clients on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR")]
    pub listen: SocketAddr,

    /// The server to relay each client to, as HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub upstream: String,

    /// One-way delay added to every segment in each direction (RTT = 2 x delay).
    #[arg(long, default_value = "0ms", value_name = "DURATION", value_parser = parse_duration)]
    pub delay: Duration,

    /// Each segment's delay varies uniformly within +/- this, without reordering.
    #[arg(long, default_value = "0ms", value_name = "DURATION", value_parser = parse_duration)]
    pub jitter: Duration,

    /// Bottleneck rate in each direction, in tc's units: 26.4kbit, 10mbit, 1gbit, 125kbps (bytes/s).
    #[arg(long, value_name = "RATE")]
    pub bandwidth: Option<String>,

    /// Probability that a segment is lost, as 0.5% or 0.005; a lost segment (and all behind it)
    /// arrives --loss-delay late, as after a retransmission timeout.
    #[arg(long, default_value = "0%", value_name = "PERCENT")]
    pub loss: String,

    /// How late a lost segment arrives [default: RTT + 200 ms, Linux's RTO on a steady path].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub loss_delay: Option<Duration>,

    /// Seed of the jitter and loss draws, so runs repeat.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// Close a connection on which no byte moved, either way, for this long (nginx stream's
    /// proxy_timeout default).
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// The most bytes the relay holds (read, not yet delivered) over all connections; a
    /// direction stops reading while it is reached. Each direction also holds at most 4 MiB,
    /// and with --bandwidth what the path sends in its delays plus 1 s (at least 128 KiB).
    #[arg(long, default_value = "128MiB", value_name = "SIZE")]
    pub max_queued: String,
}

/// What `sweep` steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SweepOver {
    /// Closed-loop clients, from -c.
    Clients,
    /// Open-loop arrival rate, from --rate.
    Rate,
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

/// `tlslab fileset`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  tlslab fileset --out www\n  \
    tlslab fileset --out www --workload ecommerce --workload-config shop.toml\n  \
    tlslab fileset --out www --workload replay --access-log access.log\n\n\
    specweb96 writes the 36 SPECweb96 files to www/specweb96/class{0-3}_{0-8} with the same bytes \
    `tlslab serve --fileset specweb96` serves, so nginx with `root www;` or Apache with \
    `DocumentRoot www` answers `tlslab load --workload specweb96` alike. ecommerce writes the \
    catalogue under www/ecommerce/<page>/{index.html,obj<i>} for `tlslab load --workload \
    ecommerce` with `paths = \"files\"` in its --workload-config. replay writes each file path \
    of the log (query dropped) with the largest size logged for it, for `tlslab load --workload \
    replay --access-log LOG --replay-paths original`.")]
pub struct FilesetArgs {
    /// Directory to write the files under (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// The workload whose files to write: specweb96 (the 36 SPECweb96 files),
    /// ecommerce (the catalogue, as requested with `paths = "files"`) or
    /// replay (the paths of --access-log with their logged sizes).
    #[arg(long, default_value = "specweb96", value_name = "MODEL")]
    pub workload: FilesetWorkload,

    /// Ecommerce: TOML file of the model whose catalogue to write (the same file
    /// given to `load --workload-config`); default: the built-in model.
    #[arg(long, value_name = "FILE")]
    pub workload_config: Option<PathBuf>,

    /// Replay: the access log (Common or Combined Log Format) whose paths to write.
    #[arg(long, value_name = "FILE")]
    pub access_log: Option<PathBuf>,

    /// Replace files that exist with other contents (default: refuse).
    #[arg(long)]
    pub force: bool,
}

/// Which workload's file tree `tlslab fileset` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FilesetWorkload {
    /// The 36 SPECweb96 files under /specweb96/.
    Specweb96,
    /// The e-commerce catalogue under /ecommerce/ (load it with `paths = "files"`).
    Ecommerce,
    /// The paths of --access-log with their logged sizes (load with --replay-paths original).
    Replay,
}

/// Where `load` takes its request paths from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// The URLs given, each client walking them in turn.
    Urls,
    /// The SPECweb96 mix (35/50/14/1 % over four size classes); give one base URL.
    Specweb96,
    /// Browsers making purchase sessions (seed 001's e-commerce model); give one base URL.
    Ecommerce,
    /// Replay an access log (--access-log): one browser per client IP; give one base URL.
    Replay,
}

/// How a replay forms request paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReplayPaths {
    /// /bytes/<N> with N the bytes the log recorded (any `tlslab serve` answers it).
    Bytes,
    /// The log's own paths, for a server holding the files.
    Original,
}

/// Open-loop arrival processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Arrivals {
    /// Exponential gaps of mean 1/rate.
    Poisson,
    /// Gaps of exactly 1/rate.
    Constant,
}

/// `tlslab certs`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  tlslab certs --out certs --key ecdsa-p256 --san localhost,127.0.0.1\n\n\
    Writes ca.pem (give it to clients with --cacert), ca.key, server.pem (leaf then CA) and \
    server.key (mode 0600)."
)]
pub struct CertsArgs {
    /// Directory to write ca.pem, ca.key, server.pem and server.key into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Key algorithm of the server certificate (and of the CA without
    /// --intermediate-key): rsa2048, rsa3072, rsa4096, ecdsa-p256, ecdsa-p384,
    /// ed25519, or the post-quantum mldsa44, mldsa65, mldsa87 (TLS 1.3 only).
    #[arg(long, default_value = "ecdsa-p256", value_name = "TYPE")]
    pub key: String,

    /// Put an intermediate CA of this key type (under a root of the same type)
    /// between the root and the server certificate: server.pem is then the leaf
    /// and the intermediate, and ca.pem the root (not sent). Mixed chains are
    /// allowed, e.g. --key mldsa44 --intermediate-key ecdsa-p256.
    /// Default: no intermediate (server.pem is the leaf and the CA).
    #[arg(long, value_name = "TYPE")]
    pub intermediate_key: Option<String>,

    /// Subject alternative names of the server certificate, comma separated
    /// (DNS names or IP addresses). Default: localhost,127.0.0.1,::1.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub san: Vec<String>,
}

/// On or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// Built-in file sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fileset {
    /// The 36 files of SPECweb96 (four classes of nine sizes, 102 B to 900 KB),
    /// served under /specweb96/class{0-3}_{0-8}.
    Specweb96,
}

/// `tlslab serve`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  tlslab serve --fileset specweb96 --http 127.0.0.1:8080 --metrics 127.0.0.1:9090 \\\n      \
    --tls 1.2,1.3 --session-cache memory:100000 --tickets off\n\n\
    Without --cert/--key it generates an ephemeral CA and certificate and prints where ca.pem is.\n\
    Every mode also serves /dyn?work=<µs>&bytes=<N> (burns CPU, returns N bytes), /bytes/<N> and /health.\n\
    SIGINT or SIGTERM stops it gracefully and prints a summary."
)]
pub struct ServeArgs {
    /// Address of the HTTPS listener (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8443", value_name = "ADDR")]
    pub listen: SocketAddr,

    /// Also serve the same content over plain HTTP on this address (the TLS-vs-plain baseline).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,

    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,

    /// Serve the static files under DIR (loaded into memory at start, at most 1 GiB).
    #[arg(long, value_name = "DIR", conflicts_with = "fileset")]
    pub root: Option<PathBuf>,

    /// Serve a built-in file set generated in memory.
    #[arg(long, value_name = "NAME")]
    pub fileset: Option<Fileset>,

    /// PEM certificate chain, leaf first (needs --key).
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,

    /// PEM private key of --cert (needs --cert).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,

    /// Key type of the ephemeral certificate generated when --cert is not given:
    /// rsa2048, rsa3072, rsa4096, ecdsa-p256, ecdsa-p384, ed25519, mldsa44, mldsa65
    /// or mldsa87 (ML-DSA: TLS 1.3 only).
    #[arg(
        long,
        default_value = "ecdsa-p256",
        value_name = "TYPE",
        conflicts_with = "cert"
    )]
    pub key_type: String,

    /// Give the ephemeral chain an intermediate CA of this key type (see
    /// `tlslab certs --intermediate-key`); mixed chains are allowed.
    /// Default: the leaf and a CA of --key-type.
    #[arg(long, value_name = "TYPE", conflicts_with = "cert")]
    pub intermediate_key_type: Option<String>,

    /// RFC 8879 certificate compression: `none`, or algorithms in preference
    /// order, comma separated: brotli, zlib. The chain is compressed once per
    /// algorithm and sent compressed to clients that offer one. (zstd: rustls
    /// has no codec for it.)
    #[arg(long, default_value = "none", value_name = "none|brotli|zlib[,...]")]
    pub cert_compression: String,

    /// TLS versions to accept, comma separated: 1.2, 1.3.
    #[arg(long, default_value = "1.2,1.3", value_name = "VERSIONS")]
    pub tls: String,

    /// Cipher suites to accept, comma separated, by IANA name
    /// (e.g. TLS13_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256). Default: rustls's.
    #[arg(long, value_name = "SUITES", value_delimiter = ',')]
    pub suites: Option<Vec<String>>,

    /// Key-exchange groups in preference order, comma separated:
    /// x25519, secp256r1, secp384r1, X25519MLKEM768, secp256r1MLKEM768, MLKEM768, MLKEM1024.
    /// Default: rustls's (X25519MLKEM768, x25519, secp256r1, secp384r1).
    #[arg(long, value_name = "GROUPS", value_delimiter = ',')]
    pub groups: Option<Vec<String>>,

    /// Server session cache: `none`, `memory:N` for at most N sessions
    /// (TLS 1.2 session IDs and, with --tickets off, TLS 1.3 stateful tickets),
    /// `redis://HOST:PORT[/DB]` to share sessions with other servers through Redis,
    /// or `memory:N+redis://HOST:PORT[/DB]` for a memory layer in front of Redis.
    /// Sessions are fetched from Redis before the handshake, within --redis-timeout;
    /// a slow or down Redis means full handshakes, never errors.
    #[arg(long, default_value = "memory:100000", value_name = "SPEC")]
    pub session_cache: String,

    /// Prefix of every Redis key this server writes (sessions).
    #[arg(long, default_value = "tlslab:session:", value_name = "PREFIX")]
    pub redis_prefix: String,

    /// How long a pre-handshake Redis GET may take before the handshake goes on as full.
    #[arg(long, default_value = "5ms", value_name = "DURATION", value_parser = parse_duration)]
    pub redis_timeout: Duration,

    /// Ticket keys shared by a cluster: a file of one or more 80-byte keys
    /// (nginx's ssl_session_ticket_key layout: 16-byte name, 32-byte AES key,
    /// 32-byte HMAC key; make one with `openssl rand 80 > FILE`). The first key
    /// encrypts, all decrypt. Re-read on SIGHUP and when the file changes.
    /// Or `redis://HOST:PORT[/DB]`: the cluster's current and previous keys live in Redis
    /// under `{--redis-prefix}ticket-keys`, rotated every --ticket-key-rotation by one node
    /// (elected by a Redis lock); a new key is published before any node encrypts with it.
    /// Needs --tickets on. Default: keys of this process alone.
    #[arg(long, value_name = "FILE|URL")]
    pub ticket_keys: Option<std::path::PathBuf>,

    /// How often the cluster's ticket keys in Redis rotate (with --ticket-keys redis://…).
    /// Nodes poll every 1/24 of it (50 ms to 30 s).
    #[arg(long, default_value = "12h", value_name = "DURATION", value_parser = parse_duration)]
    pub ticket_key_rotation: Duration,

    /// This node's name in a cluster behind `tlslab dispatch`. Its TLS 1.2 session IDs and its
    /// stateful TLS 1.3 tickets (--tickets off) then start with a 4-byte node prefix, the first
    /// 4 bytes of SHA-256(TAG) (`printf %s TAG | sha256sum | cut -c1-8`), printed at start-up
    /// as `tlslab serve: node-tag HEX`; give it to the dispatcher as
    /// `--backend ADDR=HEX` or `--backend ADDR=tag:TAG` so it routes each session's first
    /// resumption to this node. (Stateless tickets are routed by their key name instead.)
    #[arg(long, value_name = "TAG")]
    pub node_tag: Option<String>,

    /// How long a cached session stays valid.
    #[arg(long, default_value = "300s", value_name = "DURATION", value_parser = parse_duration)]
    pub session_timeout: Duration,

    /// Session tickets. `on`: TLS 1.2 tickets and stateless TLS 1.3 tickets.
    /// `off`: no TLS 1.2 tickets, and TLS 1.3 tickets are stateful (kept in the session cache).
    #[arg(long, default_value = "on", value_name = "on|off")]
    pub tickets: OnOff,

    /// Maximum TLS 1.3 early data (0-RTT) accepted per connection, in bytes; 0 disables it.
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    pub max_early_data: u32,

    /// Worker threads, 1 to 1024 (default: the number of CPUs this process may use).
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,

    /// Close connections whose TLS handshake (protocol detection included) has not finished
    /// within this time.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub handshake_timeout: Duration,

    /// Close a connection whose first request header has not arrived complete within this
    /// time after the handshake (on --http: after accept, HTTP version detection included);
    /// nginx's client_header_timeout.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Close a connection idle this long after a response before its next request header is
    /// complete (HTTP/2: with no stream open); nginx's keepalive_timeout.
    #[arg(long, default_value = "75s", value_name = "DURATION", value_parser = parse_duration)]
    pub keepalive_timeout: Duration,

    /// Send a PING on an HTTP/2 connection that has read nothing for this long, and close it if
    /// no answer comes within 20 s (a dead peer). `off`: no PINGs.
    #[arg(long, default_value = "60s", value_name = "DURATION|off", value_parser = parse_duration_or_off)]
    pub h2_ping_interval: DurationOrOff,

    /// Maximum simultaneously open connections (HTTPS and --http together). At the limit a new
    /// connection makes the longest-idle one close and takes its slot; with none idle it waits.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub max_connections: usize,

    /// ALPN protocols to offer, comma separated, in preference order (h2, http/1.1).
    #[arg(
        long,
        default_value = "h2,http/1.1",
        value_name = "PROTOCOLS",
        value_delimiter = ','
    )]
    pub alpn: Vec<String>,

    /// Replace TLS stages with no-ops, comma separated: sig, kx, cipher, mac, hash, rng,
    /// cache, kdf, or skeleton / minimal (see crates/crypto/ABLATIONS.md). INSECURE: for
    /// measuring what each stage costs (`tlslab breakdown`). Needs --insecure-ablation.
    #[arg(long, value_name = "LIST")]
    pub ablate: Option<String>,

    /// Confirm that --ablate makes this server insecure. Without --allow-remote an ablated
    /// server binds only to loopback addresses.
    #[arg(long)]
    pub insecure_ablation: bool,

    /// Allow an ablated server to listen on non-loopback addresses.
    #[arg(long, requires = "ablate")]
    pub allow_remote: bool,

    /// Write one line per completed request to FILE (created or truncated), in the order
    /// service completed, nginx-combined-like plus TLS fields:
    /// `$remote_addr - - [$time_local] "$request" $status $body_bytes_sent "-"
    /// "$http_user_agent" $ssl_protocol $ssl_session_reused $request_time_us $connection_id
    /// $request_on_conn`. Time is UTC; protocol is TLSv1.2/TLSv1.3 and reused is `r`
    /// (resumed) or `.` (full handshake), both `-` on the plain listener; request time is in
    /// microseconds; connections and requests on a connection are numbered from 1. A
    /// dedicated thread writes it; nothing is dropped; it is flushed at shutdown.
    #[arg(long, value_name = "FILE")]
    pub access_log: Option<PathBuf>,

    #[command(flatten)]
    pub admission: crate::overload_args::AdmissionArgs,

    #[command(flatten)]
    pub h3: crate::h3_args::ServeH3Args,
}

/// How a client resumes sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ResumeWith {
    /// TLS 1.2 session IDs only (no ticket extension). TLS 1.3 always uses PSK tickets.
    Id,
    /// TLS 1.2 session tickets (RFC 5077). TLS 1.3 always uses PSK tickets.
    Ticket,
    /// Offer both; the server chooses.
    Auto,
}

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
    first stream carries its connect and handshake times. --h2 does not take --rate, \
    --think-time, --retry-on-failure or --early-data.\n\
    All figures are client-observed over the measurement window printed with them.\n\
    Exit code 1 when no request succeeded (every one failed, answered non-2xx or was cut off \
    unfinished) or when more than --max-error-rate percent failed; the report is still printed."
)]
#[command(group = clap::ArgGroup::new("mux").args(["h2", "h3"]).multiple(true))]
pub struct LoadArgs {
    #[command(flatten)]
    pub h3: crate::h3_args::LoadH3Args,

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
    /// the connection as `alpn_not_h2`), prior knowledge (h2c) over http://. Closed loop,
    /// urls or specweb96 workload.
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
    #[arg(long, value_name = "SUITES", value_delimiter = ',')]
    pub suite: Option<Vec<String>>,

    /// Key-exchange groups to offer, in preference order, comma separated. Default: rustls's.
    #[arg(long, value_name = "GROUPS", value_delimiter = ',')]
    pub group: Option<Vec<String>>,

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
    /// rng, cache, kdf, or skeleton / minimal (see crates/crypto/ABLATIONS.md), to load a
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

    /// Distributed load: --shard, --start-at, --out.
    #[command(flatten)]
    pub dist: crate::distributed::ShardArgs,

    /// Never show the live progress line (it is shown only on a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,

    /// Where request paths come from: urls (the URLs in turn), specweb96
    /// (the SPECweb96 mix) or ecommerce (browsers making purchase sessions);
    /// the last two take one base URL such as https://host:8443.
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
    pub replay_paths: ReplayPaths,

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

/// The request pattern of `tlslab breakdown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BreakdownWorkload {
    /// A new connection and a full handshake for every request.
    NewConn,
    /// A new connection for every request, --reuse percent of them resumed.
    Reuse,
    /// Keep-alive connections: the record layer only.
    KeepAlive,
}

/// `tlslab breakdown`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  tlslab breakdown --insecure-ablation --quick --workload new-conn --tls 1.3\n\n\
    Starts an embedded server on loopback pinned to one CPU and drives it from another. For each \
    configuration (plain HTTP; TLS; each stage replaced by a no-op on client and server alike: \
    sig, kx, cipher, mac, hash, rng, and cache when sessions are resumed; seed 001's cumulative \
    configurations; skeleton; minimal setup) it measures the server's CPU per request \
    (server-observed) several times, then applies Amdahl's law: a stage's share of the cost is \
    1 - 1/speedup. Each ablated cell runs at the same time as a baseline cell (two servers on the \
    server CPU, two load engines on the client CPU, one window) and is compared with it, and \
    rounds continue until every stage's 95 % interval is within --target-ci points or --max-time \
    passes; the crypto meter's direct attribution is printed beside each share. Shares whose \
    interval contains 0 are marked ~. \
    See crates/crypto/ABLATIONS.md for what each no-op does and what has no modern equivalent."
)]
pub struct BreakdownArgs {
    /// Confirm that the embedded server and client run with TLS stages replaced by no-ops
    /// (insecure; both stay on loopback).
    #[arg(long)]
    pub insecure_ablation: bool,

    /// The request pattern.
    #[arg(long, default_value = "new-conn", value_name = "WORKLOAD")]
    pub workload: BreakdownWorkload,

    /// With --workload reuse: the share of connections resumed, in percent.
    #[arg(long, default_value_t = 50.0, value_name = "PERCENT")]
    pub reuse: f64,

    /// Response body size in bytes.
    #[arg(long, default_value_t = 4096, value_name = "BYTES")]
    pub file_size: u64,

    /// TLS version: 1.2 or 1.3.
    #[arg(long, default_value = "1.3", value_name = "VERSION")]
    pub tls: String,

    /// Certificate key type.
    #[arg(long, default_value = "ecdsa-p256", value_name = "TYPE")]
    pub key: String,

    /// Short cells, two rounds at least and a 40 s cap: a smoke test, not a converged table.
    #[arg(long)]
    pub quick: bool,

    /// Measurement time per cell (default 1s, or 0.5s with --quick).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cell: Option<Duration>,

    /// The fewest rounds (runs per configuration) before the stopping rule may stop
    /// (default 3, or 2 with --quick).
    #[arg(long, value_name = "N")]
    pub repeats: Option<usize>,

    /// Keep adding rounds until every stage's 95 % interval is within ±2 points of the
    /// baseline, or until this much time has passed (default 5m, or 40s with --quick).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_time: Option<Duration>,

    /// The target 95 % half-width of every stage's share, in points of the baseline.
    #[arg(long, default_value_t = 2.0, value_name = "POINTS")]
    pub target_ci: f64,

    /// Concurrent clients per cell.
    #[arg(short = 'c', long, default_value_t = 8, value_name = "CLIENTS")]
    pub clients: usize,

    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `tlslab lab`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  tlslab lab --quick\n\n\
    Starts an embedded server on loopback pinned to one CPU and drives it from another, for: \
    plain HTTP, TLS full, TLS resumed and TLS keep-alive, each for TLS 1.2 and 1.3 with ECDSA \
    P-256 and RSA-2048. Prints requests/s (client-observed) and server CPU per request \
    (server-observed) for each row, and the ratios full/plain, resumed/full, keep-alive/full.")]
pub struct LabArgs {
    /// Short cells: finishes within about 15 s instead of about 90 s.
    #[arg(long)]
    pub quick: bool,

    /// Measurement time per cell (default 4.5s, or 0.7s with --quick).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cell: Option<Duration>,

    /// Concurrent clients per cell.
    #[arg(short = 'c', long, default_value_t = 8, value_name = "CLIENTS")]
    pub clients: usize,

    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Run every cell across a packet-level WAN path (needs root; see `tlslab path`): the server
    /// in one network namespace, the load in another, e.g. delay=25ms,rate=10mbit,loss=1%
    /// (keys delay, jitter, rate, trace, queue, loss, ge, each with an optional up./down. prefix)
    /// [default: loopback].
    #[arg(long, value_name = "SPEC")]
    pub path: Option<String>,
}

/// The most engine or worker threads `--threads` takes: more threads than
/// this are a mistake (a client count given as threads), not a machine.
pub const MAX_THREADS: usize = 1024;

/// Parses `--threads N`: 1 to [`MAX_THREADS`] (the one place the bound is
/// checked, for every subcommand with --threads).
pub fn parse_threads(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of threads"))?;
    match n {
        0 => Err("give at least 1 thread".into()),
        n if n > MAX_THREADS => Err(format!(
            "{n} threads is more than the {MAX_THREADS} tlslab runs; give about one per CPU \
             (more clients are -c, not threads)"
        )),
        n => Ok(n),
    }
}

/// Like [`parse_threads`], where 0 means one thread per CPU (`dispatch`).
pub fn parse_threads_or_auto(s: &str) -> Result<usize, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    parse_threads(s)
}

/// Parses `10s`, `500ms`, `2m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration ({e}); write it like 10s, 500ms or 2m"))
}

/// A duration, or `off` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationOrOff(pub Option<Duration>);

/// Like [`parse_duration`], and `off` means none.
pub fn parse_duration_or_off(s: &str) -> Result<DurationOrOff, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(DurationOrOff(None));
    }
    parse_duration(s).map(|d| DurationOrOff(Some(d)))
}

/// Like [`parse_duration`], and `inf` means no limit.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    if s.eq_ignore_ascii_case("inf") || s.eq_ignore_ascii_case("infinite") {
        return Ok(Duration::MAX);
    }
    parse_duration(s)
}
