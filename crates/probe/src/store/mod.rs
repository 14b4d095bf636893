//! Where rounds go: one [`Store`] trait, with SQLite behind it
//! ([`SqliteStore`]: bundled SQLite, WAL, one transaction per round, a
//! schema version table) and PostgreSQL ([`postgres`]). What the two share
//! is in `base`; each backend uses only that, and [`open`] picks one by the
//! `--db` value.

mod base;
pub mod postgres;
mod sqlite;

use std::path::Path;

pub use base::{Store, StoreError};
pub use sqlite::SqliteStore;

/// Opens the store `db` names: `postgres://…` or `postgresql://…` is a
/// PostgreSQL server, anything else a SQLite file (created if `create`).
pub fn open(db: &str, create: bool) -> Result<Box<dyn Store + Send>, StoreError> {
    if postgres::is_url(db) {
        Ok(Box::new(postgres::PostgresStore::open(db)?))
    } else {
        Ok(Box::new(SqliteStore::open(Path::new(db), create)?))
    }
}
