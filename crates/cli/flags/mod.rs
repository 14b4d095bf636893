//! Flag groups that several commands share, turned into engine values:
//! `--ablate`/`--insecure-ablation` (`serve`, `load`), `--cacert`/
//! `--insecure` (`load`, `probe`) and its warning, and the `--qlog` note
//! (`serve`, `load`) here; the HTTP/3 flags of `serve` and `load` ([`h3`]); `load`'s flags
//! into a plan (`load`, `sweep`, `fileset`: [`load`]); and the distributed
//! flags of `load` ([`shard`]). Commands import these, never each other.

pub mod h3;
pub mod load;
pub mod shard;

use std::path::PathBuf;

use tlslab_load::Trust;
use tlslab_runtime::qlog::QlogOptions;

use crate::usage::{bail, usage};

/// Parses `--ablate`, which needs `--insecure-ablation`.
pub fn ablation(
    spec: Option<&str>,
    confirmed: bool,
) -> anyhow::Result<tlslab_crypto::meter::AblationSet> {
    let Some(spec) = spec else {
        return Ok(tlslab_crypto::meter::AblationSet::NONE);
    };
    let set: tlslab_crypto::meter::AblationSet = spec.parse().map_err(usage)?;
    if !set.is_empty() && !confirmed {
        return bail(format!(
            "--ablate {spec} replaces TLS stages with no-ops and makes every connection insecure; \
             add --insecure-ablation to confirm"
        ));
    }
    Ok(set)
}

/// `--cacert FILE` or `--insecure` (`load`, `probe`): the roots to trust.
pub fn trust(cacert: Option<&PathBuf>, insecure: bool) -> anyhow::Result<Trust> {
    Ok(match (cacert, insecure) {
        (Some(_), true) => return bail("--cacert and --insecure contradict each other; drop one"),
        (Some(path), false) => {
            tlslab_crypto::pki::load_roots(path).map_err(usage)?;
            Trust::CaFile(path.clone())
        }
        (None, true) => Trust::Insecure,
        (None, false) => Trust::WebPki,
    })
}

/// The warning a run with `--insecure` (`load`, `probe`) prints before it
/// starts.
pub fn warn_insecure(insecure: bool) {
    if insecure {
        eprintln!(
            "tlslab: WARNING: --insecure: server certificates are NOT verified; \
             timings are valid, the connection is not authenticated"
        );
    }
}

/// The note a run with `--qlog` prints on stderr before it starts: where
/// the files go and the caps (qlog holds no secrets, but can be large).
pub fn note_qlog(cmd: &str, role: &str, q: Option<&QlogOptions>) {
    if let Some(q) = q {
        eprintln!(
            "tlslab {cmd}: qlog: one file per QUIC connection, {}/{role}-*.sqlog, at most {} \
             files and {} bytes (--qlog-max-files, --qlog-max-bytes); open them in qvis, \
             https://qvis.quictools.info",
            q.dir.display(),
            q.limits.max_files,
            q.limits.max_bytes
        );
    }
}
