//! Amazon-like purchase sessions (seed 001's e-commerce workload).
//!
//! Seed 001 logged two book purchases on Amazon's secure server, one as a
//! new customer and one as a returning customer, and replayed them so that:
//! a *page* is an HTML file plus its inline objects; each browser uses at
//! most four parallel connections; the next page starts only after the
//! whole current page has arrived; 22 % of purchase sessions are new
//! customers and 78 % returning; every purchase session does one full TLS
//! handshake (returning customers keep no TLS session between purchases),
//! about one full handshake per twelve requests; objects average ≈ 7 KB.
//!
//! The trace itself is not public, so the built-in [`Config::default`]
//! catalogue is *shaped like* it: seven checkout pages (sign-in, register,
//! address, shipping, payment, review, confirm) with 1–2 inline objects
//! each; new customers walk all seven, returning customers four (sign-in,
//! shipping, review, confirm). Mean object size over requests is ≈ 6.9 KiB
//! (≈ 7.1 kB) and a session averages ≈ 12.1 requests. The number of pages
//! in a session varies: after each page the customer views it again (a
//! form error, a changed address) with [`Config::revisit_probability`]
//! (default 0.05), so a flow of *k* pages yields *k* + NegBinomial(*k*, p)
//! pages. Everything can be set from TOML ([`Config::from_toml`]).
//!
//! # The engine contract
//!
//! A [`Browser`] yields [`Session`]s one after another. For each session
//! the engine must:
//!
//! 1. if [`Session::clear_tls_sessions`] is true, discard every TLS session
//!    (tickets, IDs) this browser holds before its first connection, so the
//!    first handshake of the session is a full one;
//! 2. for each [`Page`] in order: fetch `objects[0]` (the HTML) first, then
//!    the remaining objects (inline) over at most [`Config::max_connections`]
//!    connections in parallel; start nothing of the next page until every
//!    object of this one has arrived; then wait [`Page::think_after`];
//! 3. resume the browser's stored TLS session on every connection after
//!    the first one. Because the HTML comes alone first, its connection's
//!    handshake finishes before any other connection opens, so a session
//!    has exactly one full handshake whatever the connection reuse.
//!
//! Request paths are `/bytes/<N>` by default ([`PathStyle::Bytes`]), which
//! `tlslab serve` answers with N bytes; [`PathStyle::Files`] names files
//! that [`Generator::files`] lists for [`crate::fileset::write_sized`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rand::RngExt as _;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::think::ThinkTime;

/// How request paths are named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathStyle {
    /// `/bytes/<size>`, answered by `tlslab serve` without a file tree.
    #[default]
    Bytes,
    /// `/ecommerce/<page>/index.html` and `/ecommerce/<page>/obj<i>`, for a
    /// file tree written with [`Generator::files`].
    Files,
}

/// One page of the catalogue: an HTML file and its inline objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageSpec {
    /// The page's name, used in flows.
    pub name: String,
    /// Size of the HTML in bytes.
    pub html: u64,
    /// Sizes of the inline objects in bytes, in fetch order.
    #[serde(default)]
    pub objects: Vec<u64>,
}

/// The e-commerce workload; `Default` is the built-in catalogue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Share of purchase sessions by new customers, in percent (22).
    pub new_customer_percent: f64,
    /// Wait after each page (`exp:mean=7s`).
    pub think_time: ThinkTime,
    /// Parallel connections per browser (4).
    pub max_connections: usize,
    /// Chance, after each page, of viewing that page again (0.05); sets the
    /// spread of the session length. Must be below 1.
    pub revisit_probability: f64,
    /// If true, returning customers keep their TLS session from their
    /// previous purchase (a sensitivity knob; seed 001 assumes false).
    pub returning_keep_tls_session: bool,
    /// How request paths are named (`bytes`).
    pub paths: PathStyle,
    /// The page catalogue.
    pub pages: Vec<PageSpec>,
    /// Page names a new customer walks, in order.
    pub new_flow: Vec<String>,
    /// Page names a returning customer walks, in order.
    pub returning_flow: Vec<String>,
}

