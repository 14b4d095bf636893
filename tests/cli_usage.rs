//! End-to-end tests of the `tlslab` binary's flags: bad input and exit
//! codes, every subcommand's `--help` listing its flags, the one spelling
//! per concept (`--key-type`, `--groups`, `--suites`) with the old
//! spellings still accepted as hidden aliases; and the test helpers' own
//! tests.
//!
//! Every server binds 127.0.0.1 port 0; every load is bounded by `-n` and
//! every child by a wall-clock limit.

mod common;

use std::time::Duration;

use common::load::load_run;
use common::nginx;
use common::{
    Certs, Proc, args, args_with, assert_no_panic, assert_usage_error, certs, errors, expect_ok,
    free_port, run_tlslab, show, tempdir, usage_error,
};

const LIMIT: Duration = Duration::from_secs(60);

// ------------------------------------------------------------ bad input ---

/// stderr's non-empty lines.
fn stderr_lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn bad_url_is_a_usage_error_with_a_one_line_fix() {
    for bad in ["not-a-url", "ftp://127.0.0.1/x", "https://"] {
        let out = run_tlslab(&["load", bad, "-n", "1", "--insecure"], LIMIT);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", show(&out));
        let lines = stderr_lines(&out);
        assert_eq!(lines.len(), 1, "{bad}: want one line: {}", show(&out));
        assert!(
            lines[0].contains(bad),
            "{bad}: message should quote the URL: {}",
            lines[0]
        );
        assert!(
            lines[0].contains("https://"),
            "{bad}: message should show the fix: {}",
            lines[0]
        );
        assert_no_panic(&out.stderr);
    }
}

#[test]
fn refused_target_is_reported_not_fatal() {
    let dir = tempdir();
    let url = format!("https://127.0.0.1:{}/", free_port());
    let json = dir.path().join("refused.json");
    let args = [url.as_str(), "--insecure", "-c", "1", "-n", "3"];
    let (out, report) = load_run(&json, &args, LIMIT);
    // Every request failed → exit 1, but the run completed and reported.
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_no_panic(&out.stderr);
    let r = report.expect("load writes --json when every request fails");
    let errs = errors(&r);
    assert!(
        errs.get("refused").copied().unwrap_or(0) > 0,
        "{errs:?}\n{r:#}"
    );
    assert!(
        !out.stdout.is_empty(),
        "the report table is printed: {}",
        show(&out)
    );
    // Besides the --insecure warning, one line says what failed.
    let lines: Vec<String> = stderr_lines(&out)
        .into_iter()
        .filter(|l| !l.contains("WARNING"))
        .collect();
    assert_eq!(lines.len(), 1, "one-line error on stderr: {}", show(&out));
    assert!(lines[0].contains("refused"), "{}", show(&out));
}

#[test]
fn a_cert_file_given_as_key_is_a_usage_error() {
    let dir = tempdir();
    let c = certs(dir.path(), "ecdsa-p256", &[]);
    let chain = c.chain.to_str().expect("utf-8");
    // `--key FILE` is the old spelling of `--key-file`: it still works,
    // with a one-line warning, and is not in the help.
    for (flag, warns) in [("--key-file", false), ("--key", true)] {
        let line = format!("serve --listen 127.0.0.1:0 --cert C {flag} C");
        let args = args_with(&line, &[("C", chain)]);
        let err = usage_error(&args, LIMIT);
        assert!(err.contains("no PEM private key found"), "{flag}: {err}");
        assert_eq!(err.contains("renamed --key-file"), warns, "{flag}: {err}");
    }
    let help = expect_ok(&run_tlslab(&["serve", "--help"], LIMIT));
    assert!(
        lists(&help, "--key-file") && !lists(&help, "--key"),
        "{help}"
    );
    // Both spellings at once: a usage error.
    let args = args_with(
        "serve --listen 127.0.0.1:0 --cert C --key-file C --key C",
        &[("C", chain)],
    );
    usage_error(&args, LIMIT);
}

