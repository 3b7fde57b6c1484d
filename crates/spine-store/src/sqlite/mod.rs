//! The embedded backend: one SQLite file in the data directory.
//!
//! Durability: WAL with `synchronous = FULL`, so a write acknowledged to the caller has been
//! fsynced to the log and survives the process (or the machine) dying right after. Every
//! write that touches several tables runs in one transaction, so a crash leaves either the
//! old or the new state, never a half-written record.

mod query;
mod review;
pub(crate) mod rows;
mod schema;
mod store;
mod summaries;
mod sync;
mod transfer;
pub(crate) mod verify;

pub(crate) use query::Where;
pub(crate) use rows::{blob_to_vec, decode, write_row, write_vector};
use schema::MIGRATIONS;
use sync::sync_index;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

use crate::index::Index;
use crate::{Result, StoreError};

/// SQL that stamps the current schema version on a payload edited in place, never lowering
/// it (SPEC Versioning 2 and 4). `body` is the column being updated.
pub(crate) const STAMP_VERSION: &str =
    "'$.schema_version', max(coalesce(json_extract(body, '$.schema_version'), 0), ?)";

/// The database file name inside the data directory.
pub const DB_FILE: &str = "spine.db";

/// SQLite-backed [`Store`].
///
/// One connection behind a mutex: SQLite serialises writers anyway. Vector search goes
/// through the in-memory [`Index`], which follows the `changes` log: before each search the
/// index applies whatever was committed since it last looked — by this process or any other
/// on the same data directory — so it is always as current as the database.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    path: PathBuf,
    index: Mutex<Index>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`, applying pending migrations.
    pub fn open(data_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            StoreError::Io(format!("cannot create data directory {}: {e}", data_dir.display()))
        })?;
        let path = data_dir.join(DB_FILE);
        let conn = Connection::open(&path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let store = SqliteStore { conn: Mutex::new(conn), path, index: Mutex::default() };
        store.migrate()?;
        Ok(store)
    }

    /// Loads the search index now rather than on the first search (a server calls this on a
    /// background thread at start-up; at a million records the load takes seconds).
    pub fn warm_index(&self) -> Result<()> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        sync_index(&tx, &mut index)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (transactions
        // roll back on drop), so a poisoned lock is safe to reuse.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn migrate(&self) -> Result<()> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let applied: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let applied = usize::try_from(applied).unwrap_or(usize::MAX);
        if applied > MIGRATIONS.len() {
            return Err(StoreError::Io(format!(
                "the database at {} was written by a newer spine (schema {applied}, this binary knows {}); upgrade spine",
                self.path.display(),
                MIGRATIONS.len()
            )));
        }
        for (i, step) in MIGRATIONS.iter().enumerate().skip(applied) {
            tx.execute_batch(step)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tracing::info!(step = i + 1, "applied store migration");
        }
        tx.commit()?;
        Ok(())
    }
}
