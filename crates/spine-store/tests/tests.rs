//! Store tests: the search index against SQL, and schema migrations.
//!
//! One test binary for the crate (linking one binary per file cost minutes of CI).

mod adjacent;
mod audit;
mod index;
mod migrations;
mod operator;
mod pg_review;
mod pg_search;
mod reads;
mod tags_and_citations;
mod transfer;

/// Imports `records` with their vectors (embedder id `m`) into `store`, `chunk` records per
/// `import_batch`, each record's body its JSON.
fn import_records<V: AsRef<[f32]>>(
    store: &dyn spine_store::TransferStore,
    records: &[(spine_core::Memory, V)],
    chunk: usize,
) {
    for part in records.chunks(chunk) {
        let bodies: Vec<String> =
            part.iter().map(|(m, _)| serde_json::to_string(m).unwrap()).collect();
        let items: Vec<spine_store::ImportRecord<'_>> = part
            .iter()
            .zip(&bodies)
            .map(|((m, v), b)| spine_store::ImportRecord {
                memory: m.clone(),
                body: b,
                vector: Some(spine_store::Embedding { model: "m", vector: v.as_ref() }),
            })
            .collect();
        store.import_batch(&items).unwrap();
    }
}

/// Runs `check` on a fresh SQLite store and, when a server is configured (CI always has
/// one), on a fresh PostgreSQL database.
fn on_both(check: impl Fn(&dyn spine_store::OperatorStore)) {
    let dir = tempfile::tempdir().unwrap();
    check(&spine_store::SqliteStore::open(dir.path()).unwrap());
    if let Some(db) = spine_testkit::postgres::fresh_database() {
        let store = spine_store::PgStore::connect(&db.url).unwrap();
        check(&store);
        // The store's connections close before the database is dropped.
        drop(store);
    }
}

/// [`on_both`] with both stores holding `records`, each with the vector `[0.6, 0.8]` of
/// embedder `m`.
fn on_both_engines(records: &[spine_core::Memory], check: impl Fn(&dyn spine_store::Store)) {
    let with_vectors: Vec<(spine_core::Memory, Vec<f32>)> =
        records.iter().map(|m| (m.clone(), vec![0.6, 0.8])).collect();
    on_both(|store| {
        import_records(store, &with_vectors, 100);
        check(store);
    });
}
