//! The flags of the experiments: `tlslab lab`, `breakdown`, `overload`,
//! `cluster` and `experiment`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use tlslab_crypto::pki::KeyType;
use tlslab_experiment::cluster::{DispatcherKind, Mechanism, NodeKind, Sharing};
use tlslab_experiment::study::PathChoice;

use crate::parse::{parse_duration, parse_key_type, parse_path_spec};

/// `tlslab lab`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  tlslab lab --quick\n\n\
    Starts an embedded server on loopback pinned to one CPU and drives it from another, for: \
    plain HTTP, TLS full, TLS resumed and TLS keep-alive, each for TLS 1.2 and 1.3 with ECDSA \
    P-256 and RSA-2048; then TLS 1.3 0-RTT, and HTTP/3 over QUIC full, resumed, 0-RTT and \
    keep-alive against the matching TCP+TLS 1.3 cells (ECDSA P-256, same group). Prints \
    requests/s (client-observed) and server CPU per request (server-observed) for each row, \
    the ratios full/plain, resumed/full, keep-alive/full, and QUIC/TCP. With --explain, a second \
    table splits each cell's CPU per request into crypto, kernel time and the rest, with \
    syscalls, writes and allocations per request (sudo tlslab lab --quick --explain).")]
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
    /// (keys delay, jitter, reorder, rate, trace, queue, loss, ge, each with an optional up./down.
    /// prefix; seed, cc) [default: loopback]. pcap=FILE captures every packet the path forwards
    /// or drops, both directions, to a pcapng file, as `tlslab path --pcap` (pcap-size=100MB
    /// caps each file, pcap-files=N keeps ring files): one capture of the whole run, whose
    /// cells cross the one path one after another; the report names its files and counts.
    #[arg(long, value_name = "SPEC", value_parser = parse_path_spec)]
    pub path: Option<tlslab_path::PathConfig>,

    /// After the table, split each cell's CPU per request, for the server (its worker's threads
    /// over the whole run, per request served) and the client (the load engine's threads over
    /// the window, per request completed), into: crypto (the metering provider's time), kernel
    /// (system CPU time), and the remainder (user time outside the meter); with syscalls and
    /// writes (write, writev, sendto, sendmsg, sendmmsg) per request from per-thread
    /// perf_event_open tracepoint counters, perf's task clock as a check on the CPU total, and
    /// allocations and bytes allocated per request from a counting allocator. Syscall counts
    /// need root (or kernel.perf_event_paranoid=-1) and tracefs mounted; otherwise they are
    /// printed as unavailable with the fix. In --json: `costs` per cell and `explain`. Costs a
    /// few % of throughput while on (docs/lab.md).
    #[arg(long)]
    pub explain: bool,
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
    interval contains 0 are marked ~.\n\n\
    With --h3 (--transport h3) the cells are HTTP/3 requests over QUIC to the server's QUIC \
    listener (TLS 1.3): the rows are sig, kx, hash, rng, QUIC's packet protection, header \
    protection and key schedule (each a no-op on both sides), the TLS protocol (time inside \
    rustls's QUIC handshake calls with every crypto stage a no-op) and the QUIC transport + HTTP/3 \
    remainder. --transport both runs TCP, then QUIC, and sets the tables side by side with the \
    stages that make up the difference. \
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
    #[arg(long, alias = "key", default_value = "ecdsa-p256", value_name = "TYPE", value_parser = parse_key_type)]
    pub key_type: KeyType,

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

    /// Over what: tcp (HTTP/1.1 over TLS), h3 (HTTP/3 over QUIC, TLS 1.3) or both (TCP, then
    /// QUIC, and the two tables side by side).
    #[arg(
        long,
        default_value = "tcp",
        value_name = "TRANSPORT",
        conflicts_with = "h3"
    )]
    pub transport: Transport,

    /// Short for --transport h3.
    #[arg(long)]
    pub h3: bool,

    /// Write the results as JSON to FILE (with --transport both: `tcp`, `quic` and
    /// `difference`).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `--transport` of `tlslab breakdown` and `tlslab overload`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// HTTP/1.1 over TLS over TCP.
    Tcp,
    /// HTTP/3 over QUIC.
    #[value(alias = "quic")]
    H3,
    /// TCP, then QUIC, side by side.
    Both,
}

/// `tlslab overload`.
#[derive(Clone, Debug, Args)]
#[command(
    after_help = "Examples:\n  tlslab overload --quick --json overload.json\n  \
    tlslab overload --quick --transport both --json overload.json\n\n\
    The server (1 worker thread, RSA-4096 unless --key-type, tickets on) and the client run in this \
    process, pinned to the first and second CPU this process may use. Capacity is found first by \
    doubling the arrival rate of users until the sessions completed per second in the second half \
    of a step fall below 85 % of the offered rate; each point then runs on a fresh server. \
    Figures: goodput and throughput client-observed, handshakes and sheds server-observed, each \
    over the point's window."
)]
pub struct OverloadArgs {
    /// A short run: 4 s points at 1x and 3x, admission off and session, 1 s client timeout.
    #[arg(long)]
    pub quick: bool,

