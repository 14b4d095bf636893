//! The admission-control flags of `tlslab serve` (`--admission`,
//! `--shed-with`, `--max-handshakes-in-flight`, `--admission-queue-target`)
//! and their validation into [`tlslab_server::AdmissionSettings`]; and
//! `tlslab overload`, the experiment.

use std::time::Duration;

use clap::Args;
use tlslab_server::{AdmissionMode, AdmissionSettings, ShedWith};

use crate::args::parse_duration;

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
}

/// The settings `a` asks for; errors are usage errors.
pub fn admission(a: &crate::args::ServeArgs) -> anyhow::Result<AdmissionSettings> {
    let x = &a.admission;
    let mode = match (x.admission, x.max_handshakes_in_flight) {
        (AdmissionMode::Off, Some(_)) => AdmissionMode::Static,
        (m, _) => m,
    };
    let s = AdmissionSettings {
        mode,
        shed_with: x.shed_with,
        max_handshakes_in_flight: x.max_handshakes_in_flight,
        queue_delay_target: x.admission_queue_target,
        ..AdmissionSettings::default()
    };
    s.validate().map_err(crate::config::usage)?;
    Ok(s)
}

/// `tlslab overload`.
#[derive(Clone, Debug, Args)]
#[command(
    after_help = "Example:\n  tlslab overload --quick --json overload.json\n\n\
    The server (1 worker thread, RSA-4096 unless --key, tickets on) and the client run in this \
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
    #[arg(long, default_value = "rsa4096", value_name = "TYPE")]
    pub key: String,

    /// After a failed request (a timeout, a shed or refused connection) a client waits a
    /// uniform random time below min(B x 2^(n-1), 32 B) before its next attempt, n being its
    /// failures in a row (exponential backoff with full jitter, as client libraries do). `0`
    /// tries again at once, as httperf does: then every shed connection comes straight back.
    #[arg(long, default_value = "100ms", value_name = "B", value_parser = parse_duration)]
    pub retry_backoff: Duration,

    /// Write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

/// Runs `tlslab overload`.
pub fn run(a: &OverloadArgs) -> anyhow::Result<std::process::ExitCode> {
    use anyhow::Context as _;
    use tlslab_experiment::overload::{self, OverloadPlan};
    let placement = tlslab_experiment::pin::Placement::split();
    let mut plan = if a.quick {
        OverloadPlan::quick(placement)
    } else {
        OverloadPlan::standard(placement)
    };
    if let Some(w) = a.window {
        if w.is_zero() {
            return Err(crate::config::usage("--window must be positive"));
        }
        plan.window = w;
    }
    if let Some(l) = &a.loads {
        if l.is_empty() || l.iter().any(|m| !(m.is_finite() && *m > 0.0)) {
            return Err(crate::config::usage(
                "--loads takes positive multiples of the capacity, e.g. 0.5,1,3",
            ));
        }
        plan.multipliers.clone_from(l);
    }
    if let Some(t) = a.timeout {
        if t.is_zero() {
            return Err(crate::config::usage("--timeout must be positive"));
        }
        for arm in &mut plan.arms {
            if arm.timeout.is_some() {
                arm.timeout = Some(t);
            }
        }
    }
    plan.retry_backoff = a.retry_backoff;
    plan.key = a
        .key
        .parse()
        .map_err(|e| crate::config::usage(format!("--key: {e}")))?;
    if a.requests == 0 {
        return Err(crate::config::usage("--requests must be at least 1"));
    }
    plan.requests = a.requests;
    if a.robust_for.as_secs() == 0 {
        return Err(crate::config::usage("--robust-for must be at least 1s"));
    }
    plan.robustness = a.robustness;
    plan.robust_high = a.robust_for;
    if let Some(c) = a.capacity {
        if !(c.is_finite() && c > 0.0) {
            return Err(crate::config::usage(
                "--capacity takes a positive rate of user sessions/s, e.g. 300",
            ));
        }
        plan.capacity = Some(c);
    }
    let (mut tlslab, mut nginx) = (false, false);
    for s in &a.servers {
        match s.trim() {
            "tlslab" => tlslab = true,
            "nginx" => nginx = true,
            other => {
                return Err(crate::config::usage(format!(
                    "--servers: unknown server {other:?}; use tlslab, nginx or tlslab,nginx"
                )));
            }
        }
    }
    if nginx {
        if a.nginx_limit_conn == 0 {
            return Err(crate::config::usage(
                "--nginx-limit-conn must be at least 1",
            ));
        }
        let bin = match &a.nginx_bin {
            Some(b) => b.clone(),
            None => tlslab_experiment::nginx::find_nginx().ok_or_else(|| {
                crate::config::usage(
                    "--servers nginx: nginx is not on PATH nor in /usr/sbin; install it \
                     (apt-get install nginx) or pass --nginx-bin PATH",
                )
            })?,
        };
        let base = plan.arms[0];
        plan.arms.push(overload::Arm {
            server: overload::Peer::Nginx,
            ..base
        });
        plan.nginx = Some(overload::NginxPlan {
            bin,
            limit_conn: a.nginx_limit_conn,
            keep_dir: a.nginx_dir.clone(),
        });
    }
    if !tlslab {
        plan.arms.retain(|x| x.server != overload::Peer::Tlslab);
    }
    if plan.arms.is_empty() {
        return Err(crate::config::usage(
            "--servers: name at least one of tlslab, nginx",
        ));
    }
    let report = overload::run(&plan, |line| eprintln!("{line}")).context("running overload")?;
    print!("{}", report.render());
    if let Some(path) = &a.json {
        let body = serde_json::to_vec_pretty(&report)?;
        std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}
