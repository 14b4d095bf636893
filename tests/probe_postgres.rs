//! `tlslab probe` with PostgreSQL: one store test suite run against SQLite
//! and against a real PostgreSQL server, the CLI writing rounds there and
//! reporting them, rounds queued while the server is down and written when
//! it is back, and a clear error when it is down at the start.
//!
//! The PostgreSQL tests are `#[ignore]`d (`.ci/run` runs them with
//! `--ignored`). Each starts its own server with `initdb` and `pg_ctl`, as
//! an unprivileged user when run as root (initdb refuses root), in a temp
//! dir, on a free 127.0.0.1 port, and stops it when done. A missing
//! PostgreSQL is a loud skip, or a failure under `CI=true`.

mod common;

use std::time::Duration;

use common::{Serve, expect_ok, free_port, run_tlslab, show, tempdir};
use tlslab_peers::postgres::Postgres;
use tlslab_probe::postgres::PostgresStore;
use tlslab_probe::{Sample, SqliteStore, Store, StoreError};

const LIMIT: Duration = Duration::from_secs(60);

/// A PostgreSQL server of its own (tlslab-peers'), or `None` (having said
/// why) where PostgreSQL is not installed; under CI=true that is a failure.
fn start() -> Option<Postgres> {
    if !common::require("initdb") {
        return None;
    }
    Some(Postgres::start().unwrap_or_else(|e| panic!("{e}")))
}

fn sample(target: &str, at: i64, accepted: bool) -> Sample {
    Sample {
        target: target.into(),
        started_at_ms: at,
        connect_us: Some(80),
        tls_full_us: Some(1500),
        tls_resumed_us: Some(700),
        status: Some(200),
        resumption_offered: Some(true),
        resumption_accepted: Some(accepted),
        version: Some("1.3".into()),
        suite: Some("TLS13_AES_128_GCM_SHA256".into()),
        chain_len: Some(2),
        ..Sample::default()
    }
}

/// The store suite: what every [`Store`] must do, whatever is behind it.
fn store_suite(open: &dyn Fn() -> Box<dyn Store + Send>) {
    let a = sample("https://a/", 1_000, true);
    let a2 = sample("https://a/", 2_000, true);
    let mut b = sample("https://b/", 2_000, false);
    b.error_phase = Some("connect".into());
    b.error_kind = Some("timeout".into());
    b.error = Some("connect timed out".into());
    b.status = None;
    // An HTTP/3 sample of the same round: its transport and 0-RTT columns.
    let h3 = Sample {
        transport: tlslab_probe::Transport::H3,
        connect_us: None,
        zero_rtt_ttfb_us: Some(900),
        early_data_accepted: Some(true),
        ..sample("https://a/", 2_000, true)
    };
    {
        let mut s = open();
        assert_eq!(s.round_count().expect("count"), 0);
        let r1 = s
            .commit_round(1_000, std::slice::from_ref(&a))
            .expect("commit 1");
        let r2 = s
            .commit_round(2_000, &[b.clone(), a2.clone(), h3.clone()])
            .expect("commit 2");
        assert!(r2 > r1, "round ids grow: {r1} then {r2}");
        s.flush().expect("nothing waits");
    }
    // Reopened: the same rounds, in start order, and no second migration.
    let s = open();
    assert_eq!(s.round_count().expect("count"), 2);
    let all = s.samples(None, None).expect("all");
    assert_eq!(all.len(), 4);
    assert_eq!(all[0], a);
    assert!(
        all[1..].contains(&b) && all[1..].contains(&a2) && all[1..].contains(&h3),
        "{all:?}"
    );
    assert_eq!(s.samples(None, Some(2_000)).expect("until"), vec![a]);
    assert_eq!(s.samples(Some(2_001), None).expect("since"), vec![]);
}

#[test]
fn store_suite_on_sqlite() {
    let dir = tempdir();
    let path = dir.path().join("suite.sqlite");
    store_suite(&|| Box::new(SqliteStore::open(&path, true).expect("open sqlite")));
}

#[test]
#[ignore = "needs PostgreSQL (initdb, pg_ctl); .ci/run installs it"]
fn store_suite_on_postgres() {
    let Some(pg) = start() else { return };
    let url = pg.url();
    store_suite(&|| Box::new(PostgresStore::open(&url).expect("open postgres")));
}

