//! The QUIC state of an HTTP/3 run (`--h3`): what the run's clients share
//! ([`QuicRun`]: the certificate verifier, qlog, the handshakes measured,
//! the endpoints to close) and what each identity keeps ([`QuicIdentity`]:
//! its UDP endpoint, its QUIC configuration on its session store, and a
//! counter of certificate verifications), and the report's `transport`
//! section made from them. The connections themselves are in
//! [`super::h3`], behind [`super::client::Client::connection`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::client::danger::ServerCertVerifier;
use tlslab_runtime::qlog::QlogDir;
use tlslab_schema::transport::{Flood, Transport, TransportPhase};

use crate::config::LoadConfig;
use crate::error::Error;
use crate::protocol::Http3;
use crate::quic::http3::{self, CountingVerifier};

/// What one measured connection's handshake took.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Hs {
    pub(super) kind: Kind,
    pub(super) handshake_us: u64,
    pub(super) first_byte_us: Option<u64>,
    pub(super) bytes_out: u64,
    pub(super) bytes_in: u64,
    pub(super) datagrams_out: u64,
    pub(super) datagrams_in: u64,
    pub(super) packets_out: u64,
}

/// A handshake's kind in the transport section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Kind {
    #[default]
    Full,
    Resumed,
    ZeroRtt,
}

/// The QUIC state every HTTP/3 client of a run reads.
pub(super) struct QuicRun {
    /// `-m`, `--quic-new-socket`, `--quic-rebind-after`.
    pub(super) streams: u32,
    pub(super) new_socket: bool,
    pub(super) rebind_after: Option<u64>,
    /// The server name every connection asks for (`--sni`, else the host).
    pub(super) server_name: String,
    /// The verifier the run's trust asks for, wrapped per identity to
    /// count its calls.
    verifier: Arc<dyn ServerCertVerifier>,
    /// Connections' idle timeout: the run's `--timeout`, at most 600 s.
    pub(super) idle: Duration,
    /// Whether connections wait for the server's session tickets before
    /// closing (not when the run never resumes and so keeps none).
    pub(super) wait_tickets: bool,
    /// `--qlog DIR`.
    pub(super) qlog: Option<QlogDir>,
    /// Measured connections' handshakes.
    pub(super) handshakes: Mutex<Vec<Hs>>,
    pub(super) zero_rtt_rejected: AtomicU64,
    /// Rebinds made (`--quic-new-socket`, `--quic-rebind-after`).
    pub(super) rebinds: AtomicU64,
    /// Handshakes started, and whether the server ever answered one (it
    /// completed, or the server closed, refused or reset it).
    pub(super) attempts: AtomicU64,
    pub(super) answered: AtomicBool,
    /// Every identity's UDP endpoint (with `shared_sockets`, every shared
    /// one), to let their CONNECTION_CLOSE frames out before the runtime
    /// stops.
    endpoints: Mutex<std::collections::HashMap<u32, quinn::Endpoint>>,
    /// `Some(n)`: the identities share `n` UDP sockets, identity `id`
    /// taking the `id % n`-th, rather than one each (the user sessions of
    /// `overload`, a new identity per session: see [`SHARED_RECV_BUFFER`]).
    pub(super) shared_sockets: Option<u32>,
}

/// The UDP sockets identities share over QUIC when each session is a new
/// identity (the user sessions of `overload`, an open loop's e-commerce
/// browsers), each taken by every `SHARED_SOCKETS`-th identity:
/// connections, not sockets, are what the server admits and serves.
pub(super) const SHARED_SOCKETS: u32 = 16;

/// The receive buffer asked for on each shared socket (the server's
/// `--quic-recv-buffer` default; the kernel caps it at
/// `net.core.rmem_max`). Best effort: a burst of server flights to a socket
/// many identities share must not overflow the kernel's default buffer
/// (overload at 3x saw 9,682 drops on one), or the client, not the server,
/// stalls the handshakes it loses. A socket per identity instead cost the
/// overload client a socket, a driver task and quinn's receive buffer
/// (megabytes once touched) per arriving user: at 200 users/s its memory
/// grew to 1.9 GB, and the point measured the client.
const SHARED_RECV_BUFFER: usize = 4 << 20;

impl QuicRun {
    /// The run's QUIC state for `cfg` and its HTTP/3 options, on the run's
    /// rustls configuration `base` (ALPN `h3`). Fails on a configuration
    /// QUIC cannot use or a qlog directory that cannot be written.
    pub(super) fn new(
        cfg: &LoadConfig,
        h3: &Http3,
        base: &rustls::ClientConfig,
    ) -> Result<QuicRun, Error> {
        let verifier = http3::verifier(cfg, base)?;
        let idle = cfg.timeout.min(Duration::from_secs(600));
        // The configuration each identity makes must work for QUIC.
        http3::client_config(base.clone(), idle)
            .map_err(|e| Error::Invalid(format!("--h3: {e}")))?;
        let first = &cfg.targets[0];
        let qlog = h3
            .qlog
            .as_ref()
            .map(|q| {
                QlogDir::open(q, "client").map_err(|e| {
                    Error::Invalid(format!(
                        "--qlog {}: {e}; give a directory this user can create or write",
                        q.dir.display()
                    ))
                })
            })
            .transpose()?;
        Ok(QuicRun {
            streams: h3.max_concurrent_streams,
            new_socket: h3.new_socket,
            rebind_after: h3.rebind_after,
            server_name: cfg.sni.clone().unwrap_or_else(|| first.host.clone()),
            verifier,
            idle,
            wait_tickets: !crate::tls::never_resumes(cfg),
            qlog,
            handshakes: Mutex::default(),
            zero_rtt_rejected: AtomicU64::new(0),
            rebinds: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            answered: AtomicBool::new(false),
            endpoints: Mutex::default(),
            shared_sockets: None,
        })
    }

