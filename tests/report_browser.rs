//! The HTML report in a real browser: a report of a real short load run
//! against `tlslab serve` (two open-loop rates, so the goodput chart is
//! drawn) and of a hand-built cluster study document is opened in headless
//! Chromium, which must log no console error and no failed load, and whose
//! rendered DOM must hold every chart as a non-empty SVG.
//!
//! Needs Chromium (`apt-get install -y chromium`); `.ci/run` installs it
//! and runs this with `cargo test --release --test report_browser -- --ignored`.
//! Without it the test skips loudly, and fails under `CI=true`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Serve, expect_ok, run, run_tlslab, tempdir};

const LIMIT: Duration = Duration::from_secs(120);

/// Chromium's rendered DOM of `page` and its log (stderr).
fn render(browser: &Path, page: &Path, profile: &Path) -> (String, String) {
    let out = run(
        tlslab_peers::chromium::dump_dom(browser, page, profile),
        LIMIT,
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Measures, in the rendered page at 900 px, the four flaws issue 21 saw:
/// sideways scrolling, legend boxes over data points, tick labels like
/// `1000.0`, and comparison cells with more than a few links shown inline.
const MEASURE: &str = r#"<script>
const m = {width: document.documentElement.scrollWidth, viewport: window.innerWidth,
           covered: 0, ticks: [], inline: 0};
for (const svg of document.querySelectorAll('svg')) {
  const boxes = [...svg.querySelectorAll('rect[opacity="0.85"]')].map(r => r.getBoundingClientRect());
  for (const c of svg.querySelectorAll('circle')) {
    const p = c.getBoundingClientRect();
    const [x, y] = [(p.left + p.right) / 2, (p.top + p.bottom) / 2];
    if (boxes.some(b => x >= b.left && x <= b.right && y >= b.top && y <= b.bottom)) m.covered++;
  }
  for (const t of svg.querySelectorAll('text')) {
    if (/^-?\d+\.0+$/.test(t.textContent.trim())) m.ticks.push(t.textContent.trim());
  }
}
for (const td of document.querySelectorAll('td')) {
  const shown = [...td.querySelectorAll('a')].filter(a => !a.closest('details')).length;
  m.inline = Math.max(m.inline, shown);
}
const out = document.createElement('pre');
out.id = 'tlslab-measure';
out.textContent = JSON.stringify(m);
document.body.appendChild(out);
</script>"#;

/// Console messages and failed loads in Chromium's log.
fn console_problems(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            l.contains(":CONSOLE")
                || l.contains("Failed to load resource")
                || l.contains("Uncaught")
                || l.contains("net::ERR_")
        })
        .map(str::to_string)
        .collect()
}

/// The `<svg>` elements of a DOM and, for each, whether it draws anything.
fn svgs(dom: &str) -> Vec<bool> {
    dom.split("<svg")
        .skip(1)
        .map(|rest| {
            let body = rest.split("</svg>").next().unwrap_or_default();
            body.contains("<polyline") || body.contains("<path") || body.contains("<rect")
        })
        .collect()
}

