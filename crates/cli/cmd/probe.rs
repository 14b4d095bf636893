//! `tlslab probe`: its flags into a probe configuration, and the rounds,
//! the report and the exporter of `tlslab-probe`.

use std::process::ExitCode;

use anyhow::Context;
use tlslab_experiment::probe_path::PathServer;
use tlslab_probe::{ProbeConfig, Schedule, Store};

use crate::args::probe::{
    ProbeArgs, ProbeCommand, ProbeExporterArgs, ProbeReportArgs, ProbeRunArgs, ProbeTlsArgs,
};
use crate::usage::usage;

/// The probe's TLS settings; `roots`: trust these (an embedded server's
/// CA) rather than `--cacert`/`--insecure`/the webpki roots.
fn probe_config(
    a: &ProbeTlsArgs,
    roots: Option<&rustls::RootCertStore>,
) -> anyhow::Result<ProbeConfig> {
    use tlslab_load::LoadConfig;
    let mut cfg = LoadConfig::new(Vec::new());
    cfg.versions = tlslab_crypto::provider::parse_versions(&a.tls).map_err(usage)?;
    cfg.trust = match roots {
        Some(r) => tlslab_load::Trust::Roots(r.clone()),
        None => crate::flags::trust(a.cacert.as_ref(), a.insecure)?,
    };
    crate::flags::warn_insecure(a.insecure);
    cfg.sni.clone_from(&a.sni);
    cfg.key_log = crate::output::key_log(a.keylog.as_ref());
    crate::output::warn_key_log(cfg.key_log.as_deref());
    ProbeConfig::from_load(&cfg, a.timeout)
        .and_then(|c| c.over(a.transports(), &cfg))
        .map_err(usage)
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

/// With `--path` the probe has one target, the embedded server: URLs and
/// the flags about whom to trust are usage errors, and so is a PostgreSQL
/// `--db`, which the path's client namespace cannot reach.
fn check_path_alone(a: &ProbeRunArgs) -> anyhow::Result<()> {
    if !a.urls.is_empty() || a.targets.is_some() {
        return Err(usage(
            "--path probes tlslab's embedded server on the path's server end, not URLs; to probe \
             another server across a path, run both under `tlslab path`, e.g. tlslab path \
             --delay 25ms --ready-port 8443 -- SERVER ::: tlslab probe \
             https://10.201.0.1:8443/ --rounds 10",
        ));
    }
    for (given, flag) in [
        (a.tls.cacert.is_some(), "--cacert"),
        (a.tls.insecure, "--insecure"),
        (a.tls.sni.is_some(), "--sni"),
    ] {
        if given {
            return Err(usage(format!(
                "{flag} does not go with --path: the probe trusts the embedded server's own CA \
                 and sends its address as the name"
            )));
        }
    }
    if tlslab_probe::postgres::is_url(&a.db) {
        return Err(usage(
            "--path needs a SQLite --db: the probe runs in the path's client namespace, which \
             reaches nothing outside the path (a postgres:// server included)",
        ));
    }
    Ok(())
}

fn rounds(a: &ProbeRunArgs) -> anyhow::Result<ExitCode> {
    let targets = match a.path {
        Some(_) => check_path_alone(a).map(|()| Vec::new())?,
        None => targets(a)?,
    };
    if a.interval.is_zero() {
        return Err(usage("--interval must be more than 0"));
    }
    if a.rounds == Some(0) {
        return Err(usage("--rounds must be at least 1"));
    }
    // Checks the flags before the path starts (a usage error does no work).
    let cfg = probe_config(&a.tls, None)?;
    check_db(&a.db)?;
    // Without the privilege a path needs, say so before creating the database.
    if a.path.is_some() && !tlslab_path::privileged() {
        return Err(tlslab_path::Error::NotPermitted.into());
    }
    let mut store = tlslab_probe::open_store(&a.db, true)?;
    let schedule = Schedule {
        interval: a.interval,
        jitter: a.jitter,
        rounds: a.rounds,
    };
    let Some(spec) = &a.path else {
        return probe_rounds(&cfg, &targets, &schedule, &mut store, &a.db);
    };
    let h3 = a.tls.transports() != tlslab_probe::Transports::Tcp;
    let served = PathServer::start_with(spec, tlslab_crypto::pki::KeyType::EcdsaP256, h3)
        .context("starting the path and its embedded server")?;
    eprintln!("tlslab probe: {}", served.describe());
    let cfg = probe_config(&a.tls, Some(served.roots()))?;
    let targets = [served.url()];
    // The probe's runtime is built on the client's end: its sockets live
    // in the path's client namespace.
    let code = served.on_client(|| probe_rounds(&cfg, &targets, &schedule, &mut store, &a.db));
    let report = served.stop().context("stopping the path")?;
    let code = code?;
    println!("{report}");
    Ok(code)
}

/// Rounds of `targets` into `store` (`db` names it) until `schedule` ends.
fn probe_rounds(
    cfg: &ProbeConfig,
    targets: &[String],
    schedule: &Schedule,
    store: &mut impl Store,
    db: &str,
) -> anyhow::Result<ExitCode> {
    eprintln!(
        "tlslab probe: {} target(s) every {} into {db}",
        targets.len(),
        humantime::format_duration(schedule.interval),
    );
    let n = runtime()?
        .block_on(tlslab_probe::run(
            cfg,
            targets,
            schedule,
            store,
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
                    let resumption = match s.resumption_accepted {
                        Some(true) => "accepted",
                        Some(false) => "refused",
                        None => "-",
                    };
                    let err = match (&s.error_phase, &s.error_kind) {
                        (Some(p), Some(k)) => format!("  error {p}:{k}"),
                        _ => String::new(),
                    };
                    if s.transport == tlslab_probe::Transport::H3 {
                        println!(
                            "  {}  h3  quic full {} ms  1-RTT GET {} ms  quic resumed {} ms ({})  \
                             0-RTT GET first byte {} ms ({}){}{err}",
                            s.target,
                            f(s.tls_full_us),
                            f(s.get_us),
                            f(s.tls_resumed_us),
                            resumption,
                            f(s.zero_rtt_ttfb_us),
                            match s.early_data_accepted {
                                Some(true) => "early data accepted",
                                Some(false) => "early data rejected",
                                None => "no early data",
                            },
                            s.body_bytes.map(|b| format!(" {b} B")).unwrap_or_default(),
                        );
                        continue;
                    }
                    println!(
                        "  {}  tcp {} ms  full {} ms  resumed {} ms ({})  get {} ms{}  {}{err}",
                        s.target,
                        f(s.connect_us),
                        f(s.tls_full_us),
                        f(s.tls_resumed_us),
                        resumption,
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
    eprintln!("tlslab probe: {n} round(s) committed to {db}");
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
            let path = dir.join(tlslab_probe::svg::file_name(&t.target, t.transport));
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
    let cfg = probe_config(&a.tls, None)?;
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
