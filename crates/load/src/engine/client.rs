//! The per-connection client: TCP connect, TLS handshake and the HTTP
//! requests of one connection, each measured into a record.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Uri;
use http_body_util::Empty;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tlslab_runtime::{Corked, cork, uncorked};
use tlslab_stats::{HandshakeKind, RequestRecord};
use tlslab_workload::specweb96::FILES_PER_CLASS;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::backoff::Backoff;
use super::identity::{ClientTls, Identity, Picker};
use super::shared::{CLOSE_GRACE, InFlight, Origin, Shared, Slot};
use crate::conn::{Deadline, Partial, request, send, with_timeout};
use crate::errors::io_kind;
use crate::io::{CountingIo, HandshakeSlot, HandshakeWatch, NoteDecompression, RoundTrips};
use tlslab_workload::think::ThinkTime;

/// A client making requests as one identity: a closed-loop client, or one
/// open-loop arrival.
pub(super) struct Client {
    pub(super) sh: Arc<Shared>,
    pub(super) ident: Arc<Identity>,
    /// The request to repeat after a failure (`--retry-on-failure`).
    retry: Option<(u32, Uri)>,
    /// The request to make next, chosen by a browser model.
    pub(super) fixed: Option<(u32, Uri)>,
    /// A browser's page on one multiplexed connection (HTTP/2, HTTP/3).
    pub(super) page: Option<Page>,
    /// The wait after connections that could not be made.
    pub(super) backoff: Backoff,
    /// Set while [`one_request`](Self::one_request) makes its request:
    /// what the caller decided, and the record handed back. Boxed: every
    /// idle client's task keeps this struct (tests/idle_memory.rs).
    kept: Option<Box<Kept>>,
}

/// A request whose caller keeps its record rather than the run's sinks
/// (see [`Client::one_request`]).
struct Kept {
    /// Whether its handshake offers a held session.
    offer: bool,
    /// Its record, once it ended (with or without a response).
    record: Option<RequestRecord>,
}

/// A browser's page on one multiplexed connection (HTTP/2, HTTP/3): the
/// objects still to request (the HTML first), how many the page has, and
/// how many inline objects may be in flight at once.
pub(super) struct Page {
    pub(super) objects: std::collections::VecDeque<(u32, Uri)>,
    pub(super) len: u32,
    pub(super) parallel: usize,
}

/// A request begun and not yet ended: what its record needs. The guard
/// counts it as unfinished if the run's deadline drops it.
pub(super) struct Open<'a> {
    pub(super) slot: Slot,
    pub(super) guard: InFlight<'a>,
    pub(super) rec: RequestRecord,
    pub(super) uri: Uri,
    pub(super) start: Instant,
}

impl Client {
    pub(super) fn new(sh: Arc<Shared>, ident: Arc<Identity>) -> Self {
        Client {
            sh,
            ident,
            retry: None,
            fixed: None,
            page: None,
            backoff: Backoff::default(),
            kept: None,
        }
    }

    /// Backs off after connections that could not be made.
    pub(super) async fn back_off(&mut self) {
        let stream = u64::from(self.ident.id);
        self.backoff.wait(&self.sh, stream).await;
    }

    pub(super) async fn run(&mut self) {
        let sh = self.sh.clone();
        let mut first = true;
        loop {
            if !first {
                self.think().await;
            }
            first = false;
            let Some(slot) = sh.next_slot() else { return };
            self.back_off().await;
            self.connection(&sh, slot, None).await;
        }
    }

    /// Pauses for a think time, if the run has one.
    async fn think(&self) {
        if let Some(d) = self.think_time() {
            tokio::time::sleep(d).await;
        }
    }

    /// The next think time, if the run has one and it is not zero.
    pub(super) fn think_time(&self) -> Option<Duration> {
        if self.sh.think_time == ThinkTime::Zero {
            return None;
        }
        let d = self
            .sh
            .think_time
            .sample(&mut self.ident.state.lock().think);
        (!d.is_zero()).then_some(d)
    }

