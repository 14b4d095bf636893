//! What the QUIC listener learns from its TLS sessions: which handshakes
//! resumed, which ClientHellos offered 0-RTT and which the server accepted.
//!
//! quinn hides the rustls connection, so the kinds are read at two seams it
//! does expose. A key log on the listener's rustls configuration sees
//! `CLIENT_EARLY_TRAFFIC_SECRET` exactly when rustls resumes a session (it
//! derives the early secret from the resumed PSK whether or not early data
//! follows) and `CLIENT_HANDSHAKE_TRAFFIC_SECRET` on every handshake that
//! reached the ServerHello. A wrapper of quinn's crypto session reads the
//! ClientHello's `early_data` extension from the first CRYPTO bytes and sees
//! whether the server derived 0-RTT keys (quinn asks for them once, after
//! the ClientHello; rustls hands them out only when it accepted early data).
//! The same wrapper times rustls's handshake calls into the meter
//! (`quic_tls`, thread CPU time: two clock reads, a few hundred ns, per
//! call), the TLS protocol's share that `breakdown --h3` reports.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use quinn::ConnectionId;
use quinn::crypto::{self, ExportKeyingMaterialError, HeaderKey, KeyPair, Keys, PacketKey};
use quinn_proto::TransportError;
use quinn_proto::transport_parameters::TransportParameters;
use tlslab_crypto::meter::{Meter, Op};
use tlslab_runtime::thread_cpu_time;

use crate::stats::Kinds;

/// Counts handshakes and resumptions from rustls's key-log calls, then
/// hands every line to the key log the TCP configuration had.
#[derive(Debug)]
pub(crate) struct KindLog {
    pub(crate) kinds: Arc<Kinds>,
    pub(crate) inner: Arc<dyn rustls::KeyLog>,
}

const HANDSHAKE: &str = "CLIENT_HANDSHAKE_TRAFFIC_SECRET";
const EARLY: &str = "CLIENT_EARLY_TRAFFIC_SECRET";

impl rustls::KeyLog for KindLog {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        match label {
            HANDSHAKE => self.kinds.hellos.fetch_add(1, Ordering::Relaxed),
            EARLY => self.kinds.resumed.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        if self.inner.will_log(label) {
            self.inner.log(label, client_random, secret);
        }
    }

    fn will_log(&self, label: &str) -> bool {
        label == HANDSHAKE || label == EARLY || self.inner.will_log(label)
    }
}

/// quinn's rustls server configuration, with every session wrapped.
pub(crate) struct Counting {
    pub(crate) inner: Arc<quinn::crypto::rustls::QuicServerConfig>,
    pub(crate) kinds: Arc<Kinds>,
    /// The listener's crypto meter: the time inside rustls's handshake
    /// calls goes there as `quic_tls`.
    pub(crate) meter: Arc<Meter>,
    /// `inner` derives RFC 9001's Initial keys (no `--ablate` set replaces
    /// them): each attempt's are derived as far as it needs them.
    pub(crate) lazy_initial: bool,
}

impl crypto::ServerConfig for Counting {
    fn initial_keys(
        &self,
        version: u32,
        dst_cid: &ConnectionId,
    ) -> Result<Keys, crypto::UnsupportedVersion> {
        // The client's header key now, the rest when first used: a shed
        // attempt needs at most the server's side (super::initial_keys).
        super::initial_keys::initial_keys(&self.inner, self.lazy_initial, version, dst_cid)
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        // v1's fixed key built once, not per Retry as quinn's does.
        if version == 1
            && let Some(tag) = tlslab_crypto::quic::retry_tag_v1(orig_dst_cid, packet)
        {
            return tag;
        }
        self.inner.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(
        self: Arc<Self>,
        version: u32,
        params: &TransportParameters,
    ) -> Box<dyn crypto::Session> {
        Box::new(Session {
            inner: self.inner.clone().start_session(version, params),
            kinds: self.kinds.clone(),
            meter: self.meter.clone(),
            hello: Some(Vec::new()),
            accepted: AtomicBool::new(false),
        })
    }
}

/// The largest ClientHello read for its `early_data` extension.
const MAX_HELLO: usize = 16 * 1024;

struct Session {
    inner: Box<dyn crypto::Session>,
    kinds: Arc<Kinds>,
    meter: Arc<Meter>,
    /// The CRYPTO bytes so far, until the ClientHello is whole.
    hello: Option<Vec<u8>>,
    /// The server accepted 0-RTT on this connection.
    accepted: AtomicBool,
}

/// What `quinn::Connection::handshake_data` returns on the QUIC listener:
/// whether the server accepted the connection's 0-RTT data.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ZeroRtt(pub(crate) bool);

impl Session {
    fn read_hello(&mut self, buf: &[u8]) {
        let Some(h) = &mut self.hello else { return };
        h.extend_from_slice(buf);
        match tlslab_wire::ClientHello::parse(h) {
            Ok(hello) => {
                if hello.early_data {
                    self.kinds.early_offered.fetch_add(1, Ordering::Relaxed);
                }
                self.hello = None;
            }
            Err(tlslab_wire::Error::Incomplete { .. }) if h.len() < MAX_HELLO => {}
            Err(_) => self.hello = None,
        }
    }
}

impl crypto::Session for Session {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: quinn::Side) -> Keys {
        self.inner.initial_keys(dst_cid, side)
    }
    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        // Nothing downcasts quinn's own HandshakeData here (h3 does not).
        self.inner
            .handshake_data()
            .map(|_| Box::new(ZeroRtt(self.accepted.load(Ordering::Relaxed))) as Box<dyn Any>)
    }
    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.inner.peer_identity()
    }
    fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
        let keys = self.inner.early_crypto();
        if keys.is_some() && !self.accepted.swap(true, Ordering::Relaxed) {
            self.kinds.early_accepted.fetch_add(1, Ordering::Relaxed);
        }
        keys
    }
    fn early_data_accepted(&self) -> Option<bool> {
        self.inner.early_data_accepted()
    }
    fn is_handshaking(&self) -> bool {
        self.inner.is_handshaking()
    }
    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        self.read_hello(buf);
        let t = thread_cpu_time();
        let r = self.inner.read_handshake(buf);
        self.meter
            .record_took(Op::QuicTls, thread_cpu_time().saturating_sub(t));
        r
    }
    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.inner.transport_parameters()
    }
    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        let t = thread_cpu_time();
        let r = self.inner.write_handshake(buf);
        self.meter
            .record_took(Op::QuicTls, thread_cpu_time().saturating_sub(t));
        r
    }
    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        self.inner.next_1rtt_keys()
    }
    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.inner.is_valid_retry(orig_dst_cid, header, payload)
    }
    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.inner.export_keying_material(output, label, context)
    }
}