    /// Shared socket `key`, bound to `local` on first use.
    fn shared_endpoint(
        &self,
        key: u32,
        local: SocketAddr,
    ) -> Result<quinn::Endpoint, &'static str> {
        let mut pool = self.endpoints.lock();
        if let Some(e) = pool.get(&key) {
            return Ok(e.clone());
        }
        let socket = std::net::UdpSocket::bind(local).map_err(|err| {
            tracing::warn!("HTTP/3 client: UDP bind {local}: {err}");
            "udp_bind"
        })?;
        let _ = nix::sys::socket::setsockopt(
            &socket,
            nix::sys::socket::sockopt::RcvBuf,
            &SHARED_RECV_BUFFER,
        );
        let runtime = quinn::default_runtime().ok_or("udp_bind")?;
        let e = quinn::Endpoint::new(quinn::EndpointConfig::default(), None, socket, runtime)
            .map_err(|_| "udp_bind")?;
        pool.insert(key, e.clone());
        Ok(e)
    }

    /// Closes every identity's endpoint and waits (at most `wait`) until
    /// their connections' closes are sent: the endpoints' driver tasks
    /// stop with the runtime, and without this the last connection's close
    /// could be lost, the server holding it until its idle timeout.
    pub(super) async fn close_endpoints(&self, wait: Duration) {
        let endpoints: Vec<_> = std::mem::take(&mut *self.endpoints.lock())
            .into_values()
            .collect();
        for e in &endpoints {
            e.close(0u32.into(), b"done");
        }
        let idle = async {
            for e in &endpoints {
                e.wait_idle().await;
            }
        };
        let _ = tokio::time::timeout(wait.min(Duration::from_secs(1)), idle).await;
    }

    /// The error when no handshake of the run got any answer.
    pub(super) fn nobody_answered(&self, cfg: &LoadConfig, addr: SocketAddr) -> Option<Error> {
        let attempts = self.attempts.load(Ordering::Relaxed);
        (attempts > 0 && !self.answered.load(Ordering::Relaxed)).then(|| Error::NoQuicServer {
            addr,
            attempts,
            timeout: cfg.timeout,
            hint: if cfg.ablation.is_empty() {
                ""
            } else {
                "; or the server runs a different --ablate set (QUIC drops packets that do not \
                 decrypt, unanswered): start client and server with the same --ablate"
            },
        })
    }

    /// The report's `transport` section.
    pub(super) fn report(&self, flood: Option<Flood>) -> Transport {
        let hs = self.handshakes.lock();
        Transport {
            name: "quic".into(),
            max_concurrent_streams: self.streams,
            full: phase(&hs, Kind::Full),
            resumed: phase(&hs, Kind::Resumed),
            zero_rtt: phase(&hs, Kind::ZeroRtt),
            zero_rtt_rejected: self.zero_rtt_rejected.load(Ordering::Relaxed),
            rebinds: self.rebinds.load(Ordering::Relaxed),
            flood,
            qlog: self.qlog.as_ref().map(QlogDir::report),
        }
    }
}

/// An identity's QUIC side: a UDP endpoint of its own (made on its first
/// connection), its QUIC configuration on the identity's session store,
/// and the calls of its certificate verifier (a full handshake makes one,
/// a resumed one none: how a client learns that it resumed).
pub(super) struct QuicIdentity {
    pub(super) config: quinn::ClientConfig,
    endpoint: Mutex<Option<quinn::Endpoint>>,
    pub(super) verified: Arc<AtomicU64>,
    /// Held by the handshake in progress, so that the verifier's calls are
    /// that handshake's: an identity makes one handshake at a time (its
    /// connections' requests still overlap).
    pub(super) handshaking: tokio::sync::Mutex<()>,
    /// Requests that succeeded (for `--quic-rebind-after`), and whether
    /// it has rebound.
    succeeded: AtomicU64,
    rebound: AtomicBool,
}

impl QuicIdentity {
    /// The QUIC side of an identity whose rustls configuration (its
    /// session store set) is `tls`; `None` if QUIC cannot use it, which
    /// [`QuicRun::new`] has already refused.
    pub(super) fn new(q: &QuicRun, tls: &rustls::ClientConfig) -> Option<QuicIdentity> {
        let mut c = tls.clone();
        let (counting, verified) = CountingVerifier::wrap(q.verifier.clone());
        c.dangerous().set_certificate_verifier(counting);
        let config = http3::client_config(c, q.idle).ok()?;
        Some(QuicIdentity {
            config,
            endpoint: Mutex::default(),
            verified,
            handshaking: tokio::sync::Mutex::new(()),
            succeeded: AtomicU64::new(0),
            rebound: AtomicBool::new(false),
        })
    }

