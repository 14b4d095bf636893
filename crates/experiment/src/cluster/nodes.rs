//! The cluster's outside peers: finding a tool, a child process pinned
//! to CPUs and killed on drop, CPU from `/proc/PID/task/*/schedstat`,
//! `redis-server`, nginx nodes and the HAProxy dispatcher, with their
//! configurations.
//!
//! It imports nothing else of the cluster experiment: what a peer needs
//! is passed in.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tlslab_crypto::provider::Version;
use tlslab_dispatch::Policy;

use crate::Error;

/// Finds an executable on PATH or in the sbin directories.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

pub(super) fn need_tool(name: &str, what: &str) -> Result<PathBuf, Error> {
    find_tool(name).ok_or_else(|| {
        Error::Cluster(format!(
            "{what} needs `{name}`, which is not on PATH or in /usr/sbin; install it \
             (apt-get install -y {pkg}) or leave that arm out",
            pkg = if name == "redis-server" {
                "redis-server"
            } else {
                name
            }
        ))
    })
}

pub(super) fn tool_version(path: &Path, args: &[&str]) -> String {
    Command::new(path)
        .args(args)
        .output()
        .map(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::Cluster(format!("no free port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| Error::Cluster(e.to_string()))?
        .port())
}

/// CPU time of every thread of process `pid` (sum of the first field of
/// `/proc/PID/task/*/schedstat`), nanoseconds.
pub(super) fn proc_cpu_ns(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Pins every thread of `pid` to `cpus` (a no-op for an empty list).
fn pin_pid(pid: u32, cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        let _ = set.set(c);
    }
    let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|t| t.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for tid in tids {
        if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set) {
            tracing::warn!(pid, tid, "cannot pin to {cpus:?}: {e}");
        }
    }
}

/// A child process, killed and reaped on drop.
pub(super) struct Proc {
    child: Child,
    name: String,
    log: PathBuf,
}

impl Proc {
    fn spawn(mut cmd: Command, name: &str, log: PathBuf, cpus: &[usize]) -> Result<Proc, Error> {
        let out = std::fs::File::create(&log)
            .map_err(|e| Error::Cluster(format!("{name}: cannot create {}: {e}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::Cluster(format!("{name}: {e}")))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| Error::Cluster(format!("cannot start {name}: {e}")))?;
        pin_pid(child.id(), cpus);
        Ok(Proc {
            child,
            name: name.to_string(),
            log,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `addr` accepts TCP connections; an error carries the log.
    fn wait_port(&mut self, addr: SocketAddr, cpus: &[usize]) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(Error::Cluster(format!(
                    "{} exited at start ({status}): {}",
                    self.name,
                    std::fs::read_to_string(&self.log)
                        .unwrap_or_default()
                        .trim()
                )));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                // Threads started since the spawn are pinned too.
                pin_pid(self.pid(), cpus);
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(Error::Cluster(format!(
            "{} did not listen on {addr} within 10 s: {}",
            self.name,
            std::fs::read_to_string(&self.log)
                .unwrap_or_default()
                .trim()
        )))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `redis-server` on a free loopback port with persistence off, in a
/// temporary directory.
pub(super) struct Redis {
    pub(super) proc: Proc,
    pub(super) url: String,
}

impl Redis {
    pub(super) fn start(bin: &Path, dir: &Path, cpus: &[usize]) -> Result<Redis, Error> {
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let mut cmd = Command::new(bin);
            cmd.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir"])
            .arg(dir);
            let mut proc = Proc::spawn(cmd, "redis-server", dir.join("redis.log"), cpus)?;
            match proc.wait_port(SocketAddr::from(([127, 0, 0, 1], port)), cpus) {
                Ok(()) => {
                    return Ok(Redis {
                        proc,
                        url: format!("redis://127.0.0.1:{port}"),
                    });
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(Error::Cluster(last))
    }
}

/// A name no other part of this process has used.
pub(super) fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// OpenSSL's names (`ssl_ecdh_curve`) for tlslab's group names; an error
/// names a group the nginx nodes cannot take.
pub fn openssl_groups(groups: &[String]) -> Result<Vec<&'static str>, Error> {
    groups
        .iter()
        .map(|g| match g.to_ascii_lowercase().as_str() {
            "x25519" => Ok("X25519"),
            "secp256r1" => Ok("prime256v1"),
            "secp384r1" => Ok("secp384r1"),
            "secp521r1" => Ok("secp521r1"),
            "x25519mlkem768" => Ok("X25519MLKEM768"),
            other => Err(Error::Cluster(format!(
                "--groups {other}: not a group nginx nodes can be given; use x25519, secp256r1, secp384r1, secp521r1 or X25519MLKEM768"
            ))),
        })
        .collect()
}

/// How an nginx node serves.
pub(super) struct NginxNode<'a> {
    /// The nginx binary.
    pub bin: &'a Path,
    /// The directory its prefixes go in.
    pub dir: &'a Path,
    /// The certificate chain and key files.
    pub chain: &'a Path,
    /// The key file.
    pub key: &'a Path,
    /// The one TLS version.
    pub version: Version,
    /// With tickets on, the ticket-key file; `None`: tickets off.
    pub ticket_key: Option<&'a Path>,
    /// Key-exchange groups (tlslab's names), or OpenSSL's defaults.
    pub groups: Option<&'a [String]>,
    /// The size of `/bytes/N`.
    pub body_bytes: usize,
    /// The CPUs of the node.
    pub cpus: &'a [usize],
}

/// A running nginx node.
pub(super) struct Nginx {
    pub proc: Proc,
    pub addr: SocketAddr,
    pub access_log: PathBuf,
}

fn nginx_conf(prefix: &Path, port: u16, node: usize, n: &NginxNode) -> String {
    let p = prefix.display();
    let protocol = match n.version {
        Version::Tls12 => "TLSv1.2",
        Version::Tls13 => "TLSv1.3",
    };
    let tickets = match n.ticket_key {
        Some(keys) => format!(
            "ssl_session_tickets on;\n        ssl_session_ticket_key {};",
            keys.display()
        ),
        None => "ssl_session_tickets off;".to_string(),
    };
    // OpenSSL's spelling of tlslab's group names (checked by
    // `openssl_groups` before any node starts).
    let curves = n.groups.map_or(String::new(), |g| {
        format!(
            "ssl_ecdh_curve {};",
            openssl_groups(g).unwrap_or_default().join(":")
        )
    });
    format!(
        "# Written by tlslab cluster: node {node}.\n\
         pid {p}/nginx.pid;\n\
         error_log {p}/error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n\
         \x20   client_body_temp_path {p}/tmp/client_body;\n\
         \x20   proxy_temp_path {p}/tmp/proxy;\n\
         \x20   fastcgi_temp_path {p}/tmp/fastcgi;\n\
         \x20   uwsgi_temp_path {p}/tmp/uwsgi;\n\
         \x20   scgi_temp_path {p}/tmp/scgi;\n\
         \x20   default_type application/octet-stream;\n\
         \x20   log_format cluster '$ssl_session_reused $ssl_protocol $status';\n\
         \x20   access_log {p}/access.log cluster;\n\
         \x20   keepalive_timeout 5s;\n\
         \x20   server {{\n\
         \x20       listen 127.0.0.1:{port} ssl;\n\
         \x20       ssl_certificate {chain};\n\
         \x20       ssl_certificate_key {key};\n\
         \x20       ssl_protocols {protocol};\n\
         \x20       ssl_session_cache shared:node{node}:10m;\n\
         \x20       ssl_session_timeout 5m;\n\
         \x20       {tickets}\n\
         \x20       {curves}\n\
         \x20       root {p}/www;\n\
         \x20   }}\n\
         }}\n",
        chain = n.chain.display(),
        key = n.key.display(),
    )
}

/// Starts nginx node `i` in a new prefix under `n.dir`, on a free port.
pub(super) fn start_nginx(n: &NginxNode, i: usize) -> Result<Nginx, Error> {
    let mut last = String::new();
    for _ in 0..3 {
        let prefix = n.dir.join(format!("nginx-{}", unique()));
        for d in [
            "tmp/client_body",
            "tmp/proxy",
            "tmp/fastcgi",
            "tmp/uwsgi",
            "tmp/scgi",
            "www/bytes",
        ] {
            std::fs::create_dir_all(prefix.join(d))
                .map_err(|e| Error::Cluster(format!("cannot create {}: {e}", prefix.display())))?;
        }
        let body = n.body_bytes;
        std::fs::write(prefix.join(format!("www/bytes/{body}")), vec![b'x'; body])
            .map_err(|e| Error::Cluster(format!("cannot write the docroot: {e}")))?;
        let port = free_port()?;
        let conf = prefix.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(&prefix, port, i, n))
            .map_err(|e| Error::Cluster(format!("cannot write {}: {e}", conf.display())))?;
        let mut cmd = Command::new(n.bin);
        cmd.arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off; master_process off;"]);
        let mut proc = Proc::spawn(cmd, "nginx", prefix.join("stdout.log"), n.cpus)?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        match proc.wait_port(addr, n.cpus) {
            Ok(()) => {
                // The readiness probe connected without TLS; nginx logs no
                // request for it, but wait until it has let go of it.
                return Ok(Nginx {
                    proc,
                    addr,
                    access_log: prefix.join("access.log"),
                });
            }
            Err(e) => {
                last = format!(
                    "{e}\n{}",
                    std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default()
                );
                if !last.contains("Address already in use") {
                    break;
                }
            }
        }
    }
    Err(Error::Cluster(format!(
        "nginx node {i} did not start: {last}"
    )))
}

/// The HAProxy configuration of a policy: TCP mode; for `session`, the
/// stick-table recipe on the TLS 1.2 session ID (issue 10).
fn haproxy_conf(port: u16, policy: Policy, nodes: &[SocketAddr]) -> String {
    let balance = match policy {
        Policy::RoundRobin | Policy::Session => "roundrobin",
        Policy::LeastConn => "leastconn",
        Policy::Random => "random",
        Policy::SourceIp => "source",
    };
    let stick = if policy == Policy::Session {
        "    tcp-request inspect-delay 5s\n\
         \x20   tcp-request content accept if { req.ssl_hello_type 1 }\n\
         \x20   tcp-response inspect-delay 5s\n\
         \x20   tcp-response content accept if { res.ssl_hello_type 2 }\n\
         \x20   acl clienthello req.ssl_hello_type 1\n\
         \x20   acl serverhello res.ssl_hello_type 2\n\
         \x20   stick-table type binary len 32 size 1m expire 5m\n\
         \x20   stick on req.payload_lv(43,1) if clienthello\n\
         \x20   stick store-response res.payload_lv(43,1) if serverhello\n"
    } else {
        ""
    };
    let mut servers = String::new();
    for (i, n) in nodes.iter().enumerate() {
        servers.push_str(&format!("    server n{i} {n}\n"));
    }
    format!(
        "# Written by tlslab cluster.\n\
         global\n\
         \x20   nbthread 1\n\
         \x20   maxconn 4096\n\
         defaults\n\
         \x20   mode tcp\n\
         \x20   timeout connect 5s\n\
         \x20   timeout client 30s\n\
         \x20   timeout server 30s\n\
         listen tls\n\
         \x20   bind 127.0.0.1:{port}\n\
         {stick}\
         \x20   balance {balance}\n\
         {servers}"
    )
}

impl Nginx {
    /// Requests served and, of them, on a resumed session: one line per
    /// request in the access log, `$ssl_session_reused` first ("r" or
    /// "."); one request per connection, so one per handshake.
    pub(super) fn requests(&self) -> (u64, u64) {
        let text = std::fs::read_to_string(&self.access_log).unwrap_or_default();
        let lines = text.lines().filter(|l| !l.trim().is_empty());
        let (mut n, mut r) = (0u64, 0u64);
        for l in lines {
            n += 1;
            r += u64::from(l.starts_with('r'));
        }
        (n, r)
    }
}

/// Starts `haproxy` (TCP mode, `policy`, the `backends`) with its
/// configuration in `dir`, on a free port.
pub(super) fn start_haproxy(
    bin: &Path,
    dir: &Path,
    policy: Policy,
    backends: &[SocketAddr],
    cpus: &[usize],
) -> Result<(Proc, SocketAddr), Error> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        let cfg = dir.join(format!("haproxy-{}.cfg", unique()));
        std::fs::write(&cfg, haproxy_conf(port, policy, backends))
            .map_err(|e| Error::Cluster(format!("cannot write {}: {e}", cfg.display())))?;
        let mut cmd = Command::new(bin);
        cmd.arg("-f").arg(&cfg).arg("-db");
        let mut proc = Proc::spawn(cmd, "haproxy", cfg.with_extension("log"), cpus)?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        match proc.wait_port(addr, cpus) {
            Ok(()) => return Ok((proc, addr)),
            Err(e) => last = e.to_string(),
        }
    }
    Err(Error::Cluster(format!("haproxy did not start: {last}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haproxy_session_policy_uses_the_stick_recipe() {
        let c = haproxy_conf(1234, Policy::Session, &[]);
        assert!(c.contains("stick on req.payload_lv(43,1) if clienthello"));
        assert!(c.contains("stick store-response res.payload_lv(43,1) if serverhello"));
        assert!(c.contains("bind 127.0.0.1:1234"));
        let c = haproxy_conf(1234, Policy::RoundRobin, &[]);
        assert!(!c.contains("stick"));
    }
}
