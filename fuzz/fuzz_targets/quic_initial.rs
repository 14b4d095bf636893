#![no_main]
// A client's QUIC datagram: the wire parsers (long header, coalesced
// packets, CRYPTO frames, the ClientHello reassembler) with their
// invariants, then the whole Initial reader with its decryption.
libfuzzer_sys::fuzz_target!(|d: &[u8]| {
    tlslab_wire::fuzz_quic_entry(d);
    let mut r = tlslab_crypto::quic::HelloReader::new(Default::default());
    let _ = r.push(d, std::time::Instant::now());
});
