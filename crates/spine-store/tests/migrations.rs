//! A database written by an older spine opens, migrates to the current schema and serves
//! every read, vector search included; reopening a migrated database changes nothing.

use rusqlite::Connection;
use serde_json::json;
use spine_core::{Caller, IdRef, Memory, RecordId, ShortId, Timestamp};
use spine_store::{
    Access, Filter, Gate, NearestQuery, Page, ScopeFilter, Selection, SqliteStore, Store,
};

const SCOPE: &str = "run1:project:spine";

fn memory(content: &str) -> Memory {
    serde_json::from_value(json!({
        "id": RecordId::mint().to_string(), "short_id": ShortId::mint().to_string(),
        "content": content, "scope": SCOPE, "source": "user-said", "category": "decision",
        "created_at": "2026-01-01T00:00:00Z", "owner": "", "tags": ["db"]
    }))
    .unwrap()
}

fn user_version(store: &SqliteStore) -> i64 {
    let conn = Connection::open(store.path()).unwrap();
    conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap()
}

fn table_exists(store: &SqliteStore, name: &str) -> bool {
    let conn = Connection::open(store.path()).unwrap();
    conn.query_row("SELECT count(*) FROM sqlite_master WHERE name = ?1", [name], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap()
        > 0
}

/// The schema as steps 1 and 2 left it, with one record and its vector written the way
/// that binary wrote them.
fn v2_database(dir: &std::path::Path, m: &Memory, vector: &[f32]) {
    let conn = Connection::open(dir.join(spine_store::DB_FILE)).unwrap();
    conn.execute_batch(
        "CREATE TABLE memories (
            rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, short_id TEXT NOT NULL,
            owner TEXT, visibility TEXT NOT NULL, scope TEXT NOT NULL,
            category TEXT NOT NULL, created_at INTEGER NOT NULL, not_before INTEGER,
            not_after INTEGER, archived_at INTEGER, superseded_by TEXT, body TEXT NOT NULL);
         CREATE INDEX memories_short_id ON memories(short_id);
         CREATE TABLE memory_tags (
            memory INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
            tag TEXT NOT NULL, PRIMARY KEY (memory, tag)) WITHOUT ROWID;
         CREATE TABLE vectors (
            memory INTEGER PRIMARY KEY REFERENCES memories(rowid) ON DELETE CASCADE,
            model TEXT NOT NULL, dims INTEGER NOT NULL, vec BLOB NOT NULL);
         CREATE TABLE idempotency (
            owner TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
            id TEXT NOT NULL, short_id TEXT NOT NULL,
            PRIMARY KEY (owner, key)) WITHOUT ROWID;
         PRAGMA user_version = 2;",
    )
    .unwrap();
    conn.execute(
        "INSERT INTO memories (id, short_id, owner, visibility, scope, category, created_at, body)
         VALUES (?1, ?2, '', '', ?3, 'decision', ?4, ?5)",
        (
            m.id.to_string(),
            m.short_id.as_str(),
            SCOPE,
            m.created_at.as_micros(),
            serde_json::to_string(m).unwrap(),
        ),
    )
    .unwrap();
    conn.execute("INSERT INTO memory_tags (memory, tag) VALUES (1, 'db')", []).unwrap();
    let blob: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    conn.execute(
        "INSERT INTO vectors (memory, model, dims, vec) VALUES (1, 'm1', ?1, ?2)",
        (vector.len() as i64, blob),
    )
    .unwrap();
}

