//! The metering crypto provider: counts calls, nanoseconds and bytes for
//! every cryptographic operation rustls asks of its `CryptoProvider`, and
//! (in [`ablate`]) replaces one stage at a time with a no-op of the same
//! message size, after the methodology of seed 001 (a stage's share of the
//! cost is `1 - 1/speedup` when removing it speeds the server up).
//!
//! Like [`crate::provider`], this module tree touches rustls's provider API
//! directly; rustls 0.24 changes that API, so keep such code here.
//!
//! - [`Meter`]: the shared, sharded counter table (one per process side).
//! - [`Snapshot`]: a serialisable copy of it, with [`Snapshot::diff`].
//! - [`metered`]: wraps every component of a provider so it records into a
//!   meter. [`MeteredStore`] and [`MeteredTicketer`] do the same for the
//!   server's session cache and ticketer.
//! - [`self_overhead`]: what one recorded operation costs the meter itself.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustls::{NamedGroup, SignatureScheme};

pub mod ablate;
pub mod mem;
mod quic;
mod stores;
mod wrap;

pub use ablate::{Ablation, AblationSet, ablated, mismatch_hint};
pub use stores::{MeteredStore, MeteredTicketer};
pub use wrap::metered;

/// A kind of cryptographic operation the meter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Op {
    /// Producing a signature (label: the signature scheme).
    Sign,
    /// Verifying a signature, in the handshake or a certificate chain
    /// (label: the scheme the verification algorithm serves).
    Verify,
    /// Starting a key exchange: making our key share (label: the group).
    KxStart,
    /// Completing a key exchange with the peer's share (label: the group).
    KxComplete,
    /// The fused server-side start-and-complete of TLS 1.3 (and KEM
    /// encapsulation for hybrid groups), which rustls does not split.
    KxStartAndComplete,
    /// Encrypting a handshake record (bytes: plaintext length).
    SealHandshake,
    /// Encrypting an application-data record (bytes: plaintext length).
    SealApplication,
    /// Decrypting a record that turned out to be a handshake (or alert,
    /// change-cipher-spec) record (bytes: ciphertext payload length).
    OpenHandshake,
    /// Decrypting an application-data record (bytes: ciphertext length).
    OpenApplication,
    /// HKDF-Extract (TLS 1.3) or the master-secret PRF (TLS 1.2).
    Extract,
    /// HKDF-Expand (TLS 1.3) or the key-block/finished PRF (TLS 1.2)
    /// (bytes: output length).
    Expand,
    /// The TLS 1.3 Finished HMAC (bytes: message length).
    Hmac,
    /// Hashing (one-shot, update or finish; bytes: input length).
    Hash,
    /// Filling a buffer with random bytes (bytes: buffer length).
    Random,
    /// Sealing a session ticket (bytes: plaintext length).
    TicketSeal,
    /// Opening a session ticket (bytes: ticket length).
    TicketOpen,
    /// Looking a session up in the server store (`get` or `take`).
    StoreGet,
    /// Storing a session in the server store.
    StorePut,
    /// Protecting a QUIC packet (bytes: payload length).
    QuicSeal,
    /// Removing a QUIC packet's protection (bytes: payload length, tag
    /// included).
    QuicOpen,
    /// Applying or removing QUIC header protection (one mask).
    QuicHeader,
    /// Thread CPU time inside rustls's QUIC handshake calls (reading and
    /// writing CRYPTO data; the crypto inside them included), as the QUIC
    /// listener records it with [`Meter::record_took`] (CPU, not wall,
    /// time: a thread preempted inside a call is not billed for the wait).
    QuicTls,
}

