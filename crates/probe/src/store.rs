//! Where rounds go: one [`Store`] trait, with SQLite behind it (bundled
//! SQLite, WAL, one transaction per round, a schema version table) and
//! PostgreSQL ([`crate::postgres`]).

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, params};

use crate::Sample;

/// A database failure, naming the database and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be opened or is not a probe database.
    #[error("cannot open probe database {path}: {reason}")]
    Open {
        /// The database.
        path: String,
        /// Why, and what to do.
        reason: String,
    },
    /// Another process holds the write lock for longer than the busy timeout.
    #[error(
        "probe database {path} is locked by another process (busy for more than 5 s); \
         stop the other writer or use another --db"
    )]
    Locked {
        /// The database.
        path: String,
    },
    /// The database server cannot be reached: the round waits in memory
    /// and is written when it can be (PostgreSQL).
    #[error(
        "probe database {path} unreachable ({reason}): {queued} round(s) wait in memory, \
         {dropped} dropped from the full queue so far"
    )]
    Queued {
        /// The database.
        path: String,
        /// Why it cannot be reached.
        reason: String,
        /// Rounds waiting, this one included.
        queued: usize,
        /// Rounds dropped because the queue was full.
        dropped: u64,
    },
    /// A query failed.
    #[error("probe database {path}: {reason}")]
    Query {
        /// The database.
        path: String,
        /// The database's message.
        reason: String,
    },
}

/// Storage for probe rounds. A round is committed whole or not at all.
pub trait Store {
    /// Commits one round's samples in one transaction; returns the round's id.
    fn commit_round(&mut self, started_at_ms: i64, samples: &[Sample]) -> Result<i64, StoreError>;
    /// Samples started in `[since, until)` (milliseconds since the Unix
    /// epoch; `None`: unbounded), oldest first.
    fn samples(&self, since: Option<i64>, until: Option<i64>) -> Result<Vec<Sample>, StoreError>;
    /// Rounds committed so far.
    fn round_count(&self) -> Result<i64, StoreError>;
    /// Writes rounds that wait in memory, if the store keeps any; an error
    /// says how many are still waiting.
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

impl<S: Store + ?Sized> Store for Box<S> {
    fn commit_round(&mut self, started_at_ms: i64, samples: &[Sample]) -> Result<i64, StoreError> {
        (**self).commit_round(started_at_ms, samples)
    }
    fn samples(&self, since: Option<i64>, until: Option<i64>) -> Result<Vec<Sample>, StoreError> {
        (**self).samples(since, until)
    }
    fn round_count(&self) -> Result<i64, StoreError> {
        (**self).round_count()
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        (**self).flush()
    }
}

/// Opens the store `db` names: `postgres://…` or `postgresql://…` is a
/// PostgreSQL server, anything else a SQLite file (created if `create`).
pub fn open(db: &str, create: bool) -> Result<Box<dyn Store + Send>, StoreError> {
    if crate::postgres::is_url(db) {
        Ok(Box::new(crate::postgres::PostgresStore::open(db)?))
    } else {
        Ok(Box::new(SqliteStore::open(Path::new(db), create)?))
    }
}

/// The schema version this build writes; migrations bring older files up.
pub const SCHEMA_VERSION: i64 = 1;

/// Migration `i` brings the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[r"
CREATE TABLE rounds (
    id INTEGER PRIMARY KEY,
    started_at_ms INTEGER NOT NULL,
    committed_at_ms INTEGER NOT NULL
);
CREATE TABLE samples (
    round_id INTEGER NOT NULL REFERENCES rounds(id),
    target TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL,
    dns_us INTEGER, connect_us INTEGER, tls_full_us INTEGER, ttfb_us INTEGER,
    get_us INTEGER, total_us INTEGER, status INTEGER,
    resumed_connect_us INTEGER, tls_resumed_us INTEGER, resumed_get_us INTEGER,
    resumption_offered INTEGER, resumption_accepted INTEGER,
    version TEXT, suite TEXT, grp TEXT, alpn TEXT,
    cert_not_after INTEGER, chain_len INTEGER,
    full_handshake_bytes INTEGER, full_handshake_round_trips INTEGER,
    resumed_handshake_bytes INTEGER, resumed_handshake_round_trips INTEGER,
    error_phase TEXT, error_kind TEXT, error TEXT
);
CREATE INDEX samples_by_time ON samples(started_at_ms);
"];

pub(crate) const COLUMNS: &str = "target, started_at_ms, dns_us, connect_us, tls_full_us, ttfb_us, get_us, \
    total_us, status, resumed_connect_us, tls_resumed_us, resumed_get_us, resumption_offered, \
    resumption_accepted, version, suite, grp, alpn, cert_not_after, chain_len, \
    full_handshake_bytes, full_handshake_round_trips, resumed_handshake_bytes, \
    resumed_handshake_round_trips, error_phase, error_kind, error";

/// A SQLite probe database.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    conn: Connection,
}

