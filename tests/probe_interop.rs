//! `tlslab probe` against a real nginx (run by `.ci/run`): full and resumed
//! handshakes over TLS 1.2 and 1.3, with session tickets on and off (nginx's
//! shared session cache resumes both ways).

mod common;

use std::time::Duration;

use common::nginx::Nginx;
use common::{args_with, certs, expect_ok, run_tlslab, show, tempdir};

const LIMIT: Duration = Duration::from_secs(120);

fn probe_nginx(tickets: bool) {
    let dir = tempdir();
    let c = certs(&dir.path().join("certs"), "ecdsa-p256", &[]);
    let nginx = Nginx::start(&dir.path().join("nginx"), &c, tickets);
    let url = nginx.url("/4k.bin");
    for tls in ["1.2", "1.3"] {
        let case = format!("nginx tickets {tickets}, TLS {tls}");
        let db = dir.path().join(format!("{tls}-{tickets}.sqlite"));
        let db_s = db.to_str().expect("utf-8");
        let line = "probe URL --cacert CA --tls TLS --db DB --rounds 3 --interval 20ms";
        let ca = c.ca.to_str().expect("utf-8");
        let vars = [("URL", &*url), ("CA", ca), ("TLS", tls), ("DB", db_s)];
        let out = run_tlslab(&args_with(line, &vars), LIMIT);
        expect_ok(&out);
        let out = run_tlslab(&["probe", "report", "--db", db_s, "--json"], LIMIT);
        let r: serde_json::Value = serde_json::from_str(&expect_ok(&out)).expect("json");
        let t = &r["targets"][0];
        assert_eq!(t["samples"], 3, "{case}: {t:#}");
        assert!(
            t["errors"].as_object().expect("errors").is_empty(),
            "{case}: {t:#}\n{}",
            show(&out)
        );
        assert_eq!(t["versions"][tls], 3, "{case}: {t:#}");
        // nginx's shared session cache resumes either way: TLS 1.2 by
        // session ID, TLS 1.3 by stateful tickets when tickets are off.
        assert_eq!(t["resumption_offered"], 3, "{case}: {t:#}");
        assert_eq!(t["resumption_accepted"], 3, "{case}: {t:#}");
        let savings = &t["table2"]["savings"];
        assert!(savings.is_number(), "{case}: {t:#}");
        let full = t["phases"]
            .as_array()
            .expect("phases")
            .iter()
            .find(|p| p["phase"] == "tls_full")
            .expect("tls_full");
        assert_eq!(full["count"], 3, "{case}: {full:#}");
    }
}

#[test]
#[ignore = "needs nginx; run by .ci/run"]
fn probe_nginx_tickets_on() {
    probe_nginx(true);
}

#[test]
#[ignore = "needs nginx; run by .ci/run"]
fn probe_nginx_tickets_off() {
    probe_nginx(false);
}
