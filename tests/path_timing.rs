//! `tlslab path` (crates/path) against the protocol arithmetic (the
//! lifecycle and CLI tests are in `path.rs`).
//!
//! `#[ignore]` (run as root by .ci/run, `--release --test-threads=1`):
//! TCP connect = 1 RTT; TLS 1.3 handshake + GET = 2 RTT and TLS 1.2 = 3;
//! a first flight above the initial window (10 segments) costs one more
//! RTT; 10 Mbit/s goodput; 1 % loss makes the kernel retransmit; a UDP
//! echo sees the delay and the loss; real mahimahi traces; `lab --path`.
//!
//! Without root the root tests skip loudly (a failure under CI=true).
//! Addresses: 10.201.0.1/2, inside the namespaces each test creates.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use common::netpath::{on_client, on_server, root_tempdir, start, tcp_server};
use common::{show, skip_or_fail};
use tlslab_path::PathHandle;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Checks that `times` (ms) took `rtts` round trips of the path: none beats
/// them, the fastest is within a quarter RTT above them (the host's noise
/// only adds, so the fastest is the path's own time plus the work), and the
/// median is short of one more whole round trip (an extra round trip is
/// systematic: it moves every sample, the fastest included). A shared host's
/// stalls moved medians by 2-3 ms per round in full runs of .ci/run, and once
/// by 11.6 ms for TLS 1.2's three rounds (71.6 ms against 60, fastest 62.5,
/// the forwarder's own lateness p99 2.1 ms); the sub-millisecond figures are
/// BENCHMARKS.md's, measured on a quiet machine.
fn assert_rtts(what: &str, times: &[f64], rtts: f64) {
    let want = rtts * RTT_MS;
    let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
    let m = median(times.to_vec());
    assert!(
        fastest >= want - 0.1,
        "{what}: {times:?} ms, {rtts} RTT is {want} ms"
    );
    assert!(
        fastest <= want + RTT_MS / 4.0,
        "{what}: fastest {fastest} ms, {rtts} RTT is {want} ms"
    );
    assert!(
        m < want + RTT_MS,
        "{what}: median {m} ms, {rtts} RTT is {want} ms (one more is {} ms)",
        want + RTT_MS
    );
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

// ---- fast: usage, privileges, clean-up -------------------------------------

const RTT_MS: f64 = 20.0;

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn tcp_connect_takes_one_rtt() {
    let Some(p) = start("tcp_connect_takes_one_rtt", "delay=10ms") else {
        return;
    };
    let h = p.handle();
    let (addr, srv) = tcp_server(&h, 5001, |l| {
        for _ in 0..20 {
            let _ = l.accept();
        }
    });
    let times = on_client(&h, move || {
        (0..20)
            .map(|_| {
                let t = Instant::now();
                let s = connect(addr);
                let d = ms(t.elapsed());
                drop(s);
                d
            })
            .collect::<Vec<f64>>()
    });
    srv.join().unwrap();
    let report = p.stop().unwrap();
    eprintln!("connect times (ms): {times:?}\n{report}");
    // Within 1 ms, the fastest connect: BENCHMARKS.md's target for the path.
    let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(fastest <= RTT_MS + 1.0, "fastest connect {fastest} ms");
    assert_rtts("connect", &times, 1.0);
}

/// One TLS handshake and GET over the path; returns (handshake, handshake
/// + GET) in ms, both from the end of the TCP connect.
fn tls_exchange(
    h: &PathHandle,
    port: u16,
    version: &'static rustls::SupportedProtocolVersion,
) -> Vec<(f64, f64)> {
    use tlslab_crypto::pki::{KeyType, generate};
    let g = generate(KeyType::EcdsaP256, &["10.201.0.1".into()]).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let server_cfg = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[version])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(g.chain_der().unwrap(), g.key_der().unwrap())
            .unwrap(),
    );
    let mut client_cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(g.roots().unwrap())
        .with_no_client_auth();
    // Every handshake full: no session to resume.
    client_cfg.resumption = rustls::client::Resumption::disabled();
    let client_cfg = Arc::new(client_cfg);
    const N: usize = 5;
    let (addr, srv) = tcp_server(h, port, move |l| {
        for _ in 0..N {
            let (tcp, _) = l.accept().unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            tcp.set_nodelay(true).unwrap();
            let conn = rustls::ServerConnection::new(server_cfg.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tls.read(&mut buf).unwrap();
                assert!(n > 0);
                req.extend_from_slice(&buf[..n]);
            }
            tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .unwrap();
            tls.flush().unwrap();
            let _ = tls.read(&mut buf);
        }
    });
    let out = on_client(h, move || {
        (0..N)
            .map(|_| {
                let tcp = connect(addr);
                let name = rustls::pki_types::ServerName::try_from("10.201.0.1").unwrap();
                let mut conn = rustls::ClientConnection::new(client_cfg.clone(), name).unwrap();
                let mut tcp = tcp;
                let t = Instant::now();
                while conn.is_handshaking() {
                    conn.complete_io(&mut tcp).unwrap();
                }
                let hs = ms(t.elapsed());
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                tls.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
                tls.flush().unwrap();
                let mut resp = Vec::new();
                let mut buf = [0u8; 1024];
                while !resp.ends_with(b"ok") {
                    let n = tls.read(&mut buf).unwrap();
                    assert!(n > 0, "EOF before the response");
                    resp.extend_from_slice(&buf[..n]);
                }
                let all = ms(t.elapsed());
                tls.conn.send_close_notify();
                let _ = tls.flush();
                (hs, all)
            })
            .collect::<Vec<_>>()
    });
    srv.join().unwrap();
    out
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn tls13_full_handshake_and_get_take_two_rtt_and_tls12_three() {
    let Some(p) = start("tls_handshake_rtts", "delay=10ms") else {
        return;
    };
    let h = p.handle();
    for (version, port, hs_rtts, all_rtts) in [
        (&rustls::version::TLS13, 5002, 1.0, 2.0),
        (&rustls::version::TLS12, 5003, 2.0, 3.0),
    ] {
        let runs = tls_exchange(&h, port, version);
        eprintln!("{version:?}: (handshake, +GET) ms {runs:?}");
        // The round trips are what is checked (CI once saw a median of
        // 63.9 ms for TLS 1.2's three rounds, and a noisy host 47.1 ms for
        // TLS 1.3's two; a fourth round trip would be 80 ms).
        let hs: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let all: Vec<f64> = runs.iter().map(|r| r.1).collect();
        assert_rtts(&format!("{version:?} handshake"), &hs, hs_rtts);
        assert_rtts(&format!("{version:?} handshake + GET"), &all, all_rtts);
    }
    eprintln!("{}", p.stop().unwrap());
}

