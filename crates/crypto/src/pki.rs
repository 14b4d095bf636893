//! Certificates: generating a CA and a server chain (`tlslab certs`), and
//! loading PEM material with errors that name the file and the fix.

use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, RsaKeySize, SignatureAlgorithm,
};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::{Error, Result};

/// The key algorithm of a generated certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyType {
    /// RSA with a 2048-bit modulus.
    Rsa2048,
    /// RSA with a 3072-bit modulus.
    Rsa3072,
    /// RSA with a 4096-bit modulus.
    Rsa4096,
    /// ECDSA on P-256.
    EcdsaP256,
    /// ECDSA on P-384.
    EcdsaP384,
    /// Ed25519.
    Ed25519,
}

impl KeyType {
    /// Every key type, in the order `--help` lists them.
    pub const ALL: [KeyType; 6] = [
        KeyType::Rsa2048,
        KeyType::Rsa3072,
        KeyType::Rsa4096,
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::Ed25519,
    ];

    /// The flag spelling (`ecdsa-p256`).
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Rsa2048 => "rsa2048",
            KeyType::Rsa3072 => "rsa3072",
            KeyType::Rsa4096 => "rsa4096",
            KeyType::EcdsaP256 => "ecdsa-p256",
            KeyType::EcdsaP384 => "ecdsa-p384",
            KeyType::Ed25519 => "ed25519",
        }
    }

    fn alg(self) -> &'static SignatureAlgorithm {
        match self {
            KeyType::Rsa2048 | KeyType::Rsa3072 | KeyType::Rsa4096 => &rcgen::PKCS_RSA_SHA256,
            KeyType::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyType::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            KeyType::Ed25519 => &rcgen::PKCS_ED25519,
        }
    }

    fn generate(self) -> Result<KeyPair> {
        let r = match self {
            KeyType::Rsa2048 => KeyPair::generate_rsa_for(self.alg(), RsaKeySize::_2048),
            KeyType::Rsa3072 => KeyPair::generate_rsa_for(self.alg(), RsaKeySize::_3072),
            KeyType::Rsa4096 => KeyPair::generate_rsa_for(self.alg(), RsaKeySize::_4096),
            _ => KeyPair::generate_for(self.alg()),
        };
        r.map_err(|e| Error::Generate(format!("{} key: {e}", self.name())))
    }
}

impl FromStr for KeyType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        KeyType::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| Error::UnknownName {
                what: "key type",
                name: s.into(),
                choices: KeyType::ALL.map(|k| k.name()).join(", "),
            })
    }
}

impl std::fmt::Display for KeyType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A generated CA and a server certificate it signed, all as PEM.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The key type of both the CA and the server certificate.
    pub key_type: KeyType,
    /// The CA certificate: the trust anchor clients load with `--cacert`.
    pub ca_cert_pem: String,
    /// The CA private key (PKCS#8), kept so more leaves can be signed.
    pub ca_key_pem: String,
    /// The server chain: leaf first, then the CA.
    pub chain_pem: String,
    /// The server private key (PKCS#8).
    pub key_pem: String,
}

/// The file names [`Generated::write_to`] uses.
pub const CA_CERT_FILE: &str = "ca.pem";
/// The CA key file name.
pub const CA_KEY_FILE: &str = "ca.key";
/// The server chain file name.
pub const CHAIN_FILE: &str = "server.pem";
/// The server key file name.
pub const KEY_FILE: &str = "server.key";

/// Generates a CA and a server certificate for `sans` (DNS names or IP
/// addresses). An empty `sans` means `localhost` and `127.0.0.1`.
pub fn generate(key_type: KeyType, sans: &[String]) -> Result<Generated> {
    let sans: Vec<String> = if sans.is_empty() {
        vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
    } else {
        sans.to_vec()
    };
    let ca_key = key_type.generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("tlslab test CA ({key_type})"));
    dn.push(DnType::OrganizationName, "tlslab");
    ca_params.distinguished_name = dn;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(gen_err)?;
    let issuer = rcgen::Issuer::new(ca_params, &ca_key);

    let leaf_key = key_type.generate()?;
    let mut leaf_params = CertificateParams::new(sans.clone()).map_err(gen_err)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, sans[0].clone());
    leaf_params.distinguished_name = dn;
    leaf_params.is_ca = IsCa::ExplicitNoCa;
    leaf_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).map_err(gen_err)?;

    Ok(Generated {
        key_type,
        ca_cert_pem: ca_cert.pem(),
        ca_key_pem: ca_key.serialize_pem(),
        chain_pem: format!("{}{}", leaf.pem(), ca_cert.pem()),
        key_pem: leaf_key.serialize_pem(),
    })
}

fn gen_err(e: rcgen::Error) -> Error {
    Error::Generate(e.to_string())
}

impl Generated {
    /// Writes `ca.pem`, `ca.key`, `server.pem` and `server.key` into `dir`,
    /// creating it. Keys are written with mode 0600. Returns the paths written.
    pub fn write_to(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        fs::create_dir_all(dir)
            .map_err(|e| file_err(dir, format!("cannot create directory: {e}")))?;
        let files = [
            (CA_CERT_FILE, &self.ca_cert_pem, false),
            (CA_KEY_FILE, &self.ca_key_pem, true),
            (CHAIN_FILE, &self.chain_pem, false),
            (KEY_FILE, &self.key_pem, true),
        ];
        let mut written = Vec::new();
        for (name, body, secret) in files {
            let path = dir.join(name);
            fs::write(&path, body).map_err(|e| file_err(&path, format!("cannot write: {e}")))?;
            if secret {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
                    .map_err(|e| file_err(&path, format!("cannot set permissions: {e}")))?;
            }
            written.push(path);
        }
        Ok(written)
    }

