//! Parsing Common, Combined and nginx-default access logs.

use std::collections::BTreeMap;
use std::fmt;
use std::io::BufRead;
use std::net::IpAddr;
use std::path::Path;

use serde::Serialize;

use crate::Error;
use crate::input::{Line, MAX_DISCARD, MAX_LINE, human_bytes, read_line_capped};

/// The reason kind of a line longer than [`MAX_LINE`] (64 KiB): it is
/// skipped, counted under this kind, and always warned about.
pub const TOO_LONG: &str = "line too long";

/// The first CLF field: who made the request. An IPv4 or IPv6 address, or
/// a host name when the server resolved addresses (Apache's
/// `HostnameLookups On`; the Internet Traffic Archive's NASA, ClarkNet,
/// Calgary and Saskatchewan traces). Replay treats it as an opaque
/// identity: one identity is one browser.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// An address, normalised (`2001:0db8::1` equals `2001:db8::1`).
    Ip(IpAddr),
    /// A host name, lower-cased (DNS names are case-insensitive).
    Host(String),
}

impl Client {
    /// Parses an identity: an IP address, or a host name made of ASCII
    /// letters, digits, `-`, `_` and `.` (at most 253 bytes).
    pub fn parse(s: &str) -> Result<Client, String> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Client::Ip(ip));
        }
        // `[::1]` and `::ffff:1.2.3.4`-style forms some servers write.
        if let Some(ip) = s
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|r| r.parse::<IpAddr>().ok())
        {
            return Ok(Client::Ip(ip));
        }
        let ok = !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && s.bytes().any(|b| b.is_ascii_alphanumeric());
        if ok {
            Ok(Client::Host(s.to_ascii_lowercase()))
        } else {
            Err(format!(
                "client '{s}' is neither an IP address nor a host name (letters, digits, '-', '_', '.')"
            ))
        }
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Client::Ip(ip) => ip.fmt(f),
            Client::Host(h) => f.write_str(h),
        }
    }
}

impl std::str::FromStr for Client {
    type Err = String;

    fn from_str(s: &str) -> Result<Client, String> {
        Client::parse(s)
    }
}

impl Serialize for Client {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Which grammar a line followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LogFormat {
    /// Common Log Format: `host ident user [time] "request" status bytes`.
    Common,
    /// Combined (Apache) or nginx default: Common plus `"referer" "agent"`
    /// (further fields after those are ignored).
    Combined,
}

/// One parsed request line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogEntry {
    /// 1-based line number in the log.
    pub line: u64,
    /// The client identity: an address or a host name.
    pub client: Client,
    /// When the request arrived, in seconds since the Unix epoch (UTC).
    pub time: i64,
    /// The HTTP method, e.g. `GET`.
    pub method: String,
    /// The request target's path (and query), e.g. `/a/b.html?x=1`.
    pub path: String,
    /// The response status.
    pub status: u16,
    /// Response body bytes sent (`-` reads as 0).
    pub bytes: u64,
    /// The grammar the line followed.
    pub format: LogFormat,
}

/// How many skipped lines [`ParseReport::skipped`] keeps, with reasons.
pub const MAX_SKIPPED_KEPT: usize = 100;

/// What a parse saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ParseReport {
    /// Lines read, blank ones included.
    pub lines: u64,
    /// Lines parsed into entries.
    pub parsed: u64,
    /// Blank lines (ignored, not counted as skipped).
    pub blank: u64,
    /// The first [`MAX_SKIPPED_KEPT`] malformed lines: (line number, reason).
    pub skipped: Vec<(u64, String)>,
    /// All malformed lines.
    pub skipped_count: u64,
    /// Malformed lines by kind of reason (e.g. `bad time`), all of them.
    pub reasons: BTreeMap<&'static str, u64>,
}

/// Above this share of skipped lines (1 %), [`ParseReport::warning`] warns.
pub const SKIP_WARN_SHARE: f64 = 0.01;

impl ParseReport {
    /// Skipped lines as a share of non-blank lines (0 for an empty log).
    pub fn skipped_share(&self) -> f64 {
        let n = self.lines - self.blank;
        if n == 0 {
            0.0
        } else {
            self.skipped_count as f64 / n as f64
        }
    }

