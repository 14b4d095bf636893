//! Fails when the vendored rustls patch (vendor/README.md: the idle read
//! buffer is released) is not in the build, for example after a
//! `cargo update` or a `[patch.crates-io]` edit that silently brought back
//! the crates.io rustls.
//!
//! A read that finds nothing (`WouldBlock`) with nothing buffered: upstream
//! rustls 0.23 grows its deframer buffer to 4 KiB before the read and keeps
//! it; the patched copy drops it. The allocator's live bytes across those
//! reads tell the two apart.

use std::io::{self, Read};
use std::sync::Arc;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// A socket with nothing to read yet.
struct Silent;

impl Read for Silent {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

#[test]
fn an_idle_connection_keeps_no_read_buffer() {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("rustls's default versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a valid name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("a connection");

    let region = Region::new(GLOBAL);
    for _ in 0..3 {
        let err = conn.read_tls(&mut Silent).expect_err("nothing to read");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }
    let change = region.change();
    let kept = change.bytes_allocated as i64 - change.bytes_deallocated as i64;
    assert!(
        kept < 1024,
        "an idle rustls connection kept {kept} bytes after reads that found nothing: \
         the vendored rustls patch (vendor/README.md, bench/patches/) is not applied"
    );
}
