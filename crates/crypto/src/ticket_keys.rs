//! Ticket keys a cluster shares: nginx's 80-byte `ssl_session_ticket_key`
//! layout, a key ring whose first key encrypts and whose every key decrypts,
//! and the sealing of tickets with an AEAD from aws-lc-rs.
//!
//! # Key layout
//! One key is 80 bytes, as nginx's `ssl_session_ticket_key` file
//! (`openssl rand 80 > ticket.key`):
//!
//! | bytes  | content                         |
//! |--------|---------------------------------|
//! | 0..16  | key name (sent in clear)        |
//! | 16..48 | AES key (nginx: the HMAC key)   |
//! | 48..80 | HMAC key (nginx: the AES key)   |
//!
//! A key file holds one or more keys back to back (80, 160, ... bytes);
//! the first encrypts, all decrypt. (nginx takes one key per file and
//! several `ssl_session_ticket_key` lines; the same bytes concatenated are
//! one tlslab file.)
//!
//! # Sealing
//! tlslab seals with AES-256-GCM rather than nginx's AES-CBC + HMAC. The
//! AEAD key is derived from the 80 bytes with HKDF-SHA256 (RFC 5869):
//! salt = the HMAC key (bytes 48..80), input keying material = the AES key
//! (bytes 16..48), info = `"tlslab ticket key v1"` followed by the 16-byte
//! name; the output is the 32-byte AES-256-GCM key. Tickets are therefore
//! not interchangeable with nginx's, but the key files are.
//!
//! A ticket is laid out as RFC 5077 §4 suggests, key name first:
//! `key_name[16] || nonce[12] || ciphertext || tag[16]`, with the key name
//! as additional authenticated data. Nonces are random (96 bits); a key
//! should seal fewer than 2^32 tickets, i.e. be rotated long before that.
//!
//! Key material never leaves this module except as the bytes its owner
//! gave it; `Debug` shows only key names.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use parking_lot::RwLock;

use crate::{Error, Result};

/// The length of one key, as nginx's `ssl_session_ticket_key`.
pub const KEY_LEN: usize = 80;
/// The length of a key name.
pub const NAME_LEN: usize = 16;
const TAG_LEN: usize = 16;
const INFO: &[u8] = b"tlslab ticket key v1";

/// The raw bytes of one key (name, AES key, HMAC key).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyMaterial(pub [u8; KEY_LEN]);

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyMaterial(name {})", hex(self.name()))
    }
}

impl KeyMaterial {
    /// A fresh random key.
    pub fn generate() -> Result<Self> {
        let mut k = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut k)
            .map_err(|_| Error::Generate("the system random generator failed".into()))?;
        Ok(KeyMaterial(k))
    }

    /// The 16-byte key name.
    pub fn name(&self) -> &[u8] {
        &self.0[..NAME_LEN]
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Splits the contents of a key file into keys: a non-empty multiple of 80
/// bytes. `path` names the file in errors.
pub fn parse_key_file(bytes: &[u8], path: &str) -> Result<Vec<KeyMaterial>> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(KEY_LEN) {
        return Err(Error::File {
            path: path.into(),
            problem: format!(
                "a ticket key file holds one or more 80-byte keys (16-byte name, 32-byte AES key, 32-byte HMAC key), but this one is {} bytes; make one with `openssl rand 80 > FILE` (concatenate files for several keys, the first encrypts)",
                bytes.len()
            ),
        });
    }
    Ok(bytes
        .chunks_exact(KEY_LEN)
        .map(|c| {
            let mut k = [0u8; KEY_LEN];
            k.copy_from_slice(c);
            KeyMaterial(k)
        })
        .collect())
}

struct SealingKey {
    name: [u8; NAME_LEN],
    aead: LessSafeKey,
}

impl SealingKey {
    fn derive(m: &KeyMaterial) -> Result<Self> {
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(m.name());
        let aes = &m.0[NAME_LEN..NAME_LEN + 32];
        let hmac = &m.0[NAME_LEN + 32..];
        let mut info = INFO.to_vec();
        info.extend_from_slice(&name);
        let info = [info.as_slice()];
        let prk = Salt::new(HKDF_SHA256, hmac).extract(aes);
        let okm = prk
            .expand(&info, &AES_256_GCM)
            .map_err(|_| Error::Generate("HKDF failed to derive a ticket key".into()))?;
        Ok(SealingKey {
            name,
            aead: LessSafeKey::new(UnboundKey::from(okm)),
        })
    }
}

