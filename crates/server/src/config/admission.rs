//! What `--admission`, `--shed-with` and their limits say, and the check
//! of their combination. No state and no I/O.

use std::time::Duration;

use serde::Serialize;

/// Which admission control runs (`--admission`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AdmissionMode {
    /// Every handshake is admitted (the server's behaviour before
    /// admission control; no ClientHello is read ahead of rustls).
    #[default]
    Off,
    /// At most [`AdmissionSettings::max_handshakes_in_flight`] handshakes
    /// of any kind at once; the rest are shed.
    Static,
    /// Session-aware: resumptions always admitted, new full handshakes
    /// limited by the controller.
    Session,
}

impl AdmissionMode {
    /// The name used by `--admission` and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            AdmissionMode::Off => "off",
            AdmissionMode::Static => "static",
            AdmissionMode::Session => "session",
        }
    }
}

impl std::str::FromStr for AdmissionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [
            AdmissionMode::Off,
            AdmissionMode::Static,
            AdmissionMode::Session,
        ]
        .into_iter()
        .find(|m| m.name() == s)
        .ok_or_else(|| format!("--admission '{s}' is not a mode; use off, static or session"))
    }
}

/// What a shed connection gets (`--shed-with`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ShedWith {
    /// The connection is closed after the ClientHello is read (the
    /// default; the cheapest).
    #[default]
    Close,
    /// A plaintext fatal TLS alert `internal_error`, then close: as cheap,
    /// and the client can tell a shed from a network failure.
    Alert,
    /// The handshake is completed and every request answered `503` with
    /// `retry-after: 1` and `connection: close`. This pays for the full
    /// handshake (it is not cheap); it exists to compare with proxies that
    /// answer 503.
    #[serde(rename = "503")]
    Http503,
}

impl ShedWith {
    /// The name used by `--shed-with` and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            ShedWith::Close => "close",
            ShedWith::Alert => "alert",
            ShedWith::Http503 => "503",
        }
    }
}

impl std::str::FromStr for ShedWith {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [ShedWith::Close, ShedWith::Alert, ShedWith::Http503]
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                format!("--shed-with '{s}' is not a way to shed; use close, alert or 503")
            })
    }
}

/// What a shed QUIC connection attempt gets (`--quic-shed-with`): the
/// QUIC counterparts of [`ShedWith`], each decided on the client's first
/// Initial, before any handshake state exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuicShedWith {
    /// A CONNECTION_CLOSE with CONNECTION_REFUSED in an Initial packet
    /// (quinn's `Incoming::refuse`; the default): the client learns at once.
    #[default]
    Refuse,
    /// A Retry packet (stateless; the client must echo its token, which
    /// proves its address and costs it a round trip); an attempt that
    /// already carries a Retry token, which cannot be retried again, is
    /// refused.
    Retry,
    /// Nothing: the Initial is dropped (quinn's `Incoming::ignore`) and the
    /// client retransmits after its probe timeout, as after a lost packet.
    Ignore,
}

impl QuicShedWith {
    /// The name used by `--quic-shed-with` and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            QuicShedWith::Refuse => "refuse",
            QuicShedWith::Retry => "retry",
            QuicShedWith::Ignore => "ignore",
        }
    }
}

impl std::str::FromStr for QuicShedWith {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [QuicShedWith::Refuse, QuicShedWith::Retry, QuicShedWith::Ignore]
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                format!(
                    "--quic-shed-with '{s}' is not a way to shed a QUIC attempt; use refuse, retry or ignore"
                )
            })
    }
}

/// Admission-control settings ([`ServeConfig::admission`](super::ServeConfig::admission)).
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionSettings {
    /// The mode.
    pub mode: AdmissionMode,
    /// How shed connections are refused.
    pub shed_with: ShedWith,
    /// `static`: the most handshakes in flight (required). `session`: the
    /// full handshakes in flight that count as overload (default 128 per
    /// worker thread).
    pub max_handshakes_in_flight: Option<usize>,
    /// `session`: the queueing delay of new connections' first bytes
    /// above which a busy server is overloaded.
    pub queue_delay_target: Duration,
    /// `session`: the busy share of the CPU budget (0 to 1) from which the
    /// queue delay counts as overload.
    pub cpu_high: f64,
    /// `session`: admit new full handshakes at this fixed rate (per
    /// second; 0: none), from a bucket holding a burst of a tenth of a
    /// second's worth (at least 1) from the start, instead of the
    /// controller's limit
    /// (`--admission-fixed-limit`; experiments and tests). The controller
    /// still runs and reports its signals.
    pub fixed_limit: Option<f64>,
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        AdmissionSettings {
            mode: AdmissionMode::Off,
            shed_with: ShedWith::Close,
            max_handshakes_in_flight: None,
            queue_delay_target: Duration::from_millis(10),
            cpu_high: 0.8,
            fixed_limit: None,
        }
    }
}

impl AdmissionSettings {
    /// Checks the settings; the message names the option to change.
    pub fn validate(&self) -> Result<(), String> {
        if self.mode == AdmissionMode::Static && self.max_handshakes_in_flight.is_none() {
            return Err(
                "--admission static needs --max-handshakes-in-flight N (the static limit)".into(),
            );
        }
        if self.max_handshakes_in_flight == Some(0) {
            return Err("--max-handshakes-in-flight 0 admits nothing; use at least 1".into());
        }
        if self.mode == AdmissionMode::Off && self.shed_with != ShedWith::Close {
            return Err(
                "--shed-with needs admission control: add --admission session or static".into(),
            );
        }
        if self.queue_delay_target.is_zero() {
            return Err("--admission-queue-target must be positive (e.g. 10ms)".into());
        }
        if let Some(l) = self.fixed_limit {
            if self.mode != AdmissionMode::Session {
                return Err("--admission-fixed-limit needs --admission session".into());
            }
            if !(l.is_finite() && l >= 0.0) {
                return Err(
                    "--admission-fixed-limit must be a rate of at least 0 per second (e.g. 50/s)"
                        .into(),
                );
            }
        }
        if !(self.cpu_high > 0.0 && self.cpu_high <= 1.0) {
            return Err("the CPU threshold must be in (0, 1]".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        let mut s = AdmissionSettings {
            mode: AdmissionMode::Static,
            ..Default::default()
        };
        assert!(
            s.validate()
                .unwrap_err()
                .contains("--max-handshakes-in-flight")
        );
        s.max_handshakes_in_flight = Some(0);
        assert!(s.validate().is_err());
        s.max_handshakes_in_flight = Some(5);
        assert!(s.validate().is_ok());
        let off = AdmissionSettings {
            shed_with: ShedWith::Alert,
            ..Default::default()
        };
        assert!(off.validate().unwrap_err().contains("--admission"));
        assert_eq!("503".parse::<ShedWith>().unwrap(), ShedWith::Http503);
        assert!("drop".parse::<ShedWith>().is_err());
        assert!("on".parse::<AdmissionMode>().is_err());
        let fixed = AdmissionSettings {
            fixed_limit: Some(5.0),
            ..Default::default()
        };
        assert!(
            fixed
                .validate()
                .unwrap_err()
                .contains("--admission session")
        );
        let fixed = AdmissionSettings {
            mode: AdmissionMode::Session,
            ..fixed
        };
        assert!(fixed.validate().is_ok());
        assert_eq!(
            "ignore".parse::<QuicShedWith>().unwrap(),
            QuicShedWith::Ignore
        );
        assert!(
            "close"
                .parse::<QuicShedWith>()
                .unwrap_err()
                .contains("refuse, retry or ignore")
        );
    }
}
