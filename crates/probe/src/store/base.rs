//! What both backends share: the [`Store`] trait, its error, the schema
//! (written once, in PostgreSQL's types, and translated for SQLite) and
//! the one mapping between a [`Sample`] and its stored columns.

use crate::sample::{Sample, Transport};

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

/// The schema version this build writes; migrations bring older files up.
pub const SCHEMA_VERSION: i64 = 2;

/// Migration `i` brings the schema from version `i` to `i + 1`, in
/// PostgreSQL's types; [`sqlite_types`] translates it for SQLite. Version
/// 2 adds HTTP/3: the transport of each sample (rows written before it
/// are `tcp`), the 0-RTT GET's first byte and whether its early data was
/// accepted.
pub(super) const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE rounds (
    id BIGSERIAL PRIMARY KEY,
    started_at_ms BIGINT NOT NULL,
    committed_at_ms BIGINT NOT NULL
);
CREATE TABLE samples (
    round_id BIGINT NOT NULL REFERENCES rounds(id),
    target TEXT NOT NULL,
    started_at_ms BIGINT NOT NULL,
    dns_us BIGINT, connect_us BIGINT, tls_full_us BIGINT, ttfb_us BIGINT,
    get_us BIGINT, total_us BIGINT, status INTEGER,
    resumed_connect_us BIGINT, tls_resumed_us BIGINT, resumed_get_us BIGINT,
    resumption_offered BOOLEAN, resumption_accepted BOOLEAN,
    version TEXT, suite TEXT, grp TEXT, alpn TEXT,
    cert_not_after BIGINT, chain_len BIGINT,
    full_handshake_bytes BIGINT, full_handshake_round_trips BIGINT,
    resumed_handshake_bytes BIGINT, resumed_handshake_round_trips BIGINT,
    error_phase TEXT, error_kind TEXT, error TEXT
);
CREATE INDEX samples_by_time ON samples(started_at_ms);
",
    r"
ALTER TABLE samples ADD COLUMN transport TEXT NOT NULL DEFAULT 'tcp';
ALTER TABLE samples ADD COLUMN zero_rtt_ttfb_us BIGINT;
ALTER TABLE samples ADD COLUMN early_data_accepted BOOLEAN;
",
];

const _: () = assert!(MIGRATIONS.len() as i64 == SCHEMA_VERSION);

/// A migration in SQLite's types: every number and boolean is an INTEGER,
/// and the round id the rowid.
pub(super) fn sqlite_types(migration: &str) -> String {
    migration
        .replace("BIGSERIAL PRIMARY KEY", "INTEGER PRIMARY KEY")
        .replace("BIGINT", "INTEGER")
        .replace("BOOLEAN", "INTEGER")
}

/// The stored columns of a sample, in the order [`params`] and
/// [`read_sample`] use.
pub(super) const COLUMNS: &str = "target, started_at_ms, dns_us, connect_us, tls_full_us, ttfb_us, get_us, \
    total_us, status, resumed_connect_us, tls_resumed_us, resumed_get_us, resumption_offered, \
    resumption_accepted, version, suite, grp, alpn, cert_not_after, chain_len, \
    full_handshake_bytes, full_handshake_round_trips, resumed_handshake_bytes, \
    resumed_handshake_round_trips, error_phase, error_kind, error, transport, zero_rtt_ttfb_us, \
    early_data_accepted";

/// How many [`COLUMNS`] there are.
pub(super) const N_COLUMNS: usize = 30;

/// One column's value, as a backend binds it.
#[derive(Debug)]
pub(super) enum Param<'a> {
    /// BIGINT.
    Int(Option<i64>),
    /// INTEGER (the HTTP status).
    Small(Option<i32>),
    /// BOOLEAN.
    Bool(Option<bool>),
    /// TEXT.
    Text(Option<&'a str>),
}

