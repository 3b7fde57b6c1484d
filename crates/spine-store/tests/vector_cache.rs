//! The in-memory vector cache stays coherent with the database: this process's writes and
//! other processes' writes (another connection on the same file) are both seen by search.

use serde_json::json;
use spine_core::{Caller, IdRef, Memory, RecordId, ShortId, Timestamp};
use spine_store::{Access, Embedding, Filter, ScopeFilter, SqliteStore, Store};

fn memory(content: &str) -> Memory {
    serde_json::from_value(json!({
        "id": RecordId::mint().to_string(), "short_id": ShortId::mint().to_string(),
        "content": content, "scope": "run1:project:spine", "source": "user-said",
        "category": "decision", "created_at": "2026-01-01T00:00:00Z", "owner": ""
    }))
    .unwrap()
}

/// Every candidate's vector, by id.
fn vectors(store: &SqliteStore, model: &str) -> Vec<(RecordId, Vec<f32>)> {
    let mut out: Vec<(RecordId, Vec<f32>)> = store
        .candidates(
            &Access::read(&Caller::anonymous()),
            &Filter::new(ScopeFilter::All),
            model,
            Timestamp::from_micros(1_800_000_000_000_000),
        )
        .unwrap()
        .into_iter()
        .map(|c| (c.id, c.vector.to_vec()))
        .collect();
    out.sort_by_key(|(id, _)| *id);
    out
}

fn emb<'a>(v: &'a [f32]) -> Embedding<'a> {
    Embedding { model: "m1", vector: v }
}

#[test]
fn own_and_foreign_writes_reach_the_next_search() {
    let dir = tempfile::tempdir().unwrap();
    let a = SqliteStore::open(dir.path()).unwrap();
    let b = SqliteStore::open(dir.path()).unwrap();
    let anon = Access::owned(&Caller::anonymous());

    let one = memory("one");
    a.insert(&one, emb(&[1.0, 0.0])).unwrap();
    assert_eq!(vectors(&a, "m1"), vec![(one.id, vec![1.0, 0.0])], "first fill");

    // Own writes after the fill: insert, replace with a new vector, set_vector.
    let two = memory("two");
    a.insert(&two, emb(&[0.0, 1.0])).unwrap();
    a.replace(&anon, &one, Some(emb(&[0.5, 0.5]))).unwrap();
    let mut want = vec![(one.id, vec![0.5, 0.5]), (two.id, vec![0.0, 1.0])];
    want.sort_by_key(|(id, _)| *id);
    assert_eq!(vectors(&a, "m1"), want);

    // Another connection (another process) writes: a new record, a re-embedded one, a delete.
    let three = memory("three");
    b.insert(&three, emb(&[0.6, 0.8])).unwrap();
    b.set_vector(&two.id, emb(&[0.8, 0.6])).unwrap();
    b.delete(&anon, &one.id).unwrap();
    let mut want = vec![(two.id, vec![0.8, 0.6]), (three.id, vec![0.6, 0.8])];
    want.sort_by_key(|(id, _)| *id);
    assert_eq!(vectors(&a, "m1"), want, "a sees b's writes");

    // Vectors of another embedder are not candidates.
    b.set_vector(&three.id, Embedding { model: "m2", vector: &[1.0, 0.0] }).unwrap();
    assert_eq!(vectors(&a, "m1"), vec![(two.id, vec![0.8, 0.6])]);
    assert_eq!(vectors(&a, "m2"), vec![(three.id, vec![1.0, 0.0])]);

    // The owner predicate and deletions still come from SQL: a deleted record's stale vector
    // never resurfaces, even when its rowid is reused by a new record.
    a.delete(&anon, &two.id).unwrap();
    let four = memory("four");
    a.insert(&four, emb(&[0.0, 1.0])).unwrap();
    assert_eq!(vectors(&a, "m1"), vec![(four.id, vec![0.0, 1.0])]);
    assert!(a.resolve(&anon, &IdRef::Id(two.id)).unwrap().is_none());
}
