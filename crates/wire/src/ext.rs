//! Hello extensions: the type registry entries tlslab decodes and a
//! borrowed iterator over an extensions block.

use crate::Error;
use crate::reader::Reader;

/// Extension type code points (IANA "TLS ExtensionType Values").
pub mod ext_type {
    /// `server_name` (RFC 6066).
    pub const SERVER_NAME: u16 = 0;
    /// `status_request` (OCSP stapling).
    pub const STATUS_REQUEST: u16 = 5;
    /// `supported_groups` (RFC 8422, RFC 8446).
    pub const SUPPORTED_GROUPS: u16 = 10;
    /// `ec_point_formats` (RFC 8422).
    pub const EC_POINT_FORMATS: u16 = 11;
    /// `signature_algorithms` (RFC 8446).
    pub const SIGNATURE_ALGORITHMS: u16 = 13;
    /// `application_layer_protocol_negotiation` (RFC 7301).
    pub const ALPN: u16 = 16;
    /// `signed_certificate_timestamp` (RFC 6962).
    pub const SCT: u16 = 18;
    /// `encrypt_then_mac` (RFC 7366).
    pub const ENCRYPT_THEN_MAC: u16 = 22;
    /// `extended_master_secret` (RFC 7627).
    pub const EXTENDED_MASTER_SECRET: u16 = 23;
    /// `compress_certificate` (RFC 8879).
    pub const COMPRESS_CERTIFICATE: u16 = 27;
    /// `session_ticket` (RFC 5077).
    pub const SESSION_TICKET: u16 = 35;
    /// `pre_shared_key` (RFC 8446).
    pub const PRE_SHARED_KEY: u16 = 41;
    /// `early_data` (RFC 8446).
    pub const EARLY_DATA: u16 = 42;
    /// `supported_versions` (RFC 8446).
    pub const SUPPORTED_VERSIONS: u16 = 43;
    /// `cookie` (RFC 8446).
    pub const COOKIE: u16 = 44;
    /// `psk_key_exchange_modes` (RFC 8446).
    pub const PSK_KEY_EXCHANGE_MODES: u16 = 45;
    /// `key_share` (RFC 8446).
    pub const KEY_SHARE: u16 = 51;
    /// `encrypted_client_hello` (draft-ietf-tls-esni).
    pub const ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;
    /// `renegotiation_info` (RFC 5746).
    pub const RENEGOTIATION_INFO: u16 = 0xff01;
}

/// One extension, undecoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extension<'a> {
    /// The extension type (see [`ext_type`]).
    pub ext_type: u16,
    /// The extension data, without type and length.
    pub data: &'a [u8],
}

/// The extensions block of a hello, checked to be a well-formed sequence of
/// extensions when the hello was parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Extensions<'a> {
    bytes: &'a [u8],
}

impl<'a> Extensions<'a> {
    /// Validates the block (without its length prefix).
    pub(crate) fn new(bytes: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::inner(bytes, "truncated extension");
        while !r.is_empty() {
            r.u16()?;
            r.vec16()?;
        }
        Ok(Extensions { bytes })
    }

    /// The block as sent, without its length prefix.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The extensions in wire order.
    pub fn iter(&self) -> ExtensionsIter<'a> {
        ExtensionsIter {
            r: Reader::inner(self.bytes, "truncated extension"),
        }
    }

    /// The first extension of type `ext_type`.
    pub fn get(&self, ext_type: u16) -> Option<&'a [u8]> {
        self.iter().find(|e| e.ext_type == ext_type).map(|e| e.data)
    }

    /// The extension types in wire order (the raw material of a JA3/JA4-style
    /// fingerprint).
    pub fn types(&self) -> impl Iterator<Item = u16> + 'a {
        self.iter().map(|e| e.ext_type)
    }
}

/// Iterator over [`Extensions`].
#[derive(Clone, Debug)]
pub struct ExtensionsIter<'a> {
    r: Reader<'a>,
}

impl<'a> Iterator for ExtensionsIter<'a> {
    type Item = Extension<'a>;
    fn next(&mut self) -> Option<Self::Item> {
        let ext_type = self.r.u16().ok()?;
        let data = self.r.vec16().ok()?;
        Some(Extension { ext_type, data })
    }
}

/// Walks a hello's extensions once, rejecting a repeated extension among
/// those the caller decodes (RFC 8446 §4.2: at most one of each type).
pub(crate) fn for_each_unique<'a>(
    exts: Extensions<'a>,
    known: &[u16],
    mut f: impl FnMut(usize, Extension<'a>) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut seen = 0u64;
    let count = exts.iter().count();
    for (i, e) in exts.iter().enumerate() {
        if let Some(bit) = known.iter().position(|&k| k == e.ext_type) {
            if seen & (1 << bit) != 0 {
                return Err(Error::Malformed {
                    what: "the same extension appears twice",
                });
            }
            seen |= 1 << bit;
        }
        f(count - 1 - i, e)?;
    }
    Ok(())
}
