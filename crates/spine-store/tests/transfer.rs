//! The bulk operator contract (`TransferStore`, `SummaryStore`) run on both backends with the
//! same checks: SQLite always, PostgreSQL when `SPINE_TEST_DATABASE_URL` names a server
//! (skipped without it outside CI).

use spine_core::{Caller, EpochSeconds, RecordId, SCHEMA_VERSION, Scope, Timestamp};
use spine_store::{
    Access, AutoSummary, Embedding, ImportOutcome, ImportRecord, MissingSummaries, PgStore,
    RowidPage, Store, TransferStore,
};
use spine_testkit::records::record;

use super::on_both;

const SCOPE: &str = "acme:project:transfer";

#[test]
fn import_keeps_payload_keys_and_vectors_and_reports_present_and_clashing_ids() {
    on_both(|s| {
        let a = record(SCOPE, "Use rustls for TLS.", "alice", 1_800_000_000);
        let mut body = serde_json::to_string(&a).unwrap();
        body.insert_str(body.len() - 1, r#","from_the_future":{"x":1}"#);
        let v = [0.5f32, -1.0, 0.25];
        let item = |m: &spine_core::Memory, body: &'static str| ImportRecord {
            memory: m.clone(),
            body,
            vector: Some(Embedding { model: "m", vector: &v }),
        };
        let body: &'static str = Box::leak(body.into_boxed_str());
        assert_eq!(s.import_batch(&[item(&a, body)]).unwrap(), [ImportOutcome::Imported]);
        let mut clash = record(SCOPE, "another record, same short id", "alice", 1_800_000_001);
        clash.short_id = a.short_id.clone();
        let clash_body: &'static str =
            Box::leak(serde_json::to_string(&clash).unwrap().into_boxed_str());
        let outcomes = s.import_batch(&[item(&a, body), item(&clash, clash_body)]).unwrap();
        assert_eq!(outcomes, [ImportOutcome::Present, ImportOutcome::ShortIdTaken(a.id)]);
        assert_eq!(s.ids_present(&[a.id, clash.id]).unwrap(), [true, false]);
        assert_eq!(s.count_records(None).unwrap(), 1);

        let page = s.export_page(RowidPage { scope: None, after: 0, limit: 10 }, true).unwrap();
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].body, body, "the payload byte for byte, unknown keys included");
        let vector = page[0].vector.as_ref().unwrap();
        assert_eq!((vector.model.as_str(), vector.dims), ("m", 3));
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(vector.data, bytes);
        assert!(
            s.export_page(RowidPage { scope: None, after: page[0].rowid, limit: 10 }, true)
                .unwrap()
                .is_empty()
        );
        assert!(
            s.export_page(RowidPage { scope: None, after: 0, limit: 10 }, false).unwrap()[0]
                .vector
                .is_none()
        );
        let other = Scope::parse("scope", "acme:project:other").unwrap();
        assert_eq!(s.count_records(Some(&other)).unwrap(), 0);
        assert!(
            s.export_page(RowidPage { scope: Some(&other), after: 0, limit: 10 }, true)
                .unwrap()
                .is_empty()
        );
    });
}

#[test]
fn expired_records_are_paged_and_deleted_at_the_half_open_cutoff() {
    on_both(|s| {
        let mut at_cutoff = record(SCOPE, "expired exactly at the cut-off", "", 1);
        at_cutoff.not_after = Some(EpochSeconds::from_secs(1000));
        let mut after = record(SCOPE, "expires a second later", "", 2);
        after.not_after = Some(EpochSeconds::from_secs(1001));
        let live = record(SCOPE, "no window", "", 3);
        for m in [&at_cutoff, &after, &live] {
            s.insert(&spine_store::Access::operator(), m, Embedding { model: "m", vector: &[1.0] })
                .unwrap();
        }
        let cutoff = EpochSeconds::from_secs(1000);
        assert_eq!(s.count_expired(cutoff).unwrap(), 1);
        let page = s.expired_page(cutoff, 0, 10).unwrap();
        assert_eq!(page.iter().map(|e| e.id).collect::<Vec<_>>(), [at_cutoff.id]);
        assert_eq!(page[0].not_after, cutoff);
        let missing = RecordId::mint();
        assert_eq!(
            s.delete_expired(&[at_cutoff.id, after.id, missing], cutoff).unwrap(),
            [true, false, false]
        );
        assert_eq!(s.count_records(None).unwrap(), 2);
    });
}