    /// Measurement window of each point (default 20s, or 4s with --quick).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub window: Option<Duration>,

    /// Multiples of the capacity to offer, comma separated (default 0.5,1,2,3,4; --quick 1,3).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub loads: Option<Vec<f64>>,

    /// The client timeout of every arm that has a finite one (default 10s; 1s with --quick).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,

    /// Requests per user session (K).
    #[arg(long, default_value_t = 5, value_name = "K")]
    pub requests: u32,

    /// Also run the robustness runs: with admission off and session, 3x capacity for
    /// --robust-for (10 s client timeout, retry, 80 % reuse), then 0.5x for 15 s; records
    /// the most RSS, whether the server still answers, and how long after the drop goodput
    /// is back to the offered load and arriving users are served again.
    #[arg(long)]
    pub robustness: bool,

    /// The overload phase of the robustness runs.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub robust_for: Duration,

    /// The servers to run: `tlslab` (the embedded server's arms), `nginx` (nginx with
    /// limit_conn, the unprotected reference: the first arm's client behaviour, at the same
    /// loads), or both, comma separated.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "tlslab"
    )]
    pub servers: Vec<String>,

    /// The nginx binary (default: `nginx` on PATH, or /usr/sbin/nginx).
    #[arg(long, value_name = "PATH")]
    pub nginx_bin: Option<std::path::PathBuf>,

    /// nginx's `limit_conn` (zone keyed on $server_name: the most connections with a request
    /// in progress, server-wide). The default equals the `static` arm's handshakes in flight.
    #[arg(long, value_name = "N", default_value_t = tlslab_experiment::overload::NGINX_LIMIT_CONN)]
    pub nginx_limit_conn: usize,

    /// Keep each nginx point's prefix (nginx.conf, access.log, error.log) in DIR/point-<arm>-<load>
    /// (default: a temporary directory, removed).
    #[arg(long, value_name = "DIR")]
    pub nginx_dir: Option<std::path::PathBuf>,

    /// Skip the capacity sweep and take this many user sessions/s as the capacity.
    #[arg(long, value_name = "USERS_PER_S")]
    pub capacity: Option<f64>,

    /// The server certificate's key type (seed 002 used RSA): rsa2048, rsa3072, rsa4096,
    /// ecdsa-p256, ecdsa-p384, ed25519. A dearer key gives the server more of each session's
    /// TLS work than the client, which shares it otherwise (see `cli busy` in the output).
    #[arg(long, alias = "key", default_value = "rsa4096", value_name = "TYPE", value_parser = parse_key_type)]
    pub key_type: KeyType,

    /// After a failed request (a timeout, a shed or refused connection) a client waits a
    /// uniform random time below min(B x 2^(n-1), 32 B) before its next attempt, n being its
    /// failures in a row (exponential backoff with full jitter, as client libraries do). `0`
    /// tries again at once, as httperf does: then every shed connection comes straight back.
    #[arg(long, default_value = "100ms", value_name = "B", value_parser = parse_duration)]
    pub retry_backoff: Duration,
    /// The share of a user's requests after its first that offer its TLS session, in percent
    /// (drawn per request), for every arm that reuses (the standard plan's no-reuse arm stays
    /// at 0). Default 80: a fifth of a session's later connections are then full handshakes,
    /// which no server can tell from a new user's; seed 002 compared all against none.
    #[arg(long, value_name = "PCT")]
    pub reuse: Option<f64>,

    /// Seed 002 over HTTP/3: the server's QUIC listener, and user sessions
    /// whose every request is a new QUIC connection (from one of a few UDP
    /// sockets the users share, resuming with the session's store). Admission decides
    /// on the first Initial: `session` admits an attempt offering a PSK the
    /// server can resume and sheds new full handshakes beyond its budget
    /// (refused); `static` is quinn's connection limit. The embedded
    /// server only.
    #[arg(long)]
    pub h3: bool,

    /// Over what: tcp (HTTPS over TCP), h3 (the same as --h3) or both (the plan over TCP, then
    /// over QUIC, each with its own capacity sweep; the text sets the two side by side, and
    /// the JSON is the TCP report with the QUIC one under `quic`).
    #[arg(
        long,
        default_value = "tcp",
        value_name = "TRANSPORT",
        conflicts_with = "h3"
    )]
    pub transport: Transport,

    /// Write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

