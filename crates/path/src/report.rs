//! What the path did, per direction: the forwarder's counters, its
//! queueing-delay and release-lateness distributions, and its own CPU.

use std::fmt;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::forward::Forwarded;
use crate::pcap::PcapReport;

/// Release lateness at p99 above this means the forwarder could not keep
/// the schedule (the delay-accuracy target of issue 22).
pub const LATE_P99_LIMIT_US: f64 = 500.0;

/// A distribution summary in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Micros {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl Micros {
    fn of(h: &Histogram<u64>) -> Micros {
        if h.is_empty() {
            return Micros::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Micros {
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(h.max()),
        }
    }
}

/// One direction's report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DirectionReport {
    /// `up` (client → server) or `down`.
    pub direction: String,
    /// The configured conditions, as text.
    pub conditions: String,
    /// Packets read from the near TUN device.
    pub packets_in: u64,
    /// Their bytes (IP packets).
    pub bytes_in: u64,
    /// Packets written to the far TUN device.
    pub packets_forwarded: u64,
    /// Their bytes.
    pub bytes_forwarded: u64,
    /// Packets dropped because the bottleneck's queue was full.
    pub dropped_queue: u64,
    /// Packets dropped by the loss model.
    pub dropped_loss: u64,
    /// Packets the far TUN device refused.
    pub dropped_write: u64,
    /// The most packets queued at once.
    pub max_queue_packets: u64,
    /// Time in the bottleneck per packet (µs).
    pub queue_delay_us: Micros,
    /// How late each release was against its schedule (µs).
    pub lateness_us: Micros,
    /// The forwarder thread's CPU time (ms).
    pub cpu_ms: f64,
    /// Its lifetime (ms).
    pub wall_ms: f64,
    /// CPU per packet read (ns); 0 with no packets.
    pub cpu_per_packet_ns: f64,
    /// True if and only if the forwarder thread ran under SCHED_FIFO.
    pub realtime: bool,
    /// True if and only if the forwarder missed its schedule (lateness p99
    /// over 500 µs) or ran above 95 % of a core.
    pub saturated: bool,
}

impl DirectionReport {
    pub(crate) fn new(direction: &str, conditions: String, f: &Forwarded) -> DirectionReport {
        let c = &f.counters;
        let cpu_ms = f.cpu.as_secs_f64() * 1e3;
        let wall_ms = f.wall.as_secs_f64() * 1e3;
        let lateness_us = Micros::of(&f.lateness);
        DirectionReport {
            direction: direction.into(),
            conditions,
            packets_in: c.packets_in,
            bytes_in: c.bytes_in,
            packets_forwarded: c.packets_out,
            bytes_forwarded: c.bytes_out,
            dropped_queue: c.dropped_queue,
            dropped_loss: c.dropped_loss,
            dropped_write: f.dropped_write,
            max_queue_packets: c.max_queue_packets,
            queue_delay_us: Micros::of(&c.queue_delay),
            lateness_us,
            cpu_ms,
            wall_ms,
            cpu_per_packet_ns: if c.packets_in > 0 {
                f.cpu.as_nanos() as f64 / c.packets_in as f64
            } else {
                0.0
            },
            realtime: f.realtime,
            saturated: lateness_us.p99 > LATE_P99_LIMIT_US
                || (wall_ms > 0.0 && cpu_ms / wall_ms > 0.95),
        }
    }
}

impl fmt::Display for DirectionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arrow = if self.direction == "up" {
            "client → server"
        } else {
            "server → client"
        };
        writeln!(f, "path {} ({arrow}): {}", self.direction, self.conditions)?;
        writeln!(
            f,
            "  forwarded {} packets ({} bytes) of {} in; dropped {} by the queue, {} by loss{}",
            self.packets_forwarded,
            self.bytes_forwarded,
            self.packets_in,
            self.dropped_queue,
            self.dropped_loss,
            if self.dropped_write > 0 {
                format!(", {} refused by the TUN device", self.dropped_write)
            } else {
                String::new()
            }
        )?;
        writeln!(
            f,
            "  queueing delay p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs (at most {} packets queued)",
            self.queue_delay_us.p50,
            self.queue_delay_us.p99,
            self.queue_delay_us.max,
            self.max_queue_packets
        )?;
        write!(
            f,
            "  forwarder{}: release lateness p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs; \
             CPU {:.1} ms over {:.0} ms ({:.0} ns per packet)",
            if self.realtime { " (SCHED_FIFO)" } else { "" },
            self.lateness_us.p50,
            self.lateness_us.p99,
            self.lateness_us.max,
            self.cpu_ms,
            self.wall_ms,
            self.cpu_per_packet_ns
        )?;
        if self.saturated {
            write!(
                f,
                "\n  WARNING: the forwarder was saturated (late releases or a full core); \
                 its delays and rates are not what was configured"
            )?;
        }
        Ok(())
    }
}

/// Both directions.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PathReport {
    /// Client → server.
    pub up: DirectionReport,
    /// Server → client.
    pub down: DirectionReport,
    /// The capture (`pcap=FILE`), if one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcap: Option<PcapReport>,
}

impl PathReport {
    /// Returns true if and only if either direction's forwarder was
    /// saturated.
    pub fn saturated(&self) -> bool {
        self.up.saturated || self.down.saturated
    }
}

impl fmt::Display for PathReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.up)?;
        write!(f, "{}", self.down)?;
        if let Some(p) = &self.pcap {
            write!(f, "\n{p}")?;
        }
        Ok(())
    }
}
