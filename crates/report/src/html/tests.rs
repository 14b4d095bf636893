//! Tests of the report's charts, page and Markdown.

use super::svg::{legend_place, legend_size, tick};
use super::*;
use crate::study::{Cell, CellMetrics, StudyResults};
use crate::study::{Comparison, Curve};

fn cell(id: &str, point: &str, factors: &[(&str, &str)], rps: f64, p50_us: u64) -> Cell {
    Cell {
        id: id.into(),
        point: point.into(),
        factors: factors
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        repeat: 1,
        order: 0,
        command_line: format!("tlslab load https://127.0.0.1:1/ # {id}"),
        started_unix_ms: 0,
        metrics: CellMetrics {
            requests_per_s: rps,
            connections_per_s: rps,
            window_s: 2.0,
            requests: (rps * 2.0) as u64,
            server_cpu_us_per_request: 1e6 / rps,
            latency_us: vec![(50.0, p50_us), (90.0, p50_us * 2), (99.0, p50_us * 4)],
            handshake_full_us: vec![(50.0, 900), (90.0, 1500), (99.0, 3000), (99.9, 5000)],
            handshake_resumed_us: vec![(50.0, 200), (90.0, 300), (99.0, 700)],
            ..CellMetrics::default()
        },
        load: None,
    }
}

fn doc(study: &str, cells: Vec<Cell>) -> StudyResults {
    let mut d = StudyResults::imported(study, "hand-built test document", cells);
    d.quick = true;
    d.command_line = vec!["tlslab".into(), "experiment".into()];
    d
}

/// A seed000-reuse-like document: reuse × clients × 2 repeats, plus
/// open-loop cells, a breakdown, a comparison and a model curve.
pub(crate) fn sample_study() -> StudyResults {
    let mut cells = Vec::new();
    for reuse in ["0", "0.5", "1"] {
        for clients in ["4", "16"] {
            for rep in 1..=2 {
                let point = format!("reuse{reuse}-c{clients}");
                let base = 1000.0 * (1.0 + reuse.parse::<f64>().unwrap() * 3.0);
                let rps = base * if clients == "16" { 1.5 } else { 1.0 } + rep as f64;
                let mut c = cell(
                    &format!("{point}-r{rep}"),
                    &point,
                    &[("reuse", reuse), ("clients", clients), ("version", "1.3")],
                    rps,
                    if clients == "16" { 4000 } else { 1500 },
                );
                c.repeat = rep;
                cells.push(c);
            }
        }
    }
    for rate in ["100", "200", "400"] {
        cells.push(cell(
            &format!("rate{rate}-r1"),
            &format!("rate{rate}"),
            &[("rate", rate)],
            rate.parse::<f64>().unwrap().min(300.0),
            1000,
        ));
    }
    let mut d = doc("seed000-reuse", cells);
    d.comparisons.push(Comparison {
        quantity: "throughput gain at 100 % reuse".into(),
        paper: "about 2.5x".into(),
        source: "seed 000 Fig. 4".into(),
        today: Some(4.0),
        unit: "x".into(),
        measured: "client-observed req/s ratio".into(),
        cells: vec!["reuse1-c16-r1".into(), "reuse0-c16-r1".into()],
        reason: "ECDHE instead of RSA key transport; AES-NI".into(),
    });
    // A breakdown report as `tlslab breakdown` wrote it (seed001's).
    let seed001: StudyResults = serde_json::from_str(include_str!(
        "../../../../docs/results/full/seed001-breakdown/results.json"
    ))
    .unwrap();
    d.engine_report = seed001.engine_report;
    d.curves.push(Curve {
        name: "300/(1-ρ)".into(),
        chart: "Response time model".into(),
        x: "ρ".into(),
        y: "ms".into(),
        points: vec![(0.1, 333.0), (0.5, 600.0), (0.9, 3000.0)],
    });
    d
}

