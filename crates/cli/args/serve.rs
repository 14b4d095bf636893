//! The flags of `tlslab serve` (admission control included) and `tlslab certs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tlslab_crypto::pki::KeyType;
use tlslab_server::{AdmissionMode, ShedWith};

use crate::parse::{
    DurationOrOff, parse_duration, parse_duration_or_off, parse_key_type, parse_threads,
};

/// `tlslab certs`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  tlslab certs --out certs --key-type ecdsa-p256 --san localhost,127.0.0.1\n\n\
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
    #[arg(long, alias = "key", default_value = "ecdsa-p256", value_name = "TYPE", value_parser = parse_key_type)]
    pub key_type: KeyType,

    /// Put an intermediate CA of this key type (under a root of the same type)
    /// between the root and the server certificate: server.pem is then the leaf
    /// and the intermediate, and ca.pem the root (not sent). Mixed chains are
    /// allowed, e.g. --key-type mldsa44 --intermediate-key ecdsa-p256.
    /// Default: no intermediate (server.pem is the leaf and the CA).
    #[arg(long, value_name = "TYPE", value_parser = parse_key_type)]
    pub intermediate_key: Option<KeyType>,

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
    Without --cert/--key-file it generates an ephemeral CA and certificate and prints where ca.pem is.\n\
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

    /// PEM certificate chain, leaf first (needs --key-file).
    #[arg(long, value_name = "FILE", requires = "key_files")]
    pub cert: Option<PathBuf>,

    /// PEM private key of --cert (needs --cert).
    #[arg(long, value_name = "FILE", requires = "cert", group = "key_files")]
    pub key_file: Option<PathBuf>,

    /// The old spelling of --key-file (elsewhere --key is a key type): hidden,
    /// and warned about.
    #[arg(
        long,
        value_name = "FILE",
        requires = "cert",
        group = "key_files",
        hide = true
    )]
    pub key: Option<PathBuf>,

    /// Key type of the ephemeral certificate generated when --cert is not given:
    /// rsa2048, rsa3072, rsa4096, ecdsa-p256, ecdsa-p384, ed25519, mldsa44, mldsa65
    /// or mldsa87 (ML-DSA: TLS 1.3 only).
    #[arg(
        long,
        default_value = "ecdsa-p256",
        value_name = "TYPE",
        conflicts_with = "cert",
        value_parser = parse_key_type
    )]
    pub key_type: KeyType,

    /// Give the ephemeral chain an intermediate CA of this key type (see
    /// `tlslab certs --intermediate-key`); mixed chains are allowed.
    /// Default: the leaf and a CA of --key-type.
    #[arg(long, value_name = "TYPE", conflicts_with = "cert", value_parser = parse_key_type)]
    pub intermediate_key_type: Option<KeyType>,

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
    /// time after the handshake (on --http: after accept, HTTP version detection included;
    /// on --h3: no request stream, whatever PINGs arrive); nginx's client_header_timeout.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Close a connection idle this long after a response before its next request header is
    /// complete (HTTP/2 and HTTP/3: with no stream open; QUIC PINGs do not count); nginx's
    /// keepalive_timeout.
    #[arg(long, default_value = "75s", value_name = "DURATION", value_parser = parse_duration)]
    pub keepalive_timeout: Duration,

    /// Send a PING on an HTTP/2 connection that has read nothing for this long, and close it if
    /// no answer comes within 20 s (a dead peer). `off`: no PINGs.
    #[arg(long, default_value = "60s", value_name = "DURATION|off", value_parser = parse_duration_or_off)]
    pub h2_ping_interval: DurationOrOff,

    /// Maximum simultaneously open connections (HTTPS and --http together). At the limit a new
    /// connection makes the longest-idle one close and takes its slot (a socket on the HTTPS
    /// port that has sent no byte counts as idle since accept); with none idle it waits.
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
    /// cache, kdf, for --h3 also quic-packet, quic-header, quic-keys, or skeleton /
    /// quic-skeleton / minimal (see crates/crypto/ABLATIONS.md). INSECURE: for
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

    /// Append every connection's TLS secrets (HTTPS and, with --h3, QUIC) to FILE in the
    /// NSS key log format, created 0600, so Wireshark/tshark can decrypt a capture
    /// (docs/debugging.md). Without it, the SSLKEYLOGFILE environment variable is honoured
    /// as curl honours it. The file holds secrets: a WARNING is printed.
    #[arg(long, value_name = "FILE")]
    pub keylog: Option<PathBuf>,

    #[command(flatten)]
    pub admission: AdmissionArgs,

    #[command(flatten)]
    pub h3: crate::args::h3::ServeH3Args,
}

/// Admission control of new TLS handshakes under overload.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Admission control (overload)")]
pub struct AdmissionArgs {
    /// Admission control of new TLS handshakes: `off`; `static` (at most
    /// --max-handshakes-in-flight handshakes of any kind at once, the rest shed);
    /// `session` (resumptions of a session this node holds are always admitted; new full
    /// handshakes are admitted at a rate an AIMD controller sets from the queueing delay of new
    /// connections (how long their ClientHello waited in the kernel before the server read it,
    /// from the kernel's receive timestamp), the server's CPU and the full handshakes in
    /// flight, and shed, before any public-key work, beyond it). Decisions read the ClientHello ahead of rustls.
    #[arg(long, default_value = "off", value_name = "off|static|session",
          value_parser = |s: &str| s.parse::<AdmissionMode>())]
    pub admission: AdmissionMode,

    /// How a shed connection is refused: `close` (after reading the ClientHello), `alert`
    /// (a fatal internal_error TLS alert, then close), or `503` (the handshake completes and
    /// each request gets 503 with retry-after: 1; this pays for the handshake).
    #[arg(long, default_value = "close", value_name = "close|alert|503",
          value_parser = |s: &str| s.parse::<ShedWith>())]
    pub shed_with: ShedWith,

    /// `static`: the most TLS handshakes in flight (required; given alone it selects
    /// `static`). `session`: the full handshakes in flight that count as overload (default
    /// 128 per worker thread).
    #[arg(long, value_name = "N")]
    pub max_handshakes_in_flight: Option<usize>,

    /// `session`: the mean queueing delay of new connections (how long their ClientHello
    /// waited in the kernel, accept queue included) above which a busy server (its workers at
    /// least 80 % busy) is overloaded.
    #[arg(long, default_value = "10ms", value_name = "DURATION", value_parser = parse_duration)]
    pub admission_queue_target: Duration,

    /// `session`: admit new full handshakes (TCP and, with --h3 under the session policy,
    /// QUIC together) at this fixed rate, e.g. 50/s (0: none; a burst of a tenth of a
    /// second's worth, at least 1, is available from the start), instead of the controller's
    /// limit; the controller still runs and reports. For experiments and tests.
    #[arg(long, value_name = "N/s", value_parser = parse_rate)]
    pub admission_fixed_limit: Option<f64>,
}

/// A rate of at least 0 per second: `50`, `50/s`, `0.5/s`.
fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let n = t.strip_suffix("/s").unwrap_or(t).trim();
    match n.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        _ => Err(format!(
            "'{s}' is not a rate; give a number of at least 0 per second, e.g. 50/s"
        )),
    }
}