/// Flags of `tlslab cluster`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    tlslab cluster --quick\n  \
    tlslab cluster --json cluster.json\n  \
    tlslab cluster --reuse 80 --mechanism tls12-id,tls12-ticket,tls13-ticket \
    --sharing none,redis-cache,shared-ticket-keys\n  \
    tlslab cluster --nodes nginx --dispatcher haproxy --reuse 0,80\n  \
    tlslab cluster --h3 --quick\n\n\
    N nodes (each its own session cache and ticket keys) behind a dispatcher, and a closed-loop \
    load with one request per connection, all on 127.0.0.1. Every node is pinned to the first CPU \
    this process may use; the load, the dispatcher and redis-server share the second. Every figure \
    of a cell is over the cell's load run: throughput client-observed; cluster CPU per request \
    (summed over the nodes) and achieved resumption server-observed; routing efficiency \
    dispatcher-observed (tlslab dispatch), or the nodes' resumed handshakes over the client's \
    offers (HAProxy). With --h3 the cluster runs over QUIC: HTTP/3 nodes with QUIC-LB connection \
    IDs behind tlslab dispatch --udp, a load opening each connection from a new source port, \
    TLS 1.3 tickets; the arms are blind, cid, session and blind with ticket keys shared through \
    Redis. Exit 1 if a peer (nginx, haproxy, redis-server) an arm needs is missing.")]
pub struct ClusterArgs {
    /// A short smoke run: reuse 0,80 and 3 s cells (unless --reuse / --cell say otherwise).
    #[arg(long)]
    pub quick: bool,

    /// The cluster over QUIC: every node also serves HTTP/3 (`serve --h3 --quic-lb`, a QUIC-LB
    /// server ID each), the dispatcher is `dispatch --udp`, the load `load --h3
    /// --quic-new-socket`; TLS 1.3 tickets. Default arms: --policy blind,cid,session --sharing
    /// none,shared-ticket-keys (ticket keys shared through a redis-server this command starts).
    #[arg(long)]
    pub h3: bool,

    /// What the nodes are.
    #[arg(long, value_enum, default_value = "tlslab")]
    pub nodes: NodeKind,

    /// How many nodes.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub node_count: usize,

    /// What the dispatcher is.
    #[arg(long, value_enum, default_value = "tlslab")]
    pub dispatcher: DispatcherKind,

    /// Requested reuse in percent, comma separated: the share of connections the load resumes
    /// (it re-offers after a refusal, steering toward it) [default: 0,20,40,60,80,100; --quick: 0,80].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub reuse: Option<Vec<u32>>,

    /// Dispatch policies, each with per-node state: round-robin, least-conn, random, source-ip,
    /// session; with --h3: blind, source-ip, cid, session [default: round-robin,session; --h3:
    /// blind,cid,session].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub policy: Option<Vec<tlslab_dispatch::Policy>>,

    /// Resumption mechanisms: tls12-id (session IDs, tickets off), tls12-ticket, tls13-ticket
    /// (stateless tickets sealed with the node's ticket keys) [default: all three; --h3:
    /// tls13-ticket, the only one].
    #[arg(long, value_name = "LIST", value_delimiter = ',',
          value_parser = |s: &str| s.parse::<Mechanism>())]
    pub mechanism: Option<Vec<Mechanism>>,

    /// Sharing arms, each with blind dispatch (round-robin; --h3: the 4-tuple hash): none
    /// (per-node state: the blind cell), redis-cache (a redis-server this command starts; nodes
    /// use `memory:N+redis://…`), shared-ticket-keys (one ticket key file for every node; with
    /// --h3 keys shared through a redis-server, as `serve --ticket-keys redis://…`)
    /// [default: none; --h3: none,shared-ticket-keys].
    #[arg(long, value_name = "LIST", value_delimiter = ',',
          value_parser = |s: &str| s.parse::<Sharing>())]
    pub sharing: Option<Vec<Sharing>>,

    /// Length of each cell's load run [default: 10s; --quick: 3s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cell: Option<Duration>,

    /// Concurrent closed-loop clients.
    #[arg(long, short = 'c', default_value_t = 16, value_name = "N")]
    pub clients: usize,

    /// The certificate's key type (seed 000's servers used RSA): rsa2048, rsa3072, rsa4096,
    /// ecdsa-p256, ecdsa-p384, ed25519.
    #[arg(long, alias = "key", default_value = "rsa2048", value_name = "TYPE", value_parser = parse_key_type)]
    pub key_type: KeyType,

    /// Key-exchange groups of the nodes and the load, comma separated, in preference order
    /// (x25519, secp256r1, secp384r1, X25519MLKEM768) [default: each side's own: tlslab
    /// X25519MLKEM768 first, nginx OpenSSL's X25519 first]. TLS 1.3 resumption repeats the key
    /// exchange, so the group sets what a resumed handshake costs against a full one.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub groups: Option<Vec<String>>,

    /// Response body size in bytes (the load requests /bytes/N).
    #[arg(long, default_value_t = 1024, value_name = "BYTES")]
    pub body: usize,

    /// redis-cache arm: bound on each node's pre-handshake Redis GET (serve's `--redis-timeout`);
    /// a GET over it is a full handshake, counted.
    #[arg(long, default_value = "5ms", value_name = "DURATION", value_parser = parse_duration)]
    pub redis_timeout: Duration,

    /// Run every cell across a packet-level WAN path (needs root; see `tlslab path`): the
    /// dispatcher, the nodes (nginx and HAProxy too) and redis-server in one network namespace,
    /// the load in another, so only client ↔ dispatcher traffic crosses it; e.g.
    /// delay=25ms,rate=10mbit,loss=1% (keys as in `lab --path`) [default: loopback].
    /// pcap=FILE captures every packet the path forwards or drops, both directions, to a pcapng
    /// file, as `tlslab path --pcap` (pcap-size=100MB, pcap-files=N): one capture of the whole
    /// run, whose cells cross the one path one after another; the report names its files and
    /// counts.
    #[arg(long, value_name = "SPEC", value_parser = parse_path_spec)]
    pub path: Option<tlslab_path::PathConfig>,

    /// Write the report as JSON to FILE (schema: docs/schema.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `tlslab experiment`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  tlslab experiment list\n  \
    tlslab experiment run seed000-reuse --quick --out results/reuse\n  \
    tlslab experiment run --config matrix.toml --out results/mine\n  \
    tlslab experiment run --resume results/mine --config matrix.toml\n\n\
    Each cell runs an embedded server on loopback pinned to one CPU and the load engine pinned \
    to another; repeats are interleaved (every point once per round). The results document \
    (docs/schema.md: results.json) holds every raw cell with an equivalent command \
    line, the environment, and for a built-in study its paper's figures against today's. It is \
    rewritten atomically after every cell, so an interrupted run continues with --resume DIR.")]
