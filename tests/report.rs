//! `tlslab report` and `tlslab plan` end to end, through the real binary:
//! reports of real `load --json` runs against `tlslab serve` and of a
//! hand-built cluster study document; bad inputs and flags exit 2 naming
//! the problem; the capacity model's figures against hand-computed ones;
//! and `plan --check` run for real (short).

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use common::{Serve, args, assert_usage_error, exits, expect_ok, run_tlslab, show, tempdir};

const LIMIT: Duration = Duration::from_secs(120);

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Every `href="#x"` has its `id="x"`; no attribute fetches anything.
pub fn check_self_contained(html: &str) -> usize {
    let ids: HashSet<&str> = html
        .split("id=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .collect();
    let mut links = 0;
    for attr in ["href=\"", "src=\""] {
        for rest in html.split(attr).skip(1) {
            let v = rest.split('"').next().unwrap_or_default();
            if let Some(a) = v.strip_prefix('#') {
                assert!(ids.contains(a), "link #{a} has no target");
                links += 1;
            } else {
                assert!(v.starts_with("data:"), "external reference: {attr}{v}");
            }
        }
    }
    for bad in [
        "<script",
        "<link rel=\"stylesheet",
        "@import",
        "url(",
        "<img",
        "<iframe",
    ] {
        assert!(!html.contains(bad), "the page contains {bad}");
    }
    links
}

/// A number attribute of an SVG tag (NaN when absent).
fn attr(tag: &str, name: &str) -> f64 {
    let tag = format!(" {tag}");
    let v = tag.split(&format!(" {name}=\"")).nth(1).unwrap_or_default();
    v.split('"')
        .next()
        .unwrap_or_default()
        .parse()
        .unwrap_or(f64::NAN)
}

/// The data points (`<circle>`) of a plotters SVG that its legend box
/// (the `<rect>` with opacity 0.85) covers.
fn points_under_legend(svg: &str) -> Vec<(f64, f64)> {
    let tags = |name: &str| -> Vec<&str> {
        let open = format!("<{name} ");
        svg.split(open.as_str())
            .skip(1)
            .map(|t| t.split('>').next().unwrap_or_default())
            .collect()
    };
    let legends: Vec<&str> = tags("rect")
        .into_iter()
        .filter(|t| t.contains("opacity=\"0.85\""))
        .collect();
    let mut covered = Vec::new();
    for c in tags("circle") {
        let (x, y, r) = (attr(c, "cx"), attr(c, "cy"), attr(c, "r"));
        for l in &legends {
            let (lx, ly, w, h) = (
                attr(l, "x"),
                attr(l, "y"),
                attr(l, "width"),
                attr(l, "height"),
            );
            if x + r >= lx && x - r <= lx + w && y + r >= ly && y - r <= ly + h {
                covered.push((x, y));
            }
        }
    }
    covered
}

/// Tick labels that print decimals an integer does not need (`1000.0`).
fn needless_decimals(svg: &str) -> Vec<String> {
    svg.split("<text ")
        .skip(1)
        .filter_map(|t| t.split_once('>')?.1.split('<').next())
        .map(str::trim)
        .filter(|t| {
            t.split_once('.').is_some_and(|(int, frac)| {
                !int.is_empty()
                    && int
                        .trim_start_matches('-')
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                    && !frac.is_empty()
                    && frac.bytes().all(|b| b == b'0')
            })
        })
        .map(String::from)
        .collect()
}

/// The most links any one cell of a table (from `table.0` to `table.1`)
/// shows outside a folded `<details>`.
fn most_inline_links(page: &str, table: (&str, &str), row_sep: &str, cell_sep: &str) -> usize {
    let Some(start) = page.find(table.0) else {
        return 0;
    };
    let rest = &page[start + table.0.len()..];
    let table = &rest[..rest.find(table.1).unwrap_or(rest.len())];
    table
        .split(row_sep)
        .flat_map(|row| row.split(cell_sep))
        .map(|cell| {
            let mut shown = String::new();
            let mut rest = cell;
            while let Some(i) = rest.find("<details>") {
                shown.push_str(&rest[..i]);
                rest = rest[i..].split_once("</details>").map_or("", |x| x.1);
            }
            shown.push_str(rest);
            shown.matches("href=\"#").count() + shown.matches("](#").count()
        })
        .max()
        .unwrap_or(0)
}

fn write_json(dir: &Path, name: &str, v: &serde_json::Value) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    p
}