/// A seed000-cluster-like document: policy × reuse × mechanism.
pub(crate) fn sample_cluster() -> StudyResults {
    let mut cells = Vec::new();
    for mech in ["tls12-id", "tls13-ticket"] {
        for policy in ["round-robin", "session"] {
            for reuse in ["0", "0.4", "0.8", "1"] {
                let r: f64 = reuse.parse().unwrap();
                let rps = if policy == "session" {
                    3000.0 * (1.0 + 5.0 * r)
                } else {
                    3000.0 * (1.0 + 0.3 * r)
                };
                let point = format!("{mech}-{policy}-reuse{reuse}");
                cells.push(cell(
                    &format!("{point}-r1"),
                    &point,
                    &[("mechanism", mech), ("policy", policy), ("reuse", reuse)],
                    rps,
                    2000,
                ));
            }
        }
    }
    doc("seed000-cluster", cells)
}

/// Every `href="#x"` has an `id="x"`, and nothing is fetched.
pub(crate) fn check_links(html: &str) {
    let ids: std::collections::HashSet<&str> = html
        .split("id=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .collect();
    let mut n = 0;
    for attr in ["href=\"", "src=\""] {
        for s in html.split(attr).skip(1) {
            let v = s.split('"').next().unwrap();
            if let Some(anchor) = v.strip_prefix('#') {
                assert!(ids.contains(anchor), "link #{anchor} has no target");
                n += 1;
            } else {
                assert!(v.starts_with("data:"), "external reference {attr}{v}");
            }
        }
    }
    assert!(n > 0, "no internal links at all");
    for bad in [
        "<script",
        "<link rel=\"stylesheet",
        "@import",
        "url(http",
        "<iframe",
        "<img",
    ] {
        assert!(!html.contains(bad), "the page contains {bad}");
    }
}

#[test]
fn study_report_has_every_chart_and_resolving_links() {
    let d = sample_study();
    let (charts, missing) = charts(&d);
    let titles: Vec<&str> = charts.iter().map(|c| c.title.as_str()).collect();
    for want in [
        "Latency against throughput, per reuse level",
        "Throughput against session reuse",
        "Server CPU per request against session reuse",
        "Handshake percentiles",
        "Breakdown",
        "Goodput against offered load",
        "Response time model",
    ] {
        assert!(titles.contains(&want), "{want} missing from {titles:?}");
    }
    assert!(
        missing.iter().any(|m| m.starts_with("cluster figure")),
        "{missing:?}"
    );
    for c in &charts {
        assert!(c.svg.starts_with("<svg"), "{}", c.title);
        assert!(!c.data.is_empty(), "{}", c.title);
    }
    // Throughput against reuse: best client count (16) per reuse level,
    // median of the two repeats, linked to both.
    let thr = charts
        .iter()
        .find(|c| c.title == "Throughput against session reuse")
        .unwrap();
    let at0 = thr.data.iter().find(|p| p.x == 0.0).unwrap();
    assert_eq!(at0.y, 1501.5);
    assert_eq!(at0.cells, vec!["reuse0-c16-r1", "reuse0-c16-r2"]);
    let html = render_html(std::slice::from_ref(&d));
    check_links(&html);
    for c in &d.cells {
        assert!(html.contains(&format!("id=\"cell-{}\"", c.id)), "{}", c.id);
    }
    assert!(html.contains("Appendix: cells"));
    assert!(html.contains("ECDHE instead of RSA key transport"));
    assert!(html.contains("about 2.5x"));
    assert_eq!(html.matches("<svg").count(), charts.len());
}

#[test]
fn cluster_document_draws_blind_against_session_aware_per_mechanism() {
    let d = sample_cluster();
    let (charts, missing) = charts(&d);
    let cluster: Vec<&Chart> = charts
        .iter()
        .filter(|c| c.title.starts_with("Cluster throughput"))
        .collect();
    assert_eq!(cluster.len(), 2, "{missing:?}");
    assert!(cluster[0].title.contains("tls12-id"));
    let series: Vec<&str> = cluster[0].data.iter().map(|p| p.series.as_str()).collect();
    assert!(series.contains(&"round-robin (blind)"));
    assert!(series.contains(&"session (session-aware)"));
    let s100 = cluster[0]
        .data
        .iter()
        .find(|p| p.series.starts_with("session") && p.x == 100.0)
        .unwrap();
    assert_eq!(s100.y, 18000.0);
    assert_eq!(s100.cells, vec!["tls12-id-session-reuse1-r1"]);
    assert!(svg_has_lines(&cluster[0].svg));
    // The generic throughput-against-reuse chart is not drawn for it.
    assert!(
        !charts
            .iter()
            .any(|c| c.title == "Throughput against session reuse")
    );
    // Two documents: anchors are prefixed per document.
    let html = render_html(&[sample_study(), d]);
    check_links(&html);
    assert!(html.contains("id=\"d1-cell-tls13-ticket-session-reuse1-r1\""));
}

/// A `cluster --h3` study (seed000-cluster-h3): the QUIC arms, one chart
/// titled with the transport, each arm a line.
#[test]
fn quic_cluster_document_draws_every_arm_over_quic() {
    let mut cells = Vec::new();
    for (policy, gain) in [
        ("blind", 0.3),
        ("cid", 0.3),
        ("session", 1.0),
        ("blind+shared-ticket-keys", 1.0),
    ] {
        for reuse in ["0", "0.8"] {
            let r: f64 = reuse.parse().unwrap();
            let point = format!("tls13-ticket-{}-reuse{reuse}", policy.replace('+', "-"));
            let factors = [
                ("mechanism", "tls13-ticket"),
                ("policy", policy),
                ("reuse", reuse),
                ("transport", "quic"),
            ];
            let rps = 1000.0 * (1.0 + gain * r);
            cells.push(cell(&format!("{point}-r1"), &point, &factors, rps, 2000));
        }
    }
    let (charts, missing) = charts(&doc("seed000-cluster-h3", cells));
    let c: Vec<&Chart> = charts
        .iter()
        .filter(|c| c.title.starts_with("Cluster throughput"))
        .collect();
    assert_eq!(c.len(), 1, "{missing:?}");
    assert!(
        c[0].title.contains("tls13-ticket, over QUIC"),
        "{}",
        c[0].title
    );
    let mut series: Vec<&str> = c[0].data.iter().map(|p| p.series.as_str()).collect();
    series.sort_unstable();
    series.dedup();
    assert_eq!(
        series,
        [
            "blind (4-tuple hash)",
            "blind+shared-ticket-keys",
            "cid (QUIC-LB; blind to sessions)",
            "session (session-aware)",
        ]
    );
    assert!(svg_has_lines(&c[0].svg));
    // Its arms are not quic-vs-tcp's patterns: no CPU-per-pattern chart
    // made of them, declared or not.
    assert!(
        charts
            .iter()
            .all(|c| !c.title.starts_with("Server CPU per request")),
        "{:?}",
        charts.iter().map(|c| &c.title).collect::<Vec<_>>()
    );
}

fn svg_has_lines(svg: &str) -> bool {
    svg.contains("<polyline") || svg.contains("<path")
}

#[test]
fn absent_data_is_a_note_not_a_chart() {
    let d = doc("empty", vec![]);
    let (charts, missing) = charts(&d);
    assert!(charts.is_empty());
    assert!(missing.len() >= 5, "{missing:?}");
    let html = render_html(&[d]);
    assert!(html.contains("Charts not drawn"));
    assert!(!html.contains("<svg"));
    let md = render_markdown(&[sample_study()]);
    assert!(md.contains("## Appendix: cells"));
    assert!(md.contains("<a id=\"cell-reuse0-c4-r1\"></a>"));
    assert!(md.contains("(#cell-reuse1-c16-r1)"));
}

#[test]
fn line_chart_is_svg_with_the_series_name() {
    let svg = line_chart(
        "t",
        "x",
        "y",
        &[("alpha".into(), vec![(1.0, 2.0), (2.0, 3.0)])],
        false,
    )
    .unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..50.min(svg.len())]);
    assert!(svg.contains("alpha"));
    assert!(svg.contains("<polyline") || svg.contains("<path"));
    assert!(line_chart("t", "x", "y", &[("e".into(), vec![])], false).is_none());
    let log = line_chart(
        "t",
        "x",
        "y",
        &[("l".into(), vec![(2.0, 1.0), (100.0, 5.0)])],
        true,
    );
    assert!(log.is_some());
}

