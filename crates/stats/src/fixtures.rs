//! Sample records and a sample report, for the tests of this crate and of
//! the renderers (`tlslab-report`'s, through the `fixtures` feature).

use crate::model::{
    ConfigEcho, CpuUsage, CryptoPerHandshake, Ecommerce, Http, LoadReport, OpenLoop, Replay,
    Window, build_report,
};
use crate::record::{EarlyData, HandshakeKind, HandshakeRecord, RequestRecord};
use crate::stats::Stats;

/// Request `i` of `client`: its handshake of `kind` if given, a 404 on
/// every tenth.
pub fn record(client: u32, i: u64, kind: Option<HandshakeKind>) -> RequestRecord {
    RequestRecord {
        t_start_us: i * 10,
        client,
        conn: i,
        req_on_conn: 0,
        target: 0,
        status: Some(if i % 10 == 9 { 404 } else { 200 }),
        error: (i % 10 == 9).then(|| "http_404".to_string()),
        connect_us: Some(100 + i),
        handshake: kind.map(|kind| HandshakeRecord {
            duration_us: 1000 + i,
            kind,
            hrr: false,
            offered: kind == HandshakeKind::Resumed,
            version: "TLSv1.3".into(),
            suite: "TLS13_AES_128_GCM_SHA256".into(),
            group: "x25519".into(),
            bytes_out: 500,
            bytes_in: if kind == HandshakeKind::Full {
                2000
            } else {
                400
            },
            round_trips: 1,
            early_data: EarlyData::NotSent,
            wire: None,
        }),
        ttfb_us: Some(200 + i),
        transfer_us: Some(50),
        total_us: 2000 + i,
        body_bytes: 1024,
        retry: i % 10 == 9,
    }
}

/// A report of 40 requests (half full handshakes, half resumed) with every
/// optional section filled in.
pub fn report() -> LoadReport {
    let mut r = sample_closed();
    r.open_loop = Some(OpenLoop {
        rate: 100.0,
        arrivals: "poisson".into(),
        max_in_flight: 10_000,
        scheduled: 42,
        late: 1,
        dropped: 2,
    });
    r.ecommerce = Some(Ecommerce {
        sessions: 3,
        new_customers: 1,
        returning_customers: 2,
        pages: 15,
    });
    r.replay = Some(Replay {
        log_requests: 100,
        log_sessions: 10,
        implied_resumption: 0.9,
        sessions_replayed: 10,
        requests_replayed: 100,
        achieved_resumption: 0.9,
        window: 10_000,
        speed: Some(2.0),
        skipped_lines: 1,
        excluded_ips: 1,
        excluded_requests: 5,
        rate_ips: 0,
        rate_requests: 0,
    });
    r.crypto = CryptoPerHandshake::from_totals(
        40,
        [
            ("verify", 20, 2_000_000),
            ("kx_start", 40, 1_000_000),
            ("sign", 0, 0),
        ],
    );
    r.ablation = vec!["cipher".into()];
    r.ablation_hint = Some("a record did not decrypt".into());
    r.http = Some(Http {
        protocol: "h2".into(),
        max_concurrent_streams: Some(10),
        connections: 2,
        requests_per_connection: Some(20.0),
        handshakes_per_request: Some(0.05),
        handshake_crypto_us_per_request: Some(12.5),
        record_crypto_us_per_request: Some(1.5),
    });
    r
}

fn sample_closed() -> LoadReport {
    let mut s = Stats::default();
    for i in 0..40 {
        let kind = if i % 2 == 0 {
            HandshakeKind::Full
        } else {
            HandshakeKind::Resumed
        };
        s.record(&record((i % 2) as u32, i, Some(kind)));
    }
    build_report(
        ConfigEcho {
            targets: vec!["https://127.0.0.1:8443/".into()],
            clients: 2,
            threads: 1,
            requests_per_conn: 1,
            reuse: 0.5,
            resume_with: "auto".into(),
            versions: vec!["TLSv1.3".into()],
            duration_s: None,
            requests: Some(40),
            warmup_s: 0.0,
            timeout_s: Some(10.0),
            early_data: false,
            workload: "urls".into(),
            seed: 1,
            think_time: "0".into(),
            retry_on_failure: false,
            ..ConfigEcho::default()
        },
        Window {
            start_unix_ms: 1_700_000_000_000,
            measured_s: 2.0,
            observed: "client-observed".into(),
        },
        &s,
        0,
        CpuUsage {
            user_s: 1.5,
            sys_s: 0.3,
            capacity: 1,
        },
    )
}
