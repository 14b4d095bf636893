//! The replay plan (one browser per IP) and the window-bounded scheduler.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::LogEntry;
use super::parse::Client;
use crate::Error;

/// How request paths are formed.
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PathMode {
    /// `/bytes/<N>` with N the bytes the log recorded: `tlslab serve`
    /// answers exactly that many bytes.
    #[default]
    Bytes,
    /// The log's own path (query included), for a server holding the tree
    /// from [`ReplayPlan::file_tree`].
    #[cfg_attr(
        feature = "clap",
        value(help = "The log's own paths, for a server holding the files")
    )]
    Original,
}

/// One request to replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Req {
    /// Position in the (filtered) log: the trace index LP and LS refer to.
    pub id: usize,
    /// The browser (one per client identity), numbered by first appearance.
    pub browser: usize,
    /// The client it came from: an IP address or a host name.
    pub client: Client,
    /// The logged method.
    pub method: String,
    /// The path to request (see [`PathMode`]).
    pub path: String,
    /// The body bytes the log recorded.
    pub size: u64,
    /// The logged status.
    pub status: u16,
    /// The log line it came from.
    pub line: u64,
    /// True for the IP's first request: the engine must do a full TLS
    /// handshake (the browser holds no session yet). Later requests resume
    /// the browser's session.
    pub full_handshake: bool,
    /// The time since the log's earliest timestamp (unscaled).
    pub log_offset: Duration,
}

/// What a plan will replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Requests.
    pub requests: u64,
    /// Browsers = distinct client IPs = TLS sessions (full handshakes).
    pub sessions: u64,
    /// Requests that resume: `requests − sessions`.
    pub resumed: u64,
    /// The resumption ratio the trace implies: `resumed / requests`
    /// (0 for an empty plan).
    pub implied_resumption_ratio: f64,
    /// Body bytes the log recorded in all.
    pub bytes: u64,
    /// From the earliest to the latest timestamp.
    pub log_span: Duration,
}

/// A log turned into per-browser request sequences.
#[derive(Clone, Debug)]
pub struct ReplayPlan {
    reqs: Vec<Req>,
    /// The next request of the same IP, if any.
    next_same_ip: Vec<Option<usize>>,
    browsers: usize,
    span: Duration,
}

impl ReplayPlan {
    /// Builds the plan from parsed (and filtered) entries, in their order.
    pub fn new(entries: &[LogEntry], mode: PathMode) -> ReplayPlan {
        let t0 = entries.iter().map(|e| e.time).min().unwrap_or(0);
        let t1 = entries.iter().map(|e| e.time).max().unwrap_or(0);
        let secs = |t: i64| Duration::from_secs(u64::try_from(t.saturating_sub(t0)).unwrap_or(0));
        let mut browser_of: HashMap<&Client, (usize, usize)> = HashMap::new(); // client -> (browser, last id)
        let mut reqs = Vec::with_capacity(entries.len());
        let mut next_same_ip = vec![None; entries.len()];
        for (id, e) in entries.iter().enumerate() {
            let n = browser_of.len();
            let full_handshake;
            let browser;
            match browser_of.get_mut(&e.client) {
                Some((b, last)) => {
                    next_same_ip[*last] = Some(id);
                    *last = id;
                    browser = *b;
                    full_handshake = false;
                }
                None => {
                    browser_of.insert(&e.client, (n, id));
                    browser = n;
                    full_handshake = true;
                }
            }
            reqs.push(Req {
                id,
                browser,
                client: e.client.clone(),
                method: e.method.clone(),
                path: match mode {
                    PathMode::Bytes => format!("/bytes/{}", e.bytes),
                    PathMode::Original => e.path.clone(),
                },
                size: e.bytes,
                status: e.status,
                line: e.line,
                full_handshake,
                log_offset: secs(e.time),
            });
        }
        ReplayPlan {
            reqs,
            next_same_ip,
            browsers: browser_of.len(),
            span: secs(t1),
        }
    }