#[test]
fn bar_chart_draws_bars() {
    let svg = bar_chart(
        "b",
        "%",
        &[
            ("sig".into(), 40.0, 3.0),
            ("kx".into(), 20.0, f64::INFINITY),
        ],
    )
    .unwrap();
    assert!(svg.contains("<rect"));
    assert!(svg.contains("sig"));
}

#[test]
fn legends_avoid_points_and_ticks_have_no_needless_decimals() {
    // Plotters' upper-right legend box of a 600×300 area, and a point in it.
    let size = legend_size(&["round-robin (blind)", "session (session-aware)"]);
    let upper_right = (600 - size.0 - 5, 5);
    let inside = (upper_right.0 + 10, upper_right.1 + 10);
    let place = legend_place(size, (600, 300), &[inside]).unwrap();
    assert_ne!(place, upper_right);
    // Points in every place: none is free, so line_chart raises the y axis.
    let corners = [
        (590, 10),
        (10, 10),
        (590, 290),
        (10, 290),
        (590, 150),
        (10, 150),
        (300, 10),
    ];
    assert_eq!(legend_place(size, (600, 300), &corners), None);
    let pts = vec![
        (0.0, 0.0),
        (0.0, 100.0),
        (100.0, 0.0),
        (100.0, 100.0),
        (50.0, 100.0),
    ];
    let many: Vec<Series> = (0..6)
        .map(|i| (format!("series {i}"), pts.clone()))
        .collect();
    assert!(line_chart("t", "x", "y", &many, false).is_some());
    assert_eq!(tick(&1000.0), "1000");
    assert_eq!(tick(&2.5), "2.5");
    assert_eq!(tick(&-0.0), "0");
}

