//! Step two of flag parsing: validate raw flags into engine configurations.
//! Everything wrong here is the user's to fix, so it is a [`Usage`] error
//! (exit code 2) whose message names the problem and the fix.

use std::path::PathBuf;
use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::{self, Algorithms};

use crate::args::{self, OnOff};

/// A usage error: bad flags or bad files named by flags. Exit code 2.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Wraps any displayable error as a usage error.
pub fn usage(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(Usage(e.to_string()))
}

fn bail<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(anyhow::Error::new(Usage(msg.into())))
}

/// Every output file named by a flag, checked before any work: its
/// directory must exist and it must not be a directory, so a typo in
/// `--json` fails at start (exit 2) rather than after a run whose results
/// would then be lost. The one list of output-file flags, for every
/// subcommand that has one (directories that a subcommand creates, such as
/// `load --out` and `fileset --out`, are not in it).
pub fn output_files(cmd: &args::Command) -> anyhow::Result<()> {
    use args::Command as C;
    let files: Vec<(&str, Option<&PathBuf>)> = match cmd {
        C::Load(a) => vec![("--json", a.json.as_ref()), ("--log", a.log.as_ref())],
        C::Sweep(a) => vec![
            ("--json", a.load.json.as_ref()),
            ("--log", a.load.log.as_ref()),
        ],
        C::Serve(a) => vec![("--access-log", a.access_log.as_ref())],
        C::Lab(a) => vec![("--json", a.json.as_ref())],
        C::Breakdown(a) => vec![("--json", a.json.as_ref())],
        C::Merge(a) => vec![("--json", a.json.as_ref())],
        C::Overload(a) => vec![("--json", a.json.as_ref())],
        C::Cluster(a) => vec![("--json", a.json.as_ref())],
        C::Report(a) => vec![("--html", a.html.as_ref()), ("--md", a.md.as_ref())],
        C::Plan(a) => vec![("--json", a.json.as_ref())],
        C::Path(a) => vec![("--json", a.json.as_ref())],
        C::Certs(_)
        | C::Fileset(_)
        | C::Probe(_)
        | C::Relay(_)
        | C::Dispatch(_)
        | C::Experiment(_)
        | C::Peers(_) => vec![],
    };
    for (flag, path) in files {
        if let Some(p) = path {
            output_file(flag, p)?;
        }
    }
    Ok(())
}

