//! Real rustls handshakes driven in memory: the byte streams the parsers
//! are tested on (tests/rustls_bytes.rs) and the fuzz seed corpus
//! (`cargo run -p tlslab-wire --example fuzz_seed_corpus`).
#![allow(dead_code)]

use std::sync::Arc;

use rustls::crypto::{CryptoProvider, SupportedKxGroup, aws_lc_rs};
use rustls::pki_types::ServerName;
use rustls::{
    ClientConfig, ClientConnection, ConnectionCommon, HandshakeKind, ServerConfig,
    ServerConnection, SupportedProtocolVersion,
};
use tlslab_crypto::pki::{self, KeyType};
use tlslab_wire::{
    ContentType, DEFAULT_MAX_MESSAGE_LEN, HandshakeType, Reassembler, first_handshake_message,
    records,
};

pub struct Pki {
    pub chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub key: rustls::pki_types::PrivateKeyDer<'static>,
    pub roots: rustls::RootCertStore,
}

pub fn pki() -> &'static Pki {
    static PKI: std::sync::OnceLock<Pki> = std::sync::OnceLock::new();
    PKI.get_or_init(|| {
        let g = pki::generate(KeyType::EcdsaP256, &[]).unwrap();
        Pki {
            chain: g.chain_der().unwrap(),
            key: g.key_der().unwrap(),
            roots: g.roots().unwrap(),
        }
    })
}

pub fn provider(groups: Option<Vec<&'static dyn SupportedKxGroup>>) -> Arc<CryptoProvider> {
    let mut p = aws_lc_rs::default_provider();
    if let Some(g) = groups {
        p.kx_groups = g;
    }
    Arc::new(p)
}

pub struct Setup {
    pub versions: &'static [&'static SupportedProtocolVersion],
    pub client_groups: Option<Vec<&'static dyn SupportedKxGroup>>,
    pub server_groups: Option<Vec<&'static dyn SupportedKxGroup>>,
    pub tickets: bool,
}

impl Setup {
    pub fn new(versions: &'static [&'static SupportedProtocolVersion]) -> Self {
        Setup {
            versions,
            client_groups: None,
            server_groups: None,
            tickets: false,
        }
    }

    /// TLS 1.3 where the client sends an x25519 share and the server only
    /// accepts P-256: a HelloRetryRequest.
    pub fn hello_retry() -> Self {
        let mut setup = Setup::new(TLS13);
        setup.client_groups = Some(vec![
            aws_lc_rs::kx_group::X25519,
            aws_lc_rs::kx_group::SECP256R1,
        ]);
        setup.server_groups = Some(vec![aws_lc_rs::kx_group::SECP256R1]);
        setup
    }

    pub fn configs(&self) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
        let p = pki();
        let mut client = ClientConfig::builder_with_provider(provider(self.client_groups.clone()))
            .with_protocol_versions(self.versions)
            .unwrap()
            .with_root_certificates(p.roots.clone())
            .with_no_client_auth();
        client.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let mut server = ServerConfig::builder_with_provider(provider(self.server_groups.clone()))
            .with_protocol_versions(self.versions)
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(p.chain.clone(), p.key.clone_key())
            .unwrap();
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        // Neither side compresses certificates (rustls' default with its
        // brotli/zlib features would).
        server.cert_compressors = Vec::new();
        client.cert_decompressors = Vec::new();
        if self.tickets {
            server.ticketer = tlslab_crypto::provider::ticketer().unwrap();
        }
        (Arc::new(client), Arc::new(server))
    }
}

/// Moves what `from` wants to write into `to`, processing it there;
/// returns the bytes moved.
fn pump<A, B>(from: &mut ConnectionCommon<A>, to: &mut ConnectionCommon<B>) -> Vec<u8> {
    let mut out = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut out).unwrap();
    }
    let mut rd = &out[..];
    while !rd.is_empty() {
        to.read_tls(&mut rd).unwrap();
        to.process_new_packets().unwrap();
    }
    out
}

/// The bytes each side sent during one handshake.
pub struct Transcript {
    pub c2s: Vec<u8>,
    pub s2c: Vec<u8>,
    pub kind: Option<HandshakeKind>,
    pub suite: u16,
    pub group: Option<u16>,
}

pub fn handshake(client: &Arc<ClientConfig>, server: &Arc<ServerConfig>) -> Transcript {
    let name = ServerName::try_from("localhost").unwrap();
    let mut c = ClientConnection::new(client.clone(), name).unwrap();
    let mut s = ServerConnection::new(server.clone()).unwrap();
    let (mut c2s, mut s2c) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let out = pump(&mut c, &mut s);
        c2s.extend_from_slice(&out);
        let back = pump(&mut s, &mut c);
        s2c.extend_from_slice(&back);
        if out.is_empty() && back.is_empty() {
            break;
        }
    }
    assert!(!c.is_handshaking() && !s.is_handshaking());
    Transcript {
        c2s,
        s2c,
        kind: c.handshake_kind(),
        suite: u16::from(s.negotiated_cipher_suite().unwrap().suite()),
        group: s
            .negotiated_key_exchange_group()
            .map(|g| u16::from(g.name())),
    }
}

/// The plaintext handshake messages of one direction, reassembled across
/// records; `tls12` stops at ChangeCipherSpec (the Finished after it is
/// encrypted under a handshake content type).
pub fn plaintext_messages(stream: &[u8], tls12: bool) -> Vec<(HandshakeType, Vec<u8>)> {
    let mut r = Reassembler::new();
    let mut out = Vec::new();
    let mut it = records(stream);
    for rec in it.by_ref() {
        let rec = rec.unwrap();
        match rec.header.content_type {
            ContentType::HANDSHAKE => {
                r.push(rec.payload).unwrap();
                while let Some(m) = r.next_message().unwrap() {
                    let mut full = vec![m.msg_type.0];
                    full.extend_from_slice(&(m.body.len() as u32).to_be_bytes()[1..]);
                    full.extend_from_slice(m.body);
                    out.push((m.msg_type, full));
                }
            }
            ContentType::CHANGE_CIPHER_SPEC if tls12 => break,
            _ => {}
        }
    }
    out
}

pub fn client_hello(stream: &[u8]) -> Vec<u8> {
    first_handshake_message(stream, DEFAULT_MAX_MESSAGE_LEN)
        .unwrap()
        .into_owned()
}

pub static TLS13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];
pub static TLS12: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12];
pub static BOTH: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

pub const X25519: u16 = 0x001d;
pub const SECP256R1: u16 = 0x0017;

/// Real byte streams to mutate: both directions of a full TLS 1.3, a
/// resumed TLS 1.3 (PSK), a HelloRetryRequest and a TLS 1.2 ticket
/// handshake, plus the bare ClientHello messages.
pub fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut out = Vec::new();
        let (cc, sc) = Setup::new(TLS13).configs();
        let full = handshake(&cc, &sc);
        let resumed = handshake(&cc, &sc);
        let (hc, hs) = Setup::hello_retry().configs();
        let hrr = handshake(&hc, &hs);
        let mut t12 = Setup::new(TLS12);
        t12.tickets = true;
        let (tc, ts) = t12.configs();
        let t12a = handshake(&tc, &ts);
        let t12b = handshake(&tc, &ts);
        for t in [full, resumed, hrr, t12a, t12b] {
            out.push(client_hello(&t.c2s));
            for (_, m) in plaintext_messages(&t.s2c, true) {
                out.push(m);
            }
            out.push(t.c2s);
            out.push(t.s2c);
        }
        out
    })
}