#[test]
fn a_missing_ca_file_is_a_usage_error_naming_the_file() {
    let dir = tempdir();
    let missing = dir.path().join("nope.pem");
    let missing = missing.to_str().expect("utf-8");
    let url = format!("https://127.0.0.1:{}/", free_port());
    assert_usage_error(
        &["load", &url, "--cacert", missing, "-n", "1"],
        "nope.pem",
        LIMIT,
    );
}

#[test]
fn conflicting_flags_are_usage_errors() {
    let dir = tempdir();
    let c = Certs::at(dir.path());
    std::fs::write(&c.ca, "not used").expect("write");
    let ca = c.ca.to_str().expect("utf-8");
    let root = dir.path().to_str().expect("utf-8");
    let url = format!("https://127.0.0.1:{}/", free_port());
    // Each case with a word its message must contain, so the exit 2 is
    // for the reason the case is about.
    let vars = [("URL", url.as_str()), ("CA", ca), ("ROOT", root)];
    let cases = [
        ("--insecure", "load URL --insecure --cacert CA -n 1"),
        ("--reuse", "load URL --insecure --reuse 101 -n 1"),
        (
            "--fileset",
            "serve --listen 127.0.0.1:0 --root ROOT --fileset specweb96",
        ),
        (
            "--key-type",
            "serve --listen 127.0.0.1:0 --cert CA --key-file CA --key-type rsa2048",
        ),
        ("dsa1024", "certs --out ROOT --key dsa1024"),
        ("zstd", "serve --listen 127.0.0.1:0 --cert-compression zstd"),
        (
            "TLS 1.2",
            "serve --listen 127.0.0.1:0 --key-type mldsa44 --tls 1.2",
        ),
        ("--mss", "load URL --insecure --mss 10 -n 1"),
    ];
    for (why, line) in cases {
        assert_usage_error(&args_with(line, &vars), why, LIMIT);
    }
}

// ------------------------------------------------------- flag spellings ---

/// Every flag of every subcommand as of issue 20, by subcommand: each must
/// still parse. The help lists each one but the hidden aliases, which
/// [`old_spellings_are_hidden_aliases_of_the_new`] covers.
const FLAGS: &[(&str, &str)] = &[
    ("certs", "--out --key-type --intermediate-key --san"),
    (
        "serve",
        "--listen --http --metrics --root --fileset --cert --key-file --key-type \
         --intermediate-key-type --cert-compression --tls --suites --groups \
         --session-cache --redis-prefix --redis-timeout --ticket-keys \
         --ticket-key-rotation --node-tag --session-timeout --tickets --max-early-data \
         --threads --handshake-timeout --request-timeout --keepalive-timeout \
         --h2-ping-interval --max-connections --alpn --ablate --insecure-ablation \
         --allow-remote --access-log --admission --shed-with --max-handshakes-in-flight \
         --admission-queue-target",
    ),
    (
        "load",
        "--clients --duration --requests --warmup --threads --requests-per-conn --h2 \
         --max-concurrent-streams --reuse --resume-with --tls --suites --groups --sni \
         --cacert --insecure --cert-compression --mss --early-data --ablate \
         --insecure-ablation --timeout --retry-backoff --max-error-rate --source-ip \
         --clients-per-ip --json --log --shard --start-at --out --no-progress \
         --workload --workload-config --access-log --window --speed --exclude-clients \
         --exclude-ips --client-rate-limit --ip-rate-limit --strict --replay-paths \
         --seed --think-time --retry-on-failure --rate --arrivals --max-in-flight \
         --h3 --flood --flood-rate --flood-max --confirm-flood --flood-allow-remote",
    ),
    ("sweep", "--over --factor --steps --knee --groups --suites"),
    ("lab", "--quick --cell --clients --json --path --explain"),
    (
        "breakdown",
        "--insecure-ablation --workload --reuse --file-size --tls --key-type --quick \
         --cell --repeats --max-time --target-ci --clients --json",
    ),
    (
        "overload",
        "--quick --window --loads --timeout --requests --robustness --robust-for \
         --servers --nginx-bin --nginx-limit-conn --nginx-dir --capacity --key-type \
         --retry-backoff --reuse --h3 --json",
    ),
    (
        "cluster",
        "--quick --nodes --node-count --dispatcher --reuse --policy --mechanism \
         --sharing --cell --clients --key-type --groups --body --redis-timeout --json",
    ),
    (
        "plan",
        "--full-us --resumed-us --request-us --costs --tls --key-type --reuse \
         --requests-per-conn --utilisation --utilization --latency --load \
         --base-latency --check --cell --quick --seed --json",
    ),
    (
        "fileset",
        "--out --workload --workload-config --access-log --force",
    ),
    (
        "relay",
        "--listen --upstream --delay --jitter --bandwidth --loss --loss-delay --seed \
         --idle-timeout --max-queued",
    ),
    (
        "dispatch",
        "--listen --backend --policy --session-timeout --max-sessions --hello-timeout \
         --idle-timeout --bad-input --send-proxy-v2 --health-check --health-cacert \
         --health-sni --keylog --health-interval --connect-timeout --metrics --threads",
    ),
    ("merge", "--json --allow-missing --force"),
    ("report", "--html --md"),
    (
        "probe",
        "--targets --db --interval --jitter --rounds --cacert --tls",
    ),
    (
        "path",
        "--delay --jitter --reorder --rate --uplink-trace --downlink-trace --queue \
         --loss --ge --up --down --cc --seed --cpus --ready-port --ready-timeout --json \
         --cleanup",
    ),
];

