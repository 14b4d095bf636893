//! One closed-loop HTTP/3 client: its UDP endpoint, session store, reuse
//! planner and connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::client::Resumption;
use tlslab_crypto::store::ClientSessions;
use tlslab_stats::{EarlyData, HandshakeKind, HandshakeRecord, RequestRecord};

use super::http3::{self, CountingVerifier, Got, Send, conn_kind, h3_open, request};
use super::{Hs, Kind, Run};
use crate::engine::{Backoff, Slot};
use crate::reuse::ReusePlanner;

/// The transport of every client connection: quinn's defaults, idle
/// after the run's `--timeout` (at most 600 s).
fn transport(run: &Run) -> quinn::TransportConfig {
    http3::transport(run.timeout.min(Duration::from_secs(600)))
}

/// A client identity: its UDP endpoint, session store and reuse planner.
/// A closed-loop client is one; an open loop's arrivals share a pool of
/// them, concurrently.
pub(super) struct Me {
    run: Arc<Run>,
    id: u32,
    endpoint: quinn::Endpoint,
    /// The run's configuration with this identity's session store and
    /// certificate verifier (one per identity: rustls resumes only with the
    /// verifier that stored the session).
    config: quinn::ClientConfig,
    sessions: Arc<ClientSessions>,
    /// Calls of the verifier: a full handshake makes one, a resumed none.
    verified: Arc<AtomicU64>,
    /// Held by the handshake in progress, so that the verifier's calls
    /// are that handshake's: an identity makes one handshake at a time
    /// (its connections' requests still overlap).
    handshaking: tokio::sync::Mutex<()>,
    planner: Mutex<ReusePlanner>,
    conn_no: AtomicU64,
    next_path: AtomicUsize,
    /// Measured requests (taken from the budget) not yet recorded.
    taken: Arc<AtomicU64>,
    /// Requests that succeeded (for `--quic-rebind-after`).
    succeeded: AtomicU64,
    /// Whether `--quic-rebind-after` has rebound this client.
    rebound: std::sync::atomic::AtomicBool,
}

