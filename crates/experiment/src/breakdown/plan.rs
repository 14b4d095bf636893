//! What `tlslab breakdown` runs: the workload, the configurations (each
//! a set of TLS stages replaced by no-ops) and the meter's operations of
//! each stage.

use std::time::Duration;

use tlslab_crypto::meter::{Ablation, AblationSet, Op};
use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;

pub use crate::rig::Transport;
pub use tlslab_schema::breakdown::Workload;

/// What `breakdown` runs.
#[derive(Clone, Debug)]
pub struct BreakdownConfig {
    /// The request pattern.
    pub workload: Workload,
    /// Response body size in bytes (served from `/bytes/<N>`).
    pub file_size: u64,
    /// TLS version of every TLS cell.
    pub version: Version,
    /// Certificate key type.
    pub key: KeyType,
    /// Measurement time per cell.
    pub cell: Duration,
    /// Closed-loop clients.
    pub clients: usize,
    /// The fewest rounds (runs per configuration) before the stopping rule
    /// may stop.
    pub repeats: usize,
    /// The time cap: no round starts that would end after it (at least
    /// `repeats` rounds always run).
    pub max_time: Duration,
    /// The target 95 % half-width of every named stage's share, as a
    /// fraction of the baseline (0.02 = 2 points).
    pub target_ci95: f64,
    /// TCP (HTTP/1.1 over TLS) or QUIC (HTTP/3, one stream at a time).
    pub transport: Transport,
}

/// One configuration of the breakdown.
#[derive(Clone, Debug)]
pub struct Configuration {
    /// Its label, after seed 001 where one exists.
    pub name: String,
    /// The stages replaced by no-ops; `None` is plain HTTP (no TLS at all).
    pub ablation: Option<AblationSet>,
    /// Whether this row is a single stage whose Amdahl fraction is part of
    /// the cost table.
    pub stage: Option<String>,
}

impl Configuration {
    /// The configuration as the report records it.
    pub fn to_schema(&self) -> tlslab_schema::breakdown::Configuration {
        tlslab_schema::breakdown::Configuration {
            name: self.name.clone(),
            ablation: self
                .ablation
                .map(|set| set.iter().map(|a| a.name().to_string()).collect()),
            stage: self.stage.clone(),
        }
    }
}

fn config(name: &str, ablation: Option<AblationSet>, stage: Option<&str>) -> Configuration {
    Configuration {
        name: name.into(),
        ablation,
        stage: stage.map(Into::into),
    }
}

/// The stages that only QUIC has, in table order, with their labels.
pub const QUIC_STAGES: [(Ablation, &str); 3] = [
    (Ablation::QuicPacket, "no packet protection"),
    (Ablation::QuicHeader, "no header protection"),
    (Ablation::QuicKeys, "no QUIC key schedule"),
];

/// The QUIC skeleton: every crypto stage of a QUIC connection a no-op
/// (the TLS skeleton without the TLS 1.2 perfect cache, which QUIC cannot
/// use, and QUIC's three stages).
pub fn quic_skeleton() -> AblationSet {
    let mut set = AblationSet::NONE;
    for a in AblationSet::quic_skeleton().iter() {
        if a != Ablation::Cache {
            set = set.with(a);
        }
    }
    set
}

