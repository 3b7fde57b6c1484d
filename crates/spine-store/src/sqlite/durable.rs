//! Group commit: writes commit on the write connection without waiting for the disk, then
//! wait outside it for one flush of the log that covers them.
//!
//! With `synchronous = FULL` every commit flushed the WAL while holding the one write
//! connection, so concurrent writers, and every `get_memory`'s touch, queued behind each
//! other's flushes. Now the write connection runs `synchronous = NORMAL`: a commit has
//! written its frames to the WAL (so it survives the process dying) when it returns, and
//! the caller then waits, with the connection already free, until a `fdatasync` of the WAL
//! started after its commit has finished. One flush covers every commit written before it
//! started, so writers arriving together share one (the leader flushes, the others wait for
//! it or for the next). SQLite itself flushes the WAL before each checkpoint copies it into
//! the database and flushes the database before the WAL is reused, so a frame that was on
//! disk stays recoverable. The same technique as PostgreSQL's WAL flush grouping; no crate
//! offers it for `rusqlite`, and it is forty lines.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Where the WAL stands: how many commit groups the write connection has finished, and how
/// many of those a flush has covered.
#[derive(Debug, Default)]
struct Log {
    /// Commit groups finished on the write connection (bumped under it, in commit order).
    written: u64,
    /// `total_changes` of the write connection when `written` was last bumped.
    changes: u64,
    /// Every group up to this one is on disk.
    synced: u64,
    /// A flush is running (its leader will raise `synced`).
    syncing: bool,
    /// Flushes run, for tests and the log.
    flushes: u64,
}

/// The WAL of one database and who waits for it to reach the disk.
#[derive(Debug)]
pub(crate) struct GroupSync {
    wal: PathBuf,
    log: Mutex<Log>,
    flushed: Condvar,
}

impl GroupSync {
    /// For the database at `db` (its WAL is `db` + `-wal`, as SQLite names it).
    pub(crate) fn new(db: &Path) -> Self {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        GroupSync { wal: wal.into(), log: Mutex::default(), flushed: Condvar::new() }
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called holding the write connection, after the caller's statements: the group that
    /// has to be on disk before they are acknowledged. `changes` is the connection's
    /// `total_changes`; where it moved since the last call (this caller's writes, or a
    /// touch committed lazily before), a new group is counted.
    pub(crate) fn written(&self, changes: u64) -> u64 {
        let mut log = self.log();
        if changes != log.changes {
            log.changes = changes;
            log.written += 1;
        }
        log.written
    }

    /// Returns once group `through` is on disk: at once if a flush has covered it, else
    /// after the flush running now and, if that one started before it was written, one
    /// more, run by whichever waiter comes first.
    pub(crate) fn wait(&self, through: u64) -> io::Result<()> {
        self.wait_with(through, || flush(&self.wal))
    }

    fn wait_with(&self, through: u64, flush: impl Fn() -> io::Result<()>) -> io::Result<()> {
        let mut log = self.log();
        while log.synced < through {
            if log.syncing {
                log = self.flushed.wait(log).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            log.syncing = true;
            let target = log.written;
            drop(log);
            let flushed = flush();
            log = self.log();
            log.syncing = false;
            log.flushes += 1;
            if flushed.is_ok() {
                log.synced = log.synced.max(target);
            }
            self.flushed.notify_all();
            // A failed flush fails its leader; the others try again themselves.
            flushed?;
        }
        Ok(())
    }

    /// Groups written, groups on disk, flushes run.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        let log = self.log();
        (log.written, log.synced, log.flushes)
    }
}

/// `fdatasync` of the WAL. No WAL file means nothing waits in one: SQLite removes it only
/// after checkpointing it into the database, which it flushes.
fn flush(wal: &Path) -> io::Result<()> {
    match std::fs::OpenOptions::new().write(true).open(wal) {
        Ok(file) => file.sync_data(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// Writers that arrive while a flush runs share the next one: four writers, two flushes.
    #[test]
    fn writers_waiting_together_share_one_flush() {
        let sync = GroupSync::new(Path::new("/nonexistent/db"));
        let (started, first_started) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let released = Mutex::new(released);
        let flush = || {
            started.send(()).unwrap();
            released.lock().unwrap().recv_timeout(Duration::from_secs(30)).unwrap();
            Ok(())
        };
        let sync = &sync;
        std::thread::scope(|s| {
            let first = sync.written(1);
            let leader = s.spawn(move || sync.wait_with(first, flush));
            first_started.recv_timeout(Duration::from_secs(30)).unwrap();
            // Three more commit while the first flush runs: none is covered by it.
            let waiters: Vec<_> = (2..5)
                .map(|changes| {
                    let through = sync.written(changes);
                    s.spawn(move || sync.wait_with(through, flush))
                })
                .collect();
            release.send(()).unwrap();
            leader.join().unwrap().unwrap();
            first_started.recv_timeout(Duration::from_secs(30)).unwrap();
            release.send(()).unwrap();
            for w in waiters {
                w.join().unwrap().unwrap();
            }
        });
        assert_eq!(sync.counts(), (4, 4, 2));
        // Nothing written since: no flush at all.
        assert_eq!(sync.written(4), 4);
        sync.wait_with(4, || panic!("flushed with nothing to flush")).unwrap();
    }

    /// A failed flush reaches its caller and covers nothing; the next caller flushes again.
    #[test]
    fn a_failed_flush_is_an_error_and_is_tried_again() {
        let sync = GroupSync::new(Path::new("/nonexistent/db"));
        let through = sync.written(1);
        let err = sync.wait_with(through, || Err(io::Error::other("disk gone"))).unwrap_err();
        assert_eq!(err.to_string(), "disk gone");
        assert_eq!(sync.counts(), (1, 0, 1));
        sync.wait_with(through, || Ok(())).unwrap();
        assert_eq!(sync.counts(), (1, 1, 2));
    }

    /// The WAL of a real database is found and flushed; a missing one is nothing to flush.
    #[test]
    fn flushes_the_wal_beside_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(crate::DB_FILE);
        assert!(GroupSync::new(&db).wal.ends_with("spine.db-wal"));
        flush(&GroupSync::new(&db).wal).unwrap();
        std::fs::write(dir.path().join("spine.db-wal"), b"frames").unwrap();
        flush(&GroupSync::new(&db).wal).unwrap();
    }
}
