//! The suite's QUIC algorithm, metered: packet protection
//! ([`Op::QuicSeal`], [`Op::QuicOpen`]) and header protection
//! ([`Op::QuicHeader`]) of every packet quinn sends and receives.
//!
//! Every call and byte is counted; one call in [`TIMED_EVERY`] is timed,
//! and its time counts for all of them. Timing each ~1.2 KB packet (two
//! clock reads per call, two calls per packet) cost 5.6 % of a kept-alive
//! HTTP/3 request's client CPU (`bench/load-ka-ab.sh` with `PROTO=h3`, 7
//! pairs, BENCHMARKS.md), where a TLS record over TCP carries up to 16 KB
//! per timed call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use rustls::Error;
use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::quic::{Algorithm, HeaderProtectionKey, PacketKey, Tag};

use super::{Meter, Op};

/// `inner`, recording into `meter` (leaks one small wrapper: build once
/// per provider).
pub(super) fn metered(inner: &'static dyn Algorithm, meter: &Arc<Meter>) -> &'static dyn Algorithm {
    Box::leak(Box::new(MeteredQuic {
        inner,
        meter: meter.clone(),
    }))
}

/// One call in this many is timed (a power of two).
pub(crate) const TIMED_EVERY: u32 = 8;

/// Counts a key's calls and says which to time.
#[derive(Default)]
struct Sampler(AtomicU32);

impl Sampler {
    /// The start of this call's timing, if it is one of the timed ones.
    fn start(&self) -> Option<Instant> {
        self.0
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(TIMED_EVERY)
            .then(Instant::now)
    }

    /// Records one call of `op` on `bytes`: its time, scaled, if timed.
    fn record(meter: &Meter, op: Op, bytes: usize, start: Option<Instant>) {
        let nanos = start.map_or(0, |t| {
            t.elapsed().as_nanos() as u64 * u64::from(TIMED_EVERY)
        });
        meter.add(op, 0, 1, nanos, bytes as u64);
    }
}

struct MeteredQuic {
    inner: &'static dyn Algorithm,
    meter: Arc<Meter>,
}

impl Algorithm for MeteredQuic {
    fn packet_key(&self, key: AeadKey, iv: Iv) -> Box<dyn PacketKey> {
        Box::new(MeteredPacketKey {
            inner: self.inner.packet_key(key, iv),
            meter: self.meter.clone(),
            sampler: Sampler::default(),
        })
    }
    fn header_protection_key(&self, key: AeadKey) -> Box<dyn HeaderProtectionKey> {
        Box::new(MeteredHeaderKey {
            inner: self.inner.header_protection_key(key),
            meter: self.meter.clone(),
            sampler: Sampler::default(),
        })
    }
    fn aead_key_len(&self) -> usize {
        self.inner.aead_key_len()
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

struct MeteredPacketKey {
    inner: Box<dyn PacketKey>,
    meter: Arc<Meter>,
    sampler: Sampler,
}

impl PacketKey for MeteredPacketKey {
    fn encrypt_in_place(
        &self,
        packet_number: u64,
        header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, Error> {
        let t = self.sampler.start();
        let len = payload.len();
        let r = self.inner.encrypt_in_place(packet_number, header, payload);
        Sampler::record(&self.meter, Op::QuicSeal, len, t);
        r
    }
    fn decrypt_in_place<'a>(
        &self,
        packet_number: u64,
        header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        let t = self.sampler.start();
        let len = payload.len();
        let r = self.inner.decrypt_in_place(packet_number, header, payload);
        Sampler::record(&self.meter, Op::QuicOpen, len, t);
        r
    }
    fn tag_len(&self) -> usize {
        self.inner.tag_len()
    }
    fn confidentiality_limit(&self) -> u64 {
        self.inner.confidentiality_limit()
    }
    fn integrity_limit(&self) -> u64 {
        self.inner.integrity_limit()
    }
}

struct MeteredHeaderKey {
    inner: Box<dyn HeaderProtectionKey>,
    meter: Arc<Meter>,
    sampler: Sampler,
}

impl HeaderProtectionKey for MeteredHeaderKey {
    fn encrypt_in_place(
        &self,
        sample: &[u8],
        first: &mut u8,
        packet_number: &mut [u8],
    ) -> Result<(), Error> {
        let t = self.sampler.start();
        let r = self.inner.encrypt_in_place(sample, first, packet_number);
        Sampler::record(&self.meter, Op::QuicHeader, 0, t);
        r
    }
    fn decrypt_in_place(
        &self,
        sample: &[u8],
        first: &mut u8,
        packet_number: &mut [u8],
    ) -> Result<(), Error> {
        let t = self.sampler.start();
        let r = self.inner.decrypt_in_place(sample, first, packet_number);
        Sampler::record(&self.meter, Op::QuicHeader, 0, t);
        r
    }
    fn sample_len(&self) -> usize {
        self.inner.sample_len()
    }
}
