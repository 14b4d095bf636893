//! What the server's certificate compression (RFC 8879,
//! `--cert-compression`) sends: per algorithm, the handshakes that carried
//! a compressed certificate and the certificate message's bytes before and
//! after compression, on `/metrics`.
//!
//! rustls hands its compressors only the chain to compress, and its own
//! cache of compressions calls them only on a miss. So each configured
//! compressor is wrapped in one that keeps the cache itself (the same: the
//! last four chains, compressed once at rustls's `Amortized` level, as
//! rustls's cache would) and rustls's cache is turned off: rustls then
//! asks the wrapper once per handshake that sends a compressed
//! certificate, and the wrapper counts it. The bytes sent are unchanged.
//! The TCP and QUIC listeners share the configuration, so both count.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rustls::compress::{CertCompressor, CompressionCache, CompressionFailed, CompressionLevel};
use rustls::server::ServerConfig;
use tlslab_crypto::compress::CertCompression;

/// The chains a wrapper keeps compressed (rustls's own cache keeps four).
const KEPT: usize = 4;

/// One algorithm's counts.
#[derive(Debug)]
pub(crate) struct AlgorithmCounts {
    algorithm: CertCompression,
    handshakes: AtomicU64,
    uncompressed: AtomicU64,
    compressed: AtomicU64,
}

/// The counts of every configured algorithm.
#[derive(Debug, Default)]
pub(crate) struct CompressionStats(Vec<Arc<AlgorithmCounts>>);

/// One algorithm's counts, read once (for the metrics).
pub(crate) struct AlgorithmSample {
    pub(crate) algorithm: &'static str,
    pub(crate) handshakes: u64,
    pub(crate) uncompressed: u64,
    pub(crate) compressed: u64,
}

impl CompressionStats {
    /// Every configured algorithm's counts now.
    pub(crate) fn samples(&self) -> Vec<AlgorithmSample> {
        self.0
            .iter()
            .map(|a| AlgorithmSample {
                algorithm: a.algorithm.name(),
                handshakes: a.handshakes.load(Ordering::Relaxed),
                uncompressed: a.uncompressed.load(Ordering::Relaxed),
                compressed: a.compressed.load(Ordering::Relaxed),
            })
            .collect()
    }
}

/// A chain as rustls hands it over, and its compression.
type Kept = (Vec<u8>, Arc<Vec<u8>>);

#[derive(Debug)]
struct Counting {
    inner: &'static dyn CertCompressor,
    counts: Arc<AlgorithmCounts>,
    /// (uncompressed, compressed) pairs, most recently used last.
    kept: Mutex<VecDeque<Kept>>,
}

impl CertCompressor for Counting {
    fn compress(
        &self,
        input: Vec<u8>,
        _level: CompressionLevel,
    ) -> Result<Vec<u8>, CompressionFailed> {
        let found = {
            let mut kept = self.kept.lock();
            kept.iter()
                .position(|(orig, _)| *orig == input)
                .and_then(|i| kept.remove(i))
                .inspect(|e| kept.push_back(e.clone()))
        };
        let compressed = match found {
            Some((_, c)) => c,
            None => {
                let c = Arc::new(
                    self.inner
                        .compress(input.clone(), CompressionLevel::Amortized)?,
                );
                let mut kept = self.kept.lock();
                if kept.len() == KEPT {
                    kept.pop_front();
                }
                kept.push_back((input.clone(), c.clone()));
                c
            }
        };
        let n = &self.counts;
        n.handshakes.fetch_add(1, Ordering::Relaxed);
        n.uncompressed
            .fetch_add(input.len() as u64, Ordering::Relaxed);
        n.compressed
            .fetch_add(compressed.len() as u64, Ordering::Relaxed);
        Ok(compressed.to_vec())
    }

    fn algorithm(&self) -> rustls::CertificateCompressionAlgorithm {
        self.inner.algorithm()
    }
}

/// Sets `config`'s compressors to `algs` (in preference order), each
/// counted; returns the counts. With no algorithm, none is used.
pub(crate) fn install(
    config: &mut ServerConfig,
    algs: &[CertCompression],
) -> Arc<CompressionStats> {
    let inner = tlslab_crypto::compress::compressors(algs);
    let mut stats = CompressionStats::default();
    config.cert_compressors = algs
        .iter()
        .zip(inner)
        .map(|(&algorithm, inner)| {
            let counts = Arc::new(AlgorithmCounts {
                algorithm,
                handshakes: AtomicU64::new(0),
                uncompressed: AtomicU64::new(0),
                compressed: AtomicU64::new(0),
            });
            stats.0.push(counts.clone());
            // rustls keeps `&'static` compressors: one small leak per
            // algorithm per configuration built (once per server start).
            let c: &'static Counting = Box::leak(Box::new(Counting {
                inner,
                counts,
                kept: Mutex::new(VecDeque::new()),
            }));
            c as &'static dyn CertCompressor
        })
        .collect();
    config.cert_compression_cache = Arc::new(CompressionCache::Disabled);
    Arc::new(stats)
}
