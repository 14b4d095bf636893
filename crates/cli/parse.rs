//! Value parsers of clap flags (durations, thread counts, key types).
//! A leaf: it imports nothing from the other files of the binary, and its
//! errors are clap's (exit code 2, naming the flag).

use std::time::Duration;

use tlslab_crypto::pki::KeyType;

/// The most engine or worker threads `--threads` takes: more threads than
/// this are a mistake (a client count given as threads), not a machine.
pub const MAX_THREADS: usize = 1024;

/// Parses `--threads N`: 1 to [`MAX_THREADS`] (the one place the bound is
/// checked, for every subcommand with --threads).
pub fn parse_threads(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of threads"))?;
    match n {
        0 => Err("give at least 1 thread".into()),
        n if n > MAX_THREADS => Err(format!(
            "{n} threads is more than the {MAX_THREADS} tlslab runs; give about one per CPU \
             (more clients are -c, not threads)"
        )),
        n => Ok(n),
    }
}

/// Like [`parse_threads`], where 0 means one thread per CPU (`dispatch`).
pub fn parse_threads_or_auto(s: &str) -> Result<usize, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    parse_threads(s)
}

/// Parses `10s`, `500ms`, `2m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration ({e}); write it like 10s, 500ms or 2m"))
}

/// A duration, or `off` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationOrOff(pub Option<Duration>);

/// Like [`parse_duration`], and `off` means none.
pub fn parse_duration_or_off(s: &str) -> Result<DurationOrOff, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(DurationOrOff(None));
    }
    parse_duration(s).map(|d| DurationOrOff(Some(d)))
}

/// Like [`parse_duration`], and `inf` means no limit.
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    if s.eq_ignore_ascii_case("inf") || s.eq_ignore_ascii_case("infinite") {
        return Ok(Duration::MAX);
    }
    parse_duration(s)
}

/// Parses a rate per second: `150`, `150/s` or `150/sec`, a whole number
/// of at least 1.
pub fn parse_per_second(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let n = t
        .strip_suffix("/sec")
        .or_else(|| t.strip_suffix("/s"))
        .unwrap_or(t)
        .trim();
    match n.parse::<u32>() {
        Ok(0) => Err("give at least 1 per second, e.g. 150/s".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "'{s}' is not a rate; give a whole number per second, e.g. 150 or 150/s"
        )),
    }
}

/// Parses a certificate key type (`--key-type`, `--intermediate-key`).
pub fn parse_key_type(s: &str) -> Result<KeyType, String> {
    s.parse::<KeyType>().map_err(|e| e.to_string())
}

/// Parses a packet-level WAN path spec (`--path` of `lab`, `cluster` and
/// `probe`): `key=value` pairs such as `delay=25ms,rate=10mbit,loss=1%`,
/// as `tlslab path` takes them (crates/path, `PathConfig`).
pub fn parse_path_spec(s: &str) -> Result<tlslab_path::PathConfig, String> {
    s.parse::<tlslab_path::PathConfig>().map_err(|e| {
        format!(
            "{e} (keys: delay, jitter, reorder, rate, trace, queue, loss, ge, each with an \
             optional up./down. prefix; seed, cc, pcap, pcap-size, pcap-files)"
        )
    })
}

/// `--threads`, or one per CPU this process may use when not given.
pub fn threads_or_cpus(given: Option<usize>) -> usize {
    given.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
