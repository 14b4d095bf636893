//! The client's rustls configuration: one base config per run, and one
//! clone per client with that client's own session store.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{Resumption, Tls12Resumption};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tlslab_crypto::{pki, provider, store::ClientSessions};

use crate::{Error, LoadConfig, ResumeWith, Trust};

/// Builds the run's base client configuration (no session store yet).
pub(crate) fn base_config(cfg: &LoadConfig) -> Result<ClientConfig, Error> {
    if cfg.versions.is_empty() {
        return Err(Error::Config(
            "no TLS version to offer; use --tls 1.2, 1.3 or 1.2,1.3".into(),
        ));
    }
    let prov = provider::build(&cfg.versions, &cfg.algorithms)?;
    let builder = ClientConfig::builder_with_provider(prov.clone())
        .with_protocol_versions(&provider::protocol_versions(&cfg.versions))?;
    let builder = match &cfg.trust {
        Trust::CaFile(path) => builder.with_root_certificates(pki::load_roots(path)?),
        Trust::Roots(roots) => builder.with_root_certificates(roots.clone()),
        Trust::WebPki => builder.with_root_certificates(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        }),
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(prov))),
    };
    let mut config = builder.with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.enable_early_data = cfg.early_data;
    Ok(config)
}

/// A client's configuration: the base with `sessions` as its store.
pub(crate) fn client_config(
    base: &ClientConfig,
    sessions: Arc<ClientSessions>,
    resume_with: ResumeWith,
) -> Arc<ClientConfig> {
    let mut c = base.clone();
    c.resumption = Resumption::store(sessions).tls12_resumption(match resume_with {
        ResumeWith::Id => Tls12Resumption::SessionIdOnly,
        ResumeWith::Ticket | ResumeWith::Auto => Tls12Resumption::SessionIdOrTickets,
    });
    Arc::new(c)
}

/// The server name to verify and send as SNI: `sni` if given, else the
/// target host (an IP address sends no SNI, as rustls does).
pub(crate) fn server_name(sni: Option<&str>, host: &str) -> Result<ServerName<'static>, Error> {
    let name = sni.unwrap_or(host);
    ServerName::try_from(name.to_string()).map_err(|_| {
        Error::Config(format!(
            "'{name}' is not a valid TLS server name; give a DNS name or IP address with --sni"
        ))
    })
}

/// `--insecure`: accepts any certificate, but still checks the handshake
/// signatures, so the client does the same public-key work as a verifying
/// one minus the chain check.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
