//! The charts of an overload report (`tlslab overload --json`, seed
//! 002's engine report): goodput against offered load, one panel per
//! transport, and, when the QUIC run stands beside the TCP one (`quic`,
//! `overload --transport both`), both in one chart as shares of each
//! transport's own capacity. Every panel's table adds p99, handshakes and
//! sheds at each point.

use super::svg::{Chart, DataPoint, line_chart, to_series};
use crate::study::{StudyResults, fmt_level};
use tlslab_schema::overload::{OverloadReport, Point};

/// The TCP panel's title.
pub const OVERLOAD_TCP_CHART: &str = "Goodput against offered load over TCP (HTTPS)";
/// The QUIC panel's title.
pub const OVERLOAD_QUIC_CHART: &str = "Goodput against offered load over QUIC (HTTP/3)";
/// The paired chart's title.
pub const OVERLOAD_PAIR_CHART: &str = "Goodput as a share of capacity, TCP and QUIC side by side";

const X_LABEL: &str = "offered load, x this transport's capacity";

/// `TCP` or `QUIC`, and the `transport` factor of its cells.
fn names(r: &OverloadReport) -> (&'static str, &'static str) {
    match r.transport.as_str() {
        "h3" => ("QUIC", "quic"),
        _ => ("TCP", "tcp"),
    }
}

/// The ids of the cells of point `p` of a report over `transport` (a
/// TCP cell from before the QUIC arm has no `transport` factor).
fn cells(r: &StudyResults, transport: &str, p: &Point) -> Vec<String> {
    let m = fmt_level(p.multiplier);
    r.cells
        .iter()
        .filter(|c| {
            let f = |k: &str| c.factors.get(k).map(String::as_str);
            f("arm") == Some(p.arm_name.as_str())
                && f("multiplier") == Some(m.as_str())
                && (f("transport") == Some(transport)
                    || (transport == "tcp" && f("transport").is_none()))
        })
        .map(|c| c.id.clone())
        .collect()
}

/// `{:.0}` of a figure, `–` if not finite.
fn whole(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.0}")
    } else {
        "–".into()
    }
}

/// One transport's panel: goodput against multiples of its capacity, a
/// line per arm; the table adds what else each point measured.
fn panel(doc: &StudyResults, r: &OverloadReport, out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let (name, transport) = names(r);
    let title = match name {
        "QUIC" => OVERLOAD_QUIC_CHART,
        _ => OVERLOAD_TCP_CHART,
    };
    let y_label = "goodput, requests/s (client-observed)";
    let data: Vec<DataPoint> = r
        .points
        .iter()
        .map(|p| DataPoint {
            series: p.arm_name.clone(),
            x: p.multiplier,
            y: p.client.goodput_rps,
            cells: cells(doc, transport, p),
        })
        .collect();
    let Some(svg) = line_chart(title, X_LABEL, y_label, &to_series(&data), false) else {
        missing.push(format!(
            "{title}: the report has no point with a finite goodput"
        ));
        return;
    };
    let column = |head: &str, f: &dyn Fn(&Point) -> String| {
        (head.to_string(), r.points.iter().map(f).collect::<Vec<_>>())
    };
    let columns = vec![
        column("offered users/s", &|p| whole(p.offered_users_per_sec)),
        column("p99 ms (client)", &|p| whole(p.client.latency_p99_ms)),
        column("full hs (server)", &|p| {
            p.server.handshakes_full.to_string()
        }),
        column("resumed hs (server)", &|p| {
            p.server.handshakes_resumed.to_string()
        }),
        column("full shed (server)", &|p| p.server.full_shed.to_string()),
        column("resumed shed (server)", &|p| {
            p.server.resume_shed.to_string()
        }),
    ];
    let caption = format!(
        "Requests of user sessions that completed all {k} requests, per second of each \
         point's window (client-observed), against the offered arrival rate of users as a \
         multiple of {name}'s own capacity ({cap:.1} user sessions/s, {from}); one line per \
         arm (admission / client timeout / retry or new client / reuse), each point on a fresh \
         server. The table adds the p99 latency of completed requests (client-observed, the \
         same window) and the full and resumed handshakes completed and shed \
         (server-observed, over the point's server). Seed 002 Figs. 3-7{over}.",
        k = r.requests_per_session,
        cap = r.capacity_users_per_sec,
        from = if r.capacity_from == "given" {
            "given"
        } else {
            "found by its own sweep"
        },
        over = if name == "QUIC" {
            ", over HTTP/3 with every request a new QUIC connection (issue 33)"
        } else {
            ""
        },
    );
    let mut chart = Chart::new((title, &caption), (X_LABEL, y_label), svg, data);
    chart.columns = columns;
    out.push(chart);
}

