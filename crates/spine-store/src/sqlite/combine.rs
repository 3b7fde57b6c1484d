//! Writes that arrive together commit together: whichever writer finds nobody committing
//! takes every write queued at that moment, runs each in a savepoint of one transaction,
//! commits once, and hands each writer its own outcome (flat combining; the "group commit"
//! of databases, one level above [`durable`](super::durable)'s shared flushes).
//!
//! With one mutex around the write connection, each write took it in turn: under the
//! 16-core mix (hundreds of writes and `get_memory` touches a second) the connection was busy
//! most of the time, writers queued for it, and each hand-over woke the next
//! writer's thread, one among dozens runnable, which then had to wait for a core before its
//! short hold could even start. Here a queue forms while a batch runs; the next batch takes
//! all of it, so there is one hand-over and one commit per batch rather than per write, and
//! a commit's fixed cost (the log's frames for the pages every write touches: the tables'
//! upper pages, the change log's last page, the lexical index's pending terms) is paid once.
//! A lone writer is never delayed: there is no timer, only the queue that forms while a batch
//! runs, and a batch of one runs as a plain transaction (no savepoint). With 32 writer
//! threads on 2 cores (`spine-bench writes 32 5`, runs alternated) the store took more
//! records a second than one write at a time, and a write's and a touch's p50 fell; one
//! writer alone is unchanged, within the VM's spread (docs/performance.md, "Writes committed
//! together, statements compiled once").
//!
//! Each write keeps its own all-or-nothing: in a batch of several its statements run in a
//! savepoint, released when it returns `Ok` and rolled back when it returns an error or
//! panics, so a failed write leaves nothing and does not fail the others; alone, its
//! transaction is rolled back. Only a failed commit (a full disk, say) fails every write of
//! its batch, each with the commit's error, and leaves nothing of any of them.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use rusqlite::Connection;

use super::durable::GroupSync;

/// The most writes one batch takes; the rest wait for the next. Bounds how long one
/// transaction holds the database's write lock (another process's writer waits that long)
/// and how long the writer who runs it waits for its own result.
pub(super) const MAX_BATCH: usize = 64;

/// One write's statements, run on the write connection inside a batch's transaction;
/// returns whether they succeeded (their savepoint is released) or not (rolled back).
pub(super) type Job<'a> = Box<dyn FnOnce(&Connection) -> bool + Send + 'a>;

/// What a write is: it labels the write's metrics and says whether its writer waits for
/// the log's flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A write the caller asked for: acknowledged once flushed.
    Write,
    /// `get_memory`'s access count: flushed with the next write (module docs of
    /// [`super`], "Durability").
    Touch,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Write => "write",
            Kind::Touch => "touch",
        }
    }
}

/// How a write's batch ended for it.
pub(super) enum Outcome {
    /// Its statements ran (see the job's own result) and, if they succeeded, were
    /// committed in log group `through` ([`GroupSync::written`]; 0 for a batch of touches
    /// only, which starts no group: the next write's takes them along).
    Ran { through: u64 },
    /// Its batch could not start or commit: nothing of it is stored.
    Failed(rusqlite::Error),
    /// Its statements panicked (rolled back); the writer resumes the panic.
    Panicked(Box<dyn Any + Send>),
}

#[derive(Default)]
enum Turn {
    #[default]
    Queued,
    /// Run the queue: the writer before handed it over.
    Lead,
    Done(Outcome),
}

/// Where one writer waits for its outcome.
#[derive(Default)]
struct Ticket {
    turn: Mutex<Turn>,
    changed: Condvar,
}

impl Ticket {
    fn turn(&self) -> MutexGuard<'_, Turn> {
        // Only whole values are stored under it.
        self.turn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, turn: Turn) {
        *self.turn() = turn;
        self.changed.notify_one();
    }
}

/// A queued write: its job (until run) and its writer's ticket.
struct Entry {
    job: Option<Job<'static>>,
    ticket: Arc<Ticket>,
    /// Its writer has been given its outcome.
    told: bool,
    kind: Kind,
    asked: Instant,
}

impl Entry {
    /// Releases the writer with `outcome`; the job must be gone (run or dropped) by then,
    /// since the writer may free what it borrows as soon as it is released.
    fn tell(&mut self, outcome: Outcome) {
        debug_assert!(self.job.is_none());
        self.told = true;
        self.ticket.set(Turn::Done(outcome));
    }
}

