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
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
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
    /// ML-DSA-44 (FIPS 204, security category 2): 1,312-byte public key,
    /// 2,420-byte signature. TLS 1.3 only (draft-ietf-tls-mldsa).
    MlDsa44,
    /// ML-DSA-65 (category 3): 1,952-byte public key, 3,309-byte signature.
    MlDsa65,
    /// ML-DSA-87 (category 5): 2,592-byte public key, 4,627-byte signature.
    MlDsa87,
}

impl KeyType {
    /// Every key type, in the order `--help` lists them.
    pub const ALL: [KeyType; 9] = [
        KeyType::Rsa2048,
        KeyType::Rsa3072,
        KeyType::Rsa4096,
        KeyType::EcdsaP256,
        KeyType::EcdsaP384,
        KeyType::Ed25519,
        KeyType::MlDsa44,
        KeyType::MlDsa65,
        KeyType::MlDsa87,
    ];

    /// Returns true if and only if this is a post-quantum (ML-DSA) key,
    /// which TLS 1.2 cannot use.
    pub fn is_post_quantum(self) -> bool {
        matches!(self, KeyType::MlDsa44 | KeyType::MlDsa65 | KeyType::MlDsa87)
    }

    /// The flag spelling (`ecdsa-p256`).
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Rsa2048 => "rsa2048",
            KeyType::Rsa3072 => "rsa3072",
            KeyType::Rsa4096 => "rsa4096",
            KeyType::EcdsaP256 => "ecdsa-p256",
            KeyType::EcdsaP384 => "ecdsa-p384",
            KeyType::Ed25519 => "ed25519",
            KeyType::MlDsa44 => "mldsa44",
            KeyType::MlDsa65 => "mldsa65",
            KeyType::MlDsa87 => "mldsa87",
        }
    }

    fn alg(self) -> &'static SignatureAlgorithm {
        match self {
            KeyType::Rsa2048 | KeyType::Rsa3072 | KeyType::Rsa4096 => &rcgen::PKCS_RSA_SHA256,
            KeyType::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyType::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            KeyType::Ed25519 => &rcgen::PKCS_ED25519,
            KeyType::MlDsa44 => &rcgen::PKCS_ML_DSA_44,
            KeyType::MlDsa65 => &rcgen::PKCS_ML_DSA_65,
            KeyType::MlDsa87 => &rcgen::PKCS_ML_DSA_87,
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
    /// The key type of the server certificate (and of the CA when there is
    /// no intermediate).
    pub key_type: KeyType,
    /// The key type of the intermediate CA (and of the root above it), when
    /// the chain has one ([`generate_chain`]).
    pub intermediate: Option<KeyType>,
    /// The CA certificate: the trust anchor clients load with `--cacert`
    /// (the root, when there is an intermediate).
    pub ca_cert_pem: String,
    /// The CA private key (PKCS#8), kept so more leaves can be signed (the
    /// root's, when there is an intermediate).
    pub ca_key_pem: String,
    /// The server chain: leaf first, then the CA (or the intermediate, whose
    /// root is not sent, as in the Web PKI).
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
/// addresses). An empty `sans` means `localhost` and `127.0.0.1`. The chain
/// the server sends is the leaf and the CA, both of `key_type`.
pub fn generate(key_type: KeyType, sans: &[String]) -> Result<Generated> {
    generate_chain(key_type, None, sans)
}

/// Like [`generate`], with an intermediate CA of another (or the same) key
/// type between the leaf and a root of that type: the chain sent is the
/// leaf (`leaf` key, signed by the intermediate) and the intermediate
/// (signed by the root), and the root is the trust anchor, not sent. So a
/// mixed chain, such as an ML-DSA-44 leaf under an ECDSA P-256
/// intermediate, carries an ML-DSA public key and an ECDSA signature in the
/// leaf, and an ECDSA key and signature in the intermediate. `None` is
/// [`generate`]'s two-certificate chain.
pub fn generate_chain(
    leaf: KeyType,
    intermediate: Option<KeyType>,
    sans: &[String],
) -> Result<Generated> {
    let sans: Vec<String> = if sans.is_empty() {
        vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
    } else {
        sans.to_vec()
    };
    let ca_type = intermediate.unwrap_or(leaf);
    let ca_key = ca_type.generate()?;
    let root_params = ca_params(&format!("tlslab test CA ({ca_type})"))?;
    let ca_cert = root_params.self_signed(&ca_key).map_err(gen_err)?;
    let root_issuer = rcgen::Issuer::new(root_params, &ca_key);
    // With an intermediate, the leaf's issuer is it; else the root.
    let mid = match intermediate {
        Some(t) => {
            let key = t.generate()?;
            let params = ca_params(&format!("tlslab test intermediate CA ({t})"))?;
            let cert = params.signed_by(&key, &root_issuer).map_err(gen_err)?;
            Some((key, params, cert))
        }
        None => None,
    };

    let leaf_key = leaf.generate()?;
    let mut leaf_params = CertificateParams::new(sans.clone()).map_err(gen_err)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, sans[0].clone());
    leaf_params.distinguished_name = dn;
    leaf_params.is_ca = IsCa::ExplicitNoCa;
    leaf_params.key_usages = if leaf.is_post_quantum() {
        vec![KeyUsagePurpose::DigitalSignature]
    } else {
        vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ]
    };
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let (leaf_cert, second) = match mid {
        Some((key, params, cert)) => {
            let issuer = rcgen::Issuer::new(params, &key);
            let l = leaf_params.signed_by(&leaf_key, &issuer).map_err(gen_err)?;
            (l, cert.pem())
        }
        None => {
            let l = leaf_params
                .signed_by(&leaf_key, &root_issuer)
                .map_err(gen_err)?;
            (l, ca_cert.pem())
        }
    };

    Ok(Generated {
        key_type: leaf,
        intermediate,
        ca_cert_pem: ca_cert.pem(),
        ca_key_pem: ca_key.serialize_pem(),
        chain_pem: format!("{}{}", leaf_cert.pem(), second),
        key_pem: leaf_key.serialize_pem(),
    })
}

