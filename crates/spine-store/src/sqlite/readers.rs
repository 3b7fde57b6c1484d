//! The pool of read connections: connections kept idle for reuse, and whether each reads
//! through the memory map, which depends on how recently this process committed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::SqliteStore;
use super::open::{MMAP_BYTES, open_connection};
use crate::Result;

/// Idle read connections kept for reuse, per CPU the process may use (at least
/// [`MIN_IDLE_READERS`]); more are opened while more readers run at once. A new connection
/// starts with an empty page cache: with 8 kept on a 16-core machine, 50 sessions
/// searching at once opened one for most searches, and each then read its pages back from
/// the OS, at fewer calls a second than with 64 kept (docs/performance.md, "Figures", the
/// 16-core targets). A connection's cache
/// holds only the pages it has read, up to [`CACHE_KIB`](super::open::CACHE_KIB).
pub(super) const IDLE_READERS_PER_CPU: usize = 4;

/// The fewest idle read connections kept, whatever the CPU count.
pub(super) const MIN_IDLE_READERS: usize = 8;

/// How many idle read connections a store keeps ([`IDLE_READERS_PER_CPU`]).
pub(super) fn idle_readers() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    (cpus * IDLE_READERS_PER_CPU).max(MIN_IDLE_READERS)
}

/// How long after this process's last commit read connections read with `pread` rather
/// than through the memory map ([`MMAP_BYTES`]): long beside the gap between one agent's
/// writes in a burst, short beside the pauses between bursts, so a store written now and
/// then is read mapped nearly all the time, and one written every second never is.
pub(super) const QUIET: Duration = Duration::from_secs(1);

/// When a store last committed, read without a lock: whether it has been quiet for a while.
pub(super) struct Quiet {
    opened: Instant,
    /// Nanoseconds from `opened` to the last commit, plus one; 0 before any.
    last: AtomicU64,
    /// How long without a commit is quiet.
    pub(super) after: Duration,
}

impl Quiet {
    pub(super) fn new(after: Duration) -> Self {
        Quiet { opened: Instant::now(), last: AtomicU64::new(0), after }
    }

    /// Notes a commit (or an attempt: one that failed costs a reader nothing).
    pub(super) fn committed(&self) {
        let at = u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        self.last.store(at + 1, Ordering::Relaxed);
    }

    /// Whether nothing was committed for [`Quiet::after`].
    pub(super) fn quiet(&self) -> bool {
        match self.last.load(Ordering::Relaxed) {
            0 => true,
            at => self.opened.elapsed().as_nanos() >= u128::from(at - 1) + self.after.as_nanos(),
        }
    }
}

/// A read connection out of [`SqliteStore`]'s pool, returned to it on drop.
pub(crate) struct Reader<'a> {
    store: &'a SqliteStore,
    conn: Option<Connection>,
    /// Whether it reads through the memory map ([`MMAP_BYTES`]).
    mapped: bool,
}

/// A read connection in the pool.
pub(super) struct Idle {
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

impl SqliteStore {
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
}