#[test]
#[ignore = "needs chromium; run by .ci/run"]
fn html_report_opens_in_headless_chromium_without_errors() {
    let Some(browser) = tlslab_peers::chromium::find() else {
        let msg = "chromium is not installed: SKIPPING the browser test of the HTML report. \
                   Install it with `apt-get install -y chromium` (.ci/run does).";
        common::skip(msg);
        return;
    };
    let dir = tempdir();
    let serve = Serve::start(&[]);
    let mut inputs: Vec<String> = Vec::new();
    for rate in ["50", "100"] {
        let json = dir.path().join(format!("load{rate}.json"));
        let extra = format!("-c 4 --reuse 50 -d 2s --rate {rate} --no-progress");
        let (out, _) = serve.load("/bytes/1024", &common::args(&extra), &json, LIMIT);
        expect_ok(&out);
        inputs.push(json.to_str().unwrap().into());
    }
    let cluster = dir.path().join("cluster.json");
    std::fs::write(
        &cluster,
        serde_json::to_vec(&common::study_doc::cluster_document()).unwrap(),
    )
    .unwrap();
    inputs.push(cluster.to_str().unwrap().into());
    // The committed quick seed002 run: TCP's and QUIC's overload panels
    // and their pair, data tables with extra columns.
    inputs.push(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/results/seed002-overload/results.json"
        )
        .into(),
    );
    let html = dir.path().join("report.html");
    let mut args: Vec<&str> = vec!["report"];
    args.extend(inputs.iter().map(String::as_str));
    args.extend(["--html", html.to_str().unwrap()]);
    expect_ok(&run_tlslab(&args, LIMIT));
    let source = std::fs::read_to_string(&html).unwrap();
    let charts_in_source = source.matches("<figure class=\"chart\"").count();
    assert!(
        charts_in_source >= 5,
        "{charts_in_source} charts in the report"
    );

    // The check can fail: a page with a console error is caught (so a silent browser does not pass by default).
    let bad = dir.path().join("bad.html");
    std::fs::write(
        &bad,
        "<!DOCTYPE html><html><body><script>console.error('tlslab-canary')</script>\
         </body></html>",
    )
    .unwrap();
    let profile = tempdir();
    let (_, bad_log) = render(&browser, &bad, profile.path());
    assert!(
        console_problems(&bad_log)
            .iter()
            .any(|l| l.contains("tlslab-canary")),
        "Chromium's log did not show the canary console error; the check would be blind:\n{bad_log}"
    );

    let profile = tempdir();
    let (dom, log) = render(&browser, &html, profile.path());
    let problems = console_problems(&log);
    assert!(
        problems.is_empty(),
        "console errors or failed loads:\n{}",
        problems.join("\n")
    );
    assert!(dom.contains("tlslab report"), "no DOM dumped:\n{log}");
    let drawn = svgs(&dom);
    assert_eq!(
        drawn.len(),
        charts_in_source,
        "the rendered DOM has {} SVGs for {charts_in_source} charts",
        drawn.len()
    );
    assert!(drawn.iter().all(|d| *d), "an SVG draws nothing: {drawn:?}");
    assert!(dom.contains("Goodput against offered load"));
    assert!(dom.contains("Cluster throughput against reuse"));
    for title in [
        tlslab_report::html::OVERLOAD_TCP_CHART,
        tlslab_report::html::OVERLOAD_QUIC_CHART,
        tlslab_report::html::OVERLOAD_PAIR_CHART,
    ] {
        assert!(dom.contains(title), "no chart {title}");
    }

    // The page as a reader sees it in a 900 px window, measured by a
    // script in a copy (the report itself has none).
    let measured = dir.path().join("measured.html");
    std::fs::write(
        &measured,
        source.replace("</body>", &format!("{MEASURE}</body>")),
    )
    .unwrap();
    let profile = tempdir();
    let (dom, log) = render(&browser, &measured, profile.path());
    let json = dom
        .split("<pre id=\"tlslab-measure\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("the measuring script wrote nothing:\n{log}"));
    let m: serde_json::Value = serde_json::from_str(json).expect("the measurement is JSON");
    eprintln!("the page measured at 900 px: {m}");
    assert_eq!(m["viewport"], 900, "{m}");
    assert!(
        m["width"].as_u64() <= m["viewport"].as_u64(),
        "the page scrolls sideways in a 900 px window: {m}"
    );
    assert_eq!(m["covered"], 0, "legend boxes cover data points: {m}");
    assert_eq!(
        m["ticks"],
        serde_json::json!([]),
        "tick labels with needless decimals: {m}"
    );
    assert!(
        m["inline"].as_u64() <= Some(3),
        "a table cell shows its links inline: {m}"
    );
}