fn ca_params(common_name: &str) -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "tlslab");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
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
    fn ml_dsa_and_mixed_chains_generate() {
        for (leaf, mid) in [
            (KeyType::MlDsa44, None),
            (KeyType::MlDsa65, Some(KeyType::MlDsa65)),
            (KeyType::MlDsa44, Some(KeyType::EcdsaP256)),
            (KeyType::EcdsaP256, Some(KeyType::MlDsa87)),
        ] {
            let g = generate_chain(leaf, mid, &[]).unwrap();
            let chain = g.chain_der().unwrap();
            assert_eq!(chain.len(), 2, "{leaf} {mid:?}");
            g.key_der().unwrap();
            assert_eq!(g.roots().unwrap().len(), 1);
            // The chain's second certificate is the intermediate, not the root.
            let root = roots_from_pem("ca", g.ca_cert_pem.as_bytes()).unwrap();
            assert_eq!(root.len(), 1);
            let root_der = certs_from_pem("ca", g.ca_cert_pem.as_bytes()).unwrap();
            assert_eq!(chain[1] == root_der[0], mid.is_none(), "{leaf} {mid:?}");
        }
        // An ML-DSA-44 leaf is some 4 KB bigger than an ECDSA one (its key).
        let ec = generate(KeyType::EcdsaP256, &[])
            .unwrap()
            .chain_der()
            .unwrap();
        let pq = generate(KeyType::MlDsa44, &[])
            .unwrap()
            .chain_der()
            .unwrap();
        assert!(
            pq[0].len() > ec[0].len() + 1312 + 2420 - 200,
            "{}",
            pq[0].len()
        );
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
    any_certificate_checked(&provider, |_| Ok(()))
}

/// A check on a handshake signature's bytes, run before the signature is
/// verified with the certificate's key.
pub(crate) type SigCheck = fn(&[u8]) -> std::result::Result<(), rustls::Error>;

/// [`any_certificate`] that also runs `check` on each handshake signature
/// before verifying it through `provider`'s algorithms (the `sig`
/// ablation accepts only its constant signature this way).
pub(crate) fn any_certificate_checked(
    provider: &Arc<CryptoProvider>,
    check: SigCheck,
) -> Arc<dyn ServerCertVerifier> {
    Arc::new(AnyCertificate {
        algs: provider.signature_verification_algorithms,
        check,
    })
}

/// A `ServerCertVerifier` signature method named like the rustls
/// function it ends in: `check`, then the real verification.
macro_rules! verify_signature {
    ($name:ident) => {
        fn $name(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            (self.check)(dss.signature())?;
            rustls::crypto::$name(message, cert, dss, &self.algs)
        }
    };
}

#[derive(Debug)]
struct AnyCertificate {
    algs: WebPkiSupportedAlgorithms,
    check: SigCheck,
}

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

    verify_signature!(verify_tls12_signature);
    verify_signature!(verify_tls13_signature);

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}
