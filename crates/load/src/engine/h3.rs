//! HTTP/3 connections (`--h3`): the protocol half of
//! [`Client::connection`] when the run speaks HTTP/3 over QUIC (quinn, h3
//! and h3-quinn). Every loop and workload reaches it as it reaches HTTP/1.1
//! and HTTP/2: a closed-loop client keeps one connection at a time with up
//! to `-m` streams in flight, an open-loop arrival or a replayed request is
//! one connection, and each stream is one request and one record.
//!
//! Each identity has a UDP socket (a quinn endpoint) of its own, bound to
//! its `--source-ip` address if given. Whether the server resumed is read
//! from the certificate verifier: a resumed TLS 1.3 handshake sends no
//! certificate, so the client's verifier is not called. With
//! `--early-data`, a connection that holds a ticket allowing 0-RTT sends
//! its first request in 0-RTT; quinn says whether the server accepted it,
//! and a rejected request is sent again after the handshake on a new
//! HTTP/3 connection over the same QUIC one.
//!
//! The connection's first request carries the handshake and its total time
//! counts from the connection's start (or the open loop's intended start);
//! every other stream's counts from the moment it was sent.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::Uri;
use http::uri::{Authority, Scheme};
use tlslab_stats::{EarlyData, HandshakeKind, HandshakeRecord, RequestRecord};

use super::client::{Client, Open};
use super::quic::{Hs, Kind, QuicIdentity, QuicRun};
use super::shared::{Shared, Slot};
use crate::conn::{Partial, absolute};
use crate::io::HandshakeSlot;
use crate::quic::http3::{self, Got, H3, Send, conn_kind, h3_open, request};

/// A QUIC connection whose handshake completed, and its first request.
struct Established {
    conn: quinn::Connection,
    /// When the handshake completed, and the connection's statistics then
    /// (its handshake's bytes and datagrams).
    done: Instant,
    stats: quinn::ConnectionStats,
    /// Whether the certificate verifier was called (a full handshake).
    full: bool,
    early: EarlyData,
    h3: Result<H3, String>,
    first: Result<Got, String>,
}

/// Starts HTTP/3 on `conn` and sends `uri` as its first request.
async fn open_and_send(
    conn: &quinn::Connection,
    uri: &Uri,
    timeout: Duration,
) -> (Result<H3, String>, Result<Got, String>) {
    let h3 = h3_open(conn.clone()).await;
    let first = match &h3 {
        Ok(h) => request(h.send.clone(), uri.clone(), timeout).await,
        Err(e) => Err(e.clone()),
    };
    (h3, first)
}

