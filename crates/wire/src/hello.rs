//! ClientHello and ServerHello (RFC 8446 §4.1.2–4.1.4, RFC 5246 §7.4.1).

use crate::Error;
use crate::ext::{Extensions, ext_type as et, for_each_unique};
use crate::handshake::{HandshakeType, parse_handshake};
use crate::list::{KeyShareEntry, List, PskIdentity, U16List};
use crate::reader::Reader;

/// The `random` a ServerHello carries when it is a HelloRetryRequest:
/// SHA-256 of "HelloRetryRequest" (RFC 8446 §4.1.3).
pub const HELLO_RETRY_REQUEST_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

/// `ProtocolVersion` values.
pub mod version {
    /// SSL 3.0.
    pub const SSL3: u16 = 0x0300;
    /// TLS 1.0.
    pub const TLS10: u16 = 0x0301;
    /// TLS 1.1.
    pub const TLS11: u16 = 0x0302;
    /// TLS 1.2.
    pub const TLS12: u16 = 0x0303;
    /// TLS 1.3.
    pub const TLS13: u16 = 0x0304;
}

/// The `pre_shared_key` extension of a ClientHello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OfferedPsks<'a> {
    /// The offered identities (at least one).
    pub identities: List<'a, PskIdentity<'a>>,
    /// The binders, one per identity.
    pub binders: List<'a, &'a [u8]>,
}

impl OfferedPsks<'_> {
    /// How many binders were sent (equal to the number of identities).
    pub fn binders_count(&self) -> usize {
        self.binders.len()
    }
}

/// A parsed ClientHello. Every field borrows from the message; lists were
/// validated while parsing, so iterating them cannot fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientHello<'a> {
    /// `legacy_version` (0x0303 for TLS 1.2 and 1.3 clients).
    pub legacy_version: u16,
    /// The client random.
    pub random: &'a [u8; 32],
    /// `legacy_session_id`: a TLS 1.2 session to resume, or 32 random bytes
    /// for TLS 1.3 middlebox compatibility; 0 to 32 bytes.
    pub session_id: &'a [u8],
    /// Offered cipher suites (at least one).
    pub cipher_suites: U16List<'a>,
    /// Offered compression methods (at least one).
    pub compression_methods: &'a [u8],
    /// All extensions, in wire order (empty if the hello had none).
    pub extensions: Extensions<'a>,
    /// The first `host_name` of the `server_name` extension (bytes as sent;
    /// see [`ClientHello::server_name_str`]).
    pub server_name: Option<&'a [u8]>,
    /// ALPN protocol names offered.
    pub alpn: Option<List<'a, &'a [u8]>>,
    /// `supported_versions`: versions offered, most preferred first.
    pub supported_versions: Option<U16List<'a>>,
    /// `supported_groups`.
    pub supported_groups: Option<U16List<'a>>,
    /// `key_share` entries (the groups with a key share sent up front).
    pub key_shares: Option<List<'a, KeyShareEntry<'a>>>,
    /// `signature_algorithms`.
    pub signature_algorithms: Option<U16List<'a>>,
    /// The `session_ticket` extension (RFC 5077): `Some(&[])` asks for a
    /// ticket, non-empty bytes offer a TLS 1.2 ticket to resume.
    pub session_ticket: Option<&'a [u8]>,
    /// The `pre_shared_key` extension: TLS 1.3 resumption offers.
    pub pre_shared_key: Option<OfferedPsks<'a>>,
    /// `psk_key_exchange_modes` (0 = psk_ke, 1 = psk_dhe_ke).
    pub psk_key_exchange_modes: Option<&'a [u8]>,
    /// Whether the `early_data` extension (0-RTT) is present.
    pub early_data: bool,
    /// Whether `extended_master_secret` is present.
    pub extended_master_secret: bool,
}

const CH_KNOWN: [u16; 11] = [
    et::SERVER_NAME,
    et::ALPN,
    et::SUPPORTED_VERSIONS,
    et::SUPPORTED_GROUPS,
    et::KEY_SHARE,
    et::SIGNATURE_ALGORITHMS,
    et::SESSION_TICKET,
    et::PRE_SHARED_KEY,
    et::PSK_KEY_EXCHANGE_MODES,
    et::EARLY_DATA,
    et::EXTENDED_MASTER_SECRET,
];

/// Checks that `buf` starts with a complete message of type `want` and
/// returns its body.
fn body_of(buf: &[u8], want: HandshakeType) -> Result<&[u8], Error> {
    // Look at the type before waiting for the whole message, so a wrong
    // message is reported at once rather than as "incomplete".
    if let Some(&t) = buf.first()
        && t != want.0
    {
        return Err(Error::UnexpectedMessage {
            expected: want.0,
            found: t,
        });
    }
    Ok(parse_handshake(buf)?.body)
}

