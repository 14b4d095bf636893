//! `tlslab serve` and `tlslab certs`: flags into a server configuration
//! (checking the files they name), then, in the run step, the ephemeral
//! certificate generated and the server started.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::{self, Algorithms};
use tlslab_server::{AdmissionMode, AdmissionSettings, CertSource, ServeConfig};

use crate::args::serve::{CertsArgs, Fileset, OnOff, ServeArgs};
use crate::parse::threads_or_cpus;
use crate::usage::{Usage, bail, usage};

/// A `serve` configuration as its flags describe it: the engine
/// configuration, and the certificate still to generate when no
/// --cert/--key-file was given.
pub struct ServePlan {
    config: ServeConfig,
    generate: Option<(KeyType, Option<KeyType>)>,
}

/// A server configuration ready to start, plus where an ephemeral CA went.
pub struct PreparedServe {
    /// The engine configuration.
    pub config: ServeConfig,
    /// The CA file clients should trust, when the certificate was generated.
    pub ephemeral_ca: Option<PathBuf>,
    /// The directory holding ephemeral files, removed at shutdown.
    pub ephemeral_dir: Option<PathBuf>,
}

impl ServePlan {
    /// Generates the ephemeral certificate, if one is needed, and writes
    /// its CA where clients can read it.
    pub fn prepare(self) -> anyhow::Result<PreparedServe> {
        let mut config = self.config;
        let Some((kt, mid)) = self.generate else {
            return Ok(PreparedServe {
                config,
                ephemeral_ca: None,
                ephemeral_dir: None,
            });
        };
        let generated = tlslab_crypto::pki::generate_chain(kt, mid, &[]).map_err(usage)?;
        let dir = std::env::temp_dir().join(format!("tlslab-serve-{}", std::process::id()));
        generated
            .write_to(&dir)
            .map_err(|e| anyhow::anyhow!("writing the ephemeral certificate: {e}"))?;
        config.tls.cert = CertSource::Generated(generated);
        Ok(PreparedServe {
            config,
            ephemeral_ca: Some(dir.join(tlslab_crypto::pki::CA_CERT_FILE)),
            ephemeral_dir: Some(dir),
        })
    }
}

/// `serve --node-tag TAG`: the node prefix its session IDs and stateful
/// TLS 1.3 tickets start with ([`provider::node_tag_prefix`]).
pub fn node_prefix(tag: Option<&str>) -> Result<Option<[u8; 4]>, Usage> {
    match tag {
        None => Ok(None),
        Some("") => Err(Usage(
            "--node-tag must not be empty; give a name per node, for example n1".into(),
        )),
        Some(t) => Ok(Some(provider::node_tag_prefix(t))),
    }
}