impl Drop for Entry {
    /// A write dropped before its writer was told (the batch's leader panicked outside any
    /// job) releases its writer with an error rather than leaving it waiting; the job, if
    /// it never ran, goes first.
    fn drop(&mut self) {
        drop(self.job.take());
        if !self.told {
            let e = rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                Some("the batch of writes was abandoned".into()),
            );
            self.tell(Outcome::Failed(e));
        }
    }
}

#[derive(Default)]
struct Queue {
    entries: VecDeque<Entry>,
    /// A writer is running batches.
    leading: bool,
}

/// The queue of writes waiting for the write connection.
#[derive(Default)]
pub(super) struct Combiner {
    queue: Mutex<Queue>,
}

impl Combiner {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Only pushes, pops and a flag change under it.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `job` on `conn` in a batch with whatever other writes are queued, and returns
    /// once its batch has committed (or failed).
    pub(super) fn run<'a>(
        &self,
        conn: &Mutex<Connection>,
        wal: &GroupSync,
        kind: Kind,
        job: Job<'a>,
    ) -> Outcome {
        // SAFETY: only the lifetime changes. The job borrows from this call's caller, and
        // this call returns only once the ticket is `Done`. Only `Entry::tell` sets that,
        // and only once the job is gone: run (consumed by `run_batch`) or dropped unrun
        // (`Entry::drop` drops it before telling). Nothing else keeps the job: it lives in
        // its entry, in the queue and then in one batch, and `Combiner` is borrowed by this
        // call, so it cannot be dropped with the job inside while the caller waits. If this
        // call itself unwinds as a batch's leader, `HandOver` withdraws its entry from the
        // queue (dropping the job) before the caller's frame goes.
        let job = unsafe { std::mem::transmute::<Job<'a>, Job<'static>>(job) };
        let ticket = Arc::new(Ticket::default());
        let entry = Entry {
            job: Some(job),
            ticket: ticket.clone(),
            told: false,
            kind,
            asked: Instant::now(),
        };
        let lead = {
            let mut q = self.queue();
            q.entries.push_back(entry);
            !std::mem::replace(&mut q.leading, true)
        };
        if !lead {
            let mut turn = ticket.turn();
            loop {
                match std::mem::take(&mut *turn) {
                    Turn::Queued => {
                        turn = ticket.changed.wait(turn).unwrap_or_else(|p| p.into_inner())
                    }
                    Turn::Lead => break,
                    Turn::Done(outcome) => return outcome,
                }
            }
        }
        self.lead(conn, wal, &ticket)
    }

    /// Runs batches until `mine` is done, then hands the queue to the oldest writer left,
    /// or leaves it to the next to come.
    fn lead(&self, conn: &Mutex<Connection>, wal: &GroupSync, mine: &Arc<Ticket>) -> Outcome {
        let _hand_over = HandOver { combiner: self, mine };
        loop {
            // The connection first: whatever queues while it is busy elsewhere (a checkpoint's
            // last pass, a write running alone) joins this batch.
            let conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            let batch: Vec<Entry> = {
                let mut q = self.queue();
                let n = q.entries.len().min(MAX_BATCH);
                q.entries.drain(..n).collect()
            };
            if !batch.is_empty() {
                run_batch(&conn, wal, batch);
            }
            drop(conn);
            let mut turn = mine.turn();
            match std::mem::take(&mut *turn) {
                Turn::Done(outcome) => return outcome,
                other => *turn = other,
            }
        }
    }
}

#[cfg(test)]
impl Combiner {
    /// Writes waiting for a batch.
    pub(super) fn queued(&self) -> usize {
        self.queue().entries.len()
    }
}

/// Hands the queue over however [`Combiner::lead`] ends, so that no writer waits for a
/// leader that is gone. If the leader unwinds (nothing in `lead` outside the jobs, which
/// are caught, is expected to panic), its own write, if still queued, is withdrawn first:
/// what the job borrows is about to be freed.
struct HandOver<'c> {
    combiner: &'c Combiner,
    mine: &'c Arc<Ticket>,
}

impl Drop for HandOver<'_> {
    fn drop(&mut self) {
        let mut q = self.combiner.queue();
        if std::thread::panicking() {
            q.entries.retain(|e| !Arc::ptr_eq(&e.ticket, self.mine));
        }
        match q.entries.front() {
            Some(next) => next.ticket.set(Turn::Lead),
            None => q.leading = false,
        }
    }
}

