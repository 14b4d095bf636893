//! Tests of the capacity models (`capacity.rs`).

use super::*;

#[test]
fn erlang_c_known_values() {
    // One server: C = ρ.
    assert!((erlang_c(1, 0.5) - 0.5).abs() < 1e-12);
    // Two servers, a = 1 (ρ = 0.5): C = 1/3.
    assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(erlang_c(2, 2.5), 1.0);
}

#[test]
fn mm1_is_s_over_one_minus_rho() {
    assert!((mmc_response(1, 2.0, 0.5) - 4.0).abs() < 1e-12);
    assert!(mmc_response(1, 2.0, 1.0).is_infinite());
    assert!((seed004_response(300.0, 0.5) - 600.0).abs() < 1e-12);
}

#[test]
fn plan_costs_and_cores() {
    let costs = UnitCosts::from_cells(1100.0, 300.0, 100.0);
    assert_eq!(costs.full_handshake_us, 1000.0);
    assert_eq!(costs.resumed_handshake_us, 200.0);
    let p = plan(
        costs,
        Mix {
            reuse: 0.5,
            requests_per_conn: 4.0,
        },
        0.5,
        Some(10_000.0),
        None,
        0.0,
    )
    .unwrap();
    // 0.5·1000 + 0.5·200 + 4·100 = 1000 µs per connection.
    assert!((p.cpu_per_connection_us - 1000.0).abs() < 1e-9);
    assert!((p.requests_per_s_per_core_max - 4000.0).abs() < 1e-6);
    // 10 000 req/s at 50 % of 4000 per core → 5 cores.
    assert_eq!(p.cores_needed, Some(5));
    let with_latency = plan(costs, p.mix, 0.9, Some(10_000.0), Some(0.26), 0.0).unwrap();
    // 0.25 ms service: M/M/c must keep the mean ≤ 0.26 ms, which needs
    // more than the utilisation bound's 3 cores.
    assert!(with_latency.cores_needed.unwrap() > 3);
}

#[test]
fn md1_simulation_matches_pollaczek_khinchine() {
    // M/D/1, s = 100: mean time in system s + ρs/(2(1−ρ)).
    for rho in [0.5, 0.7, 0.9] {
        let v = mg1_fcfs_sojourns(&[(1.0, 100.0)], rho, 400_000, 7);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let want = 100.0 + rho * 100.0 / (2.0 * (1.0 - rho));
        assert!(
            (mean - want).abs() / want < 0.03,
            "ρ {rho}: {mean} vs {want}"
        );
    }
    // At ρ = 0.5 more than half the arrivals find the server idle: p50 = s.
    let v = mg1_fcfs_sojourns(&[(1.0, 100.0)], 0.5, 100_000, 7);
    assert_eq!(quantile(&v, 0.5), 100.0);
    assert!(quantile(&v, 0.99) > 200.0);
    assert!(mg1_fcfs_sojourns(&[(1.0, 100.0)], 1.0, 10, 1).is_empty());
    assert!(quantile(&[], 0.5).is_nan());
}

#[test]
fn service_mix_weights_full_and_resumed() {
    let c = UnitCosts {
        full_handshake_us: 1000.0,
        resumed_handshake_us: 100.0,
        request_us: 50.0,
    };
    let m = Mix {
        reuse: 0.25,
        requests_per_conn: 2.0,
    };
    assert_eq!(service_mix(&c, &m), vec![(0.75, 1100.0), (0.25, 200.0)]);
    let p = plan(c, m, 0.5, Some(1000.0), None, 2.0).unwrap();
    // 0.75·1000 + 0.25·100 + 2·50 = 875 µs per connection, 437.5 per request.
    assert_eq!(p.cpu_per_connection_us, 875.0);
    assert_eq!(p.cpu_per_request_us, 437.5);
    assert_eq!(p.handshake_cpu_per_request_us, 387.5);
    // 1e6/437.5 = 2285.7 req/s per core; at 50 %: 1142.9; 1000 req/s → 1 core.
    assert!((p.requests_per_s_per_core - 1e6 / 437.5 * 0.5).abs() < 1e-9);
    assert_eq!(p.cores_needed, Some(1));
    // Seed 004's form at ρ = 0.5: 2 ms base + 0.05 ms request + 0.3875/(0.5).
    let (_, at50) = p.seed004_curve[9];
    assert!((at50 - (2.0 + 0.05 + 0.775)).abs() < 1e-9, "{at50}");
    // M/M/1 at 0.5: 2 + 0.4375/0.5.
    let (_, mm) = p.mmc_curve[9];
    assert!((mm - (2.0 + 0.875)).abs() < 1e-9, "{mm}");
}

