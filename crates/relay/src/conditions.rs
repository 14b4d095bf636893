//! What a path does to the bytes that cross it, and the parsers for the
//! units users write (`26.4kbit`, `0.5%`), in `tc`/netem's vocabulary.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::Error;

/// Linux's minimum retransmission timeout: a lost segment on a short path
/// is resent about this long after it was first sent, plus one RTT.
pub const RTO_MIN: Duration = Duration::from_millis(200);

/// The conditions of one direction of a path. The relay applies the same
/// conditions to both directions, so the round-trip time is `2 × delay`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Conditions {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Each segment's delay varies uniformly within ±jitter (as netem's
    /// jitter), without reordering.
    pub jitter: Duration,
    /// The bottleneck's rate; `None` is unlimited.
    pub bandwidth: Option<Bandwidth>,
    /// The probability that a segment is lost, in `0.0..1.0`. TCP over
    /// loopback cannot lose a segment, so loss is emulated as what the
    /// receiver sees: the segment, and every one behind it, arrive
    /// [`Conditions::retransmit_delay`] late.
    pub loss: f64,
    /// The extra delay of a lost segment; `None` is one retransmission
    /// timeout, `RTT + 200 ms` (Linux's `RTT + max(4 × RTTVAR, RTO_min)`
    /// on a steady path).
    pub loss_delay: Option<Duration>,
}

impl Conditions {
    /// The round-trip time these conditions give, without jitter.
    pub fn rtt(&self) -> Duration {
        self.delay * 2
    }

    /// How late a lost segment arrives.
    pub fn retransmit_delay(&self) -> Duration {
        self.loss_delay.unwrap_or(self.rtt() + RTO_MIN)
    }

    /// Checks the values are usable: loss below 100 %, and delays under an
    /// hour (a typo like `50s` for `50ms` is caught by the caller's eye, a
    /// `5000h` is not).
    pub fn validate(&self) -> Result<(), Error> {
        if !(0.0..1.0).contains(&self.loss) || self.loss.is_nan() {
            return Err(Error::Invalid(format!(
                "loss {} is not a probability below 100 % (write it as 0.5%)",
                self.loss
            )));
        }
        const LIMIT: Duration = Duration::from_secs(3600);
        for (what, d) in [
            ("delay", self.delay),
            ("jitter", self.jitter),
            ("loss delay", self.loss_delay.unwrap_or_default()),
        ] {
            if d > LIMIT {
                return Err(Error::Invalid(format!(
                    "{what} {d:?} is over an hour; did you mean milliseconds (50ms)?"
                )));
            }
        }
        Ok(())
    }
}

impl fmt::Display for Conditions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "delay {:?} each way (RTT {:?})", self.delay, self.rtt())?;
        if !self.jitter.is_zero() {
            write!(f, ", jitter ±{:?}", self.jitter)?;
        }
        match self.bandwidth {
            Some(bw) => write!(f, ", bandwidth {bw} each way")?,
            None => write!(f, ", bandwidth unlimited")?,
        }
        if self.loss > 0.0 {
            write!(
                f,
                ", loss {}% (each lost segment {:?} late)",
                self.loss * 100.0,
                self.retransmit_delay()
            )?;
        }
        Ok(())
    }
}

/// A link rate in bits per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bandwidth(u64);

impl Bandwidth {
    /// A rate of `bps` bits per second (at least 1).
    pub fn bits_per_sec(bps: u64) -> Bandwidth {
        Bandwidth(bps.max(1))
    }

    /// The rate in bits per second.
    pub fn bps(self) -> u64 {
        self.0
    }

    /// How long `bytes` take to cross a link of this rate.
    pub fn transmission(self, bytes: usize) -> Duration {
        let ns = (bytes as u128 * 8 * 1_000_000_000) / u128::from(self.0);
        Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64)
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        if b >= 1e9 {
            write!(f, "{}gbit", b / 1e9)
        } else if b >= 1e6 {
            write!(f, "{}mbit", b / 1e6)
        } else if b >= 1e3 {
            write!(f, "{}kbit", b / 1e3)
        } else {
            write!(f, "{}bit", self.0)
        }
    }
}

