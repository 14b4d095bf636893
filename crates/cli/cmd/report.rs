//! `tlslab report` (HTML and Markdown reports of results documents, `load
//! --json` and `sweep --json` files) and `tlslab plan` (the capacity model,
//! and `--check`, which measures it).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tlslab_report::capacity::{self, Mix, UnitCosts};

use crate::args::tools::{PlanArgs, ReportArgs};
use crate::output::write_json;
use crate::usage::usage;

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
            let src = capacity::costs_from_json(&v, &a.tls, a.key_type.name(), req)
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
    let key = a.key_type;
    if a.check && a.requests_per_conn != 1.0 {
        return Err(usage(
            "--check offers open-loop load, one request per new connection; drop \
             --requests-per-conn (the model itself takes any K without --check)",
        ));
    }
    let mut out = std::io::stdout().lock();
    // `--check`: measures the costs (unless given), then the model.
    let run_check = |costs: Option<UnitCosts>| {
        let cfg = tlslab_experiment::plan_check::CheckConfig {
            costs,
            reuse: inputs.mix.reuse,
            version,
            key,
            cell: a
                .cell
                .unwrap_or(Duration::from_secs(if a.quick { 4 } else { 10 })),
            calibration_cell: Duration::from_secs(if a.quick || costs.is_some() { 3 } else { 5 }),
            calibration_clients: 16,
            levels: vec![0.5, 0.7, 0.9],
            seed: a.seed,
        };
        tlslab_experiment::plan_check::run(&cfg, |l| eprintln!("{l}"))
            .context("running plan --check")
    };
    let mut check = None;
    let (costs, costs_from) = match inputs.costs {
        Some(c) => c,
        None => {
            let r = run_check(None)?;
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
        out.flush()?;
        check = Some(run_check(Some(costs))?);
    }
    if let Some(c) = &check {
        write!(out, "{}", c.render())?;
    }
    if let Some(path) = &a.json {
        let doc = serde_json::json!({
            "kind": "tlslab-plan",
            "schema_version": 1,
            "costs_from": costs_from,
            "plan": plan,
            "check": check,
        });
        write_json(path, &doc)?;
    }
    Ok(ExitCode::SUCCESS)
}