    /// All requests in log order.
    pub fn requests(&self) -> &[Req] {
        &self.reqs
    }

    /// The number of browsers (distinct IPs).
    pub fn browsers(&self) -> usize {
        self.browsers
    }

    /// Counts and the implied resumption ratio.
    pub fn summary(&self) -> Summary {
        let requests = self.reqs.len() as u64;
        let sessions = self.browsers as u64;
        let resumed = requests - sessions;
        Summary {
            requests,
            sessions,
            resumed,
            implied_resumption_ratio: if requests == 0 {
                0.0
            } else {
                resumed as f64 / requests as f64
            },
            bytes: self.reqs.iter().map(|r| r.size).sum(),
            log_span: self.span,
        }
    }

    /// The files a server needs to answer the log's original paths with
    /// the recorded sizes: each distinct file path (query dropped) with the
    /// largest size logged for it, sorted; and the paths that cannot become
    /// files (see [`crate::fileset::relative_path`]). Requests logged with
    /// fewer bytes (304s, aborted transfers) get the whole file, so prefer
    /// [`PathMode::Bytes`] where exact sizes matter.
    pub fn file_tree(&self) -> (Vec<(String, u64)>, Vec<String>) {
        let mut files: HashMap<String, u64> = HashMap::new();
        let mut bad = BTreeSet::new();
        for r in &self.reqs {
            let url = r.path.split(['?', '#']).next().unwrap_or_default();
            if crate::fileset::relative_path(url).is_err() {
                bad.insert(r.path.clone());
                continue;
            }
            let s = files.entry(url.to_string()).or_default();
            *s = (*s).max(r.size);
        }
        let mut v: Vec<_> = files.into_iter().collect();
        v.sort();
        (v, bad.into_iter().collect())
    }
}

/// When requests may go out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pacing {
    /// As fast as the window and per-IP order allow.
    AsFastAsPossible,
    /// Not before `log_offset / speed` from the start of the replay
    /// (`speed` 2 replays twice as fast as logged).
    Timed {
        /// The speed-up factor (> 0).
        speed: f64,
    },
}

/// Hands out a plan's requests under seed 001's two constraints: per-IP
/// order (an IP's next request only after its previous one completed) and
/// the window bound LP − LS ≤ `window`, where LP is the index of the last
/// request issued and LS the largest index such that every request up to
/// it has completed (−1 before any has). Pure logic: the engine calls
/// [`issue`](Scheduler::issue) / [`issue_at`](Scheduler::issue_at) when
/// it has a free client and [`complete`](Scheduler::complete) when a
/// response has fully arrived.
#[derive(Clone, Debug)]
pub struct Scheduler {
    plan: Arc<ReplayPlan>,
    window: usize,
    pacing: Pacing,
    issued: Vec<bool>,
    done: Vec<bool>,
    /// Every request with index < frontier has completed (LS = frontier − 1).
    frontier: usize,
    /// Requests whose IP predecessor has completed and that are not issued.
    ready: BTreeSet<usize>,
    last_issued: Option<usize>,
    issued_count: usize,
    completed: usize,
}

impl Scheduler {
    /// A scheduler over `plan`. `window` must be at least 1.
    pub fn new(plan: Arc<ReplayPlan>, window: usize, pacing: Pacing) -> Result<Scheduler, Error> {
        if window == 0 {
            return Err(Error::Invalid(
                "replay window 0 would let no request out; give --window 1 or more (seed 001 used 10000)".into(),
            ));
        }
        if let Pacing::Timed { speed } = pacing
            && !(speed.is_finite() && speed > 0.0)
        {
            return Err(Error::Invalid(format!(
                "replay speed {speed} is not a positive number; give e.g. --speed 1 (as logged) or 10"
            )));
        }
        let n = plan.reqs.len();
        let ready = plan
            .reqs
            .iter()
            .filter(|r| r.full_handshake)
            .map(|r| r.id)
            .collect();
        Ok(Scheduler {
            plan,
            window,
            pacing,
            issued: vec![false; n],
            done: vec![false; n],
            frontier: 0,
            ready,
            last_issued: None,
            issued_count: 0,
            completed: 0,
        })
    }

