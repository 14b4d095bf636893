//! The suite's QUIC algorithm, metered: packet protection
//! ([`Op::QuicSeal`], [`Op::QuicOpen`]) and header protection
//! ([`Op::QuicHeader`]) of every packet quinn sends and receives.

use std::sync::Arc;
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

struct MeteredQuic {
    inner: &'static dyn Algorithm,
    meter: Arc<Meter>,
}

impl Algorithm for MeteredQuic {
    fn packet_key(&self, key: AeadKey, iv: Iv) -> Box<dyn PacketKey> {
        Box::new(MeteredPacketKey {
            inner: self.inner.packet_key(key, iv),
            meter: self.meter.clone(),
        })
    }
    fn header_protection_key(&self, key: AeadKey) -> Box<dyn HeaderProtectionKey> {
        Box::new(MeteredHeaderKey {
            inner: self.inner.header_protection_key(key),
            meter: self.meter.clone(),
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
}

impl PacketKey for MeteredPacketKey {
    fn encrypt_in_place(
        &self,
        packet_number: u64,
        header: &[u8],
        payload: &mut [u8],
    ) -> Result<Tag, Error> {
        let t = Instant::now();
        let len = payload.len();
        let r = self.inner.encrypt_in_place(packet_number, header, payload);
        self.meter.record(Op::QuicSeal, 0, len, t);
        r
    }
    fn decrypt_in_place<'a>(
        &self,
        packet_number: u64,
        header: &[u8],
        payload: &'a mut [u8],
    ) -> Result<&'a [u8], Error> {
        let t = Instant::now();
        let len = payload.len();
        let r = self.inner.decrypt_in_place(packet_number, header, payload);
        self.meter.record(Op::QuicOpen, 0, len, t);
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
}

impl HeaderProtectionKey for MeteredHeaderKey {
    fn encrypt_in_place(
        &self,
        sample: &[u8],
        first: &mut u8,
        packet_number: &mut [u8],
    ) -> Result<(), Error> {
        let t = Instant::now();
        let r = self.inner.encrypt_in_place(sample, first, packet_number);
        self.meter.record(Op::QuicHeader, 0, 0, t);
        r
    }
    fn decrypt_in_place(
        &self,
        sample: &[u8],
        first: &mut u8,
        packet_number: &mut [u8],
    ) -> Result<(), Error> {
        let t = Instant::now();
        let r = self.inner.decrypt_in_place(sample, first, packet_number);
        self.meter.record(Op::QuicHeader, 0, 0, t);
        r
    }
    fn sample_len(&self) -> usize {
        self.inner.sample_len()
    }
}