/// The configurations run over `transport`, in order. TCP: plain HTTP,
/// the TLS baseline, each stage alone, seed 001's cumulative
/// configurations, skeleton, minimal. QUIC (which has no plain variant):
/// the baseline, the TLS stages that QUIC uses (`cipher` and `mac` are
/// the TLS record layer, which QUIC replaces), QUIC's three stages, and
/// the QUIC skeleton.
pub fn configurations(workload: Workload, transport: Transport) -> Vec<Configuration> {
    if transport == Transport::Quic {
        let mut out = vec![config("TLS (baseline)", Some(AblationSet::NONE), None)];
        for (a, label) in [
            (Ablation::Sig, "no signatures"),
            (Ablation::Kx, "no key exchange"),
            (Ablation::Hash, "no hash"),
            (Ablation::Rng, "no randomness"),
        ]
        .into_iter()
        .chain(QUIC_STAGES)
        {
            out.push(config(
                label,
                Some(AblationSet::NONE.with(a)),
                Some(a.name()),
            ));
        }
        out.push(config(
            "QUIC skeleton (every crypto stage a no-op)",
            Some(quic_skeleton()),
            None,
        ));
        return out;
    }
    let mut out = vec![
        config("plain HTTP", None, None),
        config("TLS (baseline)", Some(AblationSet::NONE), None),
    ];
    let resumes = matches!(workload, Workload::Reuse(r) if r > 0.0);
    for (a, label) in [
        (Ablation::Sig, "no signatures"),
        (Ablation::Kx, "no key exchange"),
        (Ablation::Cipher, "NULL cipher"),
        (Ablation::Mac, "no MAC (cipher only)"),
        (Ablation::Hash, "no hash"),
        (Ablation::Rng, "no randomness"),
        (Ablation::Cache, "perfect cache"),
    ] {
        // A perfect cache only matters when sessions are resumed.
        if a == Ablation::Cache && !resumes {
            continue;
        }
        out.push(config(
            label,
            Some(AblationSet::NONE.with(a)),
            Some(a.name()),
        ));
    }
    let pkx = AblationSet::NONE.with(Ablation::Sig).with(Ablation::Kx);
    let pkx_rng_cache = pkx.with(Ablation::Rng).with(Ablation::Cache);
    // Seed 001's "PKX, NULL, no MAC, no randomness, perfect cache" is, in
    // rustls, exactly the skeleton: every crypto stage is a no-op while the
    // protocol machinery still runs (rustls cannot skip it; ABLATIONS.md).
    for (name, set) in [
        ("PKX (no sig, no kx)", pkx),
        ("PKX, no randomness, perfect cache", pkx_rng_cache),
        (
            "skeleton (every crypto stage a no-op)",
            AblationSet::skeleton(),
        ),
        ("minimal setup, encrypted data", AblationSet::minimal()),
    ] {
        out.push(config(name, Some(set), None));
    }
    out
}

/// The crypto-meter operations that make up a named stage, for the direct
/// attribution; `None` where the meter cannot isolate the stage.
pub fn meter_ops(stage: &str) -> Option<&'static [Op]> {
    Some(match stage {
        "sig" => &[Op::Sign, Op::Verify],
        "kx" => &[Op::KxStart, Op::KxComplete, Op::KxStartAndComplete],
        // The NULL cipher removes the whole AEAD: every record seal and open.
        "cipher" => &[
            Op::SealHandshake,
            Op::SealApplication,
            Op::OpenHandshake,
            Op::OpenApplication,
        ],
        "hash" => &[Op::Hash],
        "rng" => &[Op::Random],
        "cache" => &[Op::StoreGet, Op::StorePut],
        "quic-packet" => &[Op::QuicSeal, Op::QuicOpen],
        "quic-header" => &[Op::QuicHeader],
        // `quic-keys`: the meter counts HKDF calls without their labels,
        // so QUIC's derivations cannot be told from TLS's.
        // `mac` keeps AES-CTR and drops the tag: the meter times the AEAD
        // as one operation and cannot split authentication from it.
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_only_with_resumption() {
        let stages = |w| {
            configurations(w, Transport::Tcp)
                .into_iter()
                .filter_map(|c| c.stage)
                .collect::<Vec<_>>()
        };
        assert!(!stages(Workload::NewConn).contains(&"cache".to_string()));
        assert!(stages(Workload::Reuse(0.5)).contains(&"cache".to_string()));
    }

    #[test]
    fn quic_runs_its_own_stages_and_no_plain_cell() {
        let c = configurations(Workload::NewConn, Transport::Quic);
        let stages: Vec<_> = c.iter().filter_map(|c| c.stage.clone()).collect();
        assert_eq!(
            stages,
            [
                "sig",
                "kx",
                "hash",
                "rng",
                "quic-packet",
                "quic-header",
                "quic-keys"
            ]
        );
        assert!(c.iter().all(|c| c.ablation.is_some()));
        let skel = quic_skeleton();
        assert!(!skel.contains(Ablation::Cache) && skel.contains(Ablation::QuicKeys));
    }
}
