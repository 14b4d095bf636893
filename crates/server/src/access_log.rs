//! `--access-log`: one nginx-combined-like line per completed request, plus
//! TLS fields, batched in memory and written by a dedicated thread at most
//! 100 ms later (or at once when 64 KiB are queued), like nginx's
//! `access_log … buffer=64k flush=100ms`; everything is written at shutdown.
//!
//! The format, version 2 (one line, fields separated by single spaces;
//! version 1 was the same without the last field, `$transport`):
//!
//! ```text
//! $remote_addr - - [$time_local] "$request" $status $body_bytes_sent "-" "$http_user_agent" $ssl_protocol $ssl_session_reused $request_time_us $connection_id $request_on_conn $ssl_early_data $transport
//! ```
//!
//! `$time_local` is UTC (`22/Nov/2026:00:44:04 +0000`); `$ssl_protocol` is
//! `TLSv1.2`/`TLSv1.3`; `$ssl_session_reused` is `r` (resumed) or `.` (full
//! handshake), as nginx prints it; both are `-` on the plain listener.
//! `$request_time_us` runs from the request head's arrival to the response's
//! completion; `$connection_id` numbers connections from 1 in accept order
//! and `$request_on_conn` numbers requests on a connection from 1.
//! `$ssl_early_data` is `1` for a request that arrived in TLS 1.3 early
//! data and was answered before the handshake completed (0-RTT), `.`
//! otherwise. `$transport` is `tcp` (the HTTPS and plain listeners) or
//! `quic` (`--h3`). A QUIC connection's `$ssl_session_reused` is `-`: quinn
//! does not tell whether one connection resumed (the `tlslab_transport_*`
//! metrics count resumed QUIC handshakes), and `$connection_id` numbers
//! QUIC connections from 1 on their own.
//! A line is queued when the response completes (its last body
//! frame has been handed to the connection, or the response was dropped
//! unfinished), so the log's order is the order in which service completed.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::content::Body;
use crate::error::{Error, Result};
use crate::idle::{Busy, ConnInfo};

/// Bytes of queued lines at which the writer is woken at once rather than at
/// its next tick (nginx's `access_log … buffer=`).
const WAKE_BYTES: usize = 64 * 1024;
/// Bytes of queued lines at which request handling waits for the writer
/// (back-pressure: no line is ever dropped).
const MAX_BYTES: usize = 4 * 1024 * 1024;
/// The writer's tick: queued lines reach the file at most this late
/// (nginx's `flush=`).
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Lines queued for the writer, in completion order.
#[derive(Default)]
struct Queue {
    buf: Vec<u8>,
    stop: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when the queue passes [`WAKE_BYTES`] or on stop.
    wake: Condvar,
    /// Signalled when the writer has taken the queue.
    drained: Condvar,
}

/// The open access log. Request handling appends each line to an in-memory
/// batch; a writer thread moves the batch to the file every
/// [`FLUSH_EVERY`], or as soon as it holds [`WAKE_BYTES`]. Handing every
/// line to the writer as it completed cost a thread wake-up and a `write`
/// per request, which doubled the server's CPU per keep-alive request
/// (BENCHMARKS.md).
pub(crate) struct AccessLog {
    shared: Arc<Shared>,
    writer: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl AccessLog {
    /// Creates (truncates) `path` and starts the writer thread.
    pub(crate) fn open(path: &Path) -> Result<AccessLog> {
        let file = File::create(path).map_err(|error| Error::AccessLog {
            path: path.to_path_buf(),
            error,
        })?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            drained: Condvar::new(),
        });
        let name = path.to_path_buf();
        let s = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("tlslab-access-log".into())
            .spawn(move || write_loop(&s, file, &name))
            .map_err(Error::setup("cannot start the access-log writer"))?;
        Ok(AccessLog {
            shared,
            writer: parking_lot::Mutex::new(Some(writer)),
        })
    }

    /// Queues one line, written by `line` straight into the batch (no line
    /// of its own is allocated), waiting for room if the writer is far
    /// behind.
    fn send(&self, line: impl FnOnce(&mut Vec<u8>)) {
        let mut q = lock(&self.shared.queue);
        while q.buf.len() >= MAX_BYTES && !q.stop {
            self.shared.wake.notify_one();
            q = self
                .shared
                .drained
                .wait(q)
                .unwrap_or_else(PoisonError::into_inner);
        }
        line(&mut q.buf);
        if q.buf.len() >= WAKE_BYTES {
            self.shared.wake.notify_one();
        }
    }

    /// Writes everything queued so far, flushes and stops the writer.
    pub(crate) fn finish(&self) {
        if let Some(w) = self.writer.lock().take() {
            lock(&self.shared.queue).stop = true;
            self.shared.wake.notify_one();
            let _ = w.join();
        }
    }
}

fn lock(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn write_loop(shared: &Shared, mut out: File, path: &Path) {
    let mut failed = false;
    let mut batch = Vec::new();
    loop {
        let stop = {
            let mut q = lock(&shared.queue);
            if q.buf.len() < WAKE_BYTES && !q.stop {
                q = shared
                    .wake
                    .wait_timeout(q, FLUSH_EVERY)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            std::mem::swap(&mut batch, &mut q.buf);
            shared.drained.notify_all();
            q.stop
        };
        if !batch.is_empty() {
            if let Err(e) = out.write_all(&batch)
                && !failed
            {
                failed = true;
                tracing::error!(path = %path.display(), "cannot write the access log: {e}; free disk space or give another --access-log file");
            }
            batch.clear();
        }
        if stop {
            break;
        }
    }
    let _ = out.flush();
}

/// A request whose line is written when its response completes.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) log: std::sync::Arc<AccessLog>,
    pub(crate) conn: std::sync::Arc<ConnInfo>,
    pub(crate) on_conn: u64,
    pub(crate) start: Instant,
    pub(crate) request: String,
    pub(crate) user_agent: String,
    pub(crate) status: u16,
    pub(crate) sent: u64,
    /// Answered in early data, before the handshake completed.
    pub(crate) early: bool,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccessLog")
    }
}

