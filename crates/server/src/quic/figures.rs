//! The HTTP/3 listener's part of the server's
//! [`Snapshot`](crate::Snapshot) ([`QuicFigures`], read from the
//! [`Stats`](crate::stats::Stats) every listener counts in), its line of
//! the shutdown summary and its own metric families (`transport="quic"`).

use std::collections::BTreeMap;
use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;

use crate::stats::IdleClosed;

/// Handshakes of the QUIC listener by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QuicHandshakes {
    /// Full handshakes (a ServerHello without a resumed PSK).
    pub full: u64,
    /// Resumed handshakes (a session ticket accepted).
    pub resumed: u64,
    /// Resumed handshakes whose 0-RTT data the server accepted.
    pub early_data_accepted: u64,
    /// ClientHellos that offered 0-RTT which the server did not accept
    /// (no resumption, a used ticket, or 0-RTT off).
    pub early_data_rejected: u64,
}

/// Attempts shed by `session` admission, by what they got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QuicShed {
    /// Refused (CONNECTION_CLOSE with CONNECTION_REFUSED).
    pub refused: u64,
    /// Sent a Retry.
    pub retried: u64,
    /// Ignored (the Initial dropped).
    pub ignored: u64,
}

/// The ClientHello reader on the QUIC socket (`quic::sniff`): its work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HelloReads {
    /// Long-header datagrams read.
    pub datagrams: u64,
    /// Time spent reading them (decrypting Initials, parsing ClientHellos).
    pub seconds: f64,
}

/// The HTTP/3 listener's figures: [`Snapshot::quic`](crate::Snapshot::quic).
/// The ones TCP has too are also read, beside TCP's, through
/// [`Snapshot::transport`](crate::Snapshot::transport) and
/// [`Snapshot::total`](crate::Snapshot::total).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QuicFigures {
    /// Connection attempts accepted for a handshake.
    pub connections: u64,
    /// Connections whose handshake completed.
    pub established: u64,
    /// Connections open now.
    pub open_connections: u64,
    /// Attempts refused at `--quic-max-connections`: no connection idle
    /// enough to evict within the wait for room.
    pub refused_at_limit: u64,
    /// Connections closed by `--request-timeout` and `--keepalive-timeout`
    /// (no request stream in progress; PINGs do not count), or evicted at
    /// `--quic-max-connections` (half-open handshakes included).
    pub idle_closed: IdleClosed,
    /// Retry packets sent (`--quic-retry`).
    pub retries_sent: u64,
    /// Handshakes by kind, counted when the ServerHello is sent.
    pub handshakes: QuicHandshakes,
    /// Connections that failed before or during the handshake, by reason.
    pub handshake_failures: BTreeMap<String, u64>,
    /// HTTP/3 requests answered.
    pub requests: u64,
    /// Requests taken up while the handshake was still in progress on a
    /// connection whose 0-RTT the server accepted (answered in 0.5-RTT). A
    /// 0-RTT request that quinn hands over only after the client's Finished
    /// has arrived is not counted, so this is at most the 0-RTT requests.
    pub early_requests: u64,
    /// UDP payload bytes received on closed connections.
    pub bytes_received: u64,
    /// UDP payload bytes sent on closed connections.
    pub bytes_sent: u64,
    /// Datagrams received on closed connections.
    pub datagrams_received: u64,
    /// Datagrams sent on closed connections.
    pub datagrams_sent: u64,
    /// NEW_TOKEN frames sent on closed connections (`--quic-new-tokens`).
    pub new_tokens_sent: u64,
    /// quinn-udp's GSO segments per send: 1 means GSO is not in use.
    pub gso_segments: u64,
    /// quinn-udp's GRO segments per receive: 1 means GRO is not in use.
    pub gro_segments: u64,
    /// `--qlog DIR`: the files written so far; absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qlog: Option<tlslab_runtime::qlog::Qlog>,
    /// Handshakes from unvalidated addresses in progress now.
    pub half_open: u64,
    /// Attempts shed by `session` admission, by action.
    pub shed: QuicShed,
    /// The ClientHello reader's work, when it is installed (a remote cache
    /// of TLS 1.3 tickets, or `session` admission).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hello_reads: Option<HelloReads>,
    /// The UDP socket's receive buffer, the kernel's figure (twice the
    /// bytes granted, `--quic-recv-buffer`).
    pub receive_buffer_bytes: u64,
    /// Datagrams the kernel dropped because the socket's receive buffer
    /// was full (`ss -u -m`'s `d`); absent where `/proc/net/udp` could not
    /// be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_drops: Option<u64>,
}