/// Turns `tlslab serve` flags into a plan; nothing is generated yet.
pub fn config(a: &ServeArgs) -> anyhow::Result<ServePlan> {
    use tlslab_server::{Content, TlsSettings};

    // Durations first: a usage error before any work.
    for (flag, d) in [
        ("--session-timeout", a.session_timeout),
        ("--handshake-timeout", a.handshake_timeout),
        ("--request-timeout", a.request_timeout),
        ("--keepalive-timeout", a.keepalive_timeout),
        (
            "--h2-ping-interval",
            a.h2_ping_interval.0.unwrap_or(Duration::MAX),
        ),
    ] {
        if d.is_zero() {
            return bail(format!(
                "{flag} 0s leaves no time at all (every connection or session would end at once); give a positive duration such as 10s"
            ));
        }
    }
    let versions = provider::parse_versions(&a.tls).map_err(usage)?;
    let algorithms = Algorithms {
        suites: a.suites.clone(),
        groups: a.groups.clone(),
        random_prefix: node_prefix(a.node_tag.as_deref())?.map(|p| p.to_vec()),
    };
    // Fail on bad suites/groups now, with the flag's name in the message.
    let crypto = provider::build(&versions, &algorithms).map_err(usage)?;

    let (session_cache, remote_cache) = parse_shared_cache(
        &a.session_cache,
        a.session_timeout,
        &a.redis_prefix,
        a.redis_timeout,
    )?;
    let ticket_keys = match &a.ticket_keys {
        None => tlslab_server::TicketKeys::Local,
        Some(_) if a.tickets == OnOff::Off => {
            return bail(
                "--ticket-keys seals session tickets, but --tickets is off; use --tickets on or drop --ticket-keys",
            );
        }
        Some(path) => {
            let shown = path.display().to_string();
            if shown.starts_with("redis://") {
                if let Err(e) = redis_url_ok(&shown) {
                    return bail(format!(
                        "--ticket-keys {shown}: {e}; give redis://HOST:PORT[/DB]"
                    ));
                }
                if a.ticket_key_rotation.is_zero() {
                    return bail(
                        "--ticket-key-rotation 0 cannot rotate; give a duration such as 12h",
                    );
                }
                tlslab_server::TicketKeys::Redis {
                    url: shown,
                    key: format!("{}ticket-keys", a.redis_prefix),
                    rotation: a.ticket_key_rotation,
                }
            } else {
                let bytes = tlslab_workload::input::read_capped(
                    path,
                    tlslab_workload::input::MAX_CONFIG_FILE,
                )
                .map_err(|e| {
                    usage(format!("--ticket-keys {shown}: cannot read it: {e}; make one with `openssl rand 80 > {shown}`"))
                })?;
                tlslab_crypto::ticket_keys::parse_key_file(&bytes, &shown).map_err(usage)?;
                tlslab_server::TicketKeys::File(path.clone())
            }
        }
    };
    let ablation = crate::flags::ablation(a.ablate.as_deref(), a.insecure_ablation)?;
    if !ablation.is_empty() && !a.allow_remote {
        let addrs = [Some(a.listen), a.http, a.metrics];
        if let Some(addr) = addrs.into_iter().flatten().find(|s| !s.ip().is_loopback()) {
            return bail(format!(
                "--ablate makes TLS insecure, and {addr} is not a loopback address; \
                 bind to 127.0.0.1 or add --allow-remote"
            ));
        }
    }
    let content = match (&a.root, a.fileset) {
        (Some(dir), _) => {
            if !dir.is_dir() {
                return bail(format!(
                    "--root {}: not a directory; give a directory of files to serve",
                    dir.display()
                ));
            }
            Content::Root(dir.clone())
        }
        (None, Some(Fileset::Specweb96)) => Content::Specweb96,
        (None, None) => Content::Empty,
    };

    if a.key.is_some() {
        eprintln!(
            "warning: `serve --key FILE` is renamed --key-file (the same PEM key); --key will go"
        );
    }
    let (cert, generate) = match (&a.cert, a.key_file.as_ref().or(a.key.as_ref())) {
        (Some(chain), Some(key)) => {
            // Load now so that a bad file is a usage error naming the file.
            tlslab_crypto::pki::load_chain(chain).map_err(usage)?;
            let der = tlslab_crypto::pki::load_key(key).map_err(usage)?;
            if signs_with_ml_dsa(&crypto, der) && !versions.contains(&provider::Version::Tls13) {
                return bail(format!(
                    "--key-file {} is an ML-DSA key, which TLS 1.2 cannot use (every handshake would fail); ML-DSA needs TLS 1.3: use --tls 1.3 (or 1.2,1.3)",
                    key.display()
                ));
            }
            let files = CertSource::Files {
                chain: chain.clone(),
                key: key.clone(),
            };
            (files, None)
        }
        _ => {
            let kt = a.key_type;
            if kt.is_post_quantum() && !versions.contains(&provider::Version::Tls13) {
                return bail(format!(
                    "--key-type {kt} signs with ML-DSA, which TLS 1.2 cannot use; add 1.3 to --tls"
                ));
            }
            // Generated by `ServePlan::prepare`, which replaces this.
            let none = CertSource::Files {
                chain: PathBuf::new(),
                key: PathBuf::new(),
            };
            (none, Some((kt, a.intermediate_key_type)))
        }
    };

    if a.max_connections == 0 {
        return bail("--max-connections must be at least 1");
    }
    let mut alpn = Vec::new();
    for p in &a.alpn {
        match p.as_str() {
            "h2" | "http/1.1" => alpn.push(p.as_bytes().to_vec()),
            "" => {}
            other => {
                return bail(format!(
                    "--alpn: '{other}' is not supported; use h2 and/or http/1.1"
                ));
            }
        }
    }

    Ok(ServePlan {
        config: ServeConfig {
            https: Some(a.listen),
            http: a.http,
            metrics: a.metrics,
            content,
            tls: TlsSettings {
                versions,
                algorithms,
                cert,
                session_cache,
                tickets: a.tickets == OnOff::On,
                max_early_data: a.max_early_data,
                alpn,
                ablation,
                remote_cache,
                ticket_keys,
                cert_compression: tlslab_crypto::compress::parse_list(&a.cert_compression)
                    .map_err(|e| usage(format!("--cert-compression: {e}")))?,
                key_log: crate::output::key_log(a.keylog.as_ref()),
            },
            threads: threads_or_cpus(a.threads),
            pin_cpus: None,
            handshake_timeout: a.handshake_timeout,
            timeouts: tlslab_server::ConnTimeouts {
                request: a.request_timeout,
                keepalive: a.keepalive_timeout,
                h2_ping: a.h2_ping_interval.0,
            },
            max_connections: a.max_connections,
            allow_remote: a.allow_remote,
            access_log: a.access_log.clone(),
            admission: admission(a)?,
        },
        generate,
    })
}

