//! Hand-built `tlslab experiment` results documents for the report tests:
//! the shape of a seed000-cluster study (policy × reuse × mechanism) and of
//! a breakdown, with invented figures. They test rendering only; the page
//! says it is a hand-built test document.

use serde_json::{Value, json};

fn cell(id: &str, factors: Value, rps: f64, p50_us: u64) -> Value {
    json!({
        "id": id,
        "point": id.trim_end_matches("-r1"),
        "factors": factors,
        "repeat": 1,
        "order": 0,
        "command_line": format!("tlslab cluster --reuse ... # {id}"),
        "started_unix_ms": 0,
        "metrics": {
            "requests_per_s": rps,
            "connections_per_s": rps,
            "window_s": 2.0,
            "requests": (rps * 2.0) as u64,
            "errors": 0,
            "server_cpu_us_per_request": 1e6 / rps,
            "server_busy": 0.9,
            "latency_us": [[50.0, p50_us], [90.0, p50_us * 2], [99.0, p50_us * 3]],
            "handshake_full_us": [[50.0, 900], [90.0, 1400], [99.0, 2500]],
            "handshake_resumed_us": [[50.0, 150], [90.0, 260], [99.0, 500]],
            "connect_p50_us": 40,
            "ttfb_p50_us": 300,
            "full_bytes_out": 600.0,
            "full_bytes_in": 2400.0,
            "full_round_trips": 1.0,
            "resumed_bytes_out": 700.0,
            "resumed_bytes_in": 400.0,
            "resumed_round_trips": 1.0,
            "reuse_achieved": 0.5,
            "client_busy": 0.4,
            "client_saturated": false,
            "version": "TLSv1.3",
            "group": "X25519",
            "suite": "TLS13_AES_128_GCM_SHA256"
        }
    })
}

/// A cluster study document: two mechanisms, a blind and a session-aware
/// policy, four reuse levels; two comparisons (one resting on every cell)
/// and a breakdown engine report.
pub fn cluster_document() -> Value {
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
                cells.push(cell(
                    &format!("{mech}-{policy}-reuse{reuse}-r1"),
                    json!({"mechanism": mech, "policy": policy, "reuse": reuse}),
                    rps,
                    2000,
                ));
            }
        }
    }
    let all_ids: Vec<Value> = cells.iter().map(|c| c["id"].clone()).collect();
    json!({
        "kind": "tlslab-experiment",
        "schema_version": 1,
        "study": "seed000-cluster",
        "title": "seed000-cluster: hand-built test document (invented figures)",
        "seed": "seed 000, Fig. 9",
        "quick": true,
        "command_line": ["tlslab", "experiment", "run", "seed000-cluster", "--quick"],
        "environment": {
            "cpu_model": "test", "cores": 2, "kernel": "Linux", "hostname": "h",
            "tlslab_version": "0.1.0", "tls_library": "rustls", "placement": "pinned",
            "loadavg_1m": 0.5
        },
        "matrix": {"policy": ["round-robin", "session"]},
        "started_unix_ms": 0,
        "finished_unix_ms": 1,
        "complete": true,
        "cells": cells,
        "comparisons": [{
            "quantity": "cluster gain at 80 % reuse, session-aware over blind",
            "paper": "3x",
            "source": "seed 000 §5, Fig. 9",
            "today": 3.8,
            "unit": "x",
            "measured": "client-observed req/s ratio",
            "cells": ["tls13-ticket-session-reuse0.8-r1", "tls13-ticket-round-robin-reuse0.8-r1"],
            "reason": "hardware; TLS 1.3 tickets"
        }, {
            // A row resting on every cell, as seed001-breakdown's rests on 88.
            "quantity": "mean throughput of every cell",
            "paper": "-",
            "source": "test",
            "today": 1000.0,
            "unit": "req/s",
            "measured": "client-observed",
            "cells": all_ids,
            "reason": "a row over many cells"
        }],
        "engine_report": breakdown_report()
    })
}

/// A breakdown report as `tlslab breakdown --json` wrote it (the full
/// seed001 run's): the report's cost-table chart reads the whole typed
/// report, not a hand-picked part of it.
fn breakdown_report() -> Value {
    let doc: Value = serde_json::from_str(include_str!(
        "../../docs/results/full/seed001-breakdown/results.json"
    ))
    .expect("seed001 results");
    doc["engine_report"].clone()
}
