//! `tlslab probe --path`: the rig's embedded server on the server end of a
//! packet-level WAN path (`tlslab path`), for a client that brings its own
//! engine (the probe) and runs it on the path's client end.
//!
//! The server is the one every experiment starts from (`Rig::server`):
//! one worker thread pinned to the server's CPUs, metered from the start
//! of the run to [`PathServer::stop`], which also stops the path and
//! returns its counters.

use std::fmt;
use std::net::SocketAddr;

use tlslab_crypto::pki::KeyType;
use tlslab_path::{Path, PathConfig, PathHandle, PathReport};
use tlslab_server::{Content, Server};

use crate::Error;
use crate::pin::Placement;
use crate::rig::{self, Reading, Rig};

/// The port the server listens on at the path's server address. The
/// namespace is this run's own, so the port is free, and the URL is the
/// same in every run (a probe database keeps one series per target).
pub const PORT: u16 = 8443;

/// An embedded server on the server end of a running path.
pub struct PathServer {
    // Field order is drop order: the server stops before the path goes.
    server: Server,
    before: Reading,
    rig: Rig,
    key: KeyType,
    handle: PathHandle,
    conditions: String,
    path: Path,
}

impl PathServer {
    /// Starts the path (needs root: [`tlslab_path::Error::NotPermitted`],
    /// which points to `tlslab relay`, otherwise) and, on its server end,
    /// an embedded server of a fresh `key` certificate that names the
    /// server's address, serving the SPECweb96 file set.
    pub fn start(cfg: &PathConfig, key: KeyType) -> Result<PathServer, Error> {
        Self::start_with(cfg, key, false)
    }

    /// [`PathServer::start`], and with `h3` HTTP/3 too, on UDP [`PORT`] of
    /// the same address (its TCP responses carry `Alt-Svc`): stateful
    /// tickets and 0-RTT on, so a resumed QUIC connection's GET can leave
    /// in early data, as `tlslab serve --tickets off --max-early-data
    /// 16384 --h3` would serve it.
    pub fn start_with(cfg: &PathConfig, key: KeyType, h3: bool) -> Result<PathServer, Error> {
        let path = Path::start(cfg)?;
        let handle = path.handle();
        let placement = Placement::split();
        let (server, rig) = rig::on_server(Some(&handle), || {
            let rig = Rig::generate(key, &[handle.server_ip().to_string()], placement)?;
            let mut c = rig.server(Content::Specweb96);
            let addr = SocketAddr::new(handle.server_ip(), PORT);
            c.https = Some(addr);
            let transport = rig::h3_with_zero_rtt(h3, &mut c);
            let server = transport.start(c)?;
            Ok((server, rig))
        })?;
        Ok(PathServer {
            before: Reading::of(&server),
            server,
            rig,
            key,
            conditions: match cfg.pcap.describe() {
                Some(d) => format!("up {}; down {}; {d}", cfg.up, cfg.down),
                None => format!("up {}; down {}", cfg.up, cfg.down),
            },
            handle,
            path,
        })
    }

    /// The URL a client on the path's client end requests: a 4 KiB file
    /// of the SPECweb96 set (as `tlslab lab` does).
    pub fn url(&self) -> String {
        format!(
            "https://{}:{PORT}{}",
            self.handle.server_ip(),
            crate::lab::PATH
        )
    }

    /// The roots a client trusts: the certificate's CA.
    pub fn roots(&self) -> &rustls::RootCertStore {
        &self.rig.roots
    }

    /// One line: where the two ends are and what the path does.
    pub fn describe(&self) -> String {
        let h = &self.handle;
        format!(
            "across a packet-level path: server {} in {} ({}, {}), client {} in {}; {}",
            self.url(),
            h.server_netns(),
            self.key.name(),
            pinned(&self.rig.placement.server),
            h.client_ip(),
            h.client_netns(),
            self.conditions
        )
    }

    /// Runs `f` on a thread in the path's client namespace: a runtime it
    /// builds has its threads and sockets there.
    pub fn on_client<T: Send, E: Send + From<tlslab_path::Error>>(
        &self,
        f: impl FnOnce() -> Result<T, E> + Send,
    ) -> Result<T, E> {
        rig::on_end(Some(&self.handle), PathHandle::enter_client, "client", f)
    }

    /// Stops the server, then the path; what the server did since
    /// [`start`](PathServer::start) and the path's counters.
    pub fn stop(self) -> Result<Served, Error> {
        let d = Reading::of(&self.server).since(&self.before);
        self.server.shutdown();
        Ok(Served {
            key: self.key.name().to_string(),
            server_cpus: self.rig.placement.server.clone(),
            requests: d.served,
            handshakes: d.handshakes,
            resumed: d.resumed,
            server_cpu_ms: d.cpu.as_secs_f64() * 1e3,
            wan_path: self.path.stop()?,
        })
    }
}

fn pinned(cpus: &[usize]) -> String {
    if cpus.is_empty() {
        "not pinned".to_string()
    } else {
        format!("pinned to CPU {cpus:?}")
    }
}

/// What the server did over a run, server-observed, and the path's
/// counters.
#[derive(Clone, Debug)]
pub struct Served {
    /// The certificate's key type.
    pub key: String,
    /// The CPUs the server's worker was pinned to (empty: not pinned).
    pub server_cpus: Vec<usize>,
    /// Requests served.
    pub requests: u64,
    /// Handshakes completed.
    pub handshakes: u64,
    /// Of them, resumed.
    pub resumed: u64,
    /// The server worker's CPU time, ms.
    pub server_cpu_ms: f64,
    /// The path's conditions, its forwarder's counters and CPU.
    pub wan_path: PathReport,
}

impl fmt::Display for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "server (embedded tlslab serve, {}, {}; server-observed): {} requests, {} handshakes \
             ({} resumed), CPU {:.1} ms{}",
            self.key,
            pinned(&self.server_cpus),
            self.requests,
            self.handshakes,
            self.resumed,
            self.server_cpu_ms,
            if self.handshakes > 0 {
                format!(
                    " = {:.0} µs per handshake and its GET",
                    self.server_cpu_ms * 1e3 / self.handshakes as f64
                )
            } else {
                String::new()
            }
        )?;
        write!(
            f,
            "Across a packet-level WAN path (tlslab path): the probe's TCP connect is one round \
             trip, its handshakes and GETs one or more each.\n{}",
            self.wan_path
        )
    }
}