impl SqliteStore {
    /// Opens (creating if `create`) the database at `path`, in WAL mode,
    /// and brings its schema to [`SCHEMA_VERSION`].
    pub fn open(path: &Path, create: bool) -> Result<Self, StoreError> {
        let p = path.display().to_string();
        let open_err = |reason: String| StoreError::Open {
            path: p.clone(),
            reason,
        };
        if !create && !path.exists() {
            return Err(open_err(
                "no such file; run `tlslab probe --db FILE URL...` first".into(),
            ));
        }
        let flags = if create {
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        };
        let conn = Connection::open_with_flags(path, flags).map_err(|e| open_err(e.to_string()))?;
        let mut store = SqliteStore {
            path: path.to_path_buf(),
            conn,
        };
        store.setup().map_err(|e| match e {
            StoreError::Query { reason, .. } => open_err(format!(
                "{reason} (is it a SQLite file written by tlslab probe?)"
            )),
            other => other,
        })?;
        Ok(store)
    }

    fn err(&self, e: rusqlite::Error) -> StoreError {
        if let rusqlite::Error::SqliteFailure(f, _) = &e
            && matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
        {
            return StoreError::Locked {
                path: self.path.display().to_string(),
            };
        }
        StoreError::Query {
            path: self.path.display().to_string(),
            reason: e.to_string(),
        }
    }

    fn setup(&mut self) -> Result<(), StoreError> {
        self.conn
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| self.err(e))?;
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Query {
                path: self.path.display().to_string(),
                reason: format!("could not switch to WAL (journal mode is {mode})"),
            });
        }
        // FULL: a committed round survives a power cut as well as kill -9.
        self.conn
            .execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")
            .map_err(|e| self.err(e))?;
        let tx = self.conn.transaction().map_err(|e| StoreError::Query {
            path: self.path.display().to_string(),
            reason: e.to_string(),
        })?;
        let q = |e: rusqlite::Error| StoreError::Query {
            path: String::new(),
            reason: e.to_string(),
        };
        tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            .map_err(q)?;
        let have: Option<i64> = tx
            .query_row("SELECT max(version) FROM schema_version", [], |r| r.get(0))
            .map_err(q)?;
        let have = have.unwrap_or(0);
        if have > SCHEMA_VERSION {
            return Err(StoreError::Open {
                path: self.path.display().to_string(),
                reason: format!(
                    "schema version {have} is newer than this tlslab's {SCHEMA_VERSION}; \
                     use a newer tlslab"
                ),
            });
        }
        for (i, m) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(have).unwrap_or(0))
        {
            tx.execute_batch(m).map_err(q)?;
            tx.execute(
                "INSERT INTO schema_version (version) VALUES (?1)",
                [i64::try_from(i).unwrap_or(0) + 1],
            )
            .map_err(q)?;
        }
        tx.commit().map_err(q)?;
        Ok(())
    }
}

