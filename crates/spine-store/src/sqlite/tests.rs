//! Tests of the SQLite store: connections, batched writes, the reader pool, opening, and
//! reads with and without the search index.

use std::time::Duration;

use super::open::open_connection;
use super::readers::{IDLE_READERS_PER_CPU, MIN_IDLE_READERS, idle_readers};
use super::schema::MIGRATIONS;
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

/// Readers and the writer read the file through a memory map (see
/// [`MMAP_BYTES`](super::open::MMAP_BYTES)); the bundled SQLite's limit (2 GiB) is what the
/// setting is clamped to. A read connection taken out within [`QUIET`](super::readers::QUIET)
/// of a commit reads with `pread` instead, and maps the file again once the store has been
/// quiet that long.
#[test]
fn readers_map_the_file_only_while_the_store_is_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = SqliteStore::open(dir.path()).unwrap();
    let mapped =
        |c: &Connection| -> i64 { c.pragma_query_value(None, "mmap_size", |r| r.get(0)).unwrap() };
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

/// Temporary files stay in memory on every connection (`open_connection`): a container with
/// a read-only root and only its data volume writable has no temporary directory.
#[test]
fn temporary_files_stay_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let temp =
        |c: &Connection| -> i64 { c.pragma_query_value(None, "temp_store", |r| r.get(0)).unwrap() };
    assert_eq!(temp(&store.lock()), 2, "MEMORY");
    assert_eq!(temp(&store.read().unwrap()), 2, "MEMORY");
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

/// After a failed flush of the log the write is refused as not durable, and so is the next
/// until a checkpoint has put every committed frame into the database file: then writes
/// resume, nothing committed before is lost, and the log has started over.
#[test]
fn a_failed_flush_refuses_writes_until_a_checkpoint_recovers_the_log() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    pad_table(&store);
    store.write(pad(1)).unwrap();
    store.wal.fail_flushes.store(1, SeqCst);
    let refused = store.write(pad(2)).unwrap_err();
    let StoreError::NotDurable(why) = &refused else { panic!("{refused:?}") };
    assert!(why.contains("Input/output error") && why.contains("refused"), "{why}");
    assert!(store.wal.failed().is_some());
    // Reads go on; the next write recovers first (the checkpoint) and is acknowledged.
    assert_eq!(pads(&store), vec![1, 2], "committed, not acknowledged");
    store.write(pad(3)).unwrap();
    assert!(store.wal.failed().is_none());
    let wal = std::fs::metadata(dir.path().join("spine.db-wal")).map_or(0, |m| m.len());
    let (_, synced, _) = store.wal.counts();
    assert!(synced >= 3, "{synced}");
    assert!(wal < 64 * 1024, "the checkpoint started the log over: {wal} bytes");
    // Failed again: refused again, and recovered again by the next write.
    store.wal.fail_flushes.store(1, SeqCst);
    assert!(matches!(store.write(pad(4)), Err(StoreError::NotDurable(_))));
    store.write(pad(5)).unwrap();
    assert_eq!(pads(&store), vec![1, 2, 3, 4, 5]);
    drop(store);
    let again = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(pads(&again), vec![1, 2, 3, 4, 5]);
}

/// Runs `f` while a connection to `path` holds the write lock, which it lets go 150 ms
/// after `f` starts (long enough that what `f` does meets the lock; SQLite's busy wait
/// and [`enter_wal`](super::open::enter_wal)'s retries outlast it) or as soon as `f` returns.
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
    let mode: String = store.lock().pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
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
    assert_eq!(store.nearest(&q).unwrap().iter().map(|n| n.id).collect::<Vec<_>>(), [b.id, a.id]);
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

/// The splice trigger (schema step 9) finds a deleted record's predecessors through the
/// partial index on `superseded_by`, not by scanning the table once per deleted record.
#[test]
fn predecessors_are_found_by_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let conn = store.lock();
    let plan: Vec<String> = conn
        .prepare("EXPLAIN QUERY PLAN SELECT id FROM memories WHERE superseded_by = ?1")
        .unwrap()
        .query_map(["x"], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert!(plan.iter().any(|d| d.contains("memories_superseded_by")), "{plan:?}");
}