/// The time from sending a request to the last byte of an `n`-byte
/// response on a fresh connection, in ms: the fastest of three (sizes
/// interleaved), since the host's noise only adds to a round-trip count.
fn first_flight(h: &PathHandle, port: u16, sizes: &'static [usize]) -> Vec<f64> {
    const TRIES: usize = 3;
    let (addr, srv) = tcp_server(h, port, move |l| {
        for _ in 0..TRIES * sizes.len() {
            let (mut s, _) = l.accept().unwrap();
            s.set_nodelay(true).unwrap();
            let mut req = [0u8; 8];
            s.read_exact(&mut req).unwrap();
            let n = u64::from_be_bytes(req) as usize;
            s.write_all(&vec![7u8; n]).unwrap();
            let _ = s.read(&mut req);
        }
    });
    let times = on_client(h, move || {
        let mut best = vec![f64::INFINITY; sizes.len()];
        for _ in 0..TRIES {
            for (i, &n) in sizes.iter().enumerate() {
                let mut s = connect(addr);
                let mut buf = vec![0u8; 65_536];
                let t = Instant::now();
                s.write_all(&(n as u64).to_be_bytes()).unwrap();
                let mut got = 0;
                while got < n {
                    let k = s.read(&mut buf).unwrap();
                    assert!(k > 0);
                    got += k;
                }
                best[i] = best[i].min(ms(t.elapsed()));
            }
        }
        best
    });
    srv.join().unwrap();
    times
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn a_first_flight_above_the_initial_window_costs_one_more_rtt() {
    // Reno: the textbook slow start (cubic's is the same, but a namespace may only
    // default to an algorithm in tcp_allowed_congestion_control). (BBR, this kernel's default, paces
    // the second round at 2 × cwnd / RTT, so it lands later: below.)
    let Some(p) = start("initial_window", "delay=10ms,cc=reno") else {
        return;
    };
    let h = p.handle();
    // initcwnd 10 × MSS 1448 = 14,480 bytes.
    static SIZES: [usize; 5] = [10_000, 14_000, 16_000, 24_000, 30_000];
    let t = first_flight(&h, 5004, &SIZES);
    eprintln!(
        "reno: first flights {SIZES:?} bytes: {t:?} ms\n{}",
        p.stop().unwrap()
    );
    // The round trips are what is checked: within a quarter RTT of the
    // count (a burst of 20 segments meets the forwarder's release jitter,
    // up to about 3 ms on a busy machine: 43.2 ms for 30 KB was seen once;
    // a third round trip would be 60 ms).
    for (i, &rtts) in [1.0, 1.0, 2.0, 2.0, 2.0].iter().enumerate() {
        let want = rtts * RTT_MS;
        assert!(
            t[i] >= want - 0.1 && t[i] <= want + RTT_MS / 4.0,
            "{} bytes took {} ms, want {want} ms",
            SIZES[i],
            t[i]
        );
    }
    let Some(p) = start("initial_window_bbr", "delay=10ms,cc=bbr") else {
        return;
    };
    static BBR: [usize; 3] = [14_000, 16_000, 30_000];
    let t = first_flight(&p.handle(), 5004, &BBR);
    eprintln!(
        "bbr: first flights {BBR:?} bytes: {t:?} ms\n{}",
        p.stop().unwrap()
    );
    // As for reno: round trips within a quarter RTT (a full run of .ci/run
    // saw 22.4 ms for the 14 KB flight, over a former 2 ms bound).
    assert!(t[0] <= RTT_MS + RTT_MS / 4.0, "{t:?}");
    assert!(t[1] >= 2.0 * RTT_MS - 0.1 && t[2] < 3.0 * RTT_MS, "{t:?}");
}

/// Bytes the client receives from a server that sends for `secs`, counted
/// from 1 s after the start (past slow start); returns Mbit/s of payload.
fn bulk_goodput(h: &PathHandle, port: u16, secs: f64) -> f64 {
    let (addr, srv) = tcp_server(h, port, move |l| {
        let (mut s, _) = l.accept().unwrap();
        let chunk = vec![1u8; 65_536];
        let t = Instant::now();
        while t.elapsed().as_secs_f64() < secs {
            if s.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let goodput = on_client(h, move || {
        let mut s = connect(addr);
        let mut buf = vec![0u8; 65_536];
        let t = Instant::now();
        let (mut from, mut bytes) = (None, 0u64);
        loop {
            let k = match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => k,
            };
            if t.elapsed() >= Duration::from_secs(1) {
                if from.is_none() {
                    from = Some(Instant::now());
                } else {
                    bytes += k as u64;
                }
            }
        }
        let span = from.expect("ran past 1 s").elapsed().as_secs_f64();
        bytes as f64 * 8.0 / span / 1e6
    });
    srv.join().unwrap();
    goodput
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn bulk_over_10mbit_reaches_9_5_to_10_mbit_goodput() {
    let Some(p) = start("bulk_10mbit", "delay=10ms,rate=10mbit,queue=100pkt") else {
        return;
    };
    // Up to three 5 s transfers over the one path, each printed. No run may
    // exceed the link's rate; the best must reach 9.5 Mbit/s. A stall of
    // the shared host (a full .ci/run saw 9.2 Mbit/s once, its forwarder
    // 9 ms late at p99, where the same binary gave 9.65 on the next run)
    // costs one transfer, not the emulator's rate.
    let mut runs = Vec::new();
    for port in 5005..5008 {
        let g = bulk_goodput(&p.handle(), port, 5.0);
        eprintln!("goodput {g:.3} Mbit/s");
        runs.push(g);
        if g >= 9.5 {
            break;
        }
    }
    let r = p.stop().unwrap();
    eprintln!("{r}");
    let best = runs.iter().copied().fold(0.0, f64::max);
    assert!(runs.iter().all(|&g| g <= 10.0), "goodput {runs:?} Mbit/s");
    assert!(best >= 9.5, "goodput {runs:?} Mbit/s");
    // The forwarder keeps up with 10 Mbit/s on its own CPU. Its release
    // lateness is printed but not asserted: on a shared 2-core host the
    // scheduler alone gives p99s of 0.7-5 ms (seen in CI) with an idle
    // forwarder; BENCHMARKS.md's path rows measure it on a quiet machine.
    for d in [&r.up, &r.down] {
        assert!(
            d.wall_ms > 0.0 && d.cpu_ms / d.wall_ms < 0.5,
            "the {} forwarder used {:.1} ms of CPU over {:.1} ms\n{r}",
            d.direction,
            d.cpu_ms,
            d.wall_ms
        );
    }
}

/// TCP's retransmitted segments in the calling thread's namespace.
fn retrans_segs() -> u64 {
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap();
    let tcp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Tcp:")).collect();
    let names: Vec<&str> = tcp[0].split_whitespace().collect();
    let vals: Vec<&str> = tcp[1].split_whitespace().collect();
    let i = names.iter().position(|n| *n == "RetransSegs").unwrap();
    vals[i].parse().unwrap()
}

/// `n` exchanges of a 1-byte request and a 10 KB response on one
/// connection: the times (ms) and the server's retransmitted segments.
fn exchanges(h: &PathHandle, port: u16, n: usize) -> (Vec<f64>, u64) {
    let (tx, rx) = channel();
    let (addr, srv) = tcp_server(h, port, move |l| {
        let before = retrans_segs();
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let resp = vec![3u8; 10_000];
        let mut req = [0u8; 1];
        for _ in 0..n {
            s.read_exact(&mut req).unwrap();
            s.write_all(&resp).unwrap();
        }
        let _ = s.read(&mut req);
        tx.send(retrans_segs() - before).unwrap();
    });
    let times = on_client(h, move || {
        let mut s = connect(addr);
        let mut buf = vec![0u8; 10_000];
        (0..n)
            .map(|_| {
                let t = Instant::now();
                s.write_all(b"?").unwrap();
                s.read_exact(&mut buf).unwrap();
                ms(t.elapsed())
            })
            .collect::<Vec<f64>>()
    });
    srv.join().unwrap();
    (times, rx.recv().unwrap())
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn one_percent_loss_makes_the_kernel_retransmit_and_shows_in_timings() {
    const N: usize = 200;
    let mut runs = Vec::new();
    for spec in ["delay=10ms,cc=reno", "delay=10ms,cc=reno,loss=1%,seed=3"] {
        let Some(p) = start("loss_1pct", spec) else {
            return;
        };
        let (mut t, retrans) = exchanges(&p.handle(), 5006, N);
        let r = p.stop().unwrap();
        t.sort_by(f64::total_cmp);
        let slow = t.iter().filter(|&&x| x >= 2.0 * RTT_MS - 0.1).count();
        let mean = t.iter().sum::<f64>() / N as f64;
        eprintln!(
            "{spec}: {N} exchanges of 10 KB: p50 {:.2} ms, mean {mean:.2}, p99 {:.2}, max {:.2}; \
             {slow} took ≥ 2 RTT; the server retransmitted {retrans} segments\n{r}",
            t[N / 2],
            t[N * 99 / 100],
            t[N - 1]
        );
        runs.push((
            slow,
            mean,
            retrans,
            r.up.dropped_loss + r.down.dropped_loss,
            t[N / 2],
        ));
    }
    let (clean, lossy) = (runs[0], runs[1]);
    // Without loss: no packet dropped, nothing retransmitted, and (but for
    // a stall of the host: one exchange of 200 took 81 ms in a noisy run,
    // with nothing retransmitted) no exchange past two round trips.
    assert_eq!((clean.2, clean.3), (0, 0), "the loss-free run: {clean:?}");
    assert!(clean.0 <= 2, "the loss-free run: {clean:?}");
    // One RTT, not two: within a quarter RTT (the 10 KB response's seven
    // segments and a wake-up of an idle vCPU add a little; CI once failed a
    // ±1 ms bound here on a shared host).
    assert!(
        (clean.4 - RTT_MS).abs() < RTT_MS / 4.0,
        "loss-free median {} ms",
        clean.4
    );
    assert!(
        lossy.3 > 0 && lossy.2 > 0,
        "no loss or no retransmission: {lossy:?}"
    );
    assert!(
        lossy.0 > clean.0 + 10,
        "no exchange shows a recovery: {lossy:?}"
    );
    assert!(
        lossy.1 > clean.1 + 1.0,
        "loss did not slow the exchanges: {runs:?}"
    );
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn udp_echo_sees_the_configured_delay_and_loss() {
    let Some(p) = start("udp_echo", "delay=5ms,up.loss=5%,seed=11") else {
        return;
    };
    let h = p.handle();
    let addr = SocketAddr::new(h.server_ip(), 5007);
    let (tx, rx) = channel();
    let srv = on_server(&h, move || {
        let s = UdpSocket::bind(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        tx.send(()).unwrap();
        let mut buf = [0u8; 64];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            s.send_to(&buf[..n], from).unwrap();
        }
    });
    rx.recv().unwrap();
    const N: u64 = 2000;
    let (rtts, got) = on_client(&h, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect(addr).unwrap();
        s.set_nonblocking(true).unwrap();
        let epoch = Instant::now();
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        let drain = |rtts: &mut Vec<f64>, buf: &mut [u8; 64]| {
            while let Ok(n) = s.recv(buf) {
                assert_eq!(n, 8);
                let sent = u64::from_be_bytes(buf[..8].try_into().unwrap());
                rtts.push((epoch.elapsed().as_nanos() as u64 - sent) as f64 / 1e6);
            }
        };
        for i in 0..N {
            let due = Duration::from_micros(500 * i);
            while epoch.elapsed() < due {
                drain(&mut rtts, &mut buf);
                std::thread::sleep(Duration::from_micros(100));
            }
            let now = epoch.elapsed().as_nanos() as u64;
            s.send(&now.to_be_bytes()).unwrap();
        }
        let end = Instant::now() + Duration::from_millis(200);
        while Instant::now() < end {
            drain(&mut rtts, &mut buf);
            std::thread::sleep(Duration::from_millis(1));
        }
        let got = rtts.len() as u64;
        (rtts, got)
    });
    srv.join().unwrap();
    let r = p.stop().unwrap();
    let mut s = rtts.clone();
    s.sort_by(f64::total_cmp);
    let (p50, p99) = (s[s.len() / 2], s[s.len() * 99 / 100]);
    eprintln!("UDP echo: {got} of {N} back; RTT p50 {p50:.3} ms, p99 {p99:.3} ms\n{r}");
    assert!(s[0] >= 10.0 - 0.01, "an echo beat the delay: {} ms", s[0]);
    // The fastest echo is the path's own time (within 0.5 ms): the host's
    // noise only adds. The median and the tail are the host's as much as
    // the path's (a stalled CI host moved p50 to 15.6 ms and p99 to 44.1 ms
    // once, with the forwarder's own lateness p50 0.9 ms), so only a gross
    // error fails the median: a second delay (20 ms) on most echoes.
    assert!(s[0] <= 10.5, "fastest echo {} ms", s[0]);
    assert!(p50 < 20.0, "p50 {p50} ms: a second delay is 20 ms");
    // The tail is a timing target, measured by `path_bench.rs` against the
    // forwarder's own clock (BENCHMARKS.md). Here the echo's own polling and
    // the VM's scheduling add to it: p99 was 11.6, 13.2 and 15.0 ms on a
    // quiet shared 2-core host and 44.1 ms on a stalled CI host, where
    // waking an idle vCPU costs the forwarder milliseconds now and then. So
    // the path's own books are checked instead: with no rate limit nothing
    // queues, and most echoes are short of a second delay (a stuck queue or
    // a doubled delay moves them all).
    for d in [&r.up, &r.down] {
        assert_eq!(d.max_queue_packets, 0, "{}: nothing queues", d.direction);
        assert_eq!(d.dropped_queue, 0, "{}", d.direction);
    }
    let late = s.iter().filter(|&&t| t >= 20.0).count();
    assert!(
        late * 10 < s.len(),
        "{late} of {} echoes took a second delay (p99 {p99} ms)",
        s.len()
    );
    // 5 % loss on the way up: 1900 ± 1.96 √(2000 × 0.05 × 0.95) = 1900 ± 19.1.
    let half = 1.96 * (N as f64 * 0.05 * 0.95).sqrt();
    assert!((got as f64 - 1900.0).abs() <= half, "{got} echoes");
    assert_eq!(
        r.up.dropped_loss,
        N - got,
        "every missing echo is a path loss"
    );
}

// ---- real traces ------------------------------------------------------------

#[test]
fn mahimahi_cellular_traces_parse_and_drive_the_model() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mahimahi");
    let traces: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "up" || x == "down"))
                .collect()
        })
        .unwrap_or_default();
    if traces.is_empty() {
        skip_or_fail(
            "mahimahi_cellular_traces_parse_and_drive_the_model",
            &format!("no mahimahi traces (*.up, *.down) in {}", dir.display()),
        );
        return;
    }
    for f in traces {
        let t = tlslab_path::Trace::load(&f).unwrap();
        let mbps = t.mean_bps() / 1e6;
        eprintln!(
            "{}: {} opportunities in {} ms, {mbps:.2} Mbit/s",
            f.display(),
            t.opportunities(),
            t.period_ns() / 1_000_000
        );
        assert!(
            t.opportunities() > 100 && (0.05..500.0).contains(&mbps),
            "{}",
            f.display()
        );
        // Saturate the link for one period: the model delivers the trace's
        // bytes, no more.
        let dir = tlslab_path::Direction {
            link: Some(t.clone()),
            queue: tlslab_path::QueueLimit::Packets(10_000_000),
            ..Default::default()
        };
        let mut m = tlslab_path::Model::new(&dir, 1);
        let n = t.opportunities();
        for _ in 0..n + 100 {
            m.arrive(0, vec![0; 1504]);
        }
        let mut out = 0;
        m.poll(t.period_ns() - 1, |_, _| out += 1);
        assert!(out <= n && out + 2 >= n, "{out} of {n}");
    }
}

