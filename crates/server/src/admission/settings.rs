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

/// Admission-control settings ([`crate::ServeConfig::admission`]).
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
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        AdmissionSettings {
            mode: AdmissionMode::Off,
            shed_with: ShedWith::Close,
            max_handshakes_in_flight: None,
            queue_delay_target: Duration::from_millis(10),
            cpu_high: 0.8,
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
    }
}
