//! Post-quantum certificates and RFC 8879 certificate compression,
//! tlslab against tlslab on 127.0.0.1 (Debian's OpenSSL 3.0 can do neither
//! ML-DSA nor certificate compression).

mod common;
use common::*;

use tlslab_crypto::compress::CertCompression;
use tlslab_crypto::meter::Op;
use tlslab_crypto::pki::{self, Generated, KeyType};
use tlslab_crypto::provider::Version;
use tlslab_load::LoadConfig;
use tlslab_server::{CertSource, Content, ServeConfig, Server, TlsSettings};
use tlslab_stats::LoadReport;

/// A TLS 1.3 server with the chain `leaf` under `mid`, compressing with
/// `comp`.
fn server(leaf: KeyType, mid: Option<KeyType>, comp: &[CertCompression]) -> (Server, Generated) {
    let g = pki::generate_chain(leaf, mid, &[]).unwrap();
    let mut tls = TlsSettings::new(CertSource::Generated(g.clone()));
    tls.versions = vec![Version::Tls13];
    tls.cert_compression = comp.to_vec();
    let mut cfg = ServeConfig::new(loopback(), Content::Empty, tls);
    cfg.threads = 1;
    (Server::start(cfg).unwrap(), g)
}

fn run(srv: &Server, g: &Generated, tweak: impl FnOnce(&mut LoadConfig)) -> LoadReport {
    let mut cfg = config(vec![https(srv, "/bytes/100")], g);
    cfg.requests = Some(6);
    cfg.clients = 2;
    tweak(&mut cfg);
    let report = tlslab_load::run(&cfg).unwrap();
    assert_eq!(report.requests.succeeded, 6, "{:?}", report.errors);
    assert_eq!(report.handshake.full.count, 6);
    report
}

#[test]
fn ml_dsa_44_chain_handshakes_and_the_server_meter_counts_ml_dsa_signatures() {
    let (srv, g) = server(KeyType::MlDsa44, Some(KeyType::MlDsa44), &[]);
    let before = srv.crypto_snapshot();
    let report = run(&srv, &g, |c| c.mss = Some(1460));
    let d = srv.crypto_snapshot().diff(&before);
    let sign = d.get(Op::Sign, "mldsa44").unwrap();
    assert_eq!(sign.calls, 6, "{d:?}");
    assert!(sign.nanos > 0);
    assert_eq!(d.get(Op::Sign, "other").unwrap().calls, 0);
    let full = &report.handshake.full;
    // Two ML-DSA-44 certificates: each a 1,312-byte key and a 2,420-byte
    // signature at least.
    let cert = full.cert_bytes_mean.unwrap();
    assert!(cert > 2.0 * (1312.0 + 2420.0), "{cert}");
    // The server's flight: its bytes in 1460-byte segments, measured.
    let segs = full.data_segs_in_mean.unwrap();
    let bytes_in = full.bytes_in_mean.unwrap();
    assert!(
        segs >= (bytes_in / 1460.0).floor(),
        "{segs} segments for {bytes_in} B"
    );
    assert!(full.rcv_mss_mean.unwrap() <= 1460.0);
    assert!(full.records_in_mean.unwrap() >= 2.0);
    assert!(full.records_out_mean.unwrap() >= 2.0);
    assert_eq!(full.cert_compressed_count, 0);
    // One round trip, although the flight arrives in several reads and the
    // client sends its CCS after the first.
    assert_eq!(full.round_trips_mean, Some(1.0));
    srv.shutdown();
}

#[test]
fn mixed_chain_ml_dsa_leaf_under_ecdsa_intermediate() {
    let (srv, g) = server(KeyType::MlDsa44, Some(KeyType::EcdsaP256), &[]);
    let before = srv.crypto_snapshot();
    let report = run(&srv, &g, |_| {});
    let d = srv.crypto_snapshot().diff(&before);
    assert_eq!(d.get(Op::Sign, "mldsa44").unwrap().calls, 6, "{d:?}");
    // The leaf's ML-DSA key and the intermediate's ECDSA signature on it,
    // then the intermediate's ECDSA key and the root's ECDSA signature:
    // much smaller than two ML-DSA certificates.
    let cert = report.handshake.full.cert_bytes_mean.unwrap();
    assert!(cert > 1312.0 && cert < 2.0 * (1312.0 + 2420.0), "{cert}");
    srv.shutdown();
}

#[test]
fn brotli_compression_shrinks_the_certificate_only_when_both_sides_use_it() {
    let (srv, g) = server(
        KeyType::EcdsaP256,
        Some(KeyType::EcdsaP256),
        &[CertCompression::Brotli],
    );
    let plain = run(&srv, &g, |_| {});
    assert_eq!(plain.handshake.full.cert_compressed_count, 0);
    let comp = run(&srv, &g, |c| {
        c.cert_compression = vec![CertCompression::Zlib, CertCompression::Brotli]
    });
    let full = &comp.handshake.full;
    assert_eq!(full.cert_compressed_count, 6);
    let (c, u) = (
        full.cert_compressed_bytes_mean.unwrap(),
        full.cert_bytes_mean.unwrap(),
    );
    assert!(c < u, "compressed {c} B, uncompressed {u} B");
    assert_eq!(u, plain.handshake.full.cert_bytes_mean.unwrap());
    assert!(full.cert_compression_ratio.unwrap() < 1.0);
    // The handshake shrank by at least what the certificate did, less the
    // CompressedCertificate message's framing.
    let saved = plain.handshake.full.bytes_in_mean.unwrap() - full.bytes_in_mean.unwrap();
    assert!(saved >= u - c - 16.0, "saved {saved} B of {} B", u - c);
    srv.shutdown();
}
