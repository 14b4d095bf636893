//! QUIC-LB connection IDs (Duke, Banks and Huitema, "QUIC-LB: Generating
//! Routable QUIC Connection IDs", draft-ietf-quic-load-balancers-21): a
//! server writes its server ID into every connection ID it issues, so a
//! load balancer that shares the configuration routes a packet by its
//! Destination Connection ID alone, across client address changes.
//!
//! A CID is `first octet || server ID || nonce`, the last two encrypted
//! when the configuration has a key: one AES-128-ECB block when they are
//! exactly 16 bytes, else a four-pass Feistel network whose round function
//! is AES-128-ECB (draft §5.4). The first octet's top 3 bits are the config
//! ID (0b111 is reserved for unroutable CIDs), the low 5 the CID's length
//! after the first octet (length self-description, §2.3).
//!
//! [`LbParams`] is what a balancer and a server share (config ID, lengths,
//! key); [`LbConfig`] adds the server's own ID. [`Codec`] encodes and
//! decodes one configuration, [`CidIssuer`] makes a server's CIDs, and
//! [`LbRouter`] finds the server ID in a DCID for up to 7 configurations.
//! AES comes from aws-lc-rs.

use aws_lc_rs::cipher::{
    AES_128, DecryptingKey, DecryptionContext, EncryptingKey, UnboundCipherKey,
};

/// The config ID reserved for unroutable CIDs (draft §2.2).
pub const UNROUTABLE: u8 = 0b111;
/// The longest CID QUIC v1 allows.
pub const MAX_CID_LEN: usize = 20;
/// Server ID length bounds in bytes (draft §5.2: at least 1; with the
/// 4-byte minimum nonce and the 19-byte sum, at most 15).
pub const SERVER_ID_LEN: std::ops::RangeInclusive<usize> = 1..=15;
/// Nonce length bounds in bytes (draft §5.2: at least 4, sum at most 19).
pub const NONCE_LEN: std::ops::RangeInclusive<usize> = 4..=18;
/// The most server ID and nonce bytes together (a 20-byte CID).
pub const MAX_PLAINTEXT_LEN: usize = 19;

/// A QUIC-LB configuration that cannot be used, and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("QUIC-LB configuration: {0}")]
pub struct LbConfigError(pub String);

fn bad<T>(msg: impl Into<String>) -> Result<T, LbConfigError> {
    Err(LbConfigError(msg.into()))
}

/// How a configuration encodes the server ID and nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No key: the server ID in clear (observers can link CIDs to servers).
    Plaintext,
    /// A key and 16 bytes of server ID and nonce: one AES-128-ECB block.
    SinglePass,
    /// A key and any other length: the four-pass Feistel network.
    FourPass,
}

/// What a balancer and its servers share for one config ID.
#[derive(Clone, PartialEq, Eq)]
pub struct LbParams {
    /// The config rotation bits, 0 to 6.
    pub config_id: u8,
    /// Server ID length in bytes.
    pub server_id_len: usize,
    /// Nonce length in bytes.
    pub nonce_len: usize,
    /// The AES-128 key, or `None` for plaintext CIDs.
    pub key: Option<[u8; 16]>,
}

impl std::fmt::Debug for LbParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LbParams")
            .field("config_id", &self.config_id)
            .field("server_id_len", &self.server_id_len)
            .field("nonce_len", &self.nonce_len)
            .field("key", &self.key.map(|_| "<redacted>"))
            .finish()
    }
}

