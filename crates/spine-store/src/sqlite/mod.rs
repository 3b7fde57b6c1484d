//! The embedded backend: one SQLite file in the data directory.
//!
//! Durability: WAL, and a write acknowledged to the caller has been flushed to the log, so
//! it survives the process (or the machine) dying right after. Writes that queue for the
//! one write connection commit together, each in a savepoint of one transaction
//! ([`combine`]), with `synchronous = NORMAL`; each writer waits for the flush after the
//! connection is let go ([`durable`]): one `fdatasync` covers every commit made before it
//! started, so writers arriving together share it and nobody holds the write connection
//! through a flush. Every write that touches several tables runs in one transaction (its
//! savepoint), so a crash leaves either the old or the new state, never a half-written
//! record. One exception: the strong-signal touch of `get_memory` (`access_count`,
//! `last_accessed_at`) is bookkeeping the caller did not ask to store and does not wait for
//! the flush: it is in the log when the call returns, so it survives the process dying, and
//! reaches the disk with the next write's flush or a checkpoint; a power loss before then can
//! lose the last touches, never a record or an edit.

mod audit;
mod checkpoint;
mod combine;
mod durable;
pub(crate) mod index;
mod open;
mod query;
mod readers;
mod review;
pub(crate) mod rows;
mod schema;
mod store;
mod summaries;
mod sync;
mod transfer;
mod verify;

pub use open::Layout;
pub(crate) use query::Where;
pub(crate) use rows::{write_row, write_vector};
use sync::{read_synced, sync_index};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use rusqlite::Connection;

use crate::{Result, StoreError};
use checkpoint::Checkpointer;
use combine::{Combiner, Kind, Outcome};
use durable::GroupSync;
use index::Index;
use readers::{Idle, Quiet};

/// SQL that stamps the current schema version on a payload edited in place, never lowering
/// it (SPEC Versioning 2 and 4). `body` is the column being updated.
pub(crate) const STAMP_VERSION: &str =
    "'$.schema_version', max(coalesce(json_extract(body, '$.schema_version'), 0), ?)";

/// The database file name inside the data directory.
pub const DB_FILE: &str = "spine.db";

/// SQLite-backed [`Store`].
///
/// One write connection behind a mutex (SQLite serialises writers anyway), and a pool of
/// read connections: in WAL mode readers never wait for the writer or for each other, so a
/// `get_memory` or a search does not queue behind another session's fsync. Each read sees
/// every write committed before it started. Vector search goes
/// through the in-memory [`Index`], which follows the `changes` log: before each search the
/// index applies whatever was committed since it last looked — by this process or any other
/// on the same data directory — so it is always as current as the database. Searches read
/// the index side by side under a read lock; one that finds it behind takes the write lock
/// to bring it up (`sync::read_synced`). Under one mutex, 16 cores' searches queued for each
/// other's scan of the index.
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    readers: Mutex<Vec<Idle>>,
    /// When this process last committed on the write connection: read connections map the
    /// file only once it has been quiet for [`QUIET`](readers::QUIET) ([`SqliteStore::read`]).
    commits: Quiet,
    /// The most idle read connections kept ([`idle_readers`](readers::idle_readers)).
    idle_readers: usize,
    path: PathBuf,
    index: RwLock<Index>,
    /// Searches scan exactly in SQL while the index is not loaded, rather than load it
    /// ([`SqliteStore::search_without_loading`]).
    scan_unloaded: AtomicBool,
    /// The attribution of the operator command this handle serves, if any
    /// ([`crate::TransferStore::audit_as`]).
    operator_audit: std::sync::OnceLock<crate::Access>,
    /// Writes waiting for the write connection, committed in batches ([`combine`]).
    writes: Combiner,
    /// Flushes of the log, shared by the writers waiting for one ([`durable`]), and by the
    /// checkpointer, which fails it when a checkpoint's own flush fails.
    wal: Arc<GroupSync>,
    /// Copies the log into the database beside the writers ([`checkpoint`]); `None` if its
    /// thread could not start (the write connection then checkpoints as SQLite does).
    #[cfg_attr(not(test), expect(dead_code, reason = "held for its drop, which ends the thread"))]
    checkpointer: Option<Checkpointer>,
}

impl SqliteStore {
    /// From now on, a search made while the search index is not loaded scans the records its
    /// filters leave exactly, in SQL, instead of loading the index first: for a process that
    /// searches once and exits (`spine hook prompt`), where reading every record into the
    /// index would cost more than the search (most of a hook's time at 100,000 records,
    /// against a scan of the one scope it searches; docs/performance.md, "Hooks"). Answers
    /// are the index's, exactly (its stages only ever approximate an exact scan). A loaded
    /// index serves as usual.
    pub fn search_without_loading(&self) {
        self.scan_unloaded.store(true, Ordering::Relaxed);
    }

