//! The report of `tlslab cluster --json` (also a seed000-cluster study's
//! `engine_report`): the mechanisms, sharing and dispatch of a cluster's
//! cells, and the targets checked. Field names are documented in
//! docs/schema.md ("`tlslab cluster --json FILE`").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::float::or_nan;

/// The resumption mechanism of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// TLS 1.2, session IDs (nodes issue no tickets; the client sends none).
    Tls12Id,
    /// TLS 1.2, session tickets sealed with the node's ticket keys.
    Tls12Ticket,
    /// TLS 1.3, tickets sealed with the node's ticket keys (stateless); in
    /// the `redis-cache` arm, stateful tickets held in the shared cache.
    Tls13Ticket,
}

impl Mechanism {
    /// All three, in table order.
    pub const ALL: [Mechanism; 3] = [
        Mechanism::Tls12Id,
        Mechanism::Tls12Ticket,
        Mechanism::Tls13Ticket,
    ];

    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Tls12Id => "tls12-id",
            Mechanism::Tls12Ticket => "tls12-ticket",
            Mechanism::Tls13Ticket => "tls13-ticket",
        }
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                format!("mechanism {s:?} is unknown; choose tls12-id, tls12-ticket or tls13-ticket")
            })
    }
}

/// How the nodes share session state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    /// Each node its own cache and its own ticket keys.
    None,
    /// One Redis-shared session cache (`memory:N+redis://…` on every node).
    RedisCache,
    /// One ticket-key file for every node.
    SharedTicketKeys,
}

impl Sharing {
    /// All three.
    pub const ALL: [Sharing; 3] = [
        Sharing::None,
        Sharing::RedisCache,
        Sharing::SharedTicketKeys,
    ];

    /// The flag spelling.
    pub fn name(self) -> &'static str {
        match self {
            Sharing::None => "none",
            Sharing::RedisCache => "redis-cache",
            Sharing::SharedTicketKeys => "shared-ticket-keys",
        }
    }
}

impl std::str::FromStr for Sharing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Sharing::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                format!("sharing {s:?} is unknown; choose none, redis-cache or shared-ticket-keys")
            })
    }
}

/// What the nodes are.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    /// `tlslab serve` engines embedded in this process.
    Tlslab,
    /// nginx processes.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "nginx processes (`nginx -p DIR`, one config, session cache zone and ticket key file each)"
        )
    )]
    Nginx,
}

/// What the dispatcher is.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatcherKind {
    /// `tlslab dispatch`, embedded.
    Tlslab,
    /// An `haproxy` process in TCP mode.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "`haproxy` in TCP mode; `--policy session` is the stick-table recipe on the TLS 1.2 session ID"
        )
    )]
    Haproxy,
}

/// Where each part ran.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterPlacement {
    /// CPUs of every node (empty: not pinned).
    pub nodes: Vec<usize>,
    /// CPUs of the load engine (empty: not pinned).
    pub load: Vec<usize>,
    /// CPUs of the dispatcher (empty: not pinned).
    pub dispatcher: Vec<usize>,
    /// CPUs of `redis-server`, when one runs (empty: not pinned).
    pub redis: Vec<usize>,
    /// A sentence saying so.
    pub description: String,
}

/// One measured cell.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterCell {
    /// The resumption mechanism.
    pub mechanism: Mechanism,
    /// The dispatch policy (`session` for HAProxy is its stick-table recipe).
    pub policy: String,
    /// How the nodes share session state.
    pub sharing: Sharing,
    /// `policy` or, for a sharing arm, `round-robin+<sharing>`.
    pub arm: String,
    /// Requested reuse, 0–1 (the load steers its resumed share to it).
    #[serde(deserialize_with = "or_nan")]
    pub reuse_requested: f64,
    /// The window of every figure, seconds: the cell's load run.
    #[serde(deserialize_with = "or_nan")]
    pub window_s: f64,
    /// Requests completed in the window (client-observed).
    pub requests: u64,
    /// Failed requests (client-observed).
    pub errors: u64,
    /// Requests per second (client-observed).
    #[serde(deserialize_with = "or_nan")]
    pub throughput_rps: f64,
    /// Median TCP connect to the dispatcher, µs (client-observed).
    pub connect_p50_us: Option<u64>,
    /// Median request latency, µs (client-observed; one request per
    /// connection, so connect, handshake and GET).
    pub latency_p50_us: Option<u64>,
    /// The nodes' CPU time summed over the nodes ÷ the requests they
    /// served, µs (server-observed).
    #[serde(deserialize_with = "or_nan")]
    pub cluster_cpu_us_per_request: f64,
    /// The nodes' CPU time ÷ the window (1.0 = one CPU busy).
    #[serde(deserialize_with = "or_nan")]
    pub nodes_busy: f64,
    /// Each node's CPU seconds in the window (server-observed).
    pub node_cpu_s: Vec<f64>,
    /// Each node's requests served in the window (server-observed).
    pub node_requests: Vec<u64>,
    /// Handshakes the nodes completed (server-observed).
    pub handshakes: u64,
    /// Of them, resumed (server-observed).
    pub resumed: u64,
    /// `resumed / handshakes` (server-observed).
    #[serde(deserialize_with = "or_nan")]
    pub resumption_achieved: f64,
    /// `resumption_achieved / reuse_requested` (null at reuse 0).
    pub achieved_over_requested: Option<f64>,
    /// Connections on which the client offered a session (client-observed).
    pub client_offers: u64,
    /// `client_offers` ÷ the client's handshakes: the share of connections
    /// that offered a session (client-observed), beside
    /// `resumption_achieved`. Absent in reports written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumption_offered: Option<f64>,
    /// Share of resumption attempts the chosen node accepted: for `tlslab
    /// dispatch` dispatcher-observed (its `/metrics`), for HAProxy the
    /// nodes' resumed handshakes ÷ the client's offers. Null without attempts.
    pub routing_efficiency: Option<f64>,
    /// `dispatcher` or `nodes/client-offers`: where `routing_efficiency` came from.
    pub routing_efficiency_source: String,
    /// The dispatcher's CPU per proxied connection, µs.
    pub dispatcher_cpu_us_per_conn: Option<f64>,
    /// `redis-server`'s CPU per request, µs (redis-cache arm only).
    pub redis_cpu_us_per_request: Option<f64>,
    /// The nodes' pre-handshake Redis GETs in the window, summed over the
    /// nodes (redis-cache arm only; server-observed): hits, misses,
    /// timeouts (over `redis_timeout_ms`, each a full handshake), errors.
    pub redis_gets: Option<RedisGets>,
    /// The load engine's CPU busy fraction (client-observed).
    #[serde(deserialize_with = "or_nan")]
    pub client_busy: f64,
    /// True when the load engine was ≥ 90 % busy: throughput then measures
    /// the client side, not the cluster.
    pub client_saturated: bool,
    /// What the cell changed from the mechanism's usual setup, if anything.
    pub note: Option<String>,
}