impl LbParams {
    /// Checks the draft's bounds.
    pub fn new(
        config_id: u8,
        server_id_len: usize,
        nonce_len: usize,
        key: Option<[u8; 16]>,
    ) -> Result<Self, LbConfigError> {
        if config_id == UNROUTABLE {
            return bad(
                "config-id 7 (0b111) is reserved for unroutable connection IDs; give 0 to 6",
            );
        }
        if config_id > UNROUTABLE {
            return bad(format!(
                "config-id {config_id}: the config ID is 3 bits; give 0 to 6"
            ));
        }
        if !SERVER_ID_LEN.contains(&server_id_len) {
            return bad(format!(
                "a server ID of {server_id_len} bytes; give 1 to 15 bytes"
            ));
        }
        if !NONCE_LEN.contains(&nonce_len) {
            return bad(format!("nonce-len {nonce_len}; give 4 to 18"));
        }
        if server_id_len + nonce_len > MAX_PLAINTEXT_LEN {
            return bad(format!(
                "a {server_id_len}-byte server ID and a {nonce_len}-byte nonce make a {}-byte CID; QUIC allows 20, so keep server ID + nonce at most 19 bytes",
                1 + server_id_len + nonce_len
            ));
        }
        Ok(LbParams {
            config_id,
            server_id_len,
            nonce_len,
            key,
        })
    }

    /// The CID length: first octet, server ID and nonce.
    pub fn cid_len(&self) -> usize {
        1 + self.server_id_len + self.nonce_len
    }

    /// The encoding this configuration uses.
    pub fn mode(&self) -> Mode {
        match self.key {
            None => Mode::Plaintext,
            Some(_) if self.server_id_len + self.nonce_len == 16 => Mode::SinglePass,
            Some(_) => Mode::FourPass,
        }
    }
}

/// A server's QUIC-LB configuration: the shared parameters and its ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbConfig {
    /// What the balancer knows too.
    pub params: LbParams,
    /// This server's ID (`params.server_id_len` bytes).
    pub server_id: Vec<u8>,
}

impl LbConfig {
    /// Parses a server's configuration,
    /// `server-id=HEX,nonce-len=N,config-id=N[,key=HEX]` (the key 32 hex
    /// digits; the server ID's length is that of its hex). Keys may come in
    /// any order; each once.
    pub fn parse(s: &str) -> Result<Self, LbConfigError> {
        let f = Fields::parse(s, "server-id")?;
        let Some(sid) = f.server else {
            return bad("server-id=HEX is missing (this server's ID, 1 to 15 bytes in hex)");
        };
        let server_id = hex(sid, "server-id")?;
        let params = f.params(server_id.len())?;
        Ok(LbConfig { params, server_id })
    }
}

impl LbParams {
    /// Parses a balancer's view of one configuration,
    /// `server-id-len=N,nonce-len=N,config-id=N[,key=HEX]`.
    pub fn parse(s: &str) -> Result<Self, LbConfigError> {
        let f = Fields::parse(s, "server-id-len")?;
        let Some(n) = f.server else {
            return bad("server-id-len=N is missing (1 to 15 bytes)");
        };
        let len = n
            .parse::<usize>()
            .or_else(|_| bad(format!("server-id-len '{n}' is not a number; give 1 to 15")))?;
        f.params(len)
    }
}

/// The `KEY=VALUE` fields of a configuration string.
struct Fields<'a> {
    server: Option<&'a str>,
    nonce: Option<&'a str>,
    config: Option<&'a str>,
    key: Option<&'a str>,
}

