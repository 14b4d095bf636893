//! `tlslab report` (HTML and Markdown reports of results documents, `load
//! --json` and `sweep --json` files) and `tlslab plan` (the capacity model,
//! and `--check`, which measures it).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tlslab_report::capacity::{self, Mix, UnitCosts};

use crate::args::parse_duration;
use crate::config::usage;

/// `tlslab report`.
#[derive(Clone, Debug, Args)]
#[command(after_help = "Examples:\n  \
    tlslab report RESULTS.json --html report.html --md report.md   (a `tlslab experiment` document)\n  \
    tlslab load https://127.0.0.1:8443/ --cacert certs/ca.pem -d 5s --rate 500 --json r500.json\n  \
    tlslab load https://127.0.0.1:8443/ --cacert certs/ca.pem -d 5s --rate 1000 --json r1000.json\n  \
    tlslab report r500.json r1000.json --html loads.html\n\n\
    Inputs are told apart by their shape: a `tlslab experiment` results document \
    (\"kind\": \"tlslab-experiment\"), a `sweep --json` report, or a `load --json` report; all \
    `load --json` files given together form one document with a cell per file. The HTML page is \
    self-contained (inline SVG charts and CSS, no script, no network fetch) and opens offline. A \
    chart whose data is absent is left out with a note saying why. Every number links to the cell \
    that produced it; the cells are listed in an appendix with their command lines.")]
pub struct ReportArgs {
    /// Results documents, `load --json` or `sweep --json` files.
    #[arg(required = true, value_name = "FILE")]
    pub inputs: Vec<PathBuf>,

    /// Write the self-contained HTML report to this file.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,

    /// Write the Markdown report (tables and chart data, no charts) to this file.
    #[arg(long, value_name = "OUT.md")]
    pub md: Option<PathBuf>,
}

/// Runs `tlslab report`.
pub fn report(a: &ReportArgs) -> anyhow::Result<ExitCode> {
    if a.html.is_none() && a.md.is_none() {
        return Err(usage(
            "nothing to write: give --html OUT.html and/or --md OUT.md",
        ));
    }
    // A path that cannot be read is a usage error (exit 2); a file whose
    // content is wrong (corrupt JSON, another kind, too large) is a
    // runtime failure (exit 1), as in `merge`.
    let docs = tlslab_report::inputs::read_inputs(&a.inputs).map_err(|e| {
        if e.is_content() {
            anyhow::Error::new(e)
        } else {
            usage(e)
        }
    })?;
    let mut out = std::io::stdout().lock();
    for d in &docs {
        let (charts, missing) = tlslab_report::html::charts(d);
        writeln!(
            out,
            "{}: {} cells, {} comparisons, {} charts ({} left out)",
            d.study,
            d.cells.len(),
            d.comparisons.len(),
            charts.len(),
            missing.len()
        )?;
    }
    if let Some(path) = &a.html {
        std::fs::write(path, tlslab_report::html::render_html(&docs))
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "wrote {}", path.display())?;
    }
    if let Some(path) = &a.md {
        std::fs::write(path, tlslab_report::html::render_markdown(&docs))
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "wrote {}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `tlslab plan`.
#[derive(Clone, Debug, Args)]
#[command(after_help = "Examples:\n  \
    tlslab plan --full-us 1200 --resumed-us 90 --request-us 40 --reuse 60 --load 20000\n  \
    tlslab lab --json lab.json && tlslab plan --costs lab.json --tls 1.3 --key rsa2048 --load 5000 --latency 5ms\n  \
    tlslab plan --check --key rsa2048          (measures the costs, then checks the model)\n\n\
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
    /// document (cells picked by --tls and --key).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["full_us", "resumed_us"])]
    pub costs: Option<PathBuf>,

    /// TLS version the costs are for (and --check's server runs): 1.2 or 1.3.
    #[arg(long, default_value = "1.3", value_name = "VERSION")]
    pub tls: String,

    /// Certificate key the costs are for (and --check's server uses): ecdsa-p256, rsa2048, …
    #[arg(long, default_value = "rsa2048", value_name = "KEY")]
    pub key: String,

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

/// The validated inputs of a plan.
#[derive(Debug)]
pub struct PlanInputs {
    /// The costs, if given (by flags or a file).
    pub costs: Option<(UnitCosts, String)>,
    /// The mix.
    pub mix: Mix,
    /// 0–1.
    pub utilisation: f64,
}

/// Validates `a` (usage errors only; reads the --costs file).
pub fn plan_inputs(a: &PlanArgs) -> anyhow::Result<PlanInputs> {
    if !(0.0..=100.0).contains(&a.reuse) {
        return Err(usage(format!(
            "--reuse {} is outside 0-100 (it is a percentage)",
            a.reuse
        )));
    }
    if !(a.requests_per_conn.is_finite() && a.requests_per_conn >= 1.0) {
        return Err(usage("--requests-per-conn must be at least 1"));
    }
    if !(a.utilisation > 0.0 && a.utilisation < 100.0) {
        return Err(usage(format!(
            "--utilisation {} must be above 0 and below 100 (%), e.g. 70",
            a.utilisation
        )));
    }
    if let Some(l) = a.load
        && !(l.is_finite() && l >= 0.0)
    {
        return Err(usage("--load must be a non-negative number of requests/s"));
    }
    if a.latency.is_some_and(|l| l.is_zero()) {
        return Err(usage("--latency must be above zero, e.g. 5ms"));
    }
    for (name, v) in [
        ("--full-us", a.full_us),
        ("--resumed-us", a.resumed_us),
        ("--request-us", a.request_us),
    ] {
        if let Some(v) = v
            && !(v.is_finite() && v >= 0.0)
        {
            return Err(usage(format!(
                "{name} {v} must be a non-negative number of µs"
            )));
        }
    }
    let costs = match (&a.costs, a.full_us, a.resumed_us, a.request_us) {
        (Some(path), _, _, req) => {
            use tlslab_workload::input::{MAX_JSON_FILE, read_capped_to_string};
            // A path that is not there is a usage error (2); a file whose
            // content is bad (too large, not JSON) a runtime failure (1), as
            // for `tlslab report`.
            let text = read_capped_to_string(path, MAX_JSON_FILE).map_err(|e| {
                let msg = format!("--costs {}: {e}", path.display());
                if e.kind() == std::io::ErrorKind::NotFound {
                    usage(msg)
                } else {
                    anyhow::anyhow!(msg)
                }
            })?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!(format!(
                    "--costs {}: not JSON ({e}); give `tlslab lab --json`'s file or an experiment \
                     results document",
                    path.display()
                ))
            })?;
            let src = capacity::costs_from_json(&v, &a.tls, &a.key, req)
                .map_err(|e| usage(format!("--costs {}: {e}", path.display())))?;
            Some((src.costs, format!("{}: {}", path.display(), src.how)))
        }
        (None, Some(f), Some(r), Some(q)) => Some((
            UnitCosts {
                full_handshake_us: f,
                resumed_handshake_us: r,
                request_us: q,
            },
            "given by --full-us, --resumed-us and --request-us".to_string(),
        )),
        (None, None, None, None) => None,
        _ => {
            return Err(usage(
                "give all three of --full-us, --resumed-us and --request-us (or --costs FILE)",
            ));
        }
    };
    if costs.is_none() && !a.check {
        return Err(usage(
            "no costs: give --full-us, --resumed-us and --request-us, or --costs FILE from \
             `tlslab lab --json`, or add --check to measure them here",
        ));
    }
    Ok(PlanInputs {
        costs,
        mix: Mix {
            reuse: a.reuse / 100.0,
            requests_per_conn: a.requests_per_conn,
        },
        utilisation: a.utilisation / 100.0,
    })
}

