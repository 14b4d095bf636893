//! Access-log replay (seed 001's CS-trace methodology).
//!
//! 1. [`parse`] reads Common Log Format, Combined Log Format and nginx's
//!    default `combined` format (the same grammar as Apache's Combined:
//!    `$remote_addr - $remote_user [$time_local] "$request" $status
//!    $body_bytes_sent "$http_referer" "$http_user_agent"`). Malformed
//!    lines are skipped and counted, each with its line number and reason.
//!    The first field is an opaque [`Client`]: an IP address or a host
//!    name (the classic public traces log host names).
//! 2. [`filter`] drops listed proxies (`--exclude-clients FILE`) and any
//!    client whose request rate exceeds a threshold (a proxy in disguise).
//! 3. [`ReplayPlan`] maps each client to one browser: its first request
//!    is a full TLS handshake and its later requests resume. The implied
//!    resumption ratio is (requests − IPs) / requests.
//! 4. [`Scheduler`] hands requests out keeping each IP's requests in log
//!    order (the next one only after the previous one completed) while
//!    different IPs interleave, and enforces the window bound LP − LS ≤
//!    window, where LP is the log index of the last request issued and LS
//!    the index of the last request served *in log order* (every request
//!    up to LS has completed). It paces as fast as possible or at the
//!    log's own timing divided by a speed factor.
//!
//! Responses: in [`PathMode::Bytes`] (default) each request becomes
//! `/bytes/<N>` with N the bytes the log recorded, which `tlslab serve`
//! answers exactly; [`PathMode::Original`] keeps the log's paths and
//! [`ReplayPlan::file_tree`] lists the files to generate with
//! [`crate::fileset::write_sized`].

pub mod filter;
pub mod parse;
mod plan;