/// Whether `help` names `flag` itself (not only a longer flag it begins).
fn lists(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        !help[i + flag.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
    })
}

#[test]
fn every_subcommand_help_lists_its_flags_and_values() {
    for (cmd, flags) in FLAGS {
        let help = expect_ok(&run_tlslab(&[cmd, "--help"], LIMIT));
        for flag in flags.split_whitespace() {
            assert!(
                lists(&help, flag),
                "`tlslab {cmd} --help` lacks {flag}:\n{help}"
            );
        }
    }
    // Engine enums derive clap's ValueEnum: each value is listed with its help.
    for (cmd, values) in [
        (
            "load",
            "urls: specweb96: ecommerce: replay: poisson: constant:",
        ),
        ("load", "id: ticket: auto: bytes: original:"),
        ("load", "valid: junk: mixed: ping-only:"),
        ("sweep", "clients: rate:"),
        ("cluster", "tlslab: nginx: haproxy:"),
        (
            "dispatch",
            "session: round-robin: least-conn: source-ip: forward: close:",
        ),
    ] {
        let help = expect_ok(&run_tlslab(&[cmd, "--help"], LIMIT));
        for v in args(values) {
            assert!(
                help.contains(v),
                "`tlslab {cmd} --help` lacks the value {v}:\n{help}"
            );
        }
    }
}