impl Client {
    /// One HTTP/3 connection: the QUIC handshake (0-RTT when allowed), then
    /// its requests, until `K`, a failure, or the end of the run. A
    /// handshake that got no answer in time, or was refused or reset, is a
    /// connection that could not be made: the next one backs off.
    pub(super) async fn h3_connection(
        &mut self,
        sh: &Shared,
        q: &QuicRun,
        slot: Slot,
        intended: Option<Instant>,
    ) {
        let (first, t0) = self.begin(sh, slot, intended);
        let ident = self.ident.clone();
        let (Some(tls), Some(qi)) = (&ident.tls, &ident.quic) else {
            // Not reached: an HTTP/3 run has https:// URLs only, and its
            // QUIC configuration was checked before it started.
            return self.fail(sh, first, "quic_config");
        };
        let o = &sh.origins[ident.origin];
        let Ok(authority) = Authority::try_from(o.host_header.as_bytes()) else {
            return self.fail(sh, first, "bad_url");
        };
        let addr = match o.resolve(sh.timeout).await {
            Ok(a) => a,
            Err(kind) => {
                self.backoff.record(false);
                return self.fail(sh, first, kind);
            }
        };
        let local: SocketAddr = match &sh.source {
            Some(s) => (s.for_client(ident.id), 0).into(),
            None => http3::local_for(addr),
        };
        let conn_no = first.rec.conn;
        let endpoint = match qi.endpoint(q, ident.id, local, q.new_socket && conn_no > 0) {
            Ok(e) => e,
            Err(kind) => {
                self.backoff.record(false);
                return self.fail(sh, first, kind);
            }
        };
        let mut one = Some(qi.handshaking.lock().await);
        let verified0 = qi.verified.load(Ordering::Relaxed);
        let offer = self.offer(sh, tls);
        tls.sessions.set_offer(offer);
        q.attempts.fetch_add(1, Ordering::Relaxed);
        let config = qi.config_for(q, ident.id, conn_no, addr, t0);
        let connecting = match endpoint.connect_with(config, addr, &q.server_name) {
            Ok(c) => c,
            Err(e) => {
                self.backoff.record(false);
                return self.fail(sh, first, &format!("quic_connect: {e}"));
            }
        };
        // Full when the verifier was called: read as the handshake ends,
        // then the next handshake of this identity may start.
        let mut full_now = move || {
            one.take();
            qi.verified.load(Ordering::Relaxed) > verified0
        };
        let early_ok = sh.early_data && offer;
        let uri = absolute(Scheme::HTTPS, &authority, &first.uri);
        let est = match handshake(sh, q, connecting, early_ok, &uri, &mut full_now).await {
            Ok(est) => est,
            Err((kind, made)) => {
                self.backoff.record(made);
                if kind.starts_with("quic_crypto") {
                    tls.sessions.clear();
                }
                return self.fail(sh, first, &kind);
            }
        };
        self.backoff.record(true);
        let Established {
            conn,
            done,
            stats,
            full,
            early,
            h3,
            first: got,
        } = est;
        let resumed = !full && conn.close_reason().is_none() || early == EarlyData::Accepted;
        let hs_us = done.saturating_duration_since(t0).as_micros() as u64;
        let hs_slot = HandshakeSlot::default();
        *hs_slot.lock() = Some(HandshakeRecord {
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
            bytes_out: stats.udp_tx.bytes,
            bytes_in: stats.udp_rx.bytes,
            round_trips: 0,
            early_data: early,
            wire: None,
        });
        if first.slot == Slot::Measured {
            q.handshakes.lock().push(Hs {
                kind: match (resumed, early) {
                    (true, EarlyData::Accepted) => Kind::ZeroRtt,
                    (true, _) => Kind::Resumed,
                    _ => Kind::Full,
                },
                handshake_us: hs_us,
                first_byte_us: got
                    .as_ref()
                    .ok()
                    .map(|g| g.ttfb_at.saturating_duration_since(t0).as_micros() as u64),
                bytes_out: stats.udp_tx.bytes,
                bytes_in: stats.udp_rx.bytes,
                datagrams_out: stats.udp_tx.datagrams,
                datagrams_in: stats.udp_rx.datagrams,
                packets_out: stats.path.sent_packets,
            });
        }
        let more = self.h3_done(sh, q, qi, first, &got, Some(&hs_slot));
        if let (true, Ok(h)) = (more, &h3) {
            self.h3_streams(sh, q, qi, &h.send, &authority, conn_no)
                .await;
        }
        // The server sends its session tickets once it has the client's
        // Finished: after a 0-RTT response, so wait for one (bounded)
        // before closing, or the next connection could not resume.
        if q.wait_tickets {
            let wait = sh.timeout.min(Duration::from_secs(1));
            let _ = tokio::time::timeout(wait, async {
                while !tls.sessions.has_session() && conn.close_reason().is_none() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await;
        }
        drop(h3);
        conn.close(0u32.into(), b"done");
    }

    /// Records a finished HTTP/3 request (the connection's first with its
    /// handshake `hs`); returns whether the connection may carry more.
    fn h3_done(
        &mut self,
        sh: &Shared,
        q: &QuicRun,
        qi: &QuicIdentity,
        mut open: Open<'_>,
        got: &Result<Got, String>,
        hs: Option<&HandshakeSlot>,
    ) -> bool {
        let transport_error = fill(&mut open.rec, got, open.start);
        let ok = transport_error.is_none() && open.rec.status.is_some_and(|s| s < 400);
        qi.count_success(q, ok);
        let first = open.rec.req_on_conn == 0;
        self.finish_request(sh, open, transport_error, first, hs)
    }

    /// The connection's requests after the first: up to `-m` streams in
    /// flight until `K` were sent, the run is over or one failed, as over
    /// HTTP/2 ([`Client::multiplex`]).
    async fn h3_streams<'a>(
        &mut self,
        sh: &'a Shared,
        q: &QuicRun,
        qi: &QuicIdentity,
        send: &Send,
        authority: &Authority,
        conn_no: u64,
    ) {
        let launch = |open: Open<'a>| {
            let (send, timeout) = (send.clone(), sh.timeout);
            let uri = absolute(Scheme::HTTPS, authority, &open.uri);
            async move {
                let got = request(send, uri, timeout).await;
                (open, got)
            }
        };
        let done =
            |c: &mut Client, open, got: Result<Got, String>| c.h3_done(sh, q, qi, open, &got, None);
        let m = q.streams as usize;
        let never = std::future::pending::<()>();
        self.multiplex(sh, m, conn_no, 1, None, launch, never, done)
            .await;
    }
}

