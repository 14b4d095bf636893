//! `tlslab dispatch`: its flags and the wiring to `tlslab-dispatch`.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use tlslab_dispatch::health::TlsCheck;
use tlslab_dispatch::{Backend, BadInputAction, Config, Dispatcher, HealthCheck, Policy};

use crate::config::Usage;

/// `--policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// By the session the ClientHello resumes (TLS 1.2 ID, TLS 1.2 ticket key name, TLS 1.3 PSK key name); else least-conn.
    Session,
    /// Each node in turn (blind).
    RoundRobin,
    /// The node with the fewest open connections (blind).
    LeastConn,
    /// A random node (blind).
    Random,
    /// A hash of the client IP (breaks behind NAT and proxies).
    SourceIp,
}

/// `--bad-input`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BadInputArg {
    /// Forward the bytes, untouched, to the least-loaded node.
    Forward,
    /// Close the connection.
    Close,
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
    /// here: the first 4 bytes of SHA-256(TAG)). Repeat per node.
    #[arg(long = "backend", required = true, value_name = "ADDR[=PREFIX,…]")]
    pub backends: Vec<String>,
    /// Routing policy.
    #[arg(long, value_enum, default_value = "session")]
    pub policy: PolicyArg,
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
    /// (nginx stream's proxy_timeout default).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10m")]
    pub idle_timeout: Duration,
    /// What to do with non-TLS bytes or a malformed ClientHello (a client that stalls mid-hello
    /// is always closed after --hello-timeout).
    #[arg(long, value_enum, default_value = "forward")]
    pub bad_input: BadInputArg,
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
    #[arg(long, default_value_t = 1, value_parser = crate::args::parse_threads_or_auto)]
    pub threads: usize,
}

/// Validates the flags into an engine configuration.
pub fn config(a: &DispatchArgs) -> Result<Config, Usage> {
    let backends = a
        .backends
        .iter()
        .map(|b| {
            b.parse::<Backend>()
                .map_err(|e| Usage(format!("--backend: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let max_sessions = NonZeroUsize::new(a.max_sessions)
        .ok_or_else(|| Usage("--max-sessions must be at least 1".into()))?;
    if a.session_timeout < Duration::from_secs(1) {
        return Err(Usage("--session-timeout must be at least 1s".into()));
    }
    if a.health_check != HealthArg::Tls && (a.health_cacert.is_some() || a.health_sni.is_some()) {
        return Err(Usage(
            "--health-cacert and --health-sni need --health-check tls".into(),
        ));
    }
    if a.hello_timeout.is_zero()
        || a.idle_timeout.is_zero()
        || a.health_interval.is_zero()
        || a.connect_timeout.is_zero()
    {
        return Err(Usage(
            "--hello-timeout, --idle-timeout, --health-interval and --connect-timeout must be positive"
                .into(),
        ));
    }
    Ok(Config {
        listen: a.listen,
        backends,
        policy: match a.policy {
            PolicyArg::Session => Policy::Session,
            PolicyArg::RoundRobin => Policy::RoundRobin,
            PolicyArg::LeastConn => Policy::LeastConn,
            PolicyArg::Random => Policy::Random,
            PolicyArg::SourceIp => Policy::SourceIp,
        },
        session_timeout: a.session_timeout,
        max_sessions,
        hello_timeout: a.hello_timeout,
        idle_timeout: a.idle_timeout,
        bad_input: match a.bad_input {
            BadInputArg::Forward => BadInputAction::Forward,
            BadInputArg::Close => BadInputAction::Close,
        },
        send_proxy_v2: a.send_proxy_v2,
        health_check: match a.health_check {
            HealthArg::Tcp => HealthCheck::Tcp,
            HealthArg::Tls => HealthCheck::Tls(
                TlsCheck::new(a.health_cacert.as_deref(), a.health_sni.as_deref())
                    .map_err(Usage)?,
            ),
            HealthArg::Off => HealthCheck::Off,
        },
        health_interval: a.health_interval,
        connect_timeout: a.connect_timeout,
        metrics: a.metrics,
    })
}

/// Runs `tlslab dispatch` until SIGINT/SIGTERM.
pub fn run(a: DispatchArgs) -> anyhow::Result<ExitCode> {
    let cfg = config(&a)?;
    let mut rt = if a.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if a.threads > 1 {
        rt.worker_threads(a.threads);
    }
    let rt = rt.enable_all().build().context("starting the runtime")?;
    let d = rt
        .block_on(Dispatcher::bind(cfg))
        .context("starting the dispatcher")?;
    println!("tlslab dispatch: listen {}", d.local_addr()?);
    if let Some(m) = d.metrics_addr() {
        println!("tlslab dispatch: metrics http://{m}/metrics");
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    // The signal wait blocks its own thread; the runtime (current-thread by
    // default) runs on this one.
    std::thread::Builder::new()
        .name("tlslab-dispatch-signal".into())
        .spawn(move || {
            let _ = tlslab_server::wait_for_signal();
            let _ = tx.send(true);
        })
        .context("starting the signal thread")?;
    rt.block_on(d.run(rx));
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(ExitCode::SUCCESS)
}
