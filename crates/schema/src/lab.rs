//! The report of `tlslab lab --json`: a cell per connection pattern,
//! TLS version and key type, the ratios between them, and QUIC against
//! TCP. Field names are documented in docs/schema.md ("`tlslab lab --json
//! FILE`").

use serde::{Deserialize, Serialize};

use crate::costs::{CellCosts, Explain};
use crate::float::or_nan;
use crate::load::LoadReport;
use crate::placement::Placement;

/// The connection pattern of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Plain HTTP, a new TCP connection per request.
    PlainNewConn,
    /// Plain HTTP, connections kept alive.
    PlainKeepAlive,
    /// TLS, a new connection and a full handshake per request.
    TlsFull,
    /// TLS, a new connection per request, every one but the first resumed.
    TlsResumed,
    /// TLS, connections kept alive.
    TlsKeepAlive,
    /// TLS 1.3, a new connection per request, resumed with the request in
    /// 0-RTT early data (stateful tickets).
    TlsZeroRtt,
    /// HTTP/3 over QUIC, a new connection and a full handshake per request.
    QuicFull,
    /// HTTP/3 over QUIC, a new connection per request, resumed.
    QuicResumed,
    /// HTTP/3 over QUIC, resumed with the request in 0-RTT.
    QuicZeroRtt,
    /// HTTP/3 over QUIC, connections kept alive (one stream at a time).
    QuicKeepAlive,
}

impl Mode {
    /// The name the lab's table prints.
    pub fn label(self) -> &'static str {
        match self {
            Mode::PlainNewConn => "plain HTTP, new conn",
            Mode::PlainKeepAlive => "plain HTTP, keep-alive",
            Mode::TlsFull => "TLS full handshake",
            Mode::TlsResumed => "TLS resumed",
            Mode::TlsKeepAlive => "TLS keep-alive",
            Mode::TlsZeroRtt => "TLS 0-RTT",
            Mode::QuicFull => "QUIC full handshake",
            Mode::QuicResumed => "QUIC resumed",
            Mode::QuicZeroRtt => "QUIC 0-RTT",
            Mode::QuicKeepAlive => "QUIC keep-alive",
        }
    }
}

/// One measured cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    /// The connection pattern.
    pub mode: Mode,
    /// `tcp` or `quic`.
    pub transport: String,
    /// The TLS version (`TLSv1.2`, `TLSv1.3`), for TLS cells.
    pub version: Option<String>,
    /// The certificate key type, for TLS cells.
    pub key: Option<String>,
    /// Requests per second, client-observed over `window_s`.
    #[serde(deserialize_with = "or_nan")]
    pub requests_per_s: f64,
    /// The client's measurement window in seconds.
    #[serde(deserialize_with = "or_nan")]
    pub window_s: f64,
    /// Requests completed in the window.
    pub requests: u64,
    /// Server CPU time per request served in microseconds (server-observed,
    /// whole run including warm-up).
    #[serde(deserialize_with = "or_nan")]
    pub server_cpu_us_per_request: f64,
    /// Median handshake time in microseconds (client-observed), for TLS cells.
    pub handshake_p50_us: Option<f64>,
    /// Share of connections whose resumption the server accepted.
    #[serde(deserialize_with = "or_nan")]
    pub reuse_achieved: f64,
    /// The client's CPU busy fraction over the window.
    #[serde(deserialize_with = "or_nan")]
    pub client_busy: f64,
    /// Returns true if and only if the client was ≥ 90 % busy: the cell's
    /// throughput then measures the client, not the server.
    pub client_saturated: bool,
    /// Failed requests in the window.
    pub errors: u64,
    /// The cipher suite most handshakes negotiated, for TLS cells.
    pub suite: Option<String>,
    /// The key-exchange group most handshakes negotiated, for TLS cells;
    /// for QUIC cells the one group the load offered (the matching TCP
    /// cell's), which every completed handshake therefore used.
    pub group: Option<String>,
    /// Handshakes by kind, server-observed over the client's window (from
    /// the end of the warm-up to the end of the run), for TLS cells.
    pub server_handshakes: Option<Handshakes>,
    /// Handshakes by kind, client-observed over the same window.
    pub client_handshakes: Option<Handshakes>,
    /// With `--explain`: CPU per request split into crypto, kernel time
    /// and the remainder, with syscalls, writes and allocations per
    /// request, server-observed and client-observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub costs: Option<CellCosts>,
}

