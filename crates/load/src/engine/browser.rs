//! The e-commerce browser: purchase sessions of pages, each page's HTML
//! first, then its inline objects over parallel connections.

use std::sync::atomic::{AtomicU64, Ordering};

use tlslab_workload::ecommerce::Generator;
use tokio::task::JoinSet;

use super::client::Client;
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
    /// A browser of the e-commerce model: purchase sessions one after
    /// another, each page's HTML alone first, then its inline objects over
    /// at most `max_connections` parallel connections (one request each),
    /// the next page only after the whole page, then the page's think time.
    pub(super) async fn browse(&mut self, run: &BrowserRun) {
        let sh = self.sh.clone();
        let max = run.generator.config().max_connections.max(1);
        let mut browser = run.generator.browser(sh.seed, u64::from(self.ident.id));
        loop {
            let session = browser.next_session();
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
                let Some(slot) = sh.next_slot() else { return };
                if !counted && slot == Slot::Measured {
                    run.sessions.fetch_add(1, Ordering::Relaxed);
                    if session.new_customer {
                        run.new_customers.fetch_add(1, Ordering::Relaxed);
                    }
                }
                counted = true;
                self.back_off().await;
                self.fixed = sh.target_of(&html.path);
                self.connection(&sh, slot, None).await;
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
                    return;
                }
                if slot == Slot::Measured {
                    run.pages.fetch_add(1, Ordering::Relaxed);
                }
                if !page.think_after.is_zero() {
                    tokio::time::sleep(page.think_after).await;
                }
            }
        }
    }
}
