//! What every engine shares: the one certificate and key, the rustls
//! providers restricted to one key-exchange group and TLS 1.3, and the
//! server's CPU window (getrusage of the whole process).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rustls::crypto::{aws_lc_rs, CryptoProvider, SupportedKxGroup};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The ALPN every engine offers and accepts (TCP too, so the bytes match).
pub const ALPN: &[u8] = b"h3";
/// The name in the certificate and the one the client verifies.
pub const SERVER_NAME: &str = "localhost";

/// The key-exchange group, the same on both sides for every engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    X25519,
    X25519MlKem768,
}

impl Group {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "x25519" => Ok(Self::X25519),
            "x25519mlkem768" | "mlkem" => Ok(Self::X25519MlKem768),
            _ => bail!("unknown group {s:?}: use x25519 or x25519mlkem768"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::X25519 => "x25519",
            Self::X25519MlKem768 => "x25519mlkem768",
        }
    }

    fn kx(self) -> &'static dyn SupportedKxGroup {
        match self {
            Self::X25519 => aws_lc_rs::kx_group::X25519,
            Self::X25519MlKem768 => aws_lc_rs::kx_group::X25519MLKEM768,
        }
    }
}

/// The TLS 1.3 cipher suite, the same on both sides for every engine.
/// Its hash is the handshake's: SHA-384 for AES-256-GCM (rustls' first
/// choice with aws-lc-rs, so what tlslab negotiates), SHA-256 for AES-128-GCM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    Aes128Gcm,
    Aes256Gcm,
}

impl Suite {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "aes128gcm" => Ok(Self::Aes128Gcm),
            "aes256gcm" => Ok(Self::Aes256Gcm),
            _ => bail!("unknown suite {s:?}: use aes128gcm or aes256gcm"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Aes128Gcm => "aes128gcm",
            Self::Aes256Gcm => "aes256gcm",
        }
    }

    fn rustls(self) -> rustls::SupportedCipherSuite {
        match self {
            Self::Aes128Gcm => aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256,
            Self::Aes256Gcm => aws_lc_rs::cipher_suite::TLS13_AES_256_GCM_SHA384,
        }
    }
}

/// What both sides agree on: one group and one suite.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub group: Group,
    pub suite: Suite,
}

/// aws-lc-rs with exactly one key-exchange group and one cipher suite. The
/// client offering only these is what makes the negotiated group and suite
/// certain for every server: a TLS 1.3 server can only pick what the client
/// offers, or fail.
pub fn provider(p: Params) -> Arc<CryptoProvider> {
    let mut c = aws_lc_rs::default_provider();
    c.kx_groups = vec![p.group.kx()];
    c.cipher_suites = vec![p.suite.rustls()];
    Arc::new(c)
}

/// QUIC's Initial packets are always protected with AES-128-GCM-SHA256,
/// whatever suite the handshake then negotiates; quinn needs it given apart.
pub fn quic_initial_suite() -> rustls::quic::Suite {
    aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(|s| s.quic_suite())
        .unwrap_or_else(|| unreachable!("aws-lc-rs AES-128-GCM is a TLS 1.3 suite for QUIC"))
}

/// The certificate and key, as DER and PEM (s2n-tls takes PEM).
pub struct Identity {
    pub cert_der: CertificateDer<'static>,
    pub key_der: Vec<u8>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Identity {
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }
}

/// Writes a fresh self-signed ECDSA P-256 certificate for "localhost".
pub fn gen_cert(dir: &Path) -> Result<()> {
    let ck = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()])
        .context("generating the ECDSA P-256 certificate")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files: [(&str, Vec<u8>); 4] = [
        ("cert.der", ck.cert.der().to_vec()),
        ("key.der", ck.signing_key.serialize_der()),
        ("cert.pem", ck.cert.pem().into_bytes()),
        ("key.pem", ck.signing_key.serialize_pem().into_bytes()),
    ];
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Reads what `gen-cert` wrote.
pub fn load_identity(dir: &Path) -> Result<Identity> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).with_context(|| {
            format!(
                "reading {}: run `quic-floor gen-cert --dir {}` first",
                path.display(),
                dir.display()
            )
        })
    };
    Ok(Identity {
        cert_der: CertificateDer::from(read("cert.der")?),
        key_der: read("key.der")?,
        cert_pem: String::from_utf8(read("cert.pem")?).context("cert.pem is not UTF-8")?,
        key_pem: String::from_utf8(read("key.pem")?).context("key.pem is not UTF-8")?,
    })
}

