//! Nearest search on PostgreSQL against an exact scan: through the HNSW index (iterative
//! scan) when many rows pass the filters, exactly when few do.

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spine_core::{Caller, Scope, Timestamp, Visibility};
use spine_store::{
    Access, Embedding, Filter, NearestQuery, PgStore, ScopeFilter, Store, TransferStore,
};
use spine_testkit::records::record;

const DIMS: usize = 16;

fn unit(rng: &mut StdRng) -> Vec<f32> {
    let v: Vec<f32> = (0..DIMS).map(|_| rng.random_range(-1.0..1.0)).collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

#[test]
fn filtered_nearest_matches_an_exact_scan_on_few_rows_and_on_many() {
    let Some(db) = spine_testkit::postgres::fresh_database() else { return };
    let store = PgStore::connect(&db.url).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    // 6,000 records in a big scope (owners alice and bob, every third shared), 30 of
    // alice's in a small one: more than the exact-scan limit pass a cross-scope search,
    // far fewer a search of the small scope.
    let mut records = Vec::new();
    for i in 0..6030 {
        let (scope, owner) = match i {
            0..6000 => ("acme:project:big", if i % 2 == 0 { "alice" } else { "bob" }),
            _ => ("acme:project:small", "alice"),
        };
        let mut m = record(scope, &format!("record {i}"), owner, 1_800_000_000 + i as i64);
        if i % 3 == 0 {
            m.visibility = Visibility::Shared;
        }
        records.push((m, unit(&mut rng)));
    }
    store.begin_bulk_load().unwrap();
    crate::import_records(&store, &records, 1000);
    store.finish_bulk_load().unwrap();

    let alice = Caller::authenticated("alice", "alice");
    let access = Access::read(&alice);
    let readable = |m: &spine_core::Memory| {
        m.owner.as_deref() == Some("alice") || m.visibility == Visibility::Shared
    };
    let small = Scope::parse("scope", "acme:project:small").unwrap();
    for (filter, wanted_recall) in
        [(Filter::new(ScopeFilter::One(small.clone())), 1.0), (Filter::new(ScopeFilter::All), 0.9)]
    {
        let (mut hits, mut total) = (0, 0);
        for i in 0..20 {
            let q = unit(&mut rng);
            let mut exact: Vec<(f32, String)> = records
                .iter()
                .filter(|(m, _)| readable(m))
                .filter(|(m, _)| match &filter.scope {
                    ScopeFilter::One(s) => m.scope == *s,
                    _ => true,
                })
                .map(|(m, v)| (spine_core::cosine(&q, v), m.id.to_string()))
                .collect();
            exact.sort_by(|a, b| b.0.total_cmp(&a.0));
            let want: HashSet<String> = exact.into_iter().take(10).map(|(_, id)| id).collect();
            let got = store
                .nearest(&NearestQuery {
                    access: &access,
                    filter: &filter,
                    model: "m",
                    vector: &q,
                    now: Timestamp::from_micros(1_900_000_000_000_000),
                    // Every other search asks for both scans (one statement of two
                    // branches): all records are active, so both give the same ten.
                    any: if i % 2 == 0 { 0 } else { 10 },
                    active: 10,
                    exclude: None,
                })
                .unwrap();
            assert_eq!(got.len(), 10);
            hits += got.iter().filter(|n| want.contains(&n.id.to_string())).count();
            total += 10;
        }
        let recall = hits as f64 / total as f64;
        assert!(recall >= wanted_recall, "{:?}: recall {recall}", filter.scope);
    }
}

/// `n` records of alice's in one scope (their ids, in the order written), each a payload of 600
/// letters at random (which does not compress) and a 384-dimension vector, as the model
/// gives.
fn rows_with_vectors(store: &PgStore, seed: u64, n: i64) -> Vec<spine_core::RecordId> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let content: String = (0..600).map(|_| rng.random_range(b'a'..=b'z') as char).collect();
            let m = record("acme:project:rows", &content, "alice", 1_800_000_000 + i);
            let v: Vec<f32> = (0..384).map(|_| rng.random_range(-1.0..1.0)).collect();
            store
                .insert(&spine_store::Access::operator(), &m, Embedding { model: "m", vector: &v })
                .unwrap();
            m.id
        })
        .collect()
}

/// Vectors stay in their rows, where an exact scan reads them without a fetch from the
/// TOAST table per row: with a payload of a few hundred bytes a 384-dimension vector takes
/// the row past the 2 KiB at which PostgreSQL moves a value out, and pgvector's default
/// storage moved the vector (one chunk of its 1,540 bytes); the payload goes instead.
#[test]
fn vectors_stay_in_their_rows_beside_long_payloads() {
    let Some(db) = spine_testkit::postgres::fresh_database() else { return };
    let store = PgStore::connect(&db.url).unwrap();
    rows_with_vectors(&store, 5, 20);
    spine_testkit::postgres::execute(
        &db.url,
        "DO $$ DECLARE toast regclass; moved bigint; BEGIN
            SELECT reltoastrelid::regclass INTO toast FROM pg_class WHERE relname = 'memories';
            EXECUTE format('SELECT count(*) FROM %s WHERE length(chunk_data) = 1540', toast)
                INTO moved;
            IF moved > 0 THEN RAISE EXCEPTION '% vectors out of their rows', moved; END IF;
            IF NOT EXISTS (SELECT 1 FROM memories WHERE pg_column_size(vec) = 1544) THEN
                RAISE EXCEPTION 'no 384-dimension vector stored';
            END IF;
        END $$",
    );
}

