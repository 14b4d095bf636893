//! The flags of the tools: `tlslab fileset`, `relay`, `dispatch`, `path`,
//! `report` and `plan`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tlslab_crypto::pki::KeyType;
use tlslab_dispatch::{BadInputAction, Policy};

use crate::parse::{parse_duration, parse_key_type, parse_threads_or_auto};

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

/// `--health-check`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HealthArg {
    /// A TCP connect to the node.
    Tcp,
    /// A full TLS handshake with the node: a liveness check. The certificate is not verified
    /// unless --health-cacert is given (the handshake signature always is).
    Tls,
    /// No checks (failed connects still fail over and mark the node down).
    Off,
}

/// Flags of `tlslab dispatch`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example (three nodes, session-aware, metrics on 9100):\n  \
    tlslab dispatch --listen 127.0.0.1:8443 --backend 127.0.0.1:9001 --backend 127.0.0.1:9002 \
    --backend 127.0.0.1:9003 --metrics 127.0.0.1:9100\n\n\
    It prints `tlslab dispatch: listen ADDR` (and `metrics URL`) on stdout once bound, and runs until SIGINT/SIGTERM."
)]
pub struct DispatchArgs {
    /// Address clients connect to. Non-loopback addresses are allowed: the dispatcher never decrypts.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// A node: `IP:PORT`, optionally `IP:PORT=PREFIX[,PREFIX…]` naming prefixes of the session
    /// IDs, tickets and PSK identities it issues, so their first use routes to it. A PREFIX is
    /// hex (its ticket key names, e.g. those of its `serve --ticket-keys` file, or the
    /// `node-tag HEX` that `serve --node-tag TAG` prints) or `tag:TAG` (the same prefix computed
    /// here: the first 4 bytes of SHA-256(TAG)). With --udp, `sid:HEX` is the node's QUIC-LB
    /// server ID (its `serve --quic-lb server-id=HEX`). Repeat per node.
    #[arg(long = "backend", required = true, value_name = "ADDR[=PREFIX,…]")]
    pub backends: Vec<String>,
    /// Routing policy.
    #[arg(long, value_enum, default_value = "session")]
    pub policy: Policy,
    /// How long a learned session mapping lives; set it to the nodes' session cache / ticket lifetime.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "300s")]
    pub session_timeout: Duration,
    /// Most session mappings kept (least recently used dropped first).
    #[arg(long, default_value_t = 1_000_000)]
    pub max_sessions: usize,
    /// How long a client may take to send its complete ClientHello; a client that has not
    /// finished by then (a slowloris) is closed and counted as bad input (kind timeout).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub hello_timeout: Duration,
    /// Close a proxied connection on which no byte moved, in either direction, for this long
    /// [default: 10m, nginx stream's proxy_timeout; with --udp 30s, QUIC's usual idle timeout:
    /// a flow with no datagram either way].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// Balance QUIC over UDP instead of TLS over TCP: --listen and each --backend are UDP
    /// addresses (`serve --h3` nodes). Policies: `blind` (the 4-tuple hash, per datagram),
    /// `source-ip`, `cid` (the QUIC-LB server ID in each connection ID; needs --quic-lb and
    /// `--backend ADDR=sid:HEX`) and `session` (QUIC-LB CIDs first, then each new connection
    /// by the PSK identity of its ClientHello, read from its decrypted Initials and
    /// reassembled across datagrams; else by load). Packets with no routable CID follow the
    /// 4-tuple's last node, else the 4-tuple hash (docs/dispatch.md).
    #[arg(long)]
    pub udp: bool,
    /// With --udp: a QUIC-LB configuration the nodes share
    /// (`server-id-len=N,nonce-len=N,config-id=N[,key=HEX]`, the balancer's side of `serve
    /// --quic-lb`); repeat for configurations being rotated (one per config ID). Each backend
    /// then needs `=sid:HEX`, its server ID.
    #[arg(long, value_name = "CONFIG")]
    pub quic_lb: Vec<String>,
    /// With --udp: most client flows (address and port) tracked at once; at the cap the least
    /// recently active flow is dropped.
    #[arg(long, default_value_t = 100_000)]
    pub max_flows: usize,
    /// What to do with non-TLS bytes or a malformed ClientHello (a client that stalls mid-hello
    /// is always closed after --hello-timeout).
    #[arg(long, value_enum, default_value = "forward")]
    pub bad_input: BadInputAction,
    /// Send a PROXY protocol v2 header to the nodes so they see the client address.
    #[arg(long)]
    pub send_proxy_v2: bool,
    /// Health check of each node.
    #[arg(long, value_enum, default_value = "tcp")]
    pub health_check: HealthArg,
    /// With --health-check tls: verify the nodes' certificates against this CA file (PEM)
    /// instead of accepting any certificate.
    #[arg(long, value_name = "FILE")]
    pub health_cacert: Option<std::path::PathBuf>,
    /// With --health-check tls: the server name to send and verify (default: the node's IP).
    #[arg(long, value_name = "NAME")]
    pub health_sni: Option<String>,
    /// With --health-check tls: append the TLS secrets of the health checks' handshakes to FILE
    /// (NSS key log format, mode 0600; without the flag, SSLKEYLOGFILE is honoured as curl
    /// honours it). They are the only TLS the dispatcher makes: it forwards clients' TLS without
    /// terminating it, so their secrets are in the client's key log (`load --keylog`) or the
    /// node's (`serve --keylog`), not here.
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<std::path::PathBuf>,
    /// Interval between health checks.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    pub health_interval: Duration,
    /// Timeout of a connect to a node (proxying and health checks).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    pub connect_timeout: Duration,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Worker threads, at most 1024 (0 = one per CPU allowed to the process).
    #[arg(long, default_value_t = 1, value_parser = parse_threads_or_auto)]
    pub threads: usize,
}