impl Store for SqliteStore {
    fn commit_round(&mut self, started_at_ms: i64, samples: &[Sample]) -> Result<i64, StoreError> {
        let path = self.path.display().to_string();
        let q = |e: rusqlite::Error| match &e {
            rusqlite::Error::SqliteFailure(f, _)
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) =>
            {
                StoreError::Locked { path: path.clone() }
            }
            _ => StoreError::Query {
                path: path.clone(),
                reason: e.to_string(),
            },
        };
        let tx = self.conn.transaction().map_err(q)?;
        tx.execute(
            "INSERT INTO rounds (started_at_ms, committed_at_ms) VALUES (?1, ?2)",
            params![started_at_ms, crate::round::now_ms()],
        )
        .map_err(q)?;
        let id = tx.last_insert_rowid();
        {
            let mut st = tx
                .prepare_cached(&format!(
                    "INSERT INTO samples (round_id, {COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, \
                     ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, \
                     ?22, ?23, ?24, ?25, ?26, ?27, ?28)"
                ))
                .map_err(q)?;
            for s in samples {
                st.execute(params![
                    id,
                    s.target,
                    s.started_at_ms,
                    s.dns_us,
                    s.connect_us,
                    s.tls_full_us,
                    s.ttfb_us,
                    s.get_us,
                    s.total_us,
                    s.status,
                    s.resumed_connect_us,
                    s.tls_resumed_us,
                    s.resumed_get_us,
                    s.resumption_offered,
                    s.resumption_accepted,
                    s.version,
                    s.suite,
                    s.group,
                    s.alpn,
                    s.cert_not_after,
                    s.chain_len,
                    s.full_handshake_bytes,
                    s.full_handshake_round_trips,
                    s.resumed_handshake_bytes,
                    s.resumed_handshake_round_trips,
                    s.error_phase,
                    s.error_kind,
                    s.error,
                ])
                .map_err(q)?;
            }
        }
        tx.commit().map_err(q)?;
        Ok(id)
    }

    fn samples(&self, since: Option<i64>, until: Option<i64>) -> Result<Vec<Sample>, StoreError> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM samples WHERE started_at_ms >= ?1 AND started_at_ms < ?2 \
                 ORDER BY started_at_ms, rowid"
            ))
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(
                params![since.unwrap_or(i64::MIN), until.unwrap_or(i64::MAX)],
                |r| {
                    Ok(Sample {
                        target: r.get(0)?,
                        started_at_ms: r.get(1)?,
                        dns_us: r.get(2)?,
                        connect_us: r.get(3)?,
                        tls_full_us: r.get(4)?,
                        ttfb_us: r.get(5)?,
                        get_us: r.get(6)?,
                        total_us: r.get(7)?,
                        status: r.get(8)?,
                        resumed_connect_us: r.get(9)?,
                        tls_resumed_us: r.get(10)?,
                        resumed_get_us: r.get(11)?,
                        resumption_offered: r.get(12)?,
                        resumption_accepted: r.get(13)?,
                        version: r.get(14)?,
                        suite: r.get(15)?,
                        group: r.get(16)?,
                        alpn: r.get(17)?,
                        cert_not_after: r.get(18)?,
                        chain_len: r.get(19)?,
                        full_handshake_bytes: r.get(20)?,
                        full_handshake_round_trips: r.get(21)?,
                        resumed_handshake_bytes: r.get(22)?,
                        resumed_handshake_round_trips: r.get(23)?,
                        error_phase: r.get(24)?,
                        error_kind: r.get(25)?,
                        error: r.get(26)?,
                        body_bytes: None,
                    })
                },
            )
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    fn round_count(&self) -> Result<i64, StoreError> {
        self.conn
            .query_row("SELECT count(*) FROM rounds", [], |r| r.get(0))
            .map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(target: &str, at: i64) -> Sample {
        Sample {
            target: target.into(),
            started_at_ms: at,
            tls_full_us: Some(1500),
            tls_resumed_us: Some(700),
            resumption_accepted: Some(true),
            version: Some("1.3".into()),
            error_kind: None,
            ..Sample::default()
        }
    }

    #[test]
    fn rounds_round_trip_and_reopen_without_migrating_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.sqlite");
        let a = sample("https://a/", 1000);
        let mut b = sample("https://b/", 2000);
        b.error_kind = Some("timeout".into());
        b.error_phase = Some("connect".into());
        {
            let mut s = SqliteStore::open(&path, true).expect("open");
            s.commit_round(1000, std::slice::from_ref(&a))
                .expect("commit");
            s.commit_round(2000, std::slice::from_ref(&b))
                .expect("commit");
        }
        let s = SqliteStore::open(&path, false).expect("reopen");
        assert_eq!(s.round_count().expect("count"), 2);
        assert_eq!(s.samples(None, None).expect("all"), vec![a.clone(), b]);
        assert_eq!(s.samples(None, Some(2000)).expect("until"), vec![a]);
        let v: i64 = s
            .conn
            .query_row("SELECT count(*) FROM schema_version", [], |r| r.get(0))
            .expect("versions");
        assert_eq!(v, 1);
    }

    #[test]
    fn a_corrupt_file_and_a_missing_one_are_clear_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bad = dir.path().join("bad.sqlite");
        std::fs::write(&bad, vec![b'x'; 4096]).expect("write");
        let e = SqliteStore::open(&bad, true)
            .expect_err("corrupt")
            .to_string();
        assert!(
            e.contains("bad.sqlite") && e.contains("not a database"),
            "{e}"
        );
        let e = SqliteStore::open(&dir.path().join("none.sqlite"), false)
            .expect_err("missing")
            .to_string();
        assert!(e.contains("no such file"), "{e}");
    }

    #[test]
    fn a_locked_database_is_reported_as_locked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("l.sqlite");
        let mut s = SqliteStore::open(&path, true).expect("open");
        let other = Connection::open(&path).expect("second connection");
        other
            .execute_batch("BEGIN IMMEDIATE; INSERT INTO rounds VALUES (99, 0, 0);")
            .expect("hold the write lock");
        s.conn
            .busy_timeout(std::time::Duration::from_millis(100))
            .expect("short busy timeout");
        let e = s.commit_round(1, &[]).expect_err("locked");
        assert!(matches!(e, StoreError::Locked { .. }), "{e}");
        assert!(e.to_string().contains("locked"), "{e}");
    }
}
