//! `tlslab experiment`: the list, a declared matrix (parsing errors exit 2,
//! a run, an interrupted run resumed), and one built-in study end to end
//! (`seed004-handshake --quick`). Every run is the real binary against its
//! embedded loopback server, bounded in time.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{args, expect_ok, run_tlslab, show, usage_error};
use serde_json::Value;

fn doc(dir: &Path) -> Value {
    common::load_json(&dir.join("results.json"))
}

fn cells(d: &Value) -> &Vec<Value> {
    d["cells"].as_array().expect("cells is an array")
}

#[test]
fn list_names_every_study_and_which_cannot_run() {
    let out = run_tlslab(&["experiment", "list"], Duration::from_secs(20));
    let s = expect_ok(&out);
    for name in args(
        "seed000-reuse seed000-cluster seed000-cluster-h3 seed001-breakdown seed002-overload seed003-table2 \
         seed004-handshake quic-vs-tcp",
    ) {
        assert!(s.contains(name), "{name} missing from:\n{s}");
    }
    let cluster = s
        .lines()
        .find(|l| l.starts_with("seed000-cluster"))
        .expect("a cluster line");
    // The cluster engine (`tlslab cluster`) has landed: the study runs.
    assert!(cluster.contains("runs"), "{cluster}");
    let reuse = s
        .lines()
        .find(|l| l.starts_with("seed000-reuse"))
        .expect("a reuse line");
    assert!(reuse.contains("runs"), "{reuse}");
}

#[test]
fn unknown_studies_and_bad_matrix_files_exit_2_naming_the_problem() {
    let tmp = common::tempdir();
    let limit = Duration::from_secs(20);
    let run_config = |toml: &std::path::Path| {
        usage_error(
            &["experiment", "run", "--config", toml.to_str().unwrap()],
            limit,
        )
    };
    let err = usage_error(&args("experiment run seed999-nothing"), limit);
    assert!(err.contains("experiment list"), "{err}");

    let bad = tmp.path().join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"x\"\nengine = \"load\"\n[factors]\ncipher = [\"rc4\"]\n",
    )
    .unwrap();
    let err = run_config(&bad);
    assert!(err.contains("unknown factor 'cipher'"), "{err}");

    std::fs::write(&bad, "name = \"x\"\nengine = \"load\"\ncell = \"soon\"\n").unwrap();
    let err = run_config(&bad);
    assert!(err.contains("cell"), "{err}");

    let missing = tmp.path().join("missing.toml");
    run_config(&missing);

    let err = usage_error(&args("experiment run seed001-breakdown --quick"), limit);
    assert!(err.contains("--insecure-ablation"), "{err}");
}

