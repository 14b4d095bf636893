//! qlog of QUIC connections (issue 35): `load --h3 --qlog DIR` and
//! `serve --h3 --qlog DIR` write one JSON-SEQ file per connection (what
//! qvis reads), whose packets agree with the load's own wire figures, and
//! stop at `--qlog-max-files`, counting the connections left out.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::load::load_report;
use common::{Serve, num, tempdir};

const LIMIT: Duration = Duration::from_secs(120);

/// The JSON-SEQ record separator (RFC 7464).
const RS: u8 = 0x1E;

/// One qlog file, parsed: its header record and its events.
struct Qlog {
    path: PathBuf,
    header: serde_json::Value,
    events: Vec<serde_json::Value>,
}

impl Qlog {
    /// Reads `path` as JSON-SEQ: every record is 0x1E, one JSON text and a
    /// newline; the first is the qlog header.
    fn read(path: &Path) -> Qlog {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert_eq!(
            bytes.first(),
            Some(&RS),
            "{path:?}: JSON-SEQ starts with 0x1E"
        );
        let mut records = bytes.split(|b| *b == RS).skip(1).map(|r| {
            assert_eq!(
                r.last(),
                Some(&b'\n'),
                "{path:?}: a record ends with a newline"
            );
            serde_json::from_slice::<serde_json::Value>(r).unwrap_or_else(|e| {
                panic!(
                    "{path:?}: a record is no JSON ({e}): {}",
                    String::from_utf8_lossy(r)
                )
            })
        });
        let header = records.next().expect("a header record");
        assert_eq!(header["qlog_format"], "JSON-SEQ", "{path:?}: {header}");
        assert_eq!(header["qlog_version"], "0.3", "{path:?}: {header}");
        assert!(header["trace"].is_object(), "{path:?}: {header}");
        Qlog {
            path: path.to_path_buf(),
            header,
            events: records.collect(),
        }
    }

    /// The events named `transport:<name>`, in order.
    fn named(&self, name: &str) -> Vec<&serde_json::Value> {
        let want = format!("transport:{name}");
        self.events.iter().filter(|e| e["name"] == want).collect()
    }

    /// `(packet type, length)` of every packet sent, in order.
    fn sent(&self) -> Vec<(String, u64)> {
        self.named("packet_sent")
            .into_iter()
            .map(|e| {
                let h = &e["data"]["header"];
                let len = h["length"].as_u64();
                let ty = h["packet_type"].as_str().map(str::to_string);
                match (ty, len) {
                    (Some(t), Some(l)) => (t, l),
                    _ => panic!("{:?}: a packet_sent without type or length: {e}", self.path),
                }
            })
            .collect()
    }

    /// The packet types of every packet received, in order.
    fn received(&self) -> Vec<String> {
        self.named("packet_received")
            .into_iter()
            .map(|e| {
                e["data"]["header"]["packet_type"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }
}

/// The `.sqlog` files in `dir` whose names start with `prefix`, sorted.
fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with(prefix) && name.ends_with(".sqlog")
        })
        .collect();
    v.sort();
    v
}

/// The packet number space of a qlog packet type, in the order a datagram
/// coalesces them (RFC 9000 §12.2: Initial, Handshake, then 0-RTT or 1-RTT).
fn space(ty: &str) -> u8 {
    match ty {
        "initial" => 0,
        "handshake" => 1,
        "0RTT" | "1RTT" => 2,
        other => panic!("unexpected packet type {other}"),
    }
}

/// `tlslab load URL --h3 ... EXTRA --json` in `dir`; must succeed.
fn load(s: &Serve, dir: &Path, name: &str, extra: &[&str]) -> serde_json::Value {
    let json = dir.join(format!("{name}.json"));
    let url = s.url("/bytes/100");
    let mut args = vec![
        url.as_str(),
        "--h3",
        "--cacert",
        s.ca_str(),
        "-c",
        "1",
        "--no-progress",
    ];
    args.extend_from_slice(extra);
    load_report(&json, &args, LIMIT)
}

/// Stops `s` and returns its shutdown summary (stdout).
fn stop(s: Serve) -> String {
    let f = s.proc.terminate(Duration::from_secs(10));
    assert!(
        f.status.is_some_and(|st| st.success()),
        "serve did not stop cleanly: {}\n{}",
        f.stdout,
        f.stderr
    );
    f.stdout
}

