//! HAProxy in TCP mode in front of TLS nodes, optionally with the
//! stick-table recipe on the TLS 1.2 session ID (issue 10).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::error::{Error, write};
use crate::proc::{Proc, start_on_free_port};

/// A haproxy.cfg: one `listen` section on `bind:port`.
#[derive(Clone, Debug)]
pub struct HaproxyConf {
    /// The address to listen on: 127.0.0.1, or an address that exists
    /// only inside a network namespace (a `tlslab path` server end).
    pub bind: IpAddr,
    /// The port on `bind`.
    pub port: u16,
    /// `balance` (roundrobin, leastconn, random, source).
    pub balance: String,
    /// Stick TLS 1.2 session IDs to the node that issued them.
    pub stick_session_ids: bool,
    /// The nodes.
    pub servers: Vec<SocketAddr>,
}

impl HaproxyConf {
    /// The listen address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind, self.port)
    }

    /// The haproxy.cfg text.
    pub fn render(&self) -> String {
        let mut c = format!(
            "# Written by tlslab.\n\
             global\n\
             \x20   nbthread 1\n\
             \x20   maxconn 4096\n\
             defaults\n\
             \x20   mode tcp\n\
             \x20   timeout connect 5s\n\
             \x20   timeout client 30s\n\
             \x20   timeout server 30s\n\
             listen tls\n\
             \x20   bind {}\n",
            self.addr()
        );
        if self.stick_session_ids {
            c.push_str(
                "    tcp-request inspect-delay 5s\n\
                 \x20   tcp-request content accept if { req.ssl_hello_type 1 }\n\
                 \x20   tcp-response inspect-delay 5s\n\
                 \x20   tcp-response content accept if { res.ssl_hello_type 2 }\n\
                 \x20   acl clienthello req.ssl_hello_type 1\n\
                 \x20   acl serverhello res.ssl_hello_type 2\n\
                 \x20   stick-table type binary len 32 size 1m expire 5m\n\
                 \x20   stick on req.payload_lv(43,1) if clienthello\n\
                 \x20   stick store-response res.payload_lv(43,1) if serverhello\n",
            );
        }
        let _ = writeln!(c, "    balance {}", self.balance);
        for (i, s) in self.servers.iter().enumerate() {
            let _ = writeln!(c, "    server n{i} {s}");
        }
        c
    }
}

/// Writes `DIR/haproxy-PORT.cfg` and runs `haproxy -f CFG -db` on a free
/// port (up to 3 ports), pinned to `cpus`, waiting up to 10 s until it
/// accepts. `conf(port)` gives the config.
pub fn start(
    bin: &Path,
    dir: &Path,
    cpus: &[usize],
    mut conf: impl FnMut(u16) -> HaproxyConf,
) -> Result<(Proc, SocketAddr), Error> {
    start_on_free_port(3, |port| {
        let c = conf(port);
        let cfg = dir.join(format!("haproxy-{port}.cfg"));
        write(&cfg, c.render())?;
        let mut cmd = Command::new(bin);
        cmd.arg("-f").arg(&cfg).arg("-db");
        let mut proc = Proc::spawn(cmd, "haproxy", Some(&cfg.with_extension("log")))?;
        proc.pin(cpus)?;
        proc.wait_port(c.addr(), Duration::from_secs(10))?;
        Ok((proc, c.addr()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_recipe_sticks_on_the_session_id() {
        let mut c = HaproxyConf {
            bind: IpAddr::from([127, 0, 0, 1]),
            port: 9000,
            balance: "roundrobin".into(),
            stick_session_ids: true,
            servers: vec![
                "127.0.0.1:1".parse().unwrap(),
                "127.0.0.1:2".parse().unwrap(),
            ],
        };
        let t = c.render();
        assert!(t.contains("bind 127.0.0.1:9000"), "{t}");
        assert!(t.contains("stick on req.payload_lv(43,1) if clienthello"));
        assert!(t.contains(
            "balance roundrobin\n    server n0 127.0.0.1:1\n    server n1 127.0.0.1:2\n"
        ));
        c.stick_session_ids = false;
        c.balance = "leastconn".into();
        let t = c.render();
        assert!(!t.contains("stick"));
        assert!(t.contains("balance leastconn"));
    }
}
