//! Opening a store: the settings every connection is opened with, WAL mode, the write
//! connection's settings, and the schema's migrations.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::checkpoint::Checkpointer;
use super::combine::Combiner;
use super::durable::GroupSync;
use super::readers::{QUIET, Quiet, idle_readers};
use super::schema::MIGRATIONS;
use super::{DB_FILE, SqliteStore};
use crate::{Result, StoreError};

/// Each connection's page cache, in KiB (`PRAGMA cache_size`; SQLite's default is 2,000).
/// A search reads ~250 vectors, ~120 bodies and the neighbours' rows; with the default, a
/// store of a few thousand records no longer fits and every search re-reads pages from the
/// OS (`pread` and its copy were a visible share of a search's time, `perf`). With this
/// cache a search reads a few pages from the OS instead of most of them (`strace`), and its
/// p50 without the embedding fell at 2,000 and at 10,000 records (`spine-bench search`;
/// docs/performance.md, "Search index"). Pages are allocated as they are read, so a small
/// store costs what it holds; at most 8 MiB per open connection. Beyond it, pages come from
/// the memory map ([`MMAP_BYTES`]).
pub(super) const CACHE_KIB: i64 = 8 * 1024;

/// How much of the database file each connection reads through a memory map (`PRAGMA
/// mmap_size`; SQLite caps it at its compile-time limit, 2 GiB here).
///
/// Without it every page a connection's cache lacks is a `pread` and a copy, and each
/// connection caches its own: on a store of a few thousand 2,000-character notes, larger
/// than a connection's cache, most of a search's vector and body reads were `pread`s
/// (`strace`). Mapped, the pages are the OS page cache itself, shared by every connection
/// and read without a system call: the server's CPU outside the embedder per search fell,
/// and 4 sessions searching made more calls a second (the device kit's `rawload.py`, runs
/// alternated; docs/performance.md, "The server's side of a search on a larger store").
/// SQLite only reads
/// through the map (writes still go through the log), so durability is unchanged. The cost
/// is the usual one of mapped files: an I/O error while reading a mapped page (a failing
/// disk, the file truncated by another program) stops the process with SIGBUS where it would
/// have been an error — as it already would for the WAL index, which SQLite always maps.
///
/// A read connection maps the file only while this process has committed nothing for
/// [`QUIET`] ([`SqliteStore::read`]): a connection that begins a read after another
/// connection's commit drops its page cache and, mapped, unmaps the whole file (SQLite's
/// `pagerBeginReadTransaction`), then faults each page it reads back in. Under a steady
/// stream of writes that was nearly every read. A search with writes beside it cost more
/// CPU and took page faults mapped, and less CPU and no faults with `pread`; alone, it cost
/// a little less mapped than with `pread` (`spine-bench search 10000 --writes 200`). With 16
/// sessions on `get_memory`, `list_memory` and `update_memory`, the server unmapped the file
/// on nearly every read, and hardly ever with this rule (docs/performance.md, "Mapped only
/// while quiet"); each unmap by a process running on many cores interrupts all of them to
/// flush their address translations.
pub(super) const MMAP_BYTES: i64 = 2 << 30;

/// `PRAGMA synchronous` of the write connection: a commit writes the log without flushing
/// it; [`SqliteStore::write`] waits for the flush after letting the connection go (`sqlite`
/// module docs, "Durability").
const COMMIT_SYNC: &str = "NORMAL";

/// Compiled statements each connection keeps (rusqlite's default is 16). The write
/// connection alone runs ~20 distinct cached statements (each kind of write, the batch's
/// framing, the reads that must see it); past the capacity the least recently used is
/// compiled again on its next use.
const STATEMENT_CACHE: usize = 64;

/// What every connection, the writer's and the readers', is opened with: the wait for a
/// busy database, the page cache and memory map, temporary files in memory, and plans that
/// do not depend on bound values.
///
/// Temporary files (statement journals, sorts, transient indices) stay in memory: SQLite
/// otherwise looks for a directory to put them in (`SQLITE_TMPDIR`, `TMPDIR`, `/var/tmp`,
/// `/usr/tmp`, `/tmp`, the working directory), and a container with a read-only root and only
/// its data volume writable has none — the first start failed with "disk I/O error"
/// (`SQLITE_IOERR_GETTEMPPATH`). Spine's statements read a page of records or one record's
/// rows, and nothing copies a whole table (no `VACUUM`), so they stay small.
///
/// The last keeps cached statements compiled. SQLite marks a parameter whose value might
/// change the plan (a bound LIMIT, `col = ?` on a column no index serves, …), and
/// `sqlite3_clear_bindings`, which rusqlite calls on every statement it returns to its
/// cache, then expires the whole statement: each reuse of such a statement compiled it
/// again (most of a neighbour read's time, 40 of them a search; docs/performance.md, "Search
/// index"). With the query planner
/// stability guarantee (`SQLITE_DBCONFIG_ENABLE_QPSG`) nothing is marked; the plans are
/// those SQLite picks without the values, which is how Spine's queries are written.
pub(super) fn open_connection(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_WAIT)?;
    conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
    conn.pragma_update(None, "mmap_size", MMAP_BYTES)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
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
pub(super) fn enter_wal(conn: &Connection, path: &Path) -> Result<()> {
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
        let wal = Arc::new(GroupSync::new(&path));
        let checkpointer = Checkpointer::start(open_connection(&path)?, &conn, &wal);
        let store = SqliteStore {
            conn,
            readers: Mutex::default(),
            commits: Quiet::new(QUIET),
            idle_readers: idle_readers(),
            writes: Combiner::default(),
            wal,
            path,
            index: RwLock::default(),
            scan_unloaded: AtomicBool::new(false),
            operator_audit: std::sync::OnceLock::new(),
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