    /// The commonest reasons, most frequent first (ties by name), at most `n`.
    pub fn top_reasons(&self, n: usize) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> = self.reasons.iter().map(|(k, c)| (*k, *c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// A warning when more than [`SKIP_WARN_SHARE`] of the lines were
    /// skipped, or any line was longer than [`MAX_LINE`]: how many, the commonest reasons with their counts, and the
    /// first skipped line as an example. `None` below the threshold.
    pub fn warning(&self, name: &str) -> Option<String> {
        if self.skipped_share() <= SKIP_WARN_SHARE && !self.reasons.contains_key(TOO_LONG) {
            return None;
        }
        let reasons = self
            .top_reasons(5)
            .iter()
            .map(|(k, c)| format!("{k}: {c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let example = self
            .skipped
            .first()
            .map(|(l, r)| format!("; e.g. line {l}: {r}"))
            .unwrap_or_default();
        Some(format!(
            "{name}: skipped {} of {} lines ({:.1} %) as malformed; commonest reasons: {reasons}{example}. \
             The replay leaves them out; --strict makes a skipped line an error",
            self.skipped_count,
            self.lines - self.blank,
            100.0 * self.skipped_share()
        ))
    }
}

/// Why a line was skipped: a short kind for counting, and the full message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// A short, stable kind, e.g. `bad time` (the key of [`ParseReport::reasons`]).
    pub kind: &'static str,
    /// What was wrong with this line, and how to fix it.
    pub message: String,
}

fn skip(kind: &'static str, message: impl Into<String>) -> Skip {
    Skip {
        kind,
        message: message.into(),
    }
}

/// Parses a whole log from `reader`; `name` is used in I/O error messages.
/// Malformed lines are skipped and reported, never fatal, and so are lines
/// longer than [`MAX_LINE`] (64 KiB, kind [`TOO_LONG`]), which are never
/// held in memory. Only a line with no end within [`MAX_DISCARD`] (16 MiB:
/// not text, e.g. `/dev/zero`) stops the parse, as an [`Error::Line`].
pub fn parse_reader<R: BufRead>(
    reader: R,
    name: &Path,
) -> Result<(Vec<LogEntry>, ParseReport), Error> {
    parse_reader_with(reader, name, false)
}

/// Like [`parse_reader`]; with `strict`, the first malformed line is an
/// [`Error::Line`] naming its line number and reason.
pub fn parse_reader_with<R: BufRead>(
    mut reader: R,
    name: &Path,
    strict: bool,
) -> Result<(Vec<LogEntry>, ParseReport), Error> {
    let mut entries = Vec::new();
    let mut report = ParseReport::default();
    let mut buf = Vec::new();
    loop {
        let line = match read_line_capped(&mut reader, &mut buf, MAX_LINE, MAX_DISCARD) {
            Ok(l) => l,
            // An endless line (`/dev/zero`, a binary file): the content is
            // bad, so it is a line error, as under --strict.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(Error::Line {
                    path: name.to_path_buf(),
                    line: report.lines + 1,
                    problem: format!("{e}; give an Apache or nginx access log"),
                });
            }
            Err(source) => {
                return Err(Error::Io {
                    action: "read",
                    path: name.to_path_buf(),
                    source,
                });
            }
        };
        if line == Line::Eof {
            break;
        }
        report.lines += 1;
        let line_no = report.lines;
        let result = match (line, std::str::from_utf8(&buf)) {
            (Line::TooLong { len }, _) => Err(skip(
                TOO_LONG,
                format!(
                    "the line is {len} bytes, longer than the {} an access-log line may have; \
                     is this an access log?",
                    human_bytes(MAX_LINE as u64)
                ),
            )),
            (_, Ok(s)) if s.trim().is_empty() => {
                report.blank += 1;
                continue;
            }
            (_, Ok(s)) => parse_line_kind(s.trim_end_matches(['\n', '\r']), line_no),
            (_, Err(e)) => Err(skip(
                "not UTF-8",
                format!(
                    "not UTF-8 (byte {}); re-encode the log as UTF-8",
                    e.valid_up_to()
                ),
            )),
        };
        match result {
            Ok(e) => {
                report.parsed += 1;
                entries.push(e);
            }
            Err(why) => {
                if strict {
                    return Err(Error::Line {
                        path: name.to_path_buf(),
                        line: line_no,
                        problem: format!(
                            "{} (--strict makes a malformed line an error; drop --strict to skip it)",
                            why.message
                        ),
                    });
                }
                report.skipped_count += 1;
                *report.reasons.entry(why.kind).or_default() += 1;
                if report.skipped.len() < MAX_SKIPPED_KEPT {
                    report.skipped.push((line_no, why.message));
                }
            }
        }
    }
    Ok((entries, report))
}