/// Runs `tlslab plan`.
pub fn plan(a: &PlanArgs) -> anyhow::Result<ExitCode> {
    let inputs = plan_inputs(a)?;
    let version = tlslab_crypto::provider::parse_versions(&a.tls)
        .map_err(|e| usage(format!("--tls: {e}")))?;
    let [version] = version[..] else {
        return Err(usage("--tls takes one version: 1.2 or 1.3"));
    };
    let key: tlslab_crypto::pki::KeyType =
        a.key.parse().map_err(|e| usage(format!("--key: {e}")))?;
    if a.check && a.requests_per_conn != 1.0 {
        return Err(usage(
            "--check offers open-loop load, one request per new connection; drop \
             --requests-per-conn (the model itself takes any K without --check)",
        ));
    }
    let mut out = std::io::stdout().lock();
    let mut check = None;
    let (costs, costs_from) = match inputs.costs {
        Some(c) => c,
        None => {
            // --check without costs: measure them (and everything else).
            let quick = a.quick;
            let cfg = tlslab_experiment::plan_check::CheckConfig {
                costs: None,
                reuse: inputs.mix.reuse,
                version,
                key,
                cell: a
                    .cell
                    .unwrap_or(Duration::from_secs(if quick { 4 } else { 10 })),
                calibration_cell: Duration::from_secs(if quick { 3 } else { 5 }),
                calibration_clients: 16,
                levels: vec![0.5, 0.7, 0.9],
                seed: a.seed,
            };
            let r = tlslab_experiment::plan_check::run(&cfg, |l| eprintln!("{l}"))
                .context("running plan --check")?;
            let c = (r.costs, r.costs_from.clone());
            check = Some(r);
            c
        }
    };
    let plan = capacity::plan(
        costs,
        inputs.mix,
        inputs.utilisation,
        a.load,
        a.latency.map(|d| d.as_secs_f64() * 1000.0),
        a.base_latency.as_secs_f64() * 1000.0,
    )
    .map_err(usage)?;
    writeln!(out, "costs: {costs_from}")?;
    write!(out, "{}", plan.render())?;
    if a.check && check.is_none() {
        let cfg = tlslab_experiment::plan_check::CheckConfig {
            costs: Some(costs),
            reuse: inputs.mix.reuse,
            version,
            key,
            cell: a
                .cell
                .unwrap_or(Duration::from_secs(if a.quick { 4 } else { 10 })),
            calibration_cell: Duration::from_secs(3),
            calibration_clients: 16,
            levels: vec![0.5, 0.7, 0.9],
            seed: a.seed,
        };
        out.flush()?;
        check = Some(
            tlslab_experiment::plan_check::run(&cfg, |l| eprintln!("{l}"))
                .context("running plan --check")?,
        );
    }
    if let Some(c) = &check {
        write!(out, "{}", c.render())?;
    }
    if let Some(path) = &a.json {
        let body = serde_json::to_vec_pretty(&serde_json::json!({
            "kind": "tlslab-plan",
            "schema_version": 1,
            "costs_from": costs_from,
            "plan": plan,
            "check": check,
        }))?;
        std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
