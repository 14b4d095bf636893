//! The `engine_report` of a results document ([`crate::study`]): the
//! packet-path reports of the post-quantum study's cells, the probe study's
//! per-cell reports, or another engine's own `--json` document.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

use crate::float::or_inf;

/// A results document's `engine_report`. Untagged: the JSON is the
/// variant's own (`{"path": …}`, `{"probe": …}` or an engine's document),
/// as it always was.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EngineReport {
    /// The packet-path cells of a load study (seed004-handshake with
    /// `--path-kind packet|both`).
    Path(PathCells),
    /// The probe study's cells (seed003-table2).
    Probe(ProbeCells),
    /// Another engine's own document, verbatim: `breakdown --json`,
    /// `overload --json` or `cluster --json` (read it with
    /// [`crate::study::StudyResults::engine_report_as`]). It stays a
    /// `Value` because a document an older tlslab wrote must read and write
    /// back unchanged when a study resumes: read as its typed report, a
    /// field that version did not have would be written back as `null`.
    Engine(serde_json::Value),
}

impl EngineReport {
    /// An engine's own document (`None` if it does not serialize).
    pub fn engine<T: Serialize>(report: &T) -> Option<EngineReport> {
        serde_json::to_value(report)
            .ok()
            .map(|v| EngineReport::Engine(sort_keys(v)))
    }
}

/// `engine_report` of a load study across the packet-level path.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathCells {
    /// Cell id → its forwarder's report and byte check.
    pub path: BTreeMap<String, PathCell>,
}

/// One packet-path cell's forwarder report and byte check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathCell<P = serde_json::Value> {
    /// The cell's byte check (`null` when the load kept no socket counts).
    pub byte_check: Option<ByteCheck>,
    /// The forwarder's report (`tlslab-path`'s `PathReport`, which has no
    /// reader).
    pub packet_path: P,
}

/// `engine_report` of the probe study.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeCells {
    /// Cell id → what its probe run reported.
    pub probe: BTreeMap<String, ProbeCell>,
}

/// One probe cell: the probe's report of its target and the path's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeCell<T = serde_json::Value, P = serde_json::Value> {
    /// The packet-level path's forwarder report (`tlslab-path`'s
    /// `PathReport`), for a packet cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet_path: Option<P>,
    /// The relay's counters, for a relay cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<RelayCounts>,
    /// The probe's report of the cell's target (`tlslab probe report
    /// --json`'s `targets[]` entry).
    pub target: T,
}

/// What `tlslab relay` carried for one cell.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RelayCounts {
    /// Bytes server → client.
    pub bytes_down: u64,
    /// Bytes client → server.
    pub bytes_up: u64,
    /// Connections relayed.
    pub connections: u64,
}

/// The packet path's bytes against the load's socket bytes, for one cell
/// with nothing else on the path: each direction's forwarded bytes less the
/// IP and TCP headers of its packets is the TCP payload, which is what the
/// client wrote (up) and read (down).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ByteCheck {
    /// TCP connections the load made.
    pub connections: u64,
    /// Whether TCP timestamps were on (12 option bytes a segment).
    pub timestamps: bool,
    /// Packets the forwarder forwarded, client → server.
    pub packets_up: u64,
    /// Their bytes (IP packets).
    pub bytes_up: u64,
    /// Packets forwarded, server → client.
    pub packets_down: u64,
    /// Their bytes.
    pub bytes_down: u64,
    /// TCP payload up: `bytes_up` less the headers.
    pub payload_up: u64,
    /// TCP payload down.
    pub payload_down: u64,
    /// Bytes the load wrote on its sockets (client-observed).
    pub socket_out: u64,
    /// Bytes it read.
    pub socket_in: u64,
    /// Of those, full-handshake bytes both ways (count × mean over the
    /// window's full handshakes).
    pub handshake_bytes: f64,
    /// (payload − socket) ÷ socket, up, %; infinite (written `null`) when
    /// the load read or wrote no socket bytes.
    #[serde(deserialize_with = "or_inf")]
    pub diff_up_pct: f64,
    /// The same, down, %.
    #[serde(deserialize_with = "or_inf")]
    pub diff_down_pct: f64,
}

impl ByteCheck {
    /// The larger of the two directions' differences, %.
    pub fn worst_pct(&self) -> f64 {
        self.diff_up_pct.abs().max(self.diff_down_pct.abs())
    }

    /// Returns true if and only if both directions agree within 1 %.
    pub fn within_1pct(&self) -> bool {
        self.worst_pct() <= 1.0
    }
}

/// Serializes `v` with every object's keys in sorted order: the results
/// document writes its engine report and cells' load reports so (they
/// were once stored as `serde_json::Value`, whose maps are sorted), and
/// keeps doing it so its bytes stay the same.
pub fn sorted<T: Serialize, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    sort_keys(serde_json::to_value(v).map_err(serde::ser::Error::custom)?).serialize(s)
}

/// `v` with every object's keys in sorted order, at every depth.
///
/// A `serde_json::Value`'s maps are sorted only while serde_json's
/// `preserve_order` feature is off, and a feature of one crate is on for
/// the whole build: the `qlog` crate (quinn's qlog, `--qlog`) turns it on,
/// and maps then keep insertion order. Writers that promise sorted keys
/// sort here rather than rely on the map type.
pub fn sort_keys(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sort_keys(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sort_keys).collect()),
        other => other,
    }
}

/// A section of a document kept as it was written, with its typed reading:
/// an older tlslab's section (without a field added since) writes back
/// unchanged when the document is read and saved again, and readers get
/// the typed value ([`Verbatim::get`]; `None` when it does not read as
/// `T`).
#[derive(Clone, Debug)]
pub struct Verbatim<T> {
    json: serde_json::Value,
    typed: Option<T>,
}

impl<T: Serialize> Verbatim<T> {
    /// `typed` and its JSON (with sorted keys).
    pub fn new(typed: T) -> Result<Verbatim<T>, serde_json::Error> {
        Ok(Verbatim {
            json: sort_keys(serde_json::to_value(&typed)?),
            typed: Some(typed),
        })
    }
}

impl<T> Verbatim<T> {
    /// The typed reading.
    pub fn get(&self) -> Option<&T> {
        self.typed.as_ref()
    }
}

impl<T> Serialize for Verbatim<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(s)
    }
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Verbatim<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Verbatim<T>, D::Error> {
        let json = serde_json::Value::deserialize(d)?;
        let typed = T::deserialize(&json).ok();
        Ok(Verbatim { json, typed })
    }
}
