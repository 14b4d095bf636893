//! The declared matrix of `tlslab experiment run --config FILE.toml`.
//!
//! ```toml
//! name = "reuse-small"          # the study's name in the document
//! title = "Throughput against reuse, ECDSA"
//! engine = "load"               # the engine each cell runs
//! repeats = 3                   # runs of every point, interleaved
//! cell = "2s"                   # measurement time per cell
//! warmup = "400ms"              # per cell, before the window (default cell/5, at most 0.5s)
//! pin = "split"                 # "split": server on the first CPU, client on the second; "none"
//! path = "/specweb96/class1_3"  # what every request GETs
//!
//! [factors]                     # each a level or a list of levels
//! reuse = [0, 0.5, 1]           # share of new connections resumed, 0–1
//! version = ["1.2", "1.3"]      # TLS version
//! key = ["ecdsa-p256", "rsa2048"]
//! group = ["x25519", "X25519MLKEM768"]
//! clients = [8]                 # closed-loop clients (open loop: client identities)
//! rate = [200, 400]             # open loop: arrivals/s (absent: closed loop)
//! requests_per_conn = [1]       # 1: a new connection per request; 0: keep-alive
//! ```
//!
//! The cells are every combination of the levels (the first factor varies
//! slowest), run in rounds: each repeat runs every point once before the
//! next repeat starts, so drift over the run spreads over all points.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tlslab_crypto::compress::CertCompression;
use tlslab_crypto::pki::KeyType;
use tlslab_crypto::provider::{self, Algorithms, Version};

use crate::pin::Placement;

/// What is wrong with a matrix file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MatrixError {
    /// The file could not be read.
    #[error("{path}: {source}; give the path of a TOML matrix file")]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// It is not TOML, or has a key that is not part of the format.
    #[error("{path}: {message}(docs/experiment.md shows the format)")]
    Syntax {
        /// The file.
        path: String,
        /// The parser's message, with the line.
        message: String,
    },
    /// A factor this engine does not know.
    #[error(
        "{path}: unknown factor '{factor}' in [factors]; the load engine's factors are {known}"
    )]
    UnknownFactor {
        /// The file.
        path: String,
        /// The factor.
        factor: String,
        /// The factors it knows.
        known: String,
    },
    /// A value out of range or of the wrong kind.
    #[error("{path}: {key}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// What is wrong and the fix.
        message: String,
    },
}

/// The engine of a declared matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// `tlslab load` against an embedded `tlslab serve`.
    Load,
}

/// Where the server and the client run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    /// Server on the first CPU this process may use, client on the second.
    Split,
    /// Not pinned.
    None,
}

/// The factors the load engine varies.
pub const FACTORS: [&str; 7] = [
    "reuse",
    "version",
    "key",
    "group",
    "clients",
    "rate",
    "requests_per_conn",
];

/// A validated matrix.
#[derive(Clone, Debug)]
pub struct Matrix {
    /// The study's name.
    pub name: String,
    /// Its title.
    pub title: String,
    /// The engine.
    pub engine: Engine,
    /// Runs of every point.
    pub repeats: u32,
    /// Measurement time per cell.
    pub cell: Duration,
    /// Warm-up per cell.
    pub warmup: Duration,
    /// Pinning.
    pub pin: Pin,
    /// The path requested.
    pub path: String,
    /// Factors in declared order, each with its levels.
    pub factors: Vec<(String, Vec<Level>)>,
}

/// One level of a factor, parsed once from the matrix file.
#[derive(Clone, Debug, PartialEq)]
pub enum Level {
    /// `reuse`: the share of new connections resumed, 0–1.
    Reuse(f64),
    /// `version`: the one TLS version the client offers.
    Version(Version),
    /// `key`: the certificate's key type.
    Key(KeyType),
    /// `group`: the key-exchange group the client offers.
    Group(String),
    /// `clients`.
    Clients(usize),
    /// `rate`: open-loop arrivals per second.
    Rate(f64),
    /// `requests_per_conn` (0: keep-alive).
    RequestsPerConn(u32),
}

