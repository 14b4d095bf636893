//! RFC 8879 certificate compression: which algorithms a server compresses
//! its chain with and a client offers to decompress (`--cert-compression`),
//! and, on the client, the sizes of the last certificate message it
//! decompressed, so each handshake can report them.
//!
//! rustls 0.23 ships brotli and zlib (its `brotli` and `zlib` features,
//! both enabled here); it defines zstd's code point but no zstd codec, so
//! zstd is not offered. Without `--cert-compression`, tlslab offers and
//! uses none (rustls' own default with those features would be both), so
//! runs that do not ask for compression send the same bytes as before.

use std::cell::Cell;
use std::str::FromStr;

use rustls::CertificateCompressionAlgorithm;
use rustls::compress::{
    BROTLI_COMPRESSOR, BROTLI_DECOMPRESSOR, CertCompressor, CertDecompressor, DecompressionFailed,
    ZLIB_COMPRESSOR, ZLIB_DECOMPRESSOR,
};

use crate::{Error, Result};

/// A certificate compression algorithm tlslab can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CertCompression {
    /// Brotli (RFC 8879 code point 2).
    Brotli,
    /// zlib (code point 1).
    Zlib,
}

impl CertCompression {
    /// Every algorithm, in the order `--help` lists them.
    pub const ALL: [CertCompression; 2] = [CertCompression::Brotli, CertCompression::Zlib];

    /// The flag spelling (`brotli`).
    pub fn name(self) -> &'static str {
        match self {
            CertCompression::Brotli => "brotli",
            CertCompression::Zlib => "zlib",
        }
    }

    fn compressor(self) -> &'static dyn CertCompressor {
        match self {
            CertCompression::Brotli => BROTLI_COMPRESSOR,
            CertCompression::Zlib => ZLIB_COMPRESSOR,
        }
    }

    fn decompressor(self) -> &'static dyn CertDecompressor {
        match self {
            CertCompression::Brotli => &METERED_BROTLI,
            CertCompression::Zlib => &METERED_ZLIB,
        }
    }

    /// The name of a rustls algorithm (`brotli`, `zlib`, `zstd`).
    pub fn algorithm_name(a: CertificateCompressionAlgorithm) -> String {
        match a {
            CertificateCompressionAlgorithm::Brotli => "brotli".into(),
            CertificateCompressionAlgorithm::Zlib => "zlib".into(),
            CertificateCompressionAlgorithm::Zstd => "zstd".into(),
            other => format!("{other:?}"),
        }
    }
}

impl FromStr for CertCompression {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("zstd") {
            return Err(Error::Incompatible(
                "certificate compression 'zstd' is not available: rustls 0.23 has no zstd codec; \
                 use brotli or zlib"
                    .into(),
            ));
        }
        CertCompression::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| Error::UnknownName {
                what: "certificate compression",
                name: s.into(),
                choices: format!(
                    "none, {}",
                    CertCompression::ALL.map(|c| c.name()).join(", ")
                ),
            })
    }
}

/// Parses `--cert-compression`: `none`, or algorithms comma separated in
/// preference order (`brotli,zlib`). Empty means none.
pub fn parse_list(s: &str) -> Result<Vec<CertCompression>> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut out: Vec<CertCompression> = Vec::new();
    for part in s.split(',') {
        if part.trim().eq_ignore_ascii_case("none") {
            return Err(Error::Incompatible(
                "certificate compression 'none' cannot be combined with an algorithm; \
                 give either none or a list such as brotli,zlib"
                    .into(),
            ));
        }
        let c: CertCompression = part.parse()?;
        if !out.contains(&c) {
            out.push(c);
        }
    }
    Ok(out)
}

/// The server's compressors for `algs` (in preference order).
pub fn compressors(algs: &[CertCompression]) -> Vec<&'static dyn CertCompressor> {
    algs.iter().map(|a| a.compressor()).collect()
}

/// The client's decompressors for `algs`: rustls' own, wrapped so each
/// decompression is noted for [`take_last_decompression`].
pub fn decompressors(algs: &[CertCompression]) -> Vec<&'static dyn CertDecompressor> {
    algs.iter().map(|a| a.decompressor()).collect()
}

/// What one decompression of a server's certificate message saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decompression {
    /// The algorithm.
    pub algorithm: CertificateCompressionAlgorithm,
    /// Bytes of compressed certificate message (the compressed data, without
    /// the CompressedCertificate message's 8 bytes of framing).
    pub compressed: usize,
    /// Bytes of the Certificate message body it decompressed to.
    pub uncompressed: usize,
}

thread_local! {
    static LAST: Cell<Option<Decompression>> = const { Cell::new(None) };
}

/// Takes (and clears) the last decompression noted on this thread.
///
/// rustls decompresses inside the call that processes the received
/// handshake bytes, on the thread that polls the connection. A caller that
/// clears this before polling one connection and takes it right after
/// therefore gets that connection's decompression, whatever else the
/// thread runs between polls.
pub fn take_last_decompression() -> Option<Decompression> {
    LAST.with(|l| l.take())
}

#[derive(Debug)]
struct Noting(&'static dyn CertDecompressor);

static METERED_BROTLI: Noting = Noting(BROTLI_DECOMPRESSOR);
static METERED_ZLIB: Noting = Noting(ZLIB_DECOMPRESSOR);

impl CertDecompressor for Noting {
    fn decompress(
        &self,
        input: &[u8],
        output: &mut [u8],
    ) -> std::result::Result<(), DecompressionFailed> {
        let r = self.0.decompress(input, output);
        if r.is_ok() {
            LAST.with(|l| {
                l.set(Some(Decompression {
                    algorithm: self.0.algorithm(),
                    compressed: input.len(),
                    uncompressed: output.len(),
                }))
            });
        }
        r
    }

    fn algorithm(&self) -> CertificateCompressionAlgorithm {
        self.0.algorithm()
    }
}

/// The length of a TLS 1.3 Certificate message body carrying `chain` with
/// an empty request context and no per-certificate extensions (what a
/// server without OCSP stapling or SCTs sends): 1 + 3 + Σ (3 + len + 2).
pub fn certificate_message_len<'a>(chain: impl IntoIterator<Item = &'a [u8]>) -> usize {
    4 + chain.into_iter().map(|c| 3 + c.len() + 2).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse() {
        assert!(parse_list("none").unwrap().is_empty());
        assert!(parse_list("").unwrap().is_empty());
        assert_eq!(
            parse_list("brotli, ZLIB,brotli").unwrap(),
            vec![CertCompression::Brotli, CertCompression::Zlib]
        );
        let e = parse_list("zstd").unwrap_err().to_string();
        assert!(e.contains("no zstd codec"), "{e}");
        let e = parse_list("lzma").unwrap_err().to_string();
        assert!(e.contains("none, brotli, zlib"), "{e}");
        assert!(parse_list("none,zlib").is_err());
    }

    #[test]
    fn decompression_is_noted_on_this_thread() {
        let input = vec![7u8; 3000];
        let c = BROTLI_COMPRESSOR
            .compress(
                input.clone(),
                rustls::compress::CompressionLevel::Interactive,
            )
            .unwrap();
        let mut out = vec![0u8; input.len()];
        let _ = take_last_decompression();
        decompressors(&[CertCompression::Brotli])[0]
            .decompress(&c, &mut out)
            .unwrap();
        assert_eq!(out, input);
        let d = take_last_decompression().unwrap();
        assert_eq!((d.compressed, d.uncompressed), (c.len(), 3000));
        assert_eq!(take_last_decompression(), None);
    }
}
