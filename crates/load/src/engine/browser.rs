//! The e-commerce browser: purchase sessions of pages, each page's HTML
//! first, then its inline objects side by side. Over HTTP/1.1 those go on
//! parallel connections, one request each, as the model's browser opened
//! them; over HTTP/2 and HTTP/3 a page is one connection, its inline
//! objects parallel streams on it ([`Page`]), as a browser speaking those
//! protocols multiplexes them. Either way at most the model's
//! `max_connections` objects are in flight at once, and each page's
//! connections offer the browser's held TLS session.
//!
//! In a closed loop each client is one browser, its sessions one after
//! another; in an open loop (`--rate`) each arrival is a new browser making
//! one session, its first request counted from the arrival's intended time
//! (the in-flight cap then counts sessions).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tlslab_workload::ecommerce::{Generator, Session};
use tokio::task::JoinSet;

use super::client::{Client, Page};
use super::shared::Slot;

/// The e-commerce model's state: the model, and the measured purchase
/// sessions, those of new customers, and the pages completed.
pub(super) struct BrowserRun {
    generator: Generator,
    sessions: AtomicU64,
    new_customers: AtomicU64,
    pages: AtomicU64,
}

impl BrowserRun {
    pub(super) fn new(generator: Generator) -> Self {
        BrowserRun {
            generator,
            sessions: AtomicU64::new(0),
            new_customers: AtomicU64::new(0),
            pages: AtomicU64::new(0),
        }
    }

    /// The report's `ecommerce` section.
    pub(super) fn report(&self) -> tlslab_stats::Ecommerce {
        let sessions = self.sessions.load(Ordering::Relaxed);
        let new_customers = self.new_customers.load(Ordering::Relaxed);
        tlslab_stats::Ecommerce {
            sessions,
            new_customers,
            returning_customers: sessions - new_customers,
            pages: self.pages.load(Ordering::Relaxed),
        }
    }
}

impl Client {
    /// A browser of the e-commerce model in a closed loop: purchase
    /// sessions one after another until the run ends.
    pub(super) async fn browse(&mut self, run: &BrowserRun) {
        let mut browser = run
            .generator
            .browser(self.sh.seed, u64::from(self.ident.id));
        while self.session(run, &browser.next_session(), None).await {}
    }

    /// An open loop's arrival: a new browser's one purchase session, its
    /// first request in the arrival's `slot`, counted from `intended`.
    pub(super) async fn arrive(&mut self, run: &BrowserRun, slot: Slot, intended: Instant) {
        let mut browser = run
            .generator
            .browser(self.sh.seed, u64::from(self.ident.id));
        let session = browser.next_session();
        self.session(run, &session, Some((slot, intended))).await;
    }

    /// One purchase session: each page's HTML alone first, then its inline
    /// objects over at most `max_connections` parallel connections (one
    /// request each), or as that many parallel streams on the page's one
    /// HTTP/2 or HTTP/3 connection; the next page only after the whole
    /// page, then the page's think time. Returns false once the run is over.
    async fn session(
        &mut self,
        run: &BrowserRun,
        session: &Session,
        mut arrival: Option<(Slot, Instant)>,
    ) -> bool {
        let sh = self.sh.clone();
        let max = run.generator.config().max_connections.max(1);
        if session.clear_tls_sessions
            && let Some(tls) = &self.ident.tls
        {
            tls.sessions.clear();
        }
        let mut counted = false;
        for page in &session.pages {
            let Some((html, inline)) = page.objects.split_first() else {
                continue;
            };
            let (slot, intended) = match arrival.take() {
                Some((slot, t)) => (slot, Some(t)),
                None => match sh.next_slot() {
                    Some(slot) => (slot, None),
                    None => return false,
                },
            };
            if !counted && slot == Slot::Measured {
                run.sessions.fetch_add(1, Ordering::Relaxed);
                if session.new_customer {
                    run.new_customers.fetch_add(1, Ordering::Relaxed);
                }
            }
            counted = true;
            self.back_off().await;
            if sh.http2.is_some() || sh.quic.is_some() {
                let objects: VecDeque<_> = page
                    .objects
                    .iter()
                    .filter_map(|o| sh.target_of(&o.path))
                    .collect();
                self.page = Some(Page {
                    len: objects.len() as u32,
                    objects,
                    parallel: max,
                });
                self.connection(&sh, slot, intended).await;
                let left = self.page.take().map_or(0, |p| p.objects.len());
                // Objects not requested: the run ended (else a failed
                // connection, and the browser goes on to the next page).
                if left > 0 && !sh.more_to_come() {
                    return false;
                }
            } else {
                self.fixed = sh.target_of(&html.path);
                self.connection(&sh, slot, intended).await;
                let mut set = JoinSet::new();
                let mut over = false;
                for obj in inline {
                    while set.len() >= max {
                        let _ = set.join_next().await;
                    }
                    let Some(slot) = sh.next_slot() else {
                        over = true;
                        break;
                    };
                    let mut c = Client::new(sh.clone(), self.ident.clone());
                    c.fixed = sh.target_of(&obj.path);
                    set.spawn(async move {
                        let sh = c.sh.clone();
                        c.connection(&sh, slot, None).await;
                    });
                }
                while set.join_next().await.is_some() {}
                if over {
                    return false;
                }
            }
            if slot == Slot::Measured {
                run.pages.fetch_add(1, Ordering::Relaxed);
            }
            if !page.think_after.is_zero() {
                tokio::time::sleep(page.think_after).await;
            }
        }
        true
    }
}
