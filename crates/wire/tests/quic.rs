//! The QUIC parsers (`tlslab_wire::quic`) under property tests: the fuzz
//! entry on random bytes, on Initial-shaped datagrams, and on payloads of
//! CRYPTO frames split and shuffled, which must reassemble to the bytes
//! they carry whatever the order.

use std::time::Instant;

use proptest::prelude::*;
use tlslab_wire::quic::{AssemblerLimits, HelloAssembler};

/// CRYPTO frames carrying `msg` in pieces cut at `cuts`, one payload each.
fn payloads(msg: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (msg.len() + 1)).collect();
    at.push(0);
    at.push(msg.len());
    at.sort_unstable();
    at.dedup();
    at.windows(2)
        .map(|w| {
            let mut p = vec![0x01, 0x06];
            for v in [w[0] as u64, (w[1] - w[0]) as u64] {
                p.extend((0x4000u16 | v as u16).to_be_bytes());
            }
            p.extend(&msg[w[0]..w[1]]);
            p.extend([0u8; 7]);
            p
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2500)) {
        tlslab_wire::fuzz_quic_entry(&data);
    }

    #[test]
    fn initial_shaped_datagrams_never_panic(
        dcid in proptest::collection::vec(any::<u8>(), 0..24),
        rest in proptest::collection::vec(any::<u8>(), 0..1300),
        v2 in any::<bool>(),
    ) {
        let mut d = vec![if v2 { 0xd3 } else { 0xc3 }];
        d.extend(if v2 { [0x6b, 0x33, 0x43, 0xcf] } else { [0, 0, 0, 1] });
        d.push(dcid.len() as u8);
        d.extend(&dcid);
        d.extend(&rest);
        tlslab_wire::fuzz_quic_entry(&d);
    }

    #[test]
    fn a_hello_in_any_order_of_pieces_reassembles(
        body in proptest::collection::vec(any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
        order in any::<u64>(),
    ) {
        let mut msg = vec![1u8];
        msg.extend(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend(&body);
        let mut ps = payloads(&msg, &cuts);
        let n = ps.len();
        ps.rotate_left((order as usize) % n);
        let mut a = HelloAssembler::new(AssemblerLimits::default());
        let now = Instant::now();
        let mut got = None;
        for (i, p) in ps.iter().enumerate() {
            tlslab_wire::fuzz_quic_entry(p);
            let r = a.push(b"dcid", p, now).unwrap();
            if i + 1 < n {
                prop_assert!(r.is_none());
            } else {
                got = r;
            }
        }
        prop_assert_eq!(got, Some(msg));
        prop_assert!(a.is_empty());
    }
}