#[test]
fn migrate_stamps_older_records_and_leaves_newer_and_lossy_ones() {
    on_both(|s| {
        let mut old = record(SCOPE, "written by an older binary", "", 1);
        old.schema_version = 0;
        let current = record(SCOPE, "current", "", 2);
        let newer = record(SCOPE, "from a newer binary", "", 3);
        let mut lossy =
            record(SCOPE, "an older record with a key this binary does not know", "", 4);
        lossy.schema_version = 0;
        let newer_body = serde_json::to_string(&newer).unwrap().replace(
            &format!("\"schema_version\":{SCHEMA_VERSION}"),
            &format!("\"schema_version\":{}", SCHEMA_VERSION + 1),
        );
        let mut lossy_body = serde_json::to_string(&lossy).unwrap();
        lossy_body.insert_str(lossy_body.len() - 1, r#","unknown":"kept""#);
        let old_body = serde_json::to_string(&old).unwrap();
        let current_body = serde_json::to_string(&current).unwrap();
        let items: Vec<ImportRecord<'_>> = [
            (&old, old_body.as_str()),
            (&current, current_body.as_str()),
            (&newer, newer_body.as_str()),
            (&lossy, lossy_body.as_str()),
        ]
        .into_iter()
        .map(|(m, body)| ImportRecord { memory: m.clone(), body, vector: None })
        .collect();
        s.import_batch(&items).unwrap();
        assert_eq!(
            s.schema_versions().unwrap(),
            [(0, 2), (SCHEMA_VERSION, 1), (SCHEMA_VERSION + 1, 1)]
        );
        let page = s.migrate_page(0, 10).unwrap();
        assert_eq!(page.migrated, [old.id]);
        assert_eq!((page.current, page.newer), (1, 1));
        assert_eq!(page.kept.len(), 1, "{:?}", page.kept);
        assert!(page.kept[0].1.contains("unknown"), "{:?}", page.kept);
        assert_eq!(
            s.schema_versions().unwrap(),
            [(0, 1), (SCHEMA_VERSION, 2), (SCHEMA_VERSION + 1, 1)]
        );
        let after = s.migrate_page(page.last_rowid.unwrap(), 10).unwrap();
        assert_eq!(after.last_rowid, None);
    });
}

#[test]
fn the_export_gate_passes_records_exported_as_they_are_now() {
    on_both(|s| {
        let (a, b) = (record(SCOPE, "a", "", 1), record(SCOPE, "b", "", 2));
        for m in [&a, &b] {
            s.insert(&spine_store::Access::operator(), m, Embedding { model: "m", vector: &[1.0] })
                .unwrap();
        }
        let ids = [a.id, b.id, RecordId::mint()];
        assert_eq!(s.exported_unchanged(&ids).unwrap(), [false, false, false]);
        s.mark_exported(std::slice::from_ref(&a), "out.jsonl", EpochSeconds::from_secs(1)).unwrap();
        assert_eq!(s.exported_unchanged(&ids).unwrap(), [true, false, false]);
        // Reading (access statistics) keeps the gate open; an edit closes it.
        s.touch(&a.id, Timestamp::from_micros(1_800_000_100_000_000)).unwrap();
        assert!(s.exported_unchanged(&ids).unwrap()[0]);
        let mut edited = a.clone();
        edited.content = "a, edited".into();
        assert!(s.replace(&Access::owned(&Caller::anonymous()), &edited, None).unwrap());
        assert!(!s.exported_unchanged(&ids).unwrap()[0]);
        s.mark_exported(&[edited], "again.jsonl", EpochSeconds::from_secs(2)).unwrap();
        assert!(s.exported_unchanged(&ids).unwrap()[0]);
    });
}