/// Runs client `id` until the run ends.
pub(super) async fn client(run: Arc<Run>, id: u32) {
    let taken = Arc::new(AtomicU64::new(0));
    let deadline = run.deadline;
    let counted = taken.clone();
    let me = match Me::new(run.clone(), id, taken) {
        Ok(me) => me,
        Err(e) => {
            tracing::error!("HTTP/3 client {id} could not start: {e}");
            return;
        }
    };
    let work = me.run_loop();
    match deadline {
        Some(d) => {
            if tokio::time::timeout_at(d.into(), work).await.is_err() {
                run.unfinished
                    .fetch_add(counted.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        None => work.await,
    }
}

impl Me {
    /// Identity `id`: a UDP endpoint of its own (bound to its
    /// `--source-ip` address if given) and an empty session store.
    pub(super) fn new(run: Arc<Run>, id: u32, taken: Arc<AtomicU64>) -> Result<Me, String> {
        let sessions = ClientSessions::new();
        let mut c = run.base.clone();
        c.resumption = Resumption::store(sessions.clone());
        let (counting, verified) = CountingVerifier::wrap(run.verifier.clone());
        c.dangerous().set_certificate_verifier(counting);
        let config = http3::client_config(c, run.timeout.min(Duration::from_secs(600)))?;
        let local: SocketAddr = match &run.source {
            Some(s) => (s.for_client(id), 0).into(),
            None => http3::local_for(run.addr),
        };
        let endpoint =
            quinn::Endpoint::client(local).map_err(|e| format!("UDP bind {local}: {e}"))?;
        run.endpoints.lock().push(endpoint.clone());
        let reuse = run.reuse;
        Ok(Me {
            next_path: AtomicUsize::new(id as usize % run.paths.len()),
            run,
            id,
            endpoint,
            config,
            sessions,
            verified,
            handshaking: tokio::sync::Mutex::new(()),
            planner: Mutex::new(ReusePlanner::new(reuse)),
            conn_no: AtomicU64::new(0),
            taken,
            succeeded: AtomicU64::new(0),
            rebound: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The closed loop: connection after connection, backing off (as a
    /// TCP client does, `--retry-backoff`) after handshakes that could
    /// not be made.
    async fn run_loop(self) {
        let mut backoff = Backoff::default();
        loop {
            backoff
                .wait_in(&self.run.backoff(), u64::from(self.id))
                .await;
            let Some(slot) = self.run.next_slot() else {
                break;
            };
            self.take(slot);
            let made = self.connection(None, slot).await;
            backoff.record(made);
        }
        self.close();
    }

    /// The configuration of this identity's connection `conn_no`: with
    /// `--qlog`, a transport of its own writing the connection's qlog file
    /// (`client-<id>-<conn_no>.sqlog`, event times from `t0`) while the
    /// caps leave room.
    fn config_for(&self, conn_no: u64, t0: Instant) -> quinn::ClientConfig {
        let Some(file) = self
            .run
            .qlog
            .as_ref()
            .and_then(|q| q.next(&format!("{}-{conn_no}", self.id)))
        else {
            return self.config.clone();
        };
        let mut q = quinn::QlogConfig::default();
        q.writer(Box::new(file))
            .title(Some(format!(
                "tlslab load: client {} connection {conn_no}",
                self.id
            )))
            .description(Some(format!(
                "HTTP/3 to {} ({}), as the client saw it",
                self.run.addr, self.run.server_name
            )))
            .start_time(t0);
        let mut t = transport(&self.run);
        t.qlog_stream(q.into_stream());
        let mut c = self.config.clone();
        c.transport_config(Arc::new(t));
        c
    }

    /// Counts a measured request as taken until [`Me::record`] sees it.
    fn take(&self, slot: Slot) {
        if slot == Slot::Measured {
            self.taken.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Closes the endpoint: its connections are done.
    pub(super) fn close(&self) {
        self.endpoint.close(0u32.into(), b"done");
    }

    /// One open-loop arrival on this identity: one connection, its first
    /// request timed from `intended`; cut off at the run's deadline (and
    /// counted unfinished if `measured`).
    pub(super) async fn arrival(&self, intended: Instant, measured: bool) {
        let slot = if measured {
            Slot::Measured
        } else {
            Slot::Warmup
        };
        self.take(slot);
        let work = self.connection(Some(intended), slot);
        let Some(d) = self.run.deadline else {
            work.await;
            return;
        };
        if tokio::time::timeout_at(d.into(), work).await.is_err() && measured {
            self.run.unfinished.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Moves the endpoint, and its open connection, to a new UDP socket
    /// on the same local address (a new source port).
    fn rebind(&self) {
        let Ok(local) = self.endpoint.local_addr() else {
            return;
        };
        let fresh = std::net::UdpSocket::bind(SocketAddr::new(local.ip(), 0));
        match fresh.map(|s| self.endpoint.rebind(s)) {
            Ok(Ok(())) => {
                self.run.rebinds.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(e)) | Err(e) => {
                tracing::warn!("HTTP/3 client {}: rebinding failed: {e}", self.id);
            }
        }
    }

    /// `--quic-rebind-after N`: after the client's N-th successful
    /// request, once.
    fn count_success(&self, rec: &RequestRecord) {
        let Some(n) = self.run.rebind_after else {
            return;
        };
        if rec.error.is_some() {
            return;
        }
        let done = self.succeeded.fetch_add(1, Ordering::Relaxed) + 1;
        if done >= n && !self.rebound.swap(true, Ordering::Relaxed) {
            self.rebind();
        }
    }

    /// Records a measured request; a warm-up one is dropped.
    fn record(&self, rec: &RequestRecord, slot: Slot) {
        self.count_success(rec);
        if slot == Slot::Measured {
            self.taken.fetch_sub(1, Ordering::Relaxed);
            self.run.collector.record(rec);
        }
    }

    fn blank(&self, start: Instant, conn: u64, req_on_conn: u32) -> (RequestRecord, http::Uri) {
        let n = self.run.paths.len();
        let at = self
            .next_path
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| Some((p + 1) % n))
            .unwrap_or_default();
        let (target, uri) = self.run.paths[at].clone();
        let rec = RequestRecord {
            t_start_us: self.run.since_window(start),
            client: self.id,
            conn,
            req_on_conn,
            target,
            ..RequestRecord::default()
        };
        (rec, uri)
    }

    /// One connection: the handshake (0-RTT when allowed), then its
    /// requests. With `intended` (an open loop's arrival time) the first
    /// request's start and total time count from then; the handshake's
    /// times are always its own. `slot` is the first request's: a warm-up
    /// connection's handshake is not measured either. Returns whether the
    /// connection was made: false when the handshake got no answer in
    /// time, or was refused or reset (what backs off).
    async fn connection(&self, intended: Option<Instant>, slot: Slot) -> bool {
        let run = self.run.clone();
        let t0 = Instant::now();
        let start = intended.unwrap_or(t0);
        let conn_no = self.conn_no.fetch_add(1, Ordering::Relaxed);
        let (mut rec, uri) = self.blank(start, conn_no, 0);
        let mut one = Some(self.handshaking.lock().await);
        let verified0 = self.verified.load(Ordering::Relaxed);
        // Full when the verifier was called: read as the handshake ends,
        // then the next handshake of this identity may start.
        let mut full_now = || {
            one.take();
            self.verified.load(Ordering::Relaxed) > verified0
        };
        let offer = self.planner.lock().offer(self.sessions.has_session());
        self.sessions.set_offer(offer);
        run.attempts.fetch_add(1, Ordering::Relaxed);
        if self.run.new_socket && conn_no > 0 {
            self.rebind();
        }
        let config = self.config_for(conn_no, t0);
        let connecting = match self
            .endpoint
            .connect_with(config, run.addr, &run.server_name)
        {
            Ok(c) => c,
            Err(e) => {
                rec.error = Some(format!("quic_connect: {e}"));
                rec.total_us = start.elapsed().as_micros() as u64;
                self.record(&rec, slot);
                return false;
            }
        };
        let mut early = EarlyData::NotSent;
        let attempt = if run.early_data && offer {
            match connecting.into_0rtt() {
                Ok((conn, accepted)) => Ok((conn, Some(accepted))),
                Err(c) => Err(c),
            }
        } else {
            Err(connecting)
        };
        // The handshake's own bytes and datagrams are read when it
        // completes (quinn sends the client's Finished before it says so).
        let (conn, hs_done, hs, full, h3, first) = match attempt {
            Ok((conn, Some(accepted))) => {
                // The first request leaves in 0-RTT, beside the handshake.
                let h3 = h3_open(conn.clone()).await;
                let req = async {
                    match &h3 {
                        Ok(h) => request(h.send.clone(), uri.clone(), run.timeout).await,
                        Err(e) => Err(e.clone()),
                    }
                };
                let (ok, first) = tokio::join!(
                    async {
                        let ok = tokio::time::timeout(run.timeout, accepted).await == Ok(true);
                        (ok, Instant::now(), conn.stats(), full_now())
                    },
                    req
                );
                let (ok, done, hs, full) = ok;
                if ok || first.is_ok() {
                    run.answered.store(true, Ordering::Relaxed);
                }
                early = if ok {
                    EarlyData::Accepted
                } else {
                    run.zero_rtt_rejected.fetch_add(1, Ordering::Relaxed);
                    EarlyData::Rejected
                };
                let (h3, first) = if ok && first.is_ok() {
                    (h3, first)
                } else {
                    // Rejected: quinn dropped every 0-RTT stream, HTTP/3's
                    // control streams too; start HTTP/3 again and resend.
                    drop(h3);
                    let h3 = h3_open(conn.clone()).await;
                    let first = match &h3 {
                        Ok(h) => request(h.send.clone(), uri.clone(), run.timeout).await,
                        Err(e) => Err(e.clone()),
                    };
                    (h3, first)
                };
                (conn, done, hs, full, h3, first)
            }
            Ok((_, None)) => unreachable!("0-RTT attempts carry their acceptance"),
            Err(connecting) => {
                let conn = match tokio::time::timeout(run.timeout, connecting).await {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => {
                        use quinn::ConnectionError as E;
                        if !matches!(e, E::TimedOut | E::LocallyClosed) {
                            run.answered.store(true, Ordering::Relaxed);
                        }
                        rec.error = Some(conn_kind(&e));
                        rec.total_us = start.elapsed().as_micros() as u64;
                        if rec
                            .error
                            .as_deref()
                            .is_some_and(|k| k.starts_with("quic_crypto"))
                        {
                            self.sessions.clear();
                        }
                        self.record(&rec, slot);
                        return !matches!(e, E::TimedOut | E::Reset)
                            && rec.error.as_deref() != Some("refused");
                    }
                    Err(_) => {
                        rec.error = Some("timeout".into());
                        rec.total_us = start.elapsed().as_micros() as u64;
                        self.record(&rec, slot);
                        return false;
                    }
                };
                run.answered.store(true, Ordering::Relaxed);
                let done = Instant::now();
                let hs = conn.stats();
                let full = full_now();
                let h3 = h3_open(conn.clone()).await;
                let first = match &h3 {
                    Ok(h) => request(h.send.clone(), uri.clone(), run.timeout).await,
                    Err(e) => Err(e.clone()),
                };
                (conn, done, hs, full, h3, first)
            }
        };
        let resumed = !full && conn.close_reason().is_none() || early == EarlyData::Accepted;
        self.planner.lock().record(resumed);
        let kind = match (resumed, early) {
            (true, EarlyData::Accepted) => Kind::ZeroRtt,
            (true, _) => Kind::Resumed,
            _ => Kind::Full,
        };
        let hs_us = hs_done.saturating_duration_since(t0).as_micros() as u64;
        rec.handshake = Some(HandshakeRecord {
            duration_us: hs_us,
            kind: if resumed {
                HandshakeKind::Resumed
            } else {
                HandshakeKind::Full
            },
            hrr: false,
            offered: offer,
            version: "TLSv1.3".into(),
            // quinn does not expose the negotiated suite or group, and the
            // client's flights are not counted over QUIC: left empty and 0,
            // which the report shows as not measured (no suite or group
            // entry, no round-trip mean). The transport section has the
            // handshake's datagrams each way.
            suite: String::new(),
            group: String::new(),
            bytes_out: hs.udp_tx.bytes,
            bytes_in: hs.udp_rx.bytes,
            round_trips: 0,
            early_data: early,
            wire: None,
        });
        let ttfb_first = first.as_ref().ok().map(|r| r.ttfb_at);
        if slot == Slot::Measured {
            run.connections.fetch_add(1, Ordering::Relaxed);
            run.handshakes.lock().push(Hs {
                kind,
                handshake_us: hs_us,
                first_byte_us: ttfb_first
                    .map(|t| t.saturating_duration_since(t0).as_micros() as u64),
                bytes_out: hs.udp_tx.bytes,
                bytes_in: hs.udp_rx.bytes,
                datagrams_out: hs.udp_tx.datagrams,
                datagrams_in: hs.udp_rx.datagrams,
                packets_out: hs.path.sent_packets,
            });
        }
        fill(&mut rec, &first, start);
        let first_ok = first.is_ok();
        self.record(&rec, slot);
        if let (true, Ok(h3)) = (first_ok, &h3) {
            self.more_requests(&h3.send, conn_no).await;
        }
        // The server sends its session tickets once it has the client's
        // Finished: after a 0-RTT response, so wait for one (bounded)
        // before closing, or the next connection could not resume.
        let wait = run.timeout.min(Duration::from_secs(1));
        let _ = tokio::time::timeout(wait, async {
            while !self.sessions.has_session() && conn.close_reason().is_none() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        drop(h3);
        conn.close(0u32.into(), b"done");
        true
    }

    /// The connection's requests after the first, `-m` at a time.
    async fn more_requests(&self, send: &Send, conn_no: u64) {
        let run = self.run.clone();
        let limit = match run.requests_per_conn {
            0 => u32::MAX,
            k => k,
        };
        let mut set = tokio::task::JoinSet::new();
        let mut on_conn = 1u32;
        loop {
            while set.len() < run.streams as usize && on_conn < limit {
                let Some(slot) = run.next_slot() else { break };
                self.take(slot);
                let start = Instant::now();
                let (rec, uri) = self.blank(start, conn_no, on_conn);
                on_conn += 1;
                let (send, timeout) = (send.clone(), run.timeout);
                set.spawn(async move {
                    let r = request(send, uri, timeout).await;
                    (rec, r, start, slot)
                });
            }
            let Some(Ok((mut rec, r, start, slot))) = set.join_next().await else {
                return;
            };
            let failed = r.is_err();
            fill(&mut rec, &r, start);
            self.record(&rec, slot);
            if failed {
                // The rest are counted as they end; no new ones here.
                while let Some(Ok((mut rec, r, start, slot))) = set.join_next().await {
                    fill(&mut rec, &r, start);
                    self.record(&rec, slot);
                }
                return;
            }
        }
    }
}

fn fill(rec: &mut RequestRecord, r: &Result<Got, String>, start: Instant) {
    match r {
        Ok(g) => {
            rec.status = Some(g.status);
            rec.ttfb_us = Some(g.ttfb_at.saturating_duration_since(g.sent_at).as_micros() as u64);
            rec.transfer_us = Some(g.end.saturating_duration_since(g.ttfb_at).as_micros() as u64);
            rec.total_us = g.end.saturating_duration_since(start).as_micros() as u64;
            rec.body_bytes = g.body;
            if g.status >= 400 {
                rec.error = Some(format!("http_{}", g.status));
            }
        }
        Err(e) => {
            rec.error = Some(e.clone());
            rec.total_us = start.elapsed().as_micros() as u64;
        }
    }
}