#[test]
fn the_pq_sweep_charts_relay_and_packet_side_by_side() {
    let mut cells = Vec::new();
    for kind in ["relay", "packet"] {
        for rtt in ["20", "100"] {
            for chain in ["ecdsa-p256", "mldsa87"] {
                let id = format!("pq-rtt{rtt}-{chain}-{kind}-r1");
                let mut c = cell(
                    &id,
                    id.trim_end_matches("-r1"),
                    &[
                        ("sweep", "pq"),
                        ("chain", chain),
                        ("rtt_ms", rtt),
                        ("path", kind),
                    ],
                    10.0,
                    1000,
                );
                c.metrics.connect_p50_us = Some(if kind == "packet" { 100_000 } else { 200 });
                c.metrics.ttfb_p50_us = Some(100_000);
                cells.push(c);
            }
        }
    }
    // A relay cell from before `--path` (no `path` factor) is the relay's.
    let mut old = cells[0].clone();
    old.id = "pq-rtt50-ecdsa-p256-r1".into();
    old.factors.remove("path");
    old.factors.insert("rtt_ms".into(), "50".into());
    cells.push(old);
    let d = doc("seed004-handshake", cells);
    let (charts, _) = charts(&d);
    let ttfb: Vec<&Chart> = charts
        .iter()
        .filter(|c| c.title.starts_with("Time to first byte"))
        .collect();
    assert_eq!(
        ttfb.len(),
        2,
        "{:?}",
        ttfb.iter().map(|c| &c.title).collect::<Vec<_>>()
    );
    assert!(ttfb[0].title.ends_with("relay") && ttfb[1].title.ends_with("packet-level path"));
    assert!(ttfb[0].caption.contains("Trust") && ttfb[1].caption.contains("Trust"));
    let relay_points = ttfb[0]
        .data
        .iter()
        .filter(|p| p.series == "ecdsa-p256 (relay)")
        .count();
    assert_eq!(relay_points, 3);
    assert!(ttfb[1].data.iter().all(|p| !p.series.contains("(relay)")));
    // Without QUIC cells: no QUIC chart.
    assert!(!charts.iter().any(|c| c.title.contains("QUIC")));
}