/// `tlslab path`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    tlslab path --delay 25ms --rate 10mbit --ready-port 8443 -- \\\n      \
    tlslab serve --https 0.0.0.0:8443 --cert c.pem --key-file k.pem ::: \\\n      \
    sh -c 'curl -k https://$TLSLAB_PATH_SERVER:8443/'\n  \
    tlslab path --delay 10ms        (no command: hold the path until Ctrl-C; enter it with\n                                   \
    ip netns exec NAME ..., the names are printed)\n  \
    tlslab path --cleanup           (remove namespaces left by runs that died)\n  \
    tlslab path --delay 25ms --pcap wan.pcapng --pcap-size 100MB --pcap-files 5 -- ...\n\n\
    The server command runs in the server namespace (10.201.0.1), then the client command in \
    the client namespace (10.201.0.2); both see TLSLAB_PATH_SERVER and TLSLAB_PATH_CLIENT. \
    The only link between them is a TUN device in each namespace (MTU 1500) and tlslab's \
    forwarder, so the kernel's own TCP (connect, slow start with initcwnd 10, loss recovery) \
    and UDP run over the emulated path. --delay is one way (RTT = up + down delay). A link \
    is a mahimahi delivery trace: one millisecond timestamp per 1504-byte delivery \
    opportunity, repeating; --rate generates a constant one. Per direction, a packet meets \
    loss, then the link's drop-tail queue, then the delay. When the client exits, the server \
    gets SIGTERM, the path is removed and its counters are printed on stderr. Needs root (or \
    CAP_NET_ADMIN and CAP_SYS_ADMIN); without it, use `tlslab relay` (unprivileged, TCP only, \
    delays whole flights rather than packets). If tlslab path itself is killed (kill -9), both \
    commands get SIGKILL (setpriv --pdeathsig); --cleanup kills whatever is left in the \
    namespaces of dead runs and removes them. Exit status: the client's, or 1.")]
pub struct PathArgs {
    /// One-way delay in each direction (RTT = 2 x this), e.g. 25ms, 500us; not negative.
    // allow_hyphen_values: `--delay -5ms` reaches the parser, which says a
    // delay cannot be negative (clap said "unexpected argument '-5'").
    #[arg(
        long,
        default_value = "0ms",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub delay: String,

    /// Each packet's delay varies uniformly within +/- this, without reordering (see --reorder).
    #[arg(
        long,
        default_value = "0ms",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub jitter: String,

    /// With --jitter: let packets overtake each other (netem's behaviour).
    #[arg(long)]
    pub reorder: bool,

    /// Bottleneck rate in each direction, in tc's units (10mbit, 1gbit, 125kbps) [default: none].
    #[arg(long, value_name = "RATE", conflicts_with_all = ["uplink_trace", "downlink_trace"])]
    pub rate: Option<String>,

    /// The client → server link as a mahimahi trace file (ms timestamps, one per 1504-byte
    /// delivery opportunity).
    #[arg(long, value_name = "FILE")]
    pub uplink_trace: Option<PathBuf>,

