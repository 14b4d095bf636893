//! `breakdown --h3`: a short run over QUIC on loopback gives every row of
//! the QUIC table, with shares that add up and point the right way. Two
//! rounds of short cells: the figures are not converged, so the checks
//! are on signs and sums, never on sizes.

use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::Version;
use tlslab_experiment::breakdown::{
    BreakdownConfig, REMAINDER_QUIC, Transport, Workload, quic_skeleton, run,
};

#[test]
fn a_short_quic_breakdown_has_every_row_and_shares_that_add_up() {
    let cfg = BreakdownConfig {
        workload: Workload::NewConn,
        file_size: 1024,
        version: Version::Tls13,
        key: KeyType::EcdsaP256,
        cell: Duration::from_millis(400),
        clients: 4,
        repeats: 2,
        // Two rounds, then the cap stops it.
        max_time: Duration::from_secs(1),
        target_ci95: 0.02,
        transport: Transport::Quic,
    };
    let r = run(&cfg, |line| eprintln!("{line}")).expect("the QUIC breakdown runs");
    assert_eq!(r.transport, "quic");
    assert_eq!(r.rounds, 2);
    // Every ablated cell served requests (an empty cell is an error), so
    // client and server agreed on every ablation.
    for name in [
        "TLS (baseline)",
        "no signatures",
        "no key exchange",
        "no packet protection",
        "no header protection",
        "no QUIC key schedule",
        "QUIC skeleton",
    ] {
        let row = r.row(name).unwrap_or_else(|| panic!("no row {name}"));
        assert!(row.cpu_us.iter().all(|c| *c > 0.0), "{row:?}");
    }
    let stages: Vec<&str> = r.shares.iter().map(|s| s.stage.as_str()).collect();
    for s in [
        "sig",
        "kx",
        "hash",
        "rng",
        "quic-packet",
        "quic-header",
        "quic-keys",
        "other TLS",
        "TLS protocol",
        REMAINDER_QUIC,
    ] {
        assert!(stages.contains(&s), "no share {s} in {stages:?}");
    }
    for s in &r.shares {
        assert!(s.fraction.is_finite() && s.fraction.abs() < 1.0, "{s:?}");
    }
    let total: f64 = r.shares.iter().map(|s| s.fraction).sum();
    assert!((total - 1.0).abs() < 1e-6, "shares sum to {total}");
    // With every crypto stage a no-op the server works less (paired with
    // the baseline beside it, so the machine's other load cancels).
    let skel = r.row("QUIC skeleton").unwrap();
    assert!(skel.fraction_removed > 0.0, "{skel:?}");
    // rustls's handshake calls and quinn + h3 both take time.
    assert!(r.share("TLS protocol").unwrap().fraction > 0.0);
    assert!(r.share(REMAINDER_QUIC).unwrap().fraction > 0.0);
    // The meter saw packet and header protection in the baseline cells;
    // it cannot isolate QUIC's key schedule.
    let meter = |s: &str| r.share(s).unwrap().meter_fraction;
    assert!(meter("quic-packet").is_some_and(|m| m > 0.0));
    assert!(meter("quic-header").is_some_and(|m| m > 0.0));
    assert_eq!(meter("quic-keys"), None);
    let skel_set = skel.config.ablation.clone().unwrap();
    assert_eq!(skel_set.len(), quic_skeleton().iter().count());
}