/// A sample's values, in [`COLUMNS`] order.
pub(super) fn params(s: &Sample) -> [Param<'_>; N_COLUMNS] {
    use Param::{Bool, Int, Small, Text};
    fn text(t: &Option<String>) -> Param<'_> {
        Text(t.as_deref())
    }
    [
        Text(Some(&s.target)),
        Int(Some(s.started_at_ms)),
        Int(s.dns_us),
        Int(s.connect_us),
        Int(s.tls_full_us),
        Int(s.ttfb_us),
        Int(s.get_us),
        Int(s.total_us),
        Small(s.status.map(i32::from)),
        Int(s.resumed_connect_us),
        Int(s.tls_resumed_us),
        Int(s.resumed_get_us),
        Bool(s.resumption_offered),
        Bool(s.resumption_accepted),
        text(&s.version),
        text(&s.suite),
        text(&s.group),
        text(&s.alpn),
        Int(s.cert_not_after),
        Int(s.chain_len),
        Int(s.full_handshake_bytes),
        Int(s.full_handshake_round_trips),
        Int(s.resumed_handshake_bytes),
        Int(s.resumed_handshake_round_trips),
        text(&s.error_phase),
        text(&s.error_kind),
        text(&s.error),
        Text(Some(s.transport.name())),
        Int(s.zero_rtt_ttfb_us),
        Bool(s.early_data_accepted),
    ]
}

/// A result row, read column by column in [`COLUMNS`] order.
pub(super) trait Row {
    /// The backend's error.
    type Error;
    /// A BIGINT column.
    fn int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
    /// An INTEGER column.
    fn small(&self, i: usize) -> Result<Option<i32>, Self::Error>;
    /// A BOOLEAN column.
    fn boolean(&self, i: usize) -> Result<Option<bool>, Self::Error>;
    /// A TEXT column.
    fn text(&self, i: usize) -> Result<Option<String>, Self::Error>;
}

/// The sample a row of [`COLUMNS`] holds.
pub(super) fn read_sample<R: Row>(r: &R) -> Result<Sample, R::Error> {
    Ok(Sample {
        target: r.text(0)?.unwrap_or_default(),
        started_at_ms: r.int(1)?.unwrap_or_default(),
        dns_us: r.int(2)?,
        connect_us: r.int(3)?,
        tls_full_us: r.int(4)?,
        ttfb_us: r.int(5)?,
        get_us: r.int(6)?,
        total_us: r.int(7)?,
        status: r.small(8)?.and_then(|s| u16::try_from(s).ok()),
        resumed_connect_us: r.int(9)?,
        tls_resumed_us: r.int(10)?,
        resumed_get_us: r.int(11)?,
        resumption_offered: r.boolean(12)?,
        resumption_accepted: r.boolean(13)?,
        version: r.text(14)?,
        suite: r.text(15)?,
        group: r.text(16)?,
        alpn: r.text(17)?,
        cert_not_after: r.int(18)?,
        chain_len: r.int(19)?,
        full_handshake_bytes: r.int(20)?,
        full_handshake_round_trips: r.int(21)?,
        resumed_handshake_bytes: r.int(22)?,
        resumed_handshake_round_trips: r.int(23)?,
        error_phase: r.text(24)?,
        error_kind: r.text(25)?,
        error: r.text(26)?,
        transport: r
            .text(27)?
            .as_deref()
            .and_then(Transport::from_name)
            .unwrap_or_default(),
        zero_rtt_ttfb_us: r.int(28)?,
        early_data_accepted: r.boolean(29)?,
        body_bytes: None,
        alt_svc: None,
    })
}

/// `INSERT INTO samples` of a round id and [`COLUMNS`], with the backend's
/// placeholders (`?N` or `$N`).
pub(super) fn insert_sample(placeholder: char) -> String {
    let values: Vec<String> = (1..=N_COLUMNS + 1)
        .map(|i| format!("{placeholder}{i}"))
        .collect();
    format!(
        "INSERT INTO samples (round_id, {COLUMNS}) VALUES ({})",
        values.join(", ")
    )
}