impl Pending {
    /// The line of `req` (`$request` and `$http_user_agent` taken now), on
    /// `conn` as its `on_conn`-th request, started at `start`; its bytes
    /// are counted as they are sent.
    pub(crate) fn new<B>(
        log: &Arc<AccessLog>,
        conn: Arc<ConnInfo>,
        on_conn: u64,
        start: Instant,
        req: &http::Request<B>,
        status: http::StatusCode,
        early: bool,
    ) -> Pending {
        Pending {
            log: log.clone(),
            conn,
            on_conn,
            start,
            request: request_line(req),
            user_agent: req
                .headers()
                .get(http::header::USER_AGENT)
                .map_or_else(|| "-".to_string(), |v| escape(v.as_bytes())),
            status: status.as_u16(),
            sent: 0,
            early,
        }
    }

    /// Formats the line into the log's batch.
    pub(crate) fn emit(self) {
        let c = &self.conn;
        let (now, took) = (SystemTime::now(), self.start.elapsed());
        self.log.send(|buf| {
            let _ = write!(buf, "{} - - [", c.peer.ip().to_canonical());
            push_time_local(buf, now);
            let _ = writeln!(
                buf,
                "] \"{}\" {} {} \"-\" \"{}\" {} {} {} {} {} {} {}",
                self.request,
                self.status,
                self.sent,
                self.user_agent,
                c.tls.0,
                c.tls.1,
                took.as_micros(),
                c.id,
                self.on_conn,
                if self.early { "1" } else { "." },
                c.transport.name(),
            );
        });
    }
}

/// A request whose line is queued when this is dropped: where the
/// response is not a [`LoggedBody`] (HTTP/3).
#[derive(Debug)]
pub(crate) struct Unfinished(pub(crate) Option<Pending>);

impl Unfinished {
    /// `n` more body bytes handed over.
    pub(crate) fn sent(&mut self, n: usize) {
        if let Some(p) = self.0.as_mut() {
            p.sent += n as u64;
        }
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            p.emit();
        }
    }
}

/// A response body that queues its request's log line when it completes.
#[derive(Debug)]
pub(crate) struct LoggedBody {
    inner: Body,
    pending: Option<Pending>,
    /// The request is in progress until this body is dropped.
    _busy: Busy,
}

impl LoggedBody {
    /// `inner`, logged through `pending` if set.
    pub(crate) fn new(inner: Body, pending: Option<Pending>, busy: Busy) -> LoggedBody {
        LoggedBody {
            inner,
            pending,
            _busy: busy,
        }
    }

    fn done(&mut self) {
        if let Some(p) = self.pending.take() {
            p.emit();
        }
    }
}

impl HttpBody for LoggedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let (Some(p), Some(d)) = (this.pending.as_mut(), f.data_ref()) {
                    p.sent += d.len() as u64;
                }
                if this.inner.is_end_stream() {
                    this.done();
                }
            }
            Poll::Ready(None) => this.done(),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    /// Bodies never polled (HEAD, empty bodies) or abandoned (the client
    /// went away) are logged here, with the bytes actually handed over.
    fn drop(&mut self) {
        self.done();
    }
}

/// Escapes a client-supplied string for a quoted field the way nginx does:
/// `"`, `\` and bytes outside printable ASCII become `\xHH`.
pub(crate) fn escape(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.push_str(&format!("\\x{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// Appends `$time_local` of `t`, formatted once a second per thread (as
/// nginx caches its time strings) rather than on every line.
fn push_time_local(buf: &mut Vec<u8>, t: SystemTime) {
    thread_local! {
        static CACHED: std::cell::RefCell<(u64, String)> =
            const { std::cell::RefCell::new((u64::MAX, String::new())) };
    }
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with_borrow_mut(|(at, text)| {
        if *at != secs {
            *text = time_local(t);
            *at = secs;
        }
        buf.extend_from_slice(text.as_bytes());
    });
}

/// `dd/Mon/yyyy:HH:MM:SS +0000` (UTC).
fn time_local(t: SystemTime) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = tlslab_runtime::civil_from_days(days as i64);
    format!(
        "{d:02}/{}/{y}:{:02}:{:02}:{:02} +0000",
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// `$request`: method, path and query, version, escaped.
fn request_line<B>(req: &http::Request<B>) -> String {
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string());
    let version = match req.version() {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    };
    escape(format!("{} {target} {version}", req.method()).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_cached_time_follows_the_second() {
        let mut buf = Vec::new();
        for s in [1_795_308_244, 1_795_308_244, 1_795_308_245, 0] {
            push_time_local(&mut buf, UNIX_EPOCH + Duration::from_secs(s));
            buf.push(b'|');
        }
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "22/Nov/2026:00:44:04 +0000|22/Nov/2026:00:44:04 +0000|\
             22/Nov/2026:00:44:05 +0000|01/Jan/1970:00:00:00 +0000|"
        );
    }

    #[test]
    fn time_local_matches_known_dates() {
        let t = |s| time_local(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(t(0), "01/Jan/1970:00:00:00 +0000");
        assert_eq!(t(951_782_400), "29/Feb/2000:00:00:00 +0000");
        assert_eq!(t(1_795_308_244), "22/Nov/2026:00:44:04 +0000");
    }

    #[test]
    fn escape_quotes_and_controls() {
        assert_eq!(escape(b"a \"b\"\\\n"), "a \\x22b\\x22\\x5C\\x0A");
    }
}
