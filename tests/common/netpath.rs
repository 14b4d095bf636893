//! Helpers for the tests over `tlslab path` (tests/path.rs,
//! tests/path_bench.rs): start a path or skip without root, run code on a
//! thread inside either end's namespace.

use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc::channel;
use std::thread::JoinHandle;
use std::time::Duration;

use tlslab_path::{Path, PathConfig, PathHandle};

use super::skip_or_fail;

/// Whether this process may build a packet-level path (root); without, a
/// loud skip of `test` (a failure under CI=true).
pub fn root(test: &str) -> bool {
    if tlslab_path::privileged() {
        return true;
    }
    skip_or_fail(test, "needs root (network namespaces, TUN devices)");
    false
}

/// A temporary directory for a root test; `None` after [`root`]'s skip.
pub fn root_tempdir(test: &str) -> Option<tempfile::TempDir> {
    root(test).then(super::tempdir)
}

/// Starts a path, or skips the test (loudly) without root.
pub fn start(test: &str, spec: &str) -> Option<Path> {
    let cfg: PathConfig = spec.parse().expect("test spec parses");
    match Path::start(&cfg) {
        Ok(p) => Some(p),
        Err(tlslab_path::Error::NotPermitted) => {
            skip_or_fail(test, "needs root (network namespaces, TUN devices)");
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// A command running the tlslab binary without privilege: as user nobody
/// with no capabilities (through `setpriv`) when the tests run as root.
/// `None` (after a loud skip) when root lacks `setpriv`.
pub fn unprivileged(test: &str) -> Option<std::process::Command> {
    if !nix::unistd::geteuid().is_root() {
        return Some(std::process::Command::new(super::bin()));
    }
    if !super::have("setpriv") {
        skip_or_fail(test, "setpriv (util-linux) is needed to drop root");
        return None;
    }
    let mut c = std::process::Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ])
    .arg(super::bin());
    Some(c)
}

/// The arguments of `tlslab path PATH_FLAGS --ready-port 8443 -- tlslab
/// serve --listen 10.201.0.1:8443 ::: tlslab CLIENT`: `tlslab serve`
/// (its self-signed certificate) on the server end, a tlslab client
/// command on the client end.
pub fn serve_across(path_flags: &[&str], client: &[&str]) -> Vec<String> {
    serve_with_across(path_flags, &[], client)
}

/// [`serve_across`] with `serve_flags` after `tlslab serve --listen
/// 10.201.0.1:8443` (e.g. `--h3`).
pub fn serve_with_across(
    path_flags: &[&str],
    serve_flags: &[&str],
    client: &[&str],
) -> Vec<String> {
    let bin = super::bin().to_string_lossy().into_owned();
    let mut a = vec!["path".to_string()];
    a.extend(path_flags.iter().map(|s| s.to_string()));
    a.extend(["--ready-port", "8443", "--"].map(String::from));
    a.extend([&bin, "serve", "--listen", "10.201.0.1:8443"].map(String::from));
    a.extend(serve_flags.iter().map(|s| s.to_string()));
    a.extend([":::", &bin].map(String::from));
    a.extend(client.iter().map(|s| s.to_string()));
    a
}

/// Returns true if and only if the named namespace exists.
pub fn netns_exists(name: &str) -> bool {
    std::path::Path::new(tlslab_path::NETNS_DIR)
        .join(name)
        .exists()
}

/// Runs `f` on a thread inside the server's namespace.
pub fn on_server<T: Send + 'static>(
    h: &PathHandle,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let h = h.clone();
    std::thread::spawn(move || {
        h.enter_server().expect("enter the server namespace");
        realtime();
        f()
    })
}

/// Runs `f` on a thread inside the client's namespace and waits for it.
pub fn on_client<T: Send + 'static>(h: &PathHandle, f: impl FnOnce() -> T + Send + 'static) -> T {
    let h = h.clone();
    std::thread::spawn(move || {
        h.enter_client().expect("enter the client namespace");
        realtime();
        f()
    })
    .join()
    .expect("client thread")
}

/// A TCP listener on the server's address, bound before this returns.
pub fn tcp_server(
    h: &PathHandle,
    port: u16,
    serve: impl FnOnce(TcpListener) + Send + 'static,
) -> (SocketAddr, JoinHandle<()>) {
    let addr = SocketAddr::new(h.server_ip(), port);
    let (tx, rx) = channel();
    let t = on_server(h, move || {
        let l = TcpListener::bind(addr).expect("bind in the server namespace");
        tx.send(()).unwrap();
        serve(l);
    });
    rx.recv_timeout(Duration::from_secs(5))
        .expect("server bound");
    (addr, t)
}

/// Runs the calling thread under SCHED_FIFO (best effort, with `chrt`), so
/// a busy machine does not add its scheduling delays to a test's timings.
pub fn realtime() {
    let tid = nix::unistd::gettid().to_string();
    let _ = std::process::Command::new("chrt")
        .args(["-f", "-p", "10", &tid])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}
