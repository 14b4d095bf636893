//! End-to-end tests of the workload flags of `tlslab load` and of
//! `tlslab fileset`, driving the built binary against `tlslab serve` on
//! 127.0.0.1 port 0. Every load is bounded by `-n` or `-d`.

mod common;

use std::time::Duration;

use common::{
    Serve, args, args_with, argv, assert_nums, assert_usage_error, expect_ok, load_json, num,
    run_tlslab, show, tempdir, usage_error,
};

const LIMIT: Duration = Duration::from_secs(60);

/// Runs `tlslab load URL --cacert CA ARGS --json NAME.json --no-progress`
/// against `serve`'s `path` ([`Serve::load`]), which must exit 0; returns
/// its stdout and the report (written in a temporary directory).
fn load(serve: &Serve, path: &str, name: &str, args: &[&str]) -> (String, serde_json::Value) {
    let dir = tempdir();
    let json = dir.path().join(format!("{name}.json"));
    let full = [args, &["--no-progress"]].concat();
    let (out, r) = serve.load(path, &full, &json, LIMIT);
    let text = expect_ok(&out);
    let r = r.unwrap_or_else(|| panic!("no report: {}", show(&out)));
    (text, r)
}

#[test]
fn fileset_writes_what_serve_serves_and_refuses_to_clobber() {
    let dir = tempdir();
    let www = dir.path().join("www");
    let www_s = www.to_str().unwrap();
    let out = expect_ok(&run_tlslab(&["fileset", "--out", www_s], LIMIT));
    assert!(out.contains("wrote 36 files"), "{out}");
    for f in tlslab_workload::specweb96::files() {
        let on_disk = std::fs::read(www.join(&f.path[1..])).unwrap();
        assert_eq!(
            on_disk,
            tlslab_workload::specweb96::contents(&f),
            "{}",
            f.path
        );
    }
    // Same contents again: fine. Other contents: a usage error, unless --force.
    expect_ok(&run_tlslab(&["fileset", "--out", www_s], LIMIT));
    let victim = www.join("specweb96/class2_4");
    std::fs::write(&victim, b"changed").unwrap();
    let refused = run_tlslab(&["fileset", "--out", www_s], LIMIT);
    assert_eq!(refused.status.code(), Some(2), "{}", show(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--force"),
        "{}",
        show(&refused)
    );
    expect_ok(&run_tlslab(&["fileset", "--out", www_s, "--force"], LIMIT));
    assert_eq!(std::fs::read(&victim).unwrap().len(), 5 * 10_240);

    // A server holding the written files answers the SPECweb96 workload.
    let serve = Serve::start(&["--root", www_s, "--threads", "1"]);
    let (text, r) = load(
        &serve,
        "",
        "specweb",
        &args(
            "--workload specweb96 --seed 9 -c 4 -n 120 --requests-per-conn 0 --think-time const:1ms",
        ),
    );
    assert!(text.contains("workload: specweb96, seed 9"), "{text}");
    assert_eq!(num(&r, "requests/succeeded"), 120.0, "{r:#}");
    assert_eq!(r["config"]["workload"], "specweb96");
    assert_eq!(r["config"]["seed"], 9);
    assert_eq!(r["config"]["think_time"], "const:1ms");
    assert_eq!(r["config"]["targets"].as_array().unwrap().len(), 36);
    assert!(r["open_loop"].is_null());
    assert!(num(&r, "throughput/bytes_per_s") > 0.0);
}

#[test]
fn open_loop_reports_its_arrivals() {
    let serve = Serve::start(&["--threads", "1"]);
    let (text, r) = load(
        &serve,
        "/health",
        "open",
        &args("--rate 20 --arrivals constant -n 20 --reuse 50"),
    );
    assert!(
        text.contains("open loop: constant arrivals at 20 /s"),
        "{text}"
    );
    assert_nums(
        &r,
        &[
            ("open_loop/scheduled", 20.0),
            ("open_loop/rate", 20.0),
            ("open_loop/max_in_flight", 10_000.0),
        ],
    );
    assert_eq!(r["open_loop"]["arrivals"], "constant");
    assert_eq!(num(&r, "open_loop/dropped"), 0.0);
    assert_eq!(num(&r, "requests/succeeded"), 20.0);
    // At 20/s over 20 arrivals the window is about 0.95 s: the arrivals
    // were paced, not fired at once. 50 ms apart, each handshake has
    // finished (and left its session) before the next arrival unless the
    // client stalls that long; at 100/s a loaded machine bunched them all,
    // and a client cannot resume before it holds a session (7 of 30).
    assert!(num(&r, "window/measured_s") >= 0.9, "{r:#}");
    assert!(num(&r, "reuse/achieved") > 0.3, "{r:#}");
}

#[test]
fn workload_flag_mistakes_are_usage_errors() {
    for line in [
        "load https://127.0.0.1:9/ --arrivals constant",
        "load https://127.0.0.1:9/ --rate 10 --think-time const:1s",
        "load https://127.0.0.1:9/ --rate 10 --retry-on-failure",
        "load https://127.0.0.1:9/ --rate 0",
        "load https://127.0.0.1:9/x --workload specweb96",
        "load https://127.0.0.1:9/ --think-time sometimes",
        "load https://127.0.0.1:9/ --workload ecommerce --reuse 50",
        "load https://127.0.0.1:9/ --workload-config x.toml",
    ] {
        usage_error(&args(line), LIMIT);
    }
    let help = expect_ok(&run_tlslab(&["load", "--help"], LIMIT));
    for flag in args(
        "--workload --seed --think-time --retry-on-failure --rate --arrivals --max-in-flight \
         --workload-config --access-log --window --speed --exclude-ips --ip-rate-limit",
    ) {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn ecommerce_model_from_toml() {
    let dir = tempdir();
    let model = dir.path().join("shop.toml");
    std::fs::write(
        &model,
        "new_customer_percent = 100\nthink_time = \"0\"\nrevisit_probability = 0.0\n",
    )
    .unwrap();
    let serve = Serve::start(&["--threads", "1"]);
    let model_s = model.to_str().unwrap();
    let shop = |line| {
        argv(
            &["--workload", "ecommerce", "--workload-config", model_s],
            line,
        )
    };
    let (text, r) = load(&serve, "", "shop", &shop("-c 1 -n 34"));
    // New customers only: 7 pages, 17 requests per purchase session.
    assert!(
        text.contains("e-commerce: 2 purchase sessions (2 new, 0 returning customers), 14 pages"),
        "{text}"
    );
    assert_nums(
        &r,
        &[
            ("ecommerce/sessions", 2.0),
            ("handshake/full/count", 2.0),
            ("handshake/resumed/count", 32.0),
        ],
    );
    assert_eq!(r["config"]["workload"], "ecommerce");

    std::fs::write(&model, "new_customer_percent = 150\n").unwrap();
    let url = serve.url("");
    let bad = [&["load", url.as_str()][..], &shop("-n 1")].concat();
    assert_usage_error(&bad, "new_customer_percent", LIMIT);
}

#[test]
fn replay_of_an_access_log_with_filters() {
    let dir = tempdir();
    let log = dir.path().join("access.log");
    let mut text = String::new();
    for i in 0..40 {
        let ip = if i % 10 == 0 {
            "10.9.9.9".to_string()
        } else {
            format!("10.0.0.{}", i % 5)
        };
        text += &format!(
            "{ip} - - [01/Jan/2024:10:00:{:02} +0000] \"GET /p{i} HTTP/1.1\" 200 {} \"-\" \"ua\"\n",
            i / 4,
            300 + i
        );
    }
    text += "not a log line\n";
    std::fs::write(&log, text).unwrap();
    let proxies = dir.path().join("proxies");
    std::fs::write(&proxies, "10.9.9.9\n").unwrap();
    let serve = Serve::start(&["--threads", "1"]);
    let (log_s, url) = (log.to_str().unwrap(), serve.url(""));
    let vars = [("LOG", log_s), ("IPS", proxies.to_str().unwrap())];
    let line = "--workload replay --access-log LOG --exclude-ips IPS -c 3";
    let (text, r) = load(&serve, "", "replay", &args_with(line, &vars));
    assert!(
        text.contains("replay: 5 of 5 sessions and 36 of 36 requests"),
        "{text}"
    );
    assert_nums(
        &r,
        &[
            ("replay/excluded_ips", 1.0),
            ("replay/excluded_requests", 4.0),
            ("replay/skipped_lines", 1.0),
            ("requests/succeeded", 36.0),
            ("handshake/full/count", 5.0),
        ],
    );
    let implied = num(&r, "replay/implied_resumption");
    assert!((implied - 31.0 / 36.0).abs() < 1e-9, "{implied}");
    assert!((num(&r, "replay/achieved_resumption") - implied).abs() < 1e-9);
    assert!(r["replay"]["speed"].is_null());

    // Without --access-log, or with a log of nothing parsable: usage errors.
    usage_error(&["load", &url, "--workload", "replay"], LIMIT);
    std::fs::write(&log, "nothing here\n").unwrap();
    usage_error(
        &argv(&["load", &url, "--access-log", log_s], "--workload replay"),
        LIMIT,
    );
}

#[test]
fn sweep_writes_one_series_per_reuse_value() {
    let dir = tempdir();
    let serve = Serve::start(&["--threads", "1"]);
    let (url, ca) = (serve.url("/dyn?work=3000"), serve.ca.clone().unwrap());
    let json = dir.path().join("sweep.json");
    let head = [
        "sweep",
        &url,
        "--cacert",
        ca.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    let out = run_tlslab(&argv(&head, "-c 1 -d 0.3s --reuse 0,100 --steps 3"), LIMIT);
    let text = expect_ok(&out);
    assert!(text.contains("tlslab sweep over clients"), "{text}");
    let r = load_json(&json);
    assert_eq!(r["over"], "clients");
    let series = r["series"].as_array().unwrap();
    assert_eq!(series.len(), 2, "{r:#}");
    assert_eq!(series[0]["reuse"], 0.0);
    assert_eq!(series[1]["reuse"], 1.0);
    for s in series {
        let steps = s["steps"].as_array().unwrap();
        assert!((2..=3).contains(&steps.len()), "{s:#}");
        assert_eq!(steps[0]["clients"], 1);
        assert_eq!(steps[1]["clients"], 2);
        assert!(steps[0]["requests_per_s"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(series[0]["steps"][0]["reuse_achieved"], 0.0);
    assert!(series[1]["steps"][0]["reuse_achieved"].as_f64().unwrap() > 0.5);

    // A list of reuse values is for sweep only.
    usage_error(&["load", &serve.url("/"), "--reuse", "0,50"], LIMIT);
}
