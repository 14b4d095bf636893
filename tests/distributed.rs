//! Distributed load end to end: `tlslab load --shard I/N --start-at T --out
//! DIR` agents against one `tlslab serve`, merged by `tlslab merge`.
//!
//! - three agents on loopback (always runs);
//! - three agents in three network namespaces and the server in a fourth,
//!   on the test's own bridge (10.200.X.0/24, inside a namespace of its
//!   own; nothing outside the namespaces the test creates is touched).
//!   Skipped with a reason where `ip netns add` is not permitted, a
//!   failure under CI=true;
//! - an agent killed mid-run is reported as missing, never merged;
//! - bad `--shard`, `--start-at`, `--out` and `merge` input are usage errors.
//!
//! Each check of the merge is exact: total requests equal the server's
//! count, merged achieved reuse equals the server-observed reuse within a
//! point, and merged p50/p99 equal those of all agents' CSV latencies
//! within HDR precision (3 significant digits).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use common::{
    Metrics, Proc, Serve, args, args_with, assert_no_panic, assert_nums, assert_usage_error, bin,
    expect_ok, http_get, load_json, num, parse_serve_line, run_tlslab, show, tempdir, tlslab,
    url_addr, usage_error,
};

const LIMIT: Duration = Duration::from_secs(120);

/// An RFC 3339 time `secs` seconds from now, with milliseconds.
fn start_at(secs: u64) -> String {
    let t = SystemTime::now() + Duration::from_secs(secs);
    humantime_like(t)
}