impl<'a> Fields<'a> {
    /// `server_key` is `server-id` (a server's) or `server-id-len` (a
    /// balancer's).
    fn parse(s: &'a str, server_key: &str) -> Result<Self, LbConfigError> {
        let mut f = Fields {
            server: None,
            nonce: None,
            config: None,
            key: None,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return bad(format!(
                    "'{part}' is not KEY=VALUE; give {server_key}=...,nonce-len=N,config-id=N[,key=HEX]"
                ));
            };
            let k = k.trim();
            let slot = match k {
                "nonce-len" => &mut f.nonce,
                "config-id" => &mut f.config,
                "key" => &mut f.key,
                k if k == server_key => &mut f.server,
                other => {
                    return bad(format!(
                        "unknown key '{other}'; the keys are {server_key}, nonce-len, config-id and key"
                    ));
                }
            };
            if slot.replace(v.trim()).is_some() {
                return bad(format!("'{k}' is given twice; give it once"));
            }
        }
        Ok(f)
    }

    /// The parameters, with a server ID of `server_id_len` bytes.
    fn params(&self, server_id_len: usize) -> Result<LbParams, LbConfigError> {
        let nonce_len = match self.nonce {
            None => return bad("nonce-len=N is missing (4 to 18 bytes)"),
            Some(n) => n
                .parse::<usize>()
                .or_else(|_| bad(format!("nonce-len '{n}' is not a number; give 4 to 18")))?,
        };
        let config_id = match self.config {
            None => return bad("config-id=N is missing (the config rotation bits, 0 to 6)"),
            Some(n) => n
                .parse::<u8>()
                .or_else(|_| bad(format!("config-id '{n}' is not a number; give 0 to 6")))?,
        };
        let key = match self.key {
            None => None,
            Some(k) => {
                let k = hex(k, "key")?;
                let Ok(k) = <[u8; 16]>::try_from(k.as_slice()) else {
                    return bad(format!(
                        "key of {} bytes; AES-128 takes 16 (32 hex digits)",
                        k.len()
                    ));
                };
                Some(k)
            }
        };
        LbParams::new(config_id, server_id_len, nonce_len, key)
    }
}

/// Decodes hex digits.
fn hex(s: &str, what: &str) -> Result<Vec<u8>, LbConfigError> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return bad(format!(
            "{what} '{s}' is not hex; give an even number of hex digits"
        ));
    }
    Ok((0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0))
        .collect())
}

/// A connection ID: at most 20 bytes, on the stack.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cid {
    len: u8,
    bytes: [u8; MAX_CID_LEN],
}

impl Cid {
    /// The CID's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for Cid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A server ID read from a CID: at most 15 bytes, on the stack.
pub type ServerId = Cid;

fn cid(bytes: &[u8]) -> Cid {
    let mut c = Cid {
        len: bytes.len().min(MAX_CID_LEN) as u8,
        bytes: [0; MAX_CID_LEN],
    };
    c.bytes[..usize::from(c.len)].copy_from_slice(&bytes[..usize::from(c.len)]);
    c
}

/// One configuration's encoder and decoder.
pub struct Codec {
    params: LbParams,
    enc: Option<EncryptingKey>,
    dec: Option<DecryptingKey>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("params", &self.params)
            .finish()
    }
}