/// Reads the extensions block that ends a hello; older hellos may omit it.
fn read_extensions<'a>(r: &mut Reader<'a>) -> Result<Extensions<'a>, Error> {
    if r.is_empty() {
        return Ok(Extensions::default());
    }
    let exts = Extensions::new(r.vec16()?)?;
    r.finish("bytes after the extensions block")?;
    Ok(exts)
}

/// What both hellos start with: `legacy_version`, `random` and a
/// `session_id` of at most 32 bytes (`too_long` names the error).
fn read_head<'a>(
    r: &mut Reader<'a>,
    too_long: &'static str,
) -> Result<(u16, &'a [u8; 32], &'a [u8]), Error> {
    let legacy_version = r.u16()?;
    let random = r.array::<32>()?;
    let session_id = r.vec8()?;
    if session_id.len() > 32 {
        return Err(Error::Malformed { what: too_long });
    }
    Ok((legacy_version, random, session_id))
}

fn empty_ext(data: &[u8], what: &'static str) -> Result<bool, Error> {
    if data.is_empty() {
        Ok(true)
    } else {
        Err(Error::Malformed { what })
    }
}

impl<'a> ClientHello<'a> {
    /// Parses the ClientHello message (with its four-byte header) at the
    /// start of `buf`; bytes after the message are ignored.
    ///
    /// [`Error::Incomplete`] means the message is not all there yet; any
    /// other error means the bytes are not a valid ClientHello.
    pub fn parse(buf: &'a [u8]) -> Result<Self, Error> {
        Self::parse_body(body_of(buf, HandshakeType::CLIENT_HELLO)?)
    }

    /// Parses a ClientHello body (the message without its header). The body
    /// is complete by definition, so short data is [`Error::Malformed`].
    pub fn parse_body(body: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::inner(body, "truncated ClientHello");
        let (legacy_version, random, session_id) =
            read_head(&mut r, "ClientHello session_id longer than 32 bytes")?;
        let cipher_suites = List::new(r.vec16()?, 1, "ClientHello cipher_suites")?;
        let compression_methods = r.vec8()?;
        if compression_methods.is_empty() {
            return Err(Error::Malformed {
                what: "ClientHello offers no compression method",
            });
        }
        let extensions = read_extensions(&mut r)?;
        let mut ch = ClientHello {
            legacy_version,
            random,
            session_id,
            cipher_suites,
            compression_methods,
            extensions,
            server_name: None,
            alpn: None,
            supported_versions: None,
            supported_groups: None,
            key_shares: None,
            signature_algorithms: None,
            session_ticket: None,
            pre_shared_key: None,
            psk_key_exchange_modes: None,
            early_data: false,
            extended_master_secret: false,
        };
        for_each_unique(extensions, &CH_KNOWN, |after, e| {
            ch.decode_extension(e.ext_type, e.data, after)
        })?;
        Ok(ch)
    }

