//! `ServeConfig::access_log`: one line per completed request whose TLS
//! fields agree with the server's own handshake counters.

mod common;

use std::collections::HashMap;

use common::*;
use rustls::HandshakeKind;
use tlslab_crypto::provider::Version;
use tlslab_crypto::store::ClientSessions;
use tlslab_server::{Content, Error, Server};

/// One parsed access-log line.
#[derive(Debug)]
struct Line {
    ip: String,
    request: String,
    status: u16,
    bytes: u64,
    user_agent: String,
    protocol: String,
    reused: String,
    time_us: u64,
    conn: u64,
    on_conn: u64,
    transport: String,
}

fn parse(line: &str) -> Line {
    // ip - - [time] "request" status bytes "-" "ua" proto reused us conn n
    // early transport
    let (ip, rest) = line.split_once(" - - [").expect("remote addr");
    let (_time, rest) = rest.split_once("] \"").expect("time");
    let (request, rest) = rest.split_once("\" ").expect("request");
    let (head, rest) = rest.split_once(" \"-\" \"").expect("referer");
    let (user_agent, tail) = rest.split_once("\" ").expect("user agent");
    let head: Vec<&str> = head.split(' ').collect();
    let tail: Vec<&str> = tail.split(' ').collect();
    assert_eq!((head.len(), tail.len()), (2, 7), "{line}");
    Line {
        ip: ip.to_string(),
        request: request.to_string(),
        status: head[0].parse().unwrap(),
        bytes: head[1].parse().unwrap(),
        user_agent: user_agent.to_string(),
        protocol: tail[0].to_string(),
        reused: tail[1].to_string(),
        time_us: tail[2].parse().unwrap(),
        conn: tail[3].parse().unwrap(),
        on_conn: tail[4].parse().unwrap(),
        transport: tail[6].to_string(),
    }
}

#[test]
fn every_request_is_logged_with_its_tls_version_and_resumption() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let g = generated();
    let mut cfg = config(&g, Content::Empty);
    cfg.http = Some(loopback());
    cfg.access_log = Some(path.clone());
    let server = Server::start(cfg).unwrap();
    let addr = server.https_addr().unwrap();
    let sessions = ClientSessions::new();
    let mut expected = 0u64;
    let mut sizes = HashMap::new();
    rt().block_on(async {
        for (vi, v) in [Version::Tls12, Version::Tls13].into_iter().enumerate() {
            let client = client_config(&g, &[v], Some(sessions.clone()), &[b"http/1.1"]);
            // 4 connections per version: the first full, the rest resumed;
            // 1 to 3 keep-alive requests each, distinct sizes.
            for c in 0..4usize {
                sessions.set_offer(c > 0);
                let paths: Vec<String> = (0..=c % 3)
                    .map(|r| format!("/bytes/{}", 1000 * (vi + 1) + 10 * c + r))
                    .collect();
                let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
                let got = https_get_many(addr, client.clone(), &refs).await.unwrap();
                for (p, r) in paths.iter().zip(&got) {
                    assert_eq!(r.status, 200);
                    let want = if c == 0 {
                        HandshakeKind::Full
                    } else {
                        HandshakeKind::Resumed
                    };
                    assert_eq!(r.kind, Some(want), "{v} conn {c}");
                    sizes.insert(format!("GET {p} HTTP/1.1"), (v, c));
                    expected += 1;
                }
            }
        }
    });
    // The plain listener too, and a 404.
    let http = server.http_addr().unwrap();
    assert_eq!(plain_get(http, "/bytes/7").0, 200);
    assert_eq!(plain_get(http, "/nope").0, 404);
    let snap = server.shutdown();

    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Line> = text.lines().map(parse).collect();
    assert_eq!(lines.len() as u64, expected + 2, "{text}");
    let tls: Vec<&Line> = lines.iter().filter(|l| l.protocol != "-").collect();
    assert_eq!(tls.len() as u64, expected);
    assert_eq!(snap.requests.total(), expected + 2);

    // Per version and kind, the distinct connections in the log equal the
    // server's handshake counters.
    for (v, name) in [(Version::Tls12, "TLSv1.2"), (Version::Tls13, "TLSv1.3")] {
        let conns = |reused: &str| {
            let mut ids: Vec<u64> = tls
                .iter()
                .filter(|l| l.protocol == name && l.reused == reused)
                .map(|l| l.conn)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids.len() as u64
        };
        let k = snap.handshakes.get(v);
        assert_eq!(conns("."), k.full, "{name}: {text}");
        assert_eq!(conns("r"), k.resumed, "{name}: {text}");
        assert_eq!((k.full, k.resumed), (1, 3), "{name}");
    }
    for l in &tls {
        let (v, c) = sizes[&l.request];
        let want = if v == Version::Tls12 {
            "TLSv1.2"
        } else {
            "TLSv1.3"
        };
        assert_eq!(l.protocol, want, "{l:?}");
        assert_eq!(l.reused, if c == 0 { "." } else { "r" }, "{l:?}");
        let n: u64 = l.request["GET /bytes/".len()..]
            .trim_end_matches(" HTTP/1.1")
            .parse()
            .unwrap();
        assert_eq!((l.status, l.bytes), (200, n), "{l:?}");
        assert_eq!(l.ip, "127.0.0.1");
        assert_eq!(l.user_agent, "-");
        assert_eq!(l.transport, "tcp", "{l:?}");
        assert!(l.time_us < 10_000_000);
    }
    // Requests on a connection are numbered 1, 2, … in order.
    let mut by_conn: HashMap<u64, Vec<u64>> = HashMap::new();
    for l in &lines {
        by_conn.entry(l.conn).or_default().push(l.on_conn);
    }
    for (c, ns) in &by_conn {
        assert_eq!(*ns, (1..=ns.len() as u64).collect::<Vec<_>>(), "conn {c}");
    }
    let plain: Vec<&Line> = lines.iter().filter(|l| l.protocol == "-").collect();
    assert_eq!(plain.len(), 2);
    assert!(plain.iter().all(|l| l.transport == "tcp"), "{plain:?}");
    assert_eq!(
        (plain[0].reused.as_str(), plain[0].status, plain[0].bytes),
        ("-", 200, 7)
    );
    assert_eq!(plain[1].status, 404);
}

#[test]
fn an_unwritable_access_log_names_the_path_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("access.log");
    let mut cfg = config(&generated(), Content::Empty);
    cfg.access_log = Some(path.clone());
    let e = Server::start(cfg).unwrap_err();
    assert!(matches!(e, Error::AccessLog { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("give a writable file path"), "{msg}");
}