#[test]
#[ignore = "root; timing; run by .ci/run with --release --test-threads=1"]
fn lab_runs_its_cells_across_the_path() {
    let Some(dir) = root_tempdir("lab_runs_its_cells_across_the_path") else {
        return;
    };
    let json = dir.path().join("lab.json");
    let args = common::args("lab --quick --cell 300ms -c 1 --path delay=5ms");
    let (out, v) = common::load::run_json(&json, &args, Duration::from_secs(300));
    assert!(out.status.success(), "{}", show(&out));
    let v = v.expect("lab wrote --json");
    // RTT 10 ms: a full TLS 1.2 handshake takes two, TLS 1.3 and a
    // resumption one (plus the handshake's CPU).
    for c in v["cells"].as_array().unwrap() {
        let (Some(hs), Some(ver)) = (c["handshake_p50_us"].as_f64(), c["version"].as_str()) else {
            continue;
        };
        let rtts = if c["mode"] == "tls_full" && ver == "TLSv1.2" {
            2.0
        } else {
            1.0
        };
        assert!(hs >= rtts * 10_000.0 && hs < (rtts + 1.0) * 10_000.0, "{c}");
    }
    assert!(
        common::num(&v, "wan_path/down/packets_forwarded") > 100.0,
        "{v}"
    );
    // The HTTP/3 cells crossed the path too (UDP through the forwarder).
    for mode in common::args("quic_full quic_resumed quic_zero_rtt quic_keep_alive") {
        let c = v["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["mode"] == mode)
            .unwrap_or_else(|| panic!("no {mode} cell: {v}"));
        assert!(common::num(c, "requests") > 0.0, "{c}");
    }
}
