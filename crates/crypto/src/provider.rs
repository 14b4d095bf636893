//! The provider boundary: the only module in tlslab that names rustls's
//! `CryptoProvider` and the aws-lc-rs backend.

use std::sync::Arc;

use rustls::crypto::{CryptoProvider, SupportedKxGroup, aws_lc_rs};
use rustls::{NamedGroup, ProtocolVersion, SupportedCipherSuite, SupportedProtocolVersion};

use crate::{Error, Result};

pub use rustls::crypto::aws_lc_rs::Ticketer;

/// A TLS protocol version tlslab can negotiate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Version {
    /// TLS 1.2.
    #[serde(rename = "TLSv1.2")]
    Tls12,
    /// TLS 1.3.
    #[serde(rename = "TLSv1.3")]
    Tls13,
}

impl Version {
    /// The name tlslab prints, matching OpenSSL and nginx (`TLSv1.3`).
    pub fn name(self) -> &'static str {
        match self {
            Version::Tls12 => "TLSv1.2",
            Version::Tls13 => "TLSv1.3",
        }
    }

    /// The short name used in flags and metric labels (`1.3`).
    pub fn short(self) -> &'static str {
        match self {
            Version::Tls12 => "1.2",
            Version::Tls13 => "1.3",
        }
    }

    /// The version rustls negotiated, if it is one tlslab knows.
    pub fn from_rustls(v: ProtocolVersion) -> Option<Version> {
        match v {
            ProtocolVersion::TLSv1_2 => Some(Version::Tls12),
            ProtocolVersion::TLSv1_3 => Some(Version::Tls13),
            _ => None,
        }
    }

    fn rustls(self) -> &'static SupportedProtocolVersion {
        match self {
            Version::Tls12 => &rustls::version::TLS12,
            Version::Tls13 => &rustls::version::TLS13,
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a comma-separated version list such as `1.2,1.3` (also accepts
/// `tls1.2` and `TLSv1.3`). Duplicates are removed; order is ascending.
pub fn parse_versions(s: &str) -> Result<Vec<Version>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let norm = part
            .to_ascii_lowercase()
            .replace("tlsv", "")
            .replace("tls", "");
        let v = match norm.as_str() {
            "1.2" | "12" => Version::Tls12,
            "1.3" | "13" => Version::Tls13,
            _ => {
                return Err(Error::UnknownName {
                    what: "TLS version",
                    name: part.to_string(),
                    choices: "1.2, 1.3".into(),
                });
            }
        };
        if !out.contains(&v) {
            out.push(v);
        }
    }
    if out.is_empty() {
        return Err(Error::Incompatible(
            "no TLS version given; use --tls 1.2, 1.3 or 1.2,1.3".into(),
        ));
    }
    out.sort();
    Ok(out)
}

/// The rustls protocol-version list for `versions`, for
/// `ServerConfig::builder_with_protocol_versions` and its client twin.
pub fn protocol_versions(versions: &[Version]) -> Vec<&'static SupportedProtocolVersion> {
    versions.iter().map(|v| v.rustls()).collect()
}

/// The IANA-style name of a cipher suite, as printed and accepted by tlslab
/// (`TLS13_AES_128_GCM_SHA256`, `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`).
pub fn suite_name(suite: SupportedCipherSuite) -> String {
    format!("{:?}", suite.suite())
}

/// The name of a key-exchange group as tlslab spells it (`x25519`,
/// `secp256r1`, `secp384r1`, `X25519MLKEM768`).
pub fn group_name(group: NamedGroup) -> String {
    match group {
        NamedGroup::X25519 => "x25519".into(),
        NamedGroup::secp256r1 => "secp256r1".into(),
        NamedGroup::secp384r1 => "secp384r1".into(),
        NamedGroup::secp521r1 => "secp521r1".into(),
        NamedGroup::X25519MLKEM768 => "X25519MLKEM768".into(),
        other => format!("{other:?}"),
    }
}

fn default_provider() -> CryptoProvider {
    let mut p = aws_lc_rs::default_provider();
    // Make sure all groups tlslab documents are present, whatever the
    // defaults of this rustls release are.
    let all: Vec<&'static dyn SupportedKxGroup> = aws_lc_rs::ALL_KX_GROUPS.to_vec();
    for g in all {
        if !p.kx_groups.iter().any(|h| h.name() == g.name()) {
            p.kx_groups.push(g);
        }
    }
    p
}

/// All cipher suite names this build supports.
pub fn all_suite_names() -> Vec<String> {
    aws_lc_rs::ALL_CIPHER_SUITES
        .iter()
        .map(|s| suite_name(*s))
        .collect()
}