pub use filter::{FilterReport, RateLimit};
pub use parse::{Client, LogEntry, LogFormat, ParseReport};
pub use plan::{Pacing, PathMode, ReplayPlan, Req, Scheduler, Summary};

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Log file → parse → filter → plan → file tree → scheduler, end to end.
    #[test]
    fn pipeline_from_a_log_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        let mut text = String::new();
        for (i, ip) in [
            "10.0.0.1", "10.0.0.2", "10.0.0.1", "10.9.9.9", "10.0.0.2", "10.0.0.1",
        ]
        .iter()
        .enumerate()
        {
            text += &format!(
                "{ip} - - [01/Jan/2020:00:00:{i:02} +0000] \"GET /d/f{i}.gif?v=1 HTTP/1.1\" 200 {} \"-\" \"ua\"\n",
                100 * (i + 1)
            );
        }
        text += "garbage\n";
        std::fs::write(&log, text).unwrap();
        let proxies = dir.path().join("proxies");
        std::fs::write(&proxies, "10.9.9.9\n").unwrap();

        let (entries, report) = parse::parse_file(&log).unwrap();
        assert_eq!(
            (report.lines, report.parsed, report.skipped_count),
            (7, 6, 1)
        );
        assert_eq!(report.skipped[0].0, 7);
        let (entries, fr) =
            filter::filter(entries, &filter::read_client_list(&proxies).unwrap(), None);
        assert_eq!((fr.excluded_ips, fr.excluded_requests), (1, 1));
        let plan = ReplayPlan::new(&entries, PathMode::Original);
        let s = plan.summary();
        assert_eq!((s.requests, s.sessions), (5, 2));
        assert!((s.implied_resumption_ratio - 0.6).abs() < 1e-12);

        let (files, bad) = plan.file_tree();
        assert!(bad.is_empty());
        let root = dir.path().join("root");
        let written = crate::fileset::write_sized(
            &root,
            files.iter().map(|(p, n)| (p.as_str(), *n)),
            crate::fileset::Overwrite::Refuse,
        )
        .unwrap();
        assert_eq!(written.len(), 5);
        assert_eq!(std::fs::metadata(root.join("d/f4.gif")).unwrap().len(), 500);

        let mut sched = Scheduler::new(Arc::new(plan), 10_000, Pacing::AsFastAsPossible).unwrap();
        let mut order = Vec::new();
        while let Some(r) = sched.issue() {
            order.push(r.id);
        }
        // One request per browser may be in flight.
        assert_eq!(order, vec![0, 1]);
        for id in order {
            sched.complete(id).unwrap();
        }
        assert_eq!(sched.issue().unwrap().id, 2);
    }

    /// A trace in the shape of the Internet Traffic Archive's (NASA,
    /// ClarkNet, Calgary, Saskatchewan): host names as clients, `-` byte
    /// counts, 304s, a request without protocol, a space in a URL, quotes
    /// inside a request, a truncated line and a relative target.
    #[test]
    fn ita_style_trace_with_host_names() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/ita_style.log");
        let (entries, report) = parse::parse_file(&path).unwrap();
        assert_eq!(
            (report.lines, report.parsed, report.skipped_count),
            (21, 19, 2)
        );
        assert_eq!(
            report.skipped.iter().map(|s| s.0).collect::<Vec<_>>(),
            vec![13, 18]
        );
        assert_eq!(
            report.top_reasons(5),
            vec![("bad target", 1), ("truncated line", 1)]
        );
        let w = report.warning("trace.log").expect("9.5 % skipped warns");
        assert!(w.contains("skipped 2 of 21 lines (9.5 %)"), "{w}");
        assert!(
            w.contains("bad target: 1") && w.contains("truncated line: 1"),
            "{w}"
        );
        assert!(w.contains("line 13"), "{w}");

        let by_line = |l: u64| entries.iter().find(|e| e.line == l).unwrap();
        assert_eq!(
            by_line(1).client,
            Client::Host("piweba3y.prodigy.com".into())
        );
        // Host names are case-insensitive; IPv6 forms are normalised.
        assert_eq!(by_line(10).client, by_line(1).client);
        assert_eq!(by_line(21).client, by_line(17).client);
        assert_eq!((by_line(4).status, by_line(4).bytes), (304, 0));
        assert_eq!(by_line(7).path, "/htbin/wais.pl?IMAGE");
        assert_eq!(
            by_line(10).path,
            "/shuttle/countdown/video/live%20video.jpeg"
        );
        assert_eq!(
            (by_line(11).path.as_str(), by_line(11).bytes),
            ("/images/%22NASA-logo%22.gif", 5866)
        );
        assert_eq!(by_line(19).method, "HEAD");

        let plan = ReplayPlan::new(&entries, PathMode::Bytes);
        let s = plan.summary();
        assert_eq!((s.requests, s.sessions, s.resumed), (19, 7, 12));

        // Excluding a proxy by its host name.
        let exclude = filter::parse_client_list("WWW-B4.proxy.aol.com\n", &path).unwrap();
        let (kept, fr) = filter::filter(entries.clone(), &exclude, None);
        assert_eq!((fr.excluded_ips, fr.excluded_requests), (1, 4));
        let s = ReplayPlan::new(&kept, PathMode::Bytes).summary();
        assert_eq!((s.requests, s.sessions), (15, 6));
        // A rate limit on host names: 4 requests within 20 s is too many.
        let (kept, fr) =
            filter::filter(entries, &Default::default(), Some("3/20s".parse().unwrap()));
        assert_eq!((fr.rate_ips, fr.rate_requests, kept.len()), (1, 4, 15));

        // --strict: the first malformed line is an error naming it.
        let e = parse::parse_file_with(&path, true).unwrap_err().to_string();
        assert!(e.contains("ita_style.log:13: missing byte count"), "{e}");
        assert!(e.contains("--strict"), "{e}");
    }

    #[test]
    fn few_skipped_lines_do_not_warn() {
        let mut log = String::new();
        for i in 0..100 {
            log += &format!(
                "host{i}.example - - [01/Jan/2020:00:00:00 +0000] \"GET / HTTP/1.0\" 200 1\n"
            );
        }
        let (_, r) = parse::parse_str(&log);
        assert_eq!(r.warning("x"), None);
        log += "junk\n";
        let (_, r) = parse::parse_str(&log);
        // 1 of 101 lines is below 1 %.
        assert_eq!((r.skipped_count, r.warning("x")), (1, None));
        log += "junk\n";
        let (_, r) = parse::parse_str(&log);
        assert!(r.warning("x").unwrap().contains("truncated line: 2"));
    }
}