    /// The server chain as DER.
    pub fn chain_der(&self) -> Result<Vec<CertificateDer<'static>>> {
        certs_from_pem("<generated chain>", self.chain_pem.as_bytes())
    }

    /// The server key as DER.
    pub fn key_der(&self) -> Result<PrivateKeyDer<'static>> {
        key_from_pem("<generated key>", self.key_pem.as_bytes())
    }

    /// A root store holding only this CA.
    pub fn roots(&self) -> Result<RootCertStore> {
        roots_from_pem("<generated CA>", self.ca_cert_pem.as_bytes())
    }
}

fn file_err(path: &Path, problem: String) -> Error {
    Error::File {
        path: path.display().to_string(),
        problem,
    }
}

/// The largest PEM file read (a chain of a few certificates is a few KiB).
const MAX_PEM_FILE: u64 = 16 * 1024 * 1024;

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    // Bounded: the file may be anything, /dev/zero included (issue 20).
    fs::File::open(path)
        .and_then(|f| f.take(MAX_PEM_FILE + 1).read_to_end(&mut bytes))
        .map_err(|e| {
            file_err(
                path,
                format!("cannot read {what} ({e}); check the path, or generate files with `tlslab certs --out DIR`"),
            )
        })?;
    if bytes.len() as u64 > MAX_PEM_FILE {
        return Err(file_err(
            path,
            format!("{what} is larger than 16 MiB, which no PEM file is; check the path"),
        ));
    }
    Ok(bytes)
}

fn certs_from_pem(name: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::File {
            path: name.into(),
            problem: format!("bad PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(Error::File {
            path: name.into(),
            problem: "no PEM certificate found; generate one with `tlslab certs --out DIR`".into(),
        });
    }
    Ok(certs)
}

fn key_from_pem(name: &str, pem: &[u8]) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| Error::File {
        path: name.into(),
        problem: match e {
            rustls_pki_types::pem::Error::NoItemsFound => {
                "no PEM private key found; generate one with `tlslab certs --out DIR`".into()
            }
            other => format!("bad PEM private key: {other}"),
        },
    })
}

fn roots_from_pem(name: &str, pem: &[u8]) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in certs_from_pem(name, pem)? {
        roots.add(cert).map_err(|e| Error::File {
            path: name.into(),
            problem: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// Loads a PEM certificate chain (leaf first).
pub fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    certs_from_pem(
        &path.display().to_string(),
        &read(path, "certificate file")?,
    )
}

/// Loads a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    key_from_pem(&path.display().to_string(), &read(path, "key file")?)
}

/// Loads the CA certificates in a PEM file into a root store.
pub fn load_roots(path: &Path) -> Result<RootCertStore> {
    roots_from_pem(&path.display().to_string(), &read(path, "CA file")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_type_generates_a_loadable_chain() {
        for kt in [
            KeyType::Rsa2048,
            KeyType::EcdsaP256,
            KeyType::EcdsaP384,
            KeyType::Ed25519,
        ] {
            let g = generate(kt, &[]).unwrap();
            assert_eq!(g.chain_der().unwrap().len(), 2, "{kt}");
            g.key_der().unwrap();
            assert_eq!(g.roots().unwrap().len(), 1);
        }
    }

    #[test]
    fn write_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let g = generate(KeyType::EcdsaP256, &["example.test".into()]).unwrap();
        g.write_to(dir.path()).unwrap();
        assert_eq!(load_chain(&dir.path().join(CHAIN_FILE)).unwrap().len(), 2);
        load_key(&dir.path().join(KEY_FILE)).unwrap();
        load_roots(&dir.path().join(CA_CERT_FILE)).unwrap();
    }

    #[test]
    fn cert_file_without_key_says_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let g = generate(KeyType::EcdsaP256, &[]).unwrap();
        g.write_to(dir.path()).unwrap();
        let err = load_key(&dir.path().join(CHAIN_FILE))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no PEM private key found"), "{err}");
        assert!(err.contains("tlslab certs"), "{err}");
        let err = load_chain(&dir.path().join("missing.pem"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.pem"), "{err}");
    }

    #[test]
    fn key_type_names_round_trip() {
        for kt in KeyType::ALL {
            assert_eq!(kt.name().parse::<KeyType>().unwrap(), kt);
        }
        assert!("dsa".parse::<KeyType>().is_err());
    }
}

/// A certificate verifier that accepts any server certificate but still
/// checks the handshake signatures with it, so a client does the same
/// public-key work as a verifying one minus the chain check. Only for
/// explicit insecure modes: `load --insecure` and the dispatcher's TLS
/// liveness check without `--health-cacert`.
pub fn any_certificate(provider: Arc<CryptoProvider>) -> Arc<dyn ServerCertVerifier> {
    Arc::new(AnyCertificate(provider))
}

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
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
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
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
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
