//! The client's rustls configuration: one base config per run, and one
//! clone per client with that client's own session store.

use std::sync::Arc;

use rustls::client::{
    ClientSessionStore, Resumption, Tls12ClientSessionValue, Tls12Resumption,
    Tls13ClientSessionValue,
};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, NamedGroup, RootCertStore};
use tlslab_crypto::meter::{self, Meter};
use tlslab_crypto::{pki, provider, store::ClientSessions};

use crate::config::{LoadConfig, ResumeWith, Trust, Workload};
use crate::error::Error;

/// Builds the run's base client configuration (no session store yet). The
/// provider records into `meter`, after `cfg.ablation` (if any) has replaced
/// its ablated stages.
pub(crate) fn base_config(cfg: &LoadConfig, meter: &Arc<Meter>) -> Result<ClientConfig, Error> {
    if cfg.versions.is_empty() {
        return Err(Error::Invalid(
            "no TLS version to offer; use --tls 1.2, 1.3 or 1.2,1.3".into(),
        ));
    }
    let base = (*provider::build(&cfg.versions, &cfg.algorithms)?).clone();
    let ablation = cfg.ablation;
    let prov = if ablation.is_empty() {
        base
    } else {
        meter::ablated(base, &ablation)?
    };
    let prov = Arc::new(meter::metered(prov, meter.clone()));
    let builder = ClientConfig::builder_with_provider(prov.clone())
        .with_protocol_versions(&provider::protocol_versions(&cfg.versions))?;
    let builder = if ablation.is_empty() {
        match &cfg.trust {
            Trust::CaFile(path) => builder.with_root_certificates(pki::load_roots(path)?),
            Trust::Roots(roots) => builder.with_root_certificates(roots.clone()),
            Trust::WebPki => builder.with_root_certificates(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            }),
            Trust::Insecure => builder
                .dangerous()
                .with_custom_certificate_verifier(pki::any_certificate(prov)),
        }
    } else {
        let roots = match &cfg.trust {
            Trust::CaFile(path) => pki::load_roots(path)?,
            Trust::Roots(roots) => roots.clone(),
            Trust::WebPki | Trust::Insecure => {
                return Err(Error::Invalid(format!(
                    "--ablate {ablation} runs only against a lab server whose CA you give: \
                     use --cacert FILE (not --insecure or the webpki roots)"
                )));
            }
        };
        let verifier = ablation.server_cert_verifier(&prov, roots)?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
    };
    let mut config = builder.with_no_client_auth();
    // HTTP/2 offers h2 only, so that a server without it says so (the
    // connection fails as `alpn_not_h2`) instead of falling back.
    config.alpn_protocols = if cfg.http3.is_some() {
        vec![b"h3".to_vec()]
    } else if cfg.http2.is_some() {
        vec![b"h2".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    config.enable_early_data = cfg.early_data;
    // Set explicitly: rustls' default (with its brotli and zlib features)
    // would offer both.
    config.cert_decompressors = tlslab_crypto::compress::decompressors(&cfg.cert_compression);
    config.cert_compressors = Vec::new();
    // TCP and QUIC alike: the QUIC client's configuration is this one.
    config.key_log = tlslab_crypto::keylog::open(cfg.key_log.as_deref())?;
    Ok(config)
}

/// Wraps each client's own store for the run's ablations (with `cache`,
/// all clients share the universal TLS 1.2 session).
pub(crate) type StoreWrapper =
    Box<dyn Fn(Arc<dyn ClientSessionStore>) -> Arc<dyn ClientSessionStore> + Send + Sync>;

/// The run's store wrapper: `cfg.ablation`'s, and for a run that never
/// offers a stored session ([`never_resumes`]) one that keeps none, so that
/// an idle client does not hold the tickets the server sent it (each with
/// its own copy of the server's certificate chain, about 1 KB; servers send
/// two per TLS 1.3 connection). The handshakes are unchanged: the client
/// still announces and receives tickets, it only does not keep them.
pub(crate) fn store_wrapper(cfg: &LoadConfig) -> StoreWrapper {
    let ablated = cfg.ablation.client_store_factory();
    if never_resumes(cfg) {
        Box::new(move |s| Arc::new(KeepNone(ablated(s))) as Arc<dyn ClientSessionStore>)
    } else {
        Box::new(ablated)
    }
}

/// Whether no handshake of the run can offer a stored session: reuse 0 in
/// a closed or open loop of URLs or the SPECweb96 mix, no 0-RTT, no
/// ablation (the browser and replay models resume whenever they hold a
/// session).
pub(crate) fn never_resumes(cfg: &LoadConfig) -> bool {
    cfg.reuse == 0.0
        && !cfg.early_data
        && cfg.ablation.is_empty()
        && matches!(cfg.workload, Workload::Urls | Workload::Specweb96)
}

/// A session store that forgets the sessions it is given (and so never
/// hands one out); the key-exchange hint is kept.
#[derive(Debug)]
struct KeepNone(Arc<dyn ClientSessionStore>);

impl ClientSessionStore for KeepNone {
    fn set_kx_hint(&self, server_name: ServerName<'static>, group: NamedGroup) {
        self.0.set_kx_hint(server_name, group);
    }

    fn kx_hint(&self, server_name: &ServerName<'_>) -> Option<NamedGroup> {
        self.0.kx_hint(server_name)
    }

    fn set_tls12_session(&self, _: ServerName<'static>, _: Tls12ClientSessionValue) {}

    fn tls12_session(&self, _: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        None
    }

    fn remove_tls12_session(&self, server_name: &ServerName<'static>) {
        self.0.remove_tls12_session(server_name);
    }

    fn insert_tls13_ticket(&self, _: ServerName<'static>, _: Tls13ClientSessionValue) {}

    fn take_tls13_ticket(&self, _: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        None
    }
}

/// A client's configuration: the base with `sessions` (wrapped by `wrap`)
/// as its store.
pub(crate) fn client_config(
    base: &ClientConfig,
    sessions: Arc<ClientSessions>,
    wrap: &StoreWrapper,
    resume_with: ResumeWith,
) -> Arc<ClientConfig> {
    let mut c = base.clone();
    c.resumption = Resumption::store(wrap(sessions)).tls12_resumption(match resume_with {
        ResumeWith::Id => Tls12Resumption::SessionIdOnly,
        ResumeWith::Ticket | ResumeWith::Auto => Tls12Resumption::SessionIdOrTickets,
    });
    Arc::new(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Target;

    fn cfg() -> LoadConfig {
        LoadConfig::new(vec![Target::parse("https://localhost:8443/").unwrap()])
    }

    #[test]
    fn only_runs_that_never_resume_drop_their_sessions() {
        assert!(never_resumes(&cfg()), "reuse 0, URLs");
        let mut c = cfg();
        c.workload = Workload::Specweb96;
        assert!(never_resumes(&c));
        c.reuse = 0.5;
        assert!(!never_resumes(&c), "reuse > 0 offers tickets");
        let mut c = cfg();
        c.early_data = true;
        assert!(!never_resumes(&c), "0-RTT needs a ticket");
        for w in [Workload::Ecommerce, Workload::Replay] {
            let mut c = cfg();
            c.workload = w;
            assert!(
                !never_resumes(&c),
                "{w:?} resumes whenever it holds a session"
            );
        }
    }

    #[test]
    fn the_store_of_a_run_that_resumes_is_the_clients_own() {
        let own = ClientSessions::new();
        let mut c = cfg();
        c.reuse = 1.0;
        let s = store_wrapper(&c)(own.clone() as Arc<dyn ClientSessionStore>);
        assert_eq!(
            Arc::as_ptr(&s) as *const (),
            Arc::as_ptr(&own) as *const (),
            "wrapped although sessions are offered"
        );
        // Reuse 0: wrapped; the key-exchange hint still reaches the store.
        let s = store_wrapper(&cfg())(own.clone() as Arc<dyn ClientSessionStore>);
        assert_ne!(Arc::as_ptr(&s) as *const (), Arc::as_ptr(&own) as *const ());
        let name = ServerName::try_from("localhost").unwrap();
        s.set_kx_hint(name.clone(), NamedGroup::X25519);
        assert_eq!(s.kx_hint(&name), Some(NamedGroup::X25519));
        assert_eq!(own.kx_hint(&name), Some(NamedGroup::X25519));
        assert!(s.tls12_session(&name).is_none());
        assert!(s.take_tls13_ticket(&name).is_none());
    }
}
