//! What `tlslab overload` runs: the arms (server, admission, client
//! timeout, retry, reuse) and the plan of loads and windows.

use std::time::Duration;

use tlslab_crypto::pki::KeyType;
use tlslab_server::AdmissionMode;

use crate::pin::Placement;
pub use crate::rig::Transport;

pub use tlslab_schema::overload::Peer;

/// One client behaviour and server protection.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arm {
    /// The server: the embedded one or nginx.
    pub server: Peer,
    /// Server admission control.
    pub admission: AdmissionMode,
    /// Client timeout per request; `None`: infinite.
    pub timeout: Option<Duration>,
    /// Retry a failed request in the same session (else a new client).
    pub retry: bool,
    /// Share of connections offering the stored session (0 to 1).
    pub reuse: f64,
}

impl Arm {
    /// The arm as the report records it.
    pub fn to_schema(&self) -> tlslab_schema::overload::Arm {
        tlslab_schema::overload::Arm {
            server: self.server,
            admission: self.admission.name().into(),
            timeout: self.timeout.map(|t| t.as_secs_f64()),
            retry: self.retry,
            reuse: self.reuse,
        }
    }

    /// A short name: `admission/timeout/retry/reuse` (`nginx-limit_conn`
    /// in place of the admission for nginx).
    pub fn name(&self) -> String {
        format!(
            "{}/{}/{}/reuse{:.0}",
            match self.server {
                Peer::Tlslab => self.admission.name(),
                Peer::Nginx => "nginx-limit_conn",
            },
            self.timeout.map_or_else(
                || "no-timeout".into(),
                |t| format!("timeout{}s", t.as_secs_f64())
            ),
            if self.retry { "retry" } else { "new-client" },
            self.reuse * 100.0
        )
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct OverloadPlan {
    /// Measurement window of each point.
    pub window: Duration,
    /// Window of each capacity-sweep step.
    pub sweep_window: Duration,
    /// Multiples of the capacity to offer.
    pub multipliers: Vec<f64>,
    /// The arms.
    pub arms: Vec<Arm>,
    /// Requests per user session (K).
    pub requests: u32,
    /// Think time between a user's requests.
    pub think: Duration,
    /// `static` arms: the most handshakes in flight.
    pub static_limit: usize,
    /// Server and client CPUs.
    pub placement: Placement,
    /// Also run the robustness runs (admission off and session).
    pub robustness: bool,
    /// Their overload phase (60 s by default).
    pub robust_high: Duration,
    /// How to run nginx for `Peer::Nginx` arms (required if there are any).
    pub nginx: Option<NginxPlan>,
    /// Skip the capacity sweep and use this many user sessions/s.
    pub capacity: Option<f64>,
    /// The server certificate's key (seed 002: RSA). A dearer key makes the
    /// server's share of each session's TLS work larger than the client's.
    pub key: KeyType,
    /// The base of the clients' exponential backoff (full jitter) before
    /// an attempt that follows a failure ([`Users::retry_backoff`](tlslab_load::Users::retry_backoff)); zero:
    /// at once, as httperf.
    pub retry_backoff: Duration,
    /// `--h3` ([`Transport::Quic`]): the embedded server's HTTP/3
    /// listener, and user sessions over QUIC (each request a new QUIC
    /// connection); admission decides on the first Initial. Only the
    /// embedded server speaks it.
    pub transport: Transport,
}

/// The default backoff base: the AWS SDKs' (100 ms, full jitter).
pub const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// The nginx reference.
#[derive(Clone, Debug)]
pub struct NginxPlan {
    /// The nginx binary.
    pub bin: std::path::PathBuf,
    /// `limit_conn` of its server block.
    pub limit_conn: usize,
    /// Keep each point's prefix (config, access and error log) under this
    /// directory, in `point-<n>`; `None`: a temporary directory, removed.
    pub keep_dir: Option<std::path::PathBuf>,
}

/// The default `limit_conn`: the same number as the `static` arm's
/// handshakes in flight, so both generic limits get the same budget.
pub const NGINX_LIMIT_CONN: usize = 16;

impl OverloadPlan {
    /// The standard plan: 20 s windows, 0.5x to 4x, K = 5 with 100 ms
    /// think time, and the arms of seed 002's figures (off with 10 s
    /// timeout, retry and 80 % reuse; the same with 0 % reuse, with a new
    /// client on failure, with no timeout) plus `static` and `session`.
    pub fn standard(placement: Placement) -> Self {
        let base = Arm {
            server: Peer::Tlslab,
            admission: AdmissionMode::Off,
            timeout: Some(Duration::from_secs(10)),
            retry: true,
            reuse: 0.8,
        };
        OverloadPlan {
            window: Duration::from_secs(20),
            sweep_window: Duration::from_secs(6),
            multipliers: vec![0.5, 1.0, 2.0, 3.0, 4.0],
            arms: vec![
                base,
                Arm { reuse: 0.0, ..base },
                Arm {
                    retry: false,
                    ..base
                },
                Arm {
                    timeout: None,
                    ..base
                },
                Arm {
                    admission: AdmissionMode::Static,
                    ..base
                },
                Arm {
                    admission: AdmissionMode::Session,
                    ..base
                },
            ],
            requests: 5,
            think: Duration::from_millis(100),
            static_limit: 16,
            placement,
            robustness: false,
            robust_high: Duration::from_secs(60),
            nginx: None,
            capacity: None,
            // RSA, as seed 002's server, and dear enough that the server,
            // not the one client thread, does most of each session's TLS
            // work: with RSA-2048 the client saturates first at 3x (issue
            // 13's runs), and the points would measure it.
            key: KeyType::Rsa4096,
            retry_backoff: RETRY_BACKOFF,
            transport: Transport::Tcp,
        }
    }

    /// `--quick`: 4 s windows at 1x and 3x, admission off and session with
    /// a 1 s client timeout (a 10 s timeout would not fire in the window),
    /// retry and 80 % reuse.
    pub fn quick(placement: Placement) -> Self {
        let base = Arm {
            server: Peer::Tlslab,
            admission: AdmissionMode::Off,
            timeout: Some(Duration::from_secs(1)),
            retry: true,
            reuse: 0.8,
        };
        OverloadPlan {
            window: Duration::from_secs(4),
            sweep_window: Duration::from_secs(4),
            multipliers: vec![1.0, 3.0],
            arms: vec![
                base,
                Arm {
                    admission: AdmissionMode::Session,
                    ..base
                },
            ],
            requests: 5,
            think: Duration::from_millis(20),
            ..OverloadPlan::standard(placement)
        }
    }

    /// The same plan over QUIC (`--h3`): the embedded server's arms only
    /// (nginx here has no HTTP/3), each at multiples of QUIC's own
    /// capacity, which its own sweep finds unless the capacity is given.
    pub fn over_quic(&self) -> Self {
        let mut p = self.clone();
        p.transport = Transport::Quic;
        p.arms.retain(|a| a.server == Peer::Tlslab);
        p.nginx = None;
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_names_say_what_they_are() {
        let a = Arm {
            server: Peer::Tlslab,
            admission: AdmissionMode::Off,
            timeout: None,
            retry: false,
            reuse: 0.0,
        };
        assert_eq!(a.name(), "off/no-timeout/new-client/reuse0");
        let b = Arm {
            server: Peer::Tlslab,
            admission: AdmissionMode::Session,
            timeout: Some(Duration::from_secs(10)),
            retry: true,
            reuse: 0.8,
        };
        assert_eq!(b.name(), "session/timeout10s/retry/reuse80");
        let n = Arm {
            server: Peer::Nginx,
            ..b
        };
        assert_eq!(n.name(), "nginx-limit_conn/timeout10s/retry/reuse80");
    }
}
