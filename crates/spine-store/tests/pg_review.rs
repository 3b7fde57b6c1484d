//! `ReviewStore` on both backends: each check writes the same records to a SQLite store and
//! to a PostgreSQL store (a fresh database on the server `SPINE_TEST_DATABASE_URL` names),
//! runs the same operations on both, and asserts the expected answer on each and the same
//! answer from both. Without a server only the SQLite half runs (the PostgreSQL half is
//! skipped; CI fails instead, see `spine_testkit::postgres`). Races between two PostgreSQL
//! nodes run on PostgreSQL alone.

use std::fmt::Debug;

use spine_core::{EpochSeconds, Memory, RecordId, Scope, State, Timestamp};
use spine_store::{
    Embedding, PgStore, ReviewStore, RowidPage, SqliteStore, StateCounts, TransferStore,
    VectorExpectation, VectorStamp, Violation, record_digest,
};
use spine_testkit::postgres::FreshDatabase;

mod consolidation;
mod purge;
mod verify;

const T: i64 = 1_800_000_000;
const SCOPE: &str = "acme:project:review";
const OTHER: &str = "acme:project:other";

fn at(secs: i64) -> Timestamp {
    Timestamp::from_micros(secs * 1_000_000)
}

fn scope() -> Scope {
    Scope::parse("scope", SCOPE).unwrap()
}

fn record(scope: &str, content: &str, owner: &str, created: i64) -> Memory {
    spine_testkit::records::record(scope, content, owner, created)
}

fn e<'a>(model: &'a str, vector: &'a [f32]) -> Embedding<'a> {
    Embedding { model, vector }
}

const V: &[f32] = &[1.0, 0.5];

/// One backend under test; the store is declared first so it goes before its database.
enum Backend {
    Sqlite(Box<SqliteStore>, tempfile::TempDir),
    Pg(Box<PgStore>, FreshDatabase),
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite(..) => "sqlite",
            Backend::Pg(..) => "postgres",
        }
    }

    fn store(&self) -> &dyn ReviewStore {
        match self {
            Backend::Sqlite(s, _) => s.as_ref(),
            Backend::Pg(s, _) => s.as_ref(),
        }
    }

    fn put(&self, m: &Memory, embedding: Embedding<'_>) {
        self.store().insert(&spine_store::Access::operator(), m, embedding).unwrap();
    }

    /// Records that `records` (as they are now) were exported to `file`. PostgreSQL has no
    /// `TransferStore` yet: the row `mark_exported` would write is written by hand.
    fn mark_exported(&self, records: &[Memory], file: &str) {
        match self {
            Backend::Sqlite(s, _) => {
                s.mark_exported(records, file, EpochSeconds::from_secs(T)).unwrap()
            }
            Backend::Pg(..) => {
                for m in records {
                    self.sql(&format!(
                        "INSERT INTO exported (id, digest, exported_at, file)
                         VALUES ('{}', '{}', {T}, '{file}')
                         ON CONFLICT (id) DO UPDATE SET digest = excluded.digest,
                            exported_at = excluded.exported_at, file = excluded.file",
                        m.id,
                        record_digest(m).unwrap()
                    ))
                }
            }
        }
    }

    /// Runs `sql` on the backend's database, behind the store's back (to corrupt a row).
    fn sql(&self, sql: &str) {
        match self {
            Backend::Sqlite(_, dir) => {
                let conn =
                    rusqlite::Connection::open(dir.path().join(spine_store::DB_FILE)).unwrap();
                conn.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
                conn.execute_batch(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
            Backend::Pg(_, db) => {
                let (url, sql) = (db.url.clone(), sql.to_owned());
                std::thread::spawn(move || {
                    let rt =
                        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                    rt.block_on(async {
                        let (client, conn) =
                            tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
                        let driver = tokio::spawn(conn);
                        client.batch_execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
                        drop(client);
                        let _ = driver.await;
                    })
                })
                .join()
                .unwrap();
            }
        }
    }

    /// The SQL that removes record `id`'s vector.
    fn drop_vector(&self, id: &RecordId) {
        self.sql(&match self {
            Backend::Sqlite(..) => format!(
                "DELETE FROM vectors WHERE memory = (SELECT rowid FROM memories WHERE id = '{id}')"
            ),
            Backend::Pg(..) => {
                format!(
                    "UPDATE memories SET vec = NULL, model = NULL, dims = NULL WHERE id = '{id}'"
                )
            }
        })
    }

    /// The SQL that gives record `id`'s vector a stated length its data does not have.
    fn misstate_dims(&self, id: &RecordId, dims: usize) {
        self.sql(&match self {
            Backend::Sqlite(..) => format!(
                "UPDATE vectors SET dims = {dims}
                 WHERE memory = (SELECT rowid FROM memories WHERE id = '{id}')"
            ),
            Backend::Pg(..) => format!("UPDATE memories SET dims = {dims} WHERE id = '{id}'"),
        })
    }
}

/// A SQLite store, and a PostgreSQL one when a server is configured.
fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let mut out = vec![Backend::Sqlite(Box::new(SqliteStore::open(dir.path()).unwrap()), dir)];
    match spine_testkit::postgres::fresh_database() {
        Some(db) => out.push(Backend::Pg(Box::new(PgStore::connect(&db.url).unwrap()), db)),
        None => eprintln!("no PostgreSQL test server: only the SQLite half runs"),
    }
    out
}

