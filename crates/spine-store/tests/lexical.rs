//! The lexical index (migration 3): BM25 over `spine_core::lexical` terms of each record's
//! content, summary and tags, kept in step with every write and delete.

use rusqlite::Connection;
use serde_json::json;
use spine_core::{Caller, Memory, RecordId, Scope, ShortId};
use spine_store::{Access, Embedding, SqliteStore, Store};

const SCOPE: &str = "run1:project:spine";

fn memory(content: &str, extra: serde_json::Value) -> Memory {
    let mut v = json!({
        "id": RecordId::mint().to_string(), "short_id": ShortId::mint().to_string(),
        "content": content, "scope": SCOPE, "source": "user-said", "category": "decision",
        "created_at": "2026-01-01T00:00:00Z", "owner": ""
    });
    v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    serde_json::from_value(v).unwrap()
}

fn insert(store: &SqliteStore, content: &str, extra: serde_json::Value) -> RecordId {
    let m = memory(content, extra);
    store.insert(&m, Embedding { model: "test", vector: &[1.0, 0.0] }).unwrap();
    m.id
}

fn anon() -> Access {
    Access::read(&Caller::anonymous())
}

/// Ten records that share none of the test queries' terms, so that a term carried by a
/// few records has a positive inverse document frequency.
fn filler(store: &SqliteStore) -> Vec<RecordId> {
    (0..10).map(|i| insert(store, &format!("unrelated note number {i}"), json!({}))).collect()
}

fn scores(store: &SqliteStore, query: &str, ids: &[RecordId]) -> Vec<(RecordId, f32)> {
    store.lexical_scores(&spine_core::lexical::query_terms(query), ids).unwrap()
}

fn matched(store: &SqliteStore, query: &str, ids: &[RecordId]) -> Vec<RecordId> {
    let mut out: Vec<RecordId> = scores(store, query, ids).into_iter().map(|(id, _)| id).collect();
    out.sort();
    out
}

fn sorted(mut ids: Vec<RecordId>) -> Vec<RecordId> {
    ids.sort();
    ids
}

/// Rows of the FTS table matching `term`, read past the store (deleted records included
/// if their terms were left behind).
fn indexed(store: &SqliteStore, term: &str) -> i64 {
    let conn = Connection::open(store.path()).unwrap();
    conn.query_row(
        "SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?1",
        [format!("\"{term}\"")],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn migrating_a_v2_database_backfills_the_lexical_index() {
    let dir = tempfile::tempdir().unwrap();
    let with_tag = memory("Retry the upload with backoff", json!({"tags": ["flaky-network"]}));
    let with_summary =
        memory("see the notes", json!({"summary": "load_config_from_env panics on empty"}));
    {
        // The schema as steps 1 and 2 left it, written the way that binary wrote rows.
        let conn = Connection::open(dir.path().join("spine.db")).unwrap();
        conn.execute_batch(
            "CREATE TABLE memories (
                rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, short_id TEXT NOT NULL,
                owner TEXT, visibility TEXT NOT NULL, scope TEXT NOT NULL,
                category TEXT NOT NULL, created_at INTEGER NOT NULL, not_before INTEGER,
                not_after INTEGER, archived_at INTEGER, superseded_by TEXT, body TEXT NOT NULL);
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
        let mut ins = conn
            .prepare(
                "INSERT INTO memories (id, short_id, owner, visibility, scope, category,
                    created_at, body) VALUES (?1, ?2, '', '', ?3, 'decision', 0, ?4)",
            )
            .unwrap();
        for m in [&with_tag, &with_summary] {
            let body = serde_json::to_string(m).unwrap();
            ins.execute((m.id.to_string(), m.short_id.as_str(), SCOPE, body)).unwrap();
        }
        // A payload this binary cannot decode is still indexed from the keys it has.
        ins.execute((
            RecordId::mint().to_string(),
            "ODD",
            SCOPE,
            r#"{"content": "written by a future spine", "tags": 7}"#,
        ))
        .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut ids = filler(&store);
    ids.extend([with_tag.id, with_summary.id]);
    assert_eq!(matched(&store, "flaky network", &ids), vec![with_tag.id], "tags are indexed");
    assert_eq!(matched(&store, "upload", &ids), vec![with_tag.id], "content is indexed");
    assert_eq!(
        matched(&store, "load_config_from_env", &ids),
        vec![with_summary.id],
        "summary is indexed"
    );
    assert_eq!(indexed(&store, "future"), 1);
    let conn = Connection::open(store.path()).unwrap();
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, 5, "every migration applied");
}

#[test]
fn reopening_a_migrated_store_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let store = SqliteStore::open(dir.path()).unwrap();
        insert(&store, "the cache key is sha256 of the path", json!({}))
    };
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(matched(&store, "sha256", &[id]), vec![id]);
    assert_eq!(indexed(&store, "sha256"), 1, "indexed once");
}