#[test]
fn the_pq_sweep_charts_quic_beside_tcp() {
    let quic_load = |first_byte_us: u64| {
        let mut r = crate::empty_report(1.0);
        r.transport = Some(crate::quic::Transport {
            name: "quic".into(),
            full: crate::quic::TransportPhase {
                count: 4,
                first_byte_p50_us: Some(first_byte_us),
                bytes_in: Some(12728.0),
                bytes_out: Some(3600.0),
                ..Default::default()
            },
            ..Default::default()
        });
        crate::study::Verbatim::new(r).unwrap()
    };
    let mut cells = Vec::new();
    for transport in ["tcp", "quic"] {
        for chain in ["ecdsa-p256", "mldsa44"] {
            let mut f = vec![
                ("sweep", "pq"),
                ("chain", chain),
                ("compression", "none"),
                ("kx", "X25519MLKEM768"),
            ];
            if transport == "quic" {
                f.push(("transport", "quic"));
            }
            let id = format!("pq-{transport}-{chain}-r1");
            let mut c = cell(&id, id.trim_end_matches("-r1"), &f, 2000.0, 1000);
            c.metrics.full_bytes_in = Some(if transport == "quic" {
                12728.0
            } else {
                11886.0
            });
            c.metrics.full_bytes_out = Some(1500.0);
            cells.push(c);
            // At 100 ms RTT over the packet path: ML-DSA-44 costs QUIC an
            // extra round trip (2 RTT handshake), not TCP.
            let extra = transport == "quic" && chain == "mldsa44";
            f.extend([("rtt_ms", "100"), ("path", "packet")]);
            let id = format!("pq-{transport}-rtt100-{chain}-packet-r1");
            let mut c = cell(&id, id.trim_end_matches("-r1"), &f, 10.0, 1000);
            let hs = if extra { 203_000 } else { 101_000 };
            c.metrics.handshake_full_us = vec![(50.0, hs)];
            c.metrics.connect_p50_us = Some(100_000);
            c.metrics.ttfb_p50_us = Some(100_000);
            if transport == "quic" {
                c.load = Some(quic_load(hs + 100_000));
            }
            cells.push(c);
        }
    }
    let d = doc("seed004-handshake", cells);
    let (charts, missing) = charts(&d);
    let find = |t: &str| {
        charts
            .iter()
            .find(|c| c.title.starts_with(t))
            .unwrap_or_else(|| panic!("no chart {t}: {missing:?}"))
    };
    let bytes =
        find("Bytes per full TLS 1.3 handshake, X25519MLKEM768, certificate compression none");
    let bar = |c: &Chart, s: &str| c.data.iter().find(|p| p.series == s).map(|p| p.y);
    assert_eq!(bar(bytes, "mldsa44"), Some(11886.0 + 1500.0));
    assert_eq!(bar(bytes, "mldsa44 over QUIC"), Some(12728.0 + 1500.0));
    let cpu = find("Server CPU per full handshake");
    assert_eq!(bar(cpu, "ecdsa-p256 over QUIC: all"), Some(500.0));
    // TTFB: TCP's chart has no QUIC series; QUIC's has only QUIC series,
    // from the transport section (first byte), beside seed 004's 4 RTTs.
    let tcp = find("Time to first byte against RTT, TLS 1.3, X25519MLKEM768, packet-level path");
    assert!(tcp.data.iter().all(|p| !p.series.contains("QUIC")));
    assert_eq!(bar(tcp, "mldsa44 (packet)"), Some(301.0));
    let quic = find("Time to first byte against RTT over QUIC");
    assert_eq!(bar(quic, "mldsa44 over QUIC (packet)"), Some(303.0));
    assert_eq!(bar(quic, "ecdsa-p256 over QUIC (packet)"), Some(201.0));
    assert_eq!(bar(quic, "seed 004: 4 RTTs (SSL over TCP)"), Some(400.0));
    // Round trips at 100 ms: QUIC's extra one for ML-DSA-44 only.
    let rt = find("Full handshake in round trips at 100 ms RTT");
    assert_eq!(bar(rt, "mldsa44 over QUIC"), Some(2.03));
    assert_eq!(bar(rt, "mldsa44"), Some(1.01));
    assert_eq!(bar(rt, "ecdsa-p256 over QUIC"), Some(1.01));
}

