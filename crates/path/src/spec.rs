//! What each direction of the path does, and the `key=value,…` spec that
//! writes it on one line (`delay=25ms,rate=10mbit,up.loss=1%`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tlslab_relay::{Bandwidth, parse_loss};

use crate::error::Error;
use crate::trace::Trace;

/// The bound of a direction's drop-tail queue (the bottleneck's buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many packets wait.
    Packets(usize),
    /// At most this many bytes (IP packets) wait.
    Bytes(usize),
}

impl Default for QueueLimit {
    /// 1000 packets, Linux's default `txqueuelen` for Ethernet.
    fn default() -> QueueLimit {
        QueueLimit::Packets(1000)
    }
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::Packets(n) => write!(f, "{n}pkt"),
            QueueLimit::Bytes(n) => write!(f, "{n}B"),
        }
    }
}

impl FromStr for QueueLimit {
    type Err = Error;

    /// `100pkt` (or `100packets`), or bytes: `64kB`, `65536B`, `1MB`, `64KiB`.
    fn from_str(s: &str) -> Result<QueueLimit, Error> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let bad = || {
            Error::Invalid(format!(
                "queue {s:?}: write packets or bytes, e.g. 100pkt, 64kB, 1MB"
            ))
        };
        let n: usize = num.parse().map_err(|_| bad())?;
        let q = match unit.trim() {
            "pkt" | "pkts" | "packets" | "p" => QueueLimit::Packets(n),
            "" => return Err(bad()),
            _ => {
                let b = parse_bytes(t).map_err(|e| match e {
                    Error::Invalid(e) => Error::Invalid(format!("queue: {e}")),
                    e => e,
                })?;
                QueueLimit::Bytes(usize::try_from(b).unwrap_or(usize::MAX))
            }
        };
        match q {
            QueueLimit::Packets(0) | QueueLimit::Bytes(0) => Err(Error::Invalid(format!(
                "queue {s:?} holds nothing; the smallest queue is 1pkt"
            ))),
            QueueLimit::Packets(n) if n > 10_000_000 => Err(Error::Invalid(format!(
                "queue {s:?} is over 10 million packets"
            ))),
            QueueLimit::Bytes(n) if n > 16 << 30 => {
                Err(Error::Invalid(format!("queue {s:?} is over 16 GiB")))
            }
            q => Ok(q),
        }
    }
}

/// Which packets are lost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Loss {
    /// None.
    #[default]
    None,
    /// Each packet independently with this probability.
    Random(f64),
    /// Gilbert–Elliott bursts (netem's `gemodel`): each packet first moves
    /// between a good and a bad state (good→bad with probability `p`,
    /// bad→good with `r`), then is lost with the state's loss probability.
    GilbertElliott {
        /// Good → bad transition probability.
        p: f64,
        /// Bad → good transition probability.
        r: f64,
        /// Loss probability in the bad state (netem's 1-h; default 100 %).
        bad: f64,
        /// Loss probability in the good state (netem's 1-k; default 0 %).
        good: f64,
    },
}

impl Loss {
    /// The long-run fraction of packets lost.
    pub fn mean(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Random(p) => p,
            Loss::GilbertElliott { p, r, bad, good } => {
                let pb = p / (p + r);
                pb * bad + (1.0 - pb) * good
            }
        }
    }

    /// Parses Gilbert–Elliott parameters `p,r[,bad[,good]]`, each a
    /// percentage (`1%`) or a fraction.
    pub fn parse_ge(s: &str) -> Result<Loss, Error> {
        let prob = |x: &str| -> Result<f64, Error> {
            let t = x.trim();
            if t == "100%" || t == "1" {
                return Ok(1.0);
            }
            parse_loss(t).map_err(|e| Error::Invalid(format!("Gilbert–Elliott {s:?}: {e}")))
        };
        let parts: Vec<&str> = s.split([',', '/']).collect();
        if !(2..=4).contains(&parts.len()) {
            return Err(Error::Invalid(format!(
                "Gilbert–Elliott {s:?}: write p,r[,loss-in-bad[,loss-in-good]], e.g. 1%,30%"
            )));
        }
        let (p, r) = (prob(parts[0])?, prob(parts[1])?);
        if p <= 0.0 || r <= 0.0 {
            return Err(Error::Invalid(format!(
                "Gilbert–Elliott {s:?}: p and r must be above 0 (else a state is never left \
                 or never entered)"
            )));
        }
        let bad = parts.get(2).map(|x| prob(x)).transpose()?.unwrap_or(1.0);
        let good = parts.get(3).map(|x| prob(x)).transpose()?.unwrap_or(0.0);
        Ok(Loss::GilbertElliott { p, r, bad, good })
    }
}

