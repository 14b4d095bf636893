//! Criterion benches of each primitive a TLS server uses, through the
//! rustls provider API, unmetered (the aws-lc-rs provider as tlslab builds
//! it) and metered (the same wrapped by `meter::metered`), plus the meter's
//! own cost per record.
//!
//! Run: `cargo bench -p tlslab-crypto --bench primitives -- --warm-up-time 1 --measurement-time 2`

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rustls::crypto::CryptoProvider;
use rustls::crypto::cipher::{AeadKey, Iv, OutboundChunks, OutboundPlainMessage};
use rustls::{ContentType, ProtocolVersion, SignatureScheme, SupportedCipherSuite};
use tlslab_crypto::meter::{self, Meter};
use tlslab_crypto::pki::{self, KeyType};
use tlslab_crypto::provider::{self, Algorithms, Version};

fn providers() -> Vec<(&'static str, CryptoProvider)> {
    let base = || {
        Arc::unwrap_or_clone(
            provider::build(&[Version::Tls12, Version::Tls13], &Algorithms::default())
                .expect("default provider"),
        )
    };
    vec![
        ("unmetered", base()),
        ("metered", meter::metered(base(), Meter::new())),
    ]
}

/// The subjectPublicKey bits of a DER SubjectPublicKeyInfo, which is what
/// webpki's verification algorithms take.
fn spki_key_bits(spki: &[u8]) -> Vec<u8> {
    fn tlv(d: &[u8]) -> (usize, usize) {
        // (header length, content length)
        let l = d[1] as usize;
        if l < 0x80 {
            (2, l)
        } else {
            let n = l & 0x7f;
            let mut len = 0usize;
            for b in &d[2..2 + n] {
                len = (len << 8) | *b as usize;
            }
            (2 + n, len)
        }
    }
    let (h, _) = tlv(spki);
    let inner = &spki[h..];
    let (ah, al) = tlv(inner);
    let bits = &inner[ah + al..];
    let (bh, bl) = tlv(bits);
    bits[bh + 1..bh + bl].to_vec()
}

/// A fresh `kt` key loaded by `p`, and its signer for `scheme`.
fn signer(
    p: &CryptoProvider,
    kt: KeyType,
    scheme: SignatureScheme,
) -> (
    Arc<dyn rustls::sign::SigningKey>,
    Box<dyn rustls::sign::Signer>,
) {
    let g = pki::generate(kt, &[]).expect("key generation");
    let key = p
        .key_provider
        .load_private_key(g.key_der().expect("key"))
        .expect("load key");
    let signer = key.choose_scheme(&[scheme]).expect("scheme");
    (key, signer)
}

fn sign_verify(c: &mut Criterion) {
    let msg = [0x42u8; 130]; // about the size of a TLS 1.3 CertificateVerify input
    let keys = [
        (KeyType::EcdsaP256, SignatureScheme::ECDSA_NISTP256_SHA256),
        (KeyType::EcdsaP384, SignatureScheme::ECDSA_NISTP384_SHA384),
        (KeyType::Ed25519, SignatureScheme::ED25519),
        (KeyType::Rsa2048, SignatureScheme::RSA_PSS_SHA256),
        (KeyType::Rsa2048, SignatureScheme::RSA_PKCS1_SHA256),
    ];
    let mut sign = c.benchmark_group("sign");
    for (name, p) in providers() {
        for (kt, scheme) in keys {
            let (_, signer) = signer(&p, kt, scheme);
            sign.bench_function(BenchmarkId::new(name, format!("{scheme:?}")), |b| {
                b.iter(|| signer.sign(black_box(&msg)).expect("sign"))
            });
        }
    }
    sign.finish();
    let mut verify = c.benchmark_group("verify");
    for (name, p) in providers() {
        for (kt, scheme) in keys {
            let (key, signer) = signer(&p, kt, scheme);
            let sig = signer.sign(&msg).expect("sign");
            let pk = spki_key_bits(key.public_key().expect("public key").as_ref());
            let alg = p
                .signature_verification_algorithms
                .mapping
                .iter()
                .find(|(s, _)| *s == scheme)
                .expect("verification algorithm")
                .1[0];
            alg.verify_signature(&pk, &msg, &sig)
                .expect("signature verifies");
            verify.bench_function(BenchmarkId::new(name, format!("{scheme:?}")), |b| {
                b.iter(|| {
                    alg.verify_signature(&pk, black_box(&msg), &sig)
                        .expect("verify")
                })
            });
        }
    }
    verify.finish();
}