/// Parses the log file at `path`.
pub fn parse_file(path: &Path) -> Result<(Vec<LogEntry>, ParseReport), Error> {
    parse_file_with(path, false)
}

/// Parses the log file at `path`; `strict` as in [`parse_reader_with`].
pub fn parse_file_with(path: &Path, strict: bool) -> Result<(Vec<LogEntry>, ParseReport), Error> {
    let f = std::fs::File::open(path).map_err(|source| Error::Io {
        action: "open",
        path: path.to_path_buf(),
        source,
    })?;
    parse_reader_with(std::io::BufReader::new(f), path, strict)
}

/// Parses log text held in memory.
pub fn parse_str(text: &str) -> (Vec<LogEntry>, ParseReport) {
    // Reading from a slice cannot fail.
    parse_reader(text.as_bytes(), Path::new("<memory>")).unwrap_or_default()
}

/// A cursor over one line.
struct Cur<'a> {
    s: &'a str,
}

impl<'a> Cur<'a> {
    fn token(&mut self, what: &str) -> Result<&'a str, Skip> {
        let s = self.s.trim_start_matches(' ');
        let end = s.find(' ').unwrap_or(s.len());
        if end == 0 {
            return Err(skip(
                "truncated line",
                format!("missing {what}; the line ends early (truncated?)"),
            ));
        }
        self.s = &s[end..];
        Ok(&s[..end])
    }

    fn bracketed(&mut self, what: &str) -> Result<&'a str, Skip> {
        let s = self.s.trim_start_matches(' ');
        let rest = s.strip_prefix('[').ok_or_else(|| {
            skip(
                "not CLF",
                format!("expected '[' before the {what}; is this Common/Combined Log Format?"),
            )
        })?;
        let end = rest
            .find(']')
            .ok_or_else(|| skip("bad time", format!("the {what} has no closing ']'")))?;
        self.s = &rest[end + 1..];
        Ok(&rest[..end])
    }

    /// A double-quoted field; `\"` and `\\` escapes are honoured.
    fn quoted(&mut self, what: &str) -> Result<String, Skip> {
        let s = self.s.trim_start_matches(' ');
        let rest = s
            .strip_prefix('"')
            .ok_or_else(|| skip("bad quoting", format!("expected '\"' before the {what}")))?;
        if let Some(i) = closing_quotes(rest).next() {
            self.s = &rest[i + 1..];
            return Ok(unescape(&rest[..i]));
        }
        Err(skip(
            "bad quoting",
            format!("the {what} has no closing '\"'"),
        ))
    }
}