    /// The server → client link as a mahimahi trace file.
    #[arg(long, value_name = "FILE")]
    pub downlink_trace: Option<PathBuf>,

    /// The bottleneck's drop-tail queue, in packets (100pkt) or bytes (64kB).
    #[arg(long, default_value = "1000pkt", value_name = "SIZE")]
    pub queue: String,

    /// Random loss in each direction, as 1% or 0.01.
    #[arg(long, default_value = "0%", value_name = "PERCENT")]
    pub loss: String,

    /// Gilbert-Elliott burst loss instead of --loss: p,r[,loss-in-bad[,loss-in-good]]
    /// (e.g. 1%,30%; bad defaults to 100%, good to 0%).
    #[arg(long, value_name = "P,R[,BAD[,GOOD]]", conflicts_with = "loss")]
    pub ge: Option<String>,

    /// Client → server overrides, as key=value pairs: delay=5ms,rate=1mbit,loss=2%,queue=50pkt,
    /// trace=FILE,jitter=1ms,ge=1%/30% (applied after the flags above).
    #[arg(long, value_name = "SPEC")]
    pub up: Option<String>,

    /// Server → client overrides (as --up).
    #[arg(long, value_name = "SPEC")]
    pub down: Option<String>,

    /// TCP congestion control in both namespaces: one of net.ipv4.tcp_allowed_congestion_control
    /// (e.g. reno, bbr) [default: the kernel's].
    #[arg(long, value_name = "NAME")]
    pub cc: Option<String>,

    /// Seed of the loss and jitter draws, so runs repeat.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// Pin the two forwarder threads to these CPUs (comma-separated) [default: not pinned].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,

    /// Start the client only once the server accepts TCP on 10.201.0.1:PORT.
    #[arg(long, value_name = "PORT")]
    pub ready_port: Option<u16>,

    /// How long to wait for --ready-port.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub ready_timeout: Duration,

    /// Also write the forwarder's counters as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Capture every packet the forwarder forwards or drops, both directions, to FILE (pcapng:
    /// interfaces up and down, LINKTYPE_RAW, nanosecond timestamps taken by the forwarder, drops
    /// marked with a comment "tlslab-path dropped: ...").
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,

    /// With --pcap: the cap on each capture file (e.g. 100MB, 1GiB; at least 1MB).
    #[arg(long, value_name = "SIZE", default_value = "100MB", requires = "pcap")]
    pub pcap_size: String,

    /// With --pcap: ring files FILE, FILE.1, ... FILE.(N-1); at --pcap-size the next one is
    /// written (overwriting the oldest), as tcpdump's -C/-W. With 1, the capture stops at the cap.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "pcap")]
    pub pcap_files: u32,

    /// Kill the processes left in, then remove, the namespaces of runs that died (kill -9,
    /// power loss) and exit.
    #[arg(long)]
    pub cleanup: bool,

    /// SERVER_CMD ::: CLIENT_CMD, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `tlslab report`.
#[derive(Clone, Debug, Args)]
#[command(after_help = "Examples:\n  \
    tlslab report RESULTS.json --html report.html --md report.md   (a `tlslab experiment` document)\n  \
    tlslab load https://127.0.0.1:8443/ --cacert certs/ca.pem -d 5s --rate 500 --json r500.json\n  \
    tlslab load https://127.0.0.1:8443/ --cacert certs/ca.pem -d 5s --rate 1000 --json r1000.json\n  \
    tlslab report r500.json r1000.json --html loads.html\n\n\
    Inputs are told apart by their shape: a `tlslab experiment` results document \
    (\"kind\": \"tlslab-experiment\"), a `sweep --json` report, a `load --json` report, or an \
    `overload --json` report (with --transport both: TCP and QUIC side by side); all \
    `load --json` files given together form one document with a cell per file. The HTML page is \
    self-contained (inline SVG charts and CSS, no script, no network fetch) and opens offline. A \
    chart whose data is absent is left out with a note saying why. Every number links to the cell \
    that produced it; the cells are listed in an appendix with their command lines.")]
pub struct ReportArgs {
    /// Results documents, `load --json`, `sweep --json` or `overload --json` files.
    #[arg(required = true, value_name = "FILE")]
    pub inputs: Vec<PathBuf>,

    /// Write the self-contained HTML report to this file.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,

    /// Write the Markdown report (tables and chart data, no charts) to this file.
    #[arg(long, value_name = "OUT.md")]
    pub md: Option<PathBuf>,
}

