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
//! offers it for `rusqlite`, and it is short.
//!
//! A failed flush proves nothing about any frame written since the last good one, and a
//! retried one proves nothing either: after a failed writeback Linux marks the pages clean,
//! so the next `fdatasync` succeeds without writing them (PostgreSQL's "fsyncgate"). So a
//! failure fails *every* writer waiting for a group it did not cover, not only the one that
//! ran it, and the log stays failed — no later flush is trusted, every write is refused
//! before it commits — until the store has made what is committed durable another way
//! ([`GroupSync::recovered`]: a checkpoint that copied the log into the database file and
//! flushed that file, `SqliteStore::recover`).

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
    /// A flush failed since the last recovery: what it said. Nothing written after the last
    /// good flush can be trusted to be on disk, whatever later flushes return.
    failed: Option<String>,
}

/// The WAL of one database and who waits for it to reach the disk.
#[derive(Debug)]
pub(crate) struct GroupSync {
    wal: PathBuf,
    log: Mutex<Log>,
    flushed: Condvar,
    /// Tests: how many of the next flushes fail with EIO, as a failing disk's would.
    #[cfg(test)]
    pub(crate) fail_flushes: std::sync::atomic::AtomicU32,
}

impl GroupSync {
    /// For the database at `db` (its WAL is `db` + `-wal`, as SQLite names it).
    pub(crate) fn new(db: &Path) -> Self {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        GroupSync {
            wal: wal.into(),
            log: Mutex::default(),
            flushed: Condvar::new(),
            #[cfg(test)]
            fail_flushes: Default::default(),
        }
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
        self.wait_with(through, || {
            #[cfg(test)]
            {
                use std::sync::atomic::Ordering::SeqCst;
                let fail = |n: u32| n.checked_sub(1);
                if self.fail_flushes.fetch_update(SeqCst, SeqCst, fail).is_ok() {
                    return Err(io::Error::from_raw_os_error(5)); // EIO
                }
            }
            flush(&self.wal)
        })
    }

    fn wait_with(&self, through: u64, flush: impl Fn() -> io::Result<()>) -> io::Result<()> {
        let mut log = self.log();
        while log.synced < through {
            if let Some(failed) = &log.failed {
                return Err(not_durable(failed));
            }
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
            match &flushed {
                Ok(()) => log.synced = log.synced.max(target),
                // Fails the leader and, woken, everyone else waiting for a group past
                // `synced`; no one flushes again until a recovery.
                Err(e) => {
                    tracing::error!(error = %e, "flushing the log failed: writes are refused until it is recovered");
                    log.failed = Some(e.to_string());
                }
            }
            self.flushed.notify_all();
            flushed.map_err(|e| not_durable(&e.to_string()))?;
        }
        Ok(())
    }

    /// Fails the log as a failed flush does (`cause`: what failed), for a flush of it that
    /// did not go through [`GroupSync::wait`]: a checkpoint's.
    pub(crate) fn fail(&self, cause: &str) {
        let mut log = self.log();
        tracing::error!(
            cause,
            "the log may not be on disk: writes are refused until it is recovered"
        );
        log.failed = Some(cause.to_owned());
        self.flushed.notify_all();
    }

    /// What the failed flush said, while the log is failed (writes are refused then).
    pub(crate) fn failed(&self) -> Option<String> {
        self.log().failed.clone()
    }

    /// Every group up to `through` (all written so far: the caller holds the write
    /// connection) reached the disk another way — a checkpoint copied the log into the
    /// database file and flushed it — so it counts as flushed, and flushes are trusted again.
    pub(crate) fn recovered(&self, through: u64) {
        let mut log = self.log();
        log.synced = log.synced.max(through);
        if log.failed.take().is_some() {
            tracing::warn!(
                "the log is on disk again (checkpointed into the database): writes resume"
            );
        }
        self.flushed.notify_all();
    }

    /// Groups written, groups on disk, flushes run.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        let log = self.log();
        (log.written, log.synced, log.flushes)
    }
}

/// The error of a write that cannot be made durable: the flush's own, with what it means.
pub(crate) fn not_durable(cause: &str) -> io::Error {
    io::Error::other(format!(
        "the log could not be flushed to disk ({cause}): writes are refused until the store \
         has checkpointed it into the database file and flushed that; a write refused this \
         way may or may not be present afterwards"
    ))
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

    /// A failed flush reaches its caller and covers nothing, and no later flush is trusted:
    /// the next caller fails without flushing, until a recovery covers what was written.
    #[test]
    fn a_failed_flush_fails_until_recovered_and_a_retry_proves_nothing() {
        let sync = GroupSync::new(Path::new("/nonexistent/db"));
        let through = sync.written(1);
        let err = sync.wait_with(through, || Err(io::Error::other("disk gone"))).unwrap_err();
        assert!(err.to_string().contains("(disk gone)"), "{err}");
        assert_eq!(sync.counts(), (1, 0, 1));
        assert!(sync.failed().is_some());
        // A retry would "succeed" on Linux without writing the dropped pages: none is made.
        let later = sync.written(2);
        let err = sync.wait_with(later, || panic!("a failed log was flushed again")).unwrap_err();
        assert!(err.to_string().contains("writes are refused"), "{err}");
        sync.recovered(later);
        assert_eq!((sync.failed(), sync.counts()), (None, (2, 2, 1)));
        sync.wait_with(later, || panic!("recovered groups need no flush")).unwrap();
        let next = sync.written(3);
        sync.wait_with(next, || Ok(())).unwrap();
        assert_eq!(sync.counts(), (3, 3, 2));
    }

    /// A checkpoint whose flush failed fails the log the same way: the next writer is
    /// refused without a flush of it being trusted, until a recovery.
    #[test]
    fn a_failed_checkpoint_fails_the_log_until_recovered() {
        let sync = GroupSync::new(Path::new("/nonexistent/db"));
        sync.wait_with(sync.written(1), || Ok(())).unwrap();
        sync.fail("a checkpoint failed: disk I/O error");
        let through = sync.written(2);
        let err = sync.wait_with(through, || panic!("flushed a failed log")).unwrap_err();
        assert!(err.to_string().contains("a checkpoint failed"), "{err}");
        sync.wait_with(1, || panic!("group 1 was on disk before")).unwrap();
        sync.recovered(through);
        sync.wait_with(through, || panic!("recovered")).unwrap();
    }

    /// Every writer waiting when a flush fails is failed, not only its leader: they would
    /// otherwise flush again, "succeed", and be acknowledged for frames that are not on disk.
    #[test]
    fn a_failed_flush_fails_every_writer_waiting_for_it() {
        let sync = GroupSync::new(Path::new("/nonexistent/db"));
        let (started, first_started) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let released = Mutex::new(released);
        let flush = || {
            started.send(()).unwrap();
            released.lock().unwrap().recv_timeout(Duration::from_secs(30)).unwrap();
            Err(io::Error::other("EIO"))
        };
        let sync = &sync;
        std::thread::scope(|s| {
            let first = sync.written(1);
            let leader = s.spawn(move || sync.wait_with(first, flush));
            first_started.recv_timeout(Duration::from_secs(30)).unwrap();
            let waiters: Vec<_> = (2..5)
                .map(|changes| {
                    let through = sync.written(changes);
                    s.spawn(move || sync.wait_with(through, || Ok(())))
                })
                .collect();
            release.send(()).unwrap();
            assert!(leader.join().unwrap().is_err());
            for w in waiters {
                assert!(w.join().unwrap().is_err(), "a waiter was acknowledged after the failure");
            }
        });
        assert_eq!(sync.counts(), (4, 0, 1), "one flush, the failed one");
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
