//! Access-log replay (seed 001's CS-trace methodology).
//!
//! 1. [`parse`] reads Common Log Format, Combined Log Format and nginx's
//!    default `combined` format (the same grammar as Apache's Combined:
//!    `$remote_addr - $remote_user [$time_local] "$request" $status
//!    $body_bytes_sent "$http_referer" "$http_user_agent"`). Malformed
//!    lines are skipped and counted, each with its line number and reason.
//! 2. [`filter`] drops listed proxy IPs (`--exclude-ips FILE`) and any IP
//!    whose request rate exceeds a threshold (a proxy in disguise).
//! 3. [`ReplayPlan`] maps each client IP to one browser: its first request
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
pub use parse::{LogEntry, LogFormat, ParseReport};
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
        let (entries, fr) = filter::filter(entries, &filter::read_ip_list(&proxies).unwrap(), None);
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
}
