//! Dropping proxies: listed clients and clients above a request-rate
//! threshold.
//!
//! Seed 001 removed known proxy servers from its trace because a proxy
//! aggregates many users behind one address and would fake session reuse.
//! A client is the log's first field, an IP address or a host name
//! ([`Client`]). [`read_client_list`] reads the `--exclude-clients` file;
//! [`RateLimit`] catches unlisted proxies by their rate.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use super::LogEntry;
use super::parse::Client;
use crate::Error;

/// Parses a client list: one IP address or host name per line, as the
/// log writes it; `#` starts a comment; blank lines are ignored. `path` is
/// used in messages.
pub fn parse_client_list(text: &str, path: &Path) -> Result<HashSet<Client>, Error> {
    let mut out = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let s = line.split('#').next().unwrap_or_default().trim();
        if s.is_empty() {
            continue;
        }
        let client = Client::parse(s).map_err(|why| Error::Line {
            path: path.to_path_buf(),
            line: i as u64 + 1,
            problem: format!("{why}; write one address or host name per line (# for comments)"),
        })?;
        out.insert(client);
    }
    Ok(out)
}

/// Reads a client list file (see [`parse_client_list`]).
pub fn read_client_list(path: &Path) -> Result<HashSet<Client>, Error> {
    let text = crate::input::read_capped_to_string(path, crate::input::MAX_CONFIG_FILE).map_err(
        |source| Error::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        },
    )?;
    parse_client_list(&text, path)
}

/// A request-rate threshold: a client that made more than `max_requests`
/// requests within any span of `per` (by log timestamps, whole seconds)
/// is dropped. Written `N/s`, `N/min`, `N/h` or `N/<duration>` (`600/10m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RateLimit {
    /// The most requests allowed in any window.
    pub max_requests: u64,
    /// The window length (at least 1 s).
    pub per: Duration,
}

impl FromStr for RateLimit {
    type Err = Error;

    fn from_str(s: &str) -> Result<RateLimit, Error> {
        let bad = |why: &str| {
            Error::Invalid(format!(
                "rate threshold '{s}' {why}; write it like 100/min, 10/s or 600/10m"
            ))
        };
        let (n, per) = s.split_once('/').ok_or_else(|| bad("has no '/'"))?;
        let max_requests: u64 = n
            .trim()
            .parse()
            .map_err(|_| bad("does not start with a whole number"))?;
        let per = match per.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            other => humantime::parse_duration(other)
                .map_err(|_| bad("has no valid period after '/'"))?,
        };
        if per < Duration::from_secs(1) || per.subsec_nanos() != 0 {
            return Err(bad(
                "has a period that is not a whole number of seconds ≥ 1 s (log times are whole seconds)",
            ));
        }
        Ok(RateLimit { max_requests, per })
    }
}

/// What the filters dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FilterReport {
    /// Listed clients (addresses or host names) that appeared in the log.
    pub excluded_ips: u64,
    /// Their requests.
    pub excluded_requests: u64,
    /// Clients dropped for exceeding the rate threshold.
    pub rate_ips: u64,
    /// Their requests.
    pub rate_requests: u64,
}

/// Keeps the entries of clients that are neither in `exclude` nor above
/// `rate`, in their original order.
pub fn filter(
    entries: Vec<LogEntry>,
    exclude: &HashSet<Client>,
    rate: Option<RateLimit>,
) -> (Vec<LogEntry>, FilterReport) {
    let mut report = FilterReport::default();
    let mut times: HashMap<&Client, Vec<i64>> = HashMap::new();
    for e in &entries {
        times.entry(&e.client).or_default().push(e.time);
    }
    let mut drop: HashSet<Client> = HashSet::new();
    for (client, ts) in &mut times {
        if exclude.contains(*client) {
            report.excluded_ips += 1;
            report.excluded_requests += ts.len() as u64;
            drop.insert((*client).clone());
        } else if let Some(r) = rate
            && exceeds(ts, r)
        {
            report.rate_ips += 1;
            report.rate_requests += ts.len() as u64;
            drop.insert((*client).clone());
        }
    }
    let kept = entries
        .into_iter()
        .filter(|e| !drop.contains(&e.client))
        .collect();
    (kept, report)
}

