//! A QUIC cluster for the suites: `tlslab serve --h3 --quic-lb` nodes on
//! 127.0.0.1 ephemeral ports, each with a QUIC-LB server ID and a node
//! tag, and `tlslab dispatch --udp` in front of them (tests/quic_dispatch.rs,
//! tests/h3_interop.rs).

use std::net::SocketAddr;

use crate::{Proc, Serve, http_get};

/// The AES-128 key of the encrypted configurations.
pub const KEY: &str = "8f95f09245765f80256934e50c66207f";

/// A QUIC-LB configuration: the balancer's side, and each node's with its
/// server ID appended.
pub struct Lb {
    shared: String,
    sid_len: usize,
}

impl Lb {
    /// `sid_len`-byte server IDs, `nonce` bytes of nonce, an optional key.
    pub fn new(sid_len: usize, nonce: usize, key: bool) -> Lb {
        let mut shared = format!("nonce-len={nonce},config-id=1");
        if key {
            shared.push_str(&format!(",key={KEY}"));
        }
        Lb { shared, sid_len }
    }

    /// Node `i`'s server ID, hex.
    pub fn sid(&self, i: usize) -> String {
        format!("{:0width$x}", 0x31 + i, width = 2 * self.sid_len)
    }

    pub fn node(&self, i: usize) -> String {
        format!("server-id={},{}", self.sid(i), self.shared)
    }

    pub fn balancer(&self) -> String {
        format!("server-id-len={},{}", self.sid_len, self.shared)
    }
}

/// `n` nodes serving HTTP/3 with `lb`'s connection IDs and node tags, and
/// the `--backend` values naming both.
pub fn nodes(n: usize, lb: &Lb) -> (Vec<Serve>, Vec<String>) {
    nodes_with(n, lb, &[])
}

/// [`nodes`] with more `serve` flags.
pub fn nodes_with(n: usize, lb: &Lb, extra: &[&str]) -> (Vec<Serve>, Vec<String>) {
    let nodes: Vec<Serve> = (0..n)
        .map(|i| {
            let (cfg, tag) = (lb.node(i), format!("node{i}"));
            let listen = format!("127.0.0.1:{}", free_udp_and_tcp_port());
            let mut args = vec![
                "--listen",
                &listen,
                "--h3",
                "--threads",
                "1",
                "--quic-lb",
                &cfg,
                "--node-tag",
                &tag,
            ];
            args.extend_from_slice(extra);
            Serve::start(&args)
        })
        .collect();
    let backends = nodes
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{}=sid:{},tag:node{i}", s.https, lb.sid(i)))
        .collect();
    (nodes, backends)
}

/// A port free over both UDP and TCP: `serve --h3` takes the TLS
/// listener's port over UDP too, and the dispatcher's and clients' own UDP
/// sockets make a TCP port that is busy over UDP likelier here than
/// elsewhere.
pub fn free_udp_and_tcp_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("a UDP port");
        let port = udp.local_addr().expect("its address").port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A running `tlslab dispatch --udp` (stopped when dropped).
pub struct Dispatch {
    _proc: Proc,
    /// Where clients send.
    pub listen: SocketAddr,
    /// Its `/metrics`.
    pub metrics: SocketAddr,
}

impl Dispatch {
    pub fn start(backends: &[String], lb: &Lb, policy: &str) -> Dispatch {
        let mut args: Vec<String> = [
            "dispatch",
            "--udp",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
            "--health-check",
            "off",
            "--policy",
            policy,
            "--quic-lb",
            &lb.balancer(),
        ]
        .map(String::from)
        .to_vec();
        for b in backends {
            args.extend(["--backend".into(), b.clone()]);
        }
        let (proc, listen, metrics) = crate::spawn_dispatch(&args);
        Dispatch {
            _proc: proc,
            listen,
            metrics,
        }
    }

    pub fn metric(&self, name: &str) -> f64 {
        let (status, body) = http_get(self.metrics, "/metrics").expect("GET /metrics");
        assert_eq!(status, 200, "{body}");
        crate::metric(&body, name)
    }

    pub fn routed(&self, by: &str) -> f64 {
        self.metric(&format!(
            "tlslab_dispatch_routed_datagrams_total{{by=\"{by}\"}}"
        ))
    }
}
