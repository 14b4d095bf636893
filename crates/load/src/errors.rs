//! Turning what went wrong on a connection into an error kind for the report.

use std::error::Error as StdError;
use std::io;

use tlslab_crypto::meter::{Ablation, AblationSet, mismatch_hint};

/// The rustls error behind `err`, looking through wrappers as
/// [`classify`] does.
pub(crate) fn find_tls<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
        }
        cur = e.source();
    }
    None
}

/// If `e` is what a client with the ablations `ours` gets from a server with
/// a different `--ablate` set, a sentence saying so and how to fix it. A
/// client without ablations never calls its errors mismatches (a bad
/// signature there is an ordinary certificate failure; the server names
/// the mismatch). Otherwise [`mismatch_hint`] decides, plus the alerts a
/// real server answers an ablated client with: `handshake_failure` (no
/// group in common) when we ablate `kx`, and `decrypt_error` /
/// `bad_record_mac`.
pub(crate) fn ablation_hint(e: &rustls::Error, ours: AblationSet) -> Option<String> {
    use rustls::AlertDescription as A;
    if ours.is_empty() {
        return None;
    }
    match e {
        rustls::Error::AlertReceived(a @ A::HandshakeFailure) if ours.contains(Ablation::Kx) => {
            Some(format!(
                "the server found no key-exchange group in common (alert {a:?}) and this client uses --ablate {ours}, whose private kx code points only a server with the same ablations accepts; start client and server with the same --ablate set"
            ))
        }
        rustls::Error::AlertReceived(a @ (A::DecryptError | A::BadRecordMac)) => Some(format!(
            "the server rejected this client's handshake or records (alert {a:?}) and this client uses --ablate {ours}; start client and server with the same --ablate set"
        )),
        _ => mismatch_hint(e),
    }
}

/// The kind of a failed I/O operation, looking through wrappers (hyper
/// errors, tokio-rustls's io::Error around a rustls error) for the cause.
pub fn classify(err: &(dyn StdError + 'static)) -> String {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    let mut hyper_kind = None;
    while let Some(e) = cur {
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return tls_kind(t);
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            // io::Error::source skips a custom error's own payload, so look
            // at it directly.
            if let Some(t) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                return tls_kind(t);
            }
            return io_kind(io).to_string();
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && hyper_kind.is_none()
        {
            hyper_kind = Some(if h.is_parse() || h.is_parse_status() {
                "http_protocol"
            } else if h.is_timeout() {
                "timeout"
            } else if h.is_incomplete_message() || h.is_canceled() || h.is_closed() {
                "closed"
            } else {
                "io"
            });
        }
        cur = e.source();
    }
    hyper_kind.unwrap_or("io").to_string()
}

/// The kind of a socket error.
pub(crate) fn io_kind(e: &io::Error) -> &'static str {
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "refused",
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => "reset",
        K::TimedOut => "timeout",
        K::UnexpectedEof => "closed",
        _ => "io",
    }
}

/// `tls_alert_<description>` for an alert from the server, else
/// `tls_<error>` with up to two levels of the rustls error's variant names
/// (`tls_invalid_certificate_unknown_issuer`).
pub(crate) fn tls_kind(e: &rustls::Error) -> String {
    if let rustls::Error::AlertReceived(alert) = e {
        let name = leading_names(&format!("{alert:?}"), 1);
        return format!("tls_alert_{name}");
    }
    format!("tls_{}", leading_names(&format!("{e:?}"), 2))
}

/// The first `max` CamelCase identifiers of a Debug string, nested as
/// `Outer(Inner(..))`, in snake case joined by `_`.
fn leading_names(debug: &str, max: usize) -> String {
    let mut names = Vec::new();
    let mut rest = debug;
    while names.len() < max {
        let end = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        let ident = &rest[..end];
        if !ident.starts_with(|c: char| c.is_ascii_uppercase()) {
            break;
        }
        names.push(snake(ident));
        match rest[end..].strip_prefix('(') {
            Some(r) => rest = r,
            None => break,
        }
    }
    if names.is_empty() {
        "other".into()
    } else {
        names.join("_")
    }
}

fn snake(ident: &str) -> String {
    let mut out = String::with_capacity(ident.len() + 4);
    let chars: Vec<char> = ident.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower = i > 0 && !chars[i - 1].is_ascii_uppercase();
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if i > 0 && (prev_lower || (next_lower && chars[i - 1].is_ascii_uppercase())) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{AlertDescription, CertificateError, Error as TlsError};

    #[test]
    fn tls_errors_get_stable_names() {
        assert_eq!(
            tls_kind(&TlsError::AlertReceived(AlertDescription::HandshakeFailure)),
            "tls_alert_handshake_failure"
        );
        assert_eq!(
            tls_kind(&TlsError::InvalidCertificate(
                CertificateError::UnknownIssuer
            )),
            "tls_invalid_certificate_unknown_issuer"
        );
        assert_eq!(
            tls_kind(&TlsError::General("some text".into())),
            "tls_general"
        );
        assert_eq!(snake("TLSv13Thing"), "tl_sv13_thing");
        assert_eq!(snake("BadCertificate"), "bad_certificate");
    }

    #[test]
    fn only_an_ablated_client_calls_errors_ablation_mismatches() {
        use rustls::PeerIncompatible;
        let none = AblationSet::NONE;
        let kx: AblationSet = "kx".parse().unwrap();
        let cipher: AblationSet = "cipher".parse().unwrap();
        let bad_sig = TlsError::InvalidCertificate(CertificateError::BadSignature);
        let hs_fail = TlsError::AlertReceived(AlertDescription::HandshakeFailure);
        assert_eq!(ablation_hint(&bad_sig, none), None);
        assert!(ablation_hint(&bad_sig, kx).unwrap().contains("--ablate"));
        assert!(ablation_hint(&hs_fail, kx).unwrap().contains("--ablate kx"));
        assert_eq!(ablation_hint(&hs_fail, cipher), None);
        assert_eq!(ablation_hint(&hs_fail, none), None);
        let decrypt = TlsError::AlertReceived(AlertDescription::DecryptError);
        assert!(
            ablation_hint(&decrypt, cipher)
                .unwrap()
                .contains("--ablate cipher")
        );
        let nokx = TlsError::PeerIncompatible(PeerIncompatible::NoKxGroupsInCommon);
        assert!(ablation_hint(&nokx, kx).is_some());
        let io = io::Error::new(io::ErrorKind::InvalidData, decrypt);
        assert_eq!(
            find_tls(&io),
            Some(&TlsError::AlertReceived(AlertDescription::DecryptError))
        );
        assert_eq!(find_tls(&io::Error::from(io::ErrorKind::TimedOut)), None);
    }

    #[test]
    fn wrapped_errors_are_found() {
        let inner = TlsError::AlertReceived(AlertDescription::ProtocolVersion);
        let io = io::Error::new(io::ErrorKind::InvalidData, inner);
        assert_eq!(classify(&io), "tls_alert_protocol_version");
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(classify(&refused), "refused");
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(classify(&reset), "reset");
        assert_eq!(
            classify(&io::Error::from(io::ErrorKind::UnexpectedEof)),
            "closed"
        );
    }
}
