//! Parsing Common, Combined and nginx-default access logs.

use std::io::BufRead;
use std::net::IpAddr;
use std::path::Path;

use serde::Serialize;

use crate::Error;

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
    /// The client address.
    pub ip: IpAddr,
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
}

/// Parses a whole log from `reader`; `name` is used in I/O error messages.
/// Malformed lines are skipped and reported, never fatal.
pub fn parse_reader<R: BufRead>(
    mut reader: R,
    name: &Path,
) -> Result<(Vec<LogEntry>, ParseReport), Error> {
    let mut entries = Vec::new();
    let mut report = ParseReport::default();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|source| Error::Io {
                action: "read",
                path: name.to_path_buf(),
                source,
            })?;
        if n == 0 {
            break;
        }
        report.lines += 1;
        let line_no = report.lines;
        let result = match std::str::from_utf8(&buf) {
            Ok(s) if s.trim().is_empty() => {
                report.blank += 1;
                continue;
            }
            Ok(s) => parse_line(s.trim_end_matches(['\n', '\r']), line_no),
            Err(e) => Err(format!(
                "not UTF-8 (byte {}); re-encode the log as UTF-8",
                e.valid_up_to()
            )),
        };
        match result {
            Ok(e) => {
                report.parsed += 1;
                entries.push(e);
            }
            Err(reason) => {
                report.skipped_count += 1;
                if report.skipped.len() < MAX_SKIPPED_KEPT {
                    report.skipped.push((line_no, reason));
                }
            }
        }
    }
    Ok((entries, report))
}

/// Parses the log file at `path`.
pub fn parse_file(path: &Path) -> Result<(Vec<LogEntry>, ParseReport), Error> {
    let f = std::fs::File::open(path).map_err(|source| Error::Io {
        action: "open",
        path: path.to_path_buf(),
        source,
    })?;
    parse_reader(std::io::BufReader::new(f), path)
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
    fn token(&mut self, what: &str) -> Result<&'a str, String> {
        let s = self.s.trim_start_matches(' ');
        let end = s.find(' ').unwrap_or(s.len());
        if end == 0 {
            return Err(format!("missing {what}; the line ends early (truncated?)"));
        }
        self.s = &s[end..];
        Ok(&s[..end])
    }

    fn bracketed(&mut self, what: &str) -> Result<&'a str, String> {
        let s = self.s.trim_start_matches(' ');
        let rest = s.strip_prefix('[').ok_or_else(|| {
            format!("expected '[' before the {what}; is this Common/Combined Log Format?")
        })?;
        let end = rest
            .find(']')
            .ok_or_else(|| format!("the {what} has no closing ']'"))?;
        self.s = &rest[end + 1..];
        Ok(&rest[..end])
    }

    /// A double-quoted field; `\"` and `\\` escapes are honoured.
    fn quoted(&mut self, what: &str) -> Result<String, String> {
        let s = self.s.trim_start_matches(' ');
        let rest = s
            .strip_prefix('"')
            .ok_or_else(|| format!("expected '\"' before the {what}"))?;
        let mut out = String::new();
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, e)) => out.push(e),
                    None => break,
                },
                '"' => {
                    self.s = &rest[i + 1..];
                    return Ok(out);
                }
                c => out.push(c),
            }
        }
        Err(format!("the {what} has no closing '\"'"))
    }
}

/// Parses one line (without its newline). `line` is used in messages.
pub fn parse_line(s: &str, line: u64) -> Result<LogEntry, String> {
    let mut c = Cur { s };
    let host = c.token("client address")?;
    let ip: IpAddr = host.parse().map_err(|_| {
        format!("client '{host}' is not an IP address; log addresses, not host names (HostnameLookups Off)")
    })?;
    c.token("ident field")?;
    c.token("user field")?;
    let t = c.bracketed("time")?;
    let time = parse_time(t)?;
    let request = c.quoted("request")?;
    let (method, path) = parse_request(&request)?;
    let status_s = c.token("status")?;
    let status: u16 = status_s
        .parse()
        .ok()
        .filter(|s| (100..=999).contains(s))
        .ok_or_else(|| format!("status '{status_s}' is not a 3-digit HTTP status"))?;
    let bytes_s = c.token("byte count")?;
    let bytes: u64 = if bytes_s == "-" {
        0
    } else {
        bytes_s
            .parse()
            .map_err(|_| format!("byte count '{bytes_s}' is not a whole number or '-'"))?
    };
    let format = if c.s.trim().is_empty() {
        LogFormat::Common
    } else {
        c.quoted("referer")?;
        c.quoted("user agent")?;
        LogFormat::Combined
    };
    Ok(LogEntry {
        line,
        ip,
        time,
        method,
        path,
        status,
        bytes,
        format,
    })
}

fn parse_request(r: &str) -> Result<(String, String), String> {
    let mut parts = r.split(' ');
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let proto = parts.next();
    if parts.next().is_some() || method.is_empty() || target.is_empty() {
        return Err(format!(
            "request '{r}' is not 'METHOD /path HTTP/x.y' (a probe or garbage request?)"
        ));
    }
    if !method
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "request '{r}' has method '{method}', which is not an HTTP method"
        ));
    }
    if let Some(p) = proto
        && !p.starts_with("HTTP/")
    {
        return Err(format!("request '{r}' has protocol '{p}', not HTTP/x.y"));
    }
    let path = if target.starts_with('/') {
        target.to_string()
    } else if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        // Absolute form (requests through a proxy): keep the path.
        rest.find('/')
            .map_or_else(|| "/".to_string(), |i| rest[i..].to_string())
    } else {
        return Err(format!(
            "request target '{target}' is not a path starting with '/'"
        ));
    };
    Ok((method.to_string(), path))
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
        assert_eq!(e.ip, "127.0.0.1".parse::<IpAddr>().unwrap());
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
        assert!(e.ip.is_ipv6());
        assert_eq!(e.time, 1_795_302_062); // 2026-11-21T23:01:02Z
        assert_eq!(
            (e.method.as_str(), e.status, e.bytes, e.format),
            ("POST", 201, 512, LogFormat::Combined)
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
             host.example.com - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.0\" 200 1\n\
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
            "not an IP",
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
