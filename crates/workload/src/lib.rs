//! Deterministic request streams and file sets for tlslab.
//!
//! This crate is for describing *what* is requested, and in what order:
//!
//! - [`specweb96`]: the SPECweb96 file set of seed 000 (36 files in four
//!   size classes) and a seeded [`specweb96::Sampler`] that draws files
//!   35/50/14/1 % across the classes with Poisson popularity inside each;
//! - [`fileset`]: writing a file set (SPECweb96, or any list of sized
//!   paths) to a directory so that nginx or Apache with `root DIR` serves
//!   the same URLs;
//! - [`think`]: think-time distributions parsed from `--think-time` strings;
//! - [`ecommerce`]: the Amazon-like purchase sessions of seed 001 (pages
//!   of HTML plus inline objects, 22/78 % new and returning customers, one
//!   full TLS handshake per purchase session), configurable from TOML;
//! - [`replay`]: Common/Combined/nginx access-log parsing, proxy and
//!   request-rate filters, a per-IP replay plan and the window-bounded
//!   [`replay::Scheduler`] of seed 001 (LP − LS ≤ bound);
//! - [`input`]: bounded reads of the files users name (a capped line
//!   length, a capped file size), which every reader of a user's file in
//!   tlslab goes through.
//!
//! Given the same inputs and seed every stream is the same: all randomness
//! comes from [`rng`] (ChaCha8 seeded from a `u64`).
//!
//! It is not for network I/O, TLS or timing: engines (`tlslab-load`,
//! `tlslab-server`) take what this crate describes, put it on the wire and
//! sleep where it says. The only I/O here is reading and writing the files
//! whose paths callers pass in.

pub mod ecommerce;
pub mod fileset;
pub mod input;
pub mod replay;
pub mod specweb96;
pub mod think;

use std::path::PathBuf;

/// The random number generator every model in this crate draws from.
pub type Rng = rand_chacha::ChaCha8Rng;

/// A generator seeded from `seed` and a `stream` number, so independent
/// parts of a workload (say, browser 3 and browser 4) get independent yet
/// reproducible streams whatever order an engine asks for them in.
pub fn rng(seed: u64, stream: u64) -> Rng {
    use rand::SeedableRng;
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&stream.to_le_bytes());
    key[16..].copy_from_slice(b"tlslab-workload\0");
    Rng::from_seed(key)
}

/// Errors in workload descriptions and the files they read or write.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A workload description is invalid; the message says what and how to
    /// fix it.
    #[error("{0}")]
    Invalid(String),
    /// Reading or writing a file failed.
    #[error("cannot {action} {}: {source}; check the path exists and is accessible", path.display())]
    Io {
        /// What was being done ("read", "write", "create directory").
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file to be written exists with different contents.
    #[error(
        "{} exists with different contents; remove it, write to an empty directory, or ask to overwrite",
        path.display()
    )]
    Exists {
        /// The file that differs.
        path: PathBuf,
    },
    /// A line of an input file is invalid.
    #[error("{}:{line}: {problem}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong and how to fix it.
        problem: String,
    },
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
    use rand::Rng as _;

    #[test]
    fn file_bytes_are_deterministic_and_distinct() {
        assert_eq!(file_bytes("a", 100), file_bytes("a", 100));
        assert_ne!(file_bytes("a", 100), file_bytes("b", 100));
        assert_eq!(file_bytes("a", 0).len(), 0);
        assert_eq!(file_bytes("a", 1001).len(), 1001);
    }

    #[test]
    fn rng_streams_are_reproducible_and_independent() {
        let draws = |seed, stream| -> Vec<u64> {
            let mut r = rng(seed, stream);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let (a, b, c, d) = (draws(7, 1), draws(7, 1), draws(7, 2), draws(8, 1));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }
}