/// `--key` (a key type), `--group` and `--suite` are hidden aliases: they
/// parse, to the same effect as the new spelling, and are not in the help.
#[test]
fn old_spellings_are_hidden_aliases_of_the_new() {
    // A bad key type is a usage error naming the flag, in either spelling.
    for cmd in ["certs", "breakdown", "overload", "cluster", "plan"] {
        for flag in ["--key-type", "--key"] {
            let mut args = vec![cmd, flag, "dsa1024"];
            if cmd == "certs" {
                args.extend(["--out", "unused"]);
            }
            let err = usage_error(&args, LIMIT);
            assert!(
                err.contains("--key-type") && err.contains("dsa1024"),
                "{args:?}: {err}"
            );
        }
        let help = expect_ok(&run_tlslab(&[cmd, "--help"], LIMIT));
        assert!(
            !lists(&help, "--key"),
            "`{cmd} --help` shows the old --key: {help}"
        );
    }
    // A good one works in either spelling.
    let dir = tempdir();
    for (i, flag) in ["--key-type", "--key"].into_iter().enumerate() {
        let out_dir = dir.path().join(format!("c{i}"));
        let out_dir = out_dir.to_str().expect("utf-8");
        expect_ok(&run_tlslab(
            &["certs", "--out", out_dir, flag, "ed25519"],
            LIMIT,
        ));
        let pem = std::fs::read_to_string(dir.path().join(format!("c{i}/server.key")))
            .expect("server.key");
        assert!(pem.contains("PRIVATE KEY"), "{flag}: {pem}");
    }
    // --groups/--suites and --group/--suite: checked alike before any work.
    let url = format!("https://127.0.0.1:{}/", free_port());
    for cmd in ["load", "sweep"] {
        for (flag, bad) in [
            ("--groups", "nogroup"),
            ("--group", "nogroup"),
            ("--suites", "NO_SUITE"),
            ("--suite", "NO_SUITE"),
        ] {
            let args = [cmd, &url, "--insecure", "-n", "1", flag, bad];
            assert_usage_error(&args, bad, LIMIT);
        }
        let help = expect_ok(&run_tlslab(&[cmd, "--help"], LIMIT));
        assert!(
            !lists(&help, "--group") && !lists(&help, "--suite"),
            "`{cmd} --help` shows an old spelling: {help}"
        );
    }
}

// -------------------------------------------------- the helpers themselves ---

#[test]
fn helper_parses_serve_start_lines() {
    assert_eq!(
        common::parse_serve_line("tlslab serve: https https://127.0.0.1:4433"),
        Some(("https", "https://127.0.0.1:4433"))
    );
    assert_eq!(
        common::url_addr("http://127.0.0.1:9/metrics"),
        Some("127.0.0.1:9".parse().expect("addr"))
    );
    assert_eq!(common::parse_serve_line("listening"), None);
    assert_eq!(common::url_addr("127.0.0.1:9"), None);
}

#[test]
fn helper_parses_http_responses() {
    let raw =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    assert_eq!(
        common::parse_http_response(raw).expect("parse"),
        (200, "abcde".to_string())
    );
    let raw = b"HTTP/1.0 404 Not Found\r\nContent-Length: 2\r\n\r\nno";
    assert_eq!(
        common::parse_http_response(raw).expect("parse"),
        (404, "no".to_string())
    );
    assert!(common::parse_http_response(b"garbage").is_err());
    assert_eq!(common::dechunk("5\r\nab"), None);
}

#[test]
fn helper_parses_the_nginx_access_log() {
    let log = "r TLSv1.3 200 /4k.bin?case=a\n. TLSv1.2 200 /4k.bin\n\n";
    let lines = nginx::parse_log(log).expect("parse");
    assert_eq!(
        lines,
        vec![
            nginx::LogLine {
                reused: true,
                protocol: "TLSv1.3".into(),
                status: 200,
                uri: "/4k.bin?case=a".into()
            },
            nginx::LogLine {
                reused: false,
                protocol: "TLSv1.2".into(),
                status: 200,
                uri: "/4k.bin".into()
            },
        ]
    );
    assert!(nginx::parse_log("x TLSv1.3 200 /").is_err());
    assert!(nginx::parse_log("r TLSv1.3 abc /").is_err());
}

#[test]
fn helper_writes_an_nginx_config_inside_its_prefix() {
    let dir = tempdir();
    let c = nginx::Config {
        prefix: dir.path().to_path_buf(),
        port: 4433,
        chain: "/c/server.pem".into(),
        key: "/c/server.key".into(),
        tickets: false,
    };
    c.write().expect("write");
    let text = std::fs::read_to_string(c.conf_path()).expect("read");
    assert!(text.contains("listen 127.0.0.1:4433 ssl;"), "{text}");
    assert!(text.contains("ssl_session_tickets off;"), "{text}");
    assert!(text.contains(nginx::LOG_FORMAT), "{text}");
    assert_eq!(
        std::fs::metadata(c.docroot().join("4k.bin"))
            .expect("4k")
            .len(),
        4096
    );
    let prefix = dir.path().to_str().expect("utf-8");
    for line in text
        .lines()
        .filter(|l| l.contains("_path ") || l.contains("pid ") || l.contains("_log "))
    {
        assert!(line.contains(prefix), "path outside the prefix: {line}");
    }
}