/// A deleted record's export mark goes with it, whichever way it is deleted: brought back by
/// `spine import`, it passes the purge gate only once exported again. A record deleted
/// between an export's read and its mark gets none.
#[test]
fn deleting_a_record_drops_its_export_mark() {
    on_both(|s| {
        let owner = Access::owned(&Caller::anonymous());
        let scope = Scope::parse("scope", SCOPE).unwrap();
        let (a, b, c) =
            (record(SCOPE, "a", "", 1), record(SCOPE, "b", "", 2), record(SCOPE, "c", "", 3));
        for m in [&a, &b, &c] {
            s.insert(&spine_store::Access::operator(), m, Embedding { model: "m", vector: &[1.0] })
                .unwrap();
        }
        s.mark_exported(&[a.clone(), b.clone()], "out.jsonl", EpochSeconds::from_secs(1)).unwrap();
        assert!(s.delete(&owner, &a.id).unwrap());
        assert_eq!(s.delete_scope(&owner, &scope).unwrap(), 2);
        s.mark_exported(std::slice::from_ref(&c), "late.jsonl", EpochSeconds::from_secs(2))
            .unwrap();
        let ids = [a.id, b.id, c.id];
        let bodies: Vec<String> =
            [&a, &b, &c].iter().map(|m| serde_json::to_string(m).unwrap()).collect();
        let items: Vec<ImportRecord<'_>> = [&a, &b, &c]
            .iter()
            .zip(&bodies)
            .map(|(m, body)| ImportRecord {
                memory: (*m).clone(),
                body,
                vector: Some(Embedding { model: "m", vector: &[1.0] }),
            })
            .collect();
        assert_eq!(s.import_batch(&items).unwrap(), vec![ImportOutcome::Imported; 3]);
        assert_eq!(s.exported_unchanged(&ids).unwrap(), [false, false, false]);
    });
}

#[test]
fn auto_summaries_fill_only_records_still_without_one() {
    on_both(|s| {
        let old = record(SCOPE, "The oldest record has a long content to summarize.", "", 10);
        let mut client = record(SCOPE, "A client summarized this one.", "", 20);
        client.summary = "client summary".into();
        client.summary_source = spine_core::SummarySource::Client;
        let young = record(SCOPE, "Too young to be swept.", "", 1000);
        let second = record(SCOPE, "A second old record.", "", 30);
        for m in [&old, &client, &young, &second] {
            s.insert(&spine_store::Access::operator(), m, Embedding { model: "m", vector: &[1.0] })
                .unwrap();
        }
        let which = MissingSummaries {
            scope: None,
            created_at_or_before: Timestamp::from_micros(500_000_000),
        };
        assert_eq!(s.count_missing_summaries(&which).unwrap(), 2);
        let first = s.missing_summaries(&which, None, 1).unwrap();
        assert_eq!(first.iter().map(|c| c.id).collect::<Vec<_>>(), [old.id]);
        let next =
            s.missing_summaries(&which, Some((first[0].created_at, first[0].id)), 10).unwrap();
        assert_eq!(next.iter().map(|c| c.id).collect::<Vec<_>>(), [second.id]);

        let summary =
            |egress_at| AutoSummary { summary: "Short.", model: "builtin:extractive", egress_at };
        assert!(
            !s.set_auto_summary(&old.id, "stale content", summary(None)).unwrap(),
            "content changed meanwhile"
        );
        let egress = Timestamp::from_micros(1_800_000_000_000_000);
        assert!(s.set_auto_summary(&old.id, &old.content, summary(Some(egress))).unwrap());
        assert!(
            !s.set_auto_summary(&old.id, &old.content, summary(None)).unwrap(),
            "already summarized"
        );
        let got = s.get_many(&[old.id]).unwrap().remove(0);
        assert_eq!(
            (got.summary.as_str(), got.summary_model.as_str()),
            ("Short.", "builtin:extractive")
        );
        assert_eq!(got.summary_source, spine_core::SummarySource::Auto);
        assert_eq!(got.summary_egress_at, Some(egress));
        assert_eq!(s.count_missing_summaries(&which).unwrap(), 1);
    });
}