impl Op {
    /// Every operation, in table order.
    pub const ALL: [Op; 22] = [
        Op::Sign,
        Op::Verify,
        Op::KxStart,
        Op::KxComplete,
        Op::KxStartAndComplete,
        Op::SealHandshake,
        Op::SealApplication,
        Op::OpenHandshake,
        Op::OpenApplication,
        Op::Extract,
        Op::Expand,
        Op::Hmac,
        Op::Hash,
        Op::Random,
        Op::TicketSeal,
        Op::TicketOpen,
        Op::StoreGet,
        Op::StorePut,
        Op::QuicSeal,
        Op::QuicOpen,
        Op::QuicHeader,
        Op::QuicTls,
    ];

    /// The name used in reports and JSON (`kx_start`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Sign => "sign",
            Op::Verify => "verify",
            Op::KxStart => "kx_start",
            Op::KxComplete => "kx_complete",
            Op::KxStartAndComplete => "kx_start_and_complete",
            Op::SealHandshake => "seal_handshake",
            Op::SealApplication => "seal_application",
            Op::OpenHandshake => "open_handshake",
            Op::OpenApplication => "open_application",
            Op::Extract => "extract",
            Op::Expand => "expand",
            Op::Hmac => "hmac",
            Op::Hash => "hash",
            Op::Random => "random",
            Op::TicketSeal => "ticket_seal",
            Op::TicketOpen => "ticket_open",
            Op::StoreGet => "store_get",
            Op::StorePut => "store_put",
            Op::QuicSeal => "quic_seal",
            Op::QuicOpen => "quic_open",
            Op::QuicHeader => "quic_header",
            Op::QuicTls => "quic_tls",
        }
    }

    fn labels(self) -> &'static [&'static str] {
        match self {
            Op::Sign | Op::Verify => SCHEME_LABELS,
            Op::KxStart | Op::KxComplete | Op::KxStartAndComplete => GROUP_LABELS,
            _ => &[""],
        }
    }
}

pub(crate) const SCHEMES: [SignatureScheme; 14] = [
    SignatureScheme::RSA_PKCS1_SHA256,
    SignatureScheme::RSA_PKCS1_SHA384,
    SignatureScheme::RSA_PKCS1_SHA512,
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA512,
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::ECDSA_NISTP384_SHA384,
    SignatureScheme::ECDSA_NISTP521_SHA512,
    SignatureScheme::ED25519,
    SignatureScheme::ED448,
    SignatureScheme::ML_DSA_44,
    SignatureScheme::ML_DSA_65,
    SignatureScheme::ML_DSA_87,
];

const SCHEME_LABELS: &[&str] = &[
    "rsa_pkcs1_sha256",
    "rsa_pkcs1_sha384",
    "rsa_pkcs1_sha512",
    "rsa_pss_rsae_sha256",
    "rsa_pss_rsae_sha384",
    "rsa_pss_rsae_sha512",
    "ecdsa_secp256r1_sha256",
    "ecdsa_secp384r1_sha384",
    "ecdsa_secp521r1_sha512",
    "ed25519",
    "ed448",
    "mldsa44",
    "mldsa65",
    "mldsa87",
    "other",
];

const GROUPS: [NamedGroup; 7] = [
    NamedGroup::X25519,
    NamedGroup::secp256r1,
    NamedGroup::secp384r1,
    NamedGroup::secp521r1,
    NamedGroup::X25519MLKEM768,
    NamedGroup::secp256r1MLKEM768,
    NamedGroup::MLKEM768,
];

const GROUP_LABELS: &[&str] = &[
    "x25519",
    "secp256r1",
    "secp384r1",
    "secp521r1",
    "X25519MLKEM768",
    "secp256r1MLKEM768",
    "MLKEM768",
    "private",
    "other",
];

/// The label index of a signature scheme (the last index is "other").
pub(crate) fn scheme_label(s: SignatureScheme) -> u8 {
    SCHEMES
        .iter()
        .position(|x| *x == s)
        .unwrap_or(SCHEMES.len()) as u8
}

/// The label index of a key-exchange group. Private-use code points
/// (0xFE00..=0xFEFF, used by the kx ablation) get the "private" label.
pub(crate) fn group_label(g: NamedGroup) -> u8 {
    if let Some(i) = GROUPS.iter().position(|x| *x == g) {
        return i as u8;
    }
    if u16::from(g) >> 8 == 0xFE {
        GROUPS.len() as u8
    } else {
        GROUPS.len() as u8 + 1
    }
}

