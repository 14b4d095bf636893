//! Target URLs: `http://` or `https://`, a host, an optional port, a path.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::error::Error;

/// The scheme of a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP over TCP: the no-TLS baseline.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// The port used when the URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// One URL the load engine requests.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// Host name or IP address, without brackets for IPv6.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Target {
    /// Parses an `http://` or `https://` URL.
    pub fn parse(url: &str) -> Result<Target, Error> {
        let bad = |reason: &str| Error::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: http::Uri = url
            .trim()
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("https") => Scheme::Https,
            Some(s) if s.eq_ignore_ascii_case("http") => Scheme::Http,
            Some(_) => return Err(bad("the scheme must be http or https")),
            None => return Err(bad("the scheme is missing")),
        };
        let authority = uri.authority().ok_or_else(|| bad("the host is missing"))?;
        if authority.as_str().contains('@') {
            return Err(bad("user names and passwords are not supported"));
        }
        let host = authority.host();
        // Anything after the host is a port; `port_u16` is None both when
        // there is none and when it does not fit in 16 bits.
        let has_port = authority.as_str().len() > host.len();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(bad("the host is missing"));
        }
        let port = match (has_port, uri.port_u16()) {
            (false, _) => scheme.default_port(),
            (true, Some(p)) if p != 0 => p,
            _ => return Err(bad("the port must be 1-65535")),
        };
        let path = uri
            .path_and_query()
            .map(|p| p.as_str())
            .filter(|p| !p.is_empty())
            .unwrap_or("/");
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        Ok(Target {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
            path,
        })
    }

    /// Returns true if and only if the target uses TLS.
    pub fn is_tls(&self) -> bool {
        self.scheme == Scheme::Https
    }

    /// The `Host` header value: the host (bracketed if IPv6) and the port
    /// unless it is the scheme's default.
    pub fn host_header(&self) -> String {
        let host = if self.host.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6()) {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == self.scheme.default_port() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// The request URI (the path) and `Host` header of a request to this
    /// target, or why this target cannot make one.
    pub(crate) fn request_parts(&self) -> Result<(http::Uri, http::HeaderValue), Error> {
        let bad = |reason: &str| Error::BadUrl {
            url: self.to_string(),
            reason: reason.into(),
        };
        let uri = self
            .path
            .parse()
            .map_err(|_| bad("the path is not valid in a request"))?;
        let host = http::HeaderValue::from_str(&self.host_header())
            .map_err(|_| bad("the host is not valid in a Host header"))?;
        Ok((uri, host))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}{}",
            self.scheme.name(),
            self.host_header(),
            self.path
        )
    }
}

impl FromStr for Target {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Target::parse(s)
    }
}

/// The server name to verify and send as SNI: `sni` if given, else the
/// target host (an IP address sends no SNI, as rustls does).
pub(crate) fn server_name(
    sni: Option<&str>,
    host: &str,
) -> Result<rustls::pki_types::ServerName<'static>, Error> {
    let name = sni.unwrap_or(host);
    rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|source| Error::ServerName {
        name: name.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_ports_and_paths() {
        let t = Target::parse("https://example.test:8443/a/b?c=1").unwrap();
        assert_eq!(
            t,
            Target {
                scheme: Scheme::Https,
                host: "example.test".into(),
                port: 8443,
                path: "/a/b?c=1".into()
            }
        );
        let t = Target::parse("HTTP://Example.Test").unwrap();
        assert_eq!((t.scheme, t.port, t.path.as_str()), (Scheme::Http, 80, "/"));
        assert_eq!(t.host, "example.test");
        let t = Target::parse("https://[::1]:4433/x").unwrap();
        assert_eq!(t.host, "::1");
        assert_eq!(t.host_header(), "[::1]:4433");
        assert_eq!(t.to_string(), "https://[::1]:4433/x");
        assert_eq!(
            Target::parse("https://127.0.0.1/").unwrap().host_header(),
            "127.0.0.1"
        );
    }

    #[test]
    fn bad_urls_say_what_is_expected() {
        for url in [
            "example.test/x",
            "ftp://example.test/",
            "https://",
            "https://u:p@example.test/",
            "https://example.test:0/",
            "https://example.test:99999/",
            "",
        ] {
            let err = Target::parse(url).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!(
                    "bad URL '{url}': expected https://host[:port]/path"
                )),
                "{url}: {err}"
            );
        }
    }
}