impl Codec {
    /// The codec for `params`.
    pub fn new(params: &LbParams) -> Self {
        let key =
            |k: &[u8; 16]| UnboundCipherKey::new(&AES_128, k).expect("16 bytes are an AES-128 key");
        let (enc, dec) = match &params.key {
            None => (None, None),
            Some(k) => (
                Some(EncryptingKey::ecb(key(k)).expect("AES-128 supports ECB")),
                Some(DecryptingKey::ecb(key(k)).expect("AES-128 supports ECB")),
            ),
        };
        Codec {
            params: params.clone(),
            enc,
            dec,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &LbParams {
        &self.params
    }

    /// The first octet: config ID and the length after it.
    fn first_octet(&self) -> u8 {
        (self.params.config_id << 5) | ((self.params.cid_len() - 1) as u8 & 0x1f)
    }

    /// The CID for `server_id` and `nonce` (of the configured lengths).
    pub fn encode(&self, server_id: &[u8], nonce: &[u8]) -> Cid {
        assert_eq!(
            server_id.len(),
            self.params.server_id_len,
            "server ID length"
        );
        assert_eq!(nonce.len(), self.params.nonce_len, "nonce length");
        let n = server_id.len() + nonce.len();
        let mut out = [0u8; MAX_CID_LEN];
        out[0] = self.first_octet();
        out[1..1 + server_id.len()].copy_from_slice(server_id);
        out[1 + server_id.len()..1 + n].copy_from_slice(nonce);
        let body = &mut out[1..1 + n];
        match self.params.mode() {
            Mode::Plaintext => {}
            Mode::SinglePass => self.aes(body),
            Mode::FourPass => self.feistel(body, true),
        }
        cid(&out[..1 + n])
    }

    /// The server ID in `cid`, or `None` if `cid` is of another
    /// configuration or too short (unroutable, draft §3).
    pub fn server_id(&self, cid: &[u8]) -> Option<ServerId> {
        let plain = self.decrypt(cid)?;
        Some(self::cid(&plain.as_bytes()[..self.params.server_id_len]))
    }

    /// The server ID and nonce in `cid`, decrypted, or `None` as for
    /// [`Codec::server_id`].
    pub fn decrypt(&self, cid: &[u8]) -> Option<Cid> {
        let n = self.params.server_id_len + self.params.nonce_len;
        let first = *cid.first()?;
        if first >> 5 != self.params.config_id || cid.len() < 1 + n {
            return None;
        }
        let mut body = [0u8; MAX_CID_LEN];
        body[..n].copy_from_slice(&cid[1..1 + n]);
        match self.params.mode() {
            Mode::Plaintext => {}
            Mode::SinglePass => {
                let dec = self.dec.as_ref()?;
                dec.decrypt(&mut body[..16], DecryptionContext::None).ok()?;
            }
            Mode::FourPass => self.feistel(&mut body[..n], false),
        }
        Some(self::cid(&body[..n]))
    }

    /// One AES-128-ECB block in place.
    fn aes(&self, block: &mut [u8]) {
        if let Some(enc) = &self.enc {
            // A 16-byte block in ECB mode cannot fail.
            let _ = enc.encrypt(block);
        }
    }

    /// The round function: AES of the expanded half, truncated.
    fn round(&self, half: &[u8], len: usize, pass: u8) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..half.len()].copy_from_slice(half);
        b[14] = len as u8;
        b[15] = pass;
        self.aes(&mut b);
        b
    }

    /// The four-pass Feistel network (draft §5.4.2) over `body`, forward
    /// (encrypt) or backward (decrypt).
    fn feistel(&self, body: &mut [u8], forward: bool) {
        let n = body.len();
        let half = n.div_ceil(2);
        let odd = n % 2 == 1;
        let mut left = [0u8; 10];
        let mut right = [0u8; 10];
        left[..half].copy_from_slice(&body[..half]);
        right[..half].copy_from_slice(&body[n - half..]);
        let clear_left = |l: &mut [u8; 10]| {
            if odd {
                l[half - 1] &= 0xf0;
            }
        };
        let clear_right = |r: &mut [u8; 10]| {
            if odd {
                r[0] &= 0x0f;
            }
        };
        clear_left(&mut left);
        clear_right(&mut right);
        let xor = |into: &mut [u8; 10], mask: [u8; 16]| {
            for (a, m) in into[..half].iter_mut().zip(mask) {
                *a ^= m;
            }
        };
        if forward {
            xor(&mut right, self.round(&left[..half], n, 1));
            clear_right(&mut right);
            xor(&mut left, self.round(&right[..half], n, 2));
            clear_left(&mut left);
            xor(&mut right, self.round(&left[..half], n, 3));
            clear_right(&mut right);
            xor(&mut left, self.round(&right[..half], n, 4));
            clear_left(&mut left);
        } else {
            xor(&mut left, self.round(&right[..half], n, 4));
            clear_left(&mut left);
            xor(&mut right, self.round(&left[..half], n, 3));
            clear_right(&mut right);
            xor(&mut left, self.round(&right[..half], n, 2));
            clear_left(&mut left);
            xor(&mut right, self.round(&left[..half], n, 1));
            clear_right(&mut right);
        }
        body[..half].copy_from_slice(&left[..half]);
        if odd {
            // The shared middle byte: left's high nibble, right's low one.
            body[half - 1] = left[half - 1] | right[0];
            body[half..].copy_from_slice(&right[1..half]);
        } else {
            body[half..].copy_from_slice(&right[..half]);
        }
    }
}