#[test]
fn a_v2_database_migrates_and_serves_every_read() {
    let dir = tempfile::tempdir().unwrap();
    let m = memory("Use WAL mode");
    v2_database(dir.path(), &m, &[0.6, 0.8]);

    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(user_version(&store), 11, "every migration applied");
    assert!(!table_exists(&store, "memory_fts"), "step 6 dropped the FTS5 index");
    assert!(table_exists(&store, "changes"));
    assert!(table_exists(&store, "audit_events"), "step 11 added the audit log");

    let access = Access::read(&Caller::anonymous());
    let got = store.resolve(&access, &IdRef::Id(m.id)).unwrap().unwrap();
    assert_eq!(got.content, "Use WAL mode");
    let mut filter = Filter::new(ScopeFilter::All);
    filter.tags_all = vec!["db".into()];
    let found = store
        .nearest(&NearestQuery {
            access: &access,
            filter: &filter,
            model: "m1",
            vector: &[1.0, 0.0],
            now: Timestamp::from_micros(1_900_000_000_000_000),
            any: 5,
            active: 5,
            exclude: None,
        })
        .unwrap();
    assert_eq!(found.len(), 1, "the migrated record is searchable");
    assert_eq!(found[0].id, m.id);
    assert!((found[0].score - 0.6).abs() < 1e-6);
    let listed = store
        .list(
            Selection { access: &access, filter: &filter, gate: Gate::Off },
            Page::recent(None, 0, 10),
        )
        .unwrap();
    assert_eq!(listed.len(), 1);

    // New writes after the migration reach the change log and the index.
    let n = memory("Second record");
    store
        .insert(
            &spine_store::Access::operator(),
            &n,
            spine_store::Embedding { model: "m1", vector: &[1.0, 0.0] },
        )
        .unwrap();
    let found = store
        .nearest(&NearestQuery {
            access: &access,
            filter: &Filter::new(ScopeFilter::All),
            model: "m1",
            vector: &[1.0, 0.0],
            now: Timestamp::from_micros(1_900_000_000_000_000),
            any: 5,
            active: 0,
            exclude: None,
        })
        .unwrap();
    assert_eq!(found.iter().map(|f| f.id).collect::<Vec<_>>(), vec![n.id, m.id]);
}

#[test]
fn reopening_a_migrated_store_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = memory("kept");
    {
        let store = SqliteStore::open(dir.path()).unwrap();
        store
            .insert(
                &spine_store::Access::operator(),
                &m,
                spine_store::Embedding { model: "m1", vector: &[1.0] },
            )
            .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(user_version(&store), 11);
    let got = store.resolve(&Access::read(&Caller::anonymous()), &IdRef::Id(m.id)).unwrap();
    assert_eq!(got.unwrap(), m);
}

#[test]
fn a_database_from_a_newer_spine_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let conn = Connection::open(dir.path().join(spine_store::DB_FILE)).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    }
    let err = SqliteStore::open(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("newer spine"), "{err}");
}

/// Step 9 cuts the links earlier deletes left dangling: a record superseded by one that no
/// longer exists is a live head again, in its column and its payload alike.
#[test]
fn step_9_makes_a_record_whose_successor_was_deleted_a_live_head() {
    let dir = tempfile::tempdir().unwrap();
    let (mut dangling, kept) = (memory("Deploys go out on Tuesdays"), memory("Use WAL mode"));
    dangling.superseded_by = Some(RecordId::mint());
    {
        let store = SqliteStore::open(dir.path()).unwrap();
        for m in [&dangling, &kept] {
            store
                .insert(
                    &spine_store::Access::operator(),
                    m,
                    spine_store::Embedding { model: "m1", vector: &[1.0] },
                )
                .unwrap();
        }
    }
    {
        let conn = Connection::open(dir.path().join(spine_store::DB_FILE)).unwrap();
        conn.execute_batch(
            "DROP TRIGGER memories_splice_deleted; DROP INDEX memories_superseded_by;
             DROP TRIGGER memories_forget_exported; DROP TABLE audit_events;
             PRAGMA user_version = 8;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(user_version(&store), 11);
    let got = store.get_many(&[dangling.id, kept.id]).unwrap();
    assert_eq!(got[0].superseded_by, None);
    assert_eq!(got[0], Memory { superseded_by: None, ..dangling }, "nothing else changed");
    assert_eq!(got[1], kept);
}

/// Step 10 drops the export marks earlier deletes left behind, and keeps the others.
#[test]
fn step_10_drops_the_export_marks_of_deleted_records() {
    let dir = tempfile::tempdir().unwrap();
    let kept = memory("Use WAL mode");
    {
        let store = SqliteStore::open(dir.path()).unwrap();
        store
            .insert(
                &spine_store::Access::operator(),
                &kept,
                spine_store::Embedding { model: "m1", vector: &[1.0] },
            )
            .unwrap();
    }
    {
        let conn = Connection::open(dir.path().join(spine_store::DB_FILE)).unwrap();
        conn.execute_batch(&format!(
            "DROP TRIGGER memories_forget_exported; DROP TABLE audit_events;
             INSERT INTO exported (id, digest, exported_at, file)
                VALUES ('{}', 'd1', 1, 'a.jsonl'), ('{}', 'd2', 1, 'a.jsonl');
             PRAGMA user_version = 9;",
            kept.id,
            RecordId::mint()
        ))
        .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(user_version(&store), 11);
    let conn = Connection::open(store.path()).unwrap();
    let ids: Vec<String> = conn
        .prepare("SELECT id FROM exported")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(ids, [kept.id.to_string()]);
}