impl Default for Config {
    fn default() -> Config {
        let page = |name: &str, html: u64, objects: &[u64]| PageSpec {
            name: name.into(),
            html,
            objects: objects.to_vec(),
        };
        let flow = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
        Config {
            new_customer_percent: 22.0,
            think_time: ThinkTime::Exp {
                mean: Duration::from_secs(7),
            },
            max_connections: 4,
            revisit_probability: 0.05,
            returning_keep_tls_session: false,
            paths: PathStyle::Bytes,
            pages: vec![
                page("signin", 11_264, &[3_072, 1_024]),
                page("register", 14_336, &[2_048]),
                page("address", 13_312, &[1_536]),
                page("shipping", 12_288, &[1_536]),
                page("payment", 15_360, &[4_096, 1_024]),
                page("review", 17_408, &[6_144, 5_120]),
                page("confirm", 10_240, &[2_560]),
            ],
            new_flow: flow(&[
                "signin", "register", "address", "shipping", "payment", "review", "confirm",
            ]),
            returning_flow: flow(&["signin", "shipping", "review", "confirm"]),
        }
    }
}

impl Config {
    /// Parses a TOML description; fields left out keep their defaults.
    pub fn from_toml(text: &str) -> Result<Config, Error> {
        let c: Config = toml::from_str(text).map_err(|e| {
            Error::Invalid(format!(
                "e-commerce workload TOML: {e}; see Config::to_toml() of the default for the fields"
            ))
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Reads and parses a TOML file.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = crate::input::read_capped_to_string(path, crate::input::MAX_CONFIG_FILE)
            .map_err(|source| Error::Io {
                action: "read",
                path: path.to_path_buf(),
                source,
            })?;
        Config::from_toml(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
    }

    /// The configuration as TOML (a starting point for editing).
    pub fn to_toml(&self) -> String {
        // Plain structs, strings and numbers always serialise.
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks ranges and that every flow names existing pages.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Invalid(format!("e-commerce workload: {m}")));
        if !(0.0..=100.0).contains(&self.new_customer_percent) {
            return bad(format!(
                "new_customer_percent {} is outside 0–100; give a percentage such as 22",
                self.new_customer_percent
            ));
        }
        if !(0.0..1.0).contains(&self.revisit_probability) {
            return bad(format!(
                "revisit_probability {} is outside [0, 1); give e.g. 0.05",
                self.revisit_probability
            ));
        }
        if self.max_connections == 0 {
            return bad("max_connections is 0; a browser needs at least 1 (browsers use 4)".into());
        }
        let mut names = HashMap::new();
        for p in &self.pages {
            if names.insert(p.name.as_str(), ()).is_some() {
                return bad(format!(
                    "page '{}' is defined twice; give pages distinct names",
                    p.name
                ));
            }
            if p.html.max(p.objects.iter().copied().max().unwrap_or(0))
                > crate::fileset::MAX_FILE_BYTES
            {
                return bad(format!(
                    "page '{}' has an object above 1 GiB; use smaller sizes",
                    p.name
                ));
            }
        }
        for (which, flow) in [
            ("new_flow", &self.new_flow),
            ("returning_flow", &self.returning_flow),
        ] {
            if flow.is_empty() {
                return bad(format!("{which} is empty; list at least one page name"));
            }
            if let Some(n) = flow.iter().find(|n| !names.contains_key(n.as_str())) {
                return bad(format!(
                    "{which} names page '{n}', which [[pages]] does not define; define it or fix the name"
                ));
            }
        }
        Ok(())
    }
}

/// One HTTP request: a path and the size of its response body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Request {
    /// The URL path.
    pub path: String,
    /// The response body size in bytes.
    pub size: u64,
}

/// One page view: `objects[0]` is the HTML, the rest its inline objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Page {
    /// The catalogue page's name.
    pub name: String,
    /// The HTML first, then the inline objects.
    pub objects: Vec<Request>,
    /// How long to wait after the page has fully arrived.
    pub think_after: Duration,
}

