//! Parsers for what the peer tools print: h2load's summary and
//! `openssl s_client`'s session lines.

/// h2load's `requests:` summary line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct H2loadRequests {
    /// `N total`.
    pub total: u64,
    /// `N started`.
    pub started: u64,
    /// `N done`.
    pub done: u64,
    /// `N succeeded`.
    pub succeeded: u64,
    /// `N failed`.
    pub failed: u64,
    /// `N errored`.
    pub errored: u64,
    /// `N timeout`.
    pub timeout: u64,
}

/// Finds and parses h2load's line
/// `requests: 200 total, 200 started, 200 done, 200 succeeded, 0 failed, 0 errored, 0 timeout`.
pub fn parse_h2load(out: &str) -> Option<H2loadRequests> {
    let line = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("requests:"))?;
    let mut r = H2loadRequests::default();
    for part in line.split(',') {
        let mut w = part.split_whitespace();
        let n: u64 = w.next()?.parse().ok()?;
        let field = match w.next()? {
            "total" => &mut r.total,
            "started" => &mut r.started,
            "done" => &mut r.done,
            "succeeded" => &mut r.succeeded,
            "failed" => &mut r.failed,
            "errored" => &mut r.errored,
            "timeout" => &mut r.timeout,
            _ => continue,
        };
        *field = n;
    }
    Some(r)
}

/// h2load's `Application protocol: h2` value.
pub fn h2load_protocol(out: &str) -> Option<&str> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Application protocol:"))
        .map(str::trim)
}

/// The session lines `openssl s_client` prints per connection:
/// `New, TLSv1.3, Cipher is …` or `Reused, TLSv1.3, Cipher is …`.
/// Returns (reused?, protocol) for each.
pub fn s_client_sessions(out: &str) -> Vec<(bool, String)> {
    out.lines()
        .filter_map(|l| {
            let (reused, rest) = if let Some(r) = l.strip_prefix("Reused, ") {
                (true, r)
            } else {
                (false, l.strip_prefix("New, ")?)
            };
            let proto = rest.split(',').next()?.trim();
            proto
                .starts_with("TLS")
                .then(|| (reused, proto.to_string()))
        })
        .collect()
}