fn humantime_like(t: SystemTime) -> String {
    // Format with the `date` tool-independent algorithm: days since epoch to
    // a civil date (Howard Hinnant's algorithm).
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    let ms = d.subsec_millis();
    let secs = d.as_secs() as i64;
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = tlslab_runtime::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Server-side totals: requests, and full/resumed handshakes.
fn server_counts(m: &Metrics) -> (f64, f64, f64) {
    let hs = |kind: &str| m.count("tlslab_handshakes_total", &[("kind", kind)]);
    (
        m.count("tlslab_requests_total", &[]),
        hs("full") + hs("full_hrr"),
        hs("resumed"),
    )
}

/// The `total_us` of every completed request in the agents' CSV logs.
fn csv_totals(dirs: &[PathBuf]) -> Vec<u64> {
    let mut out = Vec::new();
    for d in dirs {
        let text = std::fs::read_to_string(d.join("requests.csv")).expect("requests.csv");
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().expect("header").split(',').collect();
        let col = |n: &str| header.iter().position(|c| *c == n).expect(n);
        let (total, transfer, status) = (col("total_us"), col("transfer_us"), col("status"));
        for line in lines {
            // The columns used contain no commas; targets do not either.
            let f: Vec<&str> = line.split(',').collect();
            if !f[status].is_empty() && !f[transfer].is_empty() {
                out.push(f[total].parse().expect("total_us"));
            }
        }
    }
    out.sort_unstable();
    out
}

/// The value at quantile `q` as HdrHistogram defines it (the value at rank
/// ⌈q·n⌉), exactly.
fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Equal within HDR precision: 3 significant digits.
fn hdr_equal(hdr: f64, exact: u64) -> bool {
    (hdr - exact as f64).abs() <= (exact as f64 / 1000.0).max(1.0)
}

/// Runs `tlslab merge DIRS --json merged.json`; returns output and report.
fn merge(
    dir: &Path,
    dirs: &[PathBuf],
    extra: &[&str],
) -> (std::process::Output, serde_json::Value) {
    let json = dir.join("merged.json");
    let mut args: Vec<String> = vec!["merge".into()];
    args.extend(dirs.iter().map(|d| d.display().to_string()));
    args.extend(["--json".into(), json.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = common::run(tlslab(&args), LIMIT);
    assert_no_panic(&out.stderr);
    assert!(json.is_file(), "merge wrote no JSON: {}", show(&out));
    (out, load_json(&json))
}

/// Checks a merged run against the server and the agents' raw logs.
fn check_merge(
    merged: &serde_json::Value,
    dirs: &[PathBuf],
    before: (f64, f64, f64),
    after: (f64, f64, f64),
) {
    let attempted = num(merged, "requests/attempted");
    let agents: f64 = dirs
        .iter()
        .map(|d| num(&load_json(&d.join("report.json")), "requests/attempted"))
        .sum();
    assert_eq!(attempted, agents, "{merged:#}");
    assert_eq!(
        num(merged, "requests/succeeded"),
        attempted,
        "every request must succeed: {merged:#}"
    );
    let (requests, full, resumed) = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    assert_eq!(
        attempted, requests,
        "merged requests vs server's count: {merged:#}"
    );
    let server_reuse = resumed / (full + resumed);
    let merged_reuse = num(merged, "reuse/achieved");
    assert!(
        (merged_reuse - server_reuse).abs() <= 0.01,
        "merged reuse {merged_reuse} vs server-observed {server_reuse}"
    );
    assert_eq!(num(merged, "reuse/handshakes"), full + resumed);

    let totals = csv_totals(dirs);
    assert_eq!(totals.len() as f64, num(merged, "latency/total/count"));
    for (q, key) in [(0.5, "p50_us"), (0.99, "p99_us")] {
        let hdr = num(merged, &format!("latency/total/{key}"));
        let exact = exact_quantile(&totals, q);
        assert!(
            hdr_equal(hdr, exact),
            "merged {key} {hdr} vs {exact} from all agents' CSV rows"
        );
    }
    let max = num(merged, "latency/total/max_us");
    assert_eq!(max, *totals.last().expect("rows") as f64);
    let d = &merged["distributed"];
    assert_eq!(d["agents_merged"], dirs.len(), "{d:#}");
    assert_eq!(d["missing"].as_array().map(Vec::len), Some(0), "{d:#}");
}

/// Agent `i` of 3: `load URL --shard i/3 --start-at AT --out
/// DIR/agent-i EXTRA`, one thread, trusting `ca`.
fn agent_args(url: &str, ca: &str, i: usize, at: &str, dir: &Path, extra: &[&str]) -> Vec<String> {
    let (shard, out) = (format!("{i}/3"), agent_dir(dir, i).display().to_string());
    let line = "load URL --cacert CA --threads 1 --shard S --start-at AT --out OUT --no-progress";
    let vars = [
        ("URL", url),
        ("CA", ca),
        ("S", &shard),
        ("AT", at),
        ("OUT", &out),
    ];
    let mut v = args_with(line, &vars);
    v.extend_from_slice(extra);
    v.into_iter().map(String::from).collect()
}

/// Starts agent `i` of 3 on this host ([`agent_args`]).
fn spawn_agent(url: &str, ca: &str, i: usize, at: &str, dir: &Path, extra: &[&str]) -> Proc {
    Proc::spawn(tlslab(agent_args(url, ca, i, at, dir, extra)))
}

/// Agent `i`'s output directory under `dir`.
fn agent_dir(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("agent-{i}"))
}

#[test]
fn three_agents_on_loopback_merge_exactly() {
    let dir = tempdir();
    let serve = Serve::start(&["--tls", "1.2,1.3"]);
    let ca = serve.ca_str();
    let url = serve.url("/bytes/1024");
    let before = server_counts(&serve.metrics());
    let at = start_at(3);
    let dirs: Vec<PathBuf> = (1..=3).map(|i| agent_dir(dir.path(), i)).collect();
    let extra = args("-c 6 -n 240 --tls 1.3 --reuse 50");
    let agents: Vec<Proc> = (1..=3)
        .map(|i| spawn_agent(&url, ca, i, &at, dir.path(), &extra))
        .collect();
    for a in agents {
        let f = a.wait(LIMIT);
        assert!(f.status.is_some_and(|s| s.success()), "agent failed: {f:?}");
    }
    let (out, merged) = merge(dir.path(), &dirs, &[]);
    let text = expect_ok(&out);
    assert!(text.contains("agents: 3 of 3 merged"), "{text}");
    assert_eq!(num(&merged, "requests/attempted"), 240.0);
    assert_eq!(num(&merged, "config/clients"), 6.0);
    // The agents waited for one start time: their windows start together
    // (loosely here, in a debug build on a shared machine; BENCHMARKS.md
    // measures the release build).
    let skew = num(&merged, "distributed/start_skew_ms");
    assert!(skew <= 250.0, "start skew {skew} ms");
    let after = server_counts(&serve.metrics());
    check_merge(&merged, &dirs, before, after);
    // Each agent's interval log is readable and holds six tagged phases.
    let hlog = std::fs::read_to_string(dirs[0].join("histograms.hlog")).unwrap();
    for tag in args("connect handshake_full handshake_resumed ttfb transfer total") {
        assert!(hlog.contains(&format!("Tag={tag},")), "{hlog}");
    }
}

// HTTP/3 runs behind the same engine seam as TCP: sharded agents wait for
// one start and merge as over TCP.
#[test]
fn three_h3_agents_on_loopback_merge_exactly() {
    let dir = tempdir();
    let serve = Serve::start(&["--h3"]);
    let ca = serve.ca_str();
    let url = serve.url("/bytes/1024");
    let quic = |m: &Metrics, name: &str| m.count(name, &[("transport", "quic")]);
    let before = quic(&serve.metrics(), "tlslab_transport_requests_total");
    let at = start_at(3);
    let dirs: Vec<PathBuf> = (1..=3).map(|i| agent_dir(dir.path(), i)).collect();
    let extra = args("--h3 -c 6 -n 120 --reuse 50");
    let agents: Vec<Proc> = (1..=3)
        .map(|i| spawn_agent(&url, ca, i, &at, dir.path(), &extra))
        .collect();
    for a in agents {
        let f = a.wait(LIMIT);
        assert!(f.status.is_some_and(|s| s.success()), "agent failed: {f:?}");
    }
    for d in &dirs {
        let r = load_json(&d.join("report.json"));
        assert_eq!(r["http"]["protocol"], "h3", "{r:#}");
    }
    let (out, merged) = merge(dir.path(), &dirs, &[]);
    let text = expect_ok(&out);
    assert!(text.contains("agents: 3 of 3 merged"), "{text}");
    assert_eq!(num(&merged, "requests/attempted"), 120.0);
    assert_eq!(num(&merged, "requests/succeeded"), 120.0, "{merged:#}");
    // Server-observed: the same requests, over QUIC.
    let after = common::poll(
        Duration::from_secs(5),
        || serve.metrics(),
        |m| quic(m, "tlslab_transport_requests_total") - before >= 120.0,
    );
    assert_eq!(
        quic(&after, "tlslab_transport_requests_total") - before,
        120.0
    );
    assert_eq!(
        csv_totals(&dirs).len() as f64,
        num(&merged, "latency/total/count")
    );
    let skew = num(&merged, "distributed/start_skew_ms");
    assert!(skew <= 250.0, "start skew {skew} ms");
}

#[test]
fn an_agent_killed_mid_run_is_reported_missing() {
    let dir = tempdir();
    let serve = Serve::start(&[]);
    let ca = serve.ca_str();
    let url = serve.url("/bytes/128");
    let at = start_at(2);
    let dirs: Vec<PathBuf> = (1..=3).map(|i| agent_dir(dir.path(), i)).collect();
    let spawn = |i: usize, d: &str| {
        let extra = args_with("-c 3 -d D --reuse 50", &[("D", d)]);
        spawn_agent(&url, ca, i, &at, dir.path(), &extra)
    };
    let a1 = spawn(1, "1s");
    let a2 = spawn(2, "1s");
    let a3 = spawn(3, "60s");
    assert!(a1.wait(LIMIT).status.is_some_and(|s| s.success()));
    assert!(a2.wait(LIMIT).status.is_some_and(|s| s.success()));
    // Agent 3 is mid-run: it has written CSV rows but no marker.
    let f = a3.kill();
    assert!(!f.status.is_some_and(|s| s.success()));
    assert!(dirs[2].join("requests.csv").is_file());
    assert!(!dirs[2].join("complete.json").exists());

    let (out, merged) = merge(dir.path(), &dirs, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 agent(s) missing"), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("3/3     MISSING"), "{text}");
    let d = &merged["distributed"];
    assert_eq!(d["agents_merged"], 2, "{d:#}");
    assert_eq!(d["missing"][0]["shard"], "3/3", "{d:#}");
    let agents: f64 = dirs[..2]
        .iter()
        .map(|d| num(&load_json(&d.join("report.json")), "requests/attempted"))
        .sum();
    assert_eq!(num(&merged, "requests/attempted"), agents);

    // Without agent 3's directory: still missing, by index.
    let (out, merged) = merge(dir.path(), &dirs[..2], &["--allow-missing"]);
    expect_ok(&out);
    assert_eq!(merged["distributed"]["missing"][0]["shard"], "3/3");
    assert_eq!(
        merged["distributed"]["missing"][0]["reason"],
        "no directory of this shard was given"
    );
}

// Issue 20: merge combined agents of different runs (another seed, start
// time, -c or URL) with at most a WARNING and exit 0.
#[test]
fn agents_of_different_runs_are_refused_unless_forced() {
    let dir = tempdir();
    let serve = Serve::start(&[]);
    let ca = serve.ca_str();
    let (url, other_url) = (serve.url("/bytes/64"), serve.url("/bytes/65"));
    let agent = |name: &str, shard: &str, url: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let line = "load URL --cacert CA --shard S --out OUT -n 8 --no-progress";
        let vars = [
            ("URL", url),
            ("CA", ca),
            ("S", shard),
            ("OUT", out.to_str().unwrap()),
        ];
        let done = run_tlslab(&[&args_with(line, &vars)[..], extra].concat(), LIMIT);
        expect_ok(&done);
        out
    };
    let one = agent("one", "1/2", &url, &args("-c 2 --seed 1"));
    let seed = agent("seed", "2/2", &url, &args("-c 2 --seed 2"));
    let clients = agent("clients", "2/2", &url, &args("-c 4 --seed 1"));
    let target = agent("target", "2/2", &other_url, &args("-c 2 --seed 1"));
    for (other, want) in [
        (&seed, "has seed 2 but agent 1/2"),
        (&clients, "has -c 4 but agent 1/2"),
        (&target, "has targets"),
    ] {
        let dirs = [one.display().to_string(), other.display().to_string()];
        let out = run_tlslab(&["merge", &dirs[0], &dirs[1]], LIMIT);
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("not from one run") && err.contains(want) && err.contains("--force"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "a refused merge printed a report");
        let out = run_tlslab(&["merge", &dirs[0], &dirs[1], "--force"], LIMIT);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("WARNING: --force: merged although") && err.contains(want),
            "{err}"
        );
        assert_no_panic(&out.stderr);
    }
    // Agents whose interval logs are gone (an older tlslab wrote none):
    // --hdr-log names the file and the command that writes it.
    let seed2 = agent("seed2", "2/2", &url, &args("-c 2 --seed 1"));
    for d in [&one, &seed2] {
        std::fs::remove_file(d.join("intervals.hlog")).unwrap();
    }
    let hlog = dir.path().join("merged.hlog").display().to_string();
    let dirs = [one.display().to_string(), seed2.display().to_string()];
    let out = run_tlslab(&["merge", &dirs[0], &dirs[1], "--hdr-log", &hlog], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("holds intervals.hlog; the agents must run `load --out DIR`"),
        "{err}"
    );
}

#[test]
fn bad_distributed_input_is_a_usage_error() {
    let dir = tempdir();
    let d = dir.path().display().to_string();
    let url = "https://127.0.0.1:9/";
    let (o, l) = (format!("{d}/o"), format!("{d}/l.csv"));
    let cases = [
        ("--shard 0/3", "numbered from 1"),
        ("--shard 4/3", "larger than N"),
        ("--shard 1/0", "--shard 1/0"),
        ("--shard x", "I/N"),
        ("--start-at 2020-01-01T00:00:00Z", "in the past"),
        ("--start-at tomorrow", "RFC 3339"),
        ("--shard 3/3 -c 2", "fewer clients"),
        ("--out O --log L", "--log"),
    ];
    for (extra, want) in cases {
        let mut args = vec!["load", url, "-n", "3"];
        args.extend(args_with(extra, &[("O", &o), ("L", &l)]));
        assert_usage_error(&args, want, LIMIT);
    }
    usage_error(&["merge", &format!("{d}/nope")], LIMIT);
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let empty = format!("{d}/empty");
    assert_usage_error(&["merge", &empty], "no agent output is complete", LIMIT);
}

// ------------------------------------------------------- network namespaces

/// The test's namespaces: one per host, plus one holding the bridge; all
/// deleted on drop (also when the test fails).
struct Hosts {
    names: Vec<String>,
    subnet: u8,
}

impl Hosts {
    fn ip(args: &[&str]) -> Result<(), String> {
        let out = Command::new("ip")
            .args(args)
            .output()
            .map_err(|e| format!("ip: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Four hosts 10.200.S.1–4 on a bridge in a namespace of its own.
    fn create(tag: &str, hosts: usize) -> Result<Hosts, String> {
        let pid = std::process::id();
        let subnet = (pid % 200) as u8 + 20;
        let mut h = Hosts {
            names: Vec::new(),
            subnet,
        };
        let br = format!("tl{tag}br{pid}");
        Self::ip(&["netns", "add", &br])?;
        h.names.push(br.clone());
        Self::ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        Self::ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for i in 1..=hosts {
            let ns = format!("tl{tag}h{i}p{pid}");
            Self::ip(&["netns", "add", &ns])?;
            h.names.push(ns.clone());
            let (a, b) = (format!("v{i}a"), format!("v{i}b"));
            Self::ip(&[
                "-n", &ns, "link", "add", &a, "type", "veth", "peer", "name", &b,
            ])?;
            Self::ip(&["-n", &ns, "link", "set", &b, "netns", &br])?;
            Self::ip(&["-n", &br, "link", "set", &b, "master", "br0"])?;
            Self::ip(&["-n", &br, "link", "set", &b, "up"])?;
            let addr = format!("10.200.{subnet}.{i}/24");
            Self::ip(&["-n", &ns, "addr", "add", &addr, "dev", &a])?;
            Self::ip(&["-n", &ns, "link", "set", &a, "up"])?;
            Self::ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(h)
    }

    fn ns(&self, host: usize) -> &str {
        &self.names[host]
    }

    fn addr(&self, host: usize) -> String {
        format!("10.200.{}.{host}", self.subnet)
    }

    /// `tlslab ARGS` run inside host `host`'s namespace.
    fn tlslab(&self, host: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.ns(host)])
            .arg(bin())
            .args(args);
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for n in self.names.iter().rev() {
            let _ = Self::ip(&["netns", "del", n]);
        }
    }
}

/// GET /metrics of a server inside a namespace, from a thread that joins
/// that namespace (the test process itself stays where it is).
fn metrics_in(ns: &str, addr: std::net::SocketAddr) -> Metrics {
    let path = PathBuf::from("/run/netns").join(ns);
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).expect("namespace file");
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let (status, body) = http_get(addr, "/metrics").expect("GET /metrics");
        assert_eq!(status, 200, "{body}");
        Metrics::parse(&body)
    })
    .join()
    .expect("metrics thread")
}

