//! The admission-control flags of `tlslab serve` (`--admission`,
//! `--shed-with`, `--max-handshakes-in-flight`, `--admission-queue-target`)
//! and their validation into [`tlslab_server::AdmissionSettings`].

use std::time::Duration;

use clap::Args;
use tlslab_server::{AdmissionMode, AdmissionSettings, ShedWith};

use crate::args::parse_duration;

/// Admission control of new TLS handshakes under overload.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Admission control (overload)")]
pub struct AdmissionArgs {
    /// Admission control of new TLS handshakes: `off`; `static` (at most
    /// --max-handshakes-in-flight handshakes of any kind at once, the rest shed);
    /// `session` (resumptions of a session this node holds are always admitted; new full
    /// handshakes are admitted at a rate an AIMD controller sets from the accept-to-first-byte
    /// queue delay, the server's CPU and the handshakes in flight, and shed, before any
    /// public-key work, beyond it). Decisions read the ClientHello ahead of rustls.
    #[arg(long, default_value = "off", value_name = "off|static|session",
          value_parser = |s: &str| s.parse::<AdmissionMode>())]
    pub admission: AdmissionMode,

    /// How a shed connection is refused: `close` (after reading the ClientHello), `alert`
    /// (a fatal internal_error TLS alert, then close), or `503` (the handshake completes and
    /// each request gets 503 with retry-after: 1; this pays for the handshake).
    #[arg(long, default_value = "close", value_name = "close|alert|503",
          value_parser = |s: &str| s.parse::<ShedWith>())]
    pub shed_with: ShedWith,

    /// `static`: the most TLS handshakes in flight (required; given alone it selects
    /// `static`). `session`: the in-flight count that counts as overload (default 128 per
    /// worker thread).
    #[arg(long, value_name = "N")]
    pub max_handshakes_in_flight: Option<usize>,

    /// `session`: the mean accept-to-first-byte delay above which a busy server (its workers
    /// at least 80 % busy) is overloaded.
    #[arg(long, default_value = "10ms", value_name = "DURATION", value_parser = parse_duration)]
    pub admission_queue_target: Duration,
}

/// The settings `a` asks for; errors are usage errors.
pub fn admission(a: &crate::args::ServeArgs) -> anyhow::Result<AdmissionSettings> {
    let x = &a.admission;
    let mode = match (x.admission, x.max_handshakes_in_flight) {
        (AdmissionMode::Off, Some(_)) => AdmissionMode::Static,
        (m, _) => m,
    };
    let s = AdmissionSettings {
        mode,
        shed_with: x.shed_with,
        max_handshakes_in_flight: x.max_handshakes_in_flight,
        queue_delay_target: x.admission_queue_target,
        ..AdmissionSettings::default()
    };
    s.validate().map_err(crate::config::usage)?;
    Ok(s)
}