/// Parses `--session-cache`, which may name a Redis-shared cache
/// (`redis://…`, `memory:N+redis://…`).
fn parse_shared_cache(
    spec: &str,
    ttl: Duration,
    prefix: &str,
    timeout: Duration,
) -> anyhow::Result<(
    tlslab_server::SessionCache,
    Option<tlslab_server::RemoteCache>,
)> {
    let s = spec.trim();
    let (memory, url) = match s.split_once('+') {
        Some((mem, url)) if url.trim_start().starts_with("redis://") => {
            let memory = match parse_session_cache(mem, ttl)? {
                tlslab_server::SessionCache::Memory { capacity, .. } => capacity,
                tlslab_server::SessionCache::None => {
                    return bail(format!(
                        "--session-cache {spec}: the layer before + must be memory:N, as in memory:10000+redis://127.0.0.1:6379"
                    ));
                }
            };
            (Some(memory), url.trim())
        }
        _ if s.starts_with("redis://") => (None, s),
        _ => return Ok((parse_session_cache(s, ttl)?, None)),
    };
    if let Err(e) = redis_url_ok(url) {
        return bail(format!(
            "--session-cache {spec}: {e}; give redis://HOST:PORT[/DB]"
        ));
    }
    if timeout.is_zero() {
        return bail(
            "--redis-timeout 0 would time out every GET; give a positive duration such as 5ms",
        );
    }
    let local = tlslab_server::SessionCache::Memory {
        capacity: memory.unwrap_or(1),
        ttl,
    };
    Ok((
        local,
        Some(tlslab_server::RemoteCache {
            url: url.to_string(),
            memory,
            ttl,
            prefix: prefix.to_string(),
            timeout,
        }),
    ))
}

/// Checks the shape of a `redis://HOST:PORT[/DB]` address.
fn redis_url_ok(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or("not a redis:// address")?;
    let (hostport, db) = match rest.split_once('/') {
        Some((h, d)) => (h, Some(d)),
        None => (rest, None),
    };
    let hostport = hostport.rsplit_once('@').map_or(hostport, |(_, h)| h);
    let Some((host, port)) = hostport.rsplit_once(':') else {
        return Err("the port is missing".into());
    };
    if host.is_empty() {
        return Err("the host is missing".into());
    }
    port.parse::<u16>()
        .map_err(|_| format!("'{port}' is not a port"))?;
    if let Some(db) = db
        && !db.is_empty()
        && db.parse::<u32>().is_err()
    {
        return Err(format!("'{db}' is not a database number"));
    }
    Ok(())
}