    /// The identity's endpoint, bound on first use to `local` (its
    /// `--source-ip` address, else loopback or unspecified of the server's
    /// family); the error kind when it cannot be bound.
    ///
    /// With `fresh` (`--quic-new-socket`, a connection after the
    /// identity's first), a new endpoint on a new socket replaces it: the
    /// previous one stays with its closing connection, whose last packets
    /// leave from their own port, until that connection is gone. With
    /// [`QuicRun::shared_sockets`], it is the run's shared one.
    pub(super) fn endpoint(
        &self,
        q: &QuicRun,
        id: u32,
        local: SocketAddr,
        fresh: bool,
    ) -> Result<quinn::Endpoint, &'static str> {
        let mut e = self.endpoint.lock();
        if let (Some(e), false) = (&*e, fresh) {
            return Ok(e.clone());
        }
        if let Some(n) = q.shared_sockets {
            let shared = q.shared_endpoint(id % n.max(1), local)?;
            *e = Some(shared.clone());
            return Ok(shared);
        }
        let made = quinn::Endpoint::client(local).map_err(|err| {
            tracing::warn!("HTTP/3 client: UDP bind {local}: {err}");
            "udp_bind"
        })?;
        if e.is_some() {
            q.rebinds.fetch_add(1, Ordering::Relaxed);
        }
        // The run closes each identity's current endpoint at its end.
        q.endpoints.lock().insert(id, made.clone());
        *e = Some(made.clone());
        Ok(made)
    }

    /// Moves the endpoint, and its open connection, to a new UDP socket on
    /// the same local address (a new source port).
    pub(super) fn rebind(&self, q: &QuicRun) {
        let Some(endpoint) = self.endpoint.lock().clone() else {
            return;
        };
        let Ok(local) = endpoint.local_addr() else {
            return;
        };
        let fresh = std::net::UdpSocket::bind(SocketAddr::new(local.ip(), 0));
        match fresh.map(|s| endpoint.rebind(s)) {
            Ok(Ok(())) => {
                q.rebinds.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(e)) | Err(e) => tracing::warn!("HTTP/3 client: rebinding failed: {e}"),
        }
    }

    /// `--quic-rebind-after N`: rebinds once, after the identity's N-th
    /// successful request.
    pub(super) fn count_success(&self, q: &QuicRun, ok: bool) {
        let Some(n) = q.rebind_after else { return };
        if !ok {
            return;
        }
        let done = self.succeeded.fetch_add(1, Ordering::Relaxed) + 1;
        if done >= n && !self.rebound.swap(true, Ordering::Relaxed) {
            self.rebind(q);
        }
    }

    /// The configuration of connection `conn_no` of client `id`: with
    /// `--qlog`, a transport of its own writing the connection's qlog file
    /// (`client-<id>-<conn_no>.sqlog`, event times from `t0`) while the
    /// caps leave room.
    pub(super) fn config_for(
        &self,
        q: &QuicRun,
        id: u32,
        conn_no: u64,
        addr: SocketAddr,
        t0: Instant,
    ) -> quinn::ClientConfig {
        let Some(file) = q
            .qlog
            .as_ref()
            .and_then(|d| d.next(&format!("{id}-{conn_no}")))
        else {
            return self.config.clone();
        };
        let mut ql = quinn::QlogConfig::default();
        ql.writer(Box::new(file))
            .title(Some(format!(
                "tlslab load: client {id} connection {conn_no}"
            )))
            .description(Some(format!(
                "HTTP/3 to {addr} ({}), as the client saw it",
                q.server_name
            )))
            .start_time(t0);
        let mut t = http3::transport(q.idle);
        t.qlog_stream(ql.into_stream());
        let mut c = self.config.clone();
        c.transport_config(Arc::new(t));
        c
    }
}

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

fn phase(all: &[Hs], kind: Kind) -> TransportPhase {
    let hs: Vec<&Hs> = all.iter().filter(|h| h.kind == kind).collect();
    let n = hs.len() as u64;
    let mean =
        |f: fn(&Hs) -> u64| (n > 0).then(|| hs.iter().map(|h| f(h)).sum::<u64>() as f64 / n as f64);
    TransportPhase {
        count: n,
        handshake_p50_us: median(hs.iter().map(|h| h.handshake_us).collect()),
        first_byte_p50_us: median(hs.iter().filter_map(|h| h.first_byte_us).collect()),
        bytes_out: mean(|h| h.bytes_out),
        bytes_in: mean(|h| h.bytes_in),
        datagrams_out: mean(|h| h.datagrams_out),
        datagrams_in: mean(|h| h.datagrams_in),
        packets_out: mean(|h| h.packets_out),
    }
}