#[test]
fn quic_vs_tcp_draws_cpu_bars_and_ttfb_beside_its_arithmetic_curves() {
    let mut cells = Vec::new();
    for t in ["tcp", "quic"] {
        for (point, f, v) in [
            ("reuse0", "reuse", "0"),
            ("reuse1", "reuse", "1"),
            ("keepalive", "requests_per_conn", "0"),
        ] {
            let id = format!("{t}-{point}-r1");
            cells.push(cell(
                &id,
                &format!("{t}-{point}"),
                &[("transport", t), (f, v)],
                500.0,
                100,
            ));
        }
        for rtt in ["20", "50"] {
            let id = format!("{t}-full-rtt{rtt}-r1");
            let ms: u64 = rtt.parse().unwrap();
            let n = if t == "tcp" { 3 } else { 2 };
            cells.push(cell(
                &id,
                &id[..id.len() - 3],
                &[("transport", t), ("kind", "full"), ("rtt_ms", rtt)],
                1.0,
                n * ms * 1000 + 500,
            ));
        }
    }
    let mut r = doc("quic-vs-tcp", cells);
    r.curves.push(Curve {
        name: "arithmetic: 2 RTT (QUIC full)".into(),
        chart: QUIC_TTFB_CHART.into(),
        x: "round-trip time, ms".into(),
        y: "ms".into(),
        points: vec![(20.0, 40.0), (50.0, 100.0)],
    });
    let (charts, _) = charts(&r);
    let cpu = charts
        .iter()
        .find(|c| c.title.starts_with("Server CPU per request, HTTP/3"))
        .expect("the CPU chart");
    assert_eq!(cpu.data.len(), 6, "{:?}", cpu.data);
    assert!(cpu.data.iter().any(|d| d.series == "keep-alive: QUIC"));
    let ttfb: Vec<&Chart> = charts
        .iter()
        .filter(|c| c.title == QUIC_TTFB_CHART)
        .collect();
    assert_eq!(
        ttfb.len(),
        1,
        "the arithmetic is drawn with the measured points, once"
    );
    let series: Vec<&str> = ttfb[0].data.iter().map(|d| d.series.as_str()).collect();
    assert!(series.contains(&"QUIC full (measured)"), "{series:?}");
    assert!(
        series.contains(&"arithmetic: 2 RTT (QUIC full)"),
        "{series:?}"
    );
    let tcp50 = ttfb[0]
        .data
        .iter()
        .find(|d| d.series == "TCP+TLS 1.3 full (measured)" && d.x == 50.0)
        .unwrap();
    assert!((tcp50.y - 150.5).abs() < 1e-9, "{tcp50:?}");
}