/// Ratios for one version and key type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// TLS version (`TLSv1.2`, `TLSv1.3`).
    pub version: String,
    /// Certificate key type.
    pub key: String,
    /// Requests/s with a full handshake per request ÷ plain HTTP new-connection requests/s.
    #[serde(deserialize_with = "or_nan")]
    pub full_over_plain: f64,
    /// Resumed ÷ full requests/s.
    #[serde(deserialize_with = "or_nan")]
    pub resumed_over_full: f64,
    /// Keep-alive ÷ full requests/s.
    #[serde(deserialize_with = "or_nan")]
    pub keepalive_over_full: f64,
    /// Server CPU per request, full handshake ÷ plain HTTP new connection.
    #[serde(deserialize_with = "or_nan")]
    pub cpu_full_over_plain: f64,
    /// Server CPU per request, resumed ÷ full.
    #[serde(deserialize_with = "or_nan")]
    pub cpu_resumed_over_full: f64,
}

/// The lab's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabReport<P = serde_json::Value> {
    /// Schema version of this JSON.
    pub schema_version: u32,
    /// Whether this was `--quick`.
    pub quick: bool,
    /// Where server and client ran.
    pub placement: Placement,
    /// Concurrent clients per cell.
    pub clients: usize,
    /// Measurement time per cell, seconds.
    #[serde(deserialize_with = "or_nan")]
    pub cell_s: f64,
    /// The path requested.
    pub path: String,
    /// Every cell, in run order.
    pub cells: Vec<CellResult>,
    /// Ratios per version and key type.
    pub ratios: Vec<Ratios>,
    /// Measurement time of each QUIC cell and of the TCP 0-RTT cell,
    /// seconds (two thirds of `cell_s`).
    #[serde(deserialize_with = "or_nan")]
    pub quic_cell_s: f64,
    /// QUIC against TCP+TLS 1.3, per connection pattern.
    pub quic_ratios: Vec<QuicRatio>,
    /// With `--path`: the path's conditions and its forwarder's counters
    /// (`tlslab path --json`'s report; a reader gets it as JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wan_path: Option<P>,
    /// With `--explain`: which of its counts this run could measure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
}

/// QUIC against TCP+TLS 1.3 for one connection pattern.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuicRatio {
    /// The QUIC cell's mode (`quic_full`, `quic_resumed`, `quic_zero_rtt`,
    /// `quic_keep_alive`).
    pub mode: Mode,
    /// The TCP cell it is compared with (TLS 1.3).
    pub tcp_mode: Mode,
    /// Certificate key type of both.
    pub key: String,
    /// Key-exchange group of both.
    pub group: Option<String>,
    /// Server CPU per request over QUIC, µs (server-observed).
    #[serde(deserialize_with = "or_nan")]
    pub quic_cpu_us_per_request: f64,
    /// Server CPU per request over TCP, µs (server-observed).
    #[serde(deserialize_with = "or_nan")]
    pub tcp_cpu_us_per_request: f64,
    /// `quic_cpu_us_per_request / tcp_cpu_us_per_request`.
    #[serde(deserialize_with = "or_nan")]
    pub cpu_quic_over_tcp: f64,
    /// Requests/s over QUIC ÷ over TCP (client-observed).
    #[serde(deserialize_with = "or_nan")]
    pub requests_per_s_quic_over_tcp: f64,
}

/// Handshakes by kind on one transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handshakes {
    /// Full handshakes.
    pub full: u64,
    /// Resumed handshakes (0-RTT ones included).
    pub resumed: u64,
    /// Of the resumed, those whose 0-RTT data the server accepted.
    pub zero_rtt: u64,
}

impl Handshakes {
    /// The handshakes since `before`.
    pub fn since(&self, before: &Handshakes) -> Handshakes {
        Handshakes {
            full: self.full.saturating_sub(before.full),
            resumed: self.resumed.saturating_sub(before.resumed),
            zero_rtt: self.zero_rtt.saturating_sub(before.zero_rtt),
        }
    }