impl Level {
    /// The level as the document records it (`0.5`, `1.3`, `rsa2048`).
    pub fn text(&self) -> String {
        match self {
            Level::Reuse(x) | Level::Rate(x) => tlslab_report::study::fmt_level(*x),
            Level::Version(v) => v.short().to_string(),
            Level::Key(k) => k.name().to_string(),
            Level::Group(g) => g.clone(),
            Level::Clients(n) => n.to_string(),
            Level::RequestsPerConn(k) => k.to_string(),
        }
    }
}

/// What one cell of the load engine runs.
#[derive(Clone, Debug, PartialEq)]
pub struct CellSpec {
    /// The matrix point's name (cell ids are `<point>-r<repeat>`).
    pub point: String,
    /// Factor → level, as recorded in the document.
    pub factors: BTreeMap<String, String>,
    /// Certificate key type.
    pub key: KeyType,
    /// TLS versions the client offers.
    pub versions: Vec<Version>,
    /// The key-exchange group the client offers (`None`: rustls' defaults).
    pub group: Option<String>,
    /// Share of new connections resumed.
    pub reuse: f64,
    /// Closed-loop clients (open loop: the pool of client identities).
    pub clients: usize,
    /// Open loop: arrivals per second.
    pub rate: Option<f64>,
    /// Requests per connection.
    pub requests_per_conn: u32,
    /// Measurement window.
    pub cell: Duration,
    /// Warm-up before it.
    pub warmup: Duration,
    /// The path requested.
    pub path: String,
    /// An intermediate CA of this key type between the root and the leaf
    /// (`tlslab certs --intermediate-key`); `None`: the leaf and the CA.
    pub intermediate: Option<KeyType>,
    /// RFC 8879 certificate compression, on the server and offered by the
    /// client alike.
    pub cert_compression: Vec<CertCompression>,
    /// The maximum segment size the client announces (`load --mss`).
    pub mss: Option<u32>,
    /// Run through a path of this round-trip time
    /// (`rtt_path::RttPath`).
    pub rtt: Option<Duration>,
    /// Which kind of path (with `rtt`).
    pub wan: super::path_kind::PathKind,
    /// Measured requests (`load -n`) instead of the cell's duration.
    pub requests: Option<u64>,
    /// TCP+TLS (the default), or HTTP/3 over QUIC (`load --h3 -m 1`
    /// against the server's HTTP/3 listener; no `mss`).
    pub transport: crate::rig::Transport,
}

impl CellSpec {
    /// A closed-loop cell with the defaults: ECDSA P-256, TLS 1.2 and 1.3,
    /// rustls' groups, no reuse, 8 clients, a new connection per request.
    pub fn new(point: impl Into<String>, cell: Duration) -> CellSpec {
        CellSpec {
            point: point.into(),
            factors: BTreeMap::new(),
            key: KeyType::EcdsaP256,
            versions: vec![Version::Tls12, Version::Tls13],
            group: None,
            reuse: 0.0,
            clients: 8,
            rate: None,
            requests_per_conn: 1,
            cell,
            warmup: default_warmup(cell),
            path: crate::lab::PATH.into(),
            intermediate: None,
            cert_compression: Vec::new(),
            mss: None,
            rtt: None,
            wan: super::path_kind::PathKind::Relay,
            requests: None,
            transport: crate::rig::Transport::Tcp,
        }
    }

    /// The server this cell needs: the chain and the compression (cells
    /// that share it share one embedded server).
    pub fn server_key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.key.name(),
            self.intermediate.map_or("-", |k| k.name()),
            crate::join(self.cert_compression.iter().map(|c| c.name()), ",")
        )
    }

    /// Why this cell cannot run, if it cannot (a TLS 1.3-only group offered
    /// with TLS 1.2 alone).
    pub fn excluded(&self) -> Option<String> {
        let g = self.group.as_deref()?;
        (self.versions == [Version::Tls12] && g.to_ascii_uppercase().contains("MLKEM")).then(|| {
            format!(
                "{}: not run: {g} is a TLS 1.3 key exchange (hybrid ML-KEM is not defined for \
                 TLS 1.2)",
                self.point
            )
        })
    }

    /// Sets `factor` to `level`.
    fn set(&mut self, factor: &str, level: &Level) {
        match level {
            Level::Reuse(r) => self.reuse = *r,
            Level::Version(v) => self.versions = vec![*v],
            Level::Key(k) => self.key = *k,
            Level::Group(g) => self.group = Some(g.clone()),
            Level::Clients(n) => self.clients = *n,
            Level::Rate(r) => self.rate = Some(*r),
            Level::RequestsPerConn(k) => self.requests_per_conn = *k,
        }
        self.factors.insert(factor.to_string(), level.text());
    }
}