/// All key-exchange group names this build supports.
pub fn all_group_names() -> Vec<String> {
    default_provider()
        .kx_groups
        .iter()
        .map(|g| group_name(g.name()))
        .collect()
}

/// Which algorithms a run may negotiate.
#[derive(Clone, Debug, Default)]
pub struct Algorithms {
    /// Cipher suites by name (case-insensitive); `None` keeps the defaults.
    pub suites: Option<Vec<String>>,
    /// Key-exchange groups by name (case-insensitive), in preference order;
    /// `None` keeps the defaults.
    pub groups: Option<Vec<String>>,
    /// A node prefix (`serve --node-tag`, see [`node_tag_prefix`]): written
    /// over the first bytes of every 32-byte value the provider's random
    /// source gives rustls. rustls draws TLS 1.2 session IDs and stateful
    /// TLS 1.3 ticket IDs that way (and server randoms and ticket nonces,
    /// which keep 28 random bytes), so a dispatcher can tell which node
    /// issued a session from its first bytes. `None`: plain randomness.
    pub random_prefix: Option<Vec<u8>>,
}

/// The longest [`Algorithms::random_prefix`]: 8 bytes, so 24 of a session
/// ID's 32 bytes stay random.
pub const MAX_RANDOM_PREFIX: usize = 8;

/// Bytes of a node prefix derived from a tag.
pub const NODE_TAG_PREFIX_LEN: usize = 4;

/// The node prefix of `serve --node-tag TAG` (and of `dispatch --backend
/// ADDR=tag:TAG`): the first 4 bytes of SHA-256 of the tag's UTF-8 bytes,
/// i.e. `printf %s TAG | sha256sum | cut -c1-8` in hex.
pub fn node_tag_prefix(tag: &str) -> [u8; NODE_TAG_PREFIX_LEN] {
    let d = aws_lc_rs_digest(tag.as_bytes());
    let mut out = [0u8; NODE_TAG_PREFIX_LEN];
    out.copy_from_slice(&d[..NODE_TAG_PREFIX_LEN]);
    out
}

fn aws_lc_rs_digest(data: &[u8]) -> Vec<u8> {
    ::aws_lc_rs::digest::digest(&::aws_lc_rs::digest::SHA256, data)
        .as_ref()
        .to_vec()
}

/// The provider's random source with a node prefix over every 32-byte
/// value (see [`Algorithms::random_prefix`]).
#[derive(Debug)]
struct PrefixedRandom {
    inner: &'static dyn rustls::crypto::SecureRandom,
    prefix: Vec<u8>,
}

