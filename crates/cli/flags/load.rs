//! `tlslab load`'s flags into a [`LoadPlan`]: the engine configuration (no
//! I/O but reading the small files flags name), and the access log of a
//! replay, read and sharded by [`LoadPlan::prepare`]. `load`, `sweep` (one
//! plan per point) and `fileset` (the log parser) share it.

use std::path::PathBuf;
use std::time::Duration;

use tlslab_crypto::provider::{self, Algorithms};
use tlslab_load::shard::Shard;
use tlslab_load::{LoadConfig, Target, Trust, Workload};
use tlslab_workload::replay::{Pacing, PathMode, RateLimit};

use crate::args::load::LoadArgs;
use crate::parse::threads_or_cpus;
use crate::usage::{Usage, bail, usage};

/// A `load` run as its flags describe it: the engine configuration, and
/// the access log still to read when it is a replay.
pub struct LoadPlan {
    /// The engine configuration (without its replay).
    pub cfg: LoadConfig,
    replay: Option<ReplayFlags>,
}

/// The replay flags, checked; the log is read by [`LoadPlan::prepare`].
struct ReplayFlags {
    log: PathBuf,
    strict: bool,
    exclude_clients: Option<PathBuf>,
    rate: Option<RateLimit>,
    mode: PathMode,
    window: usize,
    pacing: Pacing,
}

impl LoadPlan {
    /// Reads, filters, shards and plans the access log of a replay, then
    /// runs the load crate's checks of the whole configuration: all before
    /// any load, and every failure of the checks a usage error.
    pub fn prepare(self, shard: Option<&Shard>) -> anyhow::Result<LoadConfig> {
        let mut cfg = self.cfg;
        if let Some(r) = self.replay {
            cfg.replay = Some(read_replay(r, shard)?);
        }
        cfg.validate().map_err(usage)?;
        Ok(cfg)
    }
}

/// `load --source-ip RANGE [--clients-per-ip N]`.
fn source_ip(a: &LoadArgs) -> Result<Option<tlslab_load::source::SourceAddrs>, Usage> {
    match &a.source_ip {
        None => Ok(None),
        Some(r) => tlslab_load::source::SourceAddrs::parse(r, a.clients_per_ip.unwrap_or(1))
            .map(Some)
            .map_err(Usage),
    }
}