/// Offsets of each op's first cell in the flat table, and the table size.
const fn layout() -> ([usize; Op::ALL.len()], usize) {
    let mut offs = [0usize; Op::ALL.len()];
    let mut i = 0;
    let mut n = 0;
    while i < Op::ALL.len() {
        offs[i] = n;
        n += match Op::ALL[i] {
            Op::Sign | Op::Verify => SCHEME_LABELS.len(),
            Op::KxStart | Op::KxComplete | Op::KxStartAndComplete => GROUP_LABELS.len(),
            _ => 1,
        };
        i += 1;
    }
    (offs, n)
}

const LAYOUT: ([usize; Op::ALL.len()], usize) = layout();
const CELLS: usize = LAYOUT.1;
const SHARDS: usize = 16;

#[derive(Default)]
struct Cell3 {
    calls: AtomicU64,
    nanos: AtomicU64,
    bytes: AtomicU64,
}

/// One shard of the table, on its own cache lines so threads recording
/// into different shards never share a line.
#[repr(align(128))]
struct Shard {
    cells: [Cell3; CELLS],
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            cells: std::array::from_fn(|_| Cell3::default()),
        }
    }
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SHARD: Cell<usize> = Cell::new(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
}

/// Counts calls, nanoseconds and bytes per operation kind and label.
///
/// Recording is three relaxed atomic adds into a per-thread shard (threads
/// are assigned shards round-robin), so many threads can record at once
/// without sharing cache lines. Share it as `Arc<Meter>`.
pub struct Meter {
    shards: Box<[Shard]>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("shards", &self.shards.len())
            .finish()
    }
}

impl Meter {
    /// A new meter with all counters at zero.
    pub fn new() -> Arc<Meter> {
        Arc::new(Meter {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        })
    }

    fn index(op: Op, label: u8) -> usize {
        let labels = op.labels().len();
        let label = (label as usize).min(labels - 1);
        LAYOUT.0[op as usize] + label
    }

    /// Records one call of `op` under `label` (an index from the op's label
    /// table; out-of-range means the last, "other") that began at `start`
    /// and handled `bytes` bytes.
    #[inline]
    pub(crate) fn record(&self, op: Op, label: u8, bytes: usize, start: Instant) {
        let nanos = start.elapsed().as_nanos() as u64;
        self.add(op, label, 1, nanos, bytes as u64);
    }

    /// Records one call of `op` (no label, no bytes) that took `took`:
    /// for work outside the provider that a caller times itself
    /// ([`Op::QuicTls`], in thread CPU time).
    pub fn record_took(&self, op: Op, took: Duration) {
        self.add(op, 0, 1, took.as_nanos() as u64, 0);
    }

    /// Adds raw amounts to one cell.
    #[inline]
    pub(crate) fn add(&self, op: Op, label: u8, calls: u64, nanos: u64, bytes: u64) {
        let shard = MY_SHARD.with(|s| s.get());
        let cell = &self.shards[shard].cells[Self::index(op, label)];
        cell.calls.fetch_add(calls, Ordering::Relaxed);
        cell.nanos.fetch_add(nanos, Ordering::Relaxed);
        if bytes != 0 {
            cell.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Sums the shards into a snapshot.
    pub fn snapshot(&self) -> Snapshot {
        let mut entries = Vec::with_capacity(CELLS);
        for op in Op::ALL {
            for (li, label) in op.labels().iter().enumerate() {
                let i = Self::index(op, li as u8);
                let mut s = OpStat {
                    op,
                    label,
                    calls: 0,
                    nanos: 0,
                    bytes: 0,
                };
                for shard in self.shards.iter() {
                    let c = &shard.cells[i];
                    s.calls += c.calls.load(Ordering::Relaxed);
                    s.nanos += c.nanos.load(Ordering::Relaxed);
                    s.bytes += c.bytes.load(Ordering::Relaxed);
                }
                entries.push(s);
            }
        }
        Snapshot { entries }
    }
}

/// The counters of one operation kind and label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct OpStat {
    /// The operation.
    pub op: Op,
    /// The label: a signature scheme or group name, or empty.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub label: &'static str,
    /// Number of calls.
    pub calls: u64,
    /// Total wall-clock nanoseconds spent inside the calls.
    pub nanos: u64,
    /// Total bytes handled (see each [`Op`] for which bytes).
    pub bytes: u64,
}

/// A copy of a [`Meter`]'s counters. Serialises as a list of the non-zero
/// entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    entries: Vec<OpStat>,
}

