//! A probe of one target over each of its transports ([`probe_each`]), and
//! how `both` finds a target's HTTP/3 endpoint: from the `Alt-Svc` header of its TCP
//! response ([`h3_endpoint`], RFC 7838), as browsers do.

use crate::config::{ProbeConfig, Transports};
use crate::error::Error;
use crate::quic::{Endpoint, probe_h3};
use crate::round::probe_target;
use crate::sample::{Sample, Transport, now_ms};

/// The HTTP/3 endpoint an `Alt-Svc` header value advertises: the first
/// alternative whose protocol is `h3` (drafts such as `h3-29` are not
/// HTTP/3). `clear` and a value without `h3` advertise none, as does a
/// malformed one. No I/O.
pub fn h3_endpoint(alt_svc: &str) -> Option<Endpoint> {
    for alt in alt_svc.split(',') {
        // `h3=":443"; ma=86400; persist=1`: the alternative, then parameters.
        let first = alt.split(';').next().unwrap_or("").trim();
        let Some((proto, authority)) = first.split_once('=') else {
            continue;
        };
        if proto.trim() != "h3" {
            continue;
        }
        let authority = authority.trim();
        let Some(authority) = authority
            .strip_prefix('"')
            .and_then(|a| a.strip_suffix('"'))
        else {
            continue;
        };
        let Some((host, port)) = authority.rsplit_once(':') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        if port == 0 {
            continue;
        }
        let host = (!host.is_empty()).then(|| host.to_string());
        return Some(Endpoint { host, port });
    }
    None
}

/// Finds `url`'s HTTP/3 endpoint with one TCP probe, before any round:
/// [`Error::NoAltSvc`] when the probe fails or its response advertises no
/// `h3` alternative.
pub async fn discover(cfg: &ProbeConfig, url: &str) -> Result<Endpoint, Error> {
    let s = probe_target(cfg, url).await;
    if let (Some(kind), None) = (&s.error_kind, &s.alt_svc) {
        return Err(Error::NoAltSvc {
            target: url.to_string(),
            reason: format!(
                "its TCP probe failed ({}:{kind}: {})",
                s.error_phase.as_deref().unwrap_or("?"),
                s.error.as_deref().unwrap_or("")
            ),
        });
    }
    match s.alt_svc.as_deref() {
        Some(v) => h3_endpoint(v).ok_or_else(|| Error::NoAltSvc {
            target: url.to_string(),
            reason: format!("its Alt-Svc header ({v:.200}) names no h3 alternative"),
        }),
        None => Err(Error::NoAltSvc {
            target: url.to_string(),
            reason: "its response has no Alt-Svc header".into(),
        }),
    }
}

/// Probes `url` once over each of `cfg`'s transports: one sample each.
/// With [`Transports::Both`] the HTTP/3 endpoint is the one this round's
/// TCP response advertises, else `known` (found before); with neither,
/// the HTTP/3 sample fails in phase `alt_svc` (kind `no_alt_svc`).
pub async fn probe_each(cfg: &ProbeConfig, url: &str, known: Option<&Endpoint>) -> Vec<Sample> {
    match cfg.transports {
        Transports::Tcp => vec![probe_target(cfg, url).await],
        Transports::H3 => vec![probe_h3(cfg, url, None).await],
        Transports::Both => {
            let tcp = probe_target(cfg, url).await;
            let fresh = tcp.alt_svc.as_deref().and_then(h3_endpoint);
            let h3 = match fresh.as_ref().or(known) {
                Some(at) => probe_h3(cfg, url, Some(at)).await,
                None => no_alt_svc(url, &tcp),
            };
            vec![tcp, h3]
        }
    }
}

/// The HTTP/3 sample of a `both` probe whose TCP response advertised no
/// HTTP/3 endpoint, and none was known: failed, saying why.
fn no_alt_svc(url: &str, tcp: &Sample) -> Sample {
    let why = match (&tcp.error_kind, &tcp.alt_svc) {
        (Some(k), None) => format!("the TCP probe failed ({k}) before an Alt-Svc header"),
        (_, Some(v)) => format!("the TCP response's Alt-Svc ({v:.200}) names no h3 alternative"),
        (None, None) => "the TCP response has no Alt-Svc header".into(),
    };
    Sample {
        target: url.to_string(),
        transport: Transport::H3,
        started_at_ms: now_ms(),
        error_phase: Some("alt_svc".into()),
        error_kind: Some("no_alt_svc".into()),
        error: Some(format!(
            "no HTTP/3 endpoint: {why}; enable HTTP/3 on the server (tlslab serve --h3 sends \
             Alt-Svc: h3=\":PORT\") or probe with --transport tcp"
        )),
        ..Sample::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(host: Option<&str>, port: u16) -> Option<Endpoint> {
        Some(Endpoint {
            host: host.map(str::to_string),
            port,
        })
    }

    #[test]
    fn alt_svc_names_the_h3_endpoint_as_browsers_read_it() {
        assert_eq!(h3_endpoint("h3=\":8443\"; ma=86400"), at(None, 8443));
        assert_eq!(
            h3_endpoint("h3-29=\":9000\", h3=\"alt.example:443\"; ma=3600"),
            at(Some("alt.example"), 443)
        );
        assert_eq!(h3_endpoint("h3=\"[::1]:4433\""), at(Some("[::1]"), 4433));
        for none in [
            "clear",
            "",
            "h2=\":443\"",
            "h3-29=\":443\"",
            "h3=:443",
            "h3=\":0\"",
            "h3=\":99999\"",
            "h3=\"nohostport\"",
        ] {
            assert_eq!(h3_endpoint(none), None, "{none}");
        }
    }
}