/// The default warm-up of a cell: a fifth of it, at most 0.5 s.
pub fn default_warmup(cell: Duration) -> Duration {
    (cell / 5).min(Duration::from_millis(500))
}

/// The short spelling of a factor in a point's name.
fn short(factor: &str) -> &'static str {
    match factor {
        "reuse" => "reuse",
        "version" => "tls",
        "clients" => "c",
        "rate" => "rate",
        "requests_per_conn" => "k",
        _ => "",
    }
}

/// A point's name from its factors: `reuse0.5-tls1.3-rsa2048-c8`.
pub fn point_name(pairs: &[(&str, &str)]) -> String {
    let raw: Vec<String> = pairs
        .iter()
        .map(|(f, l)| format!("{}{}", short(f), l.to_ascii_lowercase()))
        .collect();
    let s = raw.join("-");
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    title: Option<String>,
    engine: String,
    repeats: Option<i64>,
    cell: Option<toml::Value>,
    warmup: Option<toml::Value>,
    pin: Option<String>,
    path: Option<String>,
    #[serde(default)]
    factors: toml::Table,
}

/// Parses `10s`, `500ms`, `2m` or a number of seconds.
pub fn parse_duration(v: &toml::Value) -> Result<Duration, String> {
    let secs = match v {
        toml::Value::Integer(i) => *i as f64,
        toml::Value::Float(f) => *f,
        toml::Value::String(s) => {
            let s = s.trim();
            let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
                (n, 1e-3)
            } else if let Some(n) = s.strip_suffix('s') {
                (n, 1.0)
            } else if let Some(n) = s.strip_suffix('m') {
                (n, 60.0)
            } else {
                (s, 1.0)
            };
            num.trim().parse::<f64>().map_err(|_| {
                format!("'{s}' is not a duration; write it like \"2s\" or \"500ms\"")
            })? * mult
        }
        other => return Err(format!("{other} is not a duration; write it like \"2s\"")),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 3600.0 {
        return Err(format!(
            "{secs} s is out of range; a cell lasts more than 0 and at most 3600 s"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn level_text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.trim().to_string()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(tlslab_report::study::fmt_level(*f)),
        _ => None,
    }
}

/// Checks one level of a factor and parses it.
fn check_level(factor: &str, v: &toml::Value) -> Result<Level, String> {
    let text = level_text(v).ok_or_else(|| format!("{v} is not a number or a string"))?;
    let num = || -> Result<f64, String> {
        match v {
            toml::Value::Integer(i) => Ok(*i as f64),
            toml::Value::Float(f) => Ok(*f),
            _ => text
                .parse::<f64>()
                .map_err(|_| format!("'{text}' is not a number")),
        }
    };
    match factor {
        "reuse" => {
            let r = num()?;
            if !(0.0..=1.0).contains(&r) {
                return Err(format!(
                    "{r} is not a share between 0 and 1 (write 50 % as 0.5)"
                ));
            }
            Ok(Level::Reuse(r))
        }
        "version" => {
            let v = provider::parse_versions(&text).map_err(|e| e.to_string())?;
            if v.len() != 1 {
                return Err("one version per level: \"1.2\" or \"1.3\"".into());
            }
            Ok(Level::Version(v[0]))
        }
        "key" => text
            .parse::<KeyType>()
            .map(Level::Key)
            .map_err(|e| e.to_string()),
        "group" => {
            provider::build(
                &[Version::Tls13],
                &Algorithms {
                    suites: None,
                    groups: Some(vec![text.clone()]),
                    ..Algorithms::default()
                },
            )
            .map_err(|e| e.to_string())?;
            Ok(Level::Group(text))
        }
        "clients" => {
            let n = num()?;
            if n < 1.0 || n.fract() != 0.0 || n > 10_000.0 {
                return Err(format!(
                    "{n} is not a whole number of clients from 1 to 10000"
                ));
            }
            Ok(Level::Clients(n as usize))
        }
        "rate" => {
            let r = num()?;
            if !(r.is_finite() && r > 0.0 && r <= 1e6) {
                return Err(format!("{r} is not an arrival rate above 0 (per second)"));
            }
            Ok(Level::Rate(r))
        }
        "requests_per_conn" => {
            let k = num()?;
            if k < 0.0 || k.fract() != 0.0 || k > 1e6 {
                return Err(format!(
                    "{k} is not a whole number of requests per connection (0: keep-alive)"
                ));
            }
            Ok(Level::RequestsPerConn(k as u32))
        }
        _ => Err("unknown factor".into()),
    }
}

impl Matrix {
    /// Reads and validates a matrix file.
    pub fn from_file(path: &Path) -> Result<Matrix, MatrixError> {
        use tlslab_workload::input::{MAX_CONFIG_FILE, read_capped_to_string};
        let text =
            read_capped_to_string(path, MAX_CONFIG_FILE).map_err(|source| MatrixError::Read {
                path: path.display().to_string(),
                source,
            })?;
        Matrix::parse(&text, &path.display().to_string())
    }

    /// Validates the TOML text of a matrix; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Matrix, MatrixError> {
        let raw: Raw = toml::from_str(text).map_err(|e| MatrixError::Syntax {
            path: path.into(),
            message: e.to_string(),
        })?;
        let invalid = |key: &str, message: String| MatrixError::Invalid {
            path: path.into(),
            key: key.into(),
            message,
        };
        let name = raw.name.trim().to_string();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return Err(invalid(
                "name",
                format!("'{name}' must be non-empty letters, digits, '-', '_' or '.'"),
            ));
        }
        let engine = match raw.engine.as_str() {
            "load" => Engine::Load,
            other => {
                return Err(invalid(
                    "engine",
                    format!(
                        "'{other}' is not an engine a matrix can drive; the choice is \"load\" \
                         (the other engines run as built-in studies: `tlslab experiment list`)"
                    ),
                ));
            }
        };
        let repeats = raw.repeats.unwrap_or(1);
        if !(1..=1000).contains(&repeats) {
            return Err(invalid(
                "repeats",
                format!("{repeats} is not from 1 to 1000"),
            ));
        }
        let cell = match &raw.cell {
            Some(v) => parse_duration(v).map_err(|m| invalid("cell", m))?,
            None => Duration::from_secs(2),
        };
        let warmup = match &raw.warmup {
            Some(v) => parse_duration(v).map_err(|m| invalid("warmup", m))?,
            None => default_warmup(cell),
        };
        let pin = match raw.pin.as_deref().unwrap_or("split") {
            "split" => Pin::Split,
            "none" => Pin::None,
            other => {
                return Err(invalid(
                    "pin",
                    format!("'{other}' is not \"split\" or \"none\""),
                ));
            }
        };
        let path_req = raw.path.unwrap_or_else(|| crate::lab::PATH.into());
        if !path_req.starts_with('/') {
            return Err(invalid("path", format!("'{path_req}' must start with '/'")));
        }
        let mut factors = Vec::new();
        for (f, v) in &raw.factors {
            if !FACTORS.contains(&f.as_str()) {
                return Err(MatrixError::UnknownFactor {
                    path: path.into(),
                    factor: f.clone(),
                    known: FACTORS.join(", "),
                });
            }
            let values: Vec<&toml::Value> = match v {
                toml::Value::Array(a) => a.iter().collect(),
                one => vec![one],
            };
            if values.is_empty() {
                return Err(invalid(
                    &format!("factors.{f}"),
                    "has no level; give at least one".into(),
                ));
            }
            let mut levels = Vec::new();
            for v in values {
                let l = check_level(f, v).map_err(|m| invalid(&format!("factors.{f}"), m))?;
                if levels.contains(&l) {
                    return Err(invalid(
                        &format!("factors.{f}"),
                        format!("level {} is given twice", l.text()),
                    ));
                }
                levels.push(l);
            }
            factors.push((f.clone(), levels));
        }
        // toml::Table keeps keys sorted; declared order is the format's
        // order (FACTORS), which is also how point names read.
        factors.sort_by_key(|(f, _)| FACTORS.iter().position(|x| *x == f.as_str()));
        let m = Matrix {
            name,
            title: raw.title.unwrap_or_default(),
            engine,
            repeats: repeats as u32,
            cell,
            warmup,
            pin,
            path: path_req,
            factors,
        };
        if m.points().iter().all(|p| p.excluded().is_some()) {
            return Err(invalid(
                "factors",
                "no cell can run (every combination is excluded)".into(),
            ));
        }
        if m.cell_count() > 100_000 {
            return Err(invalid(
                "factors",
                format!("{} cells is more than 100000", m.cell_count()),
            ));
        }
        Ok(m)
    }

    /// Every point of the matrix, the first factor varying slowest.
    pub fn points(&self) -> Vec<CellSpec> {
        let mut out = vec![(CellSpec::new("", self.cell), Vec::<(String, String)>::new())];
        for (f, levels) in &self.factors {
            let mut next = Vec::new();
            for (spec, pairs) in &out {
                for l in levels {
                    let mut s = spec.clone();
                    s.set(f, l);
                    let mut p = pairs.clone();
                    p.push((f.clone(), l.text()));
                    next.push((s, p));
                }
            }
            out = next;
        }
        out.into_iter()
            .map(|(mut s, pairs)| {
                let borrowed: Vec<(&str, &str)> = pairs
                    .iter()
                    .map(|(a, b)| (a.as_str(), b.as_str()))
                    .collect();
                s.point = if borrowed.is_empty() {
                    "cell".into()
                } else {
                    point_name(&borrowed)
                };
                s.warmup = self.warmup;
                s.path.clone_from(&self.path);
                s
            })
            .collect()
    }

    /// Cells that will run: runnable points × repeats.
    pub fn cell_count(&self) -> usize {
        self.points()
            .iter()
            .filter(|p| p.excluded().is_none())
            .count()
            * self.repeats as usize
    }

    /// The CPUs of server and client.
    pub fn placement(&self) -> Placement {
        match self.pin {
            Pin::Split => Placement::split(),
            Pin::None => Placement::default(),
        }
    }

    /// The matrix as recorded in the document (and compared on `--resume`).
    pub fn to_json(&self) -> serde_json::Value {
        let factors: serde_json::Map<String, serde_json::Value> = self
            .factors
            .iter()
            .map(|(f, l)| {
                let l: Vec<String> = l.iter().map(Level::text).collect();
                (f.clone(), serde_json::json!(l))
            })
            .collect();
        serde_json::json!({
            "name": self.name,
            "title": self.title,
            "engine": match self.engine { Engine::Load => "load" },
            "repeats": self.repeats,
            "cell_s": self.cell.as_secs_f64(),
            "warmup_s": self.warmup.as_secs_f64(),
            "pin": match self.pin { Pin::Split => "split", Pin::None => "none" },
            "path": self.path,
            "factors": factors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "reuse-small"
title = "t"
engine = "load"
repeats = 2
cell = "500ms"
pin = "none"
[factors]
version = ["1.2", "TLSv1.3"]
reuse = [0, 0.5, 1]
key = "rsa2048"
group = ["x25519", "X25519MLKEM768"]
clients = 4
"#;

    #[test]
    fn a_good_matrix_parses_into_points_and_cells() {
        let m = Matrix::parse(GOOD, "m.toml").unwrap();
        assert_eq!(m.name, "reuse-small");
        assert_eq!(m.repeats, 2);
        assert_eq!(m.cell, Duration::from_millis(500));
        assert_eq!(m.warmup, Duration::from_millis(100));
        assert_eq!(m.pin, Pin::None);
        // Factors in the format's order, whatever order the file used.
        let names: Vec<&str> = m.factors.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(names, ["reuse", "version", "key", "group", "clients"]);
        // Each level parsed once, typed.
        assert_eq!(m.factors[0].1[1], Level::Reuse(0.5));
        assert_eq!(m.factors[1].1[0], Level::Version(Version::Tls12));
        assert_eq!(m.factors[2].1[0], Level::Key(KeyType::Rsa2048));
        assert_eq!(m.factors[4].1, [Level::Clients(4)]);
        let points = m.points();
        assert_eq!(points.len(), 3 * 2 * 2);
        assert_eq!(points[0].point, "reuse0-tls1.2-rsa2048-x25519-c4");
        assert_eq!(points[0].versions, vec![Version::Tls12]);
        assert_eq!(points[0].key, KeyType::Rsa2048);
        assert_eq!(points[0].clients, 4);
        assert_eq!(points[0].factors["version"], "1.2");
        // TLS 1.2 with the hybrid group is excluded, with a reason.
        let excluded: Vec<_> = points.iter().filter_map(|p| p.excluded()).collect();
        assert_eq!(excluded.len(), 3);
        crate::assert_has(&excluded[0], &["TLS 1.3 key exchange"]);
        assert_eq!(m.cell_count(), 9 * 2);
        assert_eq!(
            m.to_json()["factors"]["reuse"],
            serde_json::json!(["0", "0.5", "1"])
        );
    }

    #[test]
    fn defaults_fill_what_is_not_given() {
        let m = Matrix::parse("name = \"x\"\nengine = \"load\"\n", "m.toml").unwrap();
        assert_eq!(m.repeats, 1);
        assert_eq!(m.cell, Duration::from_secs(2));
        assert_eq!(m.pin, Pin::Split);
        let p = m.points();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].point, "cell");
        assert_eq!(p[0].key, KeyType::EcdsaP256);
        assert_eq!(p[0].clients, 8);
    }

    fn err(text: &str) -> String {
        Matrix::parse(text, "bad.toml").unwrap_err().to_string()
    }

    #[test]
    fn bad_matrices_name_the_problem() {
        let head = "name = \"x\"\nengine = \"load\"\n";
        let e = err(&format!("{head}[factors]\nciphers = [1]\n"));
        crate::assert_has(&e, &["unknown factor 'ciphers'", "reuse, version"]);
        let e = err("name = \"x\"\nengine = \"cluster\"\n");
        assert!(e.contains("engine") && e.contains("\"load\""), "{e}");
        let e = err(&format!("{head}[factors]\nreuse = [50]\n"));
        assert!(e.contains("factors.reuse") && e.contains("0.5"), "{e}");
        let e = err(&format!("{head}cell = \"fast\"\n"));
        assert!(e.contains("cell") && e.contains("500ms"), "{e}");
        let e = err(&format!("{head}repeats = 0\n"));
        assert!(e.contains("repeats"), "{e}");
        let e = err(&format!("{head}[factors]\nkey = [\"dsa\"]\n"));
        assert!(e.contains("factors.key"), "{e}");
        let e = err(&format!("{head}[factors]\ngroup = [\"ffdhe9\"]\n"));
        assert!(e.contains("factors.group"), "{e}");
        let e = err(&format!("{head}[factors]\nclients = [0]\n"));
        assert!(e.contains("factors.clients"), "{e}");
        let e = err(&format!("{head}[factors]\nreuse = []\n"));
        assert!(e.contains("no level"), "{e}");
        let e = err(&format!("{head}[factors]\nreuse = [0, 0]\n"));
        assert!(e.contains("twice"), "{e}");
        let e = err(&format!("{head}colour = \"red\"\n"));
        crate::assert_has(&e, &["colour", "docs/experiment.md"]);
        let e = err("engine = \"load\"\n");
        assert!(e.contains("name"), "{e}");
        let e = err("name = [\n");
        assert!(e.contains("bad.toml"), "{e}");
        let e = err(&format!(
            "{head}[factors]\nversion = \"1.2\"\ngroup = \"X25519MLKEM768\"\n"
        ));
        assert!(e.contains("no cell can run"), "{e}");
    }

    #[test]
    fn durations() {
        let d = |s: &str| parse_duration(&toml::Value::String(s.into()));
        assert_eq!(d("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(d("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(d("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(
            parse_duration(&toml::Value::Float(1.5)).unwrap(),
            Duration::from_millis(1500)
        );
        assert!(d("0s").is_err());
        assert!(d("2h").is_err());
    }
}