/// Runs `f` on every backend; every backend must give the same answer, which is returned.
fn same<R: PartialEq + Debug>(backends: &[Backend], f: impl Fn(&Backend) -> R) -> R {
    let mut answers = backends.iter().map(|b| (b.name(), f(b)));
    let (first_name, first) = answers.next().expect("at least SQLite");
    for (name, answer) in answers {
        assert_eq!(answer, first, "{name} disagrees with {first_name}");
    }
    first
}

fn count(m: &Memory, now: Timestamp, c: &mut StateCounts) {
    let states = spine_core::derive_states(m, now);
    c.records += 1;
    if states.is_empty() {
        c.active += 1;
    } else {
        c.hidden += 1;
    }
    for s in states {
        match s {
            State::Archived => c.archived += 1,
            State::Superseded => c.superseded += 1,
            State::Expired => c.expired += 1,
            State::Scheduled => c.scheduled += 1,
        }
    }
}

#[test]
fn state_counts_agree_for_every_marker_at_the_window_boundaries() {
    let backends = backends();
    let windows = [None, Some(T - 10), Some(T), Some(T + 10)];
    let mut records = Vec::new();
    for archived in [false, true] {
        for superseded in [false, true] {
            for nb in windows {
                for na in windows {
                    let mut m = record(SCOPE, &format!("r{}", records.len()), "", T - 100);
                    m.archived_at = archived.then(|| EpochSeconds::from_secs(T - 5));
                    m.superseded_by = superseded.then(RecordId::mint);
                    m.not_before = nb.map(EpochSeconds::from_secs);
                    m.not_after = na.map(EpochSeconds::from_secs);
                    records.push(m);
                }
            }
        }
    }
    let mut elsewhere = record(OTHER, "elsewhere", "bob", T);
    elsewhere.not_after = Some(EpochSeconds::from_secs(T));
    for b in &backends {
        for m in records.iter().chain([&elsewhere]) {
            b.put(m, e("m", V));
        }
    }
    // Exactly at a boundary, a microsecond before the next second (whole seconds count),
    // and either side.
    let instants = [at(T), Timestamp::from_micros(T * 1_000_000 + 999_999), at(T - 10), at(T + 10)];
    for now in instants {
        let mut want = StateCounts { scope: SCOPE.into(), ..Default::default() };
        for m in &records {
            count(m, now, &mut want);
        }
        let mut other = StateCounts { scope: OTHER.into(), ..Default::default() };
        count(&elsewhere, now, &mut other);
        let one = same(&backends, |b| b.store().state_counts(Some(&scope()), now).unwrap());
        assert_eq!(one, vec![want.clone()], "at {now:?}");
        let all = same(&backends, |b| b.store().state_counts(None, now).unwrap());
        // Scope order: bytewise.
        assert_eq!(all, vec![other, want], "at {now:?}");
    }
    let none = Scope::parse("scope", "nobody:project:here").unwrap();
    assert!(same(&backends, |b| b.store().state_counts(Some(&none), at(T)).unwrap()).is_empty());
}

#[test]
fn vector_stamps_agree() {
    let backends = backends();
    let stored: Vec<(Memory, &str, &[f32])> = vec![
        (record(SCOPE, "a", "", T), "m", V),
        (record(SCOPE, "b", "", T), "m", &[0.0, 1.0]),
        (record(SCOPE, "c", "", T), "m", &[1.0, 2.0, 3.0]),
        (record(SCOPE, "d", "", T), "Z", V),
        (record(OTHER, "e", "", T), "a", V),
        (record(OTHER, "f", "", T), "m", V),
    ];
    for b in &backends {
        for (m, model, v) in &stored {
            b.put(m, e(model, v));
        }
        // A record without a vector has no stamp.
        b.drop_vector(&stored[1].0.id);
    }
    let stamp = |model: &str, dims, vectors| VectorStamp { model: model.into(), dims, vectors };
    let all = same(&backends, |b| b.store().vector_stamps(None).unwrap());
    // Model order is bytewise ("Z" before "a").
    assert_eq!(all, vec![stamp("Z", 2, 1), stamp("a", 2, 1), stamp("m", 2, 2), stamp("m", 3, 1)]);
    let one = same(&backends, |b| b.store().vector_stamps(Some(&scope())).unwrap());
    assert_eq!(one, vec![stamp("Z", 2, 1), stamp("m", 2, 1), stamp("m", 3, 1)]);
    assert_eq!(
        VectorExpectation::choose(None, &all),
        VectorExpectation { model: Some("m".into()), dims: Some(2), configured: false }
    );
}

/// Every page of verify over `scope`: records checked per page, and every violation.
fn verify_all(
    s: &dyn ReviewStore,
    scope: Option<&Scope>,
    limit: usize,
) -> (Vec<u64>, Vec<Violation>) {
    let expect = VectorExpectation { model: Some("m".into()), dims: Some(2), configured: true };
    let (mut after, mut pages, mut found) = (0, Vec::new(), Vec::new());
    loop {
        let page = s.verify_page(RowidPage { scope, after, limit }, &expect).unwrap();
        let Some(last) = page.last_rowid else {
            assert_eq!(page.checked, 0);
            return (pages, found);
        };
        assert!(last > after, "pages move forward");
        after = last;
        pages.push(page.checked);
        found.extend(page.violations);
    }
}

/// Two nodes on one PostgreSQL database: `Backend::Pg` (with its test hooks) and a second
/// store on the same database. `None` without a test server.
fn two_nodes() -> Option<(Backend, PgStore)> {
    let db = spine_testkit::postgres::fresh_database()?;
    let other = PgStore::connect(&db.url).unwrap();
    Some((Backend::Pg(Box::new(PgStore::connect(&db.url).unwrap()), db), other))
}