impl serde::Serialize for Snapshot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.nonzero())
    }
}

impl Snapshot {
    /// The entries with at least one call.
    pub fn nonzero(&self) -> impl Iterator<Item = &OpStat> {
        self.entries.iter().filter(|e| e.calls != 0)
    }

    /// Every entry, in table order (zeros included).
    pub fn entries(&self) -> &[OpStat] {
        &self.entries
    }

    /// What happened between `before` and this snapshot (both from the same
    /// meter). Counters never go down; a `before` taken later saturates at 0.
    pub fn diff(&self, before: &Snapshot) -> Snapshot {
        let entries = self
            .entries
            .iter()
            .zip(before.entries.iter())
            .map(|(a, b)| OpStat {
                calls: a.calls.saturating_sub(b.calls),
                nanos: a.nanos.saturating_sub(b.nanos),
                bytes: a.bytes.saturating_sub(b.bytes),
                ..*a
            })
            .collect();
        Snapshot { entries }
    }

    /// The counters of `op` summed over all labels.
    pub fn total(&self, op: Op) -> OpStat {
        let mut t = OpStat {
            op,
            label: "",
            calls: 0,
            nanos: 0,
            bytes: 0,
        };
        for e in self.entries.iter().filter(|e| e.op == op) {
            t.calls += e.calls;
            t.nanos += e.nanos;
            t.bytes += e.bytes;
        }
        t
    }

    /// The time spent in cryptographic operations: the nanoseconds of
    /// every op but the session store's ([`Op::StoreGet`], [`Op::StorePut`]:
    /// look-ups, not crypto) and [`Op::QuicTls`] (rustls's handshake calls,
    /// which hold other ops). Wall clock inside the calls, the meter's own
    /// overhead included (see [`self_overhead`]).
    pub fn crypto_time(&self) -> Duration {
        let ns = self
            .entries
            .iter()
            .filter(|e| !matches!(e.op, Op::StoreGet | Op::StorePut | Op::QuicTls))
            .map(|e| e.nanos)
            .sum();
        Duration::from_nanos(ns)
    }

    /// The counters of `op` under `label` (e.g. `"x25519"`), if that label
    /// exists for the op.
    pub fn get(&self, op: Op, label: &str) -> Option<OpStat> {
        self.entries
            .iter()
            .find(|e| e.op == op && e.label == label)
            .copied()
    }
}

/// What the meter itself costs per recorded operation: times `n` records of
/// an empty operation (a clock read before, the elapsed read and three
/// atomic adds after) into a private meter and returns the mean. Subtract
/// `calls × self_overhead()` from a run's metered time to correct for it.
pub fn self_overhead_n(n: u32) -> Duration {
    let meter = Meter::new();
    let n = n.max(1);
    let t0 = Instant::now();
    for _ in 0..n {
        let start = Instant::now();
        meter.record(Op::Hash, 0, 0, std::hint::black_box(start));
    }
    let total = t0.elapsed();
    std::hint::black_box(meter.snapshot());
    total / n
}

/// [`self_overhead_n`] with one million records (a few tens of ms).
pub fn self_overhead() -> Duration {
    self_overhead_n(1_000_000)
}

#[cfg(test)]
mod tests;