/// A server's CID source: its ID under one configuration, with fresh
/// nonces (random without a key, a counter from a random start with one,
/// so that no two CIDs repeat).
#[derive(Debug)]
pub struct CidIssuer {
    codec: Codec,
    server_id: Vec<u8>,
    counter: u128,
}

impl CidIssuer {
    /// The issuer for `config`.
    pub fn new(config: &LbConfig) -> Self {
        let mut start = [0u8; 16];
        random(&mut start);
        CidIssuer {
            codec: Codec::new(&config.params),
            server_id: config.server_id.clone(),
            counter: u128::from_be_bytes(start),
        }
    }

    /// The codec (for checking a CID is this server's).
    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    /// This server's ID.
    pub fn server_id(&self) -> &[u8] {
        &self.server_id
    }

    /// A new CID.
    pub fn issue(&mut self) -> Cid {
        let len = self.codec.params.nonce_len;
        let mut nonce = [0u8; 18];
        if self.codec.params.key.is_some() {
            self.counter = self.counter.wrapping_add(1);
            let c = self.counter.to_be_bytes();
            // The low bytes of the counter (a nonce is at most 18 bytes).
            let take = len.min(16);
            nonce[len - take..len].copy_from_slice(&c[16 - take..]);
        } else {
            random(&mut nonce[..len]);
        }
        self.codec.encode(&self.server_id, &nonce[..len])
    }

    /// True if `cid` is one this issuer could have made: its config ID and
    /// length, and this server's ID inside.
    pub fn is_ours(&self, cid: &[u8]) -> bool {
        cid.len() == self.codec.params.cid_len()
            && self
                .codec
                .server_id(cid)
                .is_some_and(|s| s.as_bytes() == self.server_id.as_slice())
    }
}

fn random(buf: &mut [u8]) {
    // aws-lc's RNG fails only if the OS has no entropy source at all.
    aws_lc_rs::rand::fill(buf).expect("the system RNG works");
}

/// Where a balancer sends a packet by its DCID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The server ID in the DCID, under config ID `config_id`.
    Server {
        /// The configuration that decoded it.
        config_id: u8,
        /// The server ID.
        server_id: ServerId,
    },
    /// No configuration decodes the DCID (config ID 0b111 or unknown, or
    /// the DCID is too short): route by a fallback (draft §3.3).
    Unroutable,
}

/// The balancer's side: up to 7 configurations by config ID.
#[derive(Debug, Default)]
pub struct LbRouter {
    codecs: [Option<Codec>; 7],
}

impl LbRouter {
    /// A router for these configurations; fails on two with one config ID.
    pub fn new(params: &[LbParams]) -> Result<Self, LbConfigError> {
        let mut r = LbRouter::default();
        for p in params {
            let slot = &mut r.codecs[usize::from(p.config_id)];
            if slot.is_some() {
                return bad(format!(
                    "config-id {} is given twice; each configuration needs its own",
                    p.config_id
                ));
            }
            *slot = Some(Codec::new(p));
        }
        Ok(r)
    }

    /// The route for a packet with this DCID.
    pub fn route(&self, dcid: &[u8]) -> Route {
        let Some(first) = dcid.first() else {
            return Route::Unroutable;
        };
        let id = first >> 5;
        match self.codecs.get(usize::from(id)).and_then(Option::as_ref) {
            Some(c) => match c.server_id(dcid) {
                Some(server_id) => Route::Server {
                    config_id: id,
                    server_id,
                },
                None => Route::Unroutable,
            },
            None => Route::Unroutable,
        }
    }
}