/// The nodes' Redis GETs in a cell.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct RedisGets {
    /// GETs that found the session.
    pub hits: u64,
    /// GETs that found nothing.
    pub misses: u64,
    /// GETs not answered within the bound.
    pub timeouts: u64,
    /// GETs that failed.
    pub errors: u64,
}

/// An arm that was not run, and why.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Skipped {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// The arm.
    pub arm: String,
    /// Why.
    pub reason: String,
}

/// A target checked against the cells.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetCheck {
    /// What is checked.
    pub target: String,
    /// The measured figure.
    pub measured: Option<f64>,
    /// The bound.
    #[serde(deserialize_with = "or_nan")]
    pub bound: f64,
    /// `met`, `missed` or `not run`.
    pub verdict: String,
}

/// What `tlslab cluster` measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterReport<P = serde_json::Value> {
    /// Schema version of this JSON.
    pub schema_version: u32,
    /// Whether this was `--quick`.
    pub quick: bool,
    /// Number of nodes.
    pub nodes: usize,
    /// What the nodes were.
    pub node_kind: NodeKind,
    /// What the dispatcher was.
    pub dispatcher: DispatcherKind,
    /// `--h3`: the cluster over QUIC (HTTP/3 nodes with QUIC-LB connection
    /// IDs behind `tlslab dispatch --udp`); absent (false) over TCP.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub h3: bool,
    /// Where each part ran.
    pub placement: ClusterPlacement,
    /// Closed-loop clients.
    pub clients: usize,
    /// Length of each cell's load run, seconds.
    #[serde(deserialize_with = "or_nan")]
    pub cell_s: f64,
    /// The certificate's key type.
    pub key: String,
    /// The key-exchange groups given (`--groups`); `None`: each side's
    /// defaults.
    pub groups: Option<Vec<String>>,
    /// The nodes' Redis GET bound in the redis-cache arm, ms.
    #[serde(deserialize_with = "or_nan")]
    pub redis_timeout_ms: f64,
    /// The path requested (one request per connection).
    pub path: String,
    /// How the figures were taken.
    pub method: String,
    /// Versions of the peers used (nginx, HAProxy, redis-server).
    pub peers: BTreeMap<String, String>,
    /// Every cell, in run order.
    pub cells: Vec<ClusterCell>,
    /// Arms not run, with the reason.
    pub skipped: Vec<Skipped>,
    /// The issue 10 and 11 targets, checked.
    pub targets: Vec<TargetCheck>,
    /// With `--path`: the path's conditions and its forwarder's counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wan_path: Option<P>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed000-cluster study's `engine_report`: a cluster report the
    /// current code wrote (`docs/results/full` and the quick run).
    fn written(doc: &str) -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(doc).unwrap();
        v["engine_report"].clone()
    }

    #[test]
    fn written_cluster_reports_read_back_and_write_the_same_json() {
        for doc in [
            include_str!("../../../docs/results/full/seed000-cluster/results.json"),
            include_str!("../../../docs/results/seed000-cluster/results.json"),
        ] {
            let mut v = written(doc);
            let r: ClusterReport = serde_json::from_value(v.clone()).unwrap();
            // These documents predate the report's `groups` and the cells'
            // `connect_p50_us` and `latency_p50_us`; they read as absent
            // and write as `null`.
            let top = v.as_object_mut().unwrap();
            assert!(
                top.insert("groups".into(), serde_json::Value::Null)
                    .is_none()
            );
            for c in v["cells"].as_array_mut().unwrap() {
                for k in ["connect_p50_us", "latency_p50_us"] {
                    let c = c.as_object_mut().unwrap();
                    assert!(!c.contains_key(k));
                    c.insert(k.into(), serde_json::Value::Null);
                }
            }
            assert!(!r.cells.is_empty() && r.wan_path.is_none());
            assert!(
                r.cells
                    .iter()
                    .any(|c| c.mechanism == Mechanism::Tls13Ticket)
            );
            assert_eq!(serde_json::to_value(&r).unwrap(), v);
        }
    }

    #[test]
    fn mechanism_and_sharing_names_parse_back() {
        for m in Mechanism::ALL {
            assert_eq!(m.name().parse::<Mechanism>(), Ok(m));
            assert_eq!(serde_json::to_value(m).unwrap(), m.name());
        }
        for s in Sharing::ALL {
            assert_eq!(s.name().parse::<Sharing>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.name());
        }
    }
}
