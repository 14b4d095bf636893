//! What `tlslab breakdown` measured: a row per configuration, the cost
//! table, and their text.

pub use tlslab_schema::breakdown::{BreakdownReport, Row, Share};
use tlslab_schema::breakdown::{Convergence, Workload};

use tlslab_report::{columns, header};

fn pct_pm(f: f64, hw: f64) -> String {
    if hw.is_finite() {
        format!("{:>6.1}% ±{:>4.1}", f * 100.0, hw * 100.0)
    } else {
        format!("{:>6.1}% ±  ? ", f * 100.0)
    }
}

/// What a stage of the QUIC table is, in words.
pub fn stage_label(stage: &str) -> &str {
    match stage {
        "sig" => "signature",
        "kx" => "key exchange",
        "hash" => "hash",
        "rng" => "randomness",
        "cipher" => "record cipher",
        "mac" => "record MAC",
        "cache" => "session cache",
        "quic-packet" => "packet protection",
        "quic-header" => "header protection",
        "quic-keys" => "QUIC key schedule",
        other => other,
    }
}

/// The text of a breakdown report.
pub trait BreakdownText {
    /// The human tables.
    fn render(&self) -> String;
}

impl BreakdownText for BreakdownReport {
    fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let quic = self.transport == "quic";
        let _ = writeln!(
            s,
            "\nWhere the TLS cost goes{}: {} {}, {}, {} B responses, {} clients, {} rounds of {:.1} s cells in {:.0} s; {}.",
            if quic { " over QUIC (HTTP/3)" } else { "" },
            self.version,
            self.key,
            match self.workload {
                Workload::NewConn => "new connection and full handshake per request".to_string(),
                Workload::Reuse(r) =>
                    format!("new connection per request, {:.0}% resumed", r * 100.0),
                Workload::KeepAlive => "keep-alive".to_string(),
            },
            self.file_size,
            self.clients,
            self.rounds,
            self.cell_s,
            self.elapsed_s,
            self.placement.describe()
        );
        let _ = writeln!(
            s,
            "Cost = server CPU per request: server-observed, CPU time of the server's one pinned worker thread \
             ÷ requests it served, read from the server's own accounting at the start and end of the \
             measurement window (warm-up and ramp-down excluded). req/s is client-observed.\n\
             Stages are replaced by no-ops on client and server alike. Every ablated cell runs at the \
             same time as a baseline cell: two servers share the server CPU, two load engines the client \
             CPU, over one window, so whatever else the machine does hits both alike; fraction = mean \
             over rounds of 1 − cost/cost(baseline beside it) (Amdahl: 1 − 1/speedup), ± its 95 % interval.\n\
             Why CPU per request: seed 001 measured a saturated server's throughput, and a saturated \
             server's throughput is 1 ÷ its CPU per request, so the speed-ups are the same; CPU per \
             request stays right when the client, not the server, is the bottleneck.\n\
             Client and server meter every crypto operation; the meter costs {:.0} ns per operation \
             (measured at the start of this run), in every configuration alike.",
            self.meter_overhead_ns
        );
        let _ = writeln!(s);
        let head = [header(
            "configuration|CPU/req|spread|req/s|server|speedup|fraction",
        )];
        s.push_str(&columns("", &[-58, 11, 7, 9, 7, 8, 15], &head));
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.config.name.clone(),
                    format!("{:.1} µs", r.cpu_us_median),
                    format!("{:.1}%", r.spread * 100.0),
                    format!("{:.0}", r.requests_per_s_median),
                    format!("{:.0}%", r.server_busy_median * 100.0),
                    format!("{:.2}x", r.speedup),
                    pct_pm(r.fraction_removed, r.fraction_ci95),
                    if r.noisy { " ~" } else { "" }.into(),
                    if r.client_saturated { " !" } else { "" }.into(),
                ]
            })
            .collect();
        s.push_str(&columns("", &[-58, 11, 7, 9, 7, 8, -1, 0, 0], &rows));
        let _ = writeln!(
            s,
            "server = median busy share of the server CPU this configuration's server used (its pair's \
             other server used the rest; server-observed). ~ interval contains 0.  ! client CPU ≥90 % busy \
             in some cell (req/s then measures the client; CPU/req is unaffected)."
        );
        let cells: usize = self.rows.iter().map(|r| r.cpu_us.len()).sum();
        let sat: usize = self.rows.iter().map(|r| r.client_saturated_cells).sum();
        let busy: Vec<f64> = self.rows.iter().map(|r| r.server_busy_median).collect();
        let lo = busy.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = busy.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let _ = writeln!(
            s,
            "Saturation: the server CPU was {:.0} % busy with both servers of a pair (median over pairs; each \
             server alone {:.0}–{:.0} %, row medians), the client CPU {:.0} % with both engines; client \
             CPU ≥ 90 % busy in {sat} of {cells} cells. Bottleneck: {}. Baseline drift over the run: {:.1} % \
             (cancelled by running each cell beside a baseline).",
            self.server_cpu_busy * 100.0,
            lo * 100.0,
            hi * 100.0,
            self.client_cpu_busy * 100.0,
            match self.bottleneck.as_str() {
                "server" => "the server (its CPU saturated)".to_string(),
                "client" => "the client (its CPU saturated, the server's not)".to_string(),
                _ => "neither side's CPU was saturated: both waited for a CPU that the machine's other load held"
                    .to_string(),
            },
            self.baseline_drift * 100.0
        );
        let w = if quic { 24 } else { 12 };
        let _ = writeln!(
            s,
            "\nCost table (share of the TLS baseline's server CPU per request):\n\
               {:<w$} {:>13} {:<16} {:>13}",
            "stage", "ablation", "status", "meter"
        );
        for sh in &self.shares {
            let name = if quic {
                stage_label(&sh.stage)
            } else {
                &sh.stage
            };
            let meter = match (sh.meter_fraction, sh.meter_ci95) {
                (Some(m), Some(h)) => pct_pm(m, h),
                _ => format!("{:>13}", "n/a"),
            };
            let _ = writeln!(
                s,
                "  {:<w$} {} {:<16} {}{}{}",
                name,
                pct_pm(sh.fraction, sh.ci95),
                sh.status.name(),
                meter,
                if sh.disagrees == Some(true) {
                    "  ≠ disagree"
                } else {
                    ""
                },
                if sh.noisy {
                    "  ~ within noise of 0"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            s,
            "ablation = the paired Amdahl share above (server-observed CPU per request, {} rounds). \
             meter = the server's always-on crypto meter: time inside the stage's operations per \
             request ÷ CPU per request, server-observed over each baseline cell's window (n/a: the meter \
             times the AEAD as one operation and cannot split the MAC from it). ≠ = the two intervals \
             do not overlap: the no-op also changed work outside the metered calls, or the meter \
             misses some of the stage.",
            self.rounds
        );
        let not: Vec<String> = self
            .shares
            .iter()
            .filter(|sh| sh.status != Convergence::Converged)
            .map(|sh| {
                let why = match sh.status {
                    Convergence::CapHit => format!(
                        "the time cap was hit; ≈{} rounds needed",
                        sh.rounds_needed.map_or("?".into(), |n| n.to_string())
                    ),
                    Convergence::Variance => format!(
                        "variance: ±{:.1} points after {} rounds, ≈{} rounds needed",
                        sh.ci95 * 100.0,
                        self.rounds,
                        sh.rounds_needed.map_or("many".into(), |n| n.to_string())
                    ),
                    _ => "fewer than two rounds: no interval".into(),
                };
                format!("{} ({why})", sh.stage)
            })
            .collect();
        let zero: Vec<&str> = self
            .shares
            .iter()
            .filter(|sh| sh.noisy)
            .map(|sh| sh.stage.as_str())
            .collect();
        let _ = writeln!(
            s,
            "Convergence (target ±{:.1} points, cap {:.0} s): {}. Stopped: {}.",
            self.target_ci95 * 100.0,
            self.max_time_s,
            if not.is_empty() {
                "every share converged".to_string()
            } else {
                format!("not converged: {}", not.join("; "))
            },
            self.stop_reason
        );
        if !zero.is_empty() {
            let _ = writeln!(
                s,
                "Within noise of 0 (interval contains 0): {}.",
                zero.join(", ")
            );
        }
        if quic {
            let _ = writeln!(
                s,
                "QUIC has no plain variant to subtract. TLS protocol = the server's thread CPU time inside \
                 rustls's QUIC handshake calls (reading and writing CRYPTO data) in the QUIC \
                 skeleton, where every crypto stage is a no-op, ÷ the baseline beside it. QUIC \
                 transport + HTTP/3 = the rest of the skeleton's cost (quinn's frames, ACKs, loss \
                 recovery, streams, UDP I/O and the kernel, h3). other TLS = what the named \
                 stages and the skeleton leave (interactions between stages, noise). The meter \
                 cannot split QUIC's key schedule from TLS's HKDF calls (n/a)."
            );
        } else {
            let _ = writeln!(
                s,
                "non-TLS = plain HTTP's cost ÷ baseline's (server and kernel without TLS). \
                 TLS protocol = (skeleton − plain HTTP) ÷ baseline: rustls's state machine, record \
                 framing and the handshake's extra traffic, which no no-op removes. other TLS = what \
                 the named stages, TLS protocol and non-TLS leave (interactions between stages, noise)."
            );
        }
        s
    }
}