/// Whether more than `r.max_requests` of `times` fall in some window of
/// `r.per` seconds ([t, t + per)).
fn exceeds(times: &mut [i64], r: RateLimit) -> bool {
    if (times.len() as u64) <= r.max_requests {
        return false;
    }
    times.sort_unstable();
    let per = i64::try_from(r.per.as_secs()).unwrap_or(i64::MAX);
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi].saturating_sub(times[lo]) >= per {
            lo += 1;
        }
        if (hi - lo + 1) as u64 > r.max_requests {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::parse::parse_str;

    #[test]
    fn ip_list_parses_and_reports_bad_lines() {
        let ips = parse_client_list(
            "# proxies\n10.0.0.1\n\n  2001:db8::1  # aol\n",
            Path::new("p"),
        )
        .unwrap();
        assert_eq!(ips.len(), 2);
        // Host names are identities too, case-insensitively.
        let hosts = parse_client_list("10.0.0.1\nProxy.AOL.com\n", Path::new("p.txt")).unwrap();
        assert!(hosts.contains(&Client::Host("proxy.aol.com".into())));
        let e = parse_client_list("10.0.0.1\nproxy aol\n", Path::new("p.txt"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("p.txt:2: client 'proxy aol' is neither an IP address nor a host name"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, "1.1.1.1\n").unwrap();
        assert_eq!(read_client_list(&p).unwrap().len(), 1);
        assert!(read_client_list(&dir.path().join("none")).is_err());
    }

    #[test]
    fn rate_limit_parses() {
        assert_eq!(
            "100/min".parse::<RateLimit>().unwrap(),
            RateLimit {
                max_requests: 100,
                per: Duration::from_secs(60)
            }
        );
        assert_eq!(
            "600/10m".parse::<RateLimit>().unwrap().per,
            Duration::from_secs(600)
        );
        for bad in ["100", "x/s", "5/500ms", "5/fortnightly"] {
            assert!(bad.parse::<RateLimit>().is_err(), "{bad}");
        }
    }

    #[test]
    fn drops_listed_and_fast_ips_keeps_order() {
        let mut log = String::new();
        // 1.1.1.1: 3 requests in 2 s; 2.2.2.2: 3 requests 10 s apart; 3.3.3.3 listed.
        for (ip, t) in [
            ("1.1.1.1", 0),
            ("2.2.2.2", 0),
            ("3.3.3.3", 1),
            ("1.1.1.1", 1),
            ("2.2.2.2", 10),
            ("1.1.1.1", 2),
            ("2.2.2.2", 20),
        ] {
            log += &format!(
                "{ip} - - [01/Jan/2020:00:00:{t:02} +0000] \"GET /{ip} HTTP/1.1\" 200 10\n"
            );
        }
        let (entries, _) = parse_str(&log);
        let exclude: HashSet<Client> = ["3.3.3.3".parse().unwrap()].into();
        let (kept, r) = filter(entries.clone(), &exclude, Some("2/5s".parse().unwrap()));
        assert_eq!(
            kept.iter().map(|e| e.line).collect::<Vec<_>>(),
            vec![2, 5, 7]
        );
        assert_eq!(
            r,
            FilterReport {
                excluded_ips: 1,
                excluded_requests: 1,
                rate_ips: 1,
                rate_requests: 3
            }
        );
        // A looser threshold keeps 1.1.1.1.
        let (kept, r) = filter(entries, &HashSet::new(), Some("3/5s".parse().unwrap()));
        assert_eq!(kept.len(), 7);
        assert_eq!(r, FilterReport::default());
    }
}