    fn decode_extension(&mut self, typ: u16, data: &'a [u8], after: usize) -> Result<(), Error> {
        let mut r = Reader::inner(data, "truncated ClientHello extension");
        match typ {
            et::SERVER_NAME => {
                // RFC 6066 allows an empty extension only in a ServerHello;
                // in a ClientHello it holds a non-empty server_name_list.
                let mut list = Reader::inner(r.vec16()?, "truncated server_name entry");
                r.finish("bytes after server_name_list")?;
                if list.is_empty() {
                    return Err(Error::Malformed {
                        what: "empty server_name_list",
                    });
                }
                while !list.is_empty() {
                    let name_type = list.u8()?;
                    let name = list.vec16()?;
                    if name_type == 0 && self.server_name.is_none() {
                        if name.is_empty() {
                            return Err(Error::Malformed {
                                what: "empty SNI host_name",
                            });
                        }
                        self.server_name = Some(name);
                    }
                }
            }
            et::ALPN => {
                self.alpn = Some(List::new(r.vec16()?, 1, "ALPN protocol_name_list")?);
                r.finish("bytes after ALPN protocol_name_list")?;
            }
            et::SUPPORTED_VERSIONS => {
                self.supported_versions = Some(List::new(r.vec8()?, 1, "supported_versions")?);
                r.finish("bytes after supported_versions")?;
            }
            et::SUPPORTED_GROUPS => {
                self.supported_groups = Some(List::new(r.vec16()?, 1, "supported_groups")?);
                r.finish("bytes after supported_groups")?;
            }
            et::KEY_SHARE => {
                self.key_shares = Some(List::new(r.vec16()?, 0, "key_share client_shares")?);
                r.finish("bytes after key_share client_shares")?;
            }
            et::SIGNATURE_ALGORITHMS => {
                self.signature_algorithms = Some(List::new(r.vec16()?, 1, "signature_algorithms")?);
                r.finish("bytes after signature_algorithms")?;
            }
            et::SESSION_TICKET => self.session_ticket = Some(data),
            et::PRE_SHARED_KEY => {
                if after != 0 {
                    return Err(Error::Malformed {
                        what: "pre_shared_key is not the last ClientHello extension",
                    });
                }
                let identities = List::new(r.vec16()?, 1, "pre_shared_key identities")?;
                let binders = List::new(r.vec16()?, 1, "pre_shared_key binders")?;
                r.finish("bytes after pre_shared_key binders")?;
                if identities.len() != binders.len() {
                    return Err(Error::Malformed {
                        what: "pre_shared_key has a different number of binders and identities",
                    });
                }
                self.pre_shared_key = Some(OfferedPsks {
                    identities,
                    binders,
                });
            }
            et::PSK_KEY_EXCHANGE_MODES => {
                let modes = r.vec8()?;
                r.finish("bytes after psk_key_exchange_modes")?;
                if modes.is_empty() {
                    return Err(Error::Malformed {
                        what: "empty psk_key_exchange_modes",
                    });
                }
                self.psk_key_exchange_modes = Some(modes);
            }
            et::EARLY_DATA => {
                self.early_data = empty_ext(data, "ClientHello early_data not empty")?
            }
            et::EXTENDED_MASTER_SECRET => {
                self.extended_master_secret = empty_ext(data, "extended_master_secret not empty")?
            }
            _ => {}
        }
        Ok(())
    }

    /// The SNI host name, if present and valid UTF-8.
    pub fn server_name_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.server_name?).ok()
    }

    /// Whether TLS 1.3 is offered (in `supported_versions`).
    pub fn offers_tls13(&self) -> bool {
        self.supported_versions
            .is_some_and(|v| v.contains(&version::TLS13))
    }

    /// The groups for which a key share was sent, in wire order.
    pub fn key_share_groups(&self) -> impl Iterator<Item = u16> + 'a {
        self.key_shares
            .into_iter()
            .flat_map(|l| l.into_iter().map(|k| k.group))
    }

    /// Whether the hello asks to resume: a non-empty TLS 1.2 ticket or a
    /// TLS 1.3 PSK. (A non-empty session ID alone is not proof: TLS 1.3
    /// clients send a random one.)
    pub fn offers_ticket_or_psk(&self) -> bool {
        self.session_ticket.is_some_and(|t| !t.is_empty()) || self.pre_shared_key.is_some()
    }
}

/// A parsed ServerHello or HelloRetryRequest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerHello<'a> {
    /// `legacy_version` (0x0303 for TLS 1.2 and 1.3).
    pub legacy_version: u16,
    /// The server random.
    pub random: &'a [u8; 32],
    /// The session ID: in TLS 1.2 the session the server will cache (or
    /// the one it resumes); in TLS 1.3 an echo of the client's.
    pub session_id: &'a [u8],
    /// The chosen cipher suite.
    pub cipher_suite: u16,
    /// The chosen compression method.
    pub compression_method: u8,
    /// All extensions, in wire order.
    pub extensions: Extensions<'a>,
    /// Whether this is a HelloRetryRequest (its random is
    /// [`HELLO_RETRY_REQUEST_RANDOM`]).
    pub is_hello_retry_request: bool,
    /// The version chosen through `supported_versions` (TLS 1.3).
    pub selected_version: Option<u16>,
    /// The `key_share` group: the server's share in a ServerHello, the
    /// group the client must retry with in a HelloRetryRequest.
    pub key_share_group: Option<u16>,
    /// The index of the client PSK identity the server accepted.
    pub pre_shared_key: Option<u16>,
    /// The ALPN protocol the server selected.
    pub alpn: Option<&'a [u8]>,
    /// Whether the server sent an empty `session_ticket` extension: it
    /// will issue a TLS 1.2 NewSessionTicket.
    pub session_ticket: bool,
    /// Whether `extended_master_secret` is present.
    pub extended_master_secret: bool,
    /// The `cookie` of a HelloRetryRequest.
    pub cookie: Option<&'a [u8]>,
}

const SH_KNOWN: [u16; 7] = [
    et::SUPPORTED_VERSIONS,
    et::KEY_SHARE,
    et::PRE_SHARED_KEY,
    et::ALPN,
    et::SESSION_TICKET,
    et::EXTENDED_MASTER_SECRET,
    et::COOKIE,
];

