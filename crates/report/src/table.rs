//! The human-readable summary of a run, in the spirit of h2load and wrk.

use std::fmt::Write;

use tlslab_stats::{HandshakeKindSummary, LoadReport, Phase};

/// Formats microseconds with a unit that keeps 3–4 significant digits.
fn dur(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.0}µs")
    } else if us < 1_000_000.0 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

fn opt_dur(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| dur(v as f64))
}

fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0}{}", UNITS[i])
    } else {
        format!("{v:.2}{}", UNITS[i])
    }
}

fn pct(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

fn opt_f(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.prec$}"))
}

fn phase_row(name: &str, p: &Phase) -> Vec<String> {
    vec![
        name.into(),
        p.count.to_string(),
        p.mean_us.map_or_else(|| "-".into(), dur),
        opt_dur(p.p50_us),
        opt_dur(p.p90_us),
        opt_dur(p.p99_us),
        opt_dur(p.p999_us),
        opt_dur(p.max_us),
    ]
}

fn kind_row(name: &str, k: &HandshakeKindSummary, per_s: f64) -> Vec<String> {
    vec![
        name.into(),
        k.count.to_string(),
        format!("{per_s:.1}"),
        opt_f(k.bytes_out_mean, 0),
        opt_f(k.bytes_in_mean, 0),
        opt_f(k.round_trips_mean, 2),
    ]
}

/// The full handshakes' records, certificate and TCP segments, when measured.
fn wire_row(out: &mut String, k: &HandshakeKindSummary) {
    let (Some(ro), Some(ri)) = (k.records_out_mean, k.records_in_mean) else {
        return;
    };
    let mut line = format!("full handshake wire: TLS records out {ro:.1}, in {ri:.1}");
    if let Some(c) = k.cert_bytes_mean {
        line.push_str(&format!("; certificate {c:.0} B"));
    }
    if let (Some(c), Some(r)) = (k.cert_compressed_bytes_mean, k.cert_compression_ratio) {
        line.push_str(&format!(
            ", compressed {c:.0} B ({:.0} %) in {} of {}",
            r * 100.0,
            k.cert_compressed_count,
            k.count
        ));
    }
    if let (Some(s), Some(mss), Some(b), Some(r)) = (
        k.data_segs_in_mean,
        k.rcv_mss_mean,
        k.beyond_initial_window,
        k.slow_start_rounds_mean,
    ) {
        line.push_str(&format!(
            "; server flight {s:.1} TCP segments (MSS {mss:.0}), {:.0} % beyond an initial \
             window of 10, {r:.2} slow-start round trips",
            b * 100.0
        ));
    }
    let _ = writeln!(out, "{line}");
}

fn counts<'a>(it: impl Iterator<Item = (&'a String, &'a u64)>) -> String {
    let parts: Vec<String> = it.map(|(k, v)| format!("{k} {v}")).collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// The text of a load report: [`LoadReport::render_table`] and
/// [`LoadReport::render_distributed`]. A trait because the report's type
/// lives in `tlslab-schema`.
pub trait LoadReportText {
    /// A compact table for people, headed with how it was measured.
    fn render_table(&self) -> String;
    /// The lines `merge` prints after the table: each agent, the skew and
    /// every warning.
    fn render_distributed(&self) -> String;
}

/// The requested reuse as the table prints it: a percentage, or who
/// decides it when the workload does (e-commerce model, access log).
fn requested_reuse(r: &LoadReport) -> String {
    match r.config.workload.as_str() {
        "ecommerce" => "set by the e-commerce model".into(),
        "replay" => "set by the access log".into(),
        _ => format!("{} requested", pct(r.config.reuse)),
    }
}