fn kx(c: &mut Criterion) {
    let mut g = c.benchmark_group("kx_client_start_server_complete_client_complete");
    for (name, p) in providers() {
        for group in &p.kx_groups {
            g.bench_function(
                BenchmarkId::new(name, provider::group_name(group.name())),
                |b| {
                    b.iter(|| {
                        let client = group.start().expect("start");
                        let server = group.start_and_complete(client.pub_key()).expect("server");
                        client.complete(&server.pub_key).expect("complete")
                    })
                },
            );
        }
    }
    g.finish();
    // The server's share alone (what a server pays per full handshake):
    // its key generation and the agreement with the client's share.
    let mut g = c.benchmark_group("kx_server_start_and_complete");
    for (name, p) in providers() {
        for group in &p.kx_groups {
            let client = group.start().expect("start");
            let peer = client.pub_key().to_vec();
            g.bench_function(
                BenchmarkId::new(name, provider::group_name(group.name())),
                |b| b.iter(|| group.start_and_complete(black_box(&peer)).expect("server")),
            );
        }
    }
    g.finish();
}

fn aead(c: &mut Criterion) {
    let data = vec![0x61u8; 16 * 1024];
    let mut g = c.benchmark_group("aead_seal_16KiB");
    g.throughput(Throughput::Bytes(data.len() as u64));
    for (name, p) in providers() {
        for s in &p.cipher_suites {
            // Only 32-byte-key suites: rustls offers no public way to make
            // a 16-byte AeadKey (AES-128 is measured in the handshake bench).
            let SupportedCipherSuite::Tls13(t) = s else {
                continue;
            };
            if t.aead_alg.key_len() != 32 {
                continue;
            }
            let mut enc = t
                .aead_alg
                .encrypter(AeadKey::from([7u8; 32]), Iv::new([1u8; 12]));
            let mut seq = 0u64;
            g.bench_function(BenchmarkId::new(name, provider::suite_name(*s)), |b| {
                b.iter(|| {
                    // aws-lc's TLS 1.3 GCM key wants sequence numbers
                    // from 0, strictly increasing, as on a connection.
                    let msg = OutboundPlainMessage {
                        typ: ContentType::ApplicationData,
                        version: ProtocolVersion::TLSv1_2,
                        payload: OutboundChunks::Single(&data),
                    };
                    let r = enc.encrypt(msg, seq).expect("seal");
                    seq += 1;
                    r
                })
            });
        }
    }
    g.finish();
}

fn hash(c: &mut Criterion) {
    let data = vec![0x61u8; 16 * 1024];
    let mut g = c.benchmark_group("hash_16KiB");
    g.throughput(Throughput::Bytes(data.len() as u64));
    for (name, p) in providers() {
        let mut seen = Vec::new();
        for s in &p.cipher_suites {
            let h = match s {
                SupportedCipherSuite::Tls13(t) => t.common.hash_provider,
                SupportedCipherSuite::Tls12(t) => t.common.hash_provider,
            };
            let alg = format!("{:?}", h.algorithm());
            if seen.contains(&alg) {
                continue;
            }
            seen.push(alg.clone());
            g.bench_function(BenchmarkId::new(name, alg), |b| {
                b.iter(|| h.hash(black_box(&data)))
            });
        }
    }
    g.finish();
}

fn random(c: &mut Criterion) {
    let mut g = c.benchmark_group("random_32B");
    for (name, p) in providers() {
        let mut buf = [0u8; 32];
        g.bench_function(name, |b| {
            b.iter(|| p.secure_random.fill(black_box(&mut buf)).expect("random"))
        });
    }
    g.finish();
}

fn meter_overhead(c: &mut Criterion) {
    c.bench_function("meter_self_overhead_per_record_x1000", |b| {
        b.iter(|| meter::self_overhead_n(1000))
    });
}

criterion_group!(benches, sign_verify, kx, aead, hash, random, meter_overhead);
criterion_main!(benches);