impl<'a> ServerHello<'a> {
    /// Parses the ServerHello message (with its header) at the start of
    /// `buf`; bytes after the message are ignored.
    pub fn parse(buf: &'a [u8]) -> Result<Self, Error> {
        Self::parse_body(body_of(buf, HandshakeType::SERVER_HELLO)?)
    }

    /// Parses a ServerHello body (the message without its header).
    pub fn parse_body(body: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::inner(body, "truncated ServerHello");
        let (legacy_version, random, session_id) =
            read_head(&mut r, "ServerHello session_id longer than 32 bytes")?;
        let cipher_suite = r.u16()?;
        let compression_method = r.u8()?;
        let extensions = read_extensions(&mut r)?;
        let mut sh = ServerHello {
            legacy_version,
            random,
            session_id,
            cipher_suite,
            compression_method,
            extensions,
            is_hello_retry_request: *random == HELLO_RETRY_REQUEST_RANDOM,
            selected_version: None,
            key_share_group: None,
            pre_shared_key: None,
            alpn: None,
            session_ticket: false,
            extended_master_secret: false,
            cookie: None,
        };
        for_each_unique(extensions, &SH_KNOWN, |_, e| {
            sh.decode_extension(e.ext_type, e.data)
        })?;
        Ok(sh)
    }

    fn decode_extension(&mut self, typ: u16, data: &'a [u8]) -> Result<(), Error> {
        let mut r = Reader::inner(data, "truncated ServerHello extension");
        match typ {
            et::SUPPORTED_VERSIONS => {
                self.selected_version = Some(r.u16()?);
                r.finish("bytes after selected_version")?;
            }
            et::KEY_SHARE => {
                let group = r.u16()?;
                if !self.is_hello_retry_request {
                    let key = r.vec16()?;
                    if key.is_empty() {
                        return Err(Error::Malformed {
                            what: "empty ServerHello key_exchange",
                        });
                    }
                }
                r.finish("bytes after ServerHello key_share")?;
                self.key_share_group = Some(group);
            }
            et::PRE_SHARED_KEY => {
                self.pre_shared_key = Some(r.u16()?);
                r.finish("bytes after selected_identity")?;
            }
            et::ALPN => {
                let list = List::<&[u8]>::new(r.vec16()?, 1, "ServerHello ALPN")?;
                r.finish("bytes after ServerHello ALPN")?;
                let mut it = list.iter();
                self.alpn = it.next();
                if it.next().is_some() {
                    return Err(Error::Malformed {
                        what: "ServerHello ALPN selects more than one protocol",
                    });
                }
            }
            et::SESSION_TICKET => {
                self.session_ticket = empty_ext(data, "ServerHello session_ticket not empty")?
            }
            et::EXTENDED_MASTER_SECRET => {
                self.extended_master_secret = empty_ext(data, "extended_master_secret not empty")?
            }
            et::COOKIE => {
                let c = r.vec16()?;
                r.finish("bytes after cookie")?;
                if c.is_empty() {
                    return Err(Error::Malformed {
                        what: "empty HelloRetryRequest cookie",
                    });
                }
                self.cookie = Some(c);
            }
            _ => {}
        }
        Ok(())
    }

    /// The negotiated version: `supported_versions` if present, else
    /// `legacy_version`.
    pub fn version(&self) -> u16 {
        self.selected_version.unwrap_or(self.legacy_version)
    }
}

/// A TLS 1.2 NewSessionTicket (RFC 5077 §3.3). It is sent before the
/// server's ChangeCipherSpec, so it is readable on the wire; the TLS 1.3
/// message is encrypted and never seen here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewSessionTicket<'a> {
    /// Seconds the client may keep the ticket (0 = unspecified).
    pub lifetime_hint: u32,
    /// The opaque ticket (empty if the server decided not to issue one).
    pub ticket: &'a [u8],
}

impl<'a> NewSessionTicket<'a> {
    /// Parses the NewSessionTicket message (with its header) at the start
    /// of `buf`; bytes after the message are ignored.
    pub fn parse(buf: &'a [u8]) -> Result<Self, Error> {
        Self::parse_body(body_of(buf, HandshakeType::NEW_SESSION_TICKET)?)
    }

    /// Parses a TLS 1.2 NewSessionTicket body.
    pub fn parse_body(body: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::inner(body, "truncated NewSessionTicket");
        let lifetime_hint = r.u32()?;
        let ticket = r.vec16()?;
        r.finish("bytes after the ticket (is this a TLS 1.3 ticket?)")?;
        Ok(NewSessionTicket {
            lifetime_hint,
            ticket,
        })
    }
}