#[test]
fn three_agents_in_network_namespaces_merge_exactly() {
    let hosts = match Hosts::create("d", 4) {
        Ok(h) => h,
        Err(e) => {
            let msg = format!(
                "SKIPPED three_agents_in_network_namespaces_merge_exactly: network namespaces are \
                 not permitted here ({e}); run as root with iproute2"
            );
            common::skip(&msg);
            return;
        }
    };
    let dir = tempdir();
    let server_ip = hosts.addr(1);
    let certs = common::certs(
        &dir.path().join("certs"),
        "ecdsa-p256",
        &["--san", &server_ip],
    );
    let listen = format!("{server_ip}:8443");
    let metrics = format!("{server_ip}:9100");
    let (chain, key, ca) = (
        certs.chain.display().to_string(),
        certs.key.display().to_string(),
        certs.ca.display().to_string(),
    );
    let vars = [("L", &*listen), ("M", &metrics), ("C", &chain), ("K", &key)];
    let serve_args = args_with("serve --listen L --metrics M --cert C --key-file K", &vars);
    let serve = Proc::spawn(hosts.tlslab(1, &serve_args)).graceful_drop();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut metrics_addr = None;
    while metrics_addr.is_none() {
        let line = serve
            .next_line(deadline)
            .unwrap_or_else(|| panic!("serve did not start: {}", serve.describe()));
        if let Some(("metrics", v)) = parse_serve_line(&line) {
            metrics_addr = url_addr(v);
        }
    }
    let metrics_addr = metrics_addr.expect("metrics address");
    let before = server_counts(&metrics_in(hosts.ns(1), metrics_addr));
    let url = format!("https://{listen}/bytes/2048");
    let at = start_at(3);
    let dirs: Vec<PathBuf> = (1..=3).map(|i| agent_dir(dir.path(), i)).collect();
    let extra = args("-c 6 -n 300 --reuse 50");
    let agents: Vec<Proc> = (1..=3)
        .map(|i| {
            let args = agent_args(&url, &ca, i, &at, dir.path(), &extra);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Proc::spawn(hosts.tlslab(i + 1, &args))
        })
        .collect();
    for a in agents {
        let f = a.wait(LIMIT);
        assert!(f.status.is_some_and(|s| s.success()), "agent failed: {f:?}");
    }
    let (out, merged) = merge(dir.path(), &dirs, &[]);
    expect_ok(&out);
    let after = server_counts(&metrics_in(hosts.ns(1), metrics_addr));
    check_merge(&merged, &dirs, before, after);
    assert_eq!(num(&merged, "requests/attempted"), 300.0);
    drop(serve);
}

