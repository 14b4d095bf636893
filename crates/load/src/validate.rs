//! The checks of a load configuration: the one place the load rules live.

use std::time::Duration;

use tlslab_workload::think::ThinkTime;

use crate::config::{LoadConfig, Workload};
use crate::error::Error;
use crate::protocol::Http3;

/// The most clients a run may have (client numbers are 32-bit).
const MAX_CLIENTS: usize = 1_000_000;

/// The most streams in flight per HTTP/2 or HTTP/3 connection (`-m`).
const MAX_STREAMS: u32 = 10_000;

/// The longest warm-up or duration accepted (a year), so deadlines cannot
/// overflow the clock.
const MAX_SPAN: Duration = Duration::from_secs(365 * 24 * 3600);

impl LoadConfig {
    /// Checks that the configuration can run (`validate::validate`).
    pub fn validate(&self) -> Result<(), Error> {
        validate(self)
    }
}

/// Checks that `cfg` can run, before any work (what [`crate::run`] checks
/// first, and the one place the load rules live): bounds of clients,
/// threads, duration, warm-up, timeout, reuse, rate and streams, a valid
/// `sni`, and options that work together. A pure function: no I/O. The
/// error is [`Error::Invalid`] (a usage error, [`Error::is_usage`]) naming
/// the flag and the fix, or a bad `--sni`.
pub fn validate(cfg: &LoadConfig) -> Result<(), Error> {
    let bad = |m: &str| Err(Error::Invalid(m.into()));
    if cfg.targets.is_empty() {
        return bad("no target URL; give at least one, such as https://127.0.0.1:8443/");
    }
    if cfg.clients == 0 || cfg.clients > MAX_CLIENTS {
        return bad("--clients must be between 1 and 1,000,000");
    }
    if cfg.threads == 0 {
        return bad("--threads must be at least 1");
    }
    if cfg.duration.is_none() && cfg.requests.is_none() && cfg.replay.is_none() {
        return bad("nothing bounds the run; give a duration (-d) or a request count (-n)");
    }
    if cfg.warmup > MAX_SPAN || cfg.duration.is_some_and(|d| d > MAX_SPAN) {
        return bad(
            "-d/--duration and --warmup must each be at most 365 days (1y is 365.25); give a shorter run",
        );
    }
    if cfg.duration == Some(Duration::ZERO) {
        return bad("the duration is zero; give -d of at least 1ms");
    }
    if cfg.requests == Some(0) {
        return bad("the request count is zero; give -n of at least 1");
    }
    if !(0.0..=1.0).contains(&cfg.reuse) {
        return bad("--reuse must be between 0 and 100 (%)");
    }
    if cfg.timeout.is_zero() {
        return bad(
            "--timeout 0 would time out every connection at once; give a positive duration such as 10s, or inf",
        );
    }
    if let Some(sni) = &cfg.sni {
        if sni.is_empty() {
            return bad(
                "--sni is empty; give the server name to send (a DNS name), or drop --sni to use the URL's host",
            );
        }
        crate::target::server_name(Some(sni), "")?;
    }
    if cfg.retry_backoff > MAX_SPAN {
        return bad("--retry-backoff must be at most 365 days; give e.g. 10ms");
    }
    if let Some(o) = &cfg.open_loop {
        if !(o.rate.is_finite() && o.rate > 0.0 && o.rate <= 1e7) {
            return bad("--rate must be above 0 and at most 10,000,000 arrivals per second");
        }
        if o.max_in_flight == 0 {
            return bad("--max-in-flight must be at least 1");
        }
        if cfg.requests_per_conn != 1 {
            return bad(
                "an open loop makes one request per arrival on a new connection; drop --requests-per-conn",
            );
        }
        if cfg.retry_on_failure || cfg.think_time != ThinkTime::Zero {
            return bad(
                "--retry-on-failure and --think-time describe closed-loop clients; drop them with --rate",
            );
        }
    }
    if let Some(h2) = &cfg.http2
        && (h2.max_concurrent_streams == 0 || h2.max_concurrent_streams > MAX_STREAMS)
    {
        return bad("--max-concurrent-streams must be between 1 and 10,000");
    }
    if let Some(h3) = &cfg.http3 {
        validate_h3(cfg, h3)?;
    }
    // An open loop's arrivals are e-commerce sessions; a replay's are the
    // log's.
    let (model, open) = match cfg.workload {
        Workload::Replay => (
            "a replay takes its order, timing and resumption from the log (its arrivals are the \
             log's: pace them with --speed)",
            cfg.open_loop.is_some(),
        ),
        Workload::Ecommerce => (
            "the e-commerce model decides connections, resumption and think times itself",
            false,
        ),
        _ => return Ok(()),
    };
    if open
        || cfg.retry_on_failure
        || cfg.think_time != ThinkTime::Zero
        || cfg.reuse != 0.0
        || cfg.requests_per_conn != 1
    {
        return Err(Error::Invalid(format!(
            "{model}; drop --rate, --retry-on-failure, --think-time, --reuse and --requests-per-conn"
        )));
    }
    Ok(())
}

