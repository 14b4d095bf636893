//! `tlslab probe`: its flags (clap) and the wiring to `tlslab-probe`.
//! Kept in its own file so the shared args.rs/main.rs change by one line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use tlslab_probe::{ProbeConfig, Schedule, Store};

use crate::config::usage;

/// `tlslab probe`.
#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  tlslab probe https://example.com/ --interval 10m --jitter 1m --db probe.sqlite\n  \
    tlslab probe report --db probe.sqlite --since 2026-11-01\n  \
    tlslab probe https://example.com/ --db postgres://probe@127.0.0.1/probe\n  \
    tlslab probe exporter --listen 127.0.0.1:9115\n\n\
    Each round probes every target once, concurrently, one connection at a time per target: \
    DNS, TCP connect, a full handshake and a GET, then a new connection offering that session \
    (a resumed handshake, accepted or not) and a GET. Each round is committed to the database \
    in one transaction; SIGTERM or Ctrl-C finishes the current round and exits."
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

    /// Give up on a phase (DNS, connect, handshake, GET) after this long.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// `tlslab probe URL...`.
#[derive(Debug, Args)]
pub struct ProbeRunArgs {
    /// Target URLs, https:// only (https://host[:port]/path); an http:// URL is a usage error.
    #[arg(value_name = "URL", required_unless_present = "targets")]
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

fn probe_config(a: &ProbeTlsArgs) -> anyhow::Result<ProbeConfig> {
    use tlslab_load::{LoadConfig, Trust};
    let mut cfg = LoadConfig::new(Vec::new());
    cfg.versions = tlslab_crypto::provider::parse_versions(&a.tls).map_err(usage)?;
    cfg.trust = match (&a.cacert, a.insecure) {
        (Some(_), true) => {
            return Err(usage(
                "--cacert and --insecure contradict each other; drop one",
            ));
        }
        (Some(path), false) => {
            tlslab_crypto::pki::load_roots(path).map_err(usage)?;
            Trust::CaFile(path.clone())
        }
        (None, true) => {
            eprintln!(
                "tlslab: WARNING: --insecure: server certificates are NOT verified; \
                 timings are valid, the connection is not authenticated"
            );
            Trust::Insecure
        }
        (None, false) => Trust::WebPki,
    };
    cfg.sni.clone_from(&a.sni);
    ProbeConfig::from_load(&cfg, a.timeout).map_err(usage)
}

fn targets(a: &ProbeRunArgs) -> anyhow::Result<Vec<String>> {
    let mut out = a.urls.clone();
    if let Some(path) = &a.targets {
        let text = tlslab_workload::input::read_capped_to_string(
            path,
            tlslab_workload::input::MAX_CONFIG_FILE,
        )
        .map_err(|e| usage(format!("--targets {}: {e}", path.display())))?;
        out.extend(
            text.lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
    }
    if out.is_empty() {
        return Err(usage("no targets: give URLs or a non-empty --targets FILE"));
    }
    for t in &out {
        tlslab_probe::parse_target(t).map_err(usage)?;
    }
    Ok(out)
}

/// A malformed postgres:// URL is a usage error, found before connecting.
fn check_db(db: &str) -> anyhow::Result<()> {
    if tlslab_probe::postgres::is_url(db) {
        tlslab_probe::postgres::check_url(db).map_err(usage)?;
    }
    Ok(())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the probe's runtime")
}

/// Runs `tlslab probe ...`.
pub fn run(a: ProbeArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        Some(ProbeCommand::Report(r)) => report(&r),
        Some(ProbeCommand::Exporter(e)) => exporter(&e),
        None => rounds(&a.run),
    }
}

fn rounds(a: &ProbeRunArgs) -> anyhow::Result<ExitCode> {
    let targets = targets(a)?;
    if a.interval.is_zero() {
        return Err(usage("--interval must be more than 0"));
    }
    if a.rounds == Some(0) {
        return Err(usage("--rounds must be at least 1"));
    }
    let cfg = probe_config(&a.tls)?;
    check_db(&a.db)?;
    let mut store = tlslab_probe::open_store(&a.db, true)?;
    let schedule = Schedule {
        interval: a.interval,
        jitter: a.jitter,
        rounds: a.rounds,
    };
    eprintln!(
        "tlslab probe: {} target(s) every {} into {}",
        targets.len(),
        humantime::format_duration(a.interval),
        a.db
    );
    let n = runtime()?
        .block_on(tlslab_probe::run(
            &cfg,
            &targets,
            &schedule,
            &mut store,
            |id, samples| {
                let errors = samples.iter().filter(|s| s.error_kind.is_some()).count();
                println!(
                    "round {id} committed: {} sample(s), {errors} error(s)",
                    samples.len()
                );
                for s in samples {
                    let f = |v: Option<i64>| {
                        v.map_or("-".to_string(), |us| format!("{:.2}", us as f64 / 1000.0))
                    };
                    let err = match (&s.error_phase, &s.error_kind) {
                        (Some(p), Some(k)) => format!("  error {p}:{k}"),
                        _ => String::new(),
                    };
                    println!(
                        "  {}  tcp {} ms  full {} ms  resumed {} ms ({})  get {} ms{}  {}{err}",
                        s.target,
                        f(s.connect_us),
                        f(s.tls_full_us),
                        f(s.tls_resumed_us),
                        match s.resumption_accepted {
                            Some(true) => "accepted",
                            Some(false) => "refused",
                            None => "-",
                        },
                        f(s.get_us),
                        s.body_bytes.map(|b| format!(" {b} B")).unwrap_or_default(),
                        s.version
                            .as_deref()
                            .map(|v| format!("TLS {v}"))
                            .unwrap_or_default(),
                    );
                }
            },
        ))
        .map_err(|e| match e {
            tlslab_probe::Error::Store(q @ tlslab_probe::StoreError::Queued { .. }) => {
                anyhow::anyhow!("{q}; the probe is stopping, so the waiting rounds are lost")
            }
            e => e.into(),
        })?;
    eprintln!("tlslab probe: {n} round(s) committed to {}", a.db);
    Ok(ExitCode::SUCCESS)
}

/// Parses `--since`/`--until`: RFC 3339 (a bare date is midnight UTC).
fn time_ms(flag: &str, v: &str) -> anyhow::Result<i64> {
    let full = if v.len() == 10 {
        format!("{v}T00:00:00Z")
    } else {
        v.to_string()
    };
    let t = humantime::parse_rfc3339_weak(&full).map_err(|e| {
        usage(format!(
            "{flag} {v}: {e}; give an RFC 3339 UTC time such as 2026-11-01 or 2026-11-01T12:00:00Z"
        ))
    })?;
    let d = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| usage(format!("{flag} {v}: before 1970")))?;
    Ok(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn report(a: &ProbeReportArgs) -> anyhow::Result<ExitCode> {
    let since = a
        .since
        .as_deref()
        .map(|v| time_ms("--since", v))
        .transpose()?;
    let until = a
        .until
        .as_deref()
        .map(|v| time_ms("--until", v))
        .transpose()?;
    if let (Some(s), Some(u)) = (since, until)
        && s >= u
    {
        return Err(usage("--since must be before --until"));
    }
    check_db(&a.db)?;
    let store = tlslab_probe::open_store(&a.db, false).map_err(|e| match e {
        // A missing SQLite file is a usage error; a file that is not a
        // probe database (bad content) and an unreachable server are
        // runtime failures, as in `probe` itself.
        tlslab_probe::StoreError::Open { ref path, .. }
            if !path.contains("://") && !std::path::Path::new(&a.db).exists() =>
        {
            usage(e)
        }
        e => anyhow::Error::from(e),
    })?;
    let samples = store.samples(since, until)?;
    let r = tlslab_probe::report::build(&samples, since, until);
    if let Some(dir) = &a.svg {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--svg {}: cannot create the directory", dir.display()))?;
        for t in &r.targets {
            let Some(svg) = tlslab_probe::svg::target_svg(t) else {
                eprintln!("{}: no handshake to chart", t.target);
                continue;
            };
            let path = dir.join(tlslab_probe::svg::file_name(&t.target));
            std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else if a.csv {
        print!("{}", r.csv()?);
    } else {
        print!("{}", r.text());
    }
    Ok(ExitCode::SUCCESS)
}

fn exporter(a: &ProbeExporterArgs) -> anyhow::Result<ExitCode> {
    if a.max_connections == 0 || a.max_connections > 65_536 {
        return Err(usage("--max-connections must be 1 to 65536"));
    }
    if a.request_timeout.is_zero() {
        return Err(usage("--request-timeout must be more than 0"));
    }
    let limits = tlslab_probe::exporter::Limits {
        max_connections: a.max_connections,
        request_timeout: a.request_timeout,
    };
    let cfg = probe_config(&a.tls)?;
    let rt = runtime()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(a.listen)
            .await
            .with_context(|| format!("binding --listen {}", a.listen))?;
        println!(
            "exporter listening on http://{}/probe?target=URL",
            listener.local_addr()?
        );
        tokio::select! {
            r = tlslab_probe::exporter::serve_with(listener, cfg, limits) => r.context("serving the exporter")?,
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