/// TCP's and QUIC's goodput as shares of each one's capacity (in
/// requests/s: capacity × K), in one chart.
fn paired(
    doc: &StudyResults,
    tcp: &OverloadReport,
    quic: &OverloadReport,
    out: &mut Vec<Chart>,
    missing: &mut Vec<String>,
) {
    let y_label = "goodput ÷ capacity (client-observed)";
    let mut data = Vec::new();
    for r in [tcp, quic] {
        let (name, transport) = names(r);
        let cap = r.capacity_users_per_sec * f64::from(r.requests_per_session);
        for p in &r.points {
            data.push(DataPoint {
                series: format!("{}: {name}", p.arm.admission),
                x: p.multiplier,
                y: p.client.goodput_rps / cap,
                cells: cells(doc, transport, p),
            });
        }
    }
    // One line per admission policy and transport; a plan whose arms
    // share a policy (seed 002's full plan) keeps the first arm's.
    let mut seen: Vec<(String, u64)> = Vec::new();
    data.retain(|d| {
        let key = (d.series.clone(), d.x.to_bits());
        !seen.contains(&key) && {
            seen.push(key);
            true
        }
    });
    match line_chart(
        OVERLOAD_PAIR_CHART,
        X_LABEL,
        y_label,
        &to_series(&data),
        false,
    ) {
        Some(svg) => out.push(Chart::new(
            (
                OVERLOAD_PAIR_CHART,
                &format!(
                    "Each transport's goodput (requests of completed sessions per second of \
                     the point's window, client-observed) divided by its own capacity in \
                     requests/s (TCP {:.1}, QUIC {:.1} user sessions/s, x {} requests), \
                     against the offered load as a multiple of that capacity: one line per \
                     admission policy and transport, each the first arm with that policy. \
                     1 is the transport's capacity.",
                    tcp.capacity_users_per_sec,
                    quic.capacity_users_per_sec,
                    tcp.requests_per_session
                ),
            ),
            (X_LABEL, y_label),
            svg,
            data,
        )),
        None => missing.push(format!(
            "{OVERLOAD_PAIR_CHART}: no point of either transport has a finite goodput"
        )),
    }
}

/// Adds the overload charts to `out` (or notes to `missing`) when the
/// document's engine report is an overload report.
pub(crate) fn charts(r: &StudyResults, out: &mut Vec<Chart>, missing: &mut Vec<String>) {
    let Some(report) = r.engine_report_as::<OverloadReport>() else {
        return;
    };
    panel(r, &report, out, missing);
    match report.quic.as_deref() {
        Some(q) => {
            panel(r, q, out, missing);
            paired(r, &report, q, out, missing);
        }
        None if report.transport == "tcp" => missing.push(format!(
            "{OVERLOAD_QUIC_CHART}: this report has no QUIC run beside the TCP one (written \
             before it existed, or by `overload` without `--transport both`)"
        )),
        None => {}
    }
}

