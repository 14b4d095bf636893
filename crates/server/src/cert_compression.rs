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
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
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

/// The counts as `tlslab_cert_compression_*` counters by algorithm.
#[derive(Debug)]
pub(crate) struct CompressionCollector(pub(crate) Arc<CompressionStats>);

impl Collector for CompressionCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        if self.0.0.is_empty() {
            return Ok(());
        }
        type Field = fn(&AlgorithmCounts) -> &AtomicU64;
        let all: [(&str, &str, Field); 3] = [
            (
                "tlslab_cert_compression_handshakes",
                "Handshakes whose certificate was sent compressed (RFC 8879), by algorithm, over TCP and QUIC.",
                |a| &a.handshakes,
            ),
            (
                "tlslab_cert_compression_uncompressed_bytes",
                "Bytes of the certificate messages those handshakes would have sent uncompressed, by algorithm.",
                |a| &a.uncompressed,
            ),
            (
                "tlslab_cert_compression_compressed_bytes",
                "Bytes of compressed certificate data those handshakes sent, by algorithm.",
                |a| &a.compressed,
            ),
        ];
        for (name, help, field) in all {
            crate::metrics::labelled_counter(
                &mut enc,
                name,
                help,
                self.0.0.iter().map(|a| {
                    (
                        vec![("algorithm", a.algorithm.name().to_string())],
                        field(a).load(Ordering::Relaxed),
                    )
                }),
            )?;
        }
        Ok(())
    }
}