pub struct ExperimentArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ExperimentCommand,
}

/// The `experiment` subcommands.
#[derive(Debug, Subcommand)]
pub enum ExperimentCommand {
    /// List the built-in studies, their engines and whether each can run in this build.
    List,
    /// Run a built-in study (NAME) or a declared matrix (--config FILE.toml).
    Run(RunArgs),
}

/// `tlslab experiment run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A built-in study (`tlslab experiment list`).
    #[arg(
        value_name = "NAME",
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    pub name: Option<String>,

    /// A declared matrix: engine, factors and levels, repeats, cell duration, pinning
    /// (docs/experiment.md shows the format).
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,

    /// The short version of a built-in study (fewer levels, shorter cells, one repeat).
    #[arg(long)]
    pub quick: bool,

    /// Write the results document to DIR/results.json (default: ./experiment-NAME). DIR must
    /// not hold one already.
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    pub out: Option<PathBuf>,

    /// Continue the interrupted run whose document is DIR/results.json: cells already in it
    /// are skipped. Give the same NAME (and --quick) or --config as the first run.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,

    /// Confirm that a study replacing TLS stages with no-ops (seed001-breakdown) may run its
    /// embedded server and client that way (insecure; both stay on loopback).
    #[arg(long)]
    pub insecure_ablation: bool,

    /// No progress bar (it is drawn only when stderr is a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,

    /// The path the round-trip cells of seed003-table2 and seed004-handshake cross: relay
    /// (`tlslab relay` on loopback: no root, TCP only, delays each flight; its TCP connect is
    /// local and it shows no slow start), packet (`tlslab path`: root or CAP_NET_ADMIN; the
    /// kernel's own TCP with a real connect, slow start and loss recovery), or both (each cell
    /// over each, side by side in the results). (`--path` is its old spelling: elsewhere
    /// `--path` takes a path spec such as delay=25ms.)
    #[arg(
        long = "path-kind",
        alias = "path",
        value_name = "relay|packet|both",
        default_value = "relay",
        value_parser = parse_path_choice
    )]
    pub path: PathChoice,

    /// Capture every packet the packet-level path forwards or drops, both directions, as
    /// `tlslab path --pcap` does: one pcapng file per path run, DIR/CELL.pcapng (the cell's id,
    /// e.g. rtt25ms-tls13-packet-r1; quic-vs-tcp's time-to-first-byte cells share one path per
    /// RTT: DIR/ttfb-rttNms.pcapng), each capped at 100MB. For the studies that cross the path:
    /// seed003-table2 and seed004-handshake with --path-kind packet or both, and quic-vs-tcp (root).
    /// Each capture's files and packet counts are printed as its path stops; seed003-table2's
    /// and seed004-handshake's are also in the document's per-cell packet-path reports (`pcap`).
    #[arg(long, value_name = "DIR")]
    pub pcap: Option<PathBuf>,
}

fn parse_path_choice(s: &str) -> Result<PathChoice, String> {
    s.parse()
}