#[test]
fn the_path_option_is_checked_before_any_work() {
    let tmp = common::tempdir();
    let out_dir = tmp.path().join("never");
    let run = |args: &[&str]| {
        let mut full = vec!["experiment", "run"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--out", out_dir.to_str().unwrap()]);
        let out = run_tlslab(&full, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(2), "{}", show(&out));
        assert!(!out_dir.exists(), "{}", show(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&["seed003-table2", "--quick", "--path-kind", "netem"]);
    assert!(
        err.contains("relay") && err.contains("packet") && err.contains("both"),
        "{err}"
    );
    let err = run(&["seed000-reuse", "--quick", "--path-kind", "both"]);
    assert!(
        err.contains("no round-trip cells") && err.contains("seed003-table2"),
        "{err}"
    );
    let m = tmp.path().join("m.toml");
    std::fs::write(&m, MATRIX).unwrap();
    // `--path` is the old spelling of `--path-kind`, still accepted.
    let err = run(&["--config", m.to_str().unwrap(), "--path", "packet"]);
    assert!(
        err.contains("--path-kind is for the built-in studies"),
        "{err}"
    );
    // Without privilege the packet path is refused, naming both fixes.
    if !tlslab_path::privileged() {
        let err = run(&["seed004-handshake", "--quick", "--path-kind", "packet"]);
        assert!(
            err.contains("root") && err.contains("--path-kind relay"),
            "{err}"
        );
    }
}

const MATRIX: &str = r#"
name = "resume-test"
engine = "load"
repeats = 2
cell = "1s"
warmup = "200ms"
[factors]
reuse = [0, 1]
version = "1.3"
key = "ecdsa-p256"
clients = 2
"#;

#[test]
fn a_matrix_runs_interleaved_and_an_interrupted_run_resumes_without_rerunning_cells() {
    let tmp = common::tempdir();
    let cfg = tmp.path().join("m.toml");
    std::fs::write(&cfg, MATRIX).unwrap();
    let dir = tmp.path().join("out");
    let (cfg_s, dir_s) = (cfg.to_str().unwrap(), dir.to_str().unwrap());
    let out = run_tlslab(
        &["experiment", "run", "--config", cfg_s, "--out", dir_s],
        Duration::from_secs(120),
    );
    expect_ok(&out);
    let full = doc(&dir);
    assert_eq!(full["kind"], "tlslab-experiment");
    assert_eq!(full["complete"], true);
    let ids: Vec<&str> = cells(&full)
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    // Repeats interleaved: every point once, then every point again.
    assert_eq!(
        ids,
        [
            "reuse0-tls1.3-ecdsa-p256-c2-r1",
            "reuse1-tls1.3-ecdsa-p256-c2-r1",
            "reuse0-tls1.3-ecdsa-p256-c2-r2",
            "reuse1-tls1.3-ecdsa-p256-c2-r2"
        ]
    );
    for c in cells(&full) {
        assert!(c["metrics"]["requests"].as_u64().unwrap() > 0, "{c}");
        assert!(c["command_line"].as_str().unwrap().contains("tlslab load"));
    }
    // A second run into the same directory without --resume is refused.
    let again = run_tlslab(
        &["experiment", "run", "--config", cfg_s, "--out", dir_s],
        Duration::from_secs(20),
    );
    assert_eq!(again.status.code(), Some(2), "{}", show(&again));

    // Simulate an interruption after two cells: the document as it was
    // written then (incomplete, two cells).
    let mut partial = full.clone();
    partial["cells"] = Value::Array(cells(&full)[..2].to_vec());
    partial["complete"] = Value::Bool(false);
    partial["finished_unix_ms"] = Value::from(0);
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_vec_pretty(&partial).unwrap(),
    )
    .unwrap();
    let out = run_tlslab(
        &["experiment", "run", "--config", cfg_s, "--resume", dir_s],
        Duration::from_secs(120),
    );
    let stdout = expect_ok(&out);
    assert!(stdout.contains("resumed"), "{stdout}");
    let resumed = doc(&dir);
    assert_eq!(resumed["complete"], true);
    let rc = cells(&resumed);
    assert_eq!(rc.len(), 4);
    // The two finished cells were kept as they were, not rerun.
    assert_eq!(rc[0], cells(&full)[0]);
    assert_eq!(rc[1], cells(&full)[1]);
    assert_eq!(rc[3]["id"], "reuse1-tls1.3-ecdsa-p256-c2-r2");
    assert!(rc[2]["started_unix_ms"].as_u64() > cells(&full)[3]["started_unix_ms"].as_u64());

    // Resuming with another matrix is refused.
    std::fs::write(&cfg, MATRIX.replace("repeats = 2", "repeats = 3")).unwrap();
    let out = run_tlslab(
        &["experiment", "run", "--config", cfg_s, "--resume", dir_s],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("matrix differs"));
}

#[test]
fn seed004_handshake_quick_measures_bytes_round_trips_and_the_response_time_model() {
    let tmp = common::tempdir();
    let dir = tmp.path().join("s4");
    let args = ["seed004-handshake", "--quick"];
    let (stdout, d) = common::experiment_run(&args, &dir, Duration::from_secs(360));
    assert!(stdout.contains("Paper against today"), "{stdout}");
    assert_eq!(d["complete"], true);
    assert_eq!(d["quick"], true);
    let env = &d["environment"];
    assert!(env["cores"].as_u64().unwrap() >= 1);
    assert!(env["tls_library"].as_str().unwrap().contains("rustls 0.23"));
    assert!(!env["kernel"].as_str().unwrap().is_empty());
    // 6 handshake points (TLS 1.2 with the hybrid group excluded, said so),
    // 2 closed-loop model cells and 2 open-loop utilisations; then the
    // post-quantum sweep: 7 chains x {none, brotli} x 2 groups, and 7 chains
    // at 3 round-trip times (through the relay); the same 28 loopback cells
    // over QUIC (no QUIC round-trip cells: the relay is TCP only).
    let all = cells(&d);
    let (pq, cs): (Vec<_>, Vec<_>) = all
        .iter()
        .partition(|c| c["id"].as_str().unwrap().starts_with("pq-"));
    let cs: Vec<serde_json::Value> = cs.into_iter().cloned().collect();
    assert_eq!(
        (cs.len(), pq.len()),
        (10, 77),
        "{:#?}",
        all.iter().map(|c| &c["id"]).collect::<Vec<_>>()
    );
    let pq_bytes = |id: &str| {
        let c = pq
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no cell {id}"));
        assert!(c["metrics"]["requests"].as_u64().unwrap() > 0, "{c}");
        c["metrics"]["full_bytes_in"].as_f64().unwrap()
            + c["metrics"]["full_bytes_out"].as_f64().unwrap()
    };
    // An ML-DSA-44 chain (two 2,420-byte signatures and a 1,312-byte key in
    // the certificates, one more signature in CertificateVerify) is about
    // 8–10 KB larger than an ECDSA P-256 one.
    let ml = pq_bytes("pq-mldsa44-none-x25519-r1");
    let ec = pq_bytes("pq-ecdsa-p256-none-x25519-r1");
    assert!(
        (7000.0..12000.0).contains(&(ml - ec)),
        "ML-DSA-44 {ml} B, ECDSA {ec} B"
    );
    // Over QUIC the same chains, in padded datagrams: more bytes, the same
    // difference within QUIC's headers.
    let quic: Vec<_> = pq
        .iter()
        .filter(|c| c["factors"]["transport"] == "quic")
        .collect();
    assert_eq!(quic.len(), 28);
    assert!(quic.iter().all(
        |c| c["command_line"].as_str().unwrap().contains("--h3 -m 1")
            && !c["command_line"].as_str().unwrap().contains("--mss")
    ));
    let (qml, qec) = (
        pq_bytes("pq-quic-mldsa44-none-x25519-r1"),
        pq_bytes("pq-quic-ecdsa-p256-none-x25519-r1"),
    );
    assert!(
        qec > ec && qml > ml,
        "QUIC {qml} / {qec} B, TCP {ml} / {ec} B"
    );
    assert!(
        (7000.0..13000.0).contains(&(qml - qec)),
        "QUIC: ML-DSA-44 {qml} B, ECDSA {qec} B"
    );
    assert!(d["notes"].as_array().unwrap().iter().any(|n| {
        n.as_str()
            .unwrap()
            .contains("QUIC round-trip cells: NOT RUN")
    }));
    assert!(
        d["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("TLS 1.3 key exchange"))
    );
    let mut orders = Vec::new();
    for c in &cs {
        let m = &c["metrics"];
        let load = &c["load"];
        // Measured, and consistent with the load engine's own report.
        assert!(m["requests"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(m["requests"], load["requests"]["completed"], "{c}");
        assert!(m["requests_per_s"].as_f64().unwrap() > 0.0);
        assert!(m["server_cpu_us_per_request"].as_f64().unwrap() > 0.0);
        assert!(m["window_s"].as_f64().unwrap() > 0.0);
        orders.push(c["order"].as_u64().unwrap());
        if c["factors"]["reuse"] == "0.5" {
            let bytes =
                m["full_bytes_in"].as_f64().unwrap() + m["full_bytes_out"].as_f64().unwrap();
            assert!(bytes > 500.0, "{c}");
            let rt = m["full_round_trips"].as_f64().unwrap();
            let want = if c["factors"]["version"] == "1.2" {
                2.0
            } else {
                1.0
            };
            assert!((rt - want).abs() < 0.5, "round trips {rt}: {c}");
            assert!(m["resumed_round_trips"].as_f64().unwrap() > 0.0, "{c}");
        }
    }
    assert_eq!(orders, (0..10).collect::<Vec<u64>>());
    let bytes_of = |g: &str| {
        cs.iter()
            .find(|c| {
                c["factors"]["group"] == g
                    && c["factors"]["version"] == "1.3"
                    && c["factors"]["key"] == "ecdsa-p256"
            })
            .map(|c| {
                c["metrics"]["full_bytes_in"].as_f64().unwrap()
                    + c["metrics"]["full_bytes_out"].as_f64().unwrap()
            })
            .unwrap()
    };
    // ML-KEM-768 adds a 1184-byte key share and a 1088-byte ciphertext.
    let extra = bytes_of("X25519MLKEM768") - bytes_of("x25519");
    assert!(
        (2000.0..2600.0).contains(&extra),
        "post-quantum extra {extra} bytes"
    );
    // Every comparison has the paper's figure and a measured one, linked to
    // cells that exist.
    let ids: Vec<&str> = all.iter().map(|c| c["id"].as_str().unwrap()).collect();
    let comps = d["comparisons"].as_array().unwrap();
    assert!(comps.len() >= 10);
    for c in comps {
        assert!(!c["paper"].as_str().unwrap().is_empty(), "{c}");
        assert!(c["today"].as_f64().is_some(), "not measured: {c}");
        assert!(!c["reason"].as_str().unwrap().is_empty());
        for id in c["cells"].as_array().unwrap() {
            assert!(ids.contains(&id.as_str().unwrap()), "{id} is not a cell");
        }
    }
    assert!(comps.iter().any(|c| {
        c["quantity"]
            .as_str()
            .unwrap()
            .starts_with("mean response time at")
    }));
    assert!(!d["curves"].as_array().unwrap().is_empty());
}