    /// Whether the next handshake offers a held session: as the caller of
    /// [`one_request`](Self::one_request) decided, a browser model or a
    /// replay whenever it holds one, other clients as the reuse planner
    /// says.
    pub(super) fn offer(&self, sh: &Shared, tls: &ClientTls) -> bool {
        if let Some(k) = &self.kept {
            k.offer
        } else if sh.offer_held {
            tls.sessions.has_session()
        } else {
            self.ident
                .state
                .lock()
                .planner
                .offer(tls.sessions.has_session())
        }
    }

    /// The next request: the failed one again, or the next path. Returns
    /// whether it is a retry.
    pub(super) fn next_target(&mut self, o: &Origin) -> (u32, Uri, bool) {
        if let Some((i, uri)) = self.retry.take() {
            return (i, uri, true);
        }
        if let Some((i, uri)) = self.fixed.take() {
            return (i, uri, false);
        }
        if let Some((i, uri)) = self.page.as_mut().and_then(|p| p.objects.pop_front()) {
            return (i, uri, false);
        }
        let mut st = self.ident.state.lock();
        let k = match &mut st.picker {
            Picker::Turn(next) => {
                let k = *next % o.paths.len();
                *next = next.wrapping_add(1);
                k
            }
            Picker::Specweb96(s) => {
                let f = s.next();
                (f.class * FILES_PER_CLASS + f.index) % o.paths.len()
            }
        };
        let (i, uri) = &o.paths[k];
        (*i, uri.clone(), false)
    }

    /// Reacts to a failed request (no complete response): remember it for
    /// a retry, or become a new client.
    pub(super) fn failed(&mut self, target: u32, uri: Uri) {
        if self.sh.retry_on_failure {
            self.retry = Some((target, uri));
        } else {
            self.ident.renew(self.sh.reuse);
        }
    }

    pub(super) fn blank_record(
        &self,
        conn: u64,
        req_on_conn: u32,
        target: u32,
        start: Instant,
        retry: bool,
    ) -> RequestRecord {
        RequestRecord {
            t_start_us: self.sh.us_since_window(start),
            client: self.ident.id,
            conn,
            req_on_conn,
            target,
            retry,
            ..RequestRecord::default()
        }
    }

    /// Counts a request that failed before any HTTP exchange, and reacts
    /// to the failure.
    pub(super) fn fail(&mut self, sh: &Shared, open: Open<'_>, kind: &str) {
        let Open {
            slot,
            guard,
            mut rec,
            uri,
            start,
        } = open;
        rec.error = Some(kind.to_string());
        rec.total_us = start.elapsed().as_micros() as u64;
        let target = rec.target;
        self.emit(sh, slot, guard, rec);
        self.failed(target, uri);
    }

    /// Hands a finished request's record to the run's sinks, or back to
    /// the caller of [`one_request`](Self::one_request).
    fn emit(&mut self, sh: &Shared, slot: Slot, guard: InFlight<'_>, rec: RequestRecord) {
        match &mut self.kept {
            None => sh.emit(slot, guard, rec),
            Some(k) => {
                guard.done();
                k.record = Some(rec);
            }
        }
    }