/// The rules of HTTP/3 over QUIC (`--h3`): what QUIC cannot carry, and the
/// bounds of the flood beside the load.
fn validate_h3(cfg: &LoadConfig, h3: &Http3) -> Result<(), Error> {
    let bad = |m: &str| Err(Error::Invalid(m.to_string()));
    if h3.max_concurrent_streams == 0 || h3.max_concurrent_streams > MAX_STREAMS {
        return Err(Error::Invalid(format!(
            "-m {}: give 1 to 10,000 streams per connection",
            h3.max_concurrent_streams
        )));
    }
    if h3.rebind_after == Some(0) {
        return bad(
            "--quic-rebind-after 0: give the number of requests (at least 1) after which each client rebinds",
        );
    }
    if cfg.http2.is_some() {
        return bad("--h3 and --h2 exclude each other; choose one");
    }
    if cfg.workload == Workload::Ecommerce
        && cfg.open_loop.is_some()
        && (h3.new_socket || h3.rebind_after.is_some())
    {
        return bad(
            "--rate with --workload ecommerce makes a browser per arrival, and the browsers share \
             a few UDP sockets: drop --quic-new-socket and --quic-rebind-after",
        );
    }
    if cfg.ablation.contains(tlslab_crypto::meter::Ablation::Cache) {
        return bad(
            "--ablate cache is TLS 1.2 session-ID resumption, which QUIC does not have; drop cache from --ablate",
        );
    }
    if !cfg
        .versions
        .contains(&tlslab_crypto::provider::Version::Tls13)
    {
        return bad("QUIC needs TLS 1.3; use --tls 1.3 or 1.2,1.3");
    }
    // A closed loop's connections carry K requests; an open loop's arrival
    // and a replayed request are one request on a connection of its own,
    // and an e-commerce page's connection carries the page.
    let closed =
        cfg.open_loop.is_none() && cfg.replay.is_none() && cfg.workload != Workload::Ecommerce;
    if closed && cfg.requests_per_conn > 0 && h3.max_concurrent_streams > cfg.requests_per_conn {
        let (m, k) = (h3.max_concurrent_streams, cfg.requests_per_conn);
        return Err(Error::Invalid(format!(
            "-m {m} keeps {m} streams in flight, but --requests-per-conn {k} closes each HTTP/3 \
             connection after {k} request(s); give --requests-per-conn 0 (keep-alive) or at \
             least {m}, or -m {k}"
        )));
    }
    if cfg.mss.is_some() {
        return bad(
            "--mss is TCP-only (a TCP socket option; QUIC has no segments); drop --mss or --h3",
        );
    }
    if cfg.targets.iter().any(|t| !t.is_tls()) {
        return bad("--h3 needs https:// URLs (QUIC is always encrypted)");
    }
    let first = &cfg.targets[0];
    if cfg
        .targets
        .iter()
        .any(|t| t.host != first.host || t.port != first.port)
    {
        return bad("--h3 loads one origin; give URLs with the same host and port");
    }
    if let Some(f) = h3.flood {
        let host = first.host.trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback && !f.allow_remote {
            return Err(Error::Invalid(format!(
                "--flood sends only to loopback, and {host} is not; give a 127.0.0.1 (or [::1]) \
                 URL, or add --flood-allow-remote for a server you run"
            )));
        }
        let (max_rate, max_count) = (f.kind.max_rate(), f.kind.max_count());
        if f.rate == 0 || f.rate > max_rate {
            return Err(Error::Invalid(format!(
                "--flood-rate {}: give 1 to {max_rate} per second for --flood {}",
                f.rate,
                f.kind.name()
            )));
        }
        if let Some(m) = f.max
            && (m == 0 || m > max_count)
        {
            return Err(Error::Invalid(format!(
                "--flood-max {m}: give 1 to {max_count} for --flood {}",
                f.kind.name()
            )));
        }
    }
    Ok(())
}
