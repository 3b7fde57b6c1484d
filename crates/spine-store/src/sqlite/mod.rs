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

mod checkpoint;
mod combine;
mod durable;
pub(crate) mod index;
mod query;
mod review;
pub(crate) mod rows;
mod schema;
mod store;
mod summaries;
mod sync;
mod transfer;
mod verify;

pub(crate) use query::Where;
pub(crate) use rows::{write_row, write_vector};
use schema::MIGRATIONS;
use sync::{read_synced, sync_index};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::{Result, StoreError};
use checkpoint::Checkpointer;
use combine::{Combiner, Kind, Outcome};
use durable::GroupSync;
use index::Index;

/// SQL that stamps the current schema version on a payload edited in place, never lowering
/// it (SPEC Versioning 2 and 4). `body` is the column being updated.
pub(crate) const STAMP_VERSION: &str =
    "'$.schema_version', max(coalesce(json_extract(body, '$.schema_version'), 0), ?)";

/// The database file name inside the data directory.
pub const DB_FILE: &str = "spine.db";

/// Idle read connections kept for reuse, per CPU the process may use (at least
/// [`MIN_IDLE_READERS`]); more are opened while more readers run at once. A new connection
/// starts with an empty page cache: with 8 kept on a 16-core machine, 50 sessions
/// searching at once opened one for most searches, and each then read its pages back from
/// the OS (~14 CPU-ms a search; 464 calls/s against 670 with 64 kept). A connection's cache
/// holds only the pages it has read, up to [`CACHE_KIB`].
const IDLE_READERS_PER_CPU: usize = 4;

/// The fewest idle read connections kept, whatever the CPU count.
const MIN_IDLE_READERS: usize = 8;

/// How many idle read connections a store keeps ([`IDLE_READERS_PER_CPU`]).
fn idle_readers() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    (cpus * IDLE_READERS_PER_CPU).max(MIN_IDLE_READERS)
}

/// Each connection's page cache, in KiB (`PRAGMA cache_size`; SQLite's default is 2,000).
/// A search reads ~250 vectors, ~120 bodies and the neighbours' rows; with the default, a
/// store of a few thousand records no longer fits and every search re-reads pages from the
/// OS (`pread` and its copy were a sixth of a search's time, `perf`). With 8 MiB a search
/// at 2,000 records reads ~10 pages from the OS instead of ~250 (`strace`), and its p50
/// without the embedding fell 0.3–0.7 ms at 2,000 records (2.4–3.1 → 1.7–2.8 ms) and ~1 ms
/// at 10,000 (4.2–4.8 → 3.3–3.5 ms; `spine-bench search`, EPYC, runs interleaved). Pages
/// are allocated as they are read, so a small store costs what it holds; at most 8 MiB per
/// open connection. Beyond it, pages come from the memory map ([`MMAP_BYTES`]).
const CACHE_KIB: i64 = 8 * 1024;

/// How much of the database file each connection reads through a memory map (`PRAGMA
/// mmap_size`; SQLite caps it at its compile-time limit, 2 GiB here).
///
/// Without it every page a connection's cache lacks is a `pread` and a copy, and each
/// connection caches its own: on a 6,000-record store of 2,000-character notes (21 MB) a
/// search made ~190 `pread`s (`strace`), most of its vector and body reads. Mapped, the
/// pages are the OS page cache itself, shared by every connection and read without a
/// system call: the server's CPU outside the embedder fell from 5.9–6.5 to 4.9–5.3 ms a
/// search, and 4 sessions searching went from 141–156 to 159–173 calls/s (the device kit's
/// `rawload.py`, EPYC, runs alternated; docs/performance.md). SQLite only reads
/// through the map (writes still go through the log), so durability is unchanged. The cost
/// is the usual one of mapped files: an I/O error while reading a mapped page (a failing
/// disk, the file truncated by another program) stops the process with SIGBUS where it would
/// have been an error — as it already would for the WAL index, which SQLite always maps.
///
/// A read connection maps the file only while this process has committed nothing for
/// [`QUIET`] ([`SqliteStore::read`]): a connection that begins a read after another
/// connection's commit drops its page cache and, mapped, unmaps the whole file (SQLite's
/// `pagerBeginReadTransaction`), then faults each page it reads back in. Under a steady
/// stream of writes that was nearly every read. A search on 10,000 records with 200 writes a
/// second beside it cost 2.2–4.2 CPU-ms and 140–188 page faults mapped, 1.7–3.1 CPU-ms and
/// none with `pread`; alone, 1.3–1.4 CPU-ms mapped against 1.5–1.6 with `pread` (`spine-bench
/// search 10000 --writes 200`, VNNI Xeon, 2 cores). With 16 sessions on `get_memory`,
/// `list_memory` and `update_memory`, the server unmapped the file 1,500–2,000 times a
/// second (2 with this rule); each unmap by a process running on many cores interrupts all
/// of them to flush their address translations.
const MMAP_BYTES: i64 = 2 << 30;