impl FromStr for Bandwidth {
    type Err = Error;

    /// `tc`'s units: `bit`, `kbit`, `mbit`, `gbit` (powers of 1000), their
    /// binary forms `kibit`, `mibit`, `gibit`, and bytes per second as
    /// `bps`, `kbps`, `mbps`, `gbps`. Case does not matter.
    fn from_str(s: &str) -> Result<Bandwidth, Error> {
        let t = s.trim().to_ascii_lowercase();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let bad = || {
            Error::Invalid(format!(
                "bandwidth {s:?}: write a number and a unit, as tc does: 26.4kbit, 10mbit, \
                 1gbit, 125kbps (bytes/s)"
            ))
        };
        let n: f64 = num.parse().map_err(|_| bad())?;
        let mult = match unit.trim() {
            "bit" => 1.0,
            "kbit" => 1e3,
            "mbit" => 1e6,
            "gbit" => 1e9,
            "kibit" => 1024.0,
            "mibit" => 1024.0 * 1024.0,
            "gibit" => 1024.0 * 1024.0 * 1024.0,
            "bps" => 8.0,
            "kbps" => 8e3,
            "mbps" => 8e6,
            "gbps" => 8e9,
            _ => return Err(bad()),
        };
        let bps = n * mult;
        if !(1.0..=1e13).contains(&bps) {
            return Err(Error::Invalid(format!(
                "bandwidth {s:?} is out of range (1 bit/s to 10 Tbit/s)"
            )));
        }
        Ok(Bandwidth(bps.round() as u64))
    }
}

/// Parses a loss probability: `0.5%` or a fraction such as `0.005`.
pub fn parse_loss(s: &str) -> Result<f64, Error> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 100.0),
        None => (t, 1.0),
    };
    let p = num
        .parse::<f64>()
        .map_err(|_| Error::Invalid(format!("loss {s:?}: write a percentage such as 0.5%")))?
        / scale;
    if !(0.0..1.0).contains(&p) {
        return Err(Error::Invalid(format!(
            "loss {s:?} must be at least 0% and below 100%"
        )));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_units_are_tc_s() {
        let bps = |s: &str| s.parse::<Bandwidth>().unwrap().bps();
        assert_eq!(bps("26.4kbit"), 26_400);
        assert_eq!(bps("10Mbit"), 10_000_000);
        assert_eq!(bps("1gbit"), 1_000_000_000);
        assert_eq!(bps("1kibit"), 1024);
        assert_eq!(bps("125kbps"), 1_000_000);
        assert_eq!(bps("300bit"), 300);
        for bad in ["", "10", "fast", "10 furlongs", "-1mbit", "0bit", "0.1bit"] {
            assert!(bad.parse::<Bandwidth>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn transmission_time_is_size_over_rate() {
        let bw = Bandwidth::bits_per_sec(28_800);
        // 2 KB over a 28.8 kbit/s modem: seed 004's handshake, ~0.57 s.
        let t = bw.transmission(2048);
        assert!((t.as_secs_f64() - 0.5689).abs() < 0.001, "{t:?}");
    }

    #[test]
    fn loss_is_a_percentage_or_a_fraction() {
        assert_eq!(parse_loss("0.5%").unwrap(), 0.005);
        assert_eq!(parse_loss("0.01").unwrap(), 0.01);
        assert_eq!(parse_loss("0").unwrap(), 0.0);
        for bad in ["100%", "1", "-1%", "x", "1.5"] {
            assert!(parse_loss(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn validation_catches_units_slips() {
        let c = Conditions {
            delay: Duration::from_secs(50 * 3600),
            ..Conditions::default()
        };
        assert!(c.validate().is_err());
        let c = Conditions {
            loss: 1.0,
            ..Conditions::default()
        };
        assert!(c.validate().is_err());
        assert!(Conditions::default().validate().is_ok());
    }
}