struct KeySet {
    keys: Vec<SealingKey>,
    encrypt: usize,
    version: u64,
    installed: Instant,
}

/// Counters of a [`TicketKeyRing`], as of one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TicketKeyStats {
    /// The version of the installed key set (a file's load count, or the
    /// version stored in Redis).
    pub version: u64,
    /// Seconds since the installed key set was installed here.
    pub age_secs: u64,
    /// How many keys decrypt (the encrypting one included).
    pub keys: u64,
    /// Key sets installed after the first (rotations and reloads).
    pub rotations: u64,
    /// Tickets sealed.
    pub sealed: u64,
    /// Tickets opened (accepted).
    pub opened: u64,
    /// Tickets whose key name matched no key (another cluster's, or a key
    /// that aged out).
    pub name_mismatches: u64,
    /// Tickets whose name matched but which did not decrypt (tampered or
    /// truncated).
    pub bad_tickets: u64,
}

/// An ordered set of ticket keys, replaceable while in use: one key
/// encrypts, all of them decrypt. Lookups take a read lock on an `Arc`.
pub struct TicketKeyRing {
    set: RwLock<Arc<KeySet>>,
    lifetime: Duration,
    rng: SystemRandom,
    installs: AtomicU64,
    sealed: AtomicU64,
    opened: AtomicU64,
    name_mismatches: AtomicU64,
    bad_tickets: AtomicU64,
}

impl std::fmt::Debug for TicketKeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.set.read().clone();
        let names: Vec<String> = set.keys.iter().map(|k| hex(&k.name)).collect();
        f.debug_struct("TicketKeyRing")
            .field("names", &names)
            .field("encrypt", &set.encrypt)
            .field("version", &set.version)
            .finish()
    }
}

impl TicketKeyRing {
    /// A ring of `keys` (at least one) at `version`, where `keys[encrypt]`
    /// encrypts; tickets say they live `lifetime`.
    pub fn new(
        keys: &[KeyMaterial],
        encrypt: usize,
        version: u64,
        lifetime: Duration,
    ) -> Result<Arc<Self>> {
        let set = Self::key_set(keys, encrypt, version)?;
        Ok(Arc::new(TicketKeyRing {
            set: RwLock::new(Arc::new(set)),
            lifetime,
            rng: SystemRandom::new(),
            installs: AtomicU64::new(0),
            sealed: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            name_mismatches: AtomicU64::new(0),
            bad_tickets: AtomicU64::new(0),
        }))
    }

    fn key_set(keys: &[KeyMaterial], encrypt: usize, version: u64) -> Result<KeySet> {
        if keys.is_empty() {
            return Err(Error::Incompatible("a ticket key ring needs a key".into()));
        }
        if encrypt >= keys.len() {
            return Err(Error::Incompatible(format!(
                "ticket key {encrypt} cannot encrypt: the ring holds {} keys",
                keys.len()
            )));
        }
        Ok(KeySet {
            keys: keys.iter().map(SealingKey::derive).collect::<Result<_>>()?,
            encrypt,
            version,
            installed: Instant::now(),
        })
    }