#[test]
fn seed003s_table2_is_charted_against_rtt_with_its_http3_cells() {
    let mut cells = Vec::new();
    for rtt in ["10", "50"] {
        let r: u64 = rtt.parse().unwrap();
        for (arm, version, h3) in [
            ("tls1.2", "1.2", false),
            ("tls1.3", "1.3", false),
            ("h3", "1.3", true),
        ] {
            let id = format!("rtt{rtt}ms-{arm}-packet-r1");
            let mut f = vec![("rtt_ms", rtt), ("version", version), ("path", "packet")];
            if h3 {
                f.push(("transport", "h3"));
            }
            let mut c = cell(&id, &id[..id.len() - 3], &f, 1.0, r * 1000);
            let m = &mut c.metrics;
            m.latency_us = vec![(50.0, r * 1000)];
            m.handshake_full_us = vec![(50.0, r * 1000 * if version == "1.2" { 2 } else { 1 })];
            m.handshake_resumed_us = vec![(50.0, r * 1000)];
            m.connect_p50_us = (!h3).then_some(r * 1000);
            m.ttfb_p50_us = h3.then_some(r * 1000 + 500);
            cells.push(c);
        }
    }
    // A relay cell: its T is local, so it is not drawn.
    let mut relay = cells[0].clone();
    relay.id = "rtt10ms-tls1.2-r1".into();
    relay.factors.insert("path".into(), "relay".into());
    cells.push(relay);
    let (charts, missing) = charts(&doc("seed003-table2", cells));
    let t2 = charts
        .iter()
        .find(|c| c.title == TABLE2_CHART)
        .expect("the Table 2 chart");
    let y = |series: &str, x: f64| {
        t2.data
            .iter()
            .find(|d| d.series == series && d.x == x)
            .map(|d| (d.y, d.cells.clone()))
            .unwrap_or_else(|| panic!("no {series} at {x}: {:?}", t2.data))
    };
    // TLS 1.2 at 50 ms: T 50 + Snc 100 + H 50; C = 50 + 50 + 50.
    assert_eq!(y("TLS 1.2 W (new)", 50.0).0, 200.0);
    assert_eq!(y("TLS 1.2 C (cached)", 50.0).0, 150.0);
    // HTTP/3: no connect.
    assert_eq!(y("HTTP/3 W (new)", 50.0).0, 100.0);
    assert_eq!(y("HTTP/3 0-RTT GET first byte", 10.0).0, 10.5);
    assert_eq!(
        y("TLS 1.2 W (new)", 10.0).1,
        vec!["rtt10ms-tls1.2-packet-r1".to_string()],
        "the relay cell is not drawn"
    );
    assert!(
        t2.data
            .iter()
            .all(|d| !d.series.starts_with("TLS 1.3 0-RTT")),
        "{:?}",
        t2.data
    );
    // The quic-vs-tcp charts leave seed003's HTTP/3 cells alone.
    assert!(
        !charts.iter().any(|c| c.title == QUIC_TTFB_CHART),
        "{missing:?}"
    );
    assert!(
        !missing.iter().any(|m| m.contains(QUIC_TTFB_CHART)),
        "{missing:?}"
    );
    // Without packet-path cells: a note, not a chart.
    let (charts, missing) = charts_of_relay_only();
    assert!(!charts.iter().any(|c| c.title == TABLE2_CHART));
    assert!(
        missing.iter().any(|m| m.contains(TABLE2_CHART)),
        "{missing:?}"
    );
}

fn charts_of_relay_only() -> (Vec<Chart>, Vec<String>) {
    let c = cell(
        "rtt10ms-tls1.3-r1",
        "rtt10ms-tls1.3",
        &[("rtt_ms", "10"), ("version", "1.3"), ("path", "relay")],
        1.0,
        1000,
    );
    charts(&doc("seed003-table2", vec![c]))
}
