//! Deterministic request streams and file sets for tlslab.
//!
//! This crate is for describing *what* is requested: the SPECweb96 file set
//! of seed 000 (36 files in four size classes), the deterministic bytes each
//! file holds, and the order in which a client walks its targets. Given the
//! same inputs and seed it always yields the same stream.
//!
//! It is not for I/O or timing: engines (`tlslab-load`, `tlslab-server`)
//! take what this crate describes and put it on the wire.

pub mod specweb96;

/// Errors in workload descriptions.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A workload description is invalid.
    #[error("{0}")]
    Invalid(String),
}

/// Deterministic file contents: `len` bytes of a printable pattern that
/// depends on `name`, so two files of the same size still differ and a
/// truncated or mixed-up response is detectable.
pub fn file_bytes(name: &str, len: usize) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    // FNV-1a of the name seeds a xorshift stream.
    let mut x: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        x ^= u64::from(b);
        x = x.wrapping_mul(0x100_0000_01b3);
    }
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for i in 0..8 {
            if out.len() == len {
                break;
            }
            out.push(ALPHABET[((x >> (i * 8)) & 63) as usize]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_bytes_are_deterministic_and_distinct() {
        assert_eq!(file_bytes("a", 100), file_bytes("a", 100));
        assert_ne!(file_bytes("a", 100), file_bytes("b", 100));
        assert_eq!(file_bytes("a", 0).len(), 0);
        assert_eq!(file_bytes("a", 1001).len(), 1001);
    }
}