fn parse_session_cache(spec: &str, ttl: Duration) -> anyhow::Result<tlslab_server::SessionCache> {
    use tlslab_server::SessionCache;
    let s = spec.trim();
    if s.eq_ignore_ascii_case("none") || s.eq_ignore_ascii_case("off") {
        return Ok(SessionCache::None);
    }
    if let Some(n) = s.strip_prefix("memory:") {
        return match n.trim().parse::<usize>() {
            Ok(capacity) if capacity > 0 => Ok(SessionCache::Memory { capacity, ttl }),
            _ => bail(format!(
                "--session-cache {spec}: the size must be a whole number of sessions above 0, as in memory:100000"
            )),
        };
    }
    bail(format!(
        "--session-cache {spec}: expected `none` or `memory:N`, as in memory:100000"
    ))
}

/// The admission-control settings the flags ask for.
fn admission(a: &ServeArgs) -> anyhow::Result<AdmissionSettings> {
    let x = &a.admission;
    let mode = match (x.admission, x.max_handshakes_in_flight) {
        (AdmissionMode::Off, Some(_)) => AdmissionMode::Static,
        (m, _) => m,
    };
    let s = AdmissionSettings {
        mode,
        shed_with: x.shed_with,
        max_handshakes_in_flight: x.max_handshakes_in_flight,
        queue_delay_target: x.admission_queue_target,
        fixed_limit: x.admission_fixed_limit,
        ..AdmissionSettings::default()
    };
    s.validate().map_err(usage)?;
    Ok(s)
}