// Before issue 35 there was no qlog: --qlog was an unknown flag.
#[test]
fn qlog_of_one_connection_lists_the_packets_the_load_counted() {
    let dir = tempdir();
    let (cdir, sdir) = (dir.path().join("client"), dir.path().join("server"));
    let s = Serve::start(&[
        "--h3",
        "--quic-retry",
        "off",
        "--qlog",
        sdir.to_str().unwrap(),
    ]);
    assert!(
        s.proc
            .stderr_shows("qlog: one file per QUIC connection", Duration::from_secs(5)),
        "serve notes where the qlog goes: {}",
        s.proc.stderr_text()
    );
    let r = load(
        &s,
        dir.path(),
        "one",
        &["-n", "1", "--qlog", cdir.to_str().unwrap()],
    );
    assert_eq!(num(&r, "transport/full/count"), 1.0, "{r:#}");
    assert_eq!(num(&r, "transport/qlog/files"), 1.0, "{r:#}");
    assert_eq!(num(&r, "transport/qlog/skipped"), 0.0, "{r:#}");
    let client = files(&cdir, "client-");
    assert_eq!(client.len(), 1, "one file per connection: {client:?}");
    assert_eq!(client[0].file_name().unwrap(), "client-0-0.sqlog");
    let c = Qlog::read(&client[0]);
    assert_eq!(
        num(&r, "transport/qlog/bytes"),
        std::fs::metadata(&c.path).unwrap().len() as f64,
        "{r:#}"
    );
    assert!(
        c.header["title"]
            .as_str()
            .unwrap_or("")
            .contains("client 0 connection 0"),
        "{}",
        c.header
    );

    // The handshake's packets, as the load counted them when the
    // handshake completed (quinn's connection statistics): the first
    // `packets_out` packets of the qlog are exactly the `bytes_out` bytes
    // sent by then, in `datagrams_out` datagrams.
    let sent = c.sent();
    let packets = num(&r, "transport/full/packets_out") as usize;
    let bytes = num(&r, "transport/full/bytes_out") as u64;
    let datagrams = num(&r, "transport/full/datagrams_out") as usize;
    assert!(sent.len() >= packets, "{sent:?} vs {r:#}");
    let hs = &sent[..packets];
    assert_eq!(
        hs.iter().map(|(_, l)| l).sum::<u64>(),
        bytes,
        "the handshake's packets in the qlog carry the bytes the load counted: {hs:?}"
    );
    assert!(
        hs.iter().any(|(t, _)| t == "initial") && hs.iter().any(|(t, _)| t == "handshake"),
        "a full handshake sends Initial and Handshake packets: {hs:?}"
    );
    // A datagram coalesces at most one packet per space, in space order:
    // wherever the space does not rise, a new datagram began.
    let breaks = hs
        .windows(2)
        .filter(|w| space(&w[1].0) <= space(&w[0].0))
        .count();
    assert!(
        breaks < datagrams && datagrams <= packets && packets <= 3 * datagrams,
        "{packets} packets with {breaks} forced datagram breaks cannot fill {datagrams} datagrams: {hs:?}"
    );

    let summary = stop(s);
    assert!(
        summary.contains("qlog: 1 files") && summary.contains(sdir.to_str().unwrap()),
        "serve's summary says where the qlog went: {summary}"
    );
    let server = files(&sdir, "server-");
    assert_eq!(server.len(), 1, "{server:?}");
    assert_eq!(server[0].file_name().unwrap(), "server-1.sqlog");
    let sv = Qlog::read(&server[0]);
    // What the client received by the handshake's end is the start of what
    // the server sent: a prefix of the server's packets carries exactly
    // `bytes_in` bytes.
    let bytes_in = num(&r, "transport/full/bytes_in") as u64;
    let mut sum = 0;
    let prefix = sv
        .sent()
        .iter()
        .take_while(|(_, l)| {
            let fits = sum + l <= bytes_in;
            sum += l;
            fits
        })
        .count();
    assert!(prefix > 0, "the server sent packets");
    let got: u64 = sv.sent()[..prefix].iter().map(|(_, l)| l).sum();
    assert_eq!(
        got, bytes_in,
        "no prefix of the server's packets is bytes_in"
    );
    // Every client Initial and Handshake packet the server received, the
    // client sent (and the server received its ClientHello and Finished).
    let long = |t: &String| t == "initial" || t == "handshake";
    let server_got = sv.received().iter().filter(|t| long(t)).count();
    let client_sent = sent.iter().filter(|(t, _)| long(t)).count();
    assert!(
        server_got >= 2 && server_got <= client_sent,
        "server received {server_got} long-header packets, the client sent {client_sent}"
    );
}

