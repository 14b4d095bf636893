//! The PostgreSQL store (`--db postgres://…`): the shared schema, one transaction per round, and a
//! bounded in-memory queue for rounds that arrive while the server is
//! unreachable.
//!
//! The [`Store`] trait is synchronous, while tokio-postgres is async: each
//! call runs on this store's own current-thread runtime, on a scoped
//! thread, so it works from a tokio worker as well as from plain code.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use bytes::BytesMut;
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::{Client, NoTls};

use super::base::{self, MIGRATIONS, Param, Row, SCHEMA_VERSION, Store, StoreError, read_sample};
use crate::sample::{Sample, now_ms};

/// Rounds kept while PostgreSQL is unreachable, by default; the oldest is
/// dropped (and counted) when a new one arrives to a full queue.
pub const DEFAULT_QUEUE_ROUNDS: usize = 1000;

/// How long a connection may take to be ready: the TCP connect and the
/// whole start-up exchange (TLS refusal, authentication, parameters), so a
/// server that accepts and never answers fails here rather than hanging.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long each database call (a migration, a round's transaction, a
/// report's query) may take before the connection is given up.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// A probe database on a PostgreSQL server.
pub struct PostgresStore {
    /// The URL without its password, for messages.
    shown: String,
    config: tokio_postgres::Config,
    rt: tokio::runtime::Runtime,
    client: Option<Client>,
    queue: VecDeque<(i64, Vec<Sample>)>,
    capacity: usize,
    dropped: u64,
    connect_timeout: Duration,
    query_timeout: Duration,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("db", &self.shown)
            .field("queued", &self.queue.len())
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

/// Why a database call failed: the server could not be reached (retry
/// later), or it answered with an error (do not).
enum Failure {
    Unreachable(String),
    Sql(String),
}

impl Failure {
    fn reason(self) -> String {
        match self {
            Failure::Unreachable(r) | Failure::Sql(r) => r,
        }
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Failure {
        match e.as_db_error() {
            Some(db) => Failure::Sql(format!("{} ({})", db.message(), db.code().code())),
            None => Failure::Unreachable(e.to_string()),
        }
    }
}

/// Runs `f` on `rt` for at most `limit`, from a scoped thread: `block_on`
/// cannot be called from inside another runtime's worker. A call that
/// does not finish in time is a [`Failure::Unreachable`] (the server
/// accepted but does not answer).
fn block<F, T>(rt: &tokio::runtime::Runtime, limit: Duration, f: F) -> Result<T, Failure>
where
    F: Future<Output = Result<T, tokio_postgres::Error>> + Send,
    T: Send,
{
    let r = std::thread::scope(|s| {
        match s
            .spawn(|| rt.block_on(async { tokio::time::timeout(limit, f).await }))
            .join()
        {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    match r {
        Ok(v) => v.map_err(Failure::from),
        Err(_) => Err(Failure::Unreachable(format!(
            "no answer within {limit:?}: the server accepted the connection but did not respond"
        ))),
    }
}

/// Removes the password from a connection URL, for messages.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_string(),
    }
}

/// Returns true if `db` names a PostgreSQL server rather than a SQLite file.
pub fn is_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// Checks a connection URL's syntax without connecting: a usage error.
pub fn check_url(url: &str) -> Result<(), String> {
    url.parse::<tokio_postgres::Config>()
        .map(|_| ())
        .map_err(|e| {
            format!(
                "--db {}: {e}; give postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE",
                without_password(url)
            )
        })
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user[:password]@host[:port]/db`) and
    /// brings the schema to the store's `SCHEMA_VERSION`. A server that cannot be
    /// reached is an error here: a probe never starts without its database.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_within(url, CONNECT_TIMEOUT, QUERY_TIMEOUT)
    }

    /// [`PostgresStore::open`] with other time limits: `connect` for a
    /// connection to be ready (TCP and the start-up exchange), `query`
    /// for each call.
    pub fn open_within(url: &str, connect: Duration, query: Duration) -> Result<Self, StoreError> {
        let shown = without_password(url);
        let open_err = |reason: String| StoreError::Open {
            path: shown.clone(),
            reason,
        };
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            open_err(format!(
                "{e}; give postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
            ))
        })?;
        config.connect_timeout(connect);
        config.application_name("tlslab-probe");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| open_err(format!("starting its runtime: {e}")))?;
        let mut store = PostgresStore {
            shown: shown.clone(),
            config,
            rt,
            client: None,
            queue: VecDeque::new(),
            capacity: DEFAULT_QUEUE_ROUNDS,
            dropped: 0,
            connect_timeout: connect,
            query_timeout: query,
        };
        store.connect().map_err(|f| match f {
            Failure::Unreachable(r) => open_err(format!(
                "{r}; is PostgreSQL running there, and does the URL name the right host, port and database?"
            )),
            Failure::Sql(r) => open_err(r),
        })?;
        store.migrate().map_err(|f| match f {
            Failure::Unreachable(r) | Failure::Sql(r) => open_err(r),
        })?;
        Ok(store)
    }

    /// Sets how many rounds may wait while the server is unreachable (at
    /// least 1).
    pub fn with_queue(mut self, rounds: usize) -> Self {
        self.capacity = rounds.max(1);
        self
    }

    /// Rounds waiting to be written.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Rounds dropped from a full queue since the store was opened.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn connect(&mut self) -> Result<(), Failure> {
        if self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(());
        }
        self.client = None;
        let config = &self.config;
        let client = block(&self.rt, self.connect_timeout, async {
            let (client, conn) = config.connect(NoTls).await?;
            // Runs whenever this runtime runs, that is during each call.
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok::<_, tokio_postgres::Error>(client)
        })?;
        self.client = Some(client);
        Ok(())
    }

    fn migrate(&mut self) -> Result<(), Failure> {
        let Some(client) = self.client.as_mut() else {
            return Err(Failure::Unreachable("not connected".into()));
        };
        let have = block(&self.rt, self.query_timeout, async {
            let tx = client.transaction().await?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL);
                 LOCK TABLE schema_version IN EXCLUSIVE MODE;",
            )
            .await?;
            let have: Option<i64> = tx
                .query_one("SELECT max(version) FROM schema_version", &[])
                .await?
                .get(0);
            let have = have.unwrap_or(0);
            if have > SCHEMA_VERSION {
                return Ok(have);
            }
            for (i, m) in MIGRATIONS
                .iter()
                .enumerate()
                .skip(usize::try_from(have).unwrap_or(0))
            {
                tx.batch_execute(m).await?;
                let v = i64::try_from(i).unwrap_or(0) + 1;
                tx.execute("INSERT INTO schema_version (version) VALUES ($1)", &[&v])
                    .await?;
            }
            tx.commit().await?;
            Ok::<_, tokio_postgres::Error>(have)
        })?;
        if have > SCHEMA_VERSION {
            return Err(Failure::Sql(format!(
                "schema version {have} is newer than this tlslab's {SCHEMA_VERSION}; use a newer tlslab"
            )));
        }
        Ok(())
    }

    /// Writes the queued rounds in order; returns the id of the last one.
    fn flush_queue(&mut self) -> Result<Option<i64>, Failure> {
        let mut last = None;
        while !self.queue.is_empty() {
            self.connect()?;
            let (Some((started, samples)), Some(client)) =
                (self.queue.front(), self.client.as_mut())
            else {
                return Err(Failure::Unreachable("not connected".into()));
            };
            // A connection lost during COMMIT leaves it unknown whether the
            // round was stored; it is then written again (a rare duplicate
            // rather than a loss).
            match block(
                &self.rt,
                self.query_timeout,
                insert_round(client, *started, samples),
            ) {
                Ok(id) => {
                    self.queue.pop_front();
                    last = Some(id);
                }
                Err(f) => {
                    if matches!(f, Failure::Unreachable(_)) {
                        self.client = None;
                    } else {
                        // The server refused it: retrying cannot help.
                        self.queue.pop_front();
                    }
                    return Err(f);
                }
            }
        }
        Ok(last)
    }

    fn queued_error(&self, reason: String) -> StoreError {
        StoreError::Queued {
            path: self.shown.clone(),
            reason,
            queued: self.queue.len(),
            dropped: self.dropped,
        }
    }
}

async fn insert_round(
    client: &mut Client,
    started_at_ms: i64,
    samples: &[Sample],
) -> Result<i64, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    let id: i64 = tx
        .query_one(
            "INSERT INTO rounds (started_at_ms, committed_at_ms) VALUES ($1, $2) RETURNING id",
            &[&started_at_ms, &now_ms()],
        )
        .await?
        .get(0);
    let st = tx.prepare(&base::insert_sample('$')).await?;
    for s in samples {
        let values = base::params(s);
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&id];
        all.extend(values.iter().map(|v| v as &(dyn ToSql + Sync)));
        tx.execute(&st, &all).await?;
    }
    tx.commit().await?;
    Ok(id)
}

impl Store for PostgresStore {
    /// Queues the round behind any that wait, then writes them in order. If
    /// the server cannot be reached, the round stays queued and the error is
    /// [`StoreError::Queued`]: the caller goes on, and the next call (or
    /// [`Store::flush`]) retries.
    fn commit_round(&mut self, started_at_ms: i64, samples: &[Sample]) -> Result<i64, StoreError> {
        self.queue.push_back((started_at_ms, samples.to_vec()));
        match self.flush_queue() {
            Ok(Some(id)) => Ok(id),
            Ok(None) => Err(StoreError::Query {
                path: self.shown.clone(),
                reason: "the round was not written".into(),
            }),
            Err(Failure::Unreachable(r)) => {
                // Still down: keep the newest rounds.
                while self.queue.len() > self.capacity {
                    self.queue.pop_front();
                    self.dropped += 1;
                }
                Err(self.queued_error(r))
            }
            Err(Failure::Sql(reason)) => Err(StoreError::Query {
                path: self.shown.clone(),
                reason,
            }),
        }
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        match self.flush_queue() {
            Ok(_) => Ok(()),
            Err(Failure::Unreachable(r)) => Err(self.queued_error(r)),
            Err(Failure::Sql(reason)) => Err(StoreError::Query {
                path: self.shown.clone(),
                reason,
            }),
        }
    }

    fn samples(&self, since: Option<i64>, until: Option<i64>) -> Result<Vec<Sample>, StoreError> {
        let Some(client) = self.client.as_ref() else {
            return Err(StoreError::Query {
                path: self.shown.clone(),
                reason: "not connected to PostgreSQL".into(),
            });
        };
        let (since, until) = (since.unwrap_or(i64::MIN), until.unwrap_or(i64::MAX));
        let rows = block(&self.rt, self.query_timeout, async {
            client
                .query(
                    &format!(
                        "SELECT {} FROM samples WHERE started_at_ms >= $1 \
                         AND started_at_ms < $2 ORDER BY started_at_ms, round_id, ctid",
                        base::COLUMNS
                    ),
                    &[&since, &until],
                )
                .await
        })
        .map_err(|f| StoreError::Query {
            path: self.shown.clone(),
            reason: f.reason(),
        })?;
        rows.iter()
            .map(read_sample)
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(|e| StoreError::Query {
                path: self.shown.clone(),
                reason: e.to_string(),
            })
    }

    fn round_count(&self) -> Result<i64, StoreError> {
        let Some(client) = self.client.as_ref() else {
            return Err(StoreError::Query {
                path: self.shown.clone(),
                reason: "not connected to PostgreSQL".into(),
            });
        };
        block(&self.rt, self.query_timeout, async {
            client.query_one("SELECT count(*) FROM rounds", &[]).await
        })
        .map(|r| r.get(0))
        .map_err(|f| StoreError::Query {
            path: self.shown.clone(),
            reason: f.reason(),
        })
    }
}

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.to_sql_checked(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        [Type::INT8, Type::INT4, Type::BOOL, Type::TEXT].contains(ty)
    }

    /// Each value checks its own type against the column's.
    fn to_sql_checked(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Int(v) => v.to_sql_checked(ty, out),
            Param::Small(v) => v.to_sql_checked(ty, out),
            Param::Bool(v) => v.to_sql_checked(ty, out),
            Param::Text(v) => v.to_sql_checked(ty, out),
        }
    }
}

impl Row for tokio_postgres::Row {
    type Error = tokio_postgres::Error;
    fn int(&self, i: usize) -> Result<Option<i64>, Self::Error> {
        self.try_get(i)
    }
    fn small(&self, i: usize) -> Result<Option<i32>, Self::Error> {
        self.try_get(i)
    }
    fn boolean(&self, i: usize) -> Result<Option<bool>, Self::Error> {
        self.try_get(i)
    }
    fn text(&self, i: usize) -> Result<Option<String>, Self::Error> {
        self.try_get(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            without_password("postgres://probe:s3cret@127.0.0.1:5432/db"),
            "postgres://probe:***@127.0.0.1:5432/db"
        );
        assert_eq!(
            without_password("postgres://probe@127.0.0.1/db"),
            "postgres://probe@127.0.0.1/db"
        );
    }

    #[test]
    fn an_unreachable_server_is_a_clear_open_error() {
        // A port nothing listens on: bind one, then free it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let e = PostgresStore::open(&format!("postgres://probe:pw@127.0.0.1:{port}/probe"))
            .expect_err("nothing listens")
            .to_string();
        assert!(e.contains("is PostgreSQL running"), "{e}");
        assert!(!e.contains("pw@"), "{e}");
        let e = PostgresStore::open("postgres://[bad")
            .expect_err("bad url")
            .to_string();
        assert!(e.contains("give postgres://"), "{e}");
    }

    /// Opening a store on `port` (a server that never answers, within
    /// `connect` or within the 500 ms query limit) fails in time, saying so.
    fn gives_up_within_500ms(port: u16, connect: Duration) {
        let t = std::time::Instant::now();
        let e = PostgresStore::open_within(
            &format!("postgres://probe@127.0.0.1:{port}/probe"),
            connect,
            Duration::from_millis(500),
        )
        .expect_err("the server never answers")
        .to_string();
        let took = t.elapsed();
        assert!(took < Duration::from_secs(3), "took {took:?}");
        assert!(e.contains("no answer within 500ms"), "{e}");
    }

    /// A listener nobody accepts on: the kernel completes the TCP
    /// handshake, and no byte ever comes back.
    #[test]
    fn a_server_that_accepts_and_never_answers_fails_within_the_connect_timeout() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = silent.local_addr().expect("addr").port();
        gives_up_within_500ms(port, Duration::from_millis(500));
        drop(silent);
    }

    /// A server that finishes the start-up exchange (trust authentication)
    /// and then never answers a query: the first query gives up.
    #[test]
    fn a_server_that_stops_answering_queries_fails_within_the_query_timeout() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            s.set_read_timeout(Some(Duration::from_secs(10))).ok();
            let mut len = [0u8; 4];
            s.read_exact(&mut len).expect("startup length");
            let mut rest = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
            s.read_exact(&mut rest).expect("startup message");
            // AuthenticationOk, then ReadyForQuery (idle).
            s.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0, b'Z', 0, 0, 0, 5, b'I'])
                .expect("write");
            // Read (and ignore) queries until the client goes.
            let mut buf = [0u8; 4096];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        });
        gives_up_within_500ms(port, Duration::from_secs(5));
        server.join().expect("server thread");
    }
}
