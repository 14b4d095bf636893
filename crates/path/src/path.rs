//! A running path: two namespaces, a TUN device in each, two forwarders.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Instant, SystemTime};

use tlslab_runtime::CpuPin;
use tun_rs::{DeviceBuilder, SyncDevice};

use crate::error::Error;
use crate::forward::Forwarder;
use crate::model::Model;
use crate::netns::{self, Netns, ip};
use crate::pcap::Writer;
use crate::report::{DirectionReport, PathReport};
use crate::spec::PathConfig;

/// The server's address, inside the server namespace.
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);
/// The client's address, inside the client namespace.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);
/// The TUN device's name in both namespaces.
pub const DEVICE: &str = "tlp0";
/// The TUN device's MTU.
pub const MTU: u16 = 1500;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// Where a path's two ends live; cheap to clone and to hand to threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathHandle {
    server_ns: String,
    client_ns: String,
}

impl PathHandle {
    /// The server's address ([`SERVER_IP`]).
    pub fn server_ip(&self) -> IpAddr {
        IpAddr::V4(SERVER_IP)
    }

    /// The client's address ([`CLIENT_IP`]).
    pub fn client_ip(&self) -> IpAddr {
        IpAddr::V4(CLIENT_IP)
    }

    /// The server namespace's name (for `ip netns exec NAME`).
    pub fn server_netns(&self) -> &str {
        &self.server_ns
    }

    /// The client namespace's name.
    pub fn client_netns(&self) -> &str {
        &self.client_ns
    }

    /// Moves the calling thread into the server's namespace: sockets it
    /// creates afterwards live there. Call it from a runtime's
    /// `on_thread_start` to run a whole engine there.
    pub fn enter_server(&self) -> Result<(), Error> {
        netns::enter(&PathBuf::from(netns::NETNS_DIR).join(&self.server_ns))
    }

    /// Moves the calling thread into the client's namespace.
    pub fn enter_client(&self) -> Result<(), Error> {
        netns::enter(&PathBuf::from(netns::NETNS_DIR).join(&self.client_ns))
    }
}

/// A running path. Dropping it (or [`Path::stop`]) stops the forwarders and
/// removes both namespaces, on an error and on a panic as well.
pub struct Path {
    // Field order is drop order: forwarders first, then the capture's
    // writer (it drains once they are gone), then the namespaces.
    forwarders: Vec<(String, String, Forwarder)>,
    pcap: Option<Writer>,
    server: Netns,
    client: Netns,
}