impl rustls::crypto::SecureRandom for PrefixedRandom {
    fn fill(&self, buf: &mut [u8]) -> std::result::Result<(), rustls::crypto::GetRandomFailed> {
        self.inner.fill(buf)?;
        if buf.len() == 32 {
            buf[..self.prefix.len()].copy_from_slice(&self.prefix);
        }
        Ok(())
    }

    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

/// The items of `from` named by `names`, in their order (names compare
/// case-insensitively, spaces trimmed); an unknown name is an error
/// listing `choices`.
fn pick<T: Copy>(
    names: &[String],
    from: &[T],
    name: impl Fn(&T) -> String,
    what: &'static str,
    choices: fn() -> Vec<String>,
) -> Result<Vec<T>> {
    names
        .iter()
        .map(|n| {
            from.iter()
                .find(|x| name(x).eq_ignore_ascii_case(n.trim()))
                .copied()
                .ok_or_else(|| Error::UnknownName {
                    what,
                    name: n.clone(),
                    choices: choices().join(", "),
                })
        })
        .collect()
}

/// Builds the aws-lc-rs provider restricted to `alg`, checking that at least
/// one suite remains for each of `versions`.
pub fn build(versions: &[Version], alg: &Algorithms) -> Result<Arc<CryptoProvider>> {
    let mut p = default_provider();
    if let Some(names) = &alg.suites {
        p.cipher_suites = pick(
            names,
            aws_lc_rs::ALL_CIPHER_SUITES,
            |s| suite_name(*s),
            "cipher suite",
            all_suite_names,
        )?;
    }
    if let Some(names) = &alg.groups {
        p.kx_groups = pick(
            names,
            &p.kx_groups,
            |g| group_name(g.name()),
            "key-exchange group",
            all_group_names,
        )?;
    }
    for v in versions {
        let any = p.cipher_suites.iter().any(|s| s.version() == v.rustls());
        if !any {
            return Err(Error::Incompatible(format!(
                "none of the chosen cipher suites works with {v}; add a {v} suite to --suites or drop {} from --tls",
                v.short()
            )));
        }
    }
    if p.kx_groups.is_empty() {
        return Err(Error::Incompatible(
            "--groups left no key-exchange group".into(),
        ));
    }
    if let Some(prefix) = &alg.random_prefix {
        if prefix.is_empty() || prefix.len() > MAX_RANDOM_PREFIX {
            return Err(Error::Incompatible(format!(
                "a node prefix must be 1 to {MAX_RANDOM_PREFIX} bytes, not {}",
                prefix.len()
            )));
        }
        // One leaked random source per built provider (a server builds
        // one per start).
        p.secure_random = Box::leak(Box::new(PrefixedRandom {
            inner: p.secure_random,
            prefix: prefix.clone(),
        }));
    }
    Ok(Arc::new(p))
}

/// A ticketer for stateless TLS 1.2 and TLS 1.3 tickets, from aws-lc-rs.
pub fn ticketer() -> Result<Arc<dyn rustls::server::ProducesTickets>> {
    Ok(Ticketer::new()?)
}

/// A shared key ring seals TLS 1.2 and stateless TLS 1.3 tickets
/// (see [`crate::ticket_keys`] for the layout and derivation).
impl rustls::server::ProducesTickets for crate::ticket_keys::TicketKeyRing {
    fn enabled(&self) -> bool {
        true
    }
    fn lifetime(&self) -> u32 {
        u32::try_from(crate::ticket_keys::TicketKeyRing::lifetime(self).as_secs())
            .unwrap_or(u32::MAX)
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.seal(plain)
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.open(cipher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_sort() {
        assert_eq!(
            parse_versions("1.3,1.2").unwrap(),
            vec![Version::Tls12, Version::Tls13]
        );
        assert_eq!(parse_versions("TLSv1.3").unwrap(), vec![Version::Tls13]);
        assert!(parse_versions("1.1").is_err());
        assert!(parse_versions("").is_err());
    }

    #[test]
    fn documented_groups_exist() {
        let names = all_group_names();
        for g in ["x25519", "secp256r1", "secp384r1", "X25519MLKEM768"] {
            assert!(names.iter().any(|n| n == g), "{g} missing from {names:?}");
        }
    }

    #[test]
    fn restricting_suites_checks_versions() {
        let alg = Algorithms {
            suites: Some(vec!["TLS13_AES_128_GCM_SHA256".into()]),
            groups: None,
            random_prefix: None,
        };
        let p = build(&[Version::Tls13], &alg).unwrap();
        assert_eq!(p.cipher_suites.len(), 1);
        let err = build(&[Version::Tls12, Version::Tls13], &alg).unwrap_err();
        assert!(err.to_string().contains("TLSv1.2"), "{err}");
        let bad = Algorithms {
            suites: Some(vec!["RC4_MD5".into()]),
            groups: None,
            random_prefix: None,
        };
        assert!(build(&[Version::Tls13], &bad).is_err());
    }

    #[test]
    fn restricting_groups_keeps_order() {
        let alg = Algorithms {
            suites: None,
            groups: Some(vec!["secp384r1".into(), "x25519".into()]),
            random_prefix: None,
        };
        let p = build(&[Version::Tls13], &alg).unwrap();
        let names: Vec<_> = p.kx_groups.iter().map(|g| group_name(g.name())).collect();
        assert_eq!(names, vec!["secp384r1", "x25519"]);
    }

    #[test]
    fn node_prefix_marks_every_32_byte_random_value() {
        // printf %s n1 | sha256sum
        assert_eq!(node_tag_prefix("n1"), [0x67, 0x6b, 0x8b, 0xb8]);
        let alg = Algorithms {
            random_prefix: Some(vec![0xab, 0xcd]),
            ..Algorithms::default()
        };
        let p = build(&[Version::Tls13], &alg).unwrap();
        let mut id = [0u8; 32];
        p.secure_random.fill(&mut id).unwrap();
        assert_eq!(&id[..2], &[0xab, 0xcd]);
        let mut other = [0u8; 32];
        p.secure_random.fill(&mut other).unwrap();
        assert_ne!(id[2..], other[2..]);
        let mut age = [0u8; 4];
        p.secure_random.fill(&mut age).unwrap();
        let bad = Algorithms {
            random_prefix: Some(vec![0; 9]),
            ..Algorithms::default()
        };
        assert!(build(&[Version::Tls13], &bad).is_err());
    }
}