/// Runs `sql` on `url` with psql, which must succeed; its output.
fn psql(url: &str, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .arg(url)
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-t", "-A", "-c", sql])
        .output()
        .expect("psql runs");
    assert!(out.status.success(), "psql: {}", show(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A database written before HTTP/3 (schema version 1, made here with
/// psql and that version's own DDL, not this build's migrations) still
/// reads, its samples as TCP, and gains the transport column.
#[test]
#[ignore = "needs PostgreSQL (initdb, pg_ctl); .ci/run installs it"]
fn a_version_1_postgres_database_is_migrated_and_reads_as_tcp() {
    let Some(pg) = start() else { return };
    if !common::require("psql") {
        return;
    }
    let url = pg.url();
    psql(
        &url,
        "CREATE TABLE schema_version (version BIGINT NOT NULL);
         INSERT INTO schema_version (version) VALUES (1);
         CREATE TABLE rounds (
             id BIGSERIAL PRIMARY KEY,
             started_at_ms BIGINT NOT NULL,
             committed_at_ms BIGINT NOT NULL
         );
         CREATE TABLE samples (
             round_id BIGINT NOT NULL REFERENCES rounds(id),
             target TEXT NOT NULL,
             started_at_ms BIGINT NOT NULL,
             dns_us BIGINT, connect_us BIGINT, tls_full_us BIGINT, ttfb_us BIGINT,
             get_us BIGINT, total_us BIGINT, status INTEGER,
             resumed_connect_us BIGINT, tls_resumed_us BIGINT, resumed_get_us BIGINT,
             resumption_offered BOOLEAN, resumption_accepted BOOLEAN,
             version TEXT, suite TEXT, grp TEXT, alpn TEXT,
             cert_not_after BIGINT, chain_len BIGINT,
             full_handshake_bytes BIGINT, full_handshake_round_trips BIGINT,
             resumed_handshake_bytes BIGINT, resumed_handshake_round_trips BIGINT,
             error_phase TEXT, error_kind TEXT, error TEXT
         );
         CREATE INDEX samples_by_time ON samples(started_at_ms);
         INSERT INTO rounds (started_at_ms, committed_at_ms) VALUES (1000, 1001);
         INSERT INTO samples (round_id, target, started_at_ms, connect_us, tls_full_us,
             tls_resumed_us, resumption_offered, resumption_accepted, version)
             VALUES (1, 'https://old/', 1000, 300, 1500, 700, true, true, '1.3');",
    );
    let mut s = PostgresStore::open(&url).expect("open migrates");
    let old = s.samples(None, None).expect("old samples read");
    assert_eq!(old.len(), 1, "{old:?}");
    assert_eq!(old[0].transport, tlslab_probe::Transport::Tcp);
    assert_eq!(
        (old[0].connect_us, old[0].tls_full_us),
        (Some(300), Some(1500))
    );
    let cols = psql(
        &url,
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'samples' \
         AND column_name IN ('transport', 'zero_rtt_ttfb_us', 'early_data_accepted') \
         ORDER BY column_name",
    );
    assert_eq!(
        cols.split_whitespace().collect::<Vec<_>>(),
        ["early_data_accepted", "transport", "zero_rtt_ttfb_us"]
    );
    assert_eq!(
        psql(&url, "SELECT max(version) FROM schema_version").trim(),
        "2"
    );
    let h3 = Sample {
        transport: tlslab_probe::Transport::H3,
        early_data_accepted: Some(false),
        ..sample("https://old/", 2_000, true)
    };
    s.commit_round(2_000, std::slice::from_ref(&h3))
        .expect("commit");
    drop(s);
    let s = PostgresStore::open(&url).expect("reopen");
    assert_eq!(s.samples(Some(2_000), None).expect("new"), vec![h3]);
}

#[test]
#[ignore = "needs PostgreSQL (initdb, pg_ctl); .ci/run installs it"]
fn rounds_wait_while_postgres_is_down_and_are_written_when_it_is_back() {
    let Some(pg) = start() else { return };
    let mut s = PostgresStore::open(&pg.url()).expect("open").with_queue(2);
    s.commit_round(1, &[sample("https://a/", 1, true)])
        .expect("up");
    pg.stop();
    for (i, at) in [2, 3, 4].into_iter().enumerate() {
        let e = s
            .commit_round(at, &[sample("https://a/", at, true)])
            .expect_err("down");
        let StoreError::Queued {
            queued, dropped, ..
        } = e
        else {
            panic!("not queued: {e}");
        };
        // A queue of 2: the third round down drops the oldest waiting one.
        assert_eq!((queued, dropped), ([1, 2, 2][i], [0, 0, 1][i]), "{e}");
    }
    assert!(s.flush().is_err(), "still down");
    pg.pg_ctl_start().expect("pg_ctl start");
    s.commit_round(5, &[sample("https://a/", 5, true)])
        .expect("back up");
    assert_eq!(s.queued(), 0);
    assert_eq!(s.dropped(), 1);
    let at: Vec<i64> = s
        .samples(None, None)
        .expect("samples")
        .iter()
        .map(|x| x.started_at_ms)
        .collect();
    assert_eq!(
        at,
        [1, 3, 4, 5],
        "round 2 was dropped, the rest kept in order"
    );
}

fn probe_rounds(serve: &Serve, db: &str, rounds: &str) -> std::process::Output {
    let ca = serve.ca.clone().expect("serve prints its CA");
    let line = "probe URL --cacert CA --db DB --rounds N --interval 50ms";
    let url = serve.url("/bytes/512");
    let ca = ca.to_str().expect("utf-8");
    let vars = [("URL", &*url), ("CA", ca), ("DB", db), ("N", rounds)];
    run_tlslab(&common::args_with(line, &vars), LIMIT)
}

#[test]
#[ignore = "needs PostgreSQL (initdb, pg_ctl); .ci/run installs it"]
fn probe_writes_rounds_to_postgres_and_report_reads_them() {
    let Some(pg) = start() else { return };
    let serve = Serve::start(&[]);
    let url = pg.url();
    let out = probe_rounds(&serve, &url, "2");
    assert!(
        expect_ok(&out).contains("round 2 committed"),
        "{}",
        show(&out)
    );
    let r: serde_json::Value = serde_json::from_str(&expect_ok(&run_tlslab(
        &["probe", "report", "--db", &url, "--json"],
        LIMIT,
    )))
    .expect("report --json");
    assert_eq!(r["samples"], 2, "{r:#}");
    let t = &r["targets"][0];
    assert_eq!(t["resumption_accepted"], 2, "{t:#}");
    assert!(
        t["table2"]["ssl_new_ms"].as_f64().is_some_and(|v| v > 0.0),
        "{t:#}"
    );
}

#[test]
fn postgres_down_at_the_start_is_a_clear_runtime_error() {
    let serve = Serve::start(&[]);
    let url = format!("postgres://probe@127.0.0.1:{}/probe", free_port());
    let out = probe_rounds(&serve, &url, "1");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is PostgreSQL running"), "{}", show(&out));
    common::assert_no_panic(&out.stderr);
    let out = run_tlslab(&["probe", "report", "--db", &url], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
}