/// The QUIC handshake of `connecting` and the connection's first request:
/// in 0-RTT if `early` and quinn allows it, else after the handshake. On
/// failure, the error kind and whether the connection counts as made (the
/// server answered: not a timeout, a reset or a refusal).
async fn handshake(
    sh: &Shared,
    q: &QuicRun,
    connecting: quinn::Connecting,
    early: bool,
    uri: &Uri,
    full_now: &mut impl FnMut() -> bool,
) -> Result<Established, (String, bool)> {
    let connecting = if early {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                return Ok(zero_rtt(sh, q, conn, accepted, uri, full_now).await);
            }
            Err(c) => c,
        }
    } else {
        connecting
    };
    let conn = match tokio::time::timeout(sh.timeout, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            use quinn::ConnectionError as E;
            if !matches!(e, E::TimedOut | E::LocallyClosed) {
                q.answered.store(true, Ordering::Relaxed);
            }
            let kind = conn_kind(&e);
            let made = !matches!(e, E::TimedOut | E::Reset) && kind != "refused";
            full_now();
            return Err((kind, made));
        }
        Err(_) => {
            full_now();
            return Err(("timeout".into(), false));
        }
    };
    q.answered.store(true, Ordering::Relaxed);
    let done = Instant::now();
    let stats = conn.stats();
    let full = full_now();
    let (h3, first) = open_and_send(&conn, uri, sh.timeout).await;
    Ok(Established {
        conn,
        done,
        stats,
        full,
        early: EarlyData::NotSent,
        h3,
        first,
    })
}

/// The first request in 0-RTT, beside the handshake; sent again after it
/// if the server rejected the early data.
async fn zero_rtt(
    sh: &Shared,
    q: &QuicRun,
    conn: quinn::Connection,
    accepted: quinn::ZeroRttAccepted,
    uri: &Uri,
    full_now: &mut impl FnMut() -> bool,
) -> Established {
    let handshake = async {
        let ok = tokio::time::timeout(sh.timeout, accepted).await == Ok(true);
        (ok, Instant::now(), conn.stats(), full_now())
    };
    let ((ok, done, stats, full), (mut h3, mut first)) =
        tokio::join!(handshake, open_and_send(&conn, uri, sh.timeout));
    if ok || first.is_ok() {
        q.answered.store(true, Ordering::Relaxed);
    }
    let early = if ok {
        EarlyData::Accepted
    } else {
        q.zero_rtt_rejected.fetch_add(1, Ordering::Relaxed);
        EarlyData::Rejected
    };
    if !(ok && first.is_ok()) {
        // Rejected: quinn dropped every 0-RTT stream, HTTP/3's control
        // streams too; start HTTP/3 again and resend.
        drop(h3);
        (h3, first) = open_and_send(&conn, uri, sh.timeout).await;
    }
    Established {
        conn,
        done,
        stats,
        full,
        early,
        h3,
        first,
    }
}

/// Fills `rec` from a response (or its failure), as a response over TCP
/// is; returns the transport error, if any.
fn fill(rec: &mut RequestRecord, got: &Result<Got, String>, start: Instant) -> Option<String> {
    match got {
        Ok(g) => {
            let p = Partial {
                sent: Some(g.sent_at),
                head: Some(g.ttfb_at),
                end: Some(g.end),
                status: Some(g.status),
                body: g.body,
            };
            p.fill(rec, start);
            None
        }
        Err(e) => {
            rec.total_us = start.elapsed().as_micros() as u64;
            Some(e.clone())
        }
    }
}