impl LoadReportText for LoadReport {
    fn render_table(&self) -> String {
        let c = &self.config;
        let mut out = String::new();
        // The e-commerce browser: a new one per arrival in an open loop,
        // and a page per connection over HTTP/2 and HTTP/3.
        let browser = c.workload == "ecommerce";
        let clients = if browser && self.open_loop.is_some() {
            "a new browser per arrival".to_string()
        } else {
            format!("{} client(s)", c.clients)
        };
        let multiplexed = matches!(
            self.http.as_ref().map(|h| h.protocol.as_str()),
            Some("h2" | "h3")
        );
        let per_conn = match c.requests_per_conn {
            _ if browser && multiplexed => "a page's requests".to_string(),
            0 => "unlimited request(s)".to_string(),
            k => format!("{k} request(s)"),
        };
        let _ = writeln!(
            out,
            "tlslab load: client-observed over {:.2} s window; {clients}, {} thread(s), {per_conn} per connection, reuse {} ({})",
            self.window.measured_s,
            c.threads,
            requested_reuse(self),
            c.resume_with,
        );
        if c.targets.len() > 4 {
            let _ = writeln!(
                out,
                "targets: {} URLs ({} … {})",
                c.targets.len(),
                c.targets[0],
                c.targets[c.targets.len() - 1]
            );
        } else {
            let _ = writeln!(out, "targets: {}", c.targets.join(" "));
        }
        let _ = writeln!(
            out,
            "workload: {}, seed {}, think time {}, retry on failure {}",
            if c.workload.is_empty() {
                "urls"
            } else {
                &c.workload
            },
            c.seed,
            if c.think_time.is_empty() {
                "0"
            } else {
                &c.think_time
            },
            if c.retry_on_failure { "on" } else { "off" },
        );
        if let Some(e) = &self.ecommerce {
            let _ = writeln!(
                out,
                "e-commerce: {} purchase sessions ({} new, {} returning customers), {} pages",
                e.sessions, e.new_customers, e.returning_customers, e.pages
            );
        }
        if let Some(r) = &self.replay {
            let _ = writeln!(
                out,
                "replay: {} of {} sessions and {} of {} requests replayed (window {}, {}); resumption implied {}, achieved {}",
                r.sessions_replayed,
                r.log_sessions,
                r.requests_replayed,
                r.log_requests,
                r.window,
                r.speed.map_or_else(
                    || "as fast as possible".to_string(),
                    |s| format!("speed x{s}")
                ),
                pct(r.implied_resumption),
                pct(r.achieved_resumption),
            );
            let _ = writeln!(
                out,
                "replay log: {} malformed lines skipped; {} listed IPs ({} requests) and {} IPs above the rate threshold ({} requests) dropped",
                r.skipped_lines, r.excluded_ips, r.excluded_requests, r.rate_ips, r.rate_requests
            );
        }
        if let Some(o) = &self.open_loop {
            let _ = writeln!(
                out,
                "open loop: {} arrivals at {} /s (cap {} in flight): {} scheduled, {} late (> 1 ms), {} dropped",
                o.arrivals, o.rate, o.max_in_flight, o.scheduled, o.late, o.dropped
            );
        }
        let r = &self.requests;
        let t = &self.throughput;
        let _ = writeln!(
            out,
            "requests: {} attempted, {} completed, {} succeeded, {} errors, {} unfinished, {} retries{}",
            r.attempted,
            r.completed,
            r.succeeded,
            r.errors,
            r.unfinished,
            r.retries,
            if r.refused > 0 {
                format!(", {} refused", r.refused)
            } else {
                String::new()
            }
        );
        if let Some(b) = &self.backoff {
            let _ = writeln!(
                out,
                "backoff: {} waits, {:.2} s in total, after connections that could not be made \
                 (exponential with full jitter, base {} ms)",
                b.waits, b.waited_s, b.base_ms
            );
        }
        if let Some(f) = self.transport.as_ref().and_then(|t| t.flood.as_ref()) {
            flood_lines(&mut out, f);
        }
        if let Some(q) = self.transport.as_ref().and_then(|t| t.qlog.as_ref()) {
            let _ = writeln!(
                out,
                "qlog: {} files ({} bytes) in {}; {} connections not logged (caps: {} files, \
                 {} bytes; {} files cut at the byte cap)",
                q.files, q.bytes, q.dir, q.skipped, q.max_files, q.max_bytes, q.truncated
            );
        }
        let _ = writeln!(
            out,
            "throughput: {:.1} req/s, {}/s body",
            t.requests_per_s,
            bytes(t.bytes_per_s)
        );

        let _ = writeln!(out);
        let l = &self.latency;
        let rows = [
            header("latency|count|mean|p50|p90|p99|p99.9|max"),
            phase_row("connect", &l.connect),
            phase_row("handshake full", &l.handshake_full),
            phase_row("handshake resumed", &l.handshake_resumed),
            phase_row("ttfb", &l.ttfb),
            phase_row("transfer", &l.transfer),
            phase_row("total", &l.total),
        ];
        out.push_str(&columns("  ", &[-18, 8, 9, 9, 9, 9, 9, 9], &rows));

        let h = &self.handshake;
        if h.full.count + h.resumed.count > 0 {
            let _ = writeln!(out);
            let rows = [
                header("handshakes|count|per s|bytes out|bytes in|round trips"),
                kind_row("full", &h.full, t.full_handshakes_per_s),
                kind_row("resumed", &h.resumed, t.resumed_handshakes_per_s),
            ];
            out.push_str(&columns("  ", &[-18, 8, 10, 10, 10, 11], &rows));
            wire_row(&mut out, &h.full);
            let _ = writeln!(
                out,
                "reuse: {}, offered {}, achieved {} of {} handshakes",
                requested_reuse(self),
                pct(self.reuse.offered),
                pct(self.reuse.achieved),
                self.reuse.handshakes
            );
            let versions: Vec<String> = h
                .versions
                .iter()
                .map(|(k, v)| format!("{k} {} full + {} resumed", v.full, v.resumed))
                .collect();
            let _ = writeln!(out, "versions: {}", versions.join(", "));
            let _ = writeln!(out, "suites: {}", counts(h.suites.iter()));
            let _ = writeln!(out, "groups: {}", counts(h.groups.iter()));
            if h.hello_retry_requests > 0 {
                let _ = writeln!(out, "hello retry requests: {}", h.hello_retry_requests);
            }
            if c.early_data {
                let _ = writeln!(
                    out,
                    "early data: {} sent, {} accepted",
                    h.early_data.sent, h.early_data.accepted
                );
            }
        }

        if !self.ablation.is_empty() {
            let _ = writeln!(
                out,
                "ABLATED (insecure model, not real TLS): {}",
                self.ablation.join(",")
            );
        }
        if let Some(c) = self.crypto.as_ref().filter(|c| !c.ops.is_empty()) {
            let _ = writeln!(out);
            let mut rows = vec![vec![
                "crypto op".into(),
                "calls".into(),
                "time".into(),
                format!(
                    "   (client crypto per handshake, {} handshakes)",
                    c.handshakes
                ),
            ]];
            rows.extend(c.ops.iter().map(|o| {
                vec![
                    o.op.clone(),
                    format!("{:.2}", o.calls_per_handshake),
                    if o.us_per_handshake < 10.0 {
                        format!("{:.2}µs", o.us_per_handshake)
                    } else {
                        dur(o.us_per_handshake)
                    },
                    String::new(),
                ]
            }));
            out.push_str(&columns("  ", &[-18, 10, 12, 0], &rows));
        }

        let _ = writeln!(out);
        let _ = writeln!(out, "status: {}", counts(self.status.iter()));
        let _ = writeln!(out, "errors: {}", self.error_summary());
        let cpu = &self.client_cpu;
        let _ = writeln!(
            out,
            "client cpu: user {:.2}s, sys {:.2}s, {} per handshake, {} per request, {} busy on {} CPU(s)",
            cpu.user_s,
            cpu.sys_s,
            cpu.per_handshake_us.map_or_else(|| "-".into(), dur),
            cpu.per_request_us.map_or_else(|| "-".into(), dur),
            pct(cpu.busy_fraction),
            cpu.capacity,
        );
        if let Some(h) = &self.http {
            let _ = writeln!(
                out,
                "http: {}{}; {} connection(s), {} requests per connection, {} handshakes per request; \
                 client crypto per request: handshake {}, records {}",
                h.protocol,
                h.max_concurrent_streams
                    .map_or_else(String::new, |m| format!(
                        " (up to {m} streams per connection)"
                    )),
                h.connections,
                h.requests_per_connection
                    .map_or_else(|| "-".into(), |r| format!("{r:.1}")),
                h.handshakes_per_request
                    .map_or_else(|| "-".into(), |r| format!("{r:.4}")),
                h.handshake_crypto_us_per_request
                    .map_or_else(|| "-".into(), |u| format!("{u:.2}µs")),
                h.record_crypto_us_per_request
                    .map_or_else(|| "-".into(), |u| format!("{u:.2}µs")),
            );
        }
        if let Some(h) = &self.ablation_hint {
            let _ = writeln!(out, "ablation mismatch: {h}");
        }
        if let Some(w) = &cpu.warning {
            let _ = writeln!(out, "WARNING: {w}");
        }
        out
    }

