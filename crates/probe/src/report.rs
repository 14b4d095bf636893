//! `tlslab probe report`: seed 003's figures from stored samples. Every
//! figure is client-observed by the probe, over the samples in the window
//! asked for.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use tlslab_report::{columns, header, quantile};

use crate::sample::{Phase, Sample, Transport};

/// Width of a histogram bucket, as in seed 003's figures.
pub const BUCKET_MS: f64 = 10.0;
/// Buckets kept; slower samples go into the last (overflow) bucket.
pub const BUCKETS: usize = 100;

/// Statistics of one phase of one target.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseStats {
    /// The phase.
    #[serde(skip)]
    pub phase: Phase,
    /// Its name over the target's transport ([`Phase::label`]).
    #[serde(rename = "phase")]
    pub name: &'static str,
    /// Samples with this phase measured.
    pub count: usize,
    /// Milliseconds.
    pub min_ms: f64,
    /// Milliseconds.
    pub median_ms: f64,
    /// Milliseconds.
    pub p90_ms: f64,
    /// Milliseconds.
    pub p99_ms: f64,
    /// Counts per 10 ms bucket from 0; the last bucket also holds
    /// everything slower. Trailing empty buckets are cut.
    pub histogram_10ms: Vec<u64>,
}

/// Seed 003's Table 2 for one target over one transport, from medians.
/// Over HTTP/3 there is no TCP connect (`tcp_ms` is empty and counts 0 in
/// the sums), "SSL" is the QUIC handshake, and the GET is the 1-RTT one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Table2 {
    /// Median TCP connect (first connections).
    pub tcp_ms: Option<f64>,
    /// Median full handshake.
    pub ssl_new_ms: Option<f64>,
    /// Median resumed handshake, over accepted resumptions only.
    pub ssl_cached_ms: Option<f64>,
    /// Median GET (request to last byte).
    pub get_ms: Option<f64>,
    /// TCP + SSL new + GET.
    pub t_new_ms: Option<f64>,
    /// TCP + SSL cached + GET.
    pub t_cached_ms: Option<f64>,
    /// 1 − T(cached)/T(new).
    pub savings: Option<f64>,
    /// Over HTTP/3: median time from the resumed connection's first
    /// packet to the first byte of its 0-RTT GET's response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_rtt_first_byte_ms: Option<f64>,
}

/// 0-RTT over HTTP/3: GETs sent in early data, and accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct EarlyData {
    /// Resumed connections that sent their GET in 0-RTT.
    pub sent: u64,
    /// Of them, those the server accepted.
    pub accepted: u64,
}

/// One day (UTC) of one target.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Day {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// Samples that day.
    pub samples: usize,
    /// Samples with an error.
    pub errors: usize,
    /// Median full handshake, milliseconds.
    pub tls_full_median_ms: Option<f64>,
    /// Median resumed handshake (accepted only), milliseconds.
    pub tls_resumed_median_ms: Option<f64>,
    /// Share of offered resumptions the server accepted.
    pub resumption_accepted_share: Option<f64>,
}

/// Everything reported about one target.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TargetReport {
    /// The target URL.
    pub target: String,
    /// What its connections ran over: one report per target and transport.
    pub transport: Transport,
    /// Samples in the window.
    pub samples: usize,
    /// Over HTTP/3: resumed connections that sent a GET in 0-RTT, and of
    /// them those whose early data the server accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub early_data: Option<EarlyData>,
    /// Errors by `phase:kind`.
    pub errors: BTreeMap<String, u64>,
    /// Second connections that offered a session.
    pub resumption_offered: u64,
    /// Offered sessions the server accepted.
    pub resumption_accepted: u64,
    /// Negotiated versions, by count.
    pub versions: BTreeMap<String, u64>,
    /// Per-phase statistics (phases never measured are left out).
    pub phases: Vec<PhaseStats>,
    /// Seed 003's Table 2.
    pub table2: Table2,
    /// The time series, one row per UTC day.
    pub days: Vec<Day>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// What the figures are: always client-observed by the probe.
    pub observed: &'static str,
    /// Window start asked for (ms since the Unix epoch), if any.
    pub since_ms: Option<i64>,
    /// Window end asked for (exclusive), if any.
    pub until_ms: Option<i64>,
    /// First and last sample start in the window.
    pub first_sample_ms: Option<i64>,
    /// Last sample start in the window.
    pub last_sample_ms: Option<i64>,
    /// Samples in the window.
    pub samples: usize,
    /// One entry per target and transport, in URL order (TCP first).
    pub targets: Vec<TargetReport>,
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

