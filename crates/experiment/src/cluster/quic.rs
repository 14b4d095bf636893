//! What `tlslab cluster --h3` adds to a cell: each node's HTTP/3 listener
//! with QUIC-LB connection IDs carrying its server ID, the balancer's view
//! of that configuration, and ticket keys shared through Redis.
//!
//! It imports nothing else of the cluster experiment: what it needs is
//! passed in.

use std::time::{Duration, Instant};

use tlslab_crypto::quic::{LbConfig, LbParams};
use tlslab_server::{H3Settings, Server, TicketKeys};

use crate::Error;

/// Server ID length, bytes: one byte names up to 255 nodes.
const SERVER_ID_LEN: usize = 1;
/// Nonce length: server ID and nonce are one AES block, the draft's
/// single-pass encryption (the cheapest encrypted mode).
const NONCE_LEN: usize = 15;
/// How often the shared keys rotate in Redis. Every node polls at 1/24 of
/// it (1 s), and a ticket stays good for two rotations after its key stops
/// sealing: longer than any cell.
const KEY_ROTATION: Duration = Duration::from_secs(24);
/// How long the nodes may take to agree on the shared keys.
const KEY_WAIT: Duration = Duration::from_secs(10);

/// The run's QUIC-LB configuration (config ID 0, a 1-byte server ID, a
/// random AES-128 key, single-pass), shared by the nodes and the
/// dispatcher.
pub(super) fn lb_params(key: [u8; 16]) -> Result<LbParams, Error> {
    LbParams::new(0, SERVER_ID_LEN, NONCE_LEN, Some(key))
        .map_err(|e| Error::Cluster(format!("QUIC-LB configuration: {e}")))
}

/// Node `i`'s QUIC-LB server ID: `i + 1`.
pub(super) fn server_id(i: usize) -> Vec<u8> {
    vec![u8::try_from(i + 1).unwrap_or(u8::MAX)]
}

/// Node `i`'s HTTP/3 listener beside its TLS one (`serve --h3 --quic-lb
/// server-id=…`): on the TLS listener's address, a port of its own, and
/// `serve --h3`'s other defaults.
pub(super) fn h3_settings(https: std::net::SocketAddr, lb: &LbParams, i: usize) -> H3Settings {
    let mut h = H3Settings::new(std::net::SocketAddr::new(https.ip(), 0));
    h.quic_lb = Some(LbConfig {
        params: lb.clone(),
        server_id: server_id(i),
    });
    h
}

/// The shared-ticket-keys arm over QUIC: the cluster's keys in Redis under
/// `{prefix}ticket-keys`, as `serve --ticket-keys redis://…` keeps them.
pub(super) fn redis_ticket_keys(url: String, prefix: &str) -> TicketKeys {
    TicketKeys::Redis {
        url,
        key: format!("{prefix}ticket-keys"),
        rotation: KEY_ROTATION,
    }
}

/// Waits until every node seals with the keys from Redis: one key-set
/// version, at least 1, on all of them (a node starts on local keys until
/// its first read of Redis). The error says which node did not get there.
pub(super) fn wait_for_shared_keys(servers: &[&Server]) -> Result<(), Error> {
    let deadline = Instant::now() + KEY_WAIT;
    loop {
        let versions: Vec<u64> = servers
            .iter()
            .map(|s| s.snapshot().ticket_keys.map_or(0, |k| k.version))
            .collect();
        if versions[0] >= 1 && versions.iter().all(|&v| v == versions[0]) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Cluster(format!(
                "the nodes did not agree on the ticket keys in Redis within {} s (key-set \
                 versions {versions:?}); check that redis-server answers",
                KEY_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_get_distinct_server_ids_of_one_single_pass_configuration() {
        let lb = lb_params([7; 16]).unwrap();
        assert_eq!(lb.mode(), tlslab_crypto::quic::Mode::SinglePass);
        let a = h3_settings("127.0.0.1:0".parse().unwrap(), &lb, 0);
        let b = h3_settings("127.0.0.1:0".parse().unwrap(), &lb, 1);
        let (a, b) = (a.quic_lb.unwrap(), b.quic_lb.unwrap());
        assert_ne!(a.server_id, b.server_id);
        assert_eq!(a.server_id.len(), lb.server_id_len);
    }
}