/// What one direction of the path does to its packets: loss on arrival,
/// then the bottleneck link (a drop-tail queue served by a delivery
/// trace), then the propagation delay with its jitter.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Direction {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Each packet's delay varies uniformly within ±jitter.
    pub jitter: Duration,
    /// With jitter: let a packet overtake an earlier one (netem's default).
    /// Without it, a packet never leaves before the one ahead of it.
    pub reorder: bool,
    /// The bottleneck link; `None` is no rate limit (and no queue).
    pub link: Option<Trace>,
    /// The bound of the bottleneck's queue.
    pub queue: QueueLimit,
    /// Random loss.
    pub loss: Loss,
}

impl Direction {
    /// Checks the values are usable.
    pub fn validate(&self) -> Result<(), Error> {
        const HOUR: Duration = Duration::from_secs(3600);
        for (what, d) in [("delay", self.delay), ("jitter", self.jitter)] {
            if d > HOUR {
                return Err(Error::Invalid(format!(
                    "{what} {d:?} is over an hour; did you mean milliseconds (25ms)?"
                )));
            }
        }
        if let Loss::GilbertElliott { p, r, bad, good } = self.loss {
            for v in [p, r, bad, good] {
                if !(0.0..=1.0).contains(&v) {
                    return Err(Error::Invalid(format!(
                        "Gilbert–Elliott probability {v} is not within 0..=1"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "delay {:?}", self.delay)?;
        if !self.jitter.is_zero() {
            write!(f, " ±{:?}", self.jitter)?;
            if self.reorder {
                write!(f, " (reordering)")?;
            }
        }
        match &self.link {
            Some(t) => write!(
                f,
                ", link {} ({:.3} Mbit/s mean), drop-tail queue {}",
                t.label(),
                t.mean_bps() / 1e6,
                self.queue
            )?,
            None => write!(f, ", no rate limit")?,
        }
        match self.loss {
            Loss::None => {}
            Loss::Random(p) => write!(f, ", loss {}%", p * 100.0)?,
            l @ Loss::GilbertElliott { p, r, bad, good } => write!(
                f,
                ", Gilbert–Elliott loss p={}% r={}% bad={}% good={}% (mean {:.3}%)",
                p * 100.0,
                r * 100.0,
                bad * 100.0,
                good * 100.0,
                l.mean() * 100.0
            )?,
        }
        Ok(())
    }
}

/// The default size cap of one capture file (`pcap-size`).
pub const DEFAULT_PCAP_SIZE: u64 = 100_000_000;
/// The smallest `pcap-size`: room for the headers and many MTU packets.
pub const MIN_PCAP_SIZE: u64 = 1_000_000;
/// The most ring files (`pcap-files`).
pub const MAX_PCAP_FILES: u32 = 1000;
/// Where and how much to capture (`pcap=FILE,pcap-size=100MB,pcap-files=5`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcapConfig {
    /// The capture file; `None`: no capture.
    pub file: Option<PathBuf>,
    /// The size cap of each file, in bytes.
    pub size: u64,
    /// Ring files: at the cap, the next file (overwriting the oldest);
    /// with 1, the capture stops at the cap.
    pub files: u32,
}

impl Default for PcapConfig {
    fn default() -> PcapConfig {
        PcapConfig {
            file: None,
            size: DEFAULT_PCAP_SIZE,
            files: 1,
        }
    }
}

impl PcapConfig {
    /// Checks the values are usable.
    pub fn validate(&self) -> Result<(), Error> {
        if self.size < MIN_PCAP_SIZE {
            return Err(Error::Invalid(format!(
                "pcap-size {} B is below the smallest, 1MB",
                self.size
            )));
        }
        if !(1..=MAX_PCAP_FILES).contains(&self.files) {
            return Err(Error::Invalid(format!(
                "pcap-files {} is not within 1..={MAX_PCAP_FILES}",
                self.files
            )));
        }
        if self.file.is_none() && *self != PcapConfig::default() {
            return Err(Error::Invalid(
                "pcap-size and pcap-files need a capture file: pcap=FILE (--pcap FILE)".into(),
            ));
        }
        Ok(())
    }

    /// What the capture writes, for a run's first lines: `capturing
    /// every packet to FILE (pcapng, at most 100 MB per file, …)`;
    /// `None` without a capture.
    pub fn describe(&self) -> Option<String> {
        let f = self.file.as_ref()?;
        Some(format!(
            "capturing every packet to {} (pcapng, at most {} MB per file{})",
            f.display(),
            self.size / 1_000_000,
            if self.files > 1 {
                format!(", {} ring files", self.files)
            } else {
                String::new()
            }
        ))
    }

    /// The name of ring file `i` (0 is `FILE` itself).
    pub fn ring_file(&self, i: u32) -> Option<PathBuf> {
        let f = self.file.as_ref()?;
        Some(if i == 0 {
            f.clone()
        } else {
            let mut s = f.clone().into_os_string();
            s.push(format!(".{i}"));
            PathBuf::from(s)
        })
    }
}

/// Both directions of a path. `up` carries the client's packets to the
/// server, `down` the server's to the client.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathConfig {
    /// Client → server.
    pub up: Direction,
    /// Server → client.
    pub down: Direction,
    /// The seed of the loss and jitter generators (each direction derives
    /// its own), so a run can be repeated.
    pub seed: u64,
    /// Pin the two forwarder threads to these CPUs (`None`: not pinned).
    pub cpus: Option<Vec<usize>>,
    /// TCP congestion control in both namespaces (`reno`, `bbr`, …: one of
    /// `net.ipv4.tcp_allowed_congestion_control`, the only ones a namespace
    /// may default to; `None`: the kernel's default).
    pub congestion_control: Option<String>,
    /// Capture every packet forwarded or dropped to a pcapng file
    /// (`pcap=FILE`; off by default).
    pub pcap: PcapConfig,
}

impl PathConfig {
    /// The round-trip propagation delay (no jitter, no queueing).
    pub fn rtt(&self) -> Duration {
        self.up.delay + self.down.delay
    }

    /// Checks both directions.
    pub fn validate(&self) -> Result<(), Error> {
        self.up.validate()?;
        self.down.validate()?;
        self.pcap.validate()
    }

    /// Sets `key=value` on both directions, or on one with an `up.` or
    /// `down.` prefix. Keys: `delay`, `jitter`, `reorder` (`on`/`off`),
    /// `rate` (tc units), `trace` (a mahimahi file), `queue` (`100pkt`,
    /// `64kB`), `loss` (`1%`), `ge` (`p,r[,bad[,good]]`, written with `/`
    /// inside a spec: `ge=1%/30%`), and, for both directions only, `seed`,
    /// `cc` (TCP congestion control in both namespaces) and the capture:
    /// `pcap` (a pcapng file), `pcap-size` (`100MB`, each file's cap) and
    /// `pcap-files` (ring files).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
        let (dirs, k): (Vec<&mut Direction>, &str) = match key.split_once('.') {
            Some(("up", k)) => (vec![&mut self.up], k),
            Some(("down", k)) => (vec![&mut self.down], k),
            Some(_) => {
                return Err(Error::Invalid(format!(
                    "path key {key:?}: the prefix is up. or down."
                )));
            }
            None if key == "cc" => {
                if value.is_empty() || !value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    return Err(Error::Invalid(format!(
                        "cc={value:?}: name a congestion control, e.g. cubic or bbr"
                    )));
                }
                self.congestion_control = Some(value.to_string());
                return Ok(());
            }
            None if key == "pcap" => {
                if value.is_empty() {
                    return Err(Error::Invalid("pcap=: name the capture file".into()));
                }
                self.pcap.file = Some(PathBuf::from(value));
                return Ok(());
            }
            None if key == "pcap-size" => {
                self.pcap.size = parse_bytes(value)?;
                return Ok(());
            }
            None if key == "pcap-files" => {
                self.pcap.files = value.parse().map_err(|_| {
                    Error::Invalid(format!(
                        "pcap-files {value:?} is not a count of files (1..={MAX_PCAP_FILES})"
                    ))
                })?;
                return Ok(());
            }
            None if key == "seed" => {
                self.seed = value.parse().map_err(|_| {
                    Error::Invalid(format!("seed {value:?} is not an unsigned integer"))
                })?;
                return Ok(());
            }
            None => (vec![&mut self.up, &mut self.down], key),
        };
        for d in dirs {
            match k {
                "delay" => d.delay = parse_duration(value)?,
                "jitter" => d.jitter = parse_duration(value)?,
                "reorder" => {
                    d.reorder = match value {
                        "on" | "yes" | "true" | "1" => true,
                        "off" | "no" | "false" | "0" => false,
                        _ => {
                            return Err(Error::Invalid(format!(
                                "reorder={value}: write on or off"
                            )));
                        }
                    }
                }
                "rate" => {
                    let bw: Bandwidth = value
                        .parse()
                        .map_err(|e: tlslab_relay::Error| Error::Invalid(format!("rate: {e}")))?;
                    d.link = Some(Trace::constant(bw.bps(), bw.to_string())?);
                }
                "trace" => d.link = Some(Trace::load(std::path::Path::new(value))?),
                "queue" => d.queue = value.parse()?,
                "loss" => {
                    let p = parse_loss(value).map_err(|e| Error::Invalid(format!("loss: {e}")))?;
                    d.loss = if p > 0.0 { Loss::Random(p) } else { Loss::None };
                }
                "ge" => d.loss = Loss::parse_ge(value)?,
                _ => {
                    return Err(Error::Invalid(format!(
                        "unknown path key {key:?}; the keys are delay, jitter, reorder, rate, \
                         trace, queue, loss, ge (each with an optional up./down. prefix), seed, cc, pcap, \
                         pcap-size and pcap-files"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl FromStr for PathConfig {
    type Err = Error;

    /// `key=value` pairs separated by commas, applied in order (see
    /// [`PathConfig::set`]): `delay=25ms,rate=10mbit,up.loss=1%`.
    fn from_str(s: &str) -> Result<PathConfig, Error> {
        let mut cfg = PathConfig::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                Error::Invalid(format!(
                    "path spec {part:?}: write key=value, e.g. delay=25ms,rate=10mbit"
                ))
            })?;
            cfg.set(k.trim(), v.trim())?;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Parses `25ms`, `2.5ms`, `500us` (or `µs`), `1s`, `100ns`, `0`.
pub fn parse_duration(s: &str) -> Result<Duration, Error> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.starts_with('-') {
        return Err(Error::Invalid(format!(
            "duration {s:?}: a delay or jitter cannot be negative; write e.g. 25ms or 0"
        )));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || Error::Invalid(format!("duration {s:?}: write e.g. 25ms, 500us, 1.5s"));
    let n: f64 = num.parse().map_err(|_| bad())?;
    let ns = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(bad()),
    };
    let v = n * ns;
    if !v.is_finite() || v > 1e13 {
        return Err(bad());
    }
    Ok(Duration::from_nanos(v.round() as u64))
}

/// Parses a size in bytes: `1500B` (or `1500`, `bytes`), `64kB`, `64KiB`,
/// `100MB`, `1MiB`, `1GB`, `1GiB`. Checked: a size that overflows 64 bits
/// is an error, never a wrapped small number.
pub fn parse_bytes(s: &str) -> Result<u64, Error> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || Error::Invalid(format!("size {s:?}: write bytes, e.g. 1500B, 64kB, 100MB"));
    let n: u64 = num.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.trim() {
        "" | "B" | "b" | "bytes" => 1,
        "kB" | "KB" | "kb" => 1000,
        "KiB" => 1 << 10,
        "MB" | "mB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(scale)
        .ok_or_else(|| Error::Invalid(format!("size {s:?} is too large (over 2^64 bytes)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_limits_in_packets_or_bytes() {
        for (text, want) in [
            ("100pkt", QueueLimit::Packets(100)),
            ("64kB", QueueLimit::Bytes(64_000)),
            ("64KiB", QueueLimit::Bytes(65_536)),
            ("1500B", QueueLimit::Bytes(1500)),
        ] {
            assert_eq!(text.parse::<QueueLimit>().unwrap(), want, "{text}");
        }
        for bad in ["", "0pkt", "10", "10 furlongs", "-1pkt"] {
            assert!(bad.parse::<QueueLimit>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn spec_sets_both_directions_then_one() {
        let c: PathConfig = "delay=25ms,rate=10mbit,up.loss=1%,down.delay=5ms,queue=64kB,seed=7"
            .parse()
            .unwrap();
        assert_eq!(c.up.delay, Duration::from_millis(25));
        assert_eq!(c.down.delay, Duration::from_millis(5));
        assert_eq!(c.rtt(), Duration::from_millis(30));
        assert_eq!(c.up.loss, Loss::Random(0.01));
        assert_eq!(c.down.loss, Loss::None);
        assert_eq!(c.up.queue, QueueLimit::Bytes(64_000));
        assert_eq!(c.up.link.as_ref().unwrap().period_ns(), 1_203_200);
        assert_eq!(c.seed, 7);
        for bad in [
            "delay",
            "delay=25",
            "side.delay=1ms",
            "colour=red",
            "delay=2h",
        ] {
            assert!(bad.parse::<PathConfig>().is_err(), "{bad:?}");
        }
    }

    // Issue 29: `--queue 18446744073709552kB` overflowed to a 384 B queue.
    #[test]
    fn queue_in_bytes_that_overflows_is_an_error_not_a_wrapped_size() {
        let e = "18446744073709552kB".parse::<QueueLimit>().unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        assert!("18446744073709551615MiB".parse::<QueueLimit>().is_err());
        assert_eq!(parse_bytes("100MB").unwrap(), 100_000_000);
        assert!(parse_bytes("18446744073709551615GB").is_err());
    }

    // Issue 29: `--delay -5ms` was an unexplained parse failure.
    #[test]
    fn negative_delays_say_they_cannot_be_negative() {
        for d in ["-5ms", "-0.1s", " -1us"] {
            let e = parse_duration(d).unwrap_err().to_string();
            assert!(e.contains("cannot be negative"), "{d}: {e}");
        }
        let e = "up.delay=-5ms".parse::<PathConfig>().unwrap_err();
        assert!(e.to_string().contains("cannot be negative"), "{e}");
    }

    #[test]
    fn pcap_keys_set_the_capture() {
        let c: PathConfig = "delay=1ms,pcap=/tmp/x.pcapng,pcap-size=2MB,pcap-files=3"
            .parse()
            .unwrap();
        assert_eq!(
            c.pcap.file.as_deref(),
            Some(std::path::Path::new("/tmp/x.pcapng"))
        );
        assert_eq!((c.pcap.size, c.pcap.files), (2_000_000, 3));
        assert_eq!(
            c.pcap.ring_file(2).unwrap(),
            std::path::Path::new("/tmp/x.pcapng.2")
        );
        assert_eq!(
            c.pcap.describe().as_deref(),
            Some(
                "capturing every packet to /tmp/x.pcapng (pcapng, at most 2 MB per file, 3 ring files)"
            )
        );
        assert_eq!(PathConfig::default().pcap.file, None);
        assert_eq!(PathConfig::default().pcap.describe(), None);
        for bad in [
            "pcap-size=2MB",
            "pcap=x,pcap-size=10kB",
            "pcap=x,pcap-files=0",
            "pcap=x,pcap-files=1001",
            "pcap=",
        ] {
            assert!(bad.parse::<PathConfig>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn gilbert_elliott_mean_loss() {
        let l = Loss::parse_ge("1%,9%").unwrap();
        assert!((l.mean() - 0.1).abs() < 1e-12, "{l:?}");
        let l = Loss::parse_ge("1%/9%/50%/1%").unwrap();
        assert!((l.mean() - (0.1 * 0.5 + 0.9 * 0.01)).abs() < 1e-12);
        assert!(Loss::parse_ge("1%").is_err());
        assert!(Loss::parse_ge("0,5%").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("2.5ms").unwrap(),
            Duration::from_micros(2500)
        );
        assert_eq!(parse_duration("500us").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("5").is_err());
    }
}
