//! A UDP tap for QUIC tests: a relay on 127.0.0.1 that routes each QUIC
//! connection of a client to a server of its own and records the client's
//! datagrams, so a test can send one client's connections to several
//! nodes, replay a recorded first flight, or hold a datagram back.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A UDP tap between a client and servers. A client datagram that opens
/// a connection (an Initial whose Destination Connection ID the tap does
/// not know) starts a flow: its own socket to the next server (flow `i` to
/// `servers[i % n]`), whose answers come back to the client. Later client
/// datagrams go to the flow their DCID names (the connection IDs the
/// servers chose are learnt from their long headers; quinn's are 8 bytes),
/// so one client address (one quinn endpoint) can reach several nodes,
/// with connections that overlap. Every client datagram is kept, by flow,
/// in order.
pub struct Tap {
    /// The address clients connect to.
    pub addr: SocketAddr,
    flows: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// The length of the connection IDs `tlslab serve` (quinn) chooses.
const SERVER_CID_LEN: usize = 8;

/// The Destination Connection ID of a client's datagram, and whether it is
/// a QUIC v1 Initial (RFC 9000, 17.2 and 17.3).
fn client_dcid(d: &[u8]) -> Option<(&[u8], bool)> {
    if d.first()? & 0x80 == 0 {
        return Some((d.get(1..1 + SERVER_CID_LEN)?, false));
    }
    let dcid = d.get(6..6 + *d.get(5)? as usize)?;
    Some((dcid, d[1..5] == [0, 0, 0, 1] && (d[0] >> 4) & 0x3 == 0))
}

/// The Source Connection ID of a long-header packet: what a server chose,
/// which the client's later packets carry as their DCID.
fn long_scid(d: &[u8]) -> Option<&[u8]> {
    if d.len() < 6 || d[0] & 0x80 == 0 {
        return None;
    }
    let at = 6 + d[5] as usize;
    let len = *d.get(at)? as usize;
    d.get(at + 1..at + 1 + len)
}

impl Tap {
    /// A tap in front of `servers`.
    pub fn start(servers: &[SocketAddr]) -> Tap {
        Tap::with_hold(servers, None)
    }

    /// A tap that holds each connection's second client datagram back for
    /// `hold` (the rest of a ClientHello that takes two, as a post-quantum
    /// key share does) before it forwards it.
    pub fn with_hold(servers: &[SocketAddr], hold: Option<Duration>) -> Tap {
        let servers = servers.to_vec();
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind the tap");
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let flows: Arc<Mutex<Vec<Vec<Vec<u8>>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (f, st) = (flows.clone(), stop.clone());
        // Connection ID -> flow: the client's first DCIDs and the servers'.
        let routes: Arc<Mutex<HashMap<Vec<u8>, usize>>> = Arc::default();
        let main = std::thread::spawn(move || {
            let sock = Arc::new(sock);
            let mut ups: Vec<Arc<UdpSocket>> = Vec::new();
            let mut back = Vec::new();
            let mut buf = vec![0u8; 65536];
            // Bounded: the tap stops when told, and in any case after 60 s.
            let end = Instant::now() + Duration::from_secs(60);
            while !st.load(Ordering::Relaxed) && Instant::now() < end {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let d = &buf[..n];
                let Some((dcid, initial)) = client_dcid(d) else {
                    continue;
                };
                let known = routes.lock().unwrap().get(dcid).copied();
                let flow = match known {
                    Some(i) => i,
                    None if initial => {
                        let i = ups.len();
                        let u = UdpSocket::bind("127.0.0.1:0").expect("bind upstream");
                        u.connect(servers[i % servers.len()])
                            .expect("connect upstream");
                        u.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                        let u = Arc::new(u);
                        ups.push(u.clone());
                        f.lock().unwrap().push(Vec::new());
                        routes.lock().unwrap().insert(dcid.to_vec(), i);
                        let (s, st, routes) = (sock.clone(), st.clone(), routes.clone());
                        back.push(std::thread::spawn(move || {
                            let mut buf = vec![0u8; 65536];
                            while !st.load(Ordering::Relaxed) && Instant::now() < end {
                                if let Ok(n) = u.recv(&mut buf) {
                                    // Learnt before the client can use it.
                                    if let Some(id) = long_scid(&buf[..n]) {
                                        routes.lock().unwrap().insert(id.to_vec(), i);
                                    }
                                    let _ = s.send_to(&buf[..n], from);
                                }
                            }
                        }));
                        i
                    }
                    // Not a connection the tap has seen: the latest.
                    None if !ups.is_empty() => ups.len() - 1,
                    None => continue,
                };
                let seen = {
                    let mut f = f.lock().unwrap();
                    f[flow].push(d.to_vec());
                    f[flow].len()
                };
                if let (2, Some(hold)) = (seen, hold) {
                    std::thread::sleep(hold);
                }
                let _ = ups[flow].send(d);
            }
            for t in back {
                let _ = t.join();
            }
        });
        Tap {
            addr,
            flows,
            stop,
            threads: vec![main],
        }
    }

    /// The recorded client datagrams of each flow, in the order the flows
    /// began.
    pub fn flows(&self) -> Vec<Vec<Vec<u8>>> {
        self.flows.lock().unwrap().clone()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
