//! Bulk operator access on PostgreSQL: what `spine export`, `spine import`,
//! `spine prune-expired` and `spine migrate` read and write, and the extract-before-delete
//! gate's bookkeeping. The walks page by `rowid` (insertion order), as on SQLite.
//!
//! The payload is stored as `json` (its text as given): an exported record no one changed is
//! byte for byte the line it was imported from. A record changed on PostgreSQL (archived,
//! superseded…) is rewritten through jsonb: the same values, in jsonb's key order and spacing.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use deadpool_postgres::GenericClient;
use spine_core::{EpochSeconds, Memory, RecordId, Scope};

use super::PgStore;
use super::query::Where;
use super::rows::write_body;
use crate::codec::parse_id;
use crate::fields::Fields;
use crate::operator::export_gate_verdict;
use crate::{AuditEvent, Embedding};
use crate::{
    ExpiredRecord, ImportOutcome, ImportRecord, MigratePage, Result, RowidPage, StoreError,
    StoredRecord, TransferStore, record_digest,
};
use pgvector::Vector;

/// The extract-before-delete gate for each of `ids` (`crate::operator`): whether the record
/// exists and was exported as it is now, and the file it was last exported to.
pub(super) async fn export_gate<C: GenericClient>(
    client: &C,
    ids: &[RecordId],
) -> Result<Vec<(bool, Option<String>)>> {
    let wanted: Vec<String> = ids.iter().map(RecordId::to_string).collect();
    let rows = client
        .query(
            "SELECT m.id, m.body::text, e.digest, e.file FROM memories m
             JOIN exported e ON e.id = m.id WHERE m.id = ANY($1)",
            &[&wanted],
        )
        .await?;
    let mut found: HashMap<String, (String, String, String)> = rows
        .iter()
        .map(|r| Ok((r.text(0)?, (r.text(1)?, r.text(2)?, r.text(3)?))))
        .collect::<Result<_>>()?;
    wanted.iter().map(|id| export_gate_verdict(found.remove(id))).collect()
}

