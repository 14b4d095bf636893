//! The one test kit of tlslab's tests, the workspace's (`tests/`) and each
//! crate's (`crates/*/tests/`): a dev-dependency, never linked into the
//! binary.
//!
//! It holds what more than one suite needs:
//! - waits bounded in time ([`poll`], [`eventually`]);
//! - the skip rule for a test that needs a tool or privilege this machine
//!   lacks ([`skip`], [`require`]): loud locally, a failure under `CI=true`;
//! - 127.0.0.1 addresses and free ports ([`loopback`], [`free_port`]),
//!   temporary directories ([`tempdir`]), a test CA ([`generated`]);
//! - [`process`]: a command run with a time limit, a child killed on drop
//!   ([`Proc`]);
//! - [`cli`]: the real `tlslab` binary run, and `serve`, `relay`,
//!   `dispatch` and `probe exporter` started on port 0 and stopped
//!   ([`Serve`], [`Relay`], [`spawn_dispatch`], [`start_exporter`]);
//!   [`load`]: `tlslab load` with a JSON report; [`report`]: JSON reports
//!   read back;
//! - [`http`]: a bounded HTTP/1.0 GET, raw TCP exchanges, a rustls client
//!   for a test CA, and the OpenMetrics text of `/metrics` parsed into
//!   samples ([`Metrics`]), or one sample read off it ([`metric`]);
//! - [`net`]: a tokio runtime for one test and an echo upstream;
//!   [`slowloris`]: many slow clients against a server (the hardening
//!   tests);
//! - the real peers: [`nginx`] as a reference server, the output of
//!   h2load and `openssl s_client` ([`peers`]), a QUIC-LB cluster of
//!   `serve --h3` nodes behind `dispatch --udp` ([`quic_lb`]), and a UDP
//!   tap in front of QUIC servers ([`udp_tap`]).
//!
//! What stands for one suite alone stays beside it: the engine fixtures of
//! `crates/{load,relay,server}/tests/common`, the in-memory handshakes of
//! `crates/wire/tests/support` (wire's tests stay free of tokio and of this
//! kit), and `tests/common`'s path, capture and report modules.

#![allow(missing_docs)]

pub mod cli;
pub mod http;
pub mod load;
pub mod net;
pub mod nginx;
pub mod peers;
pub mod process;
pub mod quic_lb;
pub mod report;
pub mod slowloris;
pub mod udp_tap;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use cli::*;
pub use http::*;
pub use net::*;
pub use process::*;
pub use report::*;

/// Calls `read` every 50 ms until `done` holds of what it returned or
/// `limit` has passed; returns the last value either way, so the caller's
/// assertion shows it.
pub fn poll<T>(limit: Duration, mut read: impl FnMut() -> T, done: impl Fn(&T) -> bool) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let v = read();
        if done(&v) || Instant::now() >= deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `f` holds, checking every 10 ms; fails the test, naming
/// `what`, after 5 s.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// 127.0.0.1 port 0: a listener's address for the kernel to pick a port.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A port on 127.0.0.1 that was free a moment ago. For peers that cannot
/// be told to pick their own port.
pub fn free_port() -> u16 {
    tlslab_peers::free_port().expect("bind 127.0.0.1:0")
}

/// A fresh temporary directory, removed on drop.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tlslab-test-")
        .tempdir()
        .expect("create a temporary directory")
}

/// A test that cannot run here (a missing peer, no root): a loud skip
/// locally, a failure under `CI=true` (where `.ci/run` installs every peer
/// and runs as root). The one place that rule is written.
pub fn skip(msg: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{msg} (CI=true: a skip is a failure here)"
    );
    eprintln!("\n*** SKIPPED: {msg} ***\n");
}

/// [`skip`] for `test`, saying why.
pub fn skip_or_fail(test: &str, reason: &str) {
    skip(&format!("{test}: {reason}"));
}

/// True if `tool` is installed; otherwise [`skip`]s with how to install it.
pub fn require(tool: &str) -> bool {
    match tlslab_peers::need_tool(tool) {
        Ok(_) => true,
        Err(e) => {
            skip(&format!("{e} (.ci/run does)"));
            false
        }
    }
}

/// Whether a command-line tool is installed (on PATH or in the sbin
/// directories).
pub fn have(tool: &str) -> bool {
    tlslab_peers::find_tool(tool).is_some()
}

/// The path of an installed tool; fails the test, naming the package to
/// install, if it is missing.
pub fn tool(name: &str) -> PathBuf {
    tlslab_peers::need_tool(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A fresh ECDSA P-256 test CA and server chain (for `localhost`).
pub fn generated() -> tlslab_crypto::pki::Generated {
    tlslab_crypto::pki::generate(tlslab_crypto::pki::KeyType::EcdsaP256, &[])
        .expect("generate certificates")
}