impl QuicFigures {
    /// Its line of the shutdown summary ([`Snapshot::summary`](crate::Snapshot::summary)).
    pub(crate) fn summary(&self) -> String {
        let h = &self.handshakes;
        format!(
            "quic: {} connections ({} established, {} refused, {} retries, {} closed idle: {} request timeout, {} keep-alive timeout, {} evicted), handshakes {} full / {} resumed, 0-RTT {} accepted / {} rejected, {} requests ({} in 0-RTT), failures {}, GSO {} GRO {}",
            self.connections,
            self.established,
            self.refused_at_limit,
            self.retries_sent,
            self.idle_closed.total(),
            self.idle_closed.request_timeout,
            self.idle_closed.keepalive_timeout,
            self.idle_closed.evicted,
            h.full,
            h.resumed,
            h.early_data_accepted,
            h.early_data_rejected,
            self.requests,
            self.early_requests,
            self.handshake_failures.values().sum::<u64>(),
            if self.gso_segments > 1 {
                format!("on ({} segments)", self.gso_segments)
            } else {
                "off".to_string()
            },
            if self.gro_segments > 1 { "on" } else { "off" },
        ) + &self.admission_summary()
    }

    /// The shed attempts and the ClientHello reader's cost, when there
    /// are any.
    fn admission_summary(&self) -> String {
        let mut out = String::new();
        if let Some(n) = self.receive_drops.filter(|n| *n > 0) {
            out += &format!(
                ", {n} datagrams dropped at a full receive buffer ({} KB; raise --quic-recv-buffer)",
                self.receive_buffer_bytes / 1024
            );
        }
        let d = self.shed;
        if d.refused + d.retried + d.ignored > 0 {
            out += &format!(
                ", shed {} refused / {} retried / {} ignored",
                d.refused, d.retried, d.ignored
            );
        }
        if let Some(r) = self.hello_reads.filter(|r| r.datagrams > 0) {
            out += &format!(
                ", ClientHello reader {} datagrams, {:.2} us each",
                r.datagrams,
                r.seconds * 1e6 / r.datagrams as f64
            );
        }
        out
    }
}

fn labelled(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    gauge: bool,
    samples: Vec<(Vec<(&str, String)>, u64)>,
) -> Result<(), fmt::Error> {
    let kind = if gauge {
        MetricType::Gauge
    } else {
        MetricType::Counter
    };
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (mut labels, v) in samples {
        labels.insert(0, ("transport", "quic".to_string()));
        let mut e = m.encode_family(&labels)?;
        if gauge {
            ConstGauge::new(v as i64).encode(e)?;
        } else {
            e.encode_counter::<NoLabelSet, _, u64>(&v, None)?;
        }
    }
    Ok(())
}

