//! `tlslab dispatch`: its flags and the wiring to `tlslab-dispatch`.

use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tlslab_dispatch::health::TlsCheck;
use tlslab_dispatch::{Backend, Config, Dispatcher, HealthCheck, Transport};

use crate::args::tools::{DispatchArgs, HealthArg};
use crate::usage::Usage;

/// Validates the flags into an engine configuration.
pub fn config(a: &DispatchArgs) -> Result<Config, Usage> {
    let backends = a
        .backends
        .iter()
        .map(|b| {
            b.parse::<Backend>()
                .map_err(|e| Usage(format!("--backend: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let max_sessions = NonZeroUsize::new(a.max_sessions)
        .ok_or_else(|| Usage("--max-sessions must be at least 1".into()))?;
    if a.session_timeout < Duration::from_secs(1) {
        return Err(Usage("--session-timeout must be at least 1s".into()));
    }
    if a.health_check != HealthArg::Tls && (a.health_cacert.is_some() || a.health_sni.is_some()) {
        return Err(Usage(
            "--health-cacert and --health-sni need --health-check tls".into(),
        ));
    }
    if a.keylog.is_some() && a.health_check != HealthArg::Tls {
        return Err(Usage(
            "--keylog needs --health-check tls: the dispatcher forwards clients' TLS without \
             terminating it, so its only TLS secrets are those of its TLS health checks; for the \
             clients' connections use load --keylog or serve --keylog"
                .into(),
        ));
    }
    let idle_timeout = a.idle_timeout.unwrap_or(if a.udp {
        tlslab_dispatch::DEFAULT_UDP_IDLE_TIMEOUT
    } else {
        tlslab_dispatch::DEFAULT_IDLE_TIMEOUT
    });
    if !a.udp && !a.quic_lb.is_empty() {
        return Err(Usage("--quic-lb is QUIC's; add --udp".into()));
    }
    let quic_lb = a
        .quic_lb
        .iter()
        .map(|c| {
            tlslab_crypto::quic::LbParams::parse(c).map_err(|e| {
                Usage(format!(
                    "--quic-lb: {}; the form is server-id-len=N,nonce-len=N,config-id=N[,key=HEX], the nodes' serve --quic-lb without their own server-id",
                    e.0
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let max_flows = NonZeroUsize::new(a.max_flows)
        .ok_or_else(|| Usage("--max-flows must be at least 1".into()))?;
    if a.hello_timeout.is_zero()
        || idle_timeout.is_zero()
        || a.health_interval.is_zero()
        || a.connect_timeout.is_zero()
    {
        return Err(Usage(
            "--hello-timeout, --idle-timeout, --health-interval and --connect-timeout must be positive"
                .into(),
        ));
    }
    let cfg = Config {
        listen: a.listen,
        backends,
        policy: a.policy,
        session_timeout: a.session_timeout,
        max_sessions,
        hello_timeout: a.hello_timeout,
        idle_timeout,
        bad_input: a.bad_input,
        send_proxy_v2: a.send_proxy_v2,
        health_check: match a.health_check {
            HealthArg::Tcp => HealthCheck::Tcp,
            HealthArg::Tls => HealthCheck::Tls(
                TlsCheck::new(a.health_cacert.as_deref(), a.health_sni.as_deref())
                    .map_err(Usage)?,
            ),
            HealthArg::Off => HealthCheck::Off,
        },
        health_interval: a.health_interval,
        connect_timeout: a.connect_timeout,
        metrics: a.metrics,
        transport: if a.udp {
            Transport::Udp
        } else {
            Transport::Tcp
        },
        quic_lb,
        max_flows,
    };
    cfg.check().map_err(|e| Usage(e.to_string()))?;
    Ok(cfg)
}

/// Runs `tlslab dispatch` until SIGINT/SIGTERM.
pub fn run(a: &DispatchArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = config(a)?;
    // The TLS health checks' key log (--keylog, else SSLKEYLOGFILE).
    if let HealthCheck::Tls(check) = &cfg.health_check {
        let path = crate::output::key_log(a.keylog.as_ref());
        if let Some(p) = &path {
            let log = tlslab_crypto::keylog::KeyLogFile::open(p)?;
            crate::output::warn_key_log(Some(p));
            cfg.health_check = HealthCheck::Tls(check.clone().with_key_log(log));
        }
    }
    let mut rt = if a.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if a.threads > 1 {
        rt.worker_threads(a.threads);
    }
    let rt = rt.enable_all().build().context("starting the runtime")?;
    let d = rt
        .block_on(Dispatcher::bind(cfg))
        .context("starting the dispatcher")?;
    println!("tlslab dispatch: listen {}", d.local_addr()?);
    if let Some(m) = d.metrics_addr() {
        println!("tlslab dispatch: metrics http://{m}/metrics");
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    // The signal wait blocks its own thread; the runtime (current-thread by
    // default) runs on this one.
    std::thread::Builder::new()
        .name("tlslab-dispatch-signal".into())
        .spawn(move || {
            let _ = tlslab_server::wait_for_signal();
            let _ = tx.send(true);
        })
        .context("starting the signal thread")?;
    rt.block_on(d.run(rx));
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(ExitCode::SUCCESS)
}