    /// When `req` is due, measured from the start of the replay.
    pub fn due(&self, req: &Req) -> Duration {
        self_due(self.pacing, req)
    }

    /// The next request that may go out now, ignoring pacing; `None` if
    /// none may until something completes (or all were issued).
    pub fn issue(&mut self) -> Option<Req> {
        self.take(|_| true)
    }

    /// The next request that may go out at `now` (time since the replay
    /// started): like [`issue`](Scheduler::issue) but only requests already
    /// due. With [`Pacing::AsFastAsPossible`] every request is due.
    pub fn issue_at(&mut self, now: Duration) -> Option<Req> {
        let plan = Arc::clone(&self.plan);
        let pacing = self.pacing;
        self.take(|id| match pacing {
            Pacing::AsFastAsPossible => true,
            Pacing::Timed { .. } => self_due(pacing, &plan.reqs[id]) <= now,
        })
    }

    /// The earliest time at which a request that the window and per-IP
    /// order allow becomes due; `None` if none is allowed until something
    /// completes. Lets a timed engine sleep until then.
    pub fn next_due(&self) -> Option<Duration> {
        self.allowed()
            .map(|id| self_due(self.pacing, &self.plan.reqs[id]))
            .min()
    }

    fn allowed(&self) -> impl Iterator<Item = usize> + '_ {
        let limit = self.frontier.saturating_add(self.window);
        self.ready.range(..limit).copied()
    }

    fn take(&mut self, due: impl Fn(usize) -> bool) -> Option<Req> {
        let id = self.allowed().find(|&id| due(id))?;
        self.ready.remove(&id);
        self.issued[id] = true;
        self.issued_count += 1;
        self.last_issued = Some(self.last_issued.map_or(id, |l| l.max(id)));
        Some(self.plan.reqs[id].clone())
    }

    /// Records that request `id` has been served. Fails if `id` was never
    /// issued or already completed (an engine bug).
    pub fn complete(&mut self, id: usize) -> Result<(), Error> {
        if !self.issued.get(id).copied().unwrap_or(false) || self.done[id] {
            return Err(Error::Invalid(format!(
                "replay request {id} completed but it is not in flight; complete each issued request exactly once"
            )));
        }
        self.done[id] = true;
        self.completed += 1;
        while self.frontier < self.done.len() && self.done[self.frontier] {
            self.frontier += 1;
        }
        if let Some(next) = self.plan.next_same_ip[id] {
            self.ready.insert(next);
        }
        Ok(())
    }

    /// LP: the index of the last (highest) request issued.
    pub fn last_issued(&self) -> Option<usize> {
        self.last_issued
    }

    /// LS: the largest index up to which every request has completed.
    pub fn last_served(&self) -> Option<usize> {
        self.frontier.checked_sub(1)
    }

    /// Requests issued and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.issued_count - self.completed
    }

    /// Requests completed.
    pub fn completed(&self) -> usize {
        self.completed
    }

    /// True once every request has completed.
    pub fn finished(&self) -> bool {
        self.completed == self.plan.reqs.len()
    }

    /// The plan being replayed.
    pub fn plan(&self) -> &ReplayPlan {
        &self.plan
    }
}

