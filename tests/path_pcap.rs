//! `tlslab path --pcap FILE` (`pcap=FILE` in a path spec): the capture
//! against the forwarder's own counters, read back with tshark, and
//! decrypted by tshark with the key log `load --keylog` wrote (TLS 1.3 and
//! QUIC). Each test is `#[ignore]` (root, TUN devices, tshark); .ci/run
//! runs them with `--ignored`. Without root or tshark they skip loudly (a
//! failure under CI=true).
//!
//! Addresses: 10.201.0.1/2, inside the namespaces each test creates.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::mpsc::channel;
use std::time::Duration;

use common::netpath::{on_client, on_server, root_tempdir, serve_across, serve_with_across, start};
use common::tshark::{TLS13, counts as tshark_counts, h3_paths, http1_uris, labels};
use common::{args, num, show, tlslab};
use tlslab_path::{PathHandle, PathReport};

const LIMIT: Duration = Duration::from_secs(120);

/// A UDP echo in the server namespace at `port`, until 500 ms idle.
fn echo(h: &PathHandle, port: u16) -> std::thread::JoinHandle<u64> {
    let addr = SocketAddr::new(h.server_ip(), port);
    let (tx, rx) = channel();
    let t = on_server(h, move || {
        let s = UdpSocket::bind(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        tx.send(()).unwrap();
        let mut buf = [0u8; 2048];
        let mut n = 0;
        while let Ok((k, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..k], from);
            n += 1;
        }
        n
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    t
}

/// Sends `count` datagrams of `size` bytes from the client namespace, in
/// bursts of 20 every millisecond (so the down queue overflows).
fn send(h: &PathHandle, port: u16, count: u64, size: usize) {
    let addr = SocketAddr::new(h.server_ip(), port);
    on_client(h, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect(addr).unwrap();
        let buf = vec![7u8; size];
        for i in 0..count {
            let _ = s.send(&buf);
            if i % 20 == 19 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
}

/// Runs the path `spec`, an echo and `count` datagrams across it; the
/// report (after the echo went idle, so no queue holds a packet).
fn exchange(test: &str, spec: &str, port: u16, count: u64, size: usize) -> Option<PathReport> {
    let p = start(test, spec)?;
    let h = p.handle();
    let e = echo(&h, port);
    send(&h, port, count, size);
    e.join().unwrap();
    Some(p.stop().unwrap())
}

fn tools(test: &str) -> Option<tempfile::TempDir> {
    let dir = root_tempdir(test)?;
    common::require("tshark").then_some(dir)
}

#[test]
#[ignore = "root, TUN devices, tshark; run by .ci/run with --ignored"]
fn pcap_counts_equal_the_forwarders_counters_and_tshark_reads_them() {
    let Some(dir) = tools("pcap_counts_equal_the_forwarders_counters_and_tshark_reads_them") else {
        return;
    };
    let file = dir.path().join("wan.pcapng");
    // Random loss up, a 2 Mbit/s bottleneck with a 10-packet queue down:
    // both kinds of drop, in both directions' records.
    let spec = format!(
        "delay=2ms,up.loss=5%,down.rate=2mbit,down.queue=10pkt,seed=3,pcap={}",
        file.display()
    );
    let Some(r) = exchange("pcap_counts", &spec, 6101, 3000, 400) else {
        return;
    };
    eprintln!("{r}");
    let pcap = r.pcap.as_ref().expect("a capture report");
    assert_eq!(pcap.missed, 0, "{pcap:?}");
    assert_eq!(pcap.not_kept, 0, "{pcap:?}");
    assert_eq!(pcap.files, [file.display().to_string()]);
    assert!(r.up.dropped_loss > 0 && r.down.dropped_queue > 0, "{r}");
    let got = tshark_counts(&pcap.files);
    for (iface, d) in [(0, &r.up), (1, &r.down)] {
        let c = got.get(&iface).copied().unwrap_or_default();
        let (frames, bytes, drops, ipv4) = (c.frames, c.bytes, c.drops, c.ipv4);
        // Every packet that arrived left the forwarder (forwarded or
        // dropped) before it stopped: the capture holds them all.
        assert_eq!(
            d.packets_forwarded + d.dropped_queue + d.dropped_loss,
            d.packets_in
        );
        assert_eq!(frames, d.packets_in, "{} frames", d.direction);
        assert_eq!(bytes, d.bytes_in, "{} bytes", d.direction);
        assert_eq!(drops, d.dropped_queue + d.dropped_loss + d.dropped_write);
        assert_eq!(ipv4, frames, "LINKTYPE_RAW: tshark decodes IPv4 directly");
    }
    assert_eq!(pcap.packets, r.up.packets_in + r.down.packets_in);
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        pcap.file_bytes,
        "the reported file size"
    );
}

#[test]
#[ignore = "root, TUN devices, tshark; run by .ci/run with --ignored"]
fn pcap_ring_files_stay_under_the_size_cap() {
    let Some(dir) = tools("pcap_ring_files_stay_under_the_size_cap") else {
        return;
    };
    let file = dir.path().join("ring.pcapng");
    // About 2 × 4,000 × 1,228 B ≈ 10 MB of records into three 1 MB files.
    let spec = format!("delay=0,pcap={},pcap-size=1MB,pcap-files=3", file.display());
    let Some(r) = exchange("pcap_ring", &spec, 6102, 4000, 1200) else {
        return;
    };
    let pcap = r.pcap.as_ref().expect("a capture report");
    eprintln!("{r}");
    assert_eq!(pcap.files.len(), 3, "{pcap:?}");
    for (i, f) in pcap.files.iter().enumerate() {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(len <= 1_000_000, "{f}: {len} B");
        // Every file but the newest was filled to within a record of the cap.
        assert!(i + 1 == pcap.files.len() || len > 990_000, "{f}: {len} B");
    }
    assert!(!Path::new(&format!("{}.3", file.display())).exists());
    assert!(pcap.not_kept > 0, "{pcap:?}");
    let kept = common::tshark::total(&pcap.files).frames;
    assert_eq!(kept, pcap.packets - pcap.not_kept);
    assert_eq!(pcap.packets, r.up.packets_in + r.down.packets_in);

    // One file: the capture stops at the cap.
    let single = dir.path().join("one.pcapng");
    let spec = format!("delay=0,pcap={},pcap-size=1MB", single.display());
    let Some(r) = exchange("pcap_ring", &spec, 6103, 4000, 1200) else {
        return;
    };
    let pcap = r.pcap.as_ref().expect("a capture report");
    assert_eq!(pcap.files, [single.display().to_string()]);
    assert!(std::fs::metadata(&single).unwrap().len() <= 1_000_000);
    let kept = common::tshark::total(&pcap.files).frames;
    assert!(pcap.not_kept > 0, "{pcap:?}");
    assert_eq!(kept, pcap.packets - pcap.not_kept);
    assert_eq!(pcap.packets, r.up.packets_in + r.down.packets_in);
    assert!(r.to_string().contains("not in the capture"), "{r}");
}

#[test]
#[ignore = "root, TUN devices, tshark; run by .ci/run with --ignored"]
fn pcap_cli_captures_a_tls_exchange_and_reports_it() {
    let Some(dir) = tools("pcap_cli_captures_a_tls_exchange_and_reports_it") else {
        return;
    };
    let file = dir.path().join("cli.pcapng");
    let json = dir.path().join("path.json");
    let (f, j) = (file.to_str().unwrap(), json.to_str().unwrap());
    let out = common::run(
        tlslab(serve_across(
            &["--delay", "2ms", "--pcap", f, "--json", j],
            &args("load https://10.201.0.1:8443/health --insecure -c 1 -n 5"),
        )),
        LIMIT,
    );
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pcap: ") && err.contains("ns per packet"),
        "{err}"
    );
    let v = common::load_json(&json);
    let got = tshark_counts(&[f.to_string()]);
    for (iface, d) in [(0, "up"), (1, "down")] {
        let c = got.get(&iface).copied().unwrap_or_default();
        // Packets still in the delay line when the path stopped (the
        // server's last FIN) are neither forwarded nor dropped.
        let n = |k: &str| common::num(&v, &format!("{d}/{k}"));
        let left = n("packets_forwarded") + n("dropped_queue") + n("dropped_loss");
        assert_eq!(c.frames as f64, left, "{d}");
        assert!(c.frames >= 10 && c.drops == 0, "{d}: {c:?}");
    }
    assert_eq!(common::num(&v, "pcap/missed"), 0.0);
    assert!(common::num(&v, "pcap/writer_cpu_per_packet_ns") > 0.0);
    // tshark sees the TLS handshake inside the raw IP records.
    let hs = std::process::Command::new(common::tool("tshark"))
        .args([
            "-r",
            f,
            "-d",
            "tcp.port==8443,tls",
            "-Y",
            "tls.handshake.type == 1",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&hs.stdout).lines().count() >= 1,
        "no ClientHello in the capture"
    );
}

/// `tlslab path --delay 2ms --pcap DIR/NAME.pcapng --json … -- tlslab serve
/// --listen 10.201.0.1:8443 --h3 ::: tlslab load https://10.201.0.1:8443TARGET
/// --insecure -c 1 -n 2 --keylog DIR/NAME.keys EXTRA`: the capture, the key
/// log and the path's JSON report.
fn load_across(
    dir: &Path,
    name: &str,
    target: &str,
    extra: &[&str],
) -> (PathBuf, PathBuf, serde_json::Value) {
    let pcap = dir.join(format!("{name}.pcapng"));
    let keys = dir.join(format!("{name}.keys"));
    let json = dir.join(format!("{name}.json"));
    let url = format!("https://10.201.0.1:8443{target}");
    let mut client = vec![
        "load",
        url.as_str(),
        "--insecure",
        "-c",
        "1",
        "-n",
        "2",
        "--no-progress",
        "--keylog",
        keys.to_str().unwrap(),
    ];
    client.extend_from_slice(extra);
    let path = [
        "--delay",
        "2ms",
        "--pcap",
        pcap.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    let out = common::run(tlslab(serve_with_across(&path, &["--h3"], &client)), LIMIT);
    assert!(out.status.success(), "{name}: {}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("WARNING: TLS key log"),
        "{name}: load warns of its key log: {}",
        show(&out)
    );
    (pcap, keys, common::load_json(&json))
}

/// The capture's frames and bytes per direction are the forwarder's own
/// counts of the packets it released (nothing was dropped), and their sums
/// the capture's report.
fn assert_counts_are_the_forwarders(name: &str, pcap: &Path, v: &serde_json::Value) {
    let files = [pcap.display().to_string()];
    let got = tshark_counts(&files);
    let (mut frames, mut bytes) = (0, 0);
    for (iface, d) in [(0, "up"), (1, "down")] {
        let c = got.get(&iface).copied().unwrap_or_default();
        let n = |k: &str| num(v, &format!("{d}/{k}")) as u64;
        assert_eq!(
            n("dropped_queue") + n("dropped_loss") + n("dropped_write"),
            0,
            "{name} {d}: {v}"
        );
        assert_eq!(c.frames, n("packets_forwarded"), "{name} {d} packets");
        assert_eq!(c.bytes, n("bytes_forwarded"), "{name} {d} bytes");
        assert!(c.frames >= 10 && c.drops == 0, "{name} {d}: {c:?}");
        (frames, bytes) = (frames + c.frames, bytes + c.bytes);
    }
    assert_eq!(frames, num(v, "pcap/packets") as u64, "{name}: {v}");
    assert_eq!(bytes, num(v, "pcap/bytes") as u64, "{name}: {v}");
    assert_eq!(num(v, "pcap/missed"), 0.0, "{name}: {v}");
    assert_eq!(v["pcap"]["files"], serde_json::json!(files), "{name}");
}

// Before: the decryption test captured loopback with dumpcap; none read a
// capture taken by `path --pcap` with the key log `load` wrote.
#[test]
#[ignore = "root, TUN devices, tshark, python3 with aioquic; run by .ci/run with --ignored"]
fn tshark_decrypts_tls13_and_quic_captures_taken_by_path_pcap_with_the_key_log_load_wrote() {
    let test =
        "tshark_decrypts_tls13_and_quic_captures_taken_by_path_pcap_with_the_key_log_load_wrote";
    let Some(dir) = tools(test) else {
        return;
    };
    if !common::require("python3") {
        return;
    }
    // The ClientHello names port 8443, which tshark does not take for TLS
    // by itself; QUIC it finds by its heuristics.
    let tls = ["-d", "tcp.port==8443,tls"];
    let no_keys = Path::new("/dev/null");
    for (name, extra, target) in [
        ("tls13", &["--tls", "1.3"][..], "/bytes/111?observe=tls13"),
        ("quic", &["--h3"][..], "/bytes/222?observe=quic"),
    ] {
        let (pcap, keys, v) = load_across(dir.path(), name, target, extra);
        eprintln!("{name}: {v}");
        assert_counts_are_the_forwarders(name, &pcap, &v);
        // TCP and QUIC alike: the TLS 1.3 handshake and traffic secrets of
        // each of the two connections.
        let (labels, randoms) = labels(&keys);
        for l in TLS13 {
            assert!(labels.contains(l), "{name}: no {l} in {labels:?}");
        }
        assert_eq!(randoms.len(), 2, "{name}: one client random per connection");
        if name == "tls13" {
            // HTTP/1.1 inside TLS 1.3: both request lines, decrypted.
            let uris = http1_uris(&pcap, &keys, &tls);
            assert_eq!(
                uris.iter().filter(|u| *u == target).count(),
                2,
                "tshark shows both decrypted requests: {uris:?}"
            );
            let sealed = http1_uris(&pcap, no_keys, &tls);
            assert!(sealed.is_empty(), "without the key log: {sealed:?}");
        } else {
            // HTTP/3 HEADERS frames, decrypted; their QPACK blocks decoded
            // with pylsqpack (Wireshark 4.0 does not decode QPACK).
            let paths = h3_paths(&pcap, &keys);
            assert!(
                paths.iter().any(|p| p == target),
                "decrypted HTTP/3 request: {paths:?}"
            );
            let sealed = h3_paths(&pcap, no_keys);
            assert!(sealed.is_empty(), "without the key log: {sealed:?}");
        }
    }
}
