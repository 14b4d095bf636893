//! `tlslab serve` under hostile conditions, through the real binary
//! (issue 20): zero durations are usage errors, the metrics listener cannot
//! take the file descriptors the main listeners need, accept loops back off
//! when descriptors run out and keep serving, and a Redis session cache
//! that is down is reported once, not silently. Loopback only.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn zero_durations_on_serve_are_usage_errors_before_any_work() {
    // Regression (issue 20): `--handshake-timeout 0s` exited 1 after the
    // certificate was generated, and `--session-timeout 0s` started a
    // server whose sessions expired at once.
    for flag in args(
        "--handshake-timeout --session-timeout --request-timeout --keepalive-timeout \
         --h2-ping-interval",
    ) {
        let tmp = tempdir();
        let mut cmd = tlslab(["serve", "--listen", "127.0.0.1:0", flag, "0s"]);
        cmd.env("TMPDIR", tmp.path());
        let out = run(cmd, Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(flag) && err.contains("positive duration"),
            "{err}"
        );
        let written: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert!(
            written.is_empty(),
            "{flag}: work was done before the usage error: {written:?}"
        );
    }
    // `off` is how PINGs are turned off.
    let out = run_tlslab(
        &["serve", "--h2-ping-interval", "never"],
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

/// `tlslab serve ARGS` with at most `nofile` file descriptors (soft and
/// hard limit, so raising the soft one changes nothing), and its https,
/// http and metrics addresses.
fn serve_with_nofile(
    nofile: u32,
    args: &[&str],
) -> (Proc, SocketAddr, SocketAddr, SocketAddr, tempfile::TempDir) {
    let tmp = tempdir();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
        .arg(bin())
        .args(self::args(
            "serve --listen 127.0.0.1:0 --http 127.0.0.1:0 --metrics 127.0.0.1:0 --threads 1 \
             --log-level info",
        ))
        .args(args)
        .env("TMPDIR", tmp.path());
    let proc = Proc::spawn(cmd).graceful_drop();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut https, mut http, mut metrics) = (None, None, None);
    while https.is_none() || http.is_none() || metrics.is_none() {
        let line = proc
            .next_line(deadline)
            .unwrap_or_else(|| panic!("serve did not start:\n{}", proc.describe()));
        match parse_serve_line(&line) {
            Some(("https", v)) => https = url_addr(v),
            Some(("http", v)) => http = url_addr(v),
            Some(("metrics", v)) => metrics = url_addr(v),
            _ => {}
        }
    }
    (proc, https.unwrap(), http.unwrap(), metrics.unwrap(), tmp)
}

/// Opens `n` connections to `addr` and keeps them (idle).
fn hold(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
        .collect()
}

/// A plain GET with a read timeout; the status line, or the error.
fn get_within(addr: SocketAddr, limit: Duration) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, limit).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(limit)).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 256];
    let n = s
        .read(&mut buf)
        .map_err(|e| format!("no answer within {limit:?}: {e}"))?;
    Ok(String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string())
}

/// The CPU time (utime + stime) of process `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn metrics_connections_cannot_take_the_descriptors_of_the_main_listeners() {
    // Regression (issue 20): the metrics listener had no connection limit,
    // so idle scrapers took every descriptor and the main listeners could
    // not accept.
    let (proc, _https, http, metrics, _tmp) = serve_with_nofile(160, &[]);
    let held = hold(metrics, 200);
    std::thread::sleep(Duration::from_millis(300));
    let status = get_within(http, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{e}\n{}", proc.describe()));
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    // At most 64 metrics connections stay open; the rest are closed.
    let closed = held
        .into_iter()
        .filter_map(|mut s| {
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut b = [0u8; 1];
            matches!(s.read(&mut b), Ok(0)).then_some(())
        })
        .count();
    assert!(
        closed >= 200 - 64,
        "only {closed} of 200 metrics connections were closed"
    );
    // And metrics still answer once the idle ones are gone.
    let (status, _) = http_get(metrics, "/health").unwrap();
    assert_eq!(status, 200);
    let err = proc.stderr_text();
    assert!(
        err.contains("RLIMIT_NOFILE: soft limit 160 (was 160), hard limit 160"),
        "{err}"
    );
}

#[test]
fn out_of_descriptors_the_accept_loops_back_off_and_keep_serving() {
    let (proc, _https, http, _metrics, _tmp) = serve_with_nofile(160, &[]);
    // A kept-alive connection opened before the descriptors run out.
    let mut kept = TcpStream::connect(http).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut buf = [0u8; 512];
    kept.write_all(req).unwrap();
    assert!(kept.read(&mut buf).unwrap() > 0);
    // 250 idle connections: the server accepts until EMFILE, then backs off.
    let held = hold(http, 250);
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_ticks(proc.pid());
    std::thread::sleep(Duration::from_secs(1));
    let spent = cpu_ticks(proc.pid()) - before;
    // 100 ticks per second on Linux: a spinning accept loop uses about 100.
    assert!(
        spent <= 10,
        "the server used {spent} ticks in 1 s while out of descriptors"
    );
    // Existing connections are still served.
    kept.write_all(req).unwrap();
    let n = kept.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let err = proc.stderr_text();
    assert!(err.contains("out of file descriptors"), "{err}");
    // Once they are freed, new clients are served again within the back-off.
    drop(held);
    drop(kept);
    let t = Instant::now();
    let status = get_within(http, Duration::from_secs(3))
        .unwrap_or_else(|e| panic!("{e}\n{}", proc.describe()));
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(
        proc.stderr_shows("accepting connections again", Duration::from_secs(3)),
        "{}",
        proc.describe()
    );
}

#[test]
fn a_redis_session_cache_that_is_down_is_reported_once() {
    // Regression (issue 20): with Redis down, serve printed nothing; the
    // errors showed only in the metrics.
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let dir = tempdir();
    let c = certs(dir.path(), "ecdsa-p256", &[]);
    let cache = redis_cache_flags("1.2", &url, "200ms");
    let s = Serve::start(&[&c.serve_flags()[..], &["--threads", "1"], &cache].concat());
    let ca: PathBuf = c.ca.clone();
    // Full handshakes store sessions (the writes fail), resumptions ask
    // Redis first (the GETs fail).
    let line = "load URL --cacert CA -c 1 -n 20 --requests-per-conn 1 --tls 1.2 --reuse 50";
    let vars = [("URL", &*s.url("/health")), ("CA", ca.to_str().unwrap())];
    let out = run_tlslab(&args_with(line, &vars), Duration::from_secs(30));
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        s.proc
            .stderr_shows("is unreachable", Duration::from_secs(5)),
        "no warning:\n{}",
        s.proc.describe()
    );
    std::thread::sleep(Duration::from_millis(500));
    let err = s.proc.stderr_text();
    let lines = err
        .lines()
        .filter(|l| l.contains("Redis session cache"))
        .count();
    assert_eq!(lines, 1, "one line per 30 s, not per failure:\n{err}");
    assert!(err.contains(&url), "{err}");
}
