//! Bulk operator access to the SQLite store: what `spine export`, `spine import`,
//! `spine prune-expired` and `spine migrate` read and write.
//!
//! These work on every record of every owner (operator commands, not tool calls), and each
//! walks the table in rowid order, one page at a time, so memory stays bounded and an
//! interrupted run continues where it stopped. Every write is plain SQL on `memories` and
//! `vectors`, so the `changes` triggers keep the search index of any server on the same
//! data directory current; a delete cascades to the record's tags and vector.
//!
//! The extract-before-delete gate of `spine-review purge` (SPEC "Operator commands"): a
//! record may be deleted for good only after `spine export` wrote it out, as it is now.
//! `spine export` records each record it writes, with a digest of it, in the `exported`
//! table (migration 7); the gate passes a record whose current digest equals the exported
//! one, so a record edited after its export must be exported again. The digest
//! ([`crate::record_digest`]) leaves out the access statistics: reading a record is not a
//! change worth re-exporting for. (Tested on both backends in `tests/transfer.rs`.)

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use spine_core::{EpochSeconds, Memory, RecordId, Scope};

use super::{SqliteStore, Where, write_row, write_vector};
use crate::Access;
use crate::codec::parse_id;
use crate::operator::export_gate_verdict;
use crate::{
    AuditEvent, Embedding, ExpiredRecord, ImportOutcome, ImportRecord, MigratePage, Result,
    RowidPage, StoredRecord, TransferStore, record_digest,
};