fn self_due(pacing: Pacing, req: &Req) -> Duration {
    match pacing {
        Pacing::AsFastAsPossible => Duration::ZERO,
        Pacing::Timed { speed } => {
            Duration::try_from_secs_f64(req.log_offset.as_secs_f64() / speed)
                .unwrap_or(Duration::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::parse::parse_str;
    use proptest::prelude::*;

    fn log(rows: &[(&str, u32, u64)]) -> Vec<LogEntry> {
        let text: String = rows
            .iter()
            .map(|(ip, t, b)| {
                format!(
                    "{ip} - - [01/Jan/2020:00:{:02}:{:02} +0000] \"GET /p/{b} HTTP/1.1\" 200 {b}\n",
                    t / 60,
                    t % 60
                )
            })
            .collect();
        parse_str(&text).0
    }

    #[test]
    fn plan_maps_ips_to_browsers_and_counts_resumption() {
        let e = log(&[
            ("1.1.1.1", 5, 10),
            ("2.2.2.2", 6, 20),
            ("1.1.1.1", 9, 30),
            ("1.1.1.1", 65, 30),
        ]);
        let p = ReplayPlan::new(&e, PathMode::Bytes);
        let r = p.requests();
        assert_eq!(
            r.iter().map(|r| r.browser).collect::<Vec<_>>(),
            vec![0, 1, 0, 0]
        );
        assert_eq!(
            r.iter().map(|r| r.full_handshake).collect::<Vec<_>>(),
            vec![true, true, false, false]
        );
        assert_eq!(r[1].path, "/bytes/20");
        assert_eq!(r[3].log_offset, Duration::from_secs(60));
        let s = p.summary();
        assert_eq!((s.requests, s.sessions, s.resumed, s.bytes), (4, 2, 2, 90));
        assert_eq!(s.implied_resumption_ratio, 0.5);
        assert_eq!(s.log_span, Duration::from_secs(60));
        let o = ReplayPlan::new(&e, PathMode::Original);
        assert_eq!(o.requests()[1].path, "/p/20");
        assert_eq!(
            o.file_tree().0,
            vec![
                ("/p/10".into(), 10),
                ("/p/20".into(), 20),
                ("/p/30".into(), 30)
            ]
        );
        assert_eq!(
            ReplayPlan::new(&[], PathMode::Bytes)
                .summary()
                .implied_resumption_ratio,
            0.0
        );
    }

    #[test]
    fn window_one_is_strictly_serial_and_bad_args_are_refused() {
        let e = log(&[("1.1.1.1", 0, 1), ("2.2.2.2", 0, 2), ("3.3.3.3", 0, 3)]);
        let plan = Arc::new(ReplayPlan::new(&e, PathMode::Bytes));
        let mut s = Scheduler::new(plan.clone(), 1, Pacing::AsFastAsPossible).unwrap();
        for id in 0..3 {
            assert_eq!(s.issue().unwrap().id, id);
            assert!(s.issue().is_none());
            s.complete(id).unwrap();
        }
        assert!(s.finished() && s.issue().is_none());
        assert!(s.complete(0).is_err());
        assert!(Scheduler::new(plan.clone(), 0, Pacing::AsFastAsPossible).is_err());
        assert!(Scheduler::new(plan, 5, Pacing::Timed { speed: 0.0 }).is_err());
    }

    #[test]
    fn a_slow_old_request_holds_the_window() {
        // Seed 001: clients cannot start new requests until an older one
        // (say a large file) completes.
        let e = log(&[
            ("1.1.1.1", 0, 1),
            ("2.2.2.2", 0, 2),
            ("3.3.3.3", 0, 3),
            ("4.4.4.4", 0, 4),
        ]);
        let mut s = Scheduler::new(
            Arc::new(ReplayPlan::new(&e, PathMode::Bytes)),
            2,
            Pacing::AsFastAsPossible,
        )
        .unwrap();
        let a = s.issue().unwrap().id; // 0, the slow one
        let b = s.issue().unwrap().id; // 1
        assert_eq!((a, b), (0, 1));
        assert!(s.issue().is_none());
        s.complete(1).unwrap();
        assert!(
            s.issue().is_none(),
            "LS is still -1: index 2 would make LP - LS = 3"
        );
        s.complete(0).unwrap();
        assert_eq!(s.issue().unwrap().id, 2);
        assert_eq!(s.issue().unwrap().id, 3);
    }

    #[test]
    fn timed_pacing_divides_offsets_by_speed() {
        let e = log(&[("1.1.1.1", 0, 1), ("2.2.2.2", 10, 2), ("3.3.3.3", 20, 3)]);
        let mut s = Scheduler::new(
            Arc::new(ReplayPlan::new(&e, PathMode::Bytes)),
            10,
            Pacing::Timed { speed: 2.0 },
        )
        .unwrap();
        assert_eq!(s.issue_at(Duration::ZERO).unwrap().id, 0);
        assert_eq!(s.next_due(), Some(Duration::from_secs(5)));
        assert!(s.issue_at(Duration::from_millis(4_999)).is_none());
        assert_eq!(s.issue_at(Duration::from_secs(5)).unwrap().id, 1);
        assert_eq!(s.issue_at(Duration::from_secs(60)).unwrap().id, 2);
        assert_eq!(s.next_due(), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Under random interleavings of issue and out-of-order completion:
        /// LP − LS ≤ window after every step, an IP's request is issued
        /// only after its previous one completed, every request is issued
        /// exactly once, and the replay never deadlocks.
        #[test]
        fn window_and_per_ip_order_hold(ips in prop::collection::vec(0u8..12, 0..300),
                                         window in 1usize..40, seed in any::<u64>()) {
            let rows: Vec<(String, u32, u64)> = ips.iter().enumerate()
                .map(|(i, ip)| (format!("10.0.0.{ip}"), i as u32 % 3600, i as u64)).collect();
            let text: String = rows.iter().map(|(ip, t, b)| format!(
                "{ip} - - [01/Jan/2020:{:02}:{:02}:{:02} +0000] \"GET / HTTP/1.1\" 200 {b}\n", t / 3600, t / 60 % 60, t % 60)).collect();
            let plan = Arc::new(ReplayPlan::new(&parse_str(&text).0, PathMode::Bytes));
            let n = plan.requests().len();
            prop_assert_eq!(n, ips.len());
            let mut s = Scheduler::new(plan.clone(), window, Pacing::AsFastAsPossible).unwrap();
            let mut rng = crate::rng(seed, 0);
            let mut in_flight: Vec<usize> = Vec::new();
            let mut done = vec![false; n];
            let mut issued = vec![false; n];
            let mut prev_of_ip: HashMap<Client, usize> = HashMap::new();
            let mut prev = vec![None; n];
            for r in plan.requests() {
                prev[r.id] = prev_of_ip.insert(r.client.clone(), r.id);
            }
            let mut steps = 0;
            while !s.finished() {
                steps += 1;
                prop_assert!(steps < 10 * n + 10, "no progress");
                let issue = in_flight.is_empty() || rng.random_bool(0.5);
                if issue && let Some(r) = s.issue() {
                    prop_assert!(!issued[r.id]);
                    issued[r.id] = true;
                    if let Some(p) = prev[r.id] {
                        prop_assert!(done[p], "request {} issued before its IP's previous {}", r.id, p);
                    }
                    prop_assert_eq!(r.full_handshake, prev[r.id].is_none());
                    in_flight.push(r.id);
                } else {
                    prop_assert!(!in_flight.is_empty(), "deadlock: nothing issuable, nothing in flight");
                    let k = rng.random_range(0..in_flight.len());
                    let id = in_flight.swap_remove(k);
                    s.complete(id).unwrap();
                    done[id] = true;
                }
                let ls = done.iter().position(|d| !d).unwrap_or(n) as i64 - 1;
                prop_assert_eq!(s.last_served().map_or(-1, |x| x as i64), ls);
                if let Some(lp) = s.last_issued() {
                    prop_assert!(lp as i64 - ls <= window as i64, "LP {} LS {} window {}", lp, ls, window);
                }
                prop_assert_eq!(s.in_flight(), in_flight.len());
            }
            prop_assert!(issued.iter().all(|&i| i));
        }
    }
}