/// Whether `key` signs with ML-DSA (TLS 1.3 only), as `crypto` loads it.
/// A key it cannot load is left for the server's own error.
fn signs_with_ml_dsa(
    crypto: &rustls::crypto::CryptoProvider,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> bool {
    use rustls::SignatureScheme as S;
    crypto.key_provider.load_private_key(key).is_ok_and(|k| {
        k.choose_scheme(&[S::ML_DSA_44, S::ML_DSA_65, S::ML_DSA_87])
            .is_some()
    })
}

/// Runs `tlslab certs`.
pub fn certs(a: &CertsArgs) -> anyhow::Result<ExitCode> {
    if a.san.iter().any(|n| n.trim().is_empty()) {
        return bail(format!(
            "--san {:?}: an empty name would become an empty subject alternative name and common name; give DNS names or IP addresses separated by commas, none empty (e.g. --san localhost,127.0.0.1)",
            a.san.join(",")
        ));
    }
    let generated = tlslab_crypto::pki::generate_chain(a.key_type, a.intermediate_key, &a.san)
        .map_err(usage)?;
    let written = generated.write_to(&a.out).map_err(usage)?;
    let mut out = std::io::stdout().lock();
    for path in written {
        writeln!(out, "wrote {}", path.display())?;
    }
    writeln!(
        out,
        "clients trust {}; serve with --cert {} --key-file {}",
        a.out.join(tlslab_crypto::pki::CA_CERT_FILE).display(),
        a.out.join(tlslab_crypto::pki::CHAIN_FILE).display(),
        a.out.join(tlslab_crypto::pki::KEY_FILE).display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `tlslab serve` until SIGINT or SIGTERM.
pub fn run(a: ServeArgs) -> anyhow::Result<ExitCode> {
    let plan = config(&a)?;
    let h3 = a.h3.settings(
        plan.config.https,
        plan.config.admission.mode,
        plan.config
            .tls
            .versions
            .contains(&tlslab_crypto::provider::Version::Tls13),
    )?;
    crate::output::warn_key_log(plan.config.tls.key_log.as_deref());
    crate::flags::note_qlog("serve", "server", h3.as_ref().and_then(|h| h.qlog.as_ref()));
    let prepared = plan.prepare()?;
    let server =
        tlslab_server::Server::start_with_h3(prepared.config, h3).context("starting the server")?;
    for w in server.warnings() {
        eprintln!("tlslab: WARNING: {w}");
    }
    {
        let mut out = std::io::stdout().lock();
        if let Some(addr) = server.https_addr() {
            writeln!(out, "tlslab serve: https https://{addr}")?;
        }
        if let Some(addr) = server.h3_addr() {
            writeln!(out, "tlslab serve: h3 https://{addr} (UDP)")?;
        }
        if let Some(addr) = server.http_addr() {
            writeln!(out, "tlslab serve: http http://{addr}")?;
        }
        if let Some(addr) = server.metrics_addr() {
            writeln!(out, "tlslab serve: metrics http://{addr}/metrics")?;
        }
        if let Some(ca) = &prepared.ephemeral_ca {
            writeln!(out, "tlslab serve: ca {}", ca.display())?;
        }
        if let Some(p) = node_prefix(a.node_tag.as_deref())? {
            let hex: String = p.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(out, "tlslab serve: node-tag {hex}")?;
        }
        out.flush()?;
    }
    tlslab_server::wait_for_signal().context("waiting for SIGINT/SIGTERM")?;
    let summary = server.shutdown();
    if let Some(dir) = prepared.ephemeral_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    println!("{}", summary.summary());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(argv: &[&str]) -> crate::args::Cli {
        crate::args::Cli::try_parse_from(argv).unwrap()
    }

    fn serve(a: &ServeArgs) -> anyhow::Result<PreparedServe> {
        config(a)?.prepare()
    }

    #[test]
    fn session_cache_specs() {
        let ttl = Duration::from_secs(1);
        assert!(matches!(
            parse_session_cache("none", ttl).unwrap(),
            tlslab_server::SessionCache::None
        ));
        assert!(matches!(
            parse_session_cache("memory:5", ttl).unwrap(),
            tlslab_server::SessionCache::Memory { capacity: 5, .. }
        ));
        for bad in ["memory:0", "memory:x", "redis", ""] {
            let err = parse_session_cache(bad, ttl).unwrap_err();
            assert!(err.downcast_ref::<Usage>().is_some(), "{bad}");
        }
    }

    #[test]
    fn shared_cache_specs() {
        let (ttl, t) = (Duration::from_secs(60), Duration::from_millis(5));
        let (local, remote) = parse_shared_cache("memory:7", ttl, "p:", t).unwrap();
        assert!(remote.is_none());
        assert!(matches!(
            local,
            tlslab_server::SessionCache::Memory { capacity: 7, .. }
        ));
        let (_, remote) = parse_shared_cache("redis://127.0.0.1:6379/2", ttl, "p:", t).unwrap();
        let r = remote.unwrap();
        assert_eq!(
            (r.url.as_str(), r.memory, r.prefix.as_str()),
            ("redis://127.0.0.1:6379/2", None, "p:")
        );
        assert_eq!((r.ttl, r.timeout), (ttl, t));
        let (_, remote) =
            parse_shared_cache("memory:100+redis://localhost:6379", ttl, "p:", t).unwrap();
        assert_eq!(remote.unwrap().memory, Some(100));
        for bad in [
            "redis://",
            "redis://host",
            "redis://host:port",
            "redis://:6379",
            "redis://h:6379/x",
            "none+redis://h:6379",
            "memory:0+redis://h:6379",
        ] {
            let err = parse_shared_cache(bad, ttl, "p:", t).unwrap_err();
            assert!(err.downcast_ref::<Usage>().is_some(), "{bad}: {err}");
        }
        let err = parse_shared_cache("redis://h:1", ttl, "p:", Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("--redis-timeout"), "{err}");
    }

    #[test]
    fn ablation_needs_confirmation_and_loopback() {
        let serve_args = |argv: &[&str]| {
            let mut v = vec!["tlslab", "serve", "--listen", "127.0.0.1:0"];
            v.extend_from_slice(argv);
            match parse(&v).command {
                crate::args::Command::Serve(a) => a,
                _ => unreachable!(),
            }
        };
        let err = serve(&serve_args(&["--ablate", "cipher"])).err().unwrap();
        assert!(err.downcast_ref::<Usage>().is_some());
        assert!(err.to_string().contains("--insecure-ablation"), "{err}");

        let err = serve(&serve_args(&[
            "--ablate",
            "cipher",
            "--insecure-ablation",
            "--http",
            "0.0.0.0:0",
        ]))
        .err()
        .unwrap();
        assert!(err.to_string().contains("--allow-remote"), "{err}");

        let ok = serve(&serve_args(&[
            "--ablate",
            "skeleton",
            "--insecure-ablation",
        ]))
        .unwrap();
        assert_eq!(
            ok.config.tls.ablation,
            tlslab_crypto::meter::AblationSet::skeleton()
        );
        if let Some(dir) = ok.ephemeral_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
