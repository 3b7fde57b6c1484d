//! Checkpoints beside the writers: the log is copied into the database on a thread of its
//! own, not inside a writer's commit.
//!
//! SQLite's automatic checkpoint runs in the commit that takes the log past 1,000 pages, on
//! the committing connection: here the one write connection, whose mutex every store,
//! update, archive and `get_memory` touch waits for. The copy and its two flushes then held
//! every writer up. On the 16-core Xeon under the 50-session mix (`rawload.py mix 50 20 4`)
//! a write held the connection much longer than with the checkpoints moved out, so the
//! connection was busy most of the time and writers queued for it; `get_memory`, which only
//! reads and touches, took longer at p50 than `list_memory` (docs/performance.md, "On 16
//! cores again, and the write connection").
//!
//! Now the write connection's log hook only notes when the log has reached
//! [`CHECKPOINT_PAGES`], and a checkpoint thread with a connection of its own runs two
//! passive checkpoints (each copies every frame no reader still needs and never waits):
//! - the first while writers go on, which does the copying;
//! - the second holding the write connection, which copies only what was committed during
//!   the first, so that the checkpoint completes and the next write starts the log over.
//!
//! Without the second, a checkpoint never completed under steady writes (each found new
//! frames behind it), the log never started over and kept growing, and readers, who look up
//! every page in it and read the pages found there with a system call instead of through the
//! memory map, slowed down: `list_memory` took longer (same section).
//!
//! Durability is unchanged: SQLite flushes the log before a checkpoint copies it and the
//! database before the log is reused, whichever connection checkpoints.

use std::ffi::c_int;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::durable::GroupSync;
use rusqlite::hooks::Wal;
use rusqlite::wal::CheckpointMode;

/// The log length, in pages, at which a checkpoint starts (SQLite's default for its
/// automatic checkpoint).
pub(crate) const CHECKPOINT_PAGES: c_int = 1000;

#[derive(Debug, Default)]
struct State {
    /// A commit left the log at [`CHECKPOINT_PAGES`] or more since the last pass started.
    due: bool,
    /// A pass is running.
    running: bool,
    /// The store is closing: the thread ends.
    stop: bool,
    /// Passes run, for tests.
    passes: u64,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Only flags are changed under it, by sections that cannot panic halfway.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The checkpoint thread of one store; it ends when this drops.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread, checkpointing on `own` (a connection to the database of `write`),
    /// and hands the checkpoints over to it: `write`'s automatic checkpoint is replaced by a
    /// hook that wakes the thread. If the thread cannot start, `write` keeps SQLite's
    /// automatic checkpoint and `None` is returned.
    pub(crate) fn start(
        own: Connection,
        write: &Arc<Mutex<Connection>>,
        wal: &Arc<GroupSync>,
    ) -> Option<Self> {
        let shared = Arc::new(Shared::default());
        let thread = {
            let (shared, write, wal) = (Arc::clone(&shared), Arc::clone(write), Arc::clone(wal));
            std::thread::Builder::new()
                .name("spine-checkpoint".into())
                .spawn(move || run(&own, &write, &shared, &wal))
        };
        let thread = match thread {
            Ok(thread) => thread,
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the checkpoint thread: writers checkpoint");
                return None;
            }
        };
        let hook = {
            let shared = Arc::clone(&shared);
            move |_: &mut Wal, pages: c_int| {
                if pages >= CHECKPOINT_PAGES {
                    shared.lock().due = true;
                    shared.changed.notify_all();
                }
                Ok(())
            }
        };
        let hooked = write.lock().unwrap_or_else(|p| p.into_inner()).wal_hook(Some(hook));
        let checkpointer = Checkpointer { shared, thread: Some(thread) };
        if let Err(e) = hooked {
            tracing::warn!(error = %e, "cannot hook the log: writers checkpoint");
            return None; // the thread ends as `checkpointer` drops
        }
        Some(checkpointer)
    }

    /// Returns once no checkpoint is due or running (tests).
    #[cfg(test)]
    pub(crate) fn settle(&self) -> u64 {
        let mut state = self.shared.lock();
        while state.due || state.running {
            state = self.shared.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.passes
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: one pass each time a commit finds the log long (module docs).
fn run(own: &Connection, write: &Mutex<Connection>, shared: &Shared, wal: &GroupSync) {
    loop {
        {
            let mut state = shared.lock();
            while !state.due && !state.stop {
                state = shared.changed.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.stop {
                return;
            }
            state.due = false;
            state.running = true;
        }
        let copied = own.wal_checkpoint_v2(rusqlite::DEFAULT_NAME, CheckpointMode::PASSIVE);
        let completed = {
            let write = write.lock().unwrap_or_else(|p| p.into_inner());
            write.wal_checkpoint_v2(rusqlite::DEFAULT_NAME, CheckpointMode::PASSIVE)
        };
        // Another process checkpointing the same database makes a pass fail (busy); the
        // next commit past the mark tries again. A pass that failed to write or flush (SQLite
        // flushes the log before copying it) fails the log as a failed group flush does: a
        // later flush of it proves nothing ([`super::durable`]).
        if let Err(e) = copied.and(completed) {
            if is_io_failure(&e) {
                wal.fail(&format!("a checkpoint failed: {e}"));
            } else {
                tracing::debug!(error = %e, "checkpoint pass failed");
            }
        }
        let mut state = shared.lock();
        state.running = false;
        state.passes += 1;
        shared.changed.notify_all();
    }
}

/// Whether `e` is the disk's failure (an I/O error or a full disk), not a busy database.
fn is_io_failure(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::SystemIoFailure | rusqlite::ErrorCode::DiskFull)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_disks_failures_fail_the_log() {
        let failure = |code| {
            rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some("x".into()))
        };
        assert!(is_io_failure(&failure(rusqlite::ffi::SQLITE_IOERR_FSYNC)));
        assert!(is_io_failure(&failure(rusqlite::ffi::SQLITE_FULL)));
        assert!(!is_io_failure(&failure(rusqlite::ffi::SQLITE_BUSY)));
        assert!(!is_io_failure(&rusqlite::Error::InvalidQuery));
    }
}