/// Turns `tlslab load` flags into a plan. The load crate checks the
/// bounds it owns (clients, threads, rate, HTTP/2, ...) in
/// [`LoadPlan::prepare`]; this checks what only the flags know.
pub fn config(a: &LoadArgs) -> anyhow::Result<LoadPlan> {
    let mut targets = Vec::with_capacity(a.urls.len());
    for u in &a.urls {
        targets.push(Target::parse(u).map_err(usage)?);
    }
    let reuse = match a.reuse[..] {
        [r] => r,
        _ => {
            return bail(
                "--reuse takes one percentage for `load`; a list (0,50,100) is for `tlslab sweep`",
            );
        }
    };
    let duration = match (a.duration, a.requests) {
        // A replay ends with its log.
        (None, None) if a.workload == Workload::Replay => None,
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    let versions = provider::parse_versions(&a.tls).map_err(usage)?;
    let algorithms = Algorithms {
        suites: a.suites.clone(),
        groups: a.groups.clone(),
        random_prefix: None,
    };
    provider::build(&versions, &algorithms).map_err(usage)?;

    let any_tls = targets.iter().any(|t| t.is_tls());
    let trust = crate::flags::trust(a.cacert.as_ref(), a.insecure)?;
    let ablation = crate::flags::ablation(a.ablate.as_deref(), a.insecure_ablation)?;
    if !ablation.is_empty() && !matches!(trust, Trust::CaFile(_)) {
        return bail(format!(
            "--ablate {ablation} runs only against a lab server whose CA you give; \
             add --cacert FILE (the ca.pem of `tlslab certs`) instead of --insecure"
        ));
    }
    if a.early_data && !versions.contains(&provider::Version::Tls13) {
        return bail("--early-data needs TLS 1.3; add 1.3 to --tls");
    }
    if !any_tls && (reuse > 0.0 || a.early_data) {
        return bail("--reuse and --early-data need an https:// URL");
    }
    let workload = a.workload;
    if workload != Workload::Urls && (targets.len() != 1 || targets[0].path != "/") {
        return bail(format!(
            "--workload {} draws the paths itself; give one base URL without a path, \
             such as https://127.0.0.1:8443",
            workload.name()
        ));
    }
    let ecommerce = match (&a.workload_config, workload) {
        (None, _) => None,
        (Some(path), Workload::Ecommerce) => Some(
            tlslab_workload::ecommerce::Config::load(path)
                .map_err(|e| usage(format!("--workload-config: {e}")))?,
        ),
        (Some(_), _) => return bail("--workload-config needs --workload ecommerce"),
    };
    let replay = replay_flags(a, workload)?;
    let think_time: tlslab_load::ThinkTime = a
        .think_time
        .parse()
        .map_err(|e| usage(format!("--think-time: {e}")))?;
    let open_loop = a.rate.map(|rate| tlslab_load::OpenLoop {
        rate,
        arrivals: a.arrivals,
        max_in_flight: a.max_in_flight,
    });
    let http2 = a.h2.then(|| {
        let m = a.max_concurrent_streams;
        if a.requests_per_conn == 1 && m > 1 {
            eprintln!(
                "tlslab: note: --requests-per-conn 1 gives every HTTP/2 connection one stream, so -m {m} \
                 has no effect; give --requests-per-conn 0 (or K > 1) to keep connections as h2load does"
            );
        }
        tlslab_load::Http2 {
            max_concurrent_streams: m,
        }
    });
    if let Some(r) = a.max_error_rate
        && !(0.0..=100.0).contains(&r)
    {
        return bail(format!(
            "--max-error-rate {r}: give a percentage from 0 to 100, e.g. 1"
        ));
    }
    if let Some(m) = a.mss
        && !(88..=65495).contains(&m)
    {
        return bail(format!(
            "--mss {m}: give a segment size from 88 to 65495 bytes, e.g. 1460"
        ));
    }
    let cfg = LoadConfig {
        targets,
        clients: a.clients,
        threads: threads_or_cpus(a.threads),
        pin_cpus: None,
        duration,
        requests: a.requests,
        warmup: a.warmup,
        requests_per_conn: a.requests_per_conn,
        http2,
        // Set by `--h3` (LoadH3Args::run), which runs the QUIC engine.
        http3: None,
        reuse: reuse / 100.0,
        resume_with: a.resume_with,
        versions,
        algorithms,
        sni: a.sni.clone(),
        trust,
        early_data: a.early_data,
        timeout: a.timeout,
        source_ip: source_ip(a)?,
        log: a.log.clone(),
        progress: false,
        workload,
        seed: a.seed,
        think_time,
        retry_on_failure: a.retry_on_failure,
        open_loop,
        ecommerce,
        replay: None,
        ablation,
        start_at: None,
        retry_backoff: a.retry_backoff,
        cert_compression: tlslab_crypto::compress::parse_list(&a.cert_compression)
            .map_err(|e| usage(format!("--cert-compression: {e}")))?,
        mss: a.mss,
        key_log: crate::output::key_log(a.keylog.as_ref()),
        // An agent (--out, which --hdr-log conflicts with) writes its own
        // into its directory, for `merge --hdr-log`.
        hdr_log: a
            .hdr_log
            .clone()
            .or_else(|| {
                a.dist
                    .out
                    .as_ref()
                    .map(|d| d.join(tlslab_report::distributed::INTERVALS_FILE))
            })
            .map(|path| tlslab_load::HdrLog {
                path,
                interval: a.hdr_interval,
            }),
    };
    if a.hdr_interval.is_zero() {
        return bail("--hdr-interval 0: give an interval of at least 1ms, e.g. 1s");
    }
    Ok(LoadPlan { cfg, replay })
}

/// Checks the flags of `--workload replay`; the log is read later.
fn replay_flags(a: &LoadArgs, workload: Workload) -> anyhow::Result<Option<ReplayFlags>> {
    let Some(log) = &a.access_log else {
        if workload == Workload::Replay {
            return bail("--workload replay needs --access-log FILE, the access log to replay");
        }
        return Ok(None);
    };
    if workload != Workload::Replay {
        return bail("--access-log needs --workload replay");
    }
    let rate = a
        .client_rate_limit
        .as_deref()
        .map(str::parse::<RateLimit>)
        .transpose()
        .map_err(|e| usage(format!("--client-rate-limit: {e}")))?;
    let pacing = match a.speed {
        None => Pacing::AsFastAsPossible,
        Some(speed) if speed.is_finite() && speed > 0.0 => Pacing::Timed { speed },
        Some(speed) => {
            return bail(format!(
                "--speed {speed}: give a positive factor, e.g. 1 (as logged) or 10"
            ));
        }
    };
    if a.window == 0 {
        return bail("--window must be at least 1 (seed 001 used 10000)");
    }
    Ok(Some(ReplayFlags {
        log: log.clone(),
        strict: a.strict,
        exclude_clients: a.exclude_clients.clone(),
        rate,
        mode: a.replay_paths,
        window: a.window,
        pacing,
    }))
}

/// Reads, filters, shards and plans the access log of a replay.
fn read_replay(r: ReplayFlags, shard: Option<&Shard>) -> anyhow::Result<tlslab_load::Replay> {
    use tlslab_workload::replay::{ReplayPlan, filter};
    let (entries, parsed) = parse_log(&r.log, r.strict)?;
    if let Some(w) = parsed.warning(&r.log.display().to_string()) {
        eprintln!("warning: {w}");
    }
    let exclude = match &r.exclude_clients {
        Some(path) => filter::read_client_list(path).map_err(usage)?,
        None => Default::default(),
    };
    let (entries, filtered) = filter::filter(entries, &exclude, r.rate);
    if entries.is_empty() {
        return bail(
            "the filters dropped every request of the log; relax --exclude-clients or --client-rate-limit",
        );
    }
    let entries = match shard {
        None => entries,
        Some(s) => {
            let mine: Vec<_> = entries
                .into_iter()
                .filter(|e| s.owns_client(&e.client.to_string()))
                .collect();
            if mine.is_empty() {
                return bail(format!(
                    "--shard {}: no client of the access log hashes to this agent; use fewer agents",
                    s.0
                ));
            }
            mine
        }
    };
    Ok(tlslab_load::Replay {
        plan: std::sync::Arc::new(ReplayPlan::new(&entries, r.mode)),
        window: r.window,
        pacing: r.pacing,
        skipped_lines: parsed.skipped_count,
        filtered,
    })
}

/// Parses an access log (`load` and `fileset`): a file that cannot be read
/// is a usage error; a line with no end, or under `strict` a malformed one,
/// a runtime failure (exit 1); a log with no parsed line a usage error.
pub fn parse_log(
    log: &std::path::Path,
    strict: bool,
) -> anyhow::Result<(
    Vec<tlslab_workload::replay::LogEntry>,
    tlslab_workload::replay::parse::ParseReport,
)> {
    let (entries, parsed) = match tlslab_workload::replay::parse::parse_file_with(log, strict) {
        Ok(r) => r,
        Err(e @ tlslab_workload::Error::Line { .. }) => {
            return Err(anyhow::anyhow!("--access-log {e}"));
        }
        Err(e) => return Err(usage(e)),
    };
    if parsed.parsed == 0 {
        return bail(format!(
            "--access-log {}: no line parsed as Common or Combined Log Format ({} skipped); \
             give an Apache or nginx access log",
            log.display(),
            parsed.skipped_count
        ));
    }
    Ok((entries, parsed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tlslab_crypto::pki::KeyType;

    fn parse(argv: &[&str]) -> crate::args::Cli {
        crate::args::Cli::try_parse_from(argv).unwrap()
    }

    fn load(a: &LoadArgs) -> anyhow::Result<LoadConfig> {
        config(a)?.prepare(None)
    }
    #[test]
    fn load_flags_validate() {
        let cli = parse(&["tlslab", "load", "https://127.0.0.1:1/", "--reuse", "150"]);
        let crate::args::Command::Load(a) = cli.command else {
            panic!()
        };
        assert!(load(&a).unwrap_err().to_string().contains("--reuse"));

        let cli = parse(&["tlslab", "load", "ftp://x/"]);
        let crate::args::Command::Load(a) = cli.command else {
            panic!()
        };
        assert!(load(&a).unwrap_err().downcast_ref::<Usage>().is_some());

        let cli = parse(&[
            "tlslab",
            "load",
            "https://127.0.0.1:1/",
            "--reuse",
            "50",
            "-n",
            "10",
        ]);
        let crate::args::Command::Load(a) = cli.command else {
            panic!()
        };
        let cfg = load(&a).unwrap();
        assert_eq!(cfg.reuse, 0.5);
        assert_eq!(cfg.duration, None);
        assert_eq!(cfg.requests, Some(10));
    }

    #[test]
    fn load_ablation_needs_confirmation_and_the_ca() {
        let load_args = |argv: &[&str]| {
            let mut v = vec!["tlslab", "load", "https://127.0.0.1:1/", "-n", "1"];
            v.extend_from_slice(argv);
            match parse(&v).command {
                crate::args::Command::Load(a) => a,
                _ => unreachable!(),
            }
        };
        let err = load(&load_args(&["--ablate", "cipher"])).unwrap_err();
        assert!(err.downcast_ref::<Usage>().is_some());
        assert!(err.to_string().contains("--insecure-ablation"), "{err}");
        let err = load(&load_args(&[
            "--ablate",
            "cipher",
            "--insecure-ablation",
            "--insecure",
        ]))
        .unwrap_err();
        assert!(err.downcast_ref::<Usage>().is_some());
        assert!(err.to_string().contains("--cacert"), "{err}");
        let err = load(&load_args(&["--ablate", "bogus", "--insecure-ablation"])).unwrap_err();
        assert!(err.downcast_ref::<Usage>().is_some(), "{err}");

        let dir = tempfile::tempdir().unwrap();
        tlslab_crypto::pki::generate(KeyType::EcdsaP256, &[])
            .unwrap()
            .write_to(dir.path())
            .unwrap();
        let ca = dir.path().join(tlslab_crypto::pki::CA_CERT_FILE);
        let ca = ca.to_str().unwrap();
        let cfg = load(&load_args(&[
            "--ablate",
            "skeleton",
            "--insecure-ablation",
            "--cacert",
            ca,
        ]))
        .unwrap();
        assert_eq!(cfg.ablation, tlslab_crypto::meter::AblationSet::skeleton());
        let cfg = load(&load_args(&["--cacert", ca])).unwrap();
        assert!(cfg.ablation.is_empty());
    }
}