/// `tlslab plan`.
#[derive(Clone, Debug, Args)]
#[command(after_help = "Examples:\n  \
    tlslab plan --full-us 1200 --resumed-us 90 --request-us 40 --reuse 60 --load 20000\n  \
    tlslab lab --json lab.json && tlslab plan --costs lab.json --tls 1.3 --key-type rsa2048 --load 5000 --latency 5ms\n  \
    tlslab plan --check --key-type rsa2048          (measures the costs, then checks the model)\n\n\
    The model: a connection costs (1-reuse) x full + reuse x resumed + K x request µs of one \
    core's CPU; one core serves 1e6 / that connections/s at 100 % busy. Cores for --load: the \
    fewest that keep every core at or below --utilisation and, with --latency, the M/M/c mean \
    response time (Erlang C, exponential service of the CPU per request) at or below it. The \
    response-time table gives, against utilisation ρ, the M/M/c mean and seed 004's form: the \
    request's CPU + H/(1-ρ), H the handshake CPU per request (seed 004's slide: 'O(300ms) CPU \
    time' per handshake on 2000's servers, a 1024-bit RSA decryption and session-key generation, \
    'adds ~300/(1-ρ) ms to application response time, ρ = server CPU utilization'). Both assume \
    Poisson arrivals and a CPU-bound server; --base-latency adds what does not queue (network, \
    client).\n\n\
    --check runs an embedded server (one worker pinned to the first CPU) and the load engine \
    (pinned to the second), measures the costs unless given, then offers open-loop Poisson load \
    at the rates the model predicts for 50, 70 and 90 % utilisation and prints predicted against \
    measured throughput and p50 latency (target: within 10 % and 25 % at 50 and 70 %).")]
pub struct PlanArgs {
    /// Server CPU of a full handshake, µs of one core (without its request).
    #[arg(long, value_name = "US")]
    pub full_us: Option<f64>,

    /// Server CPU of a resumed handshake, µs (without its request).
    #[arg(long, value_name = "US")]
    pub resumed_us: Option<f64>,

    /// Server CPU of one request on an open connection, µs.
    #[arg(long, value_name = "US")]
    pub request_us: Option<f64>,

    /// Read the costs from a `tlslab lab --json` report or a `tlslab experiment` results
    /// document (cells picked by --tls and --key-type).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["full_us", "resumed_us"])]
    pub costs: Option<PathBuf>,

    /// TLS version the costs are for (and --check's server runs): 1.2 or 1.3.
    #[arg(long, default_value = "1.3", value_name = "VERSION")]
    pub tls: String,

    /// Certificate key the costs are for (and --check's server uses): ecdsa-p256, rsa2048, …
    #[arg(long, alias = "key", default_value = "rsa2048", value_name = "TYPE", value_parser = parse_key_type)]
    pub key_type: KeyType,

    /// Share of connections that resume a session, in percent (0-100).
    #[arg(long, default_value_t = 0.0, value_name = "PERCENT")]
    pub reuse: f64,

    /// Requests per connection (at least 1).
    #[arg(long, default_value_t = 1.0, value_name = "K")]
    pub requests_per_conn: f64,

    /// Target CPU utilisation of each core, in percent (1-99).
    #[arg(
        long,
        visible_alias = "utilization",
        default_value_t = 70.0,
        value_name = "PERCENT"
    )]
    pub utilisation: f64,

    /// Target mean response time (e.g. 5ms); cores are added until M/M/c meets it.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub latency: Option<Duration>,

    /// The load to plan for, requests/s: prints the cores it needs.
    #[arg(long, value_name = "REQ/S")]
    pub load: Option<f64>,

    /// Latency that does not queue at the server (network, client), added to the curves.
    #[arg(long, default_value = "0ms", value_name = "DURATION", value_parser = parse_duration)]
    pub base_latency: Duration,

    /// Measure: run the load at the rates predicted for 50, 70 and 90 % utilisation on an
    /// embedded server and print predicted against measured (one request per connection).
    #[arg(long)]
    pub check: bool,

    /// --check: measurement window of each utilisation point [default: 10s, 4s with --quick].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "check")]
    pub cell: Option<Duration>,

    /// --check: a short run (4 s points, 3 s calibration cells).
    #[arg(long, requires = "check")]
    pub quick: bool,

    /// --check: seed of the arrivals and of the queue simulation.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,

    /// Write the plan (and the check) as JSON to FILE (schema: docs/schema.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}