    /// The client's counts in a load report: over QUIC its `transport`
    /// section, over TCP its `reuse` and `handshake.early_data`.
    pub fn of_report(r: &LoadReport) -> Handshakes {
        match &r.transport {
            Some(t) => Handshakes {
                full: t.full.count,
                resumed: t.resumed.count + t.zero_rtt.count,
                zero_rtt: t.zero_rtt.count,
            },
            None => Handshakes {
                full: r.reuse.handshakes.saturating_sub(r.reuse.resumed_count),
                resumed: r.reuse.resumed_count,
                zero_rtt: r.handshake.early_data.accepted,
            },
        }
    }

    /// All handshakes.
    pub fn total(&self) -> u64 {
        self.full + self.resumed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tlslab lab --quick --json`, written by the binary of this layout.
    const QUICK: &str = include_str!("../fixtures/lab-quick.json");

    #[test]
    fn a_written_lab_report_reads_back_and_writes_the_same_json() {
        let v: serde_json::Value = serde_json::from_str(QUICK).unwrap();
        let r: LabReport = serde_json::from_value(v.clone()).unwrap();
        assert!(r.wan_path.is_none());
        let full = r.cells.iter().find(|c| c.mode == Mode::TlsFull).unwrap();
        assert!(full.version.is_some() && full.server_cpu_us_per_request > 0.0);
        assert!(full.client_handshakes.is_some_and(|h| h.total() > 0));
        assert_eq!(r.quic_ratios.len(), 4);
        assert_eq!(serde_json::to_value(&r).unwrap(), v);
    }

    #[test]
    fn every_lab_field_is_documented_in_the_schema_doc() {
        let doc = include_str!("../../../docs/schema.md");
        let start = doc.find("### `tlslab lab --json").unwrap();
        let rest = &doc[start + 4..];
        let section = &rest[..rest.find("\n### ").unwrap_or(rest.len())];
        let v: serde_json::Value = serde_json::from_str(QUICK).unwrap();
        // `name`, `name.…` or `name[]` at the top; `cells[].name`, and the
        // ratios' fields by name.
        let documented = |n: &str| {
            [format!("`{n}`"), format!("`{n}."), format!("`{n}[]")]
                .iter()
                .any(|p| section.contains(p.as_str()))
        };
        let mut missing: Vec<String> = v
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| !documented(k))
            .cloned()
            .collect();
        for (list, prefix) in [("cells", "cells[]."), ("ratios", ""), ("quic_ratios", "")] {
            for k in v[list][0].as_object().unwrap().keys() {
                if !section.contains(&format!("`{prefix}{k}`")) {
                    missing.push(format!("{list}[].{k}"));
                }
            }
        }
        assert!(missing.is_empty(), "undocumented lab fields: {missing:?}");
    }

    #[test]
    fn every_explain_field_is_documented_in_the_schema_doc() {
        let doc = include_str!("../../../docs/schema.md");
        let start = doc.find("### `tlslab lab --json").unwrap();
        let section = &doc[start..];
        let section = &section[..section[4..].find("\n### ").map_or(section.len(), |i| i + 4)];
        let split = crate::costs::CostSplit {
            warnings: vec!["w".into()],
            ..Default::default()
        };
        let cell = serde_json::to_value(CellCosts {
            server: split.clone(),
            client: split,
        })
        .unwrap();
        let explain = serde_json::to_value(Explain::default()).unwrap();
        let mut missing = Vec::new();
        for (v, prefix) in [
            (&cell, "cells[].costs"),
            (&cell["server"], ""),
            (&explain, ""),
        ] {
            for k in v.as_object().unwrap().keys() {
                if !section.contains(&format!("`{k}`")) {
                    missing.push(format!("{prefix} {k}"));
                }
            }
        }
        assert!(section.contains("`cells[].costs`") && section.contains("`explain`"));
        assert!(
            missing.is_empty(),
            "undocumented --explain fields: {missing:?}"
        );
    }
}