/// Byte offsets of the unescaped `"` in `s` (a backslash escapes the next
/// character).
fn closing_quotes(s: &str) -> impl Iterator<Item = usize> + '_ {
    let mut escaped = false;
    s.char_indices().filter_map(move |(i, c)| {
        if escaped {
            escaped = false;
            None
        } else if c == '\\' {
            escaped = true;
            None
        } else if c == '"' {
            Some(i)
        } else {
            None
        }
    })
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(e) = chars.next() {
                    out.push(e);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Parses one line (without its newline). `line` is used in messages.
pub fn parse_line(s: &str, line: u64) -> Result<LogEntry, String> {
    parse_line_kind(s, line).map_err(|e| e.message)
}

/// The fields after the request: `status bytes`, then optionally
/// `"referer" "agent"` (and anything after those).
fn parse_tail(s: &str) -> Result<(u16, u64, LogFormat), Skip> {
    let mut c = Cur { s };
    let status_s = c.token("status")?;
    let status: u16 = status_s
        .parse()
        .ok()
        .filter(|s| (100..=999).contains(s))
        .ok_or_else(|| {
            skip(
                "bad status",
                format!("status '{status_s}' is not a 3-digit HTTP status"),
            )
        })?;
    let bytes_s = c.token("byte count")?;
    let bytes: u64 = if bytes_s == "-" {
        0
    } else {
        bytes_s.parse().map_err(|_| {
            skip(
                "bad byte count",
                format!("byte count '{bytes_s}' is not a whole number or '-'"),
            )
        })?
    };
    let format = if c.s.trim().is_empty() {
        LogFormat::Common
    } else {
        c.quoted("referer")?;
        c.quoted("user agent")?;
        LogFormat::Combined
    };
    Ok((status, bytes, format))
}

/// Parses one line, saying what kind of problem skipped it.
fn parse_line_kind(s: &str, line: u64) -> Result<LogEntry, Skip> {
    let mut c = Cur { s };
    let host = c.token("client")?;
    let client = Client::parse(host).map_err(|m| skip("bad client", m))?;
    c.token("ident field")?;
    c.token("user field")?;
    let t = c.bracketed("time")?;
    let time = parse_time(t).map_err(|m| skip("bad time", m))?;
    // The request. Old servers wrote a request's own quotes unescaped
    // (`"GET /a "b".gif HTTP/1.0"`), so the closing quote is the first
    // one after which the rest of the line parses; if none does, the
    // first one's problem is reported.
    let rest = c.s.trim_start_matches(' ');
    let body = rest.strip_prefix('"').ok_or_else(|| {
        skip(
            "bad quoting",
            "expected '\"' before the request".to_string(),
        )
    })?;
    let mut first_err = None;
    let mut found = None;
    for i in closing_quotes(body) {
        match parse_tail(&body[i + 1..]) {
            Ok(tail) => {
                found = Some((i, tail));
                break;
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let (end, (status, bytes, format)) = match (found, first_err) {
        (Some(f), _) => f,
        (None, Some(e)) => return Err(e),
        (None, None) => {
            return Err(skip(
                "bad quoting",
                "the request has no closing '\"'".to_string(),
            ));
        }
    };
    let request = unescape(&body[..end]);
    let (method, path) = parse_request(&request)?;
    Ok(LogEntry {
        line,
        client,
        time,
        method,
        path,
        status,
        bytes,
        format,
    })
}

/// Splits `METHOD target [HTTP/x.y]`. The target may hold spaces (early
/// servers logged the raw request line; HTTP/0.9 requests have no
/// protocol); they and other bytes a URI may not carry are
/// percent-encoded.
fn parse_request(r: &str) -> Result<(String, String), Skip> {
    let bad = || {
        skip(
            "bad request",
            format!("request '{r}' is not 'METHOD /path HTTP/x.y' (a probe or garbage request?)"),
        )
    };
    let r = r.trim_matches(' ');
    let (method, rest) = r.split_once(' ').ok_or_else(bad)?;
    let rest = rest.trim_matches(' ');
    let target = match rest.rsplit_once(' ') {
        Some((t, p)) if p.starts_with("HTTP/") => t.trim_end_matches(' '),
        _ if rest.starts_with("HTTP/") => "",
        _ => rest,
    };
    if method.is_empty() || target.is_empty() {
        return Err(bad());
    }
    if !method
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
    {
        return Err(skip(
            "bad method",
            format!("request '{r}' has method '{method}', which is not an HTTP method"),
        ));
    }
    let path = if target.starts_with('/') {
        target
    } else if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        // Absolute form (requests through a proxy): keep the path.
        rest.find('/').map_or("/", |i| &rest[i..])
    } else {
        return Err(skip(
            "bad target",
            format!("request target '{target}' is not a path starting with '/'"),
        ));
    };
    Ok((method.to_string(), encode_target(path)))
}

/// Percent-encodes the bytes a request target may not carry (RFC 3986):
/// controls, space, non-ASCII and `"<>\^`{|}`.
fn encode_target(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        if b.is_ascii_graphic() && !b"\"<>\\^`{|}".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Parses `10/Oct/2000:13:55:36 -0700` into Unix seconds.
fn parse_time(t: &str) -> Result<i64, String> {
    let bad = || format!("time '{t}' is not like 10/Oct/2000:13:55:36 -0700");
    let (stamp, zone) = t.split_once(' ').ok_or_else(bad)?;
    let mut it = stamp.splitn(3, '/');
    let (d, mon, rest) = (
        it.next().ok_or_else(bad)?,
        it.next().ok_or_else(bad)?,
        it.next().ok_or_else(bad)?,
    );
    let mut it = rest.split(':');
    let num = |s: Option<&str>, lo: i64, hi: i64| -> Result<i64, String> {
        let s = s.ok_or_else(bad)?;
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<i64>()
            .ok()
            .filter(|v| (lo..=hi).contains(v))
            .ok_or_else(bad)
    };
    let year = num(it.next(), 1970, 9999)?;
    let (h, m, s) = (
        num(it.next(), 0, 23)?,
        num(it.next(), 0, 59)?,
        num(it.next(), 0, 60)?,
    );
    if it.next().is_some() {
        return Err(bad());
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == mon).ok_or_else(bad)? as i64 + 1;
    let day = num(Some(d), 1, 31)?;
    let zb = zone.as_bytes();
    if zb.len() != 5 || !(zb[0] == b'+' || zb[0] == b'-') {
        return Err(bad());
    }
    let zh = num(Some(&zone[1..3]), 0, 23)?;
    let zm = num(Some(&zone[3..5]), 0, 59)?;
    let offset = (zh * 3600 + zm * 60) * if zb[0] == b'-' { -1 } else { 1 };
    Ok(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + s - offset)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLF: &str =
        r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326"#;
    const COMBINED: &str = r#"192.168.1.20 - - [10/Oct/2000:13:55:36 -0700] "GET /a/b.html?x=1 HTTP/1.1" 304 - "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;
    const NGINX: &str = r#"2001:db8::7 - alice [21/Nov/2026:23:01:02 +0000] "POST /cart HTTP/2.0" 201 512 "-" "curl/8.5.0 \"quoted\"""#;

    #[test]
    fn parses_each_format() {
        let e = parse_line(CLF, 1).unwrap();
        assert_eq!(e.client, Client::Ip("127.0.0.1".parse().unwrap()));
        assert_eq!(e.time, 971_211_336); // 2000-10-10T20:55:36Z
        assert_eq!(
            (e.method.as_str(), e.path.as_str(), e.status, e.bytes),
            ("GET", "/apache_pb.gif", 200, 2326)
        );
        assert_eq!(e.format, LogFormat::Common);

        let e = parse_line(COMBINED, 2).unwrap();
        assert_eq!(
            (e.path.as_str(), e.status, e.bytes, e.format),
            ("/a/b.html?x=1", 304, 0, LogFormat::Combined)
        );

        let e = parse_line(NGINX, 3).unwrap();
        assert!(matches!(e.client, Client::Ip(ip) if ip.is_ipv6()));
        assert_eq!(e.time, 1_795_302_062); // 2026-11-21T23:01:02Z
        assert_eq!(
            (e.method.as_str(), e.status, e.bytes, e.format),
            ("POST", 201, 512, LogFormat::Combined)
        );
    }

    // Issue 20: a line had no length limit, so `--access-log /dev/zero`
    // grew memory until the OOM killer ran.
    #[test]
    fn over_long_lines_are_skipped_with_their_reason_and_endless_ones_stop() {
        let long = format!("{CLF} \"{}\"", "x".repeat(MAX_LINE));
        let log = format!("{CLF}\n{long}\n{COMBINED}\n");
        let (entries, report) = parse_str(&log);
        assert_eq!(entries.len(), 2);
        assert_eq!((report.lines, report.skipped_count), (3, 1));
        assert_eq!(report.reasons.get(TOO_LONG), Some(&1));
        assert!(report.skipped[0].1.contains("64 KiB"), "{report:?}");
        // One over-long line in many warns all the same.
        let w = report.warning("a.log").expect("a warning");
        assert!(w.contains(TOO_LONG), "{w}");
        // --strict: an error naming the line.
        let err = parse_reader_with(log.as_bytes(), Path::new("a.log"), true).unwrap_err();
        assert!(
            matches!(&err, Error::Line { line: 2, problem, .. } if problem.contains("64 KiB")),
            "{err}"
        );
        // An endless line (/dev/zero) stops with an error, in bounded memory.
        let zero = std::io::BufReader::new(std::io::Read::take(std::io::repeat(0), 64 << 20));
        let err = parse_reader_with(zero, Path::new("/dev/zero"), false).unwrap_err();
        assert!(
            matches!(&err, Error::Line { line: 1, problem, .. } if problem.contains("16 MiB")),
            "{err}"
        );
    }

    #[test]
    fn dates_are_right() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(parse_time("01/Jan/1970:00:00:00 +0100").unwrap(), -3600);
        assert_eq!(
            parse_time("29/Feb/2024:12:00:00 +0000").unwrap(),
            1_709_208_000
        );
    }

    #[test]
    fn malformed_lines_are_skipped_counted_and_explained() {
        let log = format!(
            "{CLF}\n\n\
             host_!.example.com - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.0\" 200 1\n\
             1.2.3.4 - - [10/Oct/2000:13:55:36] \"GET / HTTP/1.0\" 200 1\n\
             1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"\\x16\\x03\\x01\" 400 150\n\
             1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.0\" abc 1\n\
             1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.0\" 200 12kb\n\
             1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.0\n\
             1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.0\" 200\n\
             1.2.3.4 - - [10/Foo/2000:13:55:36 -0700] \"GET / HTTP/1.0\" 200 1\n\
             {COMBINED}\r\n{NGINX}\n"
        );
        let (entries, r) = parse_str(&log);
        assert_eq!(r.lines, 12);
        assert_eq!(r.blank, 1);
        assert_eq!(r.parsed, 3);
        assert_eq!(r.skipped_count, 8);
        assert_eq!(
            entries.iter().map(|e| e.line).collect::<Vec<_>>(),
            vec![1, 11, 12]
        );
        let lines: Vec<u64> = r.skipped.iter().map(|s| s.0).collect();
        assert_eq!(lines, vec![3, 4, 5, 6, 7, 8, 9, 10]);
        for (needle, (_, reason)) in [
            "neither an IP address nor a host name",
            "not like",
            "not 'METHOD",
            "status 'abc'",
            "byte count '12kb'",
            "no closing",
            "missing byte count",
            "not like",
        ]
        .iter()
        .zip(&r.skipped)
        {
            assert!(reason.contains(needle), "{needle}: {reason}");
        }
    }

    #[test]
    fn non_utf8_and_cap() {
        let mut bytes = Vec::new();
        for _ in 0..(MAX_SKIPPED_KEPT + 5) {
            bytes.extend_from_slice(b"\xff\xfe junk\n");
        }
        let (e, r) = parse_reader(&bytes[..], Path::new("x")).unwrap();
        assert!(e.is_empty());
        assert_eq!(r.skipped_count, MAX_SKIPPED_KEPT as u64 + 5);
        assert_eq!(r.skipped.len(), MAX_SKIPPED_KEPT);
        assert!(r.skipped[0].1.contains("UTF-8"));
    }

    proptest::proptest! {
        /// Arbitrary lines never panic the parser.
        #[test]
        fn never_panics(s in ".{0,200}") {
            let _ = parse_line(&s, 1);
        }

        /// Well-formed generated lines parse back to what was written.
        #[test]
        fn round_trips(a in 0u8..=255, b in 0u8..=255, day in 1u32..=28, h in 0u32..24,
                       path in "/[a-z0-9/._-]{0,30}", status in 100u16..600, bytes in proptest::prelude::any::<u32>()) {
            let line = format!("10.{a}.{b}.1 - - [{day:02}/Mar/2021:{h:02}:00:00 +0000] \"GET {path} HTTP/1.1\" {status} {bytes}");
            let e = parse_line(&line, 7).unwrap();
            proptest::prop_assert_eq!(e.path, path);
            proptest::prop_assert_eq!(e.status, status);
            proptest::prop_assert_eq!(e.bytes, u64::from(bytes));
            proptest::prop_assert_eq!(e.time, 1_614_556_800 + i64::from(day - 1) * 86_400 + i64::from(h) * 3600);
        }
    }
}