/// The extract-before-delete gate for each of `ids` (`crate::operator`): whether the record
/// exists and was exported as it is now, and the file it was last exported to. On an open
/// connection, so the purge's delete transaction, which holds the store's lock, can ask.
pub(super) fn export_gate(
    conn: &Connection,
    ids: &[RecordId],
) -> Result<Vec<(bool, Option<String>)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT m.body, e.digest, e.file FROM memories m JOIN exported e ON e.id = m.id
         WHERE m.id = ?1",
    )?;
    ids.iter()
        .map(|id| {
            let row = stmt
                .query_row([id.to_string()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()?;
            export_gate_verdict(row)
        })
        .collect()
}

impl TransferStore for SqliteStore {
    fn count_records(&self, scope: Option<&Scope>) -> Result<u64> {
        let conn = self.lock();
        let n: i64 = match scope {
            Some(s) => conn.query_row(
                "SELECT COUNT(*) FROM memories WHERE scope = ?1",
                [s.as_str()],
                |r| r.get(0),
            )?,
            None => conn.query_row("SELECT COUNT(*) FROM memories", [], |r| r.get(0))?,
        };
        Ok(n as u64)
    }

    fn export_page(&self, page: RowidPage<'_>, vectors: bool) -> Result<Vec<StoredRecord>> {
        let RowidPage { scope, after, limit } = page;
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let out = tx
            .prepare_cached(
                "SELECT m.rowid, m.id, m.body, v.model, v.dims, v.vec
                 FROM memories m LEFT JOIN vectors v ON v.memory = m.rowid AND ?4
                 WHERE m.rowid > ?1 AND (?2 IS NULL OR m.scope = ?2)
                 ORDER BY m.rowid LIMIT ?3",
            )?
            .query_and_then(params![after, scope.map(Scope::as_str), limit as i64, vectors], |r| {
                StoredRecord::read(r)
            })?
            .collect::<Result<_>>()?;
        tx.commit()?;
        Ok(out)
    }

    fn ids_present(&self, ids: &[RecordId]) -> Result<Vec<bool>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached("SELECT 1 FROM memories WHERE id = ?1")?;
        ids.iter()
            .map(|id| Ok(stmt.query_row([id.to_string()], |_| Ok(())).optional()?.is_some()))
            .collect()
    }

    fn audit_as(&self, access: Access) {
        self.set_operator_audit(access);
    }

    fn audit_page(
        &self,
        scope: Option<&Scope>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, AuditEvent)>> {
        super::audit::page(&*self.read()?, scope.map(Scope::as_str), after, limit)
    }

    fn import_audit(&self, events: &[AuditEvent]) -> Result<u64> {
        self.write(|tx| super::audit::import(tx, events))
    }

    fn set_vectors(&self, items: &[(RecordId, Embedding<'_>)]) -> Result<Vec<bool>> {
        let (set, wrote) = self.write(|tx| {
            let mut find = tx.prepare_cached("SELECT rowid, scope FROM memories WHERE id = ?1")?;
            let (mut set, mut changed) = (Vec::with_capacity(items.len()), Vec::new());
            for (id, embedding) in items {
                let row: Option<(i64, String)> =
                    find.query_row([id.to_string()], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
                set.push(row.is_some());
                if let Some((rowid, scope)) = row {
                    write_vector(tx, rowid, *embedding)?;
                    changed.push((*id, scope));
                }
            }
            Ok((set, self.record_operator(tx, changed)?))
        })?;
        self.operator_recorded(wrote);
        Ok(set)
    }

    fn import_batch(&self, records: &[ImportRecord<'_>]) -> Result<Vec<ImportOutcome>> {
        let (out, wrote) = self.write(|tx| {
            let mut imported = Vec::new();
            let mut out = Vec::with_capacity(records.len());
            for r in records {
                let id = r.memory.id.to_string();
                let present = tx
                    .query_row("SELECT 1 FROM memories WHERE id = ?1", [&id], |_| Ok(()))
                    .optional()?
                    .is_some();
                if present {
                    out.push(ImportOutcome::Present);
                    continue;
                }
                let holder: Option<String> = tx
                    .query_row(
                        "SELECT id FROM memories WHERE short_id = ?1 LIMIT 1",
                        [r.memory.short_id.as_str()],
                        |row| row.get(0),
                    )
                    .optional()?;
                if let Some(holder) = holder {
                    out.push(ImportOutcome::ShortIdTaken(parse_id(&holder)?));
                    continue;
                }
                let rowid = write_row(tx, &r.memory, r.body)?;
                if let Some(e) = r.vector {
                    write_vector(tx, rowid, e)?;
                }
                imported.push((r.memory.id, r.memory.scope.as_str().to_owned()));
                out.push(ImportOutcome::Imported);
            }
            let wrote = self.record_operator(tx, imported)?;
            Ok((out, wrote))
        })?;
        self.operator_recorded(wrote);
        Ok(out)
    }

    fn expired_page(
        &self,
        cutoff: EpochSeconds,
        after: i64,
        limit: usize,
    ) -> Result<Vec<ExpiredRecord>> {
        let (w, sql) = Where::expired_page(cutoff, after, limit);
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(&sql)?;
        stmt.query_and_then(params_from_iter(w.params), |r| ExpiredRecord::read(r))?.collect()
    }

    fn count_expired(&self, cutoff: EpochSeconds) -> Result<u64> {
        super::query::count(&self.lock(), Where::expired(cutoff))
    }

    fn delete_expired(&self, ids: &[RecordId], cutoff: EpochSeconds) -> Result<Vec<bool>> {
        let w = Where::expired(cutoff);
        // The condition's values first, then the id's `?`.
        let sql = format!("DELETE FROM memories AS m WHERE {} AND m.id = ? RETURNING scope", w.sql);
        let (out, wrote) = self.write(|tx| {
            let mut out = Vec::with_capacity(ids.len());
            let mut gone = Vec::new();
            {
                let mut stmt = tx.prepare_cached(&sql)?;
                for id in ids {
                    let params = w.params.iter().cloned().chain([Value::Text(id.to_string())]);
                    let scope: Option<String> =
                        stmt.query_row(params_from_iter(params), |r| r.get(0)).optional()?;
                    out.push(scope.is_some());
                    gone.extend(scope.map(|s| (*id, s)));
                }
            }
            let wrote = self.record_operator(tx, gone)?;
            Ok((out, wrote))
        })?;
        self.operator_recorded(wrote);
        Ok(out)
    }

    fn schema_versions(&self) -> Result<Vec<(u32, u64)>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT coalesce(json_extract(body, '$.schema_version'), 0) AS v, COUNT(*)
             FROM memories GROUP BY v ORDER BY v",
        )?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?
            .map(|row| row.map(|(v, n)| (u32::try_from(v).unwrap_or(0), n as u64)))
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Only the payload changes: no indexed column, so no entry in the change log.
    fn migrate_page(&self, after: i64, limit: usize) -> Result<MigratePage> {
        let (page, wrote) = self.write(|tx| {
            let mut page = MigratePage::default();
            let mut migrated_ids = Vec::new();
            {
                let mut select = tx.prepare_cached(
                    "SELECT rowid, id, body FROM memories WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
                )?;
                let mut update =
                    tx.prepare_cached("UPDATE memories SET body = ?1 WHERE rowid = ?2")?;
                let rows: Vec<(i64, String, String)> = select
                    .query_map(params![after, limit as i64], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })?
                    .collect::<Result<_, _>>()?;
                for (rowid, id, body) in rows {
                    page.last_rowid = Some(rowid);
                    if let Some(migrated) = page.consider(id.clone(), &body)? {
                        update.execute(params![migrated, rowid])?;
                        migrated_ids.push(parse_id(&id)?);
                    }
                }
            }
            let changed = super::audit::scoped(tx, &migrated_ids)?;
            let wrote = self.record_operator(tx, changed)?;
            Ok((page, wrote))
        })?;
        self.operator_recorded(wrote);
        Ok(page)
    }

    fn mark_exported(&self, records: &[Memory], file: &str, at: EpochSeconds) -> Result<()> {
        self.write(|tx| {
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO exported (id, digest, exported_at, file)
                     SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?1)
                     ON CONFLICT(id) DO UPDATE SET digest = excluded.digest,
                        exported_at = excluded.exported_at, file = excluded.file",
                )?;
                for m in records {
                    stmt.execute(params![m.id.to_string(), record_digest(m)?, at.as_secs(), file])?;
                }
            }
            Ok(())
        })
    }

    fn exported_unchanged(&self, ids: &[RecordId]) -> Result<Vec<bool>> {
        Ok(export_gate(&self.lock(), ids)?.into_iter().map(|(passes, _)| passes).collect())
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::codec::decode;
    use crate::sqlite::rows::encode;
    use crate::{Embedding, Store};
    use spine_core::SCHEMA_VERSION;

    fn record(content: &str) -> Memory {
        spine_testkit::records::record("a:project:x", content, "", 1_800_000_000)
    }

    fn open() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        (dir, store)
    }

    #[test]
    fn import_keeps_the_payload_verbatim_and_skips_present_ids() {
        let (_dir, store) = open();
        let m = record("a");
        let mut body = encode(&m).unwrap();
        body.insert_str(body.len() - 1, r#","from_the_future":{"x":1}"#);
        let v = [0.5f32, -1.0];
        let item = ImportRecord {
            memory: m.clone(),
            body: &body,
            vector: Some(Embedding { model: "m", vector: &v }),
        };
        assert_eq!(
            store.import_batch(std::slice::from_ref(&item)).unwrap(),
            [ImportOutcome::Imported]
        );
        assert_eq!(store.import_batch(&[item]).unwrap(), [ImportOutcome::Present]);
        let page = store.export_page(RowidPage { scope: None, after: 0, limit: 10 }, true).unwrap();
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].body, body);
        let vector = page[0].vector.clone().unwrap();
        assert_eq!((vector.model.as_str(), vector.dims), ("m", 2));
        assert_eq!(vector.data, crate::sqlite::rows::vec_to_blob(&v));
        assert!(
            store.export_page(RowidPage { scope: None, after: 0, limit: 10 }, false).unwrap()[0]
                .vector
                .is_none()
        );
        assert!(
            store
                .export_page(RowidPage { scope: None, after: page[0].rowid, limit: 10 }, true)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn import_refuses_a_short_id_held_by_another_record() {
        let (_dir, store) = open();
        let held = record("held");
        store
            .insert(&crate::Access::operator(), &held, Embedding { model: "m", vector: &[1.0] })
            .unwrap();
        let mut clash = record("clash");
        clash.short_id = held.short_id.clone();
        let body = encode(&clash).unwrap();
        let out = store
            .import_batch(&[ImportRecord { memory: clash, body: &body, vector: None }])
            .unwrap();
        assert_eq!(out, [ImportOutcome::ShortIdTaken(held.id)]);
        assert_eq!(store.count_records(None).unwrap(), 1);
    }

    #[test]
    fn expired_means_not_after_at_or_before_the_cutoff() {
        let (_dir, store) = open();
        let mut at = record("ends at 100");
        at.not_after = Some(EpochSeconds::from_secs(100));
        let mut later = record("ends at 101");
        later.not_after = Some(EpochSeconds::from_secs(101));
        let open_ended = record("no window");
        for m in [&at, &later, &open_ended] {
            store
                .insert(&crate::Access::operator(), m, Embedding { model: "m", vector: &[1.0] })
                .unwrap();
        }
        let cutoff = EpochSeconds::from_secs(100);
        assert_eq!(store.count_expired(cutoff).unwrap(), 1);
        let page = store.expired_page(cutoff, 0, 10).unwrap();
        assert_eq!(page.iter().map(|e| e.id).collect::<Vec<_>>(), [at.id]);
        let deleted = store.delete_expired(&[at.id, later.id, open_ended.id], cutoff).unwrap();
        assert_eq!(deleted, [true, false, false]);
        assert_eq!(store.count_records(None).unwrap(), 2);
    }

    #[test]
    fn migration_stamps_older_records_and_leaves_newer_ones_alone() {
        let (_dir, store) = open();
        let mut old = record("old");
        old.schema_version = 0;
        store
            .insert(&crate::Access::operator(), &old, Embedding { model: "m", vector: &[1.0] })
            .unwrap();
        let newer = record("newer");
        let mut newer_body = encode(&newer).unwrap().replace(
            &format!("\"schema_version\":{SCHEMA_VERSION}"),
            &format!("\"schema_version\":{}", SCHEMA_VERSION + 1),
        );
        newer_body.insert_str(newer_body.len() - 1, r#","from_the_future":true"#);
        let mut newer_memory = newer.clone();
        newer_memory.schema_version = SCHEMA_VERSION + 1;
        store
            .import_batch(&[ImportRecord { memory: newer_memory, body: &newer_body, vector: None }])
            .unwrap();
        let mut odd = record("old but carrying an unknown key");
        odd.schema_version = 0;
        let mut odd_body = encode(&odd).unwrap();
        odd_body.insert_str(odd_body.len() - 1, r#","unknown":"kept""#);
        store.import_batch(&[ImportRecord { memory: odd, body: &odd_body, vector: None }]).unwrap();
        assert_eq!(
            store.schema_versions().unwrap(),
            [(0, 2), (SCHEMA_VERSION + 1, 1)],
            "absent reads as 0"
        );

        let page = store.migrate_page(0, 10).unwrap();
        assert_eq!(page.migrated, [old.id]);
        assert_eq!((page.current, page.newer), (0, 1));
        assert_eq!(page.kept.len(), 1);
        assert!(page.kept[0].1.contains("unknown"), "{:?}", page.kept);
        let bodies: Vec<String> = store
            .export_page(RowidPage { scope: None, after: 0, limit: 10 }, false)
            .unwrap()
            .into_iter()
            .map(|r| r.body)
            .collect();
        assert_eq!(bodies[1], newer_body, "a newer record is never rewritten");
        assert_eq!(bodies[2], odd_body);
        let migrated = decode(&bodies[0]).unwrap();
        assert_eq!(migrated.schema_version, SCHEMA_VERSION);
        assert_eq!(Memory { schema_version: 0, ..migrated }, old);

        let again = store.migrate_page(0, 10).unwrap();
        assert!(again.migrated.is_empty());
        assert_eq!((again.current, again.newer, again.last_rowid.is_some()), (1, 1, true));
        assert!(store.migrate_page(3, 10).unwrap().last_rowid.is_none());
    }
}
