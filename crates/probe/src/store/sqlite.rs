//! The SQLite store: bundled SQLite, WAL, one transaction per round, and
//! a schema version table.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, params};

use super::base::{self, MIGRATIONS, Param, Row, SCHEMA_VERSION, Store, StoreError, read_sample};
use crate::sample::{Sample, now_ms};

/// A SQLite probe database.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    conn: Connection,
}

impl SqliteStore {
    /// Opens (creating if `create`) the database at `path`, in WAL mode,
    /// and brings its schema to the store's `SCHEMA_VERSION`.
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
        error_at(&self.path, e)
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
            tx.execute_batch(&base::sqlite_types(m)).map_err(q)?;
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
        let path = self.path.clone();
        let q = |e| error_at(&path, e);
        let tx = self.conn.transaction().map_err(q)?;
        tx.execute(
            "INSERT INTO rounds (started_at_ms, committed_at_ms) VALUES (?1, ?2)",
            params![started_at_ms, now_ms()],
        )
        .map_err(q)?;
        let id = tx.last_insert_rowid();
        {
            let mut st = tx.prepare_cached(&base::insert_sample('?')).map_err(q)?;
            for s in samples {
                let values = base::params(s);
                let mut all: Vec<&dyn rusqlite::ToSql> = vec![&id];
                all.extend(values.iter().map(|v| v as &dyn rusqlite::ToSql));
                st.execute(all.as_slice()).map_err(q)?;
            }
        }
        tx.commit().map_err(q)?;
        Ok(id)
    }

    fn samples(&self, since: Option<i64>, until: Option<i64>) -> Result<Vec<Sample>, StoreError> {
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {} FROM samples WHERE started_at_ms >= ?1 AND started_at_ms < ?2 \
                 ORDER BY started_at_ms, rowid",
                base::COLUMNS
            ))
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(
                params![since.unwrap_or(i64::MIN), until.unwrap_or(i64::MAX)],
                |r| read_sample(r),
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

/// A SQLite error on `path`: [`StoreError::Locked`] when another writer
/// holds the lock past the busy timeout, else [`StoreError::Query`].
fn error_at(path: &Path, e: rusqlite::Error) -> StoreError {
    let path = path.display().to_string();
    if let rusqlite::Error::SqliteFailure(f, _) = &e
        && matches!(
            f.code,
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
        )
    {
        return StoreError::Locked { path };
    }
    StoreError::Query {
        path,
        reason: e.to_string(),
    }
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Param::Int(v) => v.to_sql(),
            Param::Small(v) => v.to_sql(),
            Param::Bool(v) => v.to_sql(),
            Param::Text(v) => v.to_sql(),
        }
    }
}

impl Row for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    fn int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }
    fn small(&self, i: usize) -> rusqlite::Result<Option<i32>> {
        self.get(i)
    }
    fn boolean(&self, i: usize) -> rusqlite::Result<Option<bool>> {
        self.get(i)
    }
    fn text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Transport;

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
        assert_eq!(v, SCHEMA_VERSION);
    }

    /// A database written before HTTP/3 (schema version 1, made here with
    /// that version's own DDL, not this build's migrations) still reads,
    /// its samples as TCP, and gains the transport column and HTTP/3's
    /// columns, so HTTP/3 samples can follow.
    #[test]
    fn a_version_1_database_is_migrated_and_its_samples_read_as_tcp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("v1.sqlite");
        {
            let old = Connection::open(&path).expect("create");
            old.execute_batch(
                "CREATE TABLE schema_version (version INTEGER NOT NULL);
                 INSERT INTO schema_version (version) VALUES (1);
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
                 INSERT INTO rounds VALUES (1, 1000, 1001);
                 INSERT INTO samples (round_id, target, started_at_ms, connect_us, tls_full_us,
                     tls_resumed_us, resumption_offered, resumption_accepted, version)
                     VALUES (1, 'https://old/', 1000, 300, 1500, 700, 1, 1, '1.3');",
            )
            .expect("the version 1 schema and one round");
        }
        let mut s = SqliteStore::open(&path, false).expect("open migrates");
        let old = s.samples(None, None).expect("old samples read");
        assert_eq!(old.len(), 1);
        assert_eq!(old[0].transport, Transport::Tcp);
        assert_eq!(
            (old[0].connect_us, old[0].tls_full_us, old[0].tls_resumed_us),
            (Some(300), Some(1500), Some(700))
        );
        assert_eq!(old[0].resumption_accepted, Some(true));
        let columns: Vec<String> = s
            .conn
            .prepare("SELECT name FROM pragma_table_info('samples')")
            .and_then(|mut st| {
                st.query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .expect("columns");
        for c in ["transport", "zero_rtt_ttfb_us", "early_data_accepted"] {
            assert!(columns.iter().any(|n| n == c), "no {c} in {columns:?}");
        }
        let version: i64 = s
            .conn
            .query_row("SELECT max(version) FROM schema_version", [], |r| r.get(0))
            .expect("version");
        assert_eq!(version, SCHEMA_VERSION);
        // An HTTP/3 sample now goes in beside the old one and reads back.
        let h3 = Sample {
            transport: Transport::H3,
            zero_rtt_ttfb_us: Some(900),
            early_data_accepted: Some(true),
            ..sample("https://old/", 2000)
        };
        s.commit_round(2000, std::slice::from_ref(&h3))
            .expect("commit");
        drop(s);
        let s = SqliteStore::open(&path, false).expect("reopen");
        assert_eq!(s.samples(Some(2000), None).expect("new"), vec![h3]);
        assert_eq!(s.round_count().expect("rounds"), 2);
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