/// The synchronous store is usable from inside an async runtime of either flavour (the
/// service calls it from blocking threads, tests and tools from `#[tokio::test]`).
#[test]
fn postgres_store_is_usable_inside_either_runtime_flavour() {
    let Some(db) = spine_testkit::postgres::fresh_database() else { return };
    let store = PgStore::connect(&db.url).unwrap();
    let a = record(SCOPE, "Called from inside a runtime.", "alice", 1_800_000_000);
    let body = serde_json::to_string(&a).unwrap();
    let item = ImportRecord { memory: a.clone(), body: &body, vector: None };
    let current = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    current.block_on(async { store.import_batch(std::slice::from_ref(&item)).unwrap() });
    let multi = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let n = multi.block_on(async { store.count_records(None).unwrap() });
    assert_eq!(n, 1);
}

/// A bulk load into an empty PostgreSQL table builds the HNSW index once, at its end (and
/// searches stay exact meanwhile); into a table that has one, the index is kept current.
#[test]
fn a_bulk_load_into_an_empty_postgres_table_builds_the_vector_index_at_its_end() {
    let Some(db) = spine_testkit::postgres::fresh_database() else { return };
    let store = PgStore::connect(&db.url).unwrap();
    let indexes = || -> Vec<String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (client, conn) =
                tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            let rows = client
                .query("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'memories_vec%'", &[])
                .await
                .unwrap();
            rows.iter().map(|r| r.get(0)).collect()
        })
    };
    let load = |store: &PgStore, n: usize| {
        let records: Vec<_> = (0..n)
            .map(|i| record(SCOPE, &format!("bulk record {i}"), "alice", 1_800_000_000 + i as i64))
            .collect();
        let with_vectors: Vec<_> =
            records.iter().cloned().zip((0..n).map(|i| [1.0, i as f32, 0.5])).collect();
        crate::import_records(store, &with_vectors, n);
        records
    };
    store.begin_bulk_load().unwrap();
    let records = load(&store, 20);
    assert!(indexes().is_empty(), "deferred while the load runs");
    let caller = Caller::authenticated("alice", "alice");
    let access = Access::read(&caller);
    let filter = spine_store::Filter::new(spine_store::ScopeFilter::All);
    let query = spine_store::NearestQuery {
        access: &access,
        filter: &filter,
        model: "m",
        vector: &[1.0, 19.0, 0.5],
        now: Timestamp::from_micros(1_900_000_000_000_000),
        any: 0,
        active: 3,
        exclude: None,
    };
    assert_eq!(store.nearest(&query).unwrap()[0].id, records[19].id, "exact meanwhile");
    store.finish_bulk_load().unwrap();
    assert_eq!(indexes(), ["memories_vec_hnsw_3"]);
    assert_eq!(store.nearest(&query).unwrap()[0].id, records[19].id);

    // Not empty: nothing is deferred, the index stays and is maintained.
    let other = PgStore::connect(&db.url).unwrap();
    other.begin_bulk_load().unwrap();
    load(&other, 5);
    other.finish_bulk_load().unwrap();
    assert_eq!(indexes(), ["memories_vec_hnsw_3"]);
    assert_eq!(other.count_records(None).unwrap(), 25);
}
