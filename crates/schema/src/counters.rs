//! The exact counters of a load's statistics: everything but the latency
//! histograms. The load keeps them in memory ([`Counters`] inside
//! `tlslab_report::Stats`) and a sharded run's agent writes them to
//! `counters.json` ([`crate::agent::AgentCounters`]), so a merge adds the
//! same fields in both places.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// Counters for one handshake kind (full or resumed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KindTotals {
    /// Handshakes of this kind.
    pub count: u64,
    /// Sum of bytes written during them.
    pub bytes_out: u64,
    /// Sum of bytes read during them.
    pub bytes_in: u64,
    /// Sum of their round trips.
    pub round_trips: u64,
    /// Handshakes whose TLS records were counted, and the sums of records
    /// written and read.
    pub records_count: u64,
    /// Sum of TLS records written.
    pub records_out: u64,
    /// Sum of TLS records read.
    pub records_in: u64,
    /// Handshakes that received a certificate, and the sum of its
    /// uncompressed message bodies.
    pub cert_count: u64,
    /// Sum of uncompressed certificate message bodies.
    pub cert_bytes: u64,
    /// Handshakes whose certificate came compressed, and the sums of the
    /// compressed data and of what it decompressed to.
    pub compressed_count: u64,
    /// Sum of compressed certificate data.
    pub compressed_bytes: u64,
    /// Sum of the uncompressed bodies of the compressed certificates.
    pub compressed_from_bytes: u64,
    /// Handshakes with TCP_INFO, and the sums over them.
    pub tcp_count: u64,
    /// Sum of data segments received during the handshake.
    pub data_segs_in: u64,
    /// Sum of the peer MSS estimates.
    pub rcv_mss: u64,
    /// Handshakes whose received data segments exceeded the client's
    /// initial-window assumption (`HandshakeTcp::INITIAL_WINDOW` in
    /// `tlslab-report`).
    pub beyond_initial_window: u64,
    /// Sum of slow-start rounds the received segments need from that window.
    pub slow_start_rounds: u64,
}

impl KindTotals {
    /// Adds every sum of `o`.
    pub fn merge(&mut self, o: &KindTotals) {
        self.count += o.count;
        self.bytes_out += o.bytes_out;
        self.bytes_in += o.bytes_in;
        self.round_trips += o.round_trips;
        self.records_count += o.records_count;
        self.records_out += o.records_out;
        self.records_in += o.records_in;
        self.cert_count += o.cert_count;
        self.cert_bytes += o.cert_bytes;
        self.compressed_count += o.compressed_count;
        self.compressed_bytes += o.compressed_bytes;
        self.compressed_from_bytes += o.compressed_from_bytes;
        self.tcp_count += o.tcp_count;
        self.data_segs_in += o.data_segs_in;
        self.rcv_mss += o.rcv_mss;
        self.beyond_initial_window += o.beyond_initial_window;
        self.slow_start_rounds += o.slow_start_rounds;
    }

    /// Reads either form `counters.json` has held: this struct, or the
    /// layout-1 array `[count, bytes_out, bytes_in, round_trips]` (an
    /// agent of that layout kept no other sum, so the rest are 0).
    fn either<'de, D: Deserializer<'de>>(d: D) -> Result<KindTotals, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Sums(KindTotals),
            Layout1([u64; 4]),
        }
        Ok(match Either::deserialize(d)? {
            Either::Sums(k) => k,
            Either::Layout1([count, bytes_out, bytes_in, round_trips]) => KindTotals {
                count,
                bytes_out,
                bytes_in,
                round_trips,
                ..KindTotals::default()
            },
        })
    }
}

/// The request and handshake counters of a set of requests. Every field is
/// a sum, so [`Counters::merge`] of two parts equals the counters of the
/// whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Requests attempted (one per record).
    pub attempted: u64,
    /// Requests whose response arrived completely (any status).
    pub completed: u64,
    /// Completed requests without error (2xx).
    pub succeeded: u64,
    /// Response body bytes received.
    pub body_bytes: u64,
    /// Responses by HTTP status.
    pub status: BTreeMap<u16, u64>,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Full handshakes: counts and byte, round-trip, record, certificate
    /// and TCP sums.
    #[serde(deserialize_with = "KindTotals::either")]
    pub full: KindTotals,
    /// Resumed handshakes, as `full`.
    #[serde(deserialize_with = "KindTotals::either")]
    pub resumed: KindTotals,
    /// Full handshakes that needed a HelloRetryRequest.
    pub hrr: u64,
    /// Handshakes that offered a stored session.
    pub offered: u64,
    /// Handshakes by version: (full, resumed).
    pub by_version: BTreeMap<String, (u64, u64)>,
    /// Handshakes by cipher suite.
    pub suites: BTreeMap<String, u64>,
    /// Handshakes by key-exchange group (TLS 1.2 resumptions use none and
    /// are not counted here).
    pub groups: BTreeMap<String, u64>,
    /// Connections that sent early data.
    pub early_data_sent: u64,
    /// Of those, the ones whose early data the server accepted.
    pub early_data_accepted: u64,
    /// Requests that repeated a failed one (`--retry-on-failure`).
    pub retries: u64,
}

/// Adds `by` to `map[key]`, allocating the key only when it is new.
pub fn bump(map: &mut BTreeMap<String, u64>, key: &str, by: u64) {
    match map.get_mut(key) {
        Some(v) => *v += by,
        None => {
            map.insert(key.to_owned(), by);
        }
    }
}

impl Counters {
    /// Adds everything in `other`.
    pub fn merge(&mut self, other: &Counters) {
        self.attempted += other.attempted;
        self.completed += other.completed;
        self.succeeded += other.succeeded;
        self.body_bytes += other.body_bytes;
        for (k, v) in &other.status {
            *self.status.entry(*k).or_default() += v;
        }
        for (k, v) in &other.errors {
            bump(&mut self.errors, k, *v);
        }
        self.full.merge(&other.full);
        self.resumed.merge(&other.resumed);
        self.hrr += other.hrr;
        self.offered += other.offered;
        for (k, (f, r)) in &other.by_version {
            let e = self.by_version.entry(k.clone()).or_default();
            e.0 += f;
            e.1 += r;
        }
        for (k, v) in &other.suites {
            bump(&mut self.suites, k, *v);
        }
        for (k, v) in &other.groups {
            bump(&mut self.groups, k, *v);
        }
        self.early_data_sent += other.early_data_sent;
        self.early_data_accepted += other.early_data_accepted;
        self.retries += other.retries;
    }

    /// Completed handshakes of either kind.
    pub fn handshakes(&self) -> u64 {
        self.full.count + self.resumed.count
    }

    /// Errors of every kind.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_1_arrays_still_read() {
        let doc = r#"{"attempted":3,"completed":3,"succeeded":3,"body_bytes":9,
            "status":{"200":3},"errors":{},"full":[2,10,20,4],"resumed":[1,5,6,1],
            "hrr":0,"offered":1,"by_version":{"TLSv1.3":[2,1]},"suites":{},
            "groups":{},"early_data_sent":0,"early_data_accepted":0,"retries":0}"#;
        let c: Counters = serde_json::from_str(doc).unwrap();
        assert_eq!(
            (c.full.count, c.full.bytes_in, c.full.round_trips),
            (2, 20, 4)
        );
        assert_eq!(c.resumed.bytes_out, 5);
        assert_eq!(c.full.records_count, 0);
        let back: Counters = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}