impl Path {
    /// Creates the namespaces and devices and starts the forwarders.
    /// Stale namespaces of dead runs are removed first. Needs root (or
    /// CAP_NET_ADMIN and CAP_SYS_ADMIN): [`Error::NotPermitted`] otherwise.
    pub fn start(cfg: &PathConfig) -> Result<Path, Error> {
        cfg.validate()?;
        if !netns::privileged() {
            return Err(Error::NotPermitted);
        }
        let pin = cfg
            .cpus
            .as_deref()
            .map(CpuPin::new)
            .transpose()
            .map_err(Error::Cpus)?;
        // The capture's timestamps are wall-clock: the epoch is taken at
        // both clocks at once. The file is created before any other work.
        let (epoch, wall) = (Instant::now(), SystemTime::now());
        let (pcap, taps) = match cfg.pcap.file {
            Some(_) => {
                let (w, [up, down]) = Writer::start(&cfg.pcap, wall)?;
                (Some(w), [Some(up), Some(down)])
            }
            None => (None, [None, None]),
        };
        let [up_tap, mut down_tap] = taps;
        for r in netns::cleanup_stale()? {
            tracing::warn!(
                "removed the stale network namespace {} of a run that is gone (ended {} \
                 processes left in it)",
                r.name,
                r.killed.len()
            );
        }
        let base = format!(
            "{}{}",
            netns::own_prefix(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let server = Netns::add(format!("{base}-srv"))?;
        let client = Netns::add(format!("{base}-cli"))?;
        let cc = cfg.congestion_control.as_deref();
        let srv_dev = device(&server, SERVER_IP, CLIENT_IP, cc)?;
        let cli_dev = device(&client, CLIENT_IP, SERVER_IP, cc)?;
        for d in [&srv_dev, &cli_dev] {
            d.set_nonblocking(true)
                .map_err(Error::os("TUN device: non-blocking", ""))?;
        }
        // Each device is read by one forwarder and written by the other.
        let (srv_dev, cli_dev) = (Arc::new(srv_dev), Arc::new(cli_dev));
        let mut path = Path {
            forwarders: Vec::new(),
            pcap,
            server,
            client,
        };
        let up = Model::new(&cfg.up, cfg.seed.wrapping_mul(2).wrapping_add(1));
        let down = Model::new(&cfg.down, cfg.seed.wrapping_mul(2).wrapping_add(2));
        let spawn_err = |e: std::io::Error| Error::os("forwarder thread", "")(e);
        let f = Forwarder::spawn(
            "up",
            cli_dev.clone(),
            srv_dev.clone(),
            up,
            epoch,
            pin.clone(),
            up_tap,
        )
        .map_err(|e| {
            // The writer drains only once every tap is gone: `path` (and
            // its writer) is dropped after this returns.
            drop(down_tap.take());
            spawn_err(e)
        })?;
        path.forwarders.push(("up".into(), cfg.up.to_string(), f));
        let f = Forwarder::spawn("down", srv_dev, cli_dev, down, epoch, pin, down_tap.take())
            .map_err(spawn_err)?;
        path.forwarders
            .push(("down".into(), cfg.down.to_string(), f));
        Ok(path)
    }

    /// Where the two ends live.
    pub fn handle(&self) -> PathHandle {
        PathHandle {
            server_ns: self.server.name().to_string(),
            client_ns: self.client.name().to_string(),
        }
    }

    /// Stops the forwarders, removes the namespaces and reports.
    pub fn stop(mut self) -> Result<PathReport, Error> {
        let mut reports = Vec::new();
        for (dir, conditions, f) in self.forwarders.drain(..) {
            let done = f
                .stop()
                .ok_or_else(|| Error::Setup(format!("the {dir} forwarder thread panicked")))?;
            reports.push(DirectionReport::new(&dir, conditions, &done));
        }
        let down = reports.pop().expect("two forwarders");
        let up = reports.pop().expect("two forwarders");
        let pcap = match self.pcap.take() {
            Some(w) => Some(
                w.finish()
                    .ok_or_else(|| Error::Setup("the pcap writer thread panicked".into()))?,
            ),
            None => None,
        };
        Ok(PathReport { up, down, pcap })
    }

    /// The namespace files (for tests that check removal).
    pub fn netns_files(&self) -> [PathBuf; 2] {
        [self.server.file(), self.client.file()]
    }
}

/// Opens a TUN device inside `ns` (from a thread that enters it, since a
/// device is created in its creator's namespace), addresses it
/// point-to-point and brings it up.
fn device(
    ns: &Netns,
    local: Ipv4Addr,
    peer: Ipv4Addr,
    cc: Option<&str>,
) -> Result<SyncDevice, Error> {
    let file = ns.file();
    let dev = std::thread::scope(|s| {
        s.spawn(|| {
            netns::enter(&file)?;
            // No IPv6 on the path: router solicitations and MLD reports
            // would otherwise cross the forwarder and its counters.
            for p in ["all", "default"] {
                let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{p}/disable_ipv6"), "1");
            }
            // /proc/sys/net is the namespace of the thread that opens it.
            if let Some(cc) = cc {
                std::fs::write("/proc/sys/net/ipv4/tcp_congestion_control", cc).map_err(|e| {
                    Error::Invalid(format!(
                        "TCP congestion control {cc:?}: {e}; a namespace may default only to one \
                         in net.ipv4.tcp_allowed_congestion_control ({})",
                        std::fs::read_to_string(
                            "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
                        )
                        .unwrap_or_default()
                        .trim()
                    ))
                })?;
            }
            DeviceBuilder::new()
                .name(DEVICE)
                .mtu(MTU)
                .build_sync()
                .map_err(Error::os(
                    format!("cannot create the TUN device in {}", ns.name()),
                    " (is /dev/net/tun there?)",
                ))
        })
        .join()
        .unwrap_or_else(|_| Err(Error::Setup("the TUN set-up thread panicked".into())))
    })?;
    let (l, p) = (local.to_string(), peer.to_string());
    ip(&[
        "-n",
        ns.name(),
        "addr",
        "add",
        &l,
        "peer",
        &p,
        "dev",
        DEVICE,
    ])?;
    ip(&[
        "-n",
        ns.name(),
        "link",
        "set",
        DEVICE,
        "mtu",
        &MTU.to_string(),
        "up",
    ])?;
    Ok(dev)
}