    /// A new connection's number and its first request, begun now (the
    /// returned instant) and counted from `intended` if given.
    pub(super) fn begin<'a>(
        &mut self,
        sh: &'a Shared,
        slot: Slot,
        intended: Option<Instant>,
    ) -> (Open<'a>, Instant) {
        let o = &sh.origins[self.ident.origin];
        let conn = {
            let mut st = self.ident.state.lock();
            st.conn_no += 1;
            st.conn_no - 1
        };
        let t0 = Instant::now();
        let start = intended.unwrap_or(t0);
        let guard = InFlight::new(sh, slot);
        let (target, uri, retry) = self.next_target(o);
        let rec = self.blank_record(conn, 0, target, start, retry);
        let first = Open {
            slot,
            guard,
            rec,
            uri,
            start,
        };
        (first, t0)
    }

    /// The start of a connection: its first request (counted from
    /// `intended` if given, else from now), then the TCP connection, its
    /// time in the record. `None` when it could not be made: the request is
    /// counted as failed and the next attempt backs off.
    pub(super) async fn open_tcp<'a>(
        &mut self,
        sh: &'a Shared,
        slot: Slot,
        intended: Option<Instant>,
    ) -> Option<(Open<'a>, TcpStream)> {
        let o = &sh.origins[self.ident.origin];
        let (mut first, t0) = self.begin(sh, slot, intended);
        let connected = match o.resolve(sh.timeout).await {
            Ok(addr) => {
                let src = sh.source.as_ref().map(|s| s.for_client(self.ident.id));
                let connect = crate::source::connect_mss(src, sh.mss, addr);
                match with_timeout(sh.timeout, connect).await {
                    Some(Ok(s)) => Ok(s),
                    Some(Err(e)) => Err(io_kind(&e)),
                    None => Err("timeout"),
                }
            }
            Err(kind) => Err(kind),
        };
        self.backoff.record(connected.is_ok());
        match connected {
            Ok(tcp) => {
                first.rec.connect_us = Some(t0.elapsed().as_micros() as u64);
                // Requests are small and latency is measured: do not wait
                // for ACKs.
                let _ = tcp.set_nodelay(true);
                Some((first, tcp))
            }
            Err(kind) => {
                self.fail(sh, first, kind);
                None
            }
        }
    }

    /// One connection: connect, handshake, then requests until K, an error,
    /// the server closing, or the end of the run. With `intended` (an open
    /// loop's arrival time), the first request's start and total time count
    /// from then rather than from now; connect time is always its own.
    ///
    /// This is the engine's protocol seam: the loops (closed, open, think
    /// time, retry, browser, replay) call it, and it hands the connection to
    /// the run's protocol: HTTP/3 over QUIC ([`h3_connection`]), else
    /// HTTP/2 or HTTP/1.1 once TCP is up.
    ///
    /// [`h3_connection`]: Self::h3_connection
    pub(super) async fn connection(&mut self, sh: &Shared, slot: Slot, intended: Option<Instant>) {
        if let Some(q) = &sh.quic {
            return Box::pin(self.h3_connection(sh, q, slot, intended)).await;
        }
        let Some((first, tcp)) = self.open_tcp(sh, slot, intended).await else {
            return;
        };
        let ident = self.ident.clone();
        if let Some(h2) = sh.http2 {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&tcp);
            let io = CountingIo::new(tcp, RoundTrips::for_socket(fd).totalled(&sh.socket));
            return Box::pin(self.h2_over(sh, io, ident, first, h2)).await;
        }
        // What is flushed before the task waits leaves in one write (see
        // tlslab_runtime::cork): the TLS Finished flight with the first
        // request, a 0-RTT ClientHello with its early data.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&tcp);
        let (corked, uncork) = cork(tcp);
        let io = CountingIo::new(corked, RoundTrips::for_socket(fd).totalled(&sh.socket));
        // Boxed: inline, the TLS and HTTP state would be laid out next to
        // this function's own, making every client's task future (and so
        // each idle connection) 20 KiB instead of 10 KiB.
        uncorked(uncork, Box::pin(self.over(sh, io, ident, first))).await;
    }

    /// One request on a new connection of this client's identity, over the
    /// run's protocol (through [`connection`](Self::connection), with the
    /// run's `requests_per_conn` of 1), for a caller that counts requests
    /// its own way: the user sessions of `overload` ([`super::users`]).
    /// Its handshake offers a held session if and only if `offer`; the
    /// whole of it (connect, handshake, response) must end within
    /// `timeout`. Returns its record, which the run's sinks never see;
    /// `None` if it did not end in time. A request that ended in time is
    /// not failed by a close that did not.
    pub(super) async fn one_request(
        &mut self,
        sh: &Shared,
        offer: bool,
        timeout: Duration,
    ) -> Option<RequestRecord> {
        self.kept = Some(Box::new(Kept {
            offer,
            record: None,
        }));
        // A warm-up slot: outside the run's counts (its `unfinished`, its
        // HTTP/3 handshakes), which are the caller's here.
        let _ = with_timeout(timeout, Box::pin(self.connection(sh, Slot::Warmup, None))).await;
        self.kept.take().and_then(|k| k.record)
    }

    /// The rest of [`connection`](Self::connection) once TCP is up: the TLS
    /// handshake (if any) and the HTTP exchange.
    async fn over(
        &mut self,
        sh: &Shared,
        io: CountingIo<Corked<TcpStream>>,
        ident: Arc<Identity>,
        first: Open<'_>,
    ) {
        let Some(tls) = &ident.tls else {
            return self.exchange(sh, Box::new(io), None, first).await;
        };
        tls.sessions.set_offer(self.offer(sh, tls));
        let hs_start = Instant::now();
        // Boxed, as the connection below: the handshake's state is not
        // kept in this function's future for the life of the connection.
        let connect = Box::pin(with_timeout(
            sh.timeout,
            NoteDecompression::new(tls.connector.connect(tls.name.clone(), io)),
        ));
        // The TLS connection (rustls' state, about 1.2 KiB) goes on the heap
        // once: hyper's connection, the handshake with hyper and the close
        // each hold a pointer to it. Taken out of the match in its own
        // statement, so the match's result is not kept alongside it.
        let slot_hs = HandshakeSlot::default();
        let io = match connect.await {
            Some((Ok(stream), decompression)) => Box::new(HandshakeWatch::new(
                stream,
                hs_start,
                tls.sessions.clone(),
                slot_hs.clone(),
                decompression,
            )),
            Some((Err(e), _)) => {
                let kind = sh.classify(&e);
                if kind.starts_with("tls_") {
                    // A fresh start, as a browser would after a TLS failure.
                    tls.sessions.clear();
                }
                return self.fail(sh, first, &kind);
            }
            None => return self.fail(sh, first, "timeout"),
        };
        self.exchange(sh, io, Some(slot_hs), first).await
    }

    /// The HTTP/1.1 part of a connection. The connection future is driven
    /// in this task, alongside the requests.
    ///
    /// Laid out for an idle keep-alive connection's memory (see
    /// tests/idle_memory.rs): `io` arrives boxed, so it is stored once
    /// rather than in each of the futures below that hold it, and the
    /// hyper handshake and the close run in futures of their own.
    async fn exchange<IO>(
        &mut self,
        sh: &Shared,
        io: Box<IO>,
        hs: Option<HandshakeSlot>,
        first: Open<'_>,
    ) where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let (sender, mut conn) = match Box::pin(http1::handshake(TokioIo::new(io))).await {
            Ok(x) => x,
            Err(e) => return self.fail(sh, first, &sh.classify(&e)),
        };
        // With 0-RTT accepted, the server answers before the client's
        // Finished and sends its NewSessionTickets only once it has that
        // Finished, so they arrive after the response. Then read on to the
        // server's close, as a browser holding its connection would: else
        // the tickets are lost and the next connection cannot resume.
        let drain = sh.early_data && hs.is_some();
        let grace = CLOSE_GRACE.min(sh.timeout);
        // hyper's `without_shutdown()` future, polled here on `conn` itself:
        // that future (an `async fn`) holds the connection twice.
        let ended_cleanly = {
            let mut drive = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx));
            let mut reqs = std::pin::pin!(self.requests(sh, sender, hs, first));
            let conn_ended_first = tokio::select! {
                biased;
                () = &mut reqs => None,
                r = &mut drive => Some(r),
            };
            match conn_ended_first {
                Some(r) => {
                    // The requests now finish (or fail fast, the dispatcher
                    // being gone, and report why).
                    reqs.await;
                    r.is_ok()
                }
                None => matches!(with_timeout(grace, drive).await, Some(Ok(()))),
            }
        };
        // Let the connection close cleanly (close_notify, FIN).
        if ended_cleanly {
            let mut io = conn.into_parts().io.into_inner();
            let close = async move {
                if drain {
                    let mut buf = [0u8; 512];
                    while let Ok(1..) = io.read(&mut buf).await {}
                }
                let _ = io.shutdown().await;
            };
            let _ = Box::pin(with_timeout(grace, close)).await;
        }
    }

    async fn requests(
        &mut self,
        sh: &Shared,
        mut sender: SendRequest<Empty<Bytes>>,
        hs: Option<HandshakeSlot>,
        first: Open<'_>,
    ) {
        let o = &sh.origins[self.ident.origin];
        let k = sh.requests_per_conn;
        let conn = first.rec.conn;
        let mut cur = first;
        let mut i: u32 = 0;
        // One timer for all of this connection's requests (see Deadline).
        let mut deadline = Deadline::new(sh.timeout);
        loop {
            let last = (k != 0 && i + 1 >= k) || !sh.more_to_come();
            let req = request(&cur.uri, &o.host_header, last);
            let mut p = Partial::default();
            deadline.restart();
            let result = deadline.run(send(&mut sender, req, &mut p)).await;
            p.fill(&mut cur.rec, cur.start);
            let transport_error = match result {
                Some(Ok(())) => None,
                Some(Err(e)) => Some(sh.classify(&e)),
                None => Some("timeout".to_string()),
            };
            if !self.finish_request(sh, cur, transport_error, i == 0, hs.as_ref()) {
                return;
            }
            if last {
                return;
            }
            self.think().await;

            // The next request on this connection, if the server keeps it.
            deadline.restart();
            match deadline.run(sender.ready()).await {
                Some(Ok(())) => {}
                _ => return,
            }
            let Some(slot) = sh.next_slot() else { return };
            i += 1;
            let start = Instant::now();
            let (target, uri, retry) = self.next_target(o);
            cur = Open {
                slot,
                guard: InFlight::new(sh, slot),
                rec: self.blank_record(conn, i, target, start, retry),
                uri,
                start,
            };
        }
    }

    /// Ends a request's record, HTTP/1.1 or one HTTP/2 stream alike: its
    /// error (the transport failure, else `http_<status>` for a non-2xx
    /// answer), the connection's handshake on its first request (which also
    /// feeds the reuse planner), then emits it. After a transport failure it
    /// forgets the client's TLS sessions if the failure was TLS, schedules the
    /// retry, and returns false: the connection carries no more requests.
    pub(super) fn finish_request(
        &mut self,
        sh: &Shared,
        open: Open<'_>,
        transport_error: Option<String>,
        first_on_conn: bool,
        hs: Option<&HandshakeSlot>,
    ) -> bool {
        let Open {
            slot,
            guard,
            mut rec,
            uri,
            ..
        } = open;
        rec.error = transport_error.clone().or_else(|| {
            rec.status
                .filter(|s| !(200..300).contains(s))
                .map(|s| format!("http_{s}"))
        });
        if first_on_conn && let Some(h) = hs.and_then(|h| h.lock().take()) {
            self.ident
                .state
                .lock()
                .planner
                .record(h.kind == HandshakeKind::Resumed);
            rec.handshake = Some(h);
        }
        let target = rec.target;
        self.emit(sh, slot, guard, rec);
        if let Some(e) = &transport_error {
            if e.starts_with("tls_")
                && let Some(tls) = &self.ident.tls
            {
                tls.sessions.clear();
            }
            self.failed(target, uri);
            return false;
        }
        true
    }
}