    /// Whether searches scan in SQL now ([`SqliteStore::search_without_loading`]): the index
    /// not loaded.
    fn scans_unloaded(&self) -> bool {
        self.scan_unloaded.load(Ordering::Relaxed)
            && self.index.read().unwrap_or_else(|p| p.into_inner()).synced.is_none()
    }

    /// Whether the search index is loaded and free to read (not being loaded or brought up
    /// under its write lock this instant).
    fn index_loaded(&self) -> bool {
        self.index.try_read().is_ok_and(|index| index.synced.is_some())
    }

    /// Loads the search index now rather than on the first search (a server calls this on a
    /// background thread at start-up; at a million records the load takes seconds).
    pub fn warm_index(&self) -> Result<()> {
        let mut conn = self.lock();
        // Only reads: deferred, so another process's writes need not wait for the load.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)?;
        let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
        sync_index(&tx, &mut index)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the write connection, in a savepoint of a transaction it may share with
    /// other writes that arrived meanwhile ([`combine`]), and returns once that transaction
    /// has committed and is flushed to disk (module docs, "Durability"). Every write a
    /// caller is told succeeded goes through here. `f` runs inside that transaction (its
    /// own savepoint when the batch holds others): all of its statements are kept if it
    /// returns `Ok`, none if it returns an error.
    pub(crate) fn write<T: Send>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send,
    ) -> Result<T> {
        self.recover()?;
        let (out, through) = self.combined(Kind::Write, f)?;
        self.wal.wait(through).map_err(|e| StoreError::NotDurable(e.to_string()))?;
        out
    }

    /// After a failed flush of the log ([`durable`]): makes what is committed durable
    /// without trusting the log's flushes — a checkpoint copies every frame into the
    /// database file, which SQLite then flushes, and starts the log over — and lets writes
    /// resume; or, while that fails too (the disk still failing, a reader holding the log),
    /// the write is refused (`NotDurable`) before anything of it is committed. Nothing to do
    /// while the log is sound.
    fn recover(&self) -> Result<()> {
        let Some(failed) = self.wal.failed() else { return Ok(()) };
        let conn = self.lock();
        // Another writer may have recovered while this one waited for the connection.
        if self.wal.failed().is_none() {
            return Ok(());
        }
        let through = self.wal.written(conn.total_changes());
        let checkpointed = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match checkpointed {
            // Not busy: every frame is in the database file, flushed, and the log is empty.
            Ok((0, _, _)) => {
                self.wal.recovered(through);
                Ok(())
            }
            Ok(_) => Err(StoreError::NotDurable(
                durable::not_durable(&format!(
                    "{failed}; the checkpoint that would recover it could not complete yet"
                ))
                .to_string(),
            )),
            Err(e) => Err(StoreError::NotDurable(
                durable::not_durable(&format!("{failed}; recovering it failed too: {e}"))
                    .to_string(),
            )),
        }
    }

    /// Runs `f` as one write of `kind` in a batch ([`combine`]): its own result, and the log
    /// group its batch committed in. Does not wait for the flush.
    fn combined<T: Send>(
        &self,
        kind: Kind,
        f: impl FnOnce(&Connection) -> Result<T> + Send,
    ) -> Result<(Result<T>, u64)> {
        let mut out = None;
        let job = Box::new(|conn: &Connection| {
            let r = f(conn);
            let ok = r.is_ok();
            out = Some(r);
            ok
        });
        let outcome = self.writes.run(&self.conn, &self.wal, kind, job);
        self.commits.committed();
        match outcome {
            Outcome::Ran { through } => {
                let out = out
                    .unwrap_or_else(|| Err(StoreError::Io("a write's result went missing".into())));
                Ok((out, through))
            }
            Outcome::Failed(e) => Err(e.into()),
            Outcome::Panicked(payload) => std::panic::resume_unwind(payload),
        }
    }

    /// Runs `f` alone on the write connection, outside any batch: for what cannot run in a
    /// transaction shared with other writes (the schema's migrations, which run their own).
    /// Returns once what `f` committed is flushed to disk.
    fn write_alone<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let (out, through) = {
            let mut conn = self.lock();
            let out = f(&mut conn);
            self.commits.committed();
            (out, self.wal.written(conn.total_changes()))
        };
        self.wal.wait(through).map_err(|e| StoreError::NotDurable(e.to_string()))?;
        out
    }

    /// The write connection, for reads that must see it, and for writes that run alone:
    /// whoever holds it runs no batch meanwhile ([`combine`] takes it for each batch).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (transactions
        // roll back on drop), so a poisoned lock is safe to reuse.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests;
