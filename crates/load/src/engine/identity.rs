//! Client identities: a number, an origin, a session store (and over
//! HTTP/3 a UDP endpoint) and reuse counters, kept across connections.

use std::sync::Arc;

use rustls::pki_types::ServerName;
use tlslab_crypto::store::ClientSessions;
use tlslab_workload::specweb96::Sampler;
use tokio_rustls::TlsConnector;

use super::quic::QuicIdentity;
use super::shared::Shared;
use crate::config::Workload;
use crate::reuse::ReusePlanner;
use crate::tls;

pub(super) struct ClientTls {
    pub(super) connector: TlsConnector,
    pub(super) sessions: Arc<ClientSessions>,
    pub(super) name: ServerName<'static>,
}

/// Where a client's next path comes from.
pub(super) enum Picker {
    /// The origin's paths in turn, from this position.
    Turn(usize),
    /// The SPECweb96 mix (paths in `specweb96::files` order).
    Specweb96(Box<Sampler>),
}

/// What a client identity remembers between its requests.
pub(super) struct IdState {
    pub(super) planner: ReusePlanner,
    pub(super) picker: Picker,
    pub(super) conn_no: u64,
    pub(super) think: tlslab_workload::Rng,
}

/// A client identity: its number, its origin, its session store and reuse
/// counters. A closed-loop client is one identity; an open loop's
/// arrivals share a pool of them, concurrently.
pub(super) struct Identity {
    pub(super) id: u32,
    pub(super) origin: usize,
    pub(super) tls: Option<ClientTls>,
    /// Over HTTP/3: the identity's UDP endpoint and QUIC configuration.
    pub(super) quic: Option<QuicIdentity>,
    pub(super) state: parking_lot::Mutex<IdState>,
}

impl Identity {
    pub(super) fn new(sh: &Shared, id: u32) -> Self {
        let origin = id as usize % sh.origins.len();
        let o = &sh.origins[origin];
        let mut quic = None;
        let tls = o.tls.as_ref().map(|(name, base)| {
            let sessions = ClientSessions::new();
            let config = tls::client_config(base, sessions.clone(), &sh.wrap_store, sh.resume_with);
            // Over HTTP/3, QUIC's configuration on the same session store.
            quic = sh.quic.as_ref().and_then(|q| QuicIdentity::new(q, &config));
            ClientTls {
                connector: TlsConnector::from(config).early_data(sh.early_data),
                sessions,
                name: name.clone(),
            }
        });
        let picker = match sh.workload {
            Workload::Specweb96 => Picker::Specweb96(Box::new(Sampler::with_rng(
                tlslab_workload::rng(sh.seed, u64::from(id)),
            ))),
            _ => Picker::Turn(id as usize / sh.origins.len()),
        };
        Identity {
            id,
            origin,
            tls,
            quic,
            state: parking_lot::Mutex::new(IdState {
                planner: ReusePlanner::new(sh.reuse),
                picker,
                conn_no: 0,
                // Think times: streams above the path streams.
                think: tlslab_workload::rng(sh.seed, (1 << 32) | u64::from(id)),
            }),
        }
    }

    /// After a failure without `--retry-on-failure`: a new client, with no
    /// stored sessions and fresh reuse counters.
    pub(super) fn renew(&self, reuse: f64) {
        if let Some(tls) = &self.tls {
            tls.sessions.clear();
        }
        self.state.lock().planner = ReusePlanner::new(reuse);
    }
}
