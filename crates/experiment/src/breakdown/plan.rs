//! What `tlslab breakdown` runs: the workload, the configurations (each
//! a set of TLS stages replaced by no-ops) and the meter's operations of
//! each stage.

use std::time::Duration;

use tlslab_crypto::meter::{Ablation, AblationSet, Op};
use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;

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

/// The configurations run, in order: plain HTTP, the TLS baseline, each
/// stage alone, seed 001's cumulative configurations, skeleton, minimal.
pub fn configurations(workload: Workload) -> Vec<Configuration> {
    let config = |name: &str, ablation, stage: Option<&str>| Configuration {
        name: name.into(),
        ablation,
        stage: stage.map(Into::into),
    };
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
            configurations(w)
                .into_iter()
                .filter_map(|c| c.stage)
                .collect::<Vec<_>>()
        };
        assert!(!stages(Workload::NewConn).contains(&"cache".to_string()));
        assert!(stages(Workload::Reuse(0.5)).contains(&"cache".to_string()));
    }
}
