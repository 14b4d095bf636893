//! What every part of the post-quantum sweep shares: its chains, groups,
//! RTTs and MSS, the names of its levels, and the figures read from a cell.

use tlslab_crypto::compress::CertCompression;
use tlslab_crypto::pki::KeyType;
use tlslab_report::HandshakeKindSummary;
use tlslab_report::study::{Cell, CellMetrics};

/// The chains: (leaf, intermediate).
pub(super) const CHAINS: [(KeyType, KeyType); 7] = [
    (KeyType::EcdsaP256, KeyType::EcdsaP256),
    (KeyType::Rsa2048, KeyType::Rsa2048),
    (KeyType::MlDsa44, KeyType::MlDsa44),
    (KeyType::MlDsa65, KeyType::MlDsa65),
    (KeyType::MlDsa87, KeyType::MlDsa87),
    (KeyType::MlDsa44, KeyType::EcdsaP256),
    (KeyType::EcdsaP256, KeyType::MlDsa44),
];

/// Key-exchange groups of the sweep.
pub(super) const GROUPS: [&str; 2] = ["x25519", "X25519MLKEM768"];

/// Round-trip times of the time-to-first-byte cells, ms.
pub(in crate::study) const RTTS_MS: [u64; 3] = [20, 50, 100];

/// The MSS the client announces.
pub(super) const MSS: u32 = 1460;

/// A chain's level of the `chain` factor: `mldsa44` when leaf and
/// intermediate share a type, else `leaf/intermediate`.
pub(super) fn chain_name(leaf: KeyType, mid: KeyType) -> String {
    if leaf == mid {
        leaf.name().to_string()
    } else {
        format!("{}/{}", leaf.name(), mid.name())
    }
}

pub(super) fn comp_name(c: &[CertCompression]) -> &'static str {
    c.first().map_or("none", |c| c.name())
}

/// Whether the cell ran over QUIC (`transport = quic`); TCP cells have no
/// `transport` factor (or `tcp`).
pub(super) fn is_quic(c: &Cell) -> bool {
    c.factors.get("transport").is_some_and(|t| t == "quic")
}

/// The cell's path kind (`relay` in documents from before `--path`).
pub(super) fn kind_of(c: &Cell) -> &str {
    c.factors.get("path").map_or("relay", String::as_str)
}

/// A figure of the full handshakes of the cell's load report.
pub(super) fn full(c: &Cell, field: fn(&HandshakeKindSummary) -> Option<f64>) -> Option<f64> {
    field(&super::super::session::load_report(c)?.handshake.full)
}

/// Connect + full handshake + request to first response byte, medians, ms.
pub(super) fn ttfb_ms(c: &Cell) -> Option<f64> {
    let hs = CellMetrics::at(&c.metrics.handshake_full_us, 50.0)?;
    Some((c.metrics.connect_p50_us? + hs + c.metrics.ttfb_p50_us?) as f64 / 1000.0)
}

/// `v` with `digits` decimals, or `-`.
pub(super) fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}