    fn render_distributed(&self) -> String {
        let Some(d) = &self.distributed else {
            return String::new();
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "agents: {} of {} merged; start skew {} ms (latest minus earliest window start, agents' own clocks)",
            d.agents_merged, d.agents_expected, d.start_skew_ms
        );
        let mut rows = vec![header(
            "shard|host|offset ms|attempted|completed|cpu busy|  dir",
        )];
        rows.extend(d.agents.iter().map(|a| {
            vec![
                a.shard.to_string(),
                a.host.clone(),
                a.start_offset_ms.to_string(),
                a.attempted.to_string(),
                a.completed.to_string(),
                format!("{:.0}%", a.busy_fraction * 100.0),
                format!("{}  {}", if a.saturated { "!" } else { " " }, a.dir),
            ]
        }));
        out.push_str(&columns("  ", &[-7, -20, 10, 10, 10, 9, 0], &rows));
        for m in &d.missing {
            let _ = writeln!(
                out,
                "  {:<7} MISSING: {}{}",
                m.shard,
                m.reason,
                m.dir
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            );
        }
        for w in &d.warnings {
            let _ = writeln!(out, "WARNING: {w}");
        }
        out
    }
}

/// Lays out `rows` as text columns, each line starting with `indent`: a
/// cell is padded to its column's width, right-aligned (a positive width)
/// or left-aligned (a negative one), one space after the cell before it;
/// a width of 0 appends the cell as it is (a mark such as ` !`). A cell
/// wider than its column is not cut. The experiments' tables go through it.
pub fn columns(indent: &str, widths: &[i32], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    for row in rows {
        out.push_str(indent);
        for (i, (cell, &w)) in row.iter().zip(widths).enumerate() {
            let n = w.unsigned_abs() as usize;
            let sep = if i > 0 && w != 0 { " " } else { "" };
            let _ = if w < 0 {
                write!(out, "{sep}{cell:<n$}")
            } else {
                write!(out, "{sep}{cell:>n$}")
            };
        }
        out.push('\n');
    }
    out
}