#[test]
fn replay_shards_split_client_ips_and_merge_to_the_whole_log() {
    const IPS: usize = 7;
    const LINES: usize = 70;
    let dir = tempdir();
    let input = dir.path().join("input.log");
    // Line i: IP 10.1.0.(i*i+i)%7+1, size 100+i (distinct: names the line).
    let ip_of = |i: usize| (i * i + i + i / 3) % IPS + 1;
    let mut text = String::new();
    for i in 0..LINES {
        text += &format!(
            "10.1.0.{} - - [01/Jan/2024:10:{:02}:{:02} +0000] \"GET /p{i} HTTP/1.1\" 200 {}\n",
            ip_of(i),
            i / 60,
            i % 60,
            100 + i
        );
    }
    std::fs::write(&input, text).unwrap();
    let serve = Serve::start(&[]);
    let ca = serve.ca_str();
    let base = serve.url("");
    let at = start_at(2);
    let input = input.display().to_string();
    let dirs: Vec<PathBuf> = (1..=3).map(|i| agent_dir(dir.path(), i)).collect();
    let extra = ["--workload", "replay", "--access-log", &input, "-c", "3"];
    let agents: Vec<Proc> = (1..=3)
        .map(|i| spawn_agent(&base, ca, i, &at, dir.path(), &extra))
        .collect();
    for a in agents {
        let f = a.wait(LIMIT);
        assert!(f.status.is_some_and(|s| s.success()), "agent failed: {f:?}");
    }
    // Every line is replayed by exactly one agent, and all lines of one IP
    // by the same agent.
    let mut agent_of_ip = std::collections::HashMap::new();
    let mut lines = 0;
    for (k, d) in dirs.iter().enumerate() {
        let text = std::fs::read_to_string(d.join("requests.csv")).unwrap();
        for row in text.lines().skip(1) {
            let size: usize = row
                .split("/bytes/")
                .nth(1)
                .and_then(|s| s.split(',').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no /bytes/ path in {row}"));
            let ip = ip_of(size - 100);
            let owner = *agent_of_ip.entry(ip).or_insert(k);
            assert_eq!(owner, k, "IP {ip} replayed by agents {owner} and {k}");
            lines += 1;
        }
    }
    assert_eq!(lines, LINES);
    assert!(agent_of_ip.len() == IPS, "{agent_of_ip:?}");
    let (out, merged) = merge(dir.path(), &dirs, &[]);
    expect_ok(&out);
    assert_nums(
        &merged,
        &[
            ("requests/attempted", LINES as f64),
            ("replay/log_requests", LINES as f64),
            ("replay/log_sessions", IPS as f64),
            ("replay/requests_replayed", LINES as f64),
        ],
    );
}