#[test]
fn qlog_stops_at_max_files_and_counts_the_connections_left_out() {
    let dir = tempdir();
    let (cdir, sdir) = (dir.path().join("c"), dir.path().join("s"));
    let s = Serve::start(&[
        "--h3",
        "--qlog",
        sdir.to_str().unwrap(),
        "--qlog-max-files",
        "2",
    ]);
    let r = load(
        &s,
        dir.path(),
        "cap",
        &[
            "-n",
            "5",
            "--requests-per-conn",
            "1",
            "--qlog",
            cdir.to_str().unwrap(),
            "--qlog-max-files",
            "2",
        ],
    );
    assert_eq!(num(&r, "http/connections"), 5.0, "{r:#}");
    assert_eq!(num(&r, "transport/qlog/files"), 2.0, "{r:#}");
    assert_eq!(num(&r, "transport/qlog/skipped"), 3.0, "{r:#}");
    assert_eq!(num(&r, "transport/qlog/max_files"), 2.0, "{r:#}");
    let client = files(&cdir, "client-");
    assert_eq!(client.len(), 2, "{client:?}");
    for f in &client {
        let q = Qlog::read(f);
        assert!(!q.sent().is_empty(), "{f:?} lists its packets");
    }
    let summary = stop(s);
    assert!(
        summary.contains("qlog: 2 files") && summary.contains("3 connections not logged"),
        "{summary}"
    );
    assert_eq!(files(&sdir, "server-").len(), 2);
}

#[test]
fn a_zero_rtt_connections_qlog_shows_its_0rtt_packets_on_both_sides() {
    let dir = tempdir();
    let (cdir, sdir) = (dir.path().join("c"), dir.path().join("s"));
    let s = Serve::start(&[
        "--tickets",
        "off",
        "--max-early-data",
        "16384",
        "--h3",
        "--qlog",
        sdir.to_str().unwrap(),
    ]);
    // The first connection is full and stores a ticket; the second
    // resumes with its request in 0-RTT.
    let r = load(
        &s,
        dir.path(),
        "early",
        &[
            "-n",
            "2",
            "--requests-per-conn",
            "1",
            "--reuse",
            "100",
            "--early-data",
            "--qlog",
            cdir.to_str().unwrap(),
        ],
    );
    assert_eq!(num(&r, "transport/zero_rtt/count"), 1.0, "{r:#}");
    let full = Qlog::read(&cdir.join("client-0-0.sqlog"));
    let early = Qlog::read(&cdir.join("client-0-1.sqlog"));
    let zero = |q: &Qlog| q.sent().iter().filter(|(t, _)| t == "0RTT").count();
    assert_eq!(zero(&full), 0, "a full handshake sends no 0-RTT");
    assert!(zero(&early) >= 1, "the 0-RTT request: {:?}", early.sent());
    // It left with the ClientHello, before any Handshake packet.
    let types: Vec<String> = early.sent().into_iter().map(|(t, _)| t).collect();
    let first_0rtt = types.iter().position(|t| t == "0RTT").unwrap();
    let first_hs = types
        .iter()
        .position(|t| t == "handshake")
        .unwrap_or(usize::MAX);
    assert!(first_0rtt < first_hs, "{types:?}");
    stop(s);
    let server_0rtt: usize = files(&sdir, "server-")
        .iter()
        .map(|f| {
            Qlog::read(f)
                .received()
                .iter()
                .filter(|t| *t == "0RTT")
                .count()
        })
        .sum();
    assert_eq!(
        server_0rtt,
        zero(&early),
        "the server received every 0-RTT packet the client sent"
    );
}

#[test]
fn qlog_flags_without_h3_or_with_a_zero_cap_are_usage_errors() {
    let dir = tempdir();
    let q = dir.path().join("q");
    let q = q.to_str().unwrap();
    for (args, says) in [
        (vec!["load", "https://127.0.0.1:1/", "--qlog", q], "--h3"),
        (
            vec!["serve", "--listen", "127.0.0.1:0", "--qlog", q],
            "--h3",
        ),
        (
            vec![
                "load",
                "https://127.0.0.1:1/",
                "--h3",
                "--qlog",
                q,
                "--qlog-max-files",
                "0",
            ],
            "--qlog-max-files",
        ),
        (
            vec![
                "load",
                "https://127.0.0.1:1/",
                "--h3",
                "--qlog",
                q,
                "--qlog-max-bytes",
                "lots",
            ],
            "--qlog-max-bytes",
        ),
        (
            vec![
                "load",
                "https://127.0.0.1:1/",
                "--h3",
                "--qlog-max-files",
                "3",
            ],
            "--qlog",
        ),
        (
            vec![
                "load",
                "https://127.0.0.1:1/",
                "--h3",
                "--qlog",
                "/proc/version/q",
            ],
            "--qlog",
        ),
    ] {
        common::assert_usage_error(&args, says, LIMIT);
    }
    assert!(
        !Path::new(q).exists(),
        "no directory made for a usage error"
    );
}