/// The `tlslab_transport_*` families of the QUIC listener (each with
/// `transport="quic"`): its figures TCP does not have, and the old names of
/// the ones it shares with TCP (kept as aliases; docs/serve.md). The shared
/// families themselves are written from the same [`QuicFigures`] by
/// `metrics`.
pub(crate) fn encode(enc: &mut DescriptorEncoder<'_>, s: &QuicFigures) -> Result<(), fmt::Error> {
    let h = s.handshakes;
    let kind = |k: &str, v| (vec![("kind", k.to_string())], v);
    labelled(
        enc,
        "tlslab_transport_handshakes",
        "TLS 1.3 handshakes by transport and kind: full, resumed, early_accepted (0-RTT data accepted) and early_rejected (0-RTT offered, not accepted).",
        false,
        vec![
            kind("full", h.full),
            kind("resumed", h.resumed),
            kind("early_accepted", h.early_data_accepted),
            kind("early_rejected", h.early_data_rejected),
        ],
    )?;
    labelled(
        enc,
        "tlslab_transport_handshake_failures",
        "Connections that failed before or during the handshake, by transport and reason.",
        false,
        s.handshake_failures
            .iter()
            .map(|(r, n)| (vec![("reason", r.clone())], *n))
            .collect(),
    )?;
    let c = s.idle_closed;
    labelled(
        enc,
        "tlslab_transport_idle_closed",
        "Connections closed for sitting idle, by transport and reason: no first request within --request-timeout (request_timeout), no next request within --keepalive-timeout (keepalive_timeout), or the longest-idle one (a half-open handshake included) at the connection limit (evicted). TCP's are tlslab_idle_closed.",
        false,
        [
            ("request_timeout", c.request_timeout),
            ("keepalive_timeout", c.keepalive_timeout),
            ("evicted", c.evicted),
        ]
        .into_iter()
        .map(|(r, n)| (vec![("reason", r.to_string())], n))
        .collect(),
    )?;
    let one = |v| vec![(vec![], v)];
    for (name, help, v) in [
        (
            "tlslab_transport_connections",
            "Connection attempts accepted for a handshake.",
            s.connections,
        ),
        (
            "tlslab_transport_requests",
            "HTTP requests answered.",
            s.requests,
        ),
        (
            "tlslab_transport_early_requests",
            "Requests answered in 0.5-RTT: taken up before the handshake completed on a connection whose 0-RTT was accepted.",
            s.early_requests,
        ),
        (
            "tlslab_transport_refused",
            "Connection attempts refused at the connection limit.",
            s.refused_at_limit,
        ),
        (
            "tlslab_transport_retries",
            "QUIC Retry packets sent (address validation).",
            s.retries_sent,
        ),
        (
            "tlslab_transport_new_tokens",
            "QUIC NEW_TOKEN frames sent on closed connections (--quic-new-tokens).",
            s.new_tokens_sent,
        ),
        (
            "tlslab_transport_bytes_received",
            "UDP payload bytes received on closed connections.",
            s.bytes_received,
        ),
        (
            "tlslab_transport_bytes_sent",
            "UDP payload bytes sent on closed connections.",
            s.bytes_sent,
        ),
    ] {
        labelled(enc, name, help, false, one(v))?;
    }
    labelled(
        enc,
        "tlslab_transport_admission_shed",
        "Connection attempts shed by session admission control, by transport and what they got (--quic-shed-with): refuse (CONNECTION_REFUSED), retry (a Retry packet), ignore (the Initial dropped).",
        false,
        [
            ("refuse", s.shed.refused),
            ("retry", s.shed.retried),
            ("ignore", s.shed.ignored),
        ]
        .into_iter()
        .map(|(a, n)| (vec![("action", a.to_string())], n))
        .collect(),
    )?;
    labelled(
        enc,
        "tlslab_transport_half_open",
        "Handshakes from addresses not validated (no Retry or NEW_TOKEN token) in progress now: the retry-threshold policy's count.",
        true,
        one(s.half_open),
    )?;
    if let Some(r) = s.hello_reads {
        labelled(
            enc,
            "tlslab_transport_hello_read_datagrams",
            "Long-header datagrams the ClientHello reader on the QUIC socket read (installed with a remote ticket cache or --admission session).",
            false,
            one(r.datagrams),
        )?;
        let mut m = enc.encode_descriptor(
            "tlslab_transport_hello_read_seconds",
            "Time the ClientHello reader spent on them: decrypting Initials, reassembling and parsing ClientHellos.",
            None,
            MetricType::Counter,
        )?;
        let labels = [("transport", "quic".to_string())];
        m.encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&r.seconds, None)?;
    }
    labelled(
        enc,
        "tlslab_transport_open_connections",
        "Connections open now.",
        true,
        one(s.open_connections),
    )?;
    labelled(
        enc,
        "tlslab_transport_gso_segments",
        "quinn-udp's GSO segments per send (1: GSO not in use).",
        true,
        one(s.gso_segments),
    )?;
    labelled(
        enc,
        "tlslab_transport_receive_buffer_bytes",
        "The UDP socket's receive buffer, the kernel's figure (twice the bytes granted; --quic-recv-buffer).",
        true,
        one(s.receive_buffer_bytes),
    )?;
    match s.receive_drops {
        Some(n) => labelled(
            enc,
            "tlslab_transport_receive_drops",
            "Datagrams the kernel dropped because the UDP socket's receive buffer was full (ss -u -m's d).",
            false,
            one(n),
        ),
        None => Ok(()),
    }
}