/// One purchase session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Session {
    /// Whether this is a new customer (the longer flow).
    pub new_customer: bool,
    /// Whether the engine must discard the browser's TLS sessions first
    /// (true for every session unless
    /// [`Config::returning_keep_tls_session`] spares a returning customer).
    pub clear_tls_sessions: bool,
    /// The pages, in order.
    pub pages: Vec<Page>,
}

impl Session {
    /// All requests of the session, in order.
    pub fn requests(&self) -> impl Iterator<Item = &Request> {
        self.pages.iter().flat_map(|p| p.objects.iter())
    }
}

/// A validated configuration from which browsers are made.
#[derive(Clone, Debug)]
pub struct Generator {
    config: Arc<Config>,
    pages: Arc<HashMap<String, Vec<Request>>>,
}

impl Generator {
    /// Validates `config`.
    pub fn new(config: Config) -> Result<Generator, Error> {
        config.validate()?;
        let mut pages = HashMap::new();
        for p in &config.pages {
            let mut objects = Vec::with_capacity(1 + p.objects.len());
            for (i, &size) in std::iter::once(&p.html).chain(&p.objects).enumerate() {
                let path = match config.paths {
                    PathStyle::Bytes => format!("/bytes/{size}"),
                    PathStyle::Files if i == 0 => format!("/ecommerce/{}/index.html", p.name),
                    PathStyle::Files => format!("/ecommerce/{}/obj{i}", p.name),
                };
                objects.push(Request { path, size });
            }
            pages.insert(p.name.clone(), objects);
        }
        Ok(Generator {
            config: Arc::new(config),
            pages: Arc::new(pages),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Every distinct (path, size) the workload requests, sorted by path:
    /// the file tree to write for [`PathStyle::Files`].
    pub fn files(&self) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self
            .pages
            .values()
            .flatten()
            .map(|r| (r.path.clone(), r.size))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Browser number `id` of a run seeded with `seed`: its sessions depend
    /// only on (`seed`, `id`), not on other browsers.
    pub fn browser(&self, seed: u64, id: u64) -> Browser {
        Browser {
            generator: self.clone(),
            rng: crate::rng(seed, id.wrapping_add(1 << 32)),
        }
    }
}

/// One simulated customer's browser: an endless, seeded series of
/// purchase sessions.
#[derive(Clone, Debug)]
pub struct Browser {
    generator: Generator,
    rng: crate::Rng,
}

impl Browser {
    /// The next purchase session.
    pub fn next_session(&mut self) -> Session {
        let c = &self.generator.config;
        let new_customer = self.rng.random_bool(c.new_customer_percent / 100.0);
        let flow = if new_customer {
            &c.new_flow
        } else {
            &c.returning_flow
        };
        let mut pages = Vec::new();
        for name in flow {
            // Validated: every flow name is a page.
            let objects = self.generator.pages.get(name).cloned().unwrap_or_default();
            loop {
                pages.push(Page {
                    name: name.clone(),
                    objects: objects.clone(),
                    think_after: c.think_time.sample(&mut self.rng),
                });
                if !self.rng.random_bool(c.revisit_probability) {
                    break;
                }
            }
        }
        Session {
            new_customer,
            clear_tls_sessions: new_customer || !c.returning_keep_tls_session,
            pages,
        }
    }
}

impl Iterator for Browser {
    type Item = Session;

    fn next(&mut self) -> Option<Session> {
        Some(self.next_session())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn default_round_trips_through_toml_and_partial_toml_keeps_defaults() {
        let d = Config::default();
        assert_eq!(Config::from_toml(&d.to_toml()).unwrap(), d);
        let c =
            Config::from_toml("new_customer_percent = 50\nthink_time = \"const:1s\"\n").unwrap();
        assert_eq!(c.new_customer_percent, 50.0);
        assert_eq!(c.think_time, ThinkTime::Const(Duration::from_secs(1)));
        assert_eq!(c.pages, d.pages);
    }

    #[test]
    fn bad_toml_is_refused_with_the_reason() {
        for (text, needle) in [
            ("new_customer_percent = 120", "0–100"),
            ("max_connections = 0", "max_connections"),
            ("revisit_probability = 1.0", "revisit_probability"),
            ("think_time = \"exp:7s\"", "think time"),
            ("bogus = 1", "bogus"),
            ("new_flow = [\"nowhere\"]", "nowhere"),
        ] {
            let e = Config::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn loads_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.toml");
        std::fs::write(&p, "paths = \"files\"\nnew_flow = [\"a\", \"b\"]\nreturning_flow = [\"b\"]\n\
            [[pages]]\nname = \"a\"\nhtml = 10\nobjects = [1, 2]\n[[pages]]\nname = \"b\"\nhtml = 20\n").unwrap();
        let g = Generator::new(Config::load(&p).unwrap()).unwrap();
        assert_eq!(
            g.files(),
            vec![
                ("/ecommerce/a/index.html".into(), 10),
                ("/ecommerce/a/obj1".into(), 1),
                ("/ecommerce/a/obj2".into(), 2),
                ("/ecommerce/b/index.html".into(), 20),
            ]
        );
        assert!(Config::load(&dir.path().join("missing.toml")).is_err());
    }

    #[test]
    fn pages_start_with_html_and_paths_are_bytes() {
        let g = Generator::new(Config::default()).unwrap();
        let s = g.browser(1, 0).next_session();
        assert_eq!(s.pages[0].name, "signin");
        assert_eq!(
            s.pages[0].objects[0],
            Request {
                path: "/bytes/11264".into(),
                size: 11_264
            }
        );
        assert!(s.requests().all(|r| r.path == format!("/bytes/{}", r.size)));
        assert!(s.clear_tls_sessions);
    }

    #[test]
    fn keep_knob_spares_only_returning_customers() {
        let c = Config {
            returning_keep_tls_session: true,
            ..Config::default()
        };
        let g = Generator::new(c).unwrap();
        let mut b = g.browser(5, 5);
        for _ in 0..200 {
            let s = b.next_session();
            assert_eq!(s.clear_tls_sessions, s.new_customer);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(6))]

        /// Over 20k sessions: new customers are 22 % ± 6 standard errors,
        /// requests average ≈ 7 KB (6.5–7.5 KiB), sessions ≈ 12 requests
        /// (seed 001's one full handshake per ~12 requests), and the mean
        /// number of pages matches the revisit model: k / (1 − p).
        #[test]
        fn default_workload_matches_seed_001(seed in any::<u64>(), id in any::<u64>()) {
            let g = Generator::new(Config::default()).unwrap();
            let mut b = g.browser(seed, id);
            let n = 20_000u32;
            let (mut new, mut reqs, mut bytes, mut pages, mut want_pages) = (0u32, 0u64, 0u64, 0u64, 0.0f64);
            for _ in 0..n {
                let s = b.next_session();
                new += u32::from(s.new_customer);
                let k = if s.new_customer { 7.0 } else { 4.0 };
                want_pages += k / 0.95;
                pages += s.pages.len() as u64;
                for r in s.requests() {
                    reqs += 1;
                    bytes += r.size;
                }
            }
            let share = f64::from(new) / f64::from(n);
            let se = (0.22f64 * 0.78 / f64::from(n)).sqrt();
            prop_assert!((share - 0.22).abs() < 6.0 * se, "new share {}", share);
            let mean_kib = bytes as f64 / reqs as f64 / 1024.0;
            prop_assert!((6.5..7.5).contains(&mean_kib), "mean object {} KiB", mean_kib);
            let per_session = reqs as f64 / f64::from(n);
            prop_assert!((11.0..13.0).contains(&per_session), "{} requests per session", per_session);
            prop_assert!((pages as f64 / want_pages - 1.0).abs() < 0.02, "{} pages vs {}", pages, want_pages);
        }

        #[test]
        fn same_seed_same_sessions(seed in any::<u64>(), id in 0u64..1000) {
            let g = Generator::new(Config::default()).unwrap();
            let a: Vec<Session> = g.browser(seed, id).take(20).collect();
            let b: Vec<Session> = g.browser(seed, id).take(20).collect();
            prop_assert_eq!(&a, &b);
            let c: Vec<Session> = g.browser(seed, id + 1).take(20).collect();
            prop_assert_ne!(a, c);
        }
    }
}