/// A row of `names` separated by `|`, for [`columns`]: a table's header.
pub fn header(names: &str) -> Vec<String> {
    names.split('|').map(String::from).collect()
}

/// The `flood` lines of a `load --h3 --flood` report: what was sent and
/// what came back.
fn flood_lines(out: &mut String, f: &tlslab_schema::transport::Flood) {
    if let Some(p) = &f.ping_only {
        let held = p.held_p50_s.map_or(String::new(), |s| {
            format!(" (median {s:.1} s after connecting)")
        });
        let _ = writeln!(
            out,
            "flood (ping-only, {}/s asked, {} source ports, {:.1} s): {} PING-only clients, \
             {} connected, {} failed, {} closed by the server before the end{held}, {} PINGs sent",
            f.rate,
            f.sockets,
            f.elapsed_s,
            p.clients,
            p.connected,
            p.failed,
            p.closed_by_server,
            p.pings
        );
        return;
    }
    let _ = writeln!(
        out,
        "flood ({}, {}/s asked, {} source ports, {:.1} s): {} valid Initials in {} \
         datagrams, {} random junk, {} junk Initial headers, {} send errors",
        f.kind,
        f.rate,
        f.sockets,
        f.elapsed_s,
        f.valid,
        f.valid_datagrams,
        f.junk_random,
        f.junk_header,
        f.send_errors
    );
    let r = &f.received;
    let _ = writeln!(
        out,
        "flood answers: {} datagrams ({}): {} Retry, {} Initial, {} Handshake, \
         {} Version Negotiation, {} other",
        r.datagrams,
        bytes(r.bytes as f64),
        r.retry,
        r.initial,
        r.handshake,
        r.version_negotiation,
        r.other
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_line_says_what_was_sent_and_what_came_back() {
        use tlslab_schema::transport::{Flood, FloodReceived, PingOnly};
        let mut f = Flood {
            kind: "valid".into(),
            rate: 200,
            sockets: 64,
            elapsed_s: 2.0,
            valid: 400,
            valid_datagrams: 800,
            received: FloodReceived {
                datagrams: 420,
                bytes: 2048,
                retry: 390,
                initial: 20,
                handshake: 10,
                ..FloodReceived::default()
            },
            ..Flood::default()
        };
        let mut out = String::new();
        flood_lines(&mut out, &f);
        assert!(out.contains("400 valid Initials in 800 datagrams"), "{out}");
        assert!(
            out.contains(
                "flood answers: 420 datagrams (2.00KiB): 390 Retry, 20 Initial, 10 Handshake"
            ),
            "{out}"
        );
        f.kind = "ping-only".into();
        f.ping_only = Some(PingOnly {
            clients: 30,
            connected: 29,
            failed: 1,
            closed_by_server: 11,
            held_p50_s: Some(1.5),
            pings: 130,
        });
        let mut out = String::new();
        flood_lines(&mut out, &f);
        assert!(
            out.contains("30 PING-only clients, 29 connected, 1 failed, 11 closed by the server"),
            "{out}"
        );
        assert!(
            out.contains("(median 1.5 s after connecting), 130 PINGs"),
            "{out}"
        );
        assert!(!out.contains("flood answers"), "{out}");
    }

    #[test]
    fn units_scale() {
        assert_eq!(dur(12.0), "12µs");
        assert_eq!(dur(1_500.0), "1.50ms");
        assert_eq!(dur(2_500_000.0), "2.50s");
        assert_eq!(bytes(512.0), "512B");
        assert_eq!(bytes(1536.0), "1.50KiB");
    }

    #[test]
    fn table_says_how_it_was_measured_and_shows_numbers() {
        let r = tlslab_stats::fixtures::report();
        let t = r.render_table();
        assert!(
            t.starts_with("tlslab load: client-observed over 2.00 s window"),
            "{t}"
        );
        for want in [
            "40 attempted",
            "4 retries",
            "replay: 10 of 10 sessions and 100 of 100 requests replayed (window 10000, speed x2); resumption implied 90.0%, achieved 90.0%",
            "e-commerce: 3 purchase sessions (1 new, 2 returning customers), 15 pages",
            "workload: urls, seed 1,",
            "open loop: poisson arrivals at 100 /s (cap 10000 in flight): 42 scheduled, 1 late (> 1 ms), 2 dropped",
            "20.0 req/s",
            "achieved 50.0%",
            "errors: http_404 4",
            "ABLATED (insecure model, not real TLS): cipher",
            "client crypto per handshake, 40 handshakes",
            "  verify                   0.50         50µs",
            "ablation mismatch: a record did not decrypt",
            "WARNING:",
        ] {
            assert!(t.contains(want), "{want} not in\n{t}");
        }
        assert!(!t.contains("  sign "), "{t}");
        let mut r = r;
        r.errors.insert("refused".into(), 9);
        assert_eq!(r.error_summary(), "refused 9, http_404 4");
        r.errors.clear();
        assert_eq!(r.error_summary(), "no errors");
        let ttfb = t
            .lines()
            .find(|l| l.trim_start().starts_with("ttfb"))
            .unwrap();
        assert!(ttfb.contains("40"), "{ttfb}");
    }

    // Issue 20: `load` exited 0 when every request was unfinished or
    // every response an HTTP 500 (it checked `completed == 0`).
    #[test]
    fn the_exit_gate_fails_runs_without_a_success_and_above_the_error_rate() {
        let mut r = tlslab_stats::fixtures::report();
        // 40 attempted, 4 errors (http_404): 10 %.
        assert_eq!(r.failed_gate(100.0), None);
        assert_eq!(r.failed_gate(10.0), None);
        let why = r.failed_gate(5.0).expect("10 % is above 5 %");
        assert!(
            why.contains("error rate 10.00 %") && why.contains("--max-error-rate 5"),
            "{why}"
        );
        // Every response an HTTP 500.
        let q = &mut r.requests;
        (q.succeeded, q.errors) = (0, q.attempted);
        let why = r.failed_gate(100.0).expect("no success");
        assert!(why.contains("none 2xx"), "{why}");
        // Every request unfinished: nothing attempted ended.
        let q = &mut r.requests;
        (q.attempted, q.completed, q.errors, q.unfinished) = (0, 0, 0, 8);
        let why = r.failed_gate(100.0).expect("nothing finished");
        assert!(why.contains("all 8 were still in flight"), "{why}");
        // Every request failed without a response.
        let q = &mut r.requests;
        (q.attempted, q.errors, q.refused, q.unfinished) = (5, 5, 5, 0);
        r.errors = [("refused".to_string(), 5)].into();
        let why = r.failed_gate(100.0).expect("all failed");
        assert!(why.contains("every request failed (refused 5)"), "{why}");
        let t = r.render_table();
        assert!(t.contains("4 retries, 5 refused"), "{t}");
    }

    #[test]
    fn workload_decided_reuse_is_not_printed_as_a_percentage() {
        let mut r = tlslab_stats::fixtures::report();
        r.config.workload = "replay".into();
        let t = r.render_table();
        assert!(t.contains("reuse set by the access log ("), "{t}");
        assert!(t.contains("reuse: set by the access log, offered"), "{t}");
        assert!(!t.contains("% requested"), "{t}");
    }

    #[test]
    fn an_ecommerce_header_says_what_a_client_and_a_connection_are() {
        let mut r = tlslab_stats::fixtures::report();
        r.config.workload = "ecommerce".into();
        r.config.requests_per_conn = 1;
        r.http = Some(tlslab_stats::Http {
            protocol: "h2".into(),
            ..Default::default()
        });
        // The fixture is an open loop: each arrival a new browser.
        let t = r.render_table();
        let head = t.lines().next().unwrap();
        assert!(head.contains("; a new browser per arrival,"), "{head}");
        assert!(head.contains("a page's requests per connection"), "{head}");
        r.open_loop = None;
        r.http.as_mut().unwrap().protocol = "http/1.1".into();
        let t = r.render_table();
        let head = t.lines().next().unwrap();
        assert!(head.contains(" client(s), "), "{head}");
        assert!(head.contains("1 request(s) per connection"), "{head}");
    }
}