#[test]
fn deletes_remove_terms() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let a = insert(&store, "zeppelin one", json!({}));
    let b = insert(&store, "zeppelin two", json!({}));
    let other = insert(&store, "zeppelin elsewhere", json!({"scope": "run1:project:other"}));
    assert_eq!(indexed(&store, "zeppelin"), 3);
    assert!(store.delete(&anon(), &a).unwrap());
    assert_eq!(indexed(&store, "zeppelin"), 2);
    assert_eq!(matched(&store, "zeppelin", &[a, b, other]), sorted(vec![b, other]));
    let scope = Scope::parse("scope", SCOPE).unwrap();
    assert_eq!(store.delete_scope(&anon(), &scope).unwrap(), 1);
    assert_eq!(indexed(&store, "zeppelin"), 1);
    assert_eq!(matched(&store, "zeppelin", &[a, b, other]), vec![other]);
}

#[test]
fn a_rewrite_replaces_terms() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut m = memory("uses the walrus operator", json!({"tags": ["python"]}));
    store.insert(&m, Embedding { model: "test", vector: &[1.0] }).unwrap();
    m.content = "uses the pipe operator".into();
    m.tags = vec!["elixir".into()];
    assert!(store.replace(&anon(), &m, None).unwrap());
    assert!(matched(&store, "walrus python", &[m.id]).is_empty());
    assert_eq!(matched(&store, "pipe", &[m.id]), vec![m.id]);
    assert_eq!(matched(&store, "elixir", &[m.id]), vec![m.id]);
    assert_eq!(indexed(&store, "walrus"), 0);
    assert_eq!(indexed(&store, "operator"), 1);
}

#[test]
fn more_matching_rare_terms_rank_higher() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut ids = filler(&store);
    let exact = insert(&store, "load_config_from_env panics when a variable is empty", json!({}));
    let partial = insert(&store, "load the config from a file, then the env", json!({}));
    let weak = insert(&store, "the config lives in one place", json!({}));
    ids.extend([exact, partial, weak]);
    let s = scores(&store, "load_config_from_env panics on empty var", &ids);
    let order: Vec<RecordId> = s.iter().map(|(id, _)| *id).collect();
    assert_eq!(order, vec![exact, partial, weak], "{s:?}");
    assert!(s.iter().all(|(_, score)| *score > 0.0), "higher is better, always positive");
}

#[test]
fn whole_paths_and_versions_are_single_terms() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut ids = filler(&store);
    let path = insert(&store, "the trait lives in crates/spine-store/src/lib.rs", json!({}));
    let other_lib = insert(&store, "see crates/spine-core/src/lib.rs", json!({}));
    let v = insert(&store, "pinned tokio to v1.35.0 for the regression", json!({}));
    let other_v = insert(&store, "tokio v1.36.0 is fine", json!({}));
    ids.extend([path, other_lib, v, other_v]);
    let order = |q: &str| -> Vec<RecordId> {
        scores(&store, q, &ids).into_iter().map(|(id, _)| id).collect()
    };
    assert_eq!(order("crates/spine-store/src/lib.rs")[0], path);
    assert_eq!(order("1.35.0")[0], v, "v1.35.0 answers to 1.35.0");
    assert_eq!(order("tokio v1.35.0")[0], v);
}

#[test]
fn only_the_given_ids_are_scored() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let a = insert(&store, "kafka consumer lag", json!({}));
    let _b = insert(&store, "kafka producer retries", json!({}));
    assert_eq!(matched(&store, "kafka", &[a]), vec![a]);
    assert!(matched(&store, "kafka", &[]).is_empty());
    assert!(store.lexical_scores(&[], &[a]).unwrap().is_empty());
    assert!(matched(&store, "kafka", &[RecordId::mint()]).is_empty(), "unknown ids are skipped");
}

#[test]
fn fts_syntax_in_query_terms_never_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let id = insert(&store, "NEAR the parser: a-b (c) \"quoted\" star* col:x", json!({}));
    let nasty = [
        "\"",
        "\"\"",
        "\"unbalanced",
        "*",
        "star*",
        "^parser",
        ":",
        "col:x",
        "terms:x",
        "-",
        "-parser",
        "(",
        ")",
        "(c)",
        "NEAR",
        "NEAR(a b)",
        "NEAR/2",
        "AND",
        "OR",
        "NOT",
        "+",
        "{terms}",
        "[x]",
        "a OR",
        "",
        " ",
        "\\",
        "'",
        "\u{0}",
    ];
    for t in nasty {
        store.lexical_scores(&[t.to_owned()], &[id]).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        scores(&store, t, &[id]);
    }
    let all: Vec<String> = nasty.iter().map(|t| t.to_string()).collect();
    store.lexical_scores(&all, &[id]).unwrap();
    assert_eq!(matched(&store, &nasty.join(" "), &[id]), vec![id]);
    assert_eq!(matched(&store, "parser:", &[id]), vec![id]);
}