/// How long after this process's last commit read connections read with `pread` rather
/// than through the memory map ([`MMAP_BYTES`]): long beside the gap between one agent's
/// writes in a burst, short beside the pauses between bursts, so a store written now and
/// then is read mapped nearly all the time, and one written every second never is.
const QUIET: Duration = Duration::from_secs(1);

/// When a store last committed, read without a lock: whether it has been quiet for a while.
struct Quiet {
    opened: Instant,
    /// Nanoseconds from `opened` to the last commit, plus one; 0 before any.
    last: AtomicU64,
    /// How long without a commit is quiet.
    after: Duration,
}

impl Quiet {
    fn new(after: Duration) -> Self {
        Quiet { opened: Instant::now(), last: AtomicU64::new(0), after }
    }

    /// Notes a commit (or an attempt: one that failed costs a reader nothing).
    fn committed(&self) {
        let at = u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        self.last.store(at + 1, Ordering::Relaxed);
    }

    /// Whether nothing was committed for [`Quiet::after`].
    fn quiet(&self) -> bool {
        match self.last.load(Ordering::Relaxed) {
            0 => true,
            at => self.opened.elapsed().as_nanos() >= u128::from(at - 1) + self.after.as_nanos(),
        }
    }
}

/// `PRAGMA synchronous` of the write connection: a commit writes the log without flushing
/// it; [`SqliteStore::write`] waits for the flush after letting the connection go (module
/// docs, "Durability").
const COMMIT_SYNC: &str = "NORMAL";

/// Compiled statements each connection keeps (rusqlite's default is 16). The write
/// connection alone runs ~20 distinct cached statements (each kind of write, the batch's
/// framing, the reads that must see it); past the capacity the least recently used is
/// compiled again on its next use.
const STATEMENT_CACHE: usize = 64;

/// What every connection, the writer's and the readers', is opened with: the wait for a
/// busy database, the page cache and memory map, and plans that do not depend on bound
/// values.
///
/// The last keeps cached statements compiled. SQLite marks a parameter whose value might
/// change the plan (a bound LIMIT, `col = ?` on a column no index serves, …), and
/// `sqlite3_clear_bindings`, which rusqlite calls on every statement it returns to its
/// cache, then expires the whole statement: each reuse of such a statement compiled it
/// again (~50 µs for a neighbour read, 40 of them a search). With the query planner
/// stability guarantee (`SQLITE_DBCONFIG_ENABLE_QPSG`) nothing is marked; the plans are
/// those SQLite picks without the values, which is how Spine's queries are written.
fn open_connection(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_WAIT)?;
    conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
    conn.pragma_update(None, "mmap_size", MMAP_BYTES)?;
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// How long a connection waits for a lock another connection holds before it answers
/// "database is locked" (`busy_timeout`, and [`enter_wal`]'s retries).
const BUSY_WAIT: Duration = Duration::from_secs(10);

/// Puts the database in WAL mode (a lasting property of the file: a no-op once any
/// process has done it).
///
/// The first switch takes the exclusive lock, and SQLite answers a connection that meets
/// another's lock on the way with "database is locked" at once, without the busy wait:
/// agents started together on a fresh data directory (ten `spine mcp` at once) lost one
/// now and then at start-up. The switch is retried until it succeeds or [`BUSY_WAIT`]
/// passes; another process finishing it first is success.
fn enter_wal(conn: &Connection, path: &Path) -> Result<()> {
    let deadline = Instant::now() + BUSY_WAIT;
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
            Ok(mode) => {
                if !mode.eq_ignore_ascii_case("wal") {
                    tracing::warn!(path = %path.display(), mode, "the database cannot use WAL mode; readers will wait for writers");
                }
                return Ok(());
            }
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

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
    /// file only once it has been quiet for [`QUIET`] ([`SqliteStore::read`]).
    commits: Quiet,
    /// The most idle read connections kept ([`idle_readers`]).
    idle_readers: usize,
    path: PathBuf,
    index: RwLock<Index>,
    /// Searches scan exactly in SQL while the index is not loaded, rather than load it
    /// ([`SqliteStore::search_without_loading`]).
    scan_unloaded: AtomicBool,
    /// Writes waiting for the write connection, committed in batches ([`combine`]).
    writes: Combiner,
    /// Flushes of the log, shared by the writers waiting for one ([`durable`]).
    wal: GroupSync,
    /// Copies the log into the database beside the writers ([`checkpoint`]); `None` if its
    /// thread could not start (the write connection then checkpoints as SQLite does).
    #[cfg_attr(not(test), expect(dead_code, reason = "held for its drop, which ends the thread"))]
    checkpointer: Option<Checkpointer>,
}