#[test]
fn report_of_real_loads_and_a_cluster_document_is_self_contained() {
    let dir = tempdir();
    let serve = Serve::start(&[]);
    let mut loads = Vec::new();
    for rate in ["40", "80"] {
        let json = dir.path().join(format!("rate{rate}.json"));
        let extra = format!("-c 4 --reuse 50 -d 1500ms --rate {rate} --no-progress");
        let (out, _) = serve.load("/bytes/1024", &args(&extra), &json, LIMIT);
        expect_ok(&out);
        loads.push(json);
    }
    let cluster = write_json(
        dir.path(),
        "cluster.json",
        &common::study_doc::cluster_document(),
    );
    let html = dir.path().join("r.html");
    let md = dir.path().join("r.md");
    let inputs = [s(&loads[0]), s(&cluster), s(&loads[1])];
    let outputs = ["--html", s(&html), "--md", s(&md)];
    let out = run_tlslab(&[&["report"][..], &inputs, &outputs].concat(), LIMIT);
    let stdout = expect_ok(&out);
    assert!(stdout.contains("2 cells"), "{stdout}");
    let page = std::fs::read_to_string(&html).unwrap();
    let links = check_self_contained(&page);
    assert!(links > 20, "{links} internal links");
    // The two load runs are one document (prefix d0-), the cluster the second.
    for id in [
        "d0-cell-load1-r1",
        "d0-cell-load2-r1",
        "d1-cell-tls12-id-session-reuse1-r1",
    ] {
        assert!(page.contains(&format!("id=\"{id}\"")), "no anchor {id}");
    }
    assert!(
        page.contains("Goodput against offered load"),
        "goodput chart"
    );
    assert!(page.contains("Cluster throughput against reuse (tls13-ticket)"));
    assert!(page.contains("session (session-aware)") && page.contains("round-robin (blind)"));
    assert!(page.contains("Share of server CPU per request, by TLS stage"));
    assert!(page.contains("hardware; TLS 1.3 tickets"));
    // The command line that reproduces each load cell.
    assert!(
        page.contains("--rate 40 --arrivals poisson"),
        "command line of load1"
    );
    // Every chart is an inline SVG with drawn lines or bars.
    let svgs: Vec<&str> = page.split("<svg").skip(1).collect();
    assert!(svgs.len() >= 5, "{} charts", svgs.len());
    for svg in &svgs {
        let body = svg.split("</svg>").next().unwrap();
        assert!(
            body.contains("<polyline") || body.contains("<rect") || body.contains("<path"),
            "an empty chart"
        );
    }
    // The four flaws of issue 21: no legend covers a data point; no tick
    // label reads `1000.0`; tables scroll in their own box (the browser
    // test measures the page at 900 px); a row over many cells folds them.
    for svg in &svgs {
        let svg = svg.split("</svg>").next().unwrap();
        assert_eq!(
            points_under_legend(svg),
            vec![],
            "a legend covers data points"
        );
        assert_eq!(needless_decimals(svg), Vec::<String>::new(), "tick labels");
    }
    assert!(
        page.contains(".wide{overflow-x:auto"),
        "no scroll box for tables"
    );
    assert_eq!(
        page.matches("<table").count(),
        page.matches("<div class=\"wide\"><table").count(),
        "a table outside a scroll box widens the page"
    );
    let inline = most_inline_links(&page, ("Paper against today", "</table>"), "<tr", "<td");
    assert!(
        inline <= 3,
        "{inline} links inline in one cell of a comparison row"
    );
    let md = std::fs::read_to_string(&md).unwrap();
    let inline = most_inline_links(&md, ("## Paper against today\n\n", "\n\n"), "\n", " | ");
    assert!(
        inline <= 3,
        "{inline} links inline in one Markdown comparison cell"
    );
    assert!(md.contains("## Appendix: cells"));
    assert!(md.contains("[load2-r1](#cell-load2-r1)"));
}

