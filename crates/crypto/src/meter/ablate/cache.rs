//! The perfect session cache of seed 001 §2.3.4: the first session stored
//! becomes the "universal session", every later store is a no-op, and
//! every lookup returns it.

use std::sync::{Arc, OnceLock};

use rustls::NamedGroup;
use rustls::client::{ClientSessionStore, Tls12ClientSessionValue, Tls13ClientSessionValue};
use rustls::pki_types::ServerName;
use rustls::server::StoresServerSessions;

/// TLS 1.2 wire version, as rustls encodes it in a stored session.
const TLS12: [u8; 2] = [0x03, 0x03];

/// The protocol version of a rustls `ServerSessionValue` encoding: an
/// optional SNI (flag byte, then a u8-length name), then the version.
fn version_of(value: &[u8]) -> Option<[u8; 2]> {
    let at = match value.first()? {
        0 => 1,
        1 => 2 + usize::from(*value.get(1)?),
        _ => return None,
    };
    Some([*value.get(at)?, *value.get(at + 1)?])
}

/// Server side. TLS 1.2 sessions (looked up with `get`) use the universal
/// session. TLS 1.3 tickets (looked up with `take`) cannot: a rustls client
/// cannot offer one ticket twice, so they go to the real store unchanged.
#[derive(Debug)]
pub(crate) struct PerfectStore {
    universal: OnceLock<Vec<u8>>,
    tls13: Arc<dyn StoresServerSessions>,
}

impl PerfectStore {
    pub(crate) fn new(real: Arc<dyn StoresServerSessions>) -> Arc<PerfectStore> {
        Arc::new(PerfectStore {
            universal: OnceLock::new(),
            tls13: real,
        })
    }
}

impl StoresServerSessions for PerfectStore {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        if version_of(&value) == Some(TLS12) {
            let _ = self.universal.set(value);
            true
        } else {
            self.tls13.put(key, value)
        }
    }
    fn get(&self, _key: &[u8]) -> Option<Vec<u8>> {
        self.universal.get().cloned()
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.tls13.take(key)
    }
    fn can_cache(&self) -> bool {
        true
    }
}

/// Client side: whenever the wrapped store would offer a TLS 1.2 session
/// (so its offer policy still decides full vs. resumed), the universal one
/// (the first ever stored) is offered instead.
#[derive(Debug)]
pub(crate) struct UniversalClientStore {
    inner: Arc<dyn ClientSessionStore>,
    universal: Arc<OnceLock<Tls12ClientSessionValue>>,
}

impl UniversalClientStore {
    pub(crate) fn new(inner: Arc<dyn ClientSessionStore>) -> Arc<UniversalClientStore> {
        Self::sharing(inner, Arc::default())
    }

    /// A wrapper around `inner` whose universal session is `universal`,
    /// shared with other clients' wrappers.
    pub(crate) fn sharing(
        inner: Arc<dyn ClientSessionStore>,
        universal: Arc<OnceLock<Tls12ClientSessionValue>>,
    ) -> Arc<UniversalClientStore> {
        Arc::new(UniversalClientStore { inner, universal })
    }
}

impl ClientSessionStore for UniversalClientStore {
    fn set_kx_hint(&self, server_name: ServerName<'static>, group: NamedGroup) {
        self.inner.set_kx_hint(server_name, group)
    }
    fn kx_hint(&self, server_name: &ServerName<'_>) -> Option<NamedGroup> {
        self.inner.kx_hint(server_name)
    }
    fn set_tls12_session(&self, server_name: ServerName<'static>, value: Tls12ClientSessionValue) {
        let _ = self.universal.set(value.clone());
        self.inner.set_tls12_session(server_name, value)
    }
    fn tls12_session(&self, server_name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.inner.tls12_session(server_name)?;
        self.universal.get().cloned()
    }
    fn remove_tls12_session(&self, server_name: &ServerName<'static>) {
        self.inner.remove_tls12_session(server_name)
    }
    fn insert_tls13_ticket(
        &self,
        server_name: ServerName<'static>,
        value: Tls13ClientSessionValue,
    ) {
        self.inner.insert_tls13_ticket(server_name, value)
    }
    fn take_tls13_ticket(
        &self,
        server_name: &ServerName<'static>,
    ) -> Option<Tls13ClientSessionValue> {
        self.inner.take_tls13_ticket(server_name)
    }
}