#[test]
fn costs_from_a_lab_report_and_a_results_document() {
    let lab = serde_json::json!({"schema_version": 1, "cells": [
        {"mode": "tls_full", "version": "TLSv1.3", "key": "rsa2048", "server_cpu_us_per_request": 1300.0},
        {"mode": "tls_resumed", "version": "TLSv1.3", "key": "rsa2048", "server_cpu_us_per_request": 160.0},
        {"mode": "tls_keep_alive", "version": "TLSv1.3", "key": "rsa2048", "server_cpu_us_per_request": 40.0},
        {"mode": "tls_full", "version": "TLSv1.2", "key": "rsa2048", "server_cpu_us_per_request": 9999.0},
        {"mode": "plain_new_conn", "version": null, "key": null, "server_cpu_us_per_request": 30.0}
    ]});
    let c = costs_from_json(&lab, "1.3", "rsa2048", None).unwrap();
    assert!((c.costs.full_handshake_us - 1260.0).abs() < 1e-6, "{c:?}");
    assert!((c.costs.resumed_handshake_us - 120.0).abs() < 1e-6);
    assert!((c.costs.request_us - 40.0).abs() < 1e-6);
    assert!(c.how.contains("lab --json"));
    let e = costs_from_json(&lab, "1.3", "ecdsa-p256", None).unwrap_err();
    assert!(e.to_string().contains("TLS 1.3 rsa2048"), "{e}");
    // A results document at one request per connection and three reuse
    // levels: needs --request-us, then fits the rest exactly.
    let cell = |id: &str, reuse: &str, cpu: f64| {
        serde_json::json!({
            "id": id, "factors": {"reuse": reuse, "version": "1.3", "key": "rsa2048"},
            "metrics": {"server_cpu_us_per_request": cpu}
        })
    };
    let doc = serde_json::json!({"kind": "tlslab-experiment", "cells": [
        cell("a", "0", 1040.0), cell("b", "0.5", 590.0), cell("c", "1", 140.0)
    ]});
    let e = costs_from_json(&doc, "1.3", "rsa2048", None).unwrap_err();
    assert!(e.to_string().contains("--request-us"), "{e}");
    let c = costs_from_json(&doc, "TLSv1.3", "rsa2048", Some(40.0)).unwrap();
    assert!((c.costs.full_handshake_us - 1000.0).abs() < 1e-6, "{c:?}");
    assert!((c.costs.resumed_handshake_us - 100.0).abs() < 1e-6);
    assert!(costs_from_json(&serde_json::json!({"x": 1}), "1.3", "rsa2048", None).is_err());
}

#[test]
fn plan_rejects_bad_input() {
    let c = UnitCosts::from_cells(10.0, 5.0, 1.0);
    let m = Mix {
        reuse: 1.5,
        requests_per_conn: 1.0,
    };
    assert!(plan(c, m, 0.5, None, None, 0.0).is_err());
    let m = Mix {
        reuse: 0.5,
        requests_per_conn: 1.0,
    };
    assert!(plan(c, m, 1.0, None, None, 0.0).is_err());
    assert!(plan(c, m, 0.7, None, None, 0.0).is_ok());
}
