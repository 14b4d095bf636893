//! `tlslab probe exporter`: a blackbox_exporter-style endpoint. Each
//! `GET /probe?target=URL` runs one round against URL and answers with its
//! Prometheus metrics (text exposition format 0.0.4).

use std::convert::Infallible;
use std::fmt::Write as _;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::{Phase, ProbeConfig, Sample, probe_target};

/// The metrics of one probe, as the exporter returns them.
pub fn metrics(s: &Sample) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP tlslab_probe_phase_seconds Duration of each probe phase, client-observed."
    );
    let _ = writeln!(out, "# TYPE tlslab_probe_phase_seconds gauge");
    for p in [
        Phase::Dns,
        Phase::Connect,
        Phase::TlsFull,
        Phase::TlsResumed,
        Phase::Ttfb,
        Phase::Total,
    ] {
        if let Some(us) = s.phase_us(p) {
            let _ = writeln!(
                out,
                "tlslab_probe_phase_seconds{{phase=\"{}\"}} {}",
                p.name(),
                us as f64 / 1e6
            );
        }
    }
    let gauge = |out: &mut String, name: &str, help: &str, v: Option<f64>| {
        if let Some(v) = v {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {v}");
        }
    };
    gauge(
        &mut out,
        "tlslab_probe_resumption_accepted",
        "1 if the server accepted the session offered on the second connection.",
        s.resumption_accepted.map(|a| f64::from(u8::from(a))),
    );
    gauge(
        &mut out,
        "tlslab_probe_success",
        "1 if every phase of the probe succeeded.",
        Some(if s.error_kind.is_none() { 1.0 } else { 0.0 }),
    );
    gauge(
        &mut out,
        "tlslab_probe_ssl_earliest_cert_expiry",
        "The leaf certificate's not-after, Unix seconds.",
        s.cert_not_after.map(|t| t as f64),
    );
    gauge(
        &mut out,
        "tlslab_probe_handshake_round_trips",
        "Round trips of the full handshake.",
        s.full_handshake_round_trips.map(|t| t as f64),
    );
    gauge(
        &mut out,
        "tlslab_probe_handshake_bytes",
        "Socket bytes, both ways, of the full handshake.",
        s.full_handshake_bytes.map(|t| t as f64),
    );
    if let Some(v) = &s.version {
        let _ = writeln!(
            out,
            "# HELP tlslab_probe_tls_version_info The negotiated TLS version."
        );
        let _ = writeln!(out, "# TYPE tlslab_probe_tls_version_info gauge");
        let _ = writeln!(
            out,
            "tlslab_probe_tls_version_info{{version=\"{}\",suite=\"{}\",group=\"{}\"}} 1",
            esc(v),
            esc(s.suite.as_deref().unwrap_or("")),
            esc(s.group.as_deref().unwrap_or(""))
        );
    }
    if let Some(k) = &s.error_kind {
        let _ = writeln!(
            out,
            "# HELP tlslab_probe_error_info The failed phase and error class."
        );
        let _ = writeln!(out, "# TYPE tlslab_probe_error_info gauge");
        let _ = writeln!(
            out,
            "tlslab_probe_error_info{{phase=\"{}\",kind=\"{}\"}} 1",
            esc(s.error_phase.as_deref().unwrap_or("")),
            esc(k)
        );
    }
    out
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn target_param(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == "target").then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

async fn handle(
    cfg: ProbeConfig,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into()));
    }
    match req.uri().path() {
        "/probe" => match target_param(req.uri().query()) {
            Some(t) if !t.is_empty() => {
                let s = probe_target(&cfg, &t).await;
                Ok(reply(StatusCode::OK, metrics(&s)))
            }
            _ => Ok(reply(
                StatusCode::BAD_REQUEST,
                "missing ?target=URL, e.g. /probe?target=https://example.com/\n".into(),
            )),
        },
        "/" | "/health" => Ok(reply(
            StatusCode::OK,
            "tlslab probe exporter: GET /probe?target=URL\n".into(),
        )),
        _ => Ok(reply(
            StatusCode::NOT_FOUND,
            "not found; use /probe?target=URL\n".into(),
        )),
    }
}

/// Serves `/probe?target=URL` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, cfg: ProbeConfig) -> std::io::Result<()> {
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("exporter accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let cfg = cfg.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(cfg.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), svc)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_parameter_is_decoded() {
        assert_eq!(
            target_param(Some("module=x&target=https%3A%2F%2Fa.test%3A8443%2Fp")).as_deref(),
            Some("https://a.test:8443/p")
        );
        assert_eq!(target_param(Some("x=1")), None);
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn metrics_name_every_phase_measured_and_success() {
        let s = Sample {
            dns_us: Some(10),
            tls_full_us: Some(2_000),
            resumption_accepted: Some(true),
            version: Some("1.3".into()),
            ..Sample::default()
        };
        let m = metrics(&s);
        assert!(
            m.contains("tlslab_probe_phase_seconds{phase=\"tls_full\"} 0.002"),
            "{m}"
        );
        assert!(m.contains("tlslab_probe_resumption_accepted 1"), "{m}");
        assert!(m.contains("tlslab_probe_success 1"), "{m}");
        assert!(m.contains("version=\"1.3\""), "{m}");
    }
}