#[test]
fn report_rejects_what_it_cannot_read_with_exit_2_or_1() {
    let dir = tempdir();
    let html = dir.path().join("out.html");
    let not_json = dir.path().join("notes.txt");
    std::fs::write(&not_json, "hello").unwrap();
    let other = write_json(
        dir.path(),
        "other.json",
        &serde_json::json!({"foo": 1, "bar": [1]}),
    );
    let lab_like = write_json(
        dir.path(),
        "labrep.json",
        &serde_json::json!({"schema_version": 1, "cells": [], "ratios": []}),
    );
    let broken = write_json(
        dir.path(),
        "broken.json",
        &serde_json::json!({"kind": "tlslab-experiment", "cells": 3}),
    );
    let missing = dir.path().join("missing.json");
    // A path that cannot be read is a usage error (2); bad content is a
    // runtime failure (1), as in `merge` (issue 20: every case was 2).
    for (path, want, code) in [
        (&not_json, "not JSON", 1),
        (&other, "not a tlslab results document", 1),
        (&lab_like, "not a tlslab results document", 1),
        (&broken, "does not parse", 1),
        (&missing, "cannot read", 2),
    ] {
        let out = run_tlslab(&["report", s(path), "--html", s(&html)], LIMIT);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{}", show(&out));
        assert!(err.contains(s(path)), "error does not name the file: {err}");
        assert!(err.contains(want), "{err}");
        common::assert_no_panic(&out.stderr);
    }
    assert!(!html.exists(), "a failed report wrote its output");
    let cluster = write_json(dir.path(), "c.json", &common::study_doc::cluster_document());
    let out = run_tlslab(&["report", s(&cluster)], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--html"));
    let out = run_tlslab(&["report", "--html", s(&html)], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

fn plan_json(args: &[&str]) -> serde_json::Value {
    let dir = tempdir();
    let json = dir.path().join("plan.json");
    let mut full = vec!["plan"];
    full.extend_from_slice(args);
    full.extend(["--json", s(&json)]);
    expect_ok(&run_tlslab(&full, LIMIT));
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

/// The costs `plan` is given by hand: 1000 µs a full handshake, 100 µs a
/// resumed one, 50 µs a request.
const COSTS: &str = "--full-us 1000 --resumed-us 100 --request-us 50";

/// [`plan_json`] of [`COSTS`] at 25 % reuse and 2 requests per connection,
/// plus `args`.
fn plan_at_25(args: &[&str]) -> serde_json::Value {
    let shape = ["--reuse", "25", "--requests-per-conn", "2"];
    plan_json(&[&self::args(COSTS)[..], &shape, args].concat())
}

fn close(v: &serde_json::Value, want: f64) {
    let got = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{got} != {want}"
    );
}

#[test]
fn plan_figures_match_hand_computed_values() {
    let v = plan_at_25(&args("--utilisation 50 --load 10000 --base-latency 2ms"));
    assert_eq!(v["kind"], "tlslab-plan");
    let p = &v["plan"];
    // 0.75·1000 + 0.25·100 + 2·50 = 875 µs per connection; 437.5 per request.
    close(&p["cpu_per_connection_us"], 875.0);
    close(&p["cpu_per_request_us"], 437.5);
    close(&p["connections_per_s_per_core_max"], 1e6 / 875.0);
    close(&p["requests_per_s_per_core_max"], 2e6 / 875.0);
    close(&p["requests_per_s_per_core"], 1e6 / 875.0);
    // 10 000 req/s at 1142.86 per core → 8.75 → 9 cores.
    assert_eq!(p["cores_needed"], 9);
    assert_eq!(p["curve_cores"], 9);
    close(&p["handshake_cpu_per_request_us"], 387.5);
    // Seed 004's form at ρ = 0.5: 2 + 0.05 + 0.3875 / 0.5 ms.
    let at50 = &p["seed004_curve"][9];
    close(&at50[0], 0.5);
    close(&at50[1], 2.0 + 0.05 + 0.775);
    assert!(v["check"].is_null());

    // A latency target adds cores: M/M/c mean ≤ 0.5 ms with s = 0.4375 ms.
    let v = plan_at_25(&args("--utilisation 95 --load 10000 --latency 500us"));
    let c = v["plan"]["cores_needed"].as_u64().unwrap();
    assert!(c > 5, "{c} cores cannot meet 0.5 ms at 10 000 req/s");
}

#[test]
fn plan_reads_costs_from_a_lab_report() {
    let dir = tempdir();
    let lab = write_json(
        dir.path(),
        "lab.json",
        &serde_json::json!({"schema_version": 1, "cells": [
            {"mode": "tls_full", "version": "TLSv1.3", "key": "rsa2048", "server_cpu_us_per_request": 1300.0},
            {"mode": "tls_resumed", "version": "TLSv1.3", "key": "rsa2048", "server_cpu_us_per_request": 160.0},
            {"mode": "tls_keep_alive", "version": "TLSv1.3", "key": "rsa2048", "server_cpu_us_per_request": 40.0}
        ]}),
    );
    let v = plan_json(&["--costs", s(&lab), "--tls", "1.3", "--key", "rsa2048"]);
    close(&v["plan"]["costs"]["full_handshake_us"], 1260.0);
    close(&v["plan"]["costs"]["resumed_handshake_us"], 120.0);
    close(&v["plan"]["costs"]["request_us"], 40.0);
    // Reuse 0, one request per connection: 1300 µs → 769 req/s per core.
    close(&v["plan"]["requests_per_s_per_core_max"], 1e6 / 1300.0);
    let bad = ["plan", "--costs", s(&lab), "--key", "ecdsa-p256"];
    assert_usage_error(&bad, "ecdsa-p256", LIMIT);
}

#[test]
fn plan_bad_flags_exit_2_with_the_fix() {
    let dir = tempdir();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{").unwrap();
    let with = |extra| format!("plan {COSTS} {extra}");
    let cases = [
        (with("--reuse 150"), "0-100"),
        (with("--utilisation 100"), "below 100"),
        (with("--requests-per-conn 0.5"), "at least 1"),
        (with("--load=-5"), "--load"),
        (with("--tls 1.1"), "--tls"),
        (with("--key dsa"), "--key"),
        (
            with("--check --requests-per-conn 2"),
            "one request per new connection",
        ),
        ("plan".into(), "--check to measure them"),
        ("plan --full-us 5".into(), "all three"),
        ("plan --costs /nonexistent/lab.json".into(), "--costs"),
        (with("--full-us -1"), ""),
    ];
    for (line, want) in cases {
        assert_usage_error(&args(&line), want, LIMIT);
    }
    // A costs file whose content is bad is a runtime failure (1), as for
    // `tlslab report`, not a usage error.
    let err = exits(&["plan", "--costs", s(&junk)], 1, LIMIT);
    assert!(err.contains("not JSON"), "{err}");
}

#[test]
fn plan_check_runs_the_model_against_a_real_server() {
    let v = plan_json(&[
        "--check", "--quick", "--cell", "1s", "--key", "rsa2048", "--reuse", "50",
    ]);
    let c = &v["check"];
    assert_eq!(c["key"], "rsa2048");
    let cal = &c["calibration"];
    assert!(
        cal["full_per_request_us"].as_f64().unwrap()
            > cal["resumed_per_request_us"].as_f64().unwrap()
    );
    let points = c["points"].as_array().unwrap();
    assert_eq!(points.len(), 3);
    let cap = c["capacity_per_s"].as_f64().unwrap();
    for (p, rho) in points.iter().zip([0.5, 0.7, 0.9]) {
        close(&p["target_utilisation"], rho);
        close(&p["offered_per_s"], cap * rho);
        // On a busy machine a point may complete little or nothing; that is
        // a measured miss, printed, not an error.
        assert!(p["measured_per_s"].as_f64().unwrap() >= 0.0, "{p}");
        assert!(p["server_busy"].as_f64().unwrap() >= 0.0, "{p}");
        if p["measured_per_s"].as_f64().unwrap() > 0.0 {
            assert!(p["p50_measured_ms"].as_f64().unwrap() > 0.0, "{p}");
        }
    }
    // The model's prediction rises with utilisation. It rests on the
    // unloaded point's p50: on a machine too busy for that point to
    // complete a request, every prediction is left out (null), not made up.
    if c["unloaded"]["p50_measured_ms"].is_null() {
        for p in points {
            assert!(p["p50_predicted_ms"].is_null(), "{p}");
        }
        return;
    }
    let pred: Vec<f64> = points
        .iter()
        .map(|p| p["p50_predicted_ms"].as_f64().unwrap())
        .collect();
    assert!(pred[0] <= pred[1] && pred[1] < pred[2], "{pred:?}");
}
