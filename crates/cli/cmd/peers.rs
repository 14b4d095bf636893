//! `tlslab peers` (hidden): the config files of outside peers, written by
//! tlslab-peers so that the benchmark scripts (bench/) do not write their
//! own. Prints the text, or writes it with `--out`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tlslab_peers::apache::{ApacheConf, builtin_modules};
use tlslab_peers::haproxy::HaproxyConf;
use tlslab_peers::nginx::{AccessLog, NginxConf, Tickets};

use crate::args::peers::{PeerConf, PeersArgs};

fn emit(text: &str, out: Option<&PathBuf>) -> anyhow::Result<ExitCode> {
    match out {
        Some(p) => std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `tlslab peers`.
pub fn run(a: &PeersArgs) -> anyhow::Result<ExitCode> {
    match &a.what {
        PeerConf::Nginx(n) => {
            let t = &n.tls;
            let mut c = NginxConf::new(&n.prefix, t.port, &t.cert, &t.key);
            c.comment = "# Written by tlslab peers nginx-conf.".into();
            if let Some(r) = &t.root {
                c.root = r.clone();
            }
            c.protocols = versions(&t.tls, "TLSv", " ");
            c.tickets = if t.tickets == "on" {
                Tickets::On
            } else {
                Tickets::Off
            };
            (c.tls12_ciphers, c.tls13_suites) = (t.tls12_ciphers.clone(), t.tls13_suites.clone());
            c.curves = t.curves.clone();
            if let (Some(format), Some(path)) = (&t.log_format, &t.access_log) {
                let (name, format, path) = ("tlslab".into(), format.clone(), path.clone());
                let buffered = t.log_buffered;
                c.logs.push(AccessLog {
                    name,
                    format,
                    path,
                    buffered,
                });
            }
            c.worker_connections = n.worker_connections;
            c.rlimit_nofile = n.rlimit_nofile;
            (c.session_cache, c.session_timeout) =
                (n.session_cache.clone(), n.session_timeout.clone());
            c.keepalive_requests = n.keepalive_requests;
            c.keepalive_timeout = n.keepalive_timeout.clone();
            c.backlog = n.backlog;
            c.open_file_cache = n.open_file_cache;
            if let Some(bin) = &n.h2_for {
                let v = tlslab_peers::nginx::version(bin)
                    .with_context(|| format!("cannot read the version of {}", bin.display()))?;
                c.http2 = Some(v);
            }
            // With --out, the temp directories too.
            if t.out.is_some() {
                c.write()?;
            }
            emit(&c.render(), t.out.as_ref())
        }
        PeerConf::Apache(a) => {
            let t = &a.tls;
            let c = ApacheConf {
                dir: a.dir.clone(),
                port: t.port,
                cert: t.cert.clone(),
                key: t.key.clone(),
                root: t.root.clone().unwrap_or_else(|| a.dir.join("www")),
                modules: a.modules.clone(),
                builtin: builtin_modules(&a.apache2),
                versions: t.tls.clone(),
                tickets: t.tickets == "on",
                threads: a.threads,
                cache_bytes: a.cache_bytes,
                tls12_ciphers: t.tls12_ciphers.clone(),
                tls13_suites: t.tls13_suites.clone(),
                curves: t.curves.clone(),
                log: t.log_format.clone().zip(t.access_log.clone()),
                buffered_logs: t.log_buffered,
            };
            emit(&c.render(), t.out.as_ref())
        }
        PeerConf::Haproxy(h) => {
            let c = HaproxyConf {
                bind: std::net::Ipv4Addr::LOCALHOST.into(),
                port: h.port,
                balance: h.balance.clone(),
                stick_session_ids: h.stick_session_ids,
                servers: h.servers.clone(),
            };
            emit(&c.render(), h.out.as_ref())
        }
        PeerConf::Redis(r) => {
            let args = tlslab_peers::redis::args(r.port, &r.dir);
            let lines: Vec<String> = args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            emit(&format!("{}\n", lines.join("\n")), None)
        }
    }
}

/// `1.2,1.3` → `TLSv1.2 TLSv1.3`.
fn versions(v: &[String], prefix: &str, sep: &str) -> String {
    let v: Vec<String> = v.iter().map(|v| format!("{prefix}{v}")).collect();
    v.join(sep)
}