/// The nearest-rank median of `v` (the lower middle value of an even
/// count), `None` when empty.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(quantile(&v, 0.5))
}

fn phase_values(samples: &[&Sample], phase: Phase) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| phase != Phase::TlsResumed || s.resumption_accepted == Some(true))
        .filter_map(|s| s.phase_us(phase))
        .map(ms)
        .collect()
}

fn stats(phase: Phase, transport: Transport, mut v: Vec<f64>) -> Option<PhaseStats> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mut hist = vec![0u64; BUCKETS];
    for x in &v {
        let b = ((x / BUCKET_MS) as usize).min(BUCKETS - 1);
        hist[b] += 1;
    }
    while hist.last() == Some(&0) {
        hist.pop();
    }
    Some(PhaseStats {
        phase,
        name: phase.label(transport),
        count: v.len(),
        min_ms: v[0],
        median_ms: quantile(&v, 0.5),
        p90_ms: quantile(&v, 0.9),
        p99_ms: quantile(&v, 0.99),
        histogram_10ms: hist,
    })
}

/// `YYYY-MM-DD` (UTC) of a time in milliseconds since the Unix epoch.
pub fn utc_day(ms: i64) -> String {
    let (y, m, d) = tlslab_runtime::civil_from_days(ms.div_euclid(86_400_000));
    format!("{y:04}-{m:02}-{d:02}")
}

fn table2(samples: &[&Sample], transport: Transport) -> Table2 {
    let tcp = median(phase_values(samples, Phase::Connect));
    let new = median(phase_values(samples, Phase::TlsFull));
    let cached = median(phase_values(samples, Phase::TlsResumed));
    let get = median(phase_values(samples, Phase::Get));
    // No connect over QUIC: the handshake is the first round trip.
    let connect = match transport {
        Transport::Tcp => tcp,
        Transport::H3 => Some(0.0),
    };
    let t_new = connect.zip(new).zip(get).map(|((a, b), c)| a + b + c);
    let t_cached = connect.zip(cached).zip(get).map(|((a, b), c)| a + b + c);
    let savings = t_new
        .zip(t_cached)
        .filter(|(n, _)| *n > 0.0)
        .map(|(n, c)| 1.0 - c / n);
    Table2 {
        tcp_ms: tcp,
        ssl_new_ms: new,
        ssl_cached_ms: cached,
        get_ms: get,
        t_new_ms: t_new,
        t_cached_ms: t_cached,
        savings,
        zero_rtt_first_byte_ms: median(phase_values(samples, Phase::ZeroRttTtfb)),
    }
}

fn target_report(target: &str, transport: Transport, samples: &[&Sample]) -> TargetReport {
    let mut errors = BTreeMap::new();
    let mut versions = BTreeMap::new();
    let (mut offered, mut accepted) = (0, 0);
    for s in samples {
        if let Some(k) = &s.error_kind {
            let key = format!("{}:{k}", s.error_phase.as_deref().unwrap_or("?"));
            *errors.entry(key).or_insert(0) += 1;
        }
        if let Some(v) = &s.version {
            *versions.entry(v.clone()).or_insert(0) += 1;
        }
        if s.resumption_offered == Some(true) && s.tls_resumed_us.is_some() {
            offered += 1;
            if s.resumption_accepted == Some(true) {
                accepted += 1;
            }
        }
    }
    let phases = Phase::ALL
        .iter()
        .filter_map(|&p| stats(p, transport, phase_values(samples, p)))
        .collect();
    let mut by_day: BTreeMap<String, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_day.entry(utc_day(s.started_at_ms)).or_default().push(s);
    }
    let days = by_day
        .into_iter()
        .map(|(day, v)| {
            let off = v
                .iter()
                .filter(|s| s.resumption_offered == Some(true) && s.tls_resumed_us.is_some())
                .count();
            let acc = v
                .iter()
                .filter(|s| {
                    s.resumption_offered == Some(true) && s.resumption_accepted == Some(true)
                })
                .count();
            Day {
                day,
                samples: v.len(),
                errors: v.iter().filter(|s| s.error_kind.is_some()).count(),
                tls_full_median_ms: median(phase_values(&v, Phase::TlsFull)),
                tls_resumed_median_ms: median(phase_values(&v, Phase::TlsResumed)),
                resumption_accepted_share: (off > 0).then(|| acc as f64 / off as f64),
            }
        })
        .collect();
    let sent = samples
        .iter()
        .filter(|s| s.early_data_accepted.is_some())
        .count() as u64;
    let early_data = (transport == Transport::H3).then(|| EarlyData {
        sent,
        accepted: samples
            .iter()
            .filter(|s| s.early_data_accepted == Some(true))
            .count() as u64,
    });
    TargetReport {
        target: target.to_string(),
        transport,
        samples: samples.len(),
        early_data,
        errors,
        resumption_offered: offered,
        resumption_accepted: accepted,
        versions,
        phases,
        table2: table2(samples, transport),
        days,
    }
}