/// One transaction: each entry's job in a savepoint, one commit, each writer told.
fn run_batch(conn: &Connection, wal: &GroupSync, mut batch: Vec<Entry>) {
    let began = Instant::now();
    for e in &batch {
        metrics::histogram!("spine_store_write_wait_seconds", "kind" => e.kind.label())
            .record((began - e.asked).as_secs_f64());
    }
    metrics::counter!("spine_store_write_batches_total").increment(1);
    if !conn.is_autocommit() {
        // Left open by a panic on this connection: nothing of it was acknowledged.
        let _ = conn.execute_batch("ROLLBACK");
    }
    if let Err(e) = run_sql(conn, "BEGIN IMMEDIATE") {
        for entry in &mut batch {
            entry.job = None;
            entry.tell(Outcome::Failed(share(&e)));
        }
        return;
    }
    // A write alone needs no savepoint: the transaction is its own.
    let alone = batch.len() == 1;
    let ran: Vec<JobEnd> = batch
        .iter_mut()
        .map(|entry| run_job(conn, entry.job.take().expect("each job runs once"), !alone))
        .collect();
    let keep = ran.iter().any(|r| matches!(r, JobEnd::Kept));
    let committed = if keep { run_sql(conn, "COMMIT") } else { Ok(()) };
    if (!keep || committed.is_err()) && !conn.is_autocommit() {
        // Nothing to keep, or a failed commit: nothing of the batch may stay half-applied.
        let _ = conn.execute_batch("ROLLBACK");
    }
    let through = if batch.iter().any(|e| e.kind == Kind::Write) {
        wal.written(conn.total_changes())
    } else {
        0
    };
    // Each write's share of the batch's time on the connection: summed over writes, the
    // time the connection was held.
    let hold = began.elapsed().as_secs_f64() / batch.len() as f64;
    for (entry, ran) in batch.iter_mut().zip(ran) {
        metrics::histogram!("spine_store_write_hold_seconds", "kind" => entry.kind.label())
            .record(hold);
        let outcome = match (ran, &committed) {
            (JobEnd::Panicked(payload), _) => Outcome::Panicked(payload),
            (JobEnd::NotKept(e), _) => Outcome::Failed(e),
            // A job that failed kept nothing: its own error is what its writer gets.
            (JobEnd::Failed, _) | (JobEnd::Kept, Ok(())) => Outcome::Ran { through },
            (JobEnd::Kept, Err(e)) => Outcome::Failed(share(e)),
        };
        entry.tell(outcome);
    }
}

/// How one job ended inside its batch.
enum JobEnd {
    /// It succeeded and its savepoint was released: it commits with the batch.
    Kept,
    /// It returned an error; its savepoint was rolled back.
    Failed,
    /// It ran (or could not) but its changes could not be kept: this is why.
    NotKept(rusqlite::Error),
    /// It panicked; its savepoint was rolled back.
    Panicked(Box<dyn Any + Send>),
}

/// Runs `job`, in a savepoint if `isolated` (a batch of several): released if it succeeds,
/// rolled back if it fails or panics. Alone, a job that fails leaves its batch nothing to
/// keep, and the transaction is rolled back.
fn run_job(conn: &Connection, job: Job<'static>, isolated: bool) -> JobEnd {
    if isolated && let Err(e) = run_sql(conn, "SAVEPOINT write") {
        return JobEnd::NotKept(e);
    }
    let end = match catch_unwind(AssertUnwindSafe(|| job(conn))) {
        Ok(true) if !isolated => return JobEnd::Kept,
        Ok(true) => match run_sql(conn, "RELEASE write") {
            Ok(()) => return JobEnd::Kept,
            Err(e) => JobEnd::NotKept(e),
        },
        Ok(false) => JobEnd::Failed,
        Err(payload) => JobEnd::Panicked(payload),
    };
    if isolated {
        let _ = conn.execute_batch("ROLLBACK TO write; RELEASE write");
    }
    end
}

/// Runs one statement of the batch's framing, compiled once per connection (each write
/// runs two to four of them).
fn run_sql(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// The same failure, for each writer of a batch (rusqlite's errors are not `Clone`): the
/// SQLite code is kept, so a full disk is still reported as one.
fn share(e: &rusqlite::Error) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}
