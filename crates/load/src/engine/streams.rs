//! The streams of a multiplexed connection, HTTP/2's and HTTP/3's alike:
//! up to `-m` requests in flight, each one stream and one record, until `K`
//! were sent, the run is over, one failed, or the connection ended. A
//! browser's page ([`super::client::Page`]) sets its own: its objects, the
//! HTML alone, then the inline objects up to the model's parallelism.
//!
//! Each stream's future is polled here, in the connection's task (as
//! h2load does), not spawned: a task per stream cost a spawn, a join and a
//! timer. `--think-time`: a finished stream's slot stays taken for a think
//! time before it carries the next request (with `-m 1`, the pause between
//! requests of an HTTP/1.1 connection).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::client::{Client, Open};
use super::shared::{InFlight, Shared};

impl Client {
    /// Keeps up to `m` streams in flight on connection `conn_no`. `next`
    /// is the connection's first stream if it is still to be sent; `sent`
    /// counts the streams sent before (then done: the first thinks before
    /// the next). `launch` sends a stream's request and returns the future
    /// of its end; `done` records a finished stream and says whether the
    /// connection may carry more. Returns whether `ended` completed (the
    /// server closed the connection, or it broke).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn multiplex<'a, E, F>(
        &mut self,
        sh: &'a Shared,
        m: usize,
        conn_no: u64,
        mut sent: u32,
        mut next: Option<Open<'a>>,
        mut launch: impl FnMut(Open<'a>) -> F,
        ended: impl Future<Output = ()>,
        mut done: impl FnMut(&mut Client, Open<'a>, E) -> bool,
    ) -> bool
    where
        F: Future<Output = (Open<'a>, E)>,
    {
        let o = &sh.origins[self.ident.origin];
        // A browser's page: its objects, the HTML alone first (if it is
        // still to be sent), then its inline objects side by side.
        let (k, m, mut alone) = match &self.page {
            Some(p) => (p.len, p.parallel, next.is_some()),
            None => (sh.requests_per_conn, m, false),
        };
        let mut streams = FuturesUnordered::new();
        let mut closing = false;
        let mut ended = std::pin::pin!(ended);
        let mut conn_ended = false;
        // When each thinking slot becomes free.
        let mut thinking: BinaryHeap<Reverse<Instant>> = BinaryHeap::new();
        if next.is_none()
            && (k == 0 || sent < k)
            && let Some(d) = self.think_time()
        {
            thinking.push(Reverse(Instant::now() + d));
        }
        loop {
            let now = Instant::now();
            while thinking.peek().is_some_and(|t| t.0 <= now) {
                thinking.pop();
            }
            let m = if alone { 1 } else { m };
            while !closing && streams.len() + thinking.len() < m && (k == 0 || sent < k) {
                let stream = match next.take() {
                    Some(s) => s,
                    None => {
                        let Some(slot) = sh.next_slot() else {
                            closing = true;
                            break;
                        };
                        let start = Instant::now();
                        let (target, uri, retry) = self.next_target(o);
                        Open {
                            slot,
                            guard: InFlight::new(sh, slot),
                            rec: self.blank_record(conn_no, sent, target, start, retry),
                            uri,
                            start,
                        }
                    }
                };
                streams.push(launch(stream));
                sent += 1;
            }
            if streams.is_empty() && (closing || thinking.is_empty()) {
                return conn_ended;
            }
            let think_end = thinking.peek().map(|t| t.0);
            // Biased, streams before the connection: every stream a read
            // of the connection finished is recorded and replaced before
            // the connection is polled again, so their requests leave in
            // one write (HTTP/2 polls its connection here).
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(think_end.unwrap_or(now).into()), if think_end.is_some() => {}
                Some((st, end)) = streams.next() => {
                    alone = false;
                    if !done(self, st, end) {
                        closing = true;
                    } else if !closing
                        && (k == 0 || sent < k)
                        && let Some(d) = self.think_time()
                    {
                        // (After the connection's last stream, the loop
                        // around the connection thinks, as over HTTP/1.1.)
                        thinking.push(Reverse(Instant::now() + d));
                    }
                }
                () = &mut ended, if !conn_ended => {
                    // The streams in flight end now, with an error if cut off.
                    conn_ended = true;
                    closing = true;
                }
            }
        }
    }
}