/// Builds the report of `samples` (already limited to the window).
pub fn build(samples: &[Sample], since_ms: Option<i64>, until_ms: Option<i64>) -> Report {
    let mut by_target: BTreeMap<(&str, Transport), Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_target
            .entry((&s.target, s.transport))
            .or_default()
            .push(s);
    }
    Report {
        observed: "client-observed by tlslab probe, over the samples in the window",
        since_ms,
        until_ms,
        first_sample_ms: samples.iter().map(|s| s.started_at_ms).min(),
        last_sample_ms: samples.iter().map(|s| s.started_at_ms).max(),
        samples: samples.len(),
        targets: by_target
            .into_iter()
            .map(|((t, transport), v)| target_report(t, transport, &v))
            .collect(),
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"))
}

/// Seed 003's Table 2 of one target as one line, in its transport's terms.
fn table2_line(t: &TargetReport) -> String {
    let x = &t.table2;
    let savings = x.savings.map_or_else(
        || "- (no accepted resumption)".into(),
        |s| format!("{:.1} %", s * 100.0),
    );
    match t.transport {
        Transport::Tcp => format!(
            "  Table 2 (medians, ms): TCP {}  SSL new {}  SSL cached {}  GET {}  \
             T(new) {}  T(cached) {}  savings {savings}\n",
            opt(x.tcp_ms),
            opt(x.ssl_new_ms),
            opt(x.ssl_cached_ms),
            opt(x.get_ms),
            opt(x.t_new_ms),
            opt(x.t_cached_ms),
        ),
        Transport::H3 => format!(
            "  Table 2 over HTTP/3 (medians, ms; no connect): QUIC full {}  QUIC resumed {}  \
             1-RTT GET {}  T(new) {}  T(cached) {}  savings {savings}  \
             0-RTT GET first byte {}\n",
            opt(x.ssl_new_ms),
            opt(x.ssl_cached_ms),
            opt(x.get_ms),
            opt(x.t_new_ms),
            opt(x.t_cached_ms),
            opt(x.zero_rtt_first_byte_ms),
        ),
    }
}

fn chart(out: &mut String, title: &str, hist: &[u64]) {
    let max = hist.iter().copied().max().unwrap_or(0).max(1);
    let _ = writeln!(out, "  {title} (10 ms buckets, client-observed):");
    for (i, &n) in hist.iter().enumerate() {
        if n == 0 && hist.len() > 30 {
            continue;
        }
        let lo = i * 10;
        let label = if i == BUCKETS - 1 {
            format!(">={lo:>4} ms")
        } else {
            format!("{lo:>4}-{:<4}ms", lo + 10)
        };
        let bar = "#".repeat(((n as f64 / max as f64) * 40.0).ceil() as usize);
        let _ = writeln!(out, "    {label} |{bar:<40}| {n}");
    }
}