#[test]
fn helper_proc_guard_kills_on_drop() {
    let p = Proc::spawn({
        let mut c = std::process::Command::new("sleep");
        c.arg("30");
        c
    });
    let pid = nix::unistd::Pid::from_raw(p.pid() as i32);
    drop(p);
    // Reaped: the pid no longer names our child.
    assert!(nix::sys::signal::kill(pid, None).is_err());
}

#[test]
fn helper_parses_peer_tool_output() {
    use common::peers;
    let h2 = "finished in 1.2s, 160 req/s\n\
              requests: 200 total, 200 started, 200 done, 199 succeeded, 1 failed, 0 errored, 0 timeout\n\
              Application protocol: h2\n";
    let r = peers::parse_h2load(h2).expect("parse");
    assert_eq!((r.total, r.started, r.done), (200, 200, 200));
    assert_eq!(
        (r.succeeded, r.failed, r.errored, r.timeout),
        (199, 1, 0, 0)
    );
    assert_eq!(peers::h2load_protocol(h2), Some("h2"));
    assert_eq!(peers::parse_h2load("no summary"), None);

    let s = "CONNECTED(00000003)\n---\nNew, TLSv1.2, Cipher is ECDHE-ECDSA-AES128-GCM-SHA256\n\
             drop connection and then reconnect\nReused, TLSv1.2, Cipher is ECDHE-ECDSA-AES128-GCM-SHA256\n\
             New, (NONE), Cipher is (NONE)\n";
    assert_eq!(
        peers::s_client_sessions(s),
        vec![
            (false, "TLSv1.2".to_string()),
            (true, "TLSv1.2".to_string())
        ]
    );
}

/// bench/redis.sh reads redis-server's arguments from `tlslab peers
/// redis-args`, one per line; `--save` takes an empty argument (no dumps).
#[test]
fn peers_redis_args_are_one_per_line_with_the_empty_save() {
    let out = run_tlslab(&args("peers redis-args --port 7001 --dir /tmp/r"), LIMIT);
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let mut want = args("--port 7001 --bind 127.0.0.1 --save");
    want.extend([""].into_iter().chain(args("--appendonly no --dir /tmp/r")));
    assert_eq!(lines, want);
}

// Issue 29: `load --h3 --flood` is a hostile mode: without its confirmation,
// without --h3, or against an address that is not loopback (without
// --flood-allow-remote) it is a usage error that names the fix, before
// any packet is sent.
#[test]
fn a_flood_needs_its_confirmation_and_a_loopback_target() {
    let base = ["load", "https://127.0.0.1:1/", "-d", "1s", "--insecure"];
    let with = |extra: &[&'static str]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    assert_usage_error(
        &with(&["--h3", "--flood", "valid"]),
        "--confirm-flood",
        LIMIT,
    );
    assert_usage_error(
        &with(&["--flood", "junk", "--confirm-flood"]),
        "add --h3",
        LIMIT,
    );
    assert_usage_error(
        &with(&["--h3", "--flood-rate", "10"]),
        "--flood KIND",
        LIMIT,
    );
    assert_usage_error(
        &with(&[
            "--h3",
            "--flood",
            "ping-only",
            "--flood-rate",
            "5000",
            "--confirm-flood",
        ]),
        "1 to 1000",
        LIMIT,
    );
    let remote = [
        "load",
        "https://192.0.2.1:8443/",
        "-d",
        "1s",
        "--insecure",
        "--h3",
        "--flood",
        "junk",
        "--confirm-flood",
    ];
    assert_usage_error(&remote, "--flood-allow-remote", LIMIT);
}