/// Whether `r`'s engine report is an overload report (its goodput is
/// drawn here, against multiples of capacity, not by the generic
/// goodput chart).
pub(crate) fn has_report(r: &StudyResults) -> bool {
    r.engine_report_as::<OverloadReport>().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::EngineReport;

    /// The full seed002 run (TCP only, written before the QUIC arm).
    fn recorded() -> StudyResults {
        serde_json::from_str(include_str!(
            "../../../../docs/results/full/seed002-overload/results.json"
        ))
        .unwrap()
    }

    fn titles(c: &[Chart]) -> Vec<&str> {
        c.iter().map(|c| c.title.as_str()).collect()
    }

    #[test]
    fn a_tcp_report_gets_its_panel_and_says_the_quic_one_is_missing() {
        let doc = recorded();
        let report = doc.engine_report_as::<OverloadReport>().unwrap();
        let (mut out, mut missing) = (Vec::new(), Vec::new());
        charts(&doc, &mut out, &mut missing);
        assert_eq!(titles(&out), [OVERLOAD_TCP_CHART]);
        let c = &out[0];
        assert_eq!(c.data.len(), report.points.len());
        // Every point links to its cell, and each column has a value per
        // point: the server-observed sheds are the report's.
        assert!(c.data.iter().all(|d| d.cells.len() == 1), "{:?}", c.data);
        assert!(c.columns.iter().all(|(_, v)| v.len() == c.data.len()));
        let shed = c
            .columns
            .iter()
            .find(|(h, _)| h == "full shed (server)")
            .unwrap();
        let want: Vec<String> = report
            .points
            .iter()
            .map(|p| p.server.full_shed.to_string())
            .collect();
        assert_eq!(shed.1, want);
        assert!(missing[0].starts_with(OVERLOAD_QUIC_CHART), "{missing:?}");
        // The generic goodput chart leaves the overload report to these.
        let (all, missing) = crate::html::charts(&doc);
        assert!(titles(&all).contains(&OVERLOAD_TCP_CHART));
        assert!(
            !missing
                .iter()
                .any(|m| m.starts_with("Goodput against offered load:")),
            "{missing:?}"
        );
    }

    #[test]
    fn a_quic_run_beside_the_tcp_one_gets_its_panel_and_the_pair() {
        let mut doc = recorded();
        let Some(EngineReport::Engine(v)) = doc.engine_report.clone() else {
            panic!("an engine report");
        };
        let mut quic = v.clone();
        quic["transport"] = "h3".into();
        quic["capacity_users_per_sec"] = 100.0.into();
        let mut both = v;
        both["quic"] = quic;
        doc.engine_report = Some(EngineReport::Engine(both));
        let (mut out, mut missing) = (Vec::new(), Vec::new());
        charts(&doc, &mut out, &mut missing);
        assert_eq!(
            titles(&out),
            [OVERLOAD_TCP_CHART, OVERLOAD_QUIC_CHART, OVERLOAD_PAIR_CHART],
            "{missing:?}"
        );
        // The QUIC run has no cells in this document: its points link to
        // none rather than to TCP's.
        assert!(out[1].data.iter().all(|d| d.cells.is_empty()));
        // The pair: one line per admission policy and transport, each
        // point a share of its own transport's capacity.
        let pair = &out[2];
        let r = doc.engine_report_as::<OverloadReport>().unwrap();
        let series: std::collections::BTreeSet<&str> =
            pair.data.iter().map(|d| d.series.as_str()).collect();
        assert_eq!(
            series.into_iter().collect::<Vec<_>>(),
            [
                "off: QUIC",
                "off: TCP",
                "session: QUIC",
                "session: TCP",
                "static: QUIC",
                "static: TCP"
            ]
        );
        let first = &r.points[0];
        let tcp = pair.data.iter().find(|d| d.series == "off: TCP").unwrap();
        assert_eq!(
            tcp.y,
            first.client.goodput_rps
                / (r.capacity_users_per_sec * f64::from(r.requests_per_session))
        );
        let quic = pair.data.iter().find(|d| d.series == "off: QUIC").unwrap();
        assert_eq!(
            quic.y,
            first.client.goodput_rps / (100.0 * f64::from(r.requests_per_session))
        );
    }
}
