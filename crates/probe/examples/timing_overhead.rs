//! The probe's own timing overhead per phase: each round runs the probe
//! ([`tlslab_probe::probe_target`], async, as `tlslab probe` does) and then
//! the same two phases with a minimal synchronous client (a blocking
//! `connect`, then rustls driven by `complete_io` with the same client
//! configuration), against the same loopback server. The difference of the
//! medians is what the probe adds to TCP connect and to the full handshake.
//!
//! Run by `bench/probe-overhead.sh`, which starts `tlslab serve` and pins it:
//! `cargo run --release -p tlslab-probe --example timing_overhead -- URL CA.pem [N]`

use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConnection;
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use tlslab_load::{LoadConfig, Trust};
use tlslab_probe::{ProbeConfig, probe_target};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn p90(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() * 9 / 10]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(url), Some(ca)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: timing_overhead https://127.0.0.1:PORT/PATH CA.pem [ROUNDS]");
        std::process::exit(2);
    };
    let n: usize = args.get(3).map_or(Ok(300), |s| s.parse())?;
    let addr = url
        .strip_prefix("https://")
        .and_then(|r| r.split('/').next())
        .ok_or("URL must be https://HOST:PORT/...")?
        .to_string();

    let mut load = LoadConfig::new(Vec::new());
    load.trust = Trust::CaFile(PathBuf::from(ca));
    let cfg = ProbeConfig::from_load(&load, Duration::from_secs(10))?;
    let mut base_tls = (*cfg.tls).clone();
    base_tls.resumption = Resumption::disabled();
    let base_tls = Arc::new(base_tls);
    let host = addr
        .rsplit_once(':')
        .map_or(addr.as_str(), |(h, _)| h)
        .to_string();
    let name = ServerName::try_from(host)?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (mut p_conn, mut p_tls, mut b_conn, mut b_tls) = (vec![], vec![], vec![], vec![]);
    for _ in 0..n {
        // The probe, as `tlslab probe` runs it.
        let s = rt.block_on(probe_target(&cfg, url));
        if let (Some(c), Some(t)) = (s.connect_us, s.tls_full_us) {
            p_conn.push(c as f64);
            p_tls.push(t as f64);
        } else {
            return Err(format!("probe failed: {:?} {:?}", s.error_kind, s.error).into());
        }
        // The floor: the same phases, blocking, nothing in between.
        let t0 = Instant::now();
        let mut sock = TcpStream::connect(&addr)?;
        let connect = t0.elapsed();
        sock.set_nodelay(true)?;
        let t1 = Instant::now();
        let mut conn = ClientConnection::new(base_tls.clone(), name.clone())?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock)?;
        }
        let tls = t1.elapsed();
        conn.send_close_notify();
        let _ = conn.complete_io(&mut sock);
        let _ = sock.flush();
        b_conn.push(connect.as_secs_f64() * 1e6);
        b_tls.push(tls.as_secs_f64() * 1e6);
    }
    let (pc, bc) = (median(&mut p_conn), median(&mut b_conn));
    let (pt, bt) = (median(&mut p_tls), median(&mut b_tls));
    println!("rounds {n}, client-observed, medians (p90) in µs, loopback:");
    println!(
        "connect   probe {pc:8.1} ({:8.1})  minimal client {bc:8.1} ({:8.1})  overhead {:+8.1}",
        p90(&mut p_conn),
        p90(&mut b_conn),
        pc - bc
    );
    println!(
        "tls_full  probe {pt:8.1} ({:8.1})  minimal client {bt:8.1} ({:8.1})  overhead {:+8.1}",
        p90(&mut p_tls),
        p90(&mut b_tls),
        pt - bt
    );
    Ok(())
}