    /// Replaces the keys. Tickets sealed by a key no longer in `keys` are
    /// refused from now on.
    pub fn install(&self, keys: &[KeyMaterial], encrypt: usize, version: u64) -> Result<()> {
        let set = Self::key_set(keys, encrypt, version)?;
        *self.set.write() = Arc::new(set);
        self.installs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The installed version.
    pub fn version(&self) -> u64 {
        self.set.read().version
    }

    /// The lifetime tickets announce, in seconds.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The counters now.
    pub fn stats(&self) -> TicketKeyStats {
        let set = self.set.read().clone();
        TicketKeyStats {
            version: set.version,
            age_secs: set.installed.elapsed().as_secs(),
            keys: set.keys.len() as u64,
            rotations: self.installs.load(Ordering::Relaxed),
            sealed: self.sealed.load(Ordering::Relaxed),
            opened: self.opened.load(Ordering::Relaxed),
            name_mismatches: self.name_mismatches.load(Ordering::Relaxed),
            bad_tickets: self.bad_tickets.load(Ordering::Relaxed),
        }
    }

    /// Seals `plain` with the encrypting key.
    pub fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let set = self.set.read().clone();
        let key = &set.keys[set.encrypt];
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + TAG_LEN);
        out.extend_from_slice(&key.name);
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        key.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&key.name),
                &mut body,
            )
            .ok()?;
        out.extend_from_slice(&body);
        self.sealed.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    /// True if `ticket` starts with the name of a key of the ring: a cheap
    /// check (no decryption, no counters) that the ticket may open here.
    /// Admission control uses it to tell a resumption it can serve from one
    /// that will become a full handshake.
    pub fn knows_name(&self, ticket: &[u8]) -> bool {
        ticket.len() >= NAME_LEN + NONCE_LEN + TAG_LEN
            && self
                .set
                .read()
                .keys
                .iter()
                .any(|k| k.name == ticket[..NAME_LEN])
    }

    /// Opens a ticket sealed by any key of the ring.
    pub fn open(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < NAME_LEN + NONCE_LEN + TAG_LEN {
            self.bad_tickets.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let (name, rest) = ticket.split_at(NAME_LEN);
        let set = self.set.read().clone();
        let Some(key) = set.keys.iter().find(|k| k.name == name) else {
            self.name_mismatches.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = sealed.to_vec();
        match key.aead.open_in_place(nonce, Aad::from(name), &mut body) {
            Ok(plain) => {
                let n = plain.len();
                body.truncate(n);
                self.opened.fetch_add(1, Ordering::Relaxed);
                Some(body)
            }
            Err(_) => {
                self.bad_tickets.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(keys: &[KeyMaterial]) -> Arc<TicketKeyRing> {
        TicketKeyRing::new(keys, 0, 1, Duration::from_secs(3600)).unwrap()
    }

    #[test]
    fn same_keys_open_each_others_tickets_and_other_keys_do_not() {
        let k = KeyMaterial::generate().unwrap();
        let (a, b) = (
            ring(std::slice::from_ref(&k)),
            ring(std::slice::from_ref(&k)),
        );
        let t = a.seal(b"session state").unwrap();
        assert_eq!(&t[..NAME_LEN], k.name());
        assert_eq!(b.open(&t).as_deref(), Some(&b"session state"[..]));
        let other = ring(&[KeyMaterial::generate().unwrap()]);
        assert_eq!(other.open(&t), None);
        assert_eq!(other.stats().name_mismatches, 1);
        // Tampering is caught by the tag.
        let mut bad = t.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(b.open(&bad), None);
        assert_eq!(b.stats().bad_tickets, 1);
        assert_eq!(b.open(&t[..20]), None);
    }

    #[test]
    fn first_key_encrypts_all_decrypt_and_aged_out_keys_are_refused() {
        let (old, new) = (
            KeyMaterial::generate().unwrap(),
            KeyMaterial::generate().unwrap(),
        );
        let r = ring(std::slice::from_ref(&old));
        let t_old = r.seal(b"x").unwrap();
        r.install(&[new.clone(), old.clone()], 0, 2).unwrap();
        let t_new = r.seal(b"y").unwrap();
        assert_eq!(&t_new[..NAME_LEN], new.name());
        assert!(r.open(&t_old).is_some() && r.open(&t_new).is_some());
        // The old key ages out.
        r.install(std::slice::from_ref(&new), 0, 3).unwrap();
        assert_eq!(r.open(&t_old), None);
        assert!(r.open(&t_new).is_some());
        let s = r.stats();
        assert_eq!((s.version, s.keys, s.name_mismatches), (3, 1, 1));
        // A published key that does not encrypt yet still decrypts.
        r.install(&[old.clone(), new.clone()], 1, 4).unwrap();
        assert_eq!(&r.seal(b"z").unwrap()[..NAME_LEN], new.name());
    }

    #[test]
    fn derivation_is_deterministic_and_uses_all_80_bytes() {
        let k = KeyMaterial([7u8; KEY_LEN]);
        let t = ring(std::slice::from_ref(&k)).seal(b"p").unwrap();
        assert!(ring(std::slice::from_ref(&k)).open(&t).is_some());
        for i in [NAME_LEN, NAME_LEN + 31, NAME_LEN + 32, KEY_LEN - 1] {
            let mut m = k.clone();
            m.0[i] ^= 0x80;
            assert_eq!(ring(&[m]).open(&t), None, "byte {i} is not used");
        }
    }

    #[test]
    fn key_files_are_multiples_of_80_bytes() {
        assert_eq!(parse_key_file(&[1u8; 160], "f").unwrap().len(), 2);
        for n in [0usize, 48, 81] {
            let e = parse_key_file(&vec![0u8; n], "f").unwrap_err().to_string();
            assert!(e.contains("openssl rand 80"), "{e}");
        }
        let dbg = format!("{:?}", KeyMaterial([0xab; KEY_LEN]));
        assert_eq!(dbg.matches("ab").count(), NAME_LEN, "{dbg}");
    }
}