impl TransferStore for PgStore {
    /// Into an empty table, index building is deferred (pgvector builds an HNSW index over
    /// existing rows far faster than it inserts them one by one). An index that exists
    /// already is kept and maintained.
    fn begin_bulk_load(&self) -> Result<()> {
        let empty: bool = self.block(async {
            let client = self.pool.get().await?;
            Ok(client.query_one("SELECT NOT EXISTS (SELECT 1 FROM memories)", &[]).await?.get(0))
        })?;
        if empty {
            self.deferring_indexes.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Builds the indexes a bulk load deferred, then refreshes the planner's statistics.
    fn finish_bulk_load(&self) -> Result<()> {
        if self.deferring_indexes.swap(false, Ordering::Relaxed) {
            let sizes: Vec<i32> = self.block_untimed(async {
                let client = self.pool.get().await?;
                let rows =
                    client.query("SELECT DISTINCT dims FROM memories WHERE dims > 0", &[]).await?;
                Ok::<_, StoreError>(rows.iter().map(|r| r.get(0)).collect())
            })?;
            for dims in sizes {
                tracing::info!(dims, "building the HNSW index after a bulk load");
                self.ensure_vector_index(usize::try_from(dims).unwrap_or(0))?;
            }
        }
        self.analyze()
    }

    fn count_records(&self, scope: Option<&Scope>) -> Result<u64> {
        let scope = scope.map(|s| s.as_str().to_owned());
        let sql = "SELECT count(*) FROM memories WHERE $1::text IS NULL OR scope = $1";
        Ok(self.query_one(sql, &[&scope])?.int(0)? as u64)
    }

    fn export_page(&self, page: RowidPage<'_>, vectors: bool) -> Result<Vec<StoredRecord>> {
        let RowidPage { scope, after, limit } = page;
        let scope = scope.map(|s| s.as_str().to_owned());
        let rows = self.query(
            "SELECT rowid, id, body::text, CASE WHEN $4 THEN model END, dims,
                CASE WHEN $4 THEN vec END
             FROM memories WHERE rowid > $1 AND ($2::text IS NULL OR scope = $2)
             ORDER BY rowid LIMIT $3",
            &[&after, &scope, &(limit as i64), &vectors],
        )?;
        rows.iter().map(StoredRecord::read).collect()
    }

    fn ids_present(&self, ids: &[RecordId]) -> Result<Vec<bool>> {
        let wanted: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        let rows = self.query("SELECT id FROM memories WHERE id = ANY($1)", &[&wanted])?;
        let found: HashSet<String> = rows.iter().map(|r| r.text(0)).collect::<Result<_>>()?;
        Ok(wanted.iter().map(|id| found.contains(id)).collect())
    }

    fn audit_as(&self, access: crate::Access) {
        let _ = self.operator_audit.set(access);
    }

    fn audit_page(
        &self,
        scope: Option<&Scope>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, AuditEvent)>> {
        let scope = scope.map(|s| s.as_str().to_owned());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.query(super::audit::PAGE_SQL, &[&after, &scope, &limit])?;
        rows.iter().map(super::audit::read_positioned).collect()
    }

    fn set_vectors(&self, items: &[(RecordId, Embedding<'_>)]) -> Result<Vec<bool>> {
        let mut sizes: Vec<usize> = items.iter().map(|(_, e)| e.vector.len()).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for dims in sizes {
            self.ensure_vector_index(dims)?;
        }
        let (set, wrote) = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let update = tx
                .prepare_cached(
                    "UPDATE memories SET model = $2, dims = $3, vec = $4 WHERE id = $1
                     RETURNING scope",
                )
                .await?;
            let (mut set, mut changed) = (Vec::with_capacity(items.len()), Vec::new());
            for (id, e) in items {
                let row = tx
                    .query_opt(
                        &update,
                        &[
                            &id.to_string(),
                            &e.model,
                            &(e.vector.len() as i32),
                            &Vector::from(e.vector.to_vec()),
                        ],
                    )
                    .await?;
                set.push(row.is_some());
                if let Some(row) = row {
                    changed.push((*id, row.try_get::<_, String>(0)?));
                }
            }
            let wrote = self.record_operator(&tx, changed).await?;
            tx.commit().await?;
            Ok::<_, crate::StoreError>((set, wrote))
        })?;
        self.operator_recorded(wrote);
        Ok(set)
    }

    fn import_audit(&self, events: &[AuditEvent]) -> Result<u64> {
        self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let appended = super::audit::import(&tx, events).await?;
            tx.commit().await?;
            Ok(appended)
        })
    }