/// Reading a record rewrites its row (the access count): with room left in each page the
/// new version stays beside the old one and no index gets an entry for it (a HOT update).
/// In pages filled to the brim (PostgreSQL's default) a touch moved the row to another
/// page, with a new entry in every index, the HNSW graph's among them. Each page's first
/// row touched is the one checked: the room kept for it is there whatever else runs on
/// the server (the room a later version needs comes from pruning the dead one, which a
/// transaction open anywhere on the server holds back).
#[test]
fn a_touched_row_stays_in_its_page() {
    let Some(db) = spine_testkit::postgres::fresh_database() else { return };
    let store = PgStore::connect(&db.url).unwrap();
    let ids = rows_with_vectors(&store, 7, 20);
    spine_testkit::postgres::execute(
        &db.url,
        "CREATE TABLE pages AS
            SELECT id, created_at, (ctid::text::point)[0]::bigint AS page FROM memories",
    );
    // In the order they were written: each page's first row is touched first.
    for id in &ids {
        store.touch(id, Timestamp::from_micros(1_900_000_000_000_000)).unwrap();
    }
    spine_testkit::postgres::execute(
        &db.url,
        "DO $$ DECLARE moved bigint; pages bigint; BEGIN
            SELECT count(*) FILTER (WHERE (m.ctid::text::point)[0]::bigint <> f.page), count(*)
                INTO moved, pages
                FROM (SELECT DISTINCT ON (page) id, page FROM pages
                      ORDER BY page, created_at) f JOIN memories m USING (id);
            IF pages < 5 THEN RAISE EXCEPTION 'the rows fill % pages, not 5 or more', pages; END IF;
            IF moved > 0 THEN
                RAISE EXCEPTION '% of % pages had no room for a row''s next version', moved, pages;
            END IF;
            IF (SELECT count(*) FROM memories WHERE body->>'access_count' = '1') <> 20 THEN
                RAISE EXCEPTION 'the touches were not counted';
            END IF;
        END $$",
    );
}

/// A search whose answer holds hundreds of vectors, on connections that never met the
/// vector type: tokio-postgres looks an unknown result type up in the middle of an
/// unprepared statement's response, and without the type known beforehand the lookup's
/// answer waited behind the rows for ever (the call failed after its 30 s limit).
#[test]
fn a_first_search_returning_hundreds_of_vectors_does_not_wait_on_itself() {
    let Some(db) = spine_testkit::postgres::fresh_database() else { return };
    let mut rng = StdRng::seed_from_u64(7);
    let records: Vec<_> = (0..400)
        .map(|i| {
            let m = record("acme:project:wide", &format!("wide {i}"), "alice", 1_800_000_000 + i);
            let v: Vec<f32> = (0..384).map(|_| rng.random_range(-1.0..1.0)).collect();
            (m, v)
        })
        .collect();
    {
        let store = PgStore::connect(&db.url).unwrap();
        crate::import_records(&store, &records, 1000);
    }
    // A new pool: every connection new.
    let store = PgStore::connect(&db.url).unwrap();
    let alice = Caller::authenticated("alice", "alice");
    let got = store
        .nearest(&NearestQuery {
            access: &Access::read(&alice),
            filter: &Filter::new(ScopeFilter::All),
            model: "m",
            vector: &records[0].1,
            now: Timestamp::from_micros(1_900_000_000_000_000),
            any: 400,
            active: 400,
            exclude: None,
        })
        .unwrap();
    assert_eq!(got.len(), 400);
    assert_eq!(got[0].id, records[0].0.id);
}

/// A search through the HNSW index sends its transaction's start, settings, scans and commit
/// together. One that fails (pgvector refuses a NaN in a vector) must still leave its
/// connection outside any transaction: every pooled connection then searches and writes.
#[test]
fn a_failed_search_through_the_index_leaves_no_transaction_behind() {
    let Some(db) = spine_testkit::postgres::fresh_database() else { return };
    let store = PgStore::connect(&db.url).unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    // More rows pass the filters than an exact scan takes: searches go through the index.
    let records: Vec<_> = (0..5_100)
        .map(|i| {
            (
                record("acme:project:many", &format!("many {i}"), "alice", 1_800_000_000 + i),
                unit(&mut rng),
            )
        })
        .collect();
    store.begin_bulk_load().unwrap();
    crate::import_records(&store, &records, 1000);
    store.finish_bulk_load().unwrap();
    let alice = Caller::authenticated("alice", "alice");
    let (access, filter) = (Access::read(&alice), Filter::new(ScopeFilter::All));
    let search = |vector: &[f32]| {
        store.nearest(&NearestQuery {
            access: &access,
            filter: &filter,
            model: "m",
            vector,
            now: Timestamp::from_micros(1_900_000_000_000_000),
            any: 10,
            active: 10,
            exclude: None,
        })
    };
    // The first search probes, finds the filters large and goes through the index.
    assert_eq!(search(&records[0].1).unwrap()[0].id, records[0].0.id);
    let mut nan = records[1].1.clone();
    nan[0] = f32::NAN;
    assert!(search(&nan).is_err(), "pgvector refuses NaN");
    // Sequential calls take the pool's connections in turn: each one searches through the
    // index, and a write on it is not refused as inside a read-only transaction.
    for i in 0..40 {
        let (m, v) = &records[i * 100 + 2];
        assert_eq!(search(v).unwrap()[0].id, m.id, "search {i}");
        let new =
            record("acme:project:many", &format!("new {i}"), "alice", 1_900_000_000 + i as i64);
        store
            .insert(
                &spine_store::Access::operator(),
                &new,
                Embedding { model: "m", vector: &unit(&mut rng) },
            )
            .unwrap();
    }
}