impl Report {
    /// The report as text: per target, the phase table, histograms of full
    /// and resumed handshakes, Table 2 and the daily series.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tlslab probe report: {} samples, {} targets ({})",
            self.samples,
            self.targets.len(),
            self.observed
        );
        if self.samples == 0 {
            let _ = writeln!(out, "no samples in the window");
        }
        for t in &self.targets {
            let over = match t.transport {
                Transport::Tcp => "TCP + TLS",
                Transport::H3 => "HTTP/3 over QUIC",
            };
            let _ = writeln!(out, "\n== {} over {over} ({} samples)", t.target, t.samples);
            let vs: Vec<String> = t
                .versions
                .iter()
                .map(|(v, n)| format!("{v}: {n}"))
                .collect();
            let _ = writeln!(
                out,
                "  versions: {}; resumption accepted {} of {} offered",
                if vs.is_empty() {
                    "-".into()
                } else {
                    vs.join(", ")
                },
                t.resumption_accepted,
                t.resumption_offered
            );
            if let Some(e) = t.early_data {
                let _ = writeln!(
                    out,
                    "  0-RTT: {} GET(s) sent in early data, {} accepted",
                    e.sent, e.accepted
                );
            }
            if !t.errors.is_empty() {
                let es: Vec<String> = t.errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
                let _ = writeln!(out, "  errors: {}", es.join(", "));
            }
            let mut rows = vec![header("phase|count|min ms|median|p90|p99")];
            rows.extend(t.phases.iter().map(|p| {
                let mut row = vec![p.name.to_string(), p.count.to_string()];
                row.extend([p.min_ms, p.median_ms, p.p90_ms, p.p99_ms].map(|v| format!("{v:.2}")));
                row
            }));
            out.push_str(&columns("  ", &[-20, 6, 9, 9, 9, 9], &rows));
            for p in &t.phases {
                if matches!(p.phase, Phase::TlsFull | Phase::TlsResumed) {
                    chart(&mut out, p.name, &p.histogram_10ms);
                }
            }
            out.push_str(&table2_line(t));
            let mut rows = vec![header(
                "day (UTC)|samples|errors|full med ms|resumed med ms|accepted",
            )];
            rows.extend(t.days.iter().map(|d| {
                vec![
                    d.day.clone(),
                    d.samples.to_string(),
                    d.errors.to_string(),
                    opt(d.tls_full_median_ms),
                    opt(d.tls_resumed_median_ms),
                    d.resumption_accepted_share
                        .map_or_else(|| "-".into(), |s| format!("{:.0} %", s * 100.0)),
                ]
            }));
            out.push_str(&columns("  ", &[-10, 7, 6, 13, 16, 9], &rows));
        }
        out
    }

    /// One CSV row per target and phase.
    pub fn csv(&self) -> Result<String, std::io::Error> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([
            "target",
            "transport",
            "phase",
            "count",
            "min_ms",
            "median_ms",
            "p90_ms",
            "p99_ms",
        ])?;
        for t in &self.targets {
            for p in &t.phases {
                w.write_record([
                    t.target.clone(),
                    t.transport.name().to_string(),
                    p.name.to_string(),
                    p.count.to_string(),
                    format!("{:.3}", p.min_ms),
                    format!("{:.3}", p.median_ms),
                    format!("{:.3}", p.p90_ms),
                    format!("{:.3}", p.p99_ms),
                ])?;
            }
        }
        let bytes = w.into_inner().map_err(|e| e.into_error())?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: i64, full: i64, resumed: i64, accepted: bool) -> Sample {
        Sample {
            target: "https://x/".into(),
            started_at_ms: at,
            connect_us: Some(1_000),
            tls_full_us: Some(full),
            tls_resumed_us: Some(resumed),
            get_us: Some(2_000),
            resumption_offered: Some(true),
            resumption_accepted: Some(accepted),
            version: Some("1.3".into()),
            ..Sample::default()
        }
    }

    #[test]
    fn table2_savings_follow_seed_003s_formula() {
        let v = vec![
            s(0, 10_000, 4_000, true),
            s(1, 12_000, 4_000, true),
            s(2, 14_000, 90_000, false),
        ];
        let r = build(&v, None, None);
        let t = &r.targets[0].table2;
        assert_eq!(t.ssl_new_ms, Some(12.0));
        // The refused resumption is not a cached handshake.
        assert_eq!(t.ssl_cached_ms, Some(4.0));
        assert_eq!(t.t_new_ms, Some(15.0));
        assert_eq!(t.t_cached_ms, Some(7.0));
        let sv = t.savings.expect("savings");
        assert!((sv - (1.0 - 7.0 / 15.0)).abs() < 1e-9, "{sv}");
        assert_eq!(r.targets[0].resumption_accepted, 2);
        assert_eq!(r.targets[0].resumption_offered, 3);
    }

    #[test]
    fn quantiles_histograms_and_days() {
        let v: Vec<Sample> = (1..=100)
            .map(|i| s(86_400_000 * (i / 50), i * 1000, 500, true))
            .collect();
        let r = build(&v, None, None);
        let full = r.targets[0]
            .phases
            .iter()
            .find(|p| p.phase == Phase::TlsFull)
            .expect("tls_full");
        assert_eq!(
            (full.min_ms, full.median_ms, full.p90_ms, full.p99_ms),
            (1.0, 50.0, 90.0, 99.0)
        );
        assert_eq!(full.histogram_10ms.len(), 11);
        assert_eq!(full.histogram_10ms[0], 9);
        assert_eq!(full.histogram_10ms.iter().sum::<u64>(), 100);
        let days: Vec<&str> = r.targets[0].days.iter().map(|d| d.day.as_str()).collect();
        assert_eq!(days, ["1970-01-01", "1970-01-02", "1970-01-03"]);
        assert!(r.text().contains("Table 2"));
        assert_eq!(r.csv().expect("csv").lines().count(), 1 + 4);
    }

    #[test]
    fn utc_days_are_civil_dates() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(1_795_305_600_000), "2026-11-22");
        assert_eq!(utc_day(951_782_400_000), "2000-02-29");
    }
}
