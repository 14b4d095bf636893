//! Fails when the vendored quinn-proto patch (vendor/README.md: a run of
//! PADDING is read as one frame) is not in the build, for example after a
//! `cargo update` or a `[patch.crates-io]` edit that brought back the
//! crates.io quinn-proto (then `tlslab_frames_in` does not exist and this
//! does not compile), or a re-vendoring that kept the helper and lost the
//! hunk (then the padding counts a frame a byte).

/// A client Initial's payload as QUIC pads it: a PING, then padding to
/// the 1,200-byte datagram, then another PING.
fn padded(padding: usize) -> Vec<u8> {
    let mut p = vec![0x01];
    p.extend(std::iter::repeat_n(0u8, padding));
    p.push(0x01);
    p
}

#[test]
fn a_run_of_padding_is_one_frame() {
    // PING, one PADDING frame for the whole run, PING.
    assert_eq!(quinn_proto::tlslab_frames_in(&padded(1_000)), 3);
    assert_eq!(quinn_proto::tlslab_frames_in(&padded(1)), 3);
    // Padding to the end of the payload is one frame too.
    assert_eq!(quinn_proto::tlslab_frames_in(&[0x01, 0, 0, 0]), 2);
    assert_eq!(quinn_proto::tlslab_frames_in(&[0; 1_200]), 1);
    // What follows the run is still decoded, and an empty payload is no
    // packet at all.
    assert_eq!(quinn_proto::tlslab_frames_in(&[]), 0);
}