    fn import_batch(&self, records: &[ImportRecord<'_>]) -> Result<Vec<ImportOutcome>> {
        let mut sizes: Vec<usize> =
            records.iter().filter_map(|r| r.vector.map(|v| v.vector.len())).collect();
        sizes.dedup();
        for dims in sizes {
            self.ensure_vector_index(dims)?;
        }
        let (out, wrote) = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let mut out = Vec::with_capacity(records.len());
            let mut imported = Vec::new();
            for r in records {
                let id = r.memory.id.to_string();
                if tx.query_opt("SELECT 1 FROM memories WHERE id = $1", &[&id]).await?.is_some() {
                    out.push(ImportOutcome::Present);
                    continue;
                }
                let holder = tx
                    .query_opt(
                        "SELECT id FROM memories WHERE short_id = $1",
                        &[&r.memory.short_id.as_str()],
                    )
                    .await?;
                if let Some(holder) = holder {
                    out.push(ImportOutcome::ShortIdTaken(parse_id(&holder.text(0)?)?));
                    continue;
                }
                write_body(&tx, &r.memory, r.body.to_owned(), r.vector).await?;
                imported.push((r.memory.id, r.memory.scope.as_str().to_owned()));
                out.push(ImportOutcome::Imported);
            }
            let wrote = self.record_operator(&tx, imported).await?;
            tx.commit().await?;
            Ok::<_, StoreError>((out, wrote))
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
        self.query_where(&sql, &w)?.iter().map(ExpiredRecord::read).collect()
    }

    fn count_expired(&self, cutoff: EpochSeconds) -> Result<u64> {
        self.count_where(&Where::expired(cutoff))
    }

    fn delete_expired(&self, ids: &[RecordId], cutoff: EpochSeconds) -> Result<Vec<bool>> {
        let w = Where::expired(cutoff);
        // The condition binds the cutoff as $1; the id follows as $2.
        let sql =
            format!("DELETE FROM memories AS m WHERE {} AND m.id = $2 RETURNING m.scope", w.sql);
        let (out, wrote) = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let stmt = tx.prepare(&sql).await?;
            let cutoff = cutoff.as_secs();
            let mut out = Vec::with_capacity(ids.len());
            let mut gone = Vec::new();
            for id in ids {
                let row = tx.query_opt(&stmt, &[&cutoff, &id.to_string()]).await?;
                out.push(row.is_some());
                if let Some(row) = row {
                    gone.push((*id, row.try_get::<_, String>(0)?));
                }
            }
            let wrote = self.record_operator(&tx, gone).await?;
            tx.commit().await?;
            Ok::<_, StoreError>((out, wrote))
        })?;
        self.operator_recorded(wrote);
        Ok(out)
    }

    fn schema_versions(&self) -> Result<Vec<(u32, u64)>> {
        let rows = self.query(
            "SELECT coalesce((body->>'schema_version')::bigint, 0) AS v, count(*)
             FROM memories GROUP BY v ORDER BY v",
            &[],
        )?;
        rows.iter().map(|r| Ok((u32::try_from(r.int(0)?).unwrap_or(0), r.int(1)? as u64))).collect()
    }

    fn migrate_page(&self, after: i64, limit: usize) -> Result<MigratePage> {
        let (page, wrote) = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let rows = tx
                .query(
                    "SELECT rowid, id, body::text FROM memories WHERE rowid > $1
                     ORDER BY rowid LIMIT $2 FOR UPDATE",
                    &[&after, &(limit as i64)],
                )
                .await?;
            let update =
                tx.prepare("UPDATE memories SET body = $1::text::json WHERE rowid = $2").await?;
            let mut page = MigratePage::default();
            let mut migrated_ids = Vec::new();
            for r in &rows {
                let rowid: i64 = r.get(0);
                page.last_rowid = Some(rowid);
                if let Some(migrated) = page.consider(r.get(1), r.get(2))? {
                    tx.execute(&update, &[&migrated, &rowid]).await?;
                    migrated_ids.push(parse_id(r.get(1))?);
                }
            }
            let changed = super::audit::scoped(&tx, &migrated_ids).await?;
            let wrote = self.record_operator(&tx, changed).await?;
            tx.commit().await?;
            Ok::<_, StoreError>((page, wrote))
        })?;
        self.operator_recorded(wrote);
        Ok(page)
    }

    fn mark_exported(&self, records: &[Memory], file: &str, at: EpochSeconds) -> Result<()> {
        let digests: Vec<(String, String)> = records
            .iter()
            .map(|m| Ok((m.id.to_string(), record_digest(m)?)))
            .collect::<Result<_>>()?;
        self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let stmt = tx
                .prepare(
                    "INSERT INTO exported (id, digest, exported_at, file)
                     SELECT $1::text, $2::text, $3::bigint, $4::text
                     WHERE EXISTS (SELECT 1 FROM memories WHERE id = $1::text)
                     ON CONFLICT (id) DO UPDATE SET digest = excluded.digest,
                        exported_at = excluded.exported_at, file = excluded.file",
                )
                .await?;
            for (id, digest) in &digests {
                tx.execute(&stmt, &[id, digest, &at.as_secs(), &file]).await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn exported_unchanged(&self, ids: &[RecordId]) -> Result<Vec<bool>> {
        self.block(async {
            let client = self.pool.get().await?;
            let gate = export_gate(&client, ids).await?;
            Ok(gate.into_iter().map(|(passes, _)| passes).collect())
        })
    }
}