/// Checks one output file: not a directory, in a directory that exists.
fn output_file(flag: &str, path: &std::path::Path) -> anyhow::Result<()> {
    if path.is_dir() {
        return bail(format!(
            "{flag} {}: is a directory; give a file name",
            path.display()
        ));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return bail(format!(
            "{flag} {}: the directory {} does not exist; create it (mkdir -p {}) or give another path",
            path.display(),
            dir.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// Parses a `--key`/`--key-type` value.
pub fn key_type(s: &str) -> anyhow::Result<KeyType> {
    s.parse::<KeyType>().map_err(usage)
}

fn threads(given: Option<usize>) -> anyhow::Result<usize> {
    match given {
        Some(0) => bail("--threads must be at least 1"),
        Some(n) => Ok(n),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

/// A validated `serve` configuration, plus where an ephemeral CA went.
pub struct PreparedServe {
    /// The engine configuration.
    pub config: tlslab_server::ServeConfig,
    /// The CA file clients should trust, when the certificate was generated.
    pub ephemeral_ca: Option<PathBuf>,
    /// The directory holding ephemeral files, removed at shutdown.
    pub ephemeral_dir: Option<PathBuf>,
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

/// `load --source-ip RANGE [--clients-per-ip N]`.
fn source_ip(a: &args::LoadArgs) -> Result<Option<tlslab_load::source::SourceAddrs>, Usage> {
    match &a.source_ip {
        None => Ok(None),
        Some(r) => tlslab_load::source::SourceAddrs::parse(r, a.clients_per_ip.unwrap_or(1))
            .map(Some)
            .map_err(Usage),
    }
}

/// Validates `tlslab serve` flags.
pub fn serve(a: &args::ServeArgs) -> anyhow::Result<PreparedServe> {
    use tlslab_server::{CertSource, Content, ServeConfig, TlsSettings};

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
    provider::build(&versions, &algorithms).map_err(usage)?;

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
    let ablation = ablation(a.ablate.as_deref(), a.insecure_ablation)?;
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
        (None, Some(args::Fileset::Specweb96)) => Content::Specweb96,
        (None, None) => Content::Empty,
    };

    let (cert, ephemeral_ca, ephemeral_dir) = match (&a.cert, &a.key) {
        (Some(chain), Some(key)) => {
            // Load now so that a bad file is a usage error naming the file.
            tlslab_crypto::pki::load_chain(chain).map_err(usage)?;
            tlslab_crypto::pki::load_key(key).map_err(usage)?;
            (
                CertSource::Files {
                    chain: chain.clone(),
                    key: key.clone(),
                },
                None,
                None,
            )
        }
        _ => {
            let kt = key_type(&a.key_type)?;
            let mid = a
                .intermediate_key_type
                .as_deref()
                .map(key_type)
                .transpose()?;
            if kt.is_post_quantum() && !versions.contains(&provider::Version::Tls13) {
                return bail(format!(
                    "--key-type {kt} signs with ML-DSA, which TLS 1.2 cannot use; add 1.3 to --tls"
                ));
            }
            let generated = tlslab_crypto::pki::generate_chain(kt, mid, &[]).map_err(usage)?;
            let dir = std::env::temp_dir().join(format!("tlslab-serve-{}", std::process::id()));
            generated
                .write_to(&dir)
                .map_err(|e| anyhow::anyhow!("writing the ephemeral certificate: {e}"))?;
            let ca = dir.join(tlslab_crypto::pki::CA_CERT_FILE);
            (CertSource::Generated(generated), Some(ca), Some(dir))
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

    Ok(PreparedServe {
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
            },
            threads: threads(a.threads)?,
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
            admission: crate::overload_args::admission(a)?,
        },
        ephemeral_ca,
        ephemeral_dir,
    })
}

/// Parses `--ablate`, which needs `--insecure-ablation`.
pub fn ablation(
    spec: Option<&str>,
    confirmed: bool,
) -> anyhow::Result<tlslab_crypto::meter::AblationSet> {
    let Some(spec) = spec else {
        return Ok(tlslab_crypto::meter::AblationSet::NONE);
    };
    let set: tlslab_crypto::meter::AblationSet = spec.parse().map_err(usage)?;
    if !set.is_empty() && !confirmed {
        return bail(format!(
            "--ablate {spec} replaces TLS stages with no-ops and makes every connection insecure; \
             add --insecure-ablation to confirm"
        ));
    }
    Ok(set)
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

/// Validates `tlslab load` flags.
pub fn load(a: &args::LoadArgs) -> anyhow::Result<tlslab_load::LoadConfig> {
    use tlslab_load::{LoadConfig, ResumeWith, Target, Trust};

    let mut targets = Vec::with_capacity(a.urls.len());
    for u in &a.urls {
        targets.push(Target::parse(u).map_err(usage)?);
    }
    if a.clients == 0 {
        return bail("-c/--clients must be at least 1");
    }
    let reuse = match a.reuse[..] {
        [r] => r,
        _ => {
            return bail(
                "--reuse takes one percentage for `load`; a list (0,50,100) is for `tlslab sweep`",
            );
        }
    };
    if !(0.0..=100.0).contains(&reuse) || reuse.is_nan() {
        return bail(format!("--reuse {reuse}: give a percentage from 0 to 100"));
    }
    if a.requests == Some(0) {
        return bail("-n/--requests must be at least 1");
    }
    if a.duration == Some(Duration::ZERO) {
        return bail("-d/--duration must be above 0");
    }
    let duration = match (a.duration, a.requests) {
        // A replay ends with its log.
        (None, None) if a.workload == args::Workload::Replay => None,
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    let versions = provider::parse_versions(&a.tls).map_err(usage)?;
    let algorithms = Algorithms {
        suites: a.suite.clone(),
        groups: a.group.clone(),
        random_prefix: None,
    };
    provider::build(&versions, &algorithms).map_err(usage)?;

    let any_tls = targets.iter().any(|t| t.is_tls());
    let trust = match (&a.cacert, a.insecure) {
        (Some(_), true) => return bail("--cacert and --insecure contradict each other; drop one"),
        (Some(path), false) => {
            tlslab_crypto::pki::load_roots(path).map_err(usage)?;
            Trust::CaFile(path.clone())
        }
        (None, true) => Trust::Insecure,
        (None, false) => Trust::WebPki,
    };
    let load_ablation = ablation(a.ablate.as_deref(), a.insecure_ablation)?;
    if !load_ablation.is_empty() && !matches!(trust, Trust::CaFile(_)) {
        return bail(format!(
            "--ablate {load_ablation} runs only against a lab server whose CA you give; \
             add --cacert FILE (the ca.pem of `tlslab certs`) instead of --insecure"
        ));
    }
    if a.early_data && !versions.contains(&provider::Version::Tls13) {
        return bail("--early-data needs TLS 1.3; add 1.3 to --tls");
    }
    if !any_tls && (reuse > 0.0 || a.early_data) {
        return bail("--reuse and --early-data need an https:// URL");
    }
    let workload = match a.workload {
        args::Workload::Urls => tlslab_load::Workload::Urls,
        args::Workload::Specweb96 => tlslab_load::Workload::Specweb96,
        args::Workload::Ecommerce => tlslab_load::Workload::Ecommerce,
        args::Workload::Replay => tlslab_load::Workload::Replay,
    };
    if workload != tlslab_load::Workload::Urls && (targets.len() != 1 || targets[0].path != "/") {
        return bail(format!(
            "--workload {} draws the paths itself; give one base URL without a path, \
             such as https://127.0.0.1:8443",
            workload.name()
        ));
    }
    let ecommerce = match (&a.workload_config, workload) {
        (None, _) => None,
        (Some(path), tlslab_load::Workload::Ecommerce) => Some(
            tlslab_workload::ecommerce::Config::load(path)
                .map_err(|e| usage(format!("--workload-config: {e}")))?,
        ),
        (Some(_), _) => return bail("--workload-config needs --workload ecommerce"),
    };
    let replay = replay(a, workload)?;
    // Both models decide connections, resumption and timing themselves.
    let decided_by = match workload {
        tlslab_load::Workload::Replay => {
            Some("--workload replay takes order, timing and resumption from the log")
        }
        tlslab_load::Workload::Ecommerce => Some(
            "--workload ecommerce decides connections, resumption and think times itself \
             (set them in --workload-config)",
        ),
        _ => None,
    };
    if let Some(why) = decided_by
        && (a.rate.is_some()
            || a.retry_on_failure
            || a.think_time.trim() != "0"
            || reuse != 0.0
            || a.requests_per_conn != 1)
    {
        return bail(format!(
            "{why}; drop --rate, --retry-on-failure, --think-time, --reuse and --requests-per-conn"
        ));
    }
    let think_time: tlslab_load::ThinkTime = a
        .think_time
        .parse()
        .map_err(|e| usage(format!("--think-time: {e}")))?;
    let open_loop = match a.rate {
        None => None,
        Some(rate) => {
            if !(rate.is_finite() && rate > 0.0 && rate <= 1e7) {
                return bail(format!(
                    "--rate {rate}: give arrivals per second above 0 and at most 10000000"
                ));
            }
            if a.max_in_flight == 0 {
                return bail("--max-in-flight must be at least 1");
            }
            if a.requests_per_conn != 1 {
                return bail(
                    "--rate makes one request per arrival on a new connection; drop --requests-per-conn",
                );
            }
            if a.retry_on_failure || think_time != tlslab_load::ThinkTime::Zero {
                return bail(
                    "--retry-on-failure and --think-time describe closed-loop clients; drop them with --rate",
                );
            }
            Some(tlslab_load::OpenLoop {
                rate,
                arrivals: match a.arrivals {
                    args::Arrivals::Poisson => tlslab_load::Arrivals::Poisson,
                    args::Arrivals::Constant => tlslab_load::Arrivals::Constant,
                },
                max_in_flight: a.max_in_flight,
            })
        }
    };

    let http2 = http2(a, workload, &think_time)?;
    if let Some(r) = a.max_error_rate
        && !(0.0..=100.0).contains(&r)
    {
        return bail(format!(
            "--max-error-rate {r}: give a percentage from 0 to 100, e.g. 1"
        ));
    }

    let cfg = LoadConfig {
        targets,
        clients: a.clients,
        threads: threads(a.threads)?,
        pin_cpus: None,
        duration,
        requests: a.requests,
        warmup: a.warmup,
        requests_per_conn: a.requests_per_conn,
        http2,
        reuse: reuse / 100.0,
        resume_with: match a.resume_with {
            args::ResumeWith::Id => ResumeWith::Id,
            args::ResumeWith::Ticket => ResumeWith::Ticket,
            args::ResumeWith::Auto => ResumeWith::Auto,
        },
        versions,
        algorithms,
        sni: a.sni.clone(),
        trust,
        early_data: a.early_data,
        timeout: a.timeout,
        source_ip: source_ip(a)?,
        log: a.log.clone(),
        progress: false,
        workload,
        seed: a.seed,
        think_time,
        retry_on_failure: a.retry_on_failure,
        open_loop,
        ecommerce,
        replay,
        ablation: load_ablation,
        start_at: None,
        retry_backoff: a.retry_backoff,
        cert_compression: tlslab_crypto::compress::parse_list(&a.cert_compression)
            .map_err(|e| usage(format!("--cert-compression: {e}")))?,
        mss: match a.mss {
            Some(m) if !(88..=65495).contains(&m) => {
                return bail(format!(
                    "--mss {m}: give a segment size from 88 to 65495 bytes, e.g. 1460"
                ));
            }
            m => m,
        },
    };
    // The engine's own checks (bounds of -d, --timeout, --sni, …), now:
    // a usage error before any work rather than a failed run.
    cfg.validate().map_err(usage)?;
    Ok(cfg)
}

/// `--h2` and `-m`: HTTP/2 for the closed loop of the urls or specweb96
/// workload.
fn http2(
    a: &args::LoadArgs,
    workload: tlslab_load::Workload,
    think_time: &tlslab_load::ThinkTime,
) -> anyhow::Result<Option<tlslab_load::Http2>> {
    if !a.h2 {
        return Ok(None);
    }
    let m = a.max_concurrent_streams;
    if m == 0 || m > 10_000 {
        return bail(format!(
            "--max-concurrent-streams {m}: give 1 to 10000 streams per connection"
        ));
    }
    if a.rate.is_some() {
        return bail(
            "--rate opens a new connection per arrival, which HTTP/2 cannot amortise; \
             drop --rate with --h2 (-c connections x -m streams is the closed loop)",
        );
    }
    if !matches!(
        workload,
        tlslab_load::Workload::Urls | tlslab_load::Workload::Specweb96
    ) {
        return bail(format!(
            "--h2 runs the urls or specweb96 workload; --workload {} models HTTP/1.1 browsers",
            workload.name()
        ));
    }
    if a.early_data || a.retry_on_failure || *think_time != tlslab_load::ThinkTime::Zero {
        return bail(
            "--h2 does not support --early-data, --retry-on-failure or --think-time yet; drop them",
        );
    }
    if a.requests_per_conn == 1 && m > 1 {
        eprintln!(
            "tlslab: note: --requests-per-conn 1 gives every HTTP/2 connection one stream, so -m {m} \
             has no effect; give --requests-per-conn 0 (or K > 1) to keep connections as h2load does"
        );
    }
    Ok(Some(tlslab_load::Http2 {
        max_concurrent_streams: m,
    }))
}

/// Validates `tlslab sweep` flags: one load configuration per --reuse
/// value, and the plan.
pub fn sweep(
    a: &args::SweepArgs,
) -> anyhow::Result<(Vec<tlslab_load::LoadConfig>, tlslab_load::SweepPlan)> {
    let over = match (a.over, a.load.rate) {
        (Some(args::SweepOver::Rate), None) => {
            return bail("--over rate needs a starting --rate");
        }
        (Some(args::SweepOver::Clients), Some(_)) => {
            return bail("--over clients steps a closed loop; drop --rate");
        }
        (Some(args::SweepOver::Rate), Some(_)) | (None, Some(_)) => tlslab_load::SweepOver::Rate,
        (Some(args::SweepOver::Clients), None) | (None, None) => tlslab_load::SweepOver::Clients,
    };
    if !(a.factor.is_finite() && a.factor > 1.0) {
        return bail(format!(
            "--factor {}: give a factor above 1, e.g. 2",
            a.factor
        ));
    }
    if a.steps < 2 {
        return bail("--steps must be at least 2 to find a knee");
    }
    if !(a.knee.is_finite() && a.knee >= 0.0) {
        return bail(format!(
            "--knee {}: give a percentage of 0 or more, e.g. 10",
            a.knee
        ));
    }
    if a.load.workload == args::Workload::Replay {
        return bail("a replay has its own pace; sweep urls, specweb96 or ecommerce workloads");
    }
    let mut configs = Vec::new();
    for &r in &a.load.reuse {
        let mut one = a.load.clone();
        one.reuse = vec![r];
        if one.duration.is_none() && one.requests.is_none() {
            one.duration = Some(Duration::from_secs(2));
        }
        configs.push(load(&one)?);
    }
    Ok((
        configs,
        tlslab_load::SweepPlan {
            over,
            factor: a.factor,
            max_steps: a.steps,
            knee_gain: a.knee / 100.0,
        },
    ))
}

/// Reads, filters and plans the access log of `--workload replay`.
fn replay(
    a: &args::LoadArgs,
    workload: tlslab_load::Workload,
) -> anyhow::Result<Option<tlslab_load::Replay>> {
    use tlslab_workload::replay::{Pacing, PathMode, RateLimit, ReplayPlan, filter, parse};
    let Some(log) = &a.access_log else {
        if workload == tlslab_load::Workload::Replay {
            return bail("--workload replay needs --access-log FILE, the access log to replay");
        }
        return Ok(None);
    };
    if workload != tlslab_load::Workload::Replay {
        return bail("--access-log needs --workload replay");
    }
    let (entries, parsed) = match parse::parse_file_with(log, a.strict) {
        Ok(r) => r,
        // A malformed or over-long line under --strict, or a line with no
        // end (not text), is a runtime failure (exit 1).
        Err(e @ tlslab_workload::Error::Line { .. }) => {
            return Err(anyhow::anyhow!("--access-log {e}"));
        }
        Err(e) => return Err(usage(e)),
    };
    if parsed.parsed == 0 {
        return bail(format!(
            "--access-log {}: no line parsed as Common or Combined Log Format ({} skipped); \
             give an Apache or nginx access log",
            log.display(),
            parsed.skipped_count
        ));
    }
    if let Some(w) = parsed.warning(&log.display().to_string()) {
        eprintln!("warning: {w}");
    }
    let exclude = match &a.exclude_clients {
        Some(path) => filter::read_client_list(path).map_err(usage)?,
        None => Default::default(),
    };
    let rate = a
        .client_rate_limit
        .as_deref()
        .map(str::parse::<RateLimit>)
        .transpose()
        .map_err(|e| usage(format!("--client-rate-limit: {e}")))?;
    let (entries, filtered) = filter::filter(entries, &exclude, rate);
    if entries.is_empty() {
        return bail(
            "the filters dropped every request of the log; relax --exclude-clients or --client-rate-limit",
        );
    }
    let entries = crate::distributed::shard_replay(&a.dist, entries, |e| e.client.to_string())?;
    let mode = match a.replay_paths {
        args::ReplayPaths::Bytes => PathMode::Bytes,
        args::ReplayPaths::Original => PathMode::Original,
    };
    let pacing = match a.speed {
        None => Pacing::AsFastAsPossible,
        Some(speed) if speed.is_finite() && speed > 0.0 => Pacing::Timed { speed },
        Some(speed) => {
            return bail(format!(
                "--speed {speed}: give a positive factor, e.g. 1 (as logged) or 10"
            ));
        }
    };
    if a.window == 0 {
        return bail("--window must be at least 1 (seed 001 used 10000)");
    }
    Ok(Some(tlslab_load::Replay {
        plan: std::sync::Arc::new(ReplayPlan::new(&entries, mode)),
        window: a.window,
        pacing,
        skipped_lines: parsed.skipped_count,
        filtered,
    }))
}

/// Validates `tlslab breakdown` flags.
pub fn breakdown(
    a: &args::BreakdownArgs,
) -> anyhow::Result<tlslab_experiment::breakdown::BreakdownConfig> {
    use tlslab_experiment::breakdown::{BreakdownConfig, Workload};
    if !a.insecure_ablation {
        return bail(
            "breakdown replaces TLS stages with no-ops on an embedded loopback server and client; \
             add --insecure-ablation to confirm",
        );
    }
    if a.clients == 0 {
        return bail("-c/--clients must be at least 1");
    }
    if a.repeats == Some(0) {
        return bail("--repeats must be at least 1");
    }
    let versions = provider::parse_versions(&a.tls).map_err(usage)?;
    let [version] = versions[..] else {
        return bail("--tls takes one version for breakdown: 1.2 or 1.3");
    };
    let workload = match a.workload {
        args::BreakdownWorkload::NewConn => Workload::NewConn,
        args::BreakdownWorkload::KeepAlive => Workload::KeepAlive,
        args::BreakdownWorkload::Reuse => {
            if !(0.0..=100.0).contains(&a.reuse) {
                return bail(format!(
                    "--reuse {}: give a percentage from 0 to 100",
                    a.reuse
                ));
            }
            Workload::Reuse(a.reuse / 100.0)
        }
    };
    let cell = a.cell.unwrap_or(if a.quick {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(1)
    });
    if cell.is_zero() {
        return bail("--cell must be above 0");
    }
    let max_time = a.max_time.unwrap_or(if a.quick {
        Duration::from_secs(40)
    } else {
        Duration::from_secs(300)
    });
    if !(a.target_ci.is_finite() && a.target_ci > 0.0 && a.target_ci < 100.0) {
        return bail(format!(
            "--target-ci {}: give a half-width in points above 0, e.g. 2",
            a.target_ci
        ));
    }
    Ok(BreakdownConfig {
        workload,
        file_size: a.file_size,
        version,
        key: key_type(&a.key)?,
        cell,
        clients: a.clients,
        repeats: a.repeats.unwrap_or(if a.quick { 2 } else { 3 }),
        max_time,
        target_ci95: a.target_ci / 100.0,
    })
}

/// Validates `tlslab lab` flags.
pub fn lab(a: &args::LabArgs) -> anyhow::Result<tlslab_experiment::lab::LabConfig> {
    if a.clients == 0 {
        return bail("-c/--clients must be at least 1");
    }
    let cell = a.cell.unwrap_or(if a.quick {
        Duration::from_millis(700)
    } else {
        Duration::from_millis(4500)
    });
    if cell.is_zero() {
        return bail("--cell must be above 0");
    }
    let path = a
        .path
        .as_deref()
        .map(str::parse::<tlslab_path::PathConfig>)
        .transpose()
        .map_err(|e| usage(format!("--path: {e}")))?;
    Ok(tlslab_experiment::lab::LabConfig {
        cell,
        clients: a.clients,
        quick: a.quick,
        path,
    })
}

/// The file tree `tlslab fileset` writes: `(url path, size)` sorted by path,
/// the logged paths that cannot become files, and the `load` flags that
/// request them.
pub struct FilesetFiles {
    /// Each file's URL path and size in bytes.
    pub files: Vec<(String, u64)>,
    /// Replay only: logged paths left out (not plain absolute paths).
    pub skipped: Vec<String>,
    /// The `tlslab load` flags that request these files.
    pub load_hint: String,
}

/// Validates `tlslab fileset` flags and lists the files to write.
pub fn fileset_files(a: &args::FilesetArgs) -> anyhow::Result<FilesetFiles> {
    use args::FilesetWorkload as W;
    if a.workload_config.is_some() && a.workload != W::Ecommerce {
        return bail("--workload-config needs --workload ecommerce");
    }
    if a.access_log.is_some() && a.workload != W::Replay {
        return bail("--access-log needs --workload replay");
    }
    match a.workload {
        W::Specweb96 => Ok(FilesetFiles {
            files: tlslab_workload::specweb96::files()
                .into_iter()
                .map(|f| (f.path, f.size as u64))
                .collect(),
            skipped: Vec::new(),
            load_hint: "--workload specweb96".into(),
        }),
        W::Ecommerce => {
            use tlslab_workload::ecommerce::{Config, Generator, PathStyle};
            let mut model = match &a.workload_config {
                Some(path) => {
                    Config::load(path).map_err(|e| usage(format!("--workload-config: {e}")))?
                }
                None => Config::default(),
            };
            model.paths = PathStyle::Files;
            let generator =
                Generator::new(model).map_err(|e| usage(format!("--workload-config: {e}")))?;
            Ok(FilesetFiles {
                files: generator.files(),
                skipped: Vec::new(),
                load_hint: "--workload ecommerce --workload-config FILE (with paths = \"files\")"
                    .into(),
            })
        }
        W::Replay => {
            use tlslab_workload::replay::{PathMode, ReplayPlan, parse};
            let Some(log) = &a.access_log else {
                return bail(
                    "--workload replay needs --access-log FILE, the access log whose paths to write",
                );
            };
            let (entries, parsed) = match parse::parse_file(log) {
                Ok(r) => r,
                // Bad content (a line with no end): a runtime failure.
                Err(e @ tlslab_workload::Error::Line { .. }) => {
                    return Err(anyhow::anyhow!("--access-log {e}"));
                }
                Err(e) => return Err(usage(e)),
            };
            if parsed.parsed == 0 {
                return bail(format!(
                    "--access-log {}: no line parsed as Common or Combined Log Format ({} skipped); \
                     give an Apache or nginx access log",
                    log.display(),
                    parsed.skipped_count
                ));
            }
            let (files, skipped) = ReplayPlan::new(&entries, PathMode::Original).file_tree();
            Ok(FilesetFiles {
                files,
                skipped,
                load_hint: format!(
                    "--workload replay --access-log {} --replay-paths original",
                    log.display()
                ),
            })
        }
    }
}

/// Validates `tlslab relay`'s flags into a relay configuration; resolves
/// the upstream name once, here.
pub fn relay(a: &crate::args::RelayArgs) -> anyhow::Result<tlslab_relay::RelayConfig> {
    use std::net::ToSocketAddrs as _;
    let upstream = a
        .upstream
        .to_socket_addrs()
        .map_err(|e| usage(format!("--upstream {}: {e} (write HOST:PORT)", a.upstream)))?
        .next()
        .ok_or_else(|| {
            usage(format!(
                "--upstream {}: the name has no address",
                a.upstream
            ))
        })?;
    let bandwidth = match &a.bandwidth {
        Some(b) => Some(
            b.parse::<tlslab_relay::Bandwidth>()
                .map_err(|e| usage(format!("--bandwidth: {e}")))?,
        ),
        None => None,
    };
    let conditions = tlslab_relay::Conditions {
        delay: a.delay,
        jitter: a.jitter,
        bandwidth,
        loss: tlslab_relay::parse_loss(&a.loss).map_err(|e| usage(format!("--loss: {e}")))?,
        loss_delay: a.loss_delay,
    };
    conditions.validate().map_err(usage)?;
    let cfg = tlslab_relay::RelayConfig {
        listen: a.listen,
        upstream,
        conditions,
        seed: a.seed,
        idle_timeout: a.idle_timeout,
        max_queued: tlslab_relay::parse_size(&a.max_queued)
            .map_err(|e| usage(format!("--max-queued: {e}")))?,
    };
    cfg.validate()
        .map_err(|e| usage(format!("--idle-timeout/--max-queued: {e}")))?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(argv: &[&str]) -> crate::args::Cli {
        crate::args::Cli::try_parse_from(argv).unwrap()
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
    fn load_flags_validate() {
        let cli = parse(&["tlslab", "load", "https://127.0.0.1:1/", "--reuse", "150"]);
        let crate::args::Command::Load(a) = cli.command else {
            panic!()
        };
        assert!(load(&a).unwrap_err().to_string().contains("0 to 100"));

        let cli = parse(&["tlslab", "load", "ftp://x/"]);
        let crate::args::Command::Load(a) = cli.command else {
            panic!()
        };
        assert!(load(&a).unwrap_err().downcast_ref::<Usage>().is_some());

        let cli = parse(&[
            "tlslab",
            "load",
            "https://127.0.0.1:1/",
            "--reuse",
            "50",
            "-n",
            "10",
        ]);
        let crate::args::Command::Load(a) = cli.command else {
            panic!()
        };
        let cfg = load(&a).unwrap();
        assert_eq!(cfg.reuse, 0.5);
        assert_eq!(cfg.duration, None);
        assert_eq!(cfg.requests, Some(10));
    }

    #[test]
    fn load_ablation_needs_confirmation_and_the_ca() {
        let load_args = |argv: &[&str]| {
            let mut v = vec!["tlslab", "load", "https://127.0.0.1:1/", "-n", "1"];
            v.extend_from_slice(argv);
            match parse(&v).command {
                crate::args::Command::Load(a) => a,
                _ => unreachable!(),
            }
        };
        let err = load(&load_args(&["--ablate", "cipher"])).unwrap_err();
        assert!(err.downcast_ref::<Usage>().is_some());
        assert!(err.to_string().contains("--insecure-ablation"), "{err}");
        let err = load(&load_args(&[
            "--ablate",
            "cipher",
            "--insecure-ablation",
            "--insecure",
        ]))
        .unwrap_err();
        assert!(err.downcast_ref::<Usage>().is_some());
        assert!(err.to_string().contains("--cacert"), "{err}");
        let err = load(&load_args(&["--ablate", "bogus", "--insecure-ablation"])).unwrap_err();
        assert!(err.downcast_ref::<Usage>().is_some(), "{err}");

        let dir = tempfile::tempdir().unwrap();
        tlslab_crypto::pki::generate(KeyType::EcdsaP256, &[])
            .unwrap()
            .write_to(dir.path())
            .unwrap();
        let ca = dir.path().join(tlslab_crypto::pki::CA_CERT_FILE);
        let ca = ca.to_str().unwrap();
        let cfg = load(&load_args(&[
            "--ablate",
            "skeleton",
            "--insecure-ablation",
            "--cacert",
            ca,
        ]))
        .unwrap();
        assert_eq!(cfg.ablation, tlslab_crypto::meter::AblationSet::skeleton());
        let cfg = load(&load_args(&["--cacert", ca])).unwrap();
        assert!(cfg.ablation.is_empty());
    }

    #[test]
    fn conflicting_flags_are_usage_errors() {
        for argv in [
            &[
                "tlslab",
                "load",
                "https://x/",
                "--insecure",
                "--cacert",
                "ca.pem",
            ][..],
            &["tlslab", "serve", "--root", ".", "--fileset", "specweb96"][..],
            &["tlslab", "serve", "--cert", "a.pem"][..],
        ] {
            let err = crate::args::Cli::try_parse_from(argv).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{argv:?}");
        }
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