/// A read connection out of [`SqliteStore`]'s pool, returned to it on drop.
pub(crate) struct Reader<'a> {
    store: &'a SqliteStore,
    conn: Option<Connection>,
    /// Whether it reads through the memory map ([`MMAP_BYTES`]).
    mapped: bool,
}

/// A read connection in the pool.
struct Idle {
    conn: Connection,
    mapped: bool,
}

impl std::ops::Deref for Reader<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for Reader<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("present until drop")
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        // A transaction left open by a failed read would pin an old snapshot.
        if !conn.is_autocommit() {
            return;
        }
        let mut idle = self.store.readers.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.store.idle_readers {
            idle.push(Idle { conn, mapped: self.mapped });
        }
    }
}

/// Where a store's layout stands ([`SqliteStore::layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The migration step the database is at.
    pub at: usize,
    /// The step this binary brings it to on open.
    pub current: usize,
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `data_dir`, applying pending migrations.
    pub fn open(data_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            StoreError::Io(format!("cannot create data directory {}: {e}", data_dir.display()))
        })?;
        let path = data_dir.join(DB_FILE);
        let mut conn = open_connection(&path)?;
        // A transaction that reads before it writes (update_memory's ownership check) would
        // otherwise start as a reader and upgrade at its first write; SQLite answers an
        // upgrade that finds the write lock taken with SQLITE_BUSY at once, without the
        // busy wait, and another connection takes that lock now and then (a reader
        // rebuilding a torn WAL-index header, another process writing). Taking the write
        // lock at BEGIN waits for it like any other write.
        conn.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
        enter_wal(&conn, &path)?;
        conn.pragma_update(None, "synchronous", COMMIT_SYNC)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let conn = Arc::new(Mutex::new(conn));
        let checkpointer = Checkpointer::start(open_connection(&path)?, &conn);
        let store = SqliteStore {
            conn,
            readers: Mutex::default(),
            commits: Quiet::new(QUIET),
            idle_readers: idle_readers(),
            writes: Combiner::default(),
            wal: GroupSync::new(&path),
            path,
            index: RwLock::default(),
            scan_unloaded: AtomicBool::new(false),
            checkpointer,
        };
        store.migrate()?;
        Ok(store)
    }

    /// The layout of the store in `data_dir`, read without changing anything (no directory
    /// created, no migration applied): the migration step its database is at and the step
    /// this binary brings it to. [`SqliteStore::open`] applies the difference; `spine doctor`
    /// reads this first, so that checking a store never upgrades it.
    pub fn layout(data_dir: &Path) -> Result<Layout> {
        let path = data_dir.join(DB_FILE);
        let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        conn.busy_timeout(BUSY_WAIT)?;
        conn.pragma_update(None, "query_only", "ON")?;
        let at: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        Ok(Layout { at: usize::try_from(at).unwrap_or(usize::MAX), current: MIGRATIONS.len() })
    }

    /// From now on, a search made while the search index is not loaded scans the records its
    /// filters leave exactly, in SQL, instead of loading the index first: for a process that
    /// searches once and exits (`spine hook prompt`), where reading every record into the
    /// index would cost more than the search (0.3 s at 100,000 records, against a scan of
    /// the one scope it searches). Answers are the index's, exactly (its stages only ever
    /// approximate an exact scan). A loaded index serves as usual.
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
        let (out, through) = self.combined(Kind::Write, f)?;
        self.wal.wait(through).map_err(|e| StoreError::Io(format!("flushing the log: {e}")))?;
        out
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
        self.wal.wait(through).map_err(|e| StoreError::Io(format!("flushing the log: {e}")))?;
        out
    }

    /// The write connection, for reads that must see it, and for writes that run alone:
    /// whoever holds it runs no batch meanwhile ([`combine`] takes it for each batch).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (transactions
        // roll back on drop), so a poisoned lock is safe to reuse.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A read connection (module docs of [`SqliteStore`]): only for statements that write
    /// nothing; it refuses writes (`query_only`).
    pub(crate) fn read(&self) -> Result<Reader<'_>> {
        let idle = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let Idle { conn, mut mapped } = match idle {
            Some(idle) => idle,
            None => {
                let conn = open_connection(&self.path)?;
                conn.pragma_update(None, "query_only", "ON")?;
                Idle { conn, mapped: true }
            }
        };
        // Mapped only while the store is quiet ([`MMAP_BYTES`]): after a commit a mapped
        // reader drops its map at its next read and faults every page back in. Writes by
        // other processes are not seen here; they cost what they always did.
        // A connection whose setting could not be changed reads as it did: slower, not wrong.
        let map = self.commits.quiet();
        if map != mapped {
            match conn.pragma_update(None, "mmap_size", if map { MMAP_BYTES } else { 0 }) {
                Ok(()) => mapped = map,
                Err(e) => tracing::debug!(error = %e, "cannot change a reader's memory map"),
            }
        }
        Ok(Reader { store: self, conn: Some(conn), mapped })
    }

    /// Applies the migrations the database lacks. Nearly every open finds none: that is read
    /// without the write lock, so a process starting beside another's long write (an
    /// import, a purge) does not wait for it, and, having committed nothing, reads through
    /// the memory map from its first read ([`QUIET`]).
    fn migrate(&self) -> Result<()> {
        let at: i64 = self.lock().pragma_query_value(None, "user_version", |r| r.get(0))?;
        if usize::try_from(at).is_ok_and(|at| at == MIGRATIONS.len()) {
            return Ok(());
        }
        self.write_alone(|conn| self.migrate_on(conn))
    }

    fn migrate_on(&self, conn: &mut Connection) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Store;

    /// A cached statement is compiled once, however its values change, even where SQLite
    /// would mark them as shaping the plan (see `open_connection`).
    #[test]
    fn cached_statements_are_not_compiled_again_for_new_values() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_connection(&dir.path().join("t.db")).unwrap();
        conn.execute_batch("CREATE TABLE t (a TEXT, b TEXT); CREATE INDEX t_a ON t (a);").unwrap();
        let sql = "SELECT count(*) FROM t WHERE a = ?1 AND b = ?2 LIMIT ?3";
        for i in 0..5_i64 {
            let mut stmt = conn.prepare_cached(sql).unwrap();
            let n: i64 =
                stmt.query_row(rusqlite::params![i.to_string(), "b", i + 1], |r| r.get(0)).unwrap();
            assert_eq!(n, 0);
        }
        let stmt = conn.prepare_cached(sql).unwrap();
        assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0);
    }

    /// Readers and the writer read the file through a memory map (see [`MMAP_BYTES`]); the
    /// bundled SQLite's limit (2 GiB) is what the setting is clamped to. A read connection
    /// taken out within [`QUIET`] of a commit reads with `pread` instead, and maps the file
    /// again once the store has been quiet that long.
    #[test]
    fn readers_map_the_file_only_while_the_store_is_quiet() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path()).unwrap();
        let mapped = |c: &Connection| -> i64 {
            c.pragma_query_value(None, "mmap_size", |r| r.get(0)).unwrap()
        };
        // Nothing committed since (the migrations' commits forgotten), and quiet means an hour.
        store.commits = Quiet::new(Duration::from_secs(3600));
        assert!(mapped(&store.read().unwrap()) >= 1 << 30);
        store.write(|c| Ok(c.execute_batch("CREATE TABLE pad (n INTEGER)")?)).unwrap();
        assert_eq!(mapped(&store.read().unwrap()), 0);
        assert_eq!(store.readers.lock().unwrap().len(), 1, "the same connection each time");
        // The hour has passed: the same connection maps the file again.
        store.commits.after = Duration::ZERO;
        assert!(mapped(&store.read().unwrap()) >= 1 << 30);
        assert!(mapped(&store.lock()) >= 1 << 30);
    }

    /// The bundled SQLite is built without its memory statistics (`.cargo/config.toml`):
    /// with them every allocation inside SQLite takes one process-wide lock.
    #[test]
    fn sqlite_is_built_without_memory_statistics() {
        let conn = Connection::open_in_memory().unwrap();
        let mut stmt = conn.prepare("PRAGMA compile_options").unwrap();
        let options: Vec<String> =
            stmt.query_map([], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap();
        assert!(options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"), "{options:?}");
    }

    /// A write as the tests below queue it.
    type TestWrite<'a> = Box<dyn FnOnce(&Connection) -> Result<()> + Send + 'a>;

    /// Runs `writes` on `store` from one thread each while the write connection is held
    /// elsewhere, so that all of them queue, then lets the connection go; returns each
    /// write's result (a panic as `Err`), in the order given, once all are done.
    fn queued_together(
        store: &SqliteStore,
        writes: Vec<TestWrite<'_>>,
    ) -> Vec<std::thread::Result<Result<()>>> {
        let n = writes.len();
        std::thread::scope(|s| {
            let held = store.lock();
            let handles: Vec<_> = writes
                .into_iter()
                .map(|w| {
                    s.spawn(move || {
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.write(w)))
                    })
                })
                .collect();
            while store.writes.queued() < n {
                std::thread::yield_now();
            }
            drop(held);
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn pad_table(store: &SqliteStore) {
        store
            .write_alone(|conn| Ok(conn.execute_batch("CREATE TABLE pad (n INTEGER UNIQUE)")?))
            .unwrap();
    }

    fn pads(store: &SqliteStore) -> Vec<i64> {
        let conn = store.lock();
        let mut stmt = conn.prepare("SELECT n FROM pad ORDER BY n").unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().collect::<rusqlite::Result<_>>().unwrap()
    }

    fn pad(n: i64) -> TestWrite<'static> {
        Box::new(move |conn| {
            conn.execute("INSERT INTO pad VALUES (?1)", [n])?;
            Ok(())
        })
    }

    /// Writes that queue while the write connection is busy commit in one transaction
    /// (one log group, one flush), each acknowledged once it is flushed.
    #[test]
    fn writes_that_arrive_together_commit_together() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        pad_table(&store);
        let (written, _, flushes) = store.wal.counts();
        let results = queued_together(&store, (0..8).map(pad).collect());
        assert!(results.iter().all(|r| matches!(r, Ok(Ok(())))));
        assert_eq!(pads(&store), (0..8).collect::<Vec<_>>());
        assert_eq!(store.wal.counts(), (written + 1, written + 1, flushes + 1), "one group");
        // Alone, a write is its own batch.
        store.write(pad(8)).unwrap();
        assert_eq!(store.wal.counts().0, written + 2);
    }

    /// A write that fails, or panics, in a batch keeps nothing of what it wrote and fails
    /// alone: its writer gets its error (or its panic), the others' writes are stored.
    #[test]
    fn a_failing_write_fails_alone_in_its_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        pad_table(&store);
        store.write(pad(50)).unwrap();
        // The threads may queue in any order: what fails must fail whatever ran before.
        let fails: TestWrite<'_> = Box::new(|conn| {
            conn.execute("INSERT INTO pad VALUES (100)", [])?;
            conn.execute("INSERT INTO pad VALUES (50)", [])?; // taken: UNIQUE
            Ok(())
        });
        let panics: TestWrite<'_> = Box::new(|conn| {
            conn.execute("INSERT INTO pad VALUES (200)", []).unwrap();
            panic!("a bug in a write");
        });
        let results = queued_together(&store, vec![pad(1), fails, pad(2), panics, pad(3)]);
        assert!(matches!(results[0], Ok(Ok(()))));
        assert!(matches!(results[1], Ok(Err(StoreError::Database(_)))), "{:?}", results[1]);
        assert!(matches!(results[2], Ok(Ok(()))));
        let payload = results[3].as_ref().expect_err("the panic reaches its writer");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"a bug in a write"));
        assert!(matches!(results[4], Ok(Ok(()))));
        assert_eq!(pads(&store), vec![1, 2, 3, 50]);
        store.write(pad(4)).unwrap();
        assert_eq!(pads(&store), vec![1, 2, 3, 4, 50], "the connection is left usable");
        // Alone, a failing write is its batch's whole transaction: rolled back all the same.
        let fails: TestWrite<'_> = Box::new(|conn| {
            conn.execute("INSERT INTO pad VALUES (100)", [])?;
            conn.execute("INSERT INTO pad VALUES (50)", [])?;
            Ok(())
        });
        assert!(matches!(store.write(fails), Err(StoreError::Database(_))));
        assert_eq!(pads(&store), vec![1, 2, 3, 4, 50]);
    }

    /// When a batch's commit fails, every write of it fails with that commit's error and
    /// none of them is stored. (The commit fails here on a deferred foreign key one write
    /// leaves dangling: only the commit checks it.)
    #[test]
    fn a_failed_commit_fails_every_write_of_its_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        pad_table(&store);
        store
            .write_alone(|conn| {
                Ok(conn.execute_batch(
                    "CREATE TABLE parent (id INTEGER PRIMARY KEY);
                     CREATE TABLE child (parent INTEGER
                        REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);",
                )?)
            })
            .unwrap();
        let dangling: TestWrite<'_> = Box::new(|conn| {
            conn.execute("INSERT INTO child VALUES (7)", [])?;
            Ok(())
        });
        let results = queued_together(&store, vec![pad(1), dangling, pad(2)]);
        for r in &results {
            let Ok(Err(StoreError::Database(rusqlite::Error::SqliteFailure(e, _)))) = r else {
                panic!("every write fails with the commit: {r:?}");
            };
            assert_eq!(e.code, rusqlite::ErrorCode::ConstraintViolation);
        }
        assert!(pads(&store).is_empty());
        let children: i64 =
            store.lock().query_row("SELECT count(*) FROM child", [], |r| r.get(0)).unwrap();
        assert_eq!(children, 0);
        store.write(pad(3)).unwrap();
        assert_eq!(pads(&store), vec![3], "the next batch commits");
    }

    /// Runs `f` while a connection to `path` holds the write lock, which it lets go 150 ms
    /// after `f` starts (long enough that what `f` does meets the lock; SQLite's busy wait
    /// and [`enter_wal`]'s retries outlast it) or as soon as `f` returns.
    fn with_write_lock_held<T>(path: &Path, f: impl FnOnce() -> T) -> T {
        let other = Connection::open(path.join(DB_FILE)).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let held = std::sync::Barrier::new(2);
        let (release, released) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let held = &held;
            s.spawn(move || {
                held.wait();
                let _ = released.recv_timeout(Duration::from_millis(150));
                other.execute_batch("COMMIT").unwrap();
            });
            held.wait();
            let out = f();
            let _ = release.send(());
            out
        })
    }

    /// A write transaction that reads first waits for a write lock another connection
    /// holds, as a plain write does, instead of failing with "database is locked" when it
    /// comes to write.
    #[test]
    fn a_write_that_reads_first_waits_for_another_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let n: i64 = with_write_lock_held(dir.path(), || {
            store.write(|tx| {
                let n = tx.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))?;
                tx.execute("CREATE TABLE t (a INTEGER)", [])?;
                Ok(n)
            })
        })
        .unwrap();
        assert_eq!(n, 0);
    }

    /// Opening a fresh data directory while another connection holds the write lock of its
    /// new file (another process opening it at the same moment) waits for that lock and
    /// opens in WAL mode, instead of failing with "database is locked": SQLite's switch to
    /// WAL answers a held lock at once, without the busy wait.
    #[test]
    fn opening_a_fresh_store_waits_for_another_connection_holding_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = with_write_lock_held(dir.path(), || SqliteStore::open(dir.path()))
            .expect("the open waits for the lock");
        let mode: String =
            store.lock().pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
    }

    /// A store at the current layout opens while another connection holds the write lock
    /// (another process's long write): the open writes nothing, so it neither waits for the
    /// lock nor marks the store as just written.
    #[test]
    fn a_current_store_opens_beside_another_writer_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        drop(SqliteStore::open(dir.path()).unwrap());
        let other = Connection::open(dir.path().join(DB_FILE)).unwrap();
        other.execute_batch("BEGIN IMMEDIATE; CREATE TABLE held (a INTEGER);").unwrap();
        let store = SqliteStore::open(dir.path()).expect("opens without the write lock");
        assert!(store.commits.quiet(), "nothing committed: reads go through the memory map");
        assert_eq!(SqliteStore::layout(dir.path()).unwrap().at, MIGRATIONS.len());
        other.execute_batch("COMMIT").unwrap();
    }

    /// The write connection runs no checkpoint of its own (SQLite's automatic one would run
    /// inside the commit that takes the log past the mark, holding every writer up): a
    /// commit past the mark wakes the checkpoint thread, whose checkpoint completes, so the
    /// next write starts the log over.
    #[test]
    fn checkpoints_run_beside_the_writers_and_the_log_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let auto: i64 =
            store.lock().pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0)).unwrap();
        assert_eq!(auto, 0, "the write connection leaves checkpoints to the thread");
        let checkpointer = store.checkpointer.as_ref().expect("the thread started");
        let before = checkpointer.settle();
        let pad = |rows: usize| {
            store
                .write(|tx| {
                    tx.execute("CREATE TABLE IF NOT EXISTS pad (b BLOB)", [])?;
                    for _ in 0..rows {
                        tx.execute("INSERT INTO pad VALUES (zeroblob(4000))", [])?;
                    }
                    Ok(())
                })
                .unwrap()
        };
        let log = || store.lock().wal_checkpoint_v2(rusqlite::DEFAULT_NAME, Default::default());
        pad(checkpoint::CHECKPOINT_PAGES as usize + 100);
        assert!(checkpointer.settle() > before, "the long log woke the thread");
        pad(1);
        let (frames, _) = log().unwrap();
        assert!(frames < 50, "the log started over: {frames} frames");
        pad(10);
        assert_eq!(checkpointer.settle(), before + 1, "a short log wakes nobody");
    }

    /// A read goes through its own connection: it answers while a write holds the write
    /// connection (before the pool it queued behind it).
    #[test]
    fn reads_do_not_wait_for_the_write_connection() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let writing = store.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(store.embedder_models()).unwrap());
            let read = rx.recv_timeout(Duration::from_secs(30)).expect("the read waited");
            assert!(read.unwrap().is_empty());
            drop(writing);
        });
    }

    /// Every write returns with its commit flushed; a touch waits for no flush, and the next
    /// write's flush takes it to the disk; a write with nothing new to flush flushes nothing.
    #[test]
    fn writes_wait_for_a_flush_and_touches_ride_on_the_next() {
        use spine_core::{RecordId, Timestamp};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let synchronous: i64 =
            store.lock().pragma_query_value(None, "synchronous", |r| r.get(0)).unwrap();
        assert_eq!(synchronous, 1, "NORMAL: commits write the log, flushes come after");
        let (_, _, opened) = store.wal.counts();
        let m = note("a note");
        store
            .insert_batch(&[(m.clone(), crate::Embedding { model: "m", vector: &[1.0, 0.0] })])
            .unwrap();
        let (written, synced, flushes) = store.wal.counts();
        assert_eq!((synced, flushes), (written, opened + 1), "the insert was flushed");
        store.touch(&m.id, Timestamp::from_micros(1_800_000_100_000_000)).unwrap();
        store.touch(&m.id, Timestamp::from_micros(1_800_000_200_000_000)).unwrap();
        assert_eq!(store.wal.counts(), (written, synced, flushes), "touches wait for nothing");
        let access = crate::Access::owned(&spine_core::Caller::anonymous());
        assert!(!store.delete(&access, &RecordId::mint()).unwrap());
        assert_eq!(store.wal.counts(), (written + 1, written + 1, flushes + 1), "touches flushed");
        assert!(!store.delete(&access, &RecordId::mint()).unwrap());
        assert_eq!(store.wal.counts().2, flushes + 1, "nothing new, no flush");
        let body: String = store
            .lock()
            .query_row("SELECT body FROM memories WHERE id = ?1", [m.id.to_string()], |r| r.get(0))
            .unwrap();
        assert_eq!(crate::codec::decode(&body).unwrap().access_count, 2);
    }

    #[test]
    fn read_connections_refuse_writes_and_are_reused() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        {
            let (a, b) = (store.read().unwrap(), store.read().unwrap());
            let err = a.execute("DELETE FROM memories", []).unwrap_err();
            assert!(err.to_string().contains("readonly"), "{err}");
            drop((a, b));
        }
        assert_eq!(store.readers.lock().unwrap().len(), 2);
        let _again = store.read().unwrap();
        assert_eq!(store.readers.lock().unwrap().len(), 1);
    }

    /// As many readers as the store keeps come back to the pool, and no more; the limit
    /// grows with the CPUs, never under the minimum.
    #[test]
    fn the_pool_keeps_readers_up_to_its_limit() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(idle_readers(), (cpus * IDLE_READERS_PER_CPU).max(MIN_IDLE_READERS));
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path()).unwrap();
        store.idle_readers = 3;
        let open: Vec<_> = (0..5).map(|_| store.read().unwrap()).collect();
        drop(open);
        assert_eq!(store.readers.lock().unwrap().len(), 3);
    }

    /// An anonymous decision created at 1_800_000_000 s (also `sync`'s tests' record).
    pub(super) fn note(text: &str) -> spine_core::Memory {
        use spine_core::{Caller, Category, Memory, Scope, ShortId, Source, Timestamp};
        Memory::new(
            ShortId::mint(),
            text.into(),
            Scope::parse("scope", "test:project:store").unwrap(),
            Source::UserSaid,
            Category::Decision,
            &Caller::anonymous(),
            Timestamp::from_micros(1_800_000_000_000_000),
        )
    }

    /// A process that never searched (a hook, a command) lists the scopes it reads without
    /// loading the search index, each probe answered by an index of the table: the caller's
    /// own records by (owner, scope), shared ones by the partial index of shared records.
    #[test]
    fn scopes_are_listed_without_loading_the_search_index() {
        use crate::{Access, Filter, ScopeFilter, Store};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let alice = spine_core::Caller::authenticated("alice", "alice");
        let mut records = Vec::new();
        for (i, (scope, owner, shared)) in [
            ("a:project:one", "alice", false),
            ("b:project:two", "bob", true),
            ("c:project:three", "bob", false),
        ]
        .into_iter()
        .enumerate()
        {
            let caller = spine_core::Caller::authenticated(owner, owner);
            let mut m = spine_core::Memory::new(
                spine_core::ShortId::mint(),
                format!("record {i}"),
                spine_core::Scope::parse("scope", scope).unwrap(),
                spine_core::Source::UserSaid,
                spine_core::Category::Decision,
                &caller,
                spine_core::Timestamp::from_micros(1_800_000_000_000_000),
            );
            if shared {
                m.visibility = spine_core::Visibility::Shared;
            }
            records.push(m);
        }
        let e = crate::Embedding { model: "m", vector: &[1.0, 0.0] };
        let items: Vec<_> = records.iter().map(|m| (m.clone(), e)).collect();
        store.insert_batch(&items).unwrap();
        let all = Filter::new(ScopeFilter::All);
        let (access, operator) = (Access::read(&alice), Access::operator());
        assert_eq!(store.scopes(&access, &all, 10).unwrap(), ["a:project:one", "b:project:two"]);
        assert_eq!(store.scopes(&operator, &all, 2).unwrap(), ["a:project:one", "b:project:two"]);
        assert!(store.index.read().unwrap().synced.is_none(), "the index was not loaded");

        // Each probe seeks through an index; no probe reads the table row by row.
        let (w, sql) = query::Where::scopes(&access, &all, 10);
        let conn = store.read().unwrap();
        let mut explain = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let plan: Vec<String> = explain
            .query_map(rusqlite::params_from_iter(w.params.iter()), |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("USING COVERING INDEX memories_owner_scope"), "{plan}");
        assert!(plan.contains("USING INDEX memories_shared_scope"), "{plan}");
        assert!(!plan.lines().any(|l| l == "SCAN m" || l.starts_with("SCAN m ")), "{plan}");
        drop(explain);
        drop(conn);

        // Once loaded by a search, the index answers the same.
        drop(store.nearest(&crate::NearestQuery {
            access: &access,
            filter: &all,
            model: "m",
            vector: &[1.0, 0.0],
            now: spine_core::Timestamp::from_micros(1_900_000_000_000_000),
            any: 1,
            active: 1,
            exclude: None,
        }));
        assert!(store.index.read().unwrap().synced.is_some());
        assert_eq!(store.scopes(&access, &all, 10).unwrap(), ["a:project:one", "b:project:two"]);
    }

    /// A store told to search without loading scans in SQL while its index is not loaded,
    /// and answers as the index would; once something loads the index, it serves.
    #[test]
    fn a_search_without_loading_scans_and_leaves_the_index_unloaded() {
        use crate::{Access, Filter, NearestQuery, ScopeFilter, Store};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let (a, b) = (note("a"), note("b"));
        let e = |v: &'static [f32]| crate::Embedding { model: "m", vector: v };
        store.insert_batch(&[(a.clone(), e(&[1.0, 0.0])), (b.clone(), e(&[0.6, 0.8]))]).unwrap();
        store.search_without_loading();
        let (access, all) =
            (Access::read(&spine_core::Caller::anonymous()), Filter::new(ScopeFilter::All));
        let q = NearestQuery {
            access: &access,
            filter: &all,
            model: "m",
            vector: &[0.0, 1.0],
            now: spine_core::Timestamp::from_micros(1_900_000_000_000_000),
            any: 2,
            active: 2,
            exclude: None,
        };
        let got = store.nearest(&q).unwrap();
        assert_eq!(got.iter().map(|n| n.id).collect::<Vec<_>>(), [b.id, a.id]);
        assert!((got[0].score - 0.8).abs() < 1e-6);
        assert!(got[0].record.is_some(), "an active neighbour comes with its record");
        assert!(store.index.read().unwrap().synced.is_none(), "the index was not loaded");
        store.warm_index().unwrap();
        assert!(!store.scans_unloaded(), "a loaded index serves");
        assert_eq!(
            store.nearest(&q).unwrap().iter().map(|n| n.id).collect::<Vec<_>>(),
            [b.id, a.id]
        );
    }

    /// Searches read the index side by side, so one may bring it past the snapshot of
    /// another still running: that older snapshot leaves it as it is (before, it reloaded
    /// every record and took the index back).
    #[test]
    fn an_older_snapshot_never_takes_the_index_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let insert = |m: &spine_core::Memory| {
            let e = crate::Embedding { model: "m", vector: &[1.0, 0.0] };
            store.insert_batch(&[(m.clone(), e)]).unwrap();
        };
        insert(&note("first"));
        let mut old = store.read().unwrap();
        let old_tx = old.transaction().unwrap();
        assert_eq!(read_synced(&store.index, &old_tx).unwrap().len(), 1); // snapshot taken
        insert(&note("second"));
        {
            let mut new = store.read().unwrap();
            let new_tx = new.transaction().unwrap();
            assert_eq!(read_synced(&store.index, &new_tx).unwrap().len(), 2);
        }
        let index = read_synced(&store.index, &old_tx).unwrap();
        assert_eq!(index.len(), 2, "the older snapshot kept the newer index");
        drop(index);
        sync_index(&old_tx, &mut store.index.write().unwrap()).unwrap();
        assert_eq!(store.index.read().unwrap().len(), 2);
    }
}