/// The rustls server configuration for TCP, quinn and s2n-quic's rustls
/// provider: TLS 1.3 only, one group, one suite, no tickets, no session cache, no 0-RTT.
pub fn rustls_server(id: &Identity, p: Params) -> Result<rustls::ServerConfig> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider(p))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3 with aws-lc-rs")?
        .with_no_client_auth()
        .with_single_cert(vec![id.cert_der.clone()], id.key())
        .context("loading the certificate and key")?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    cfg.max_early_data_size = 0;
    Ok(cfg)
}

/// The rustls client configuration (TCP and quinn clients): trusts the one
/// certificate, TLS 1.3 only, one group, one suite, resumption and 0-RTT off.
pub fn rustls_client(id: &Identity, p: Params) -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(id.cert_der.clone())
        .context("trusting the certificate")?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider(p))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3 with aws-lc-rs")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    cfg.resumption = rustls::client::Resumption::disabled();
    cfg.enable_early_data = false;
    Ok(cfg)
}

/// User + system CPU of the whole process (all threads), in microseconds.
pub fn process_cpu() -> (u64, u64) {
    // SAFETY: getrusage writes one plain struct that we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let us = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

/// Counts completed server handshakes and measures the CPU of the window
/// between the `warmup`-th and the `warmup + count`-th; prints one line when
/// the window closes and exits the process 300 ms later.
pub struct Window {
    engine: &'static str,
    params: Params,
    warmup: u64,
    count: u64,
    done: std::sync::atomic::AtomicU64,
    start: std::sync::Mutex<Option<(Instant, (u64, u64))>>,
}

impl Window {
    pub fn new(engine: &'static str, params: Params, warmup: u64, count: u64) -> Arc<Self> {
        let w = Arc::new(Self {
            engine,
            params,
            warmup,
            count,
            done: std::sync::atomic::AtomicU64::new(0),
            start: std::sync::Mutex::new(None),
        });
        if warmup == 0 {
            w.open();
        }
        w
    }

    fn open(&self) {
        let mut s = self.start.lock().unwrap_or_else(|e| e.into_inner());
        *s = Some((Instant::now(), process_cpu()));
    }

    /// One more handshake completed on the server.
    pub fn handshake(&self) {
        let n = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if n == self.warmup {
            self.open();
        }
        if n == self.warmup + self.count {
            self.close();
        }
    }

    fn close(&self) {
        let (u1, s1) = process_cpu();
        let start = *self.start.lock().unwrap_or_else(|e| e.into_inner());
        let Some((t0, (u0, s0))) = start else {
            eprintln!("error: the window closed before it opened");
            std::process::exit(1);
        };
        let wall = t0.elapsed().as_secs_f64();
        let (user, sys) = (u1 - u0, s1 - s0);
        println!(
            "engine={} group={} suite={} handshakes={} cpu_us={} user_us={} sys_us={} wall_s={:.3} us_per_handshake={:.1}",
            self.engine,
            self.params.group.name(),
            self.params.suite.name(),
            self.count,
            user + sys,
            user,
            sys,
            wall,
            (user + sys) as f64 / self.count as f64
        );
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // Exit soon, not now: the engine still has to send this last
        // connection's close, or the client would wait for it in vain.
        tokio::spawn(async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            std::process::exit(0);
        });
    }
}

/// Runs `n` handshakes from `c` tasks, each made by `one` (called with
/// nothing but its own clone of the shared state), each within 10 s: the
/// handshakes that succeeded and those that failed. The first three
/// failures are printed, prefixed with `label`.
pub async fn drive<S, F, Fut>(
    label: &'static str,
    n: u64,
    c: u64,
    state: S,
    one: F,
) -> Result<(u64, u64)>
where
    S: Clone + Send + 'static,
    F: Fn(S) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (state, one, next) = (state.clone(), one.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                match tokio::time::timeout(std::time::Duration::from_secs(10), one(state.clone()))
                    .await
                {
                    Ok(Ok(())) => ok += 1,
                    Ok(Err(e)) => {
                        failed += 1;
                        if failed <= 3 {
                            eprintln!("{label}: {e:#}");
                        }
                    }
                    Err(_) => failed += 1,
                }
            }
            (ok, failed)
        }));
    }
    let mut total = (0, 0);
    for t in tasks {
        let (ok, failed) = t.await.context("client task")?;
        total.0 += ok;
        total.1 += failed;
    }
    Ok(total)
}
