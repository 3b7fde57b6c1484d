//! [`Store`] on SQLite.

use rusqlite::types::Value;
use rusqlite::{OptionalExtension, params, params_from_iter};
use spine_core::{
    EpochSeconds, IdRef, Memory, RecordId, SCHEMA_VERSION, Scope, ShortId, Timestamp,
};

use super::audit;
use super::query::*;
use super::rows::*;
use super::*;
use crate::Body;
use crate::codec::parse_id;
use crate::fields::markers;
use crate::nearest::{Scored, neighbours};
use crate::predicate::writable_at;
use crate::{
    Access, Adjacent, AuditEvent, AuditQuery, Embedding, Filter, Gate, IdempotencyEntry,
    NearestQuery, Neighbour, Order, Page, Result, Selection, Shared, Store, SupersedeRejection,
    TagCount,
};

/// [`Store::nearest`] without the index ([`SqliteStore::search_without_loading`]): every
/// record the filters leave with a vector of the query's model, scored exactly, in `tx`.
/// The filters are the index's, rendered as SQL (the parity test holds the two together).
fn scan_nearest(tx: &rusqlite::Transaction<'_>, q: &NearestQuery<'_>) -> Result<Vec<Neighbour>> {
    if q.vector.is_empty() || (q.any == 0 && q.active == 0) {
        return Ok(vec![]);
    }
    let mut w = Where::default();
    w.access(q.access);
    w.filter(q.filter);
    w.and("v.model = ?", [Value::Text(q.model.to_owned())]);
    if let Some(ex) = q.exclude {
        w.and("m.id <> ?", [Value::Text(ex.to_string())]);
    }
    let sql = format!(
        "SELECT m.rowid, m.id, m.archived_at IS NOT NULL, m.superseded_by IS NOT NULL,
                m.not_before, m.not_after, v.vec
         FROM memories m JOIN vectors v ON v.memory = m.rowid WHERE {}",
        w.sql
    );
    let mut stmt = tx.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(w.params.iter()))?;
    let mut scored = Vec::new();
    let mut vector = Vec::with_capacity(q.vector.len());
    while let Some(r) = rows.next()? {
        blob_into(r.get_ref(6)?.as_blob().map_err(rusqlite::Error::from)?, &mut vector);
        if vector.len() != q.vector.len() {
            continue;
        }
        let score = spine_core::cosine(q.vector, &vector);
        let id = parse_id(r.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?)?;
        scored.push(Scored { score, id, markers: markers(r, 2)?, record: r.get::<_, i64>(0)? });
    }
    answer(tx, q, scored)
}

/// The neighbours `q` asks for among `scored` (by rowid), each active one's record read in
/// `tx`, the snapshot that scored them: their rows are there.
fn answer(
    tx: &rusqlite::Transaction<'_>,
    q: &NearestQuery<'_>,
    scored: Vec<Scored<i64>>,
) -> Result<Vec<Neighbour>> {
    let mut body = tx.prepare_cached("SELECT body FROM memories WHERE rowid = ?1")?;
    neighbours(q, scored, |rowid| Ok(Body::new(body.query_row([rowid], |r| r.get(0))?)))
}

impl Store for SqliteStore {
    fn db_system(&self) -> &'static str {
        "sqlite"
    }

    fn insert(&self, access: &Access, m: &Memory, embedding: Embedding<'_>) -> Result<()> {
        let body = encode(m)?;
        self.write(|tx| {
            let rowid = write_row(tx, m, &body)?;
            write_vector(tx, rowid, embedding)?;
            audit::record(tx, access, [(m.id, m.scope.as_str().to_owned())])
        })?;
        access.recorded();
        Ok(())
    }

    fn insert_batch(&self, items: &[(Memory, Embedding<'_>)]) -> Result<()> {
        self.write(|tx| {
            for (m, embedding) in items {
                let rowid = write_row(tx, m, &encode(m)?)?;
                write_vector(tx, rowid, *embedding)?;
            }
            Ok(())
        })
    }

    fn short_id_taken(&self, short: &ShortId) -> Result<bool> {
        let conn = self.read()?;
        Ok(conn
            .query_row(
                "SELECT 1 FROM memories WHERE short_id = ?1 LIMIT 1",
                [short.as_str()],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    fn ping(&self) -> Result<()> {
        let conn = self.read()?;
        conn.query_row("SELECT 1 FROM memories LIMIT 1", [], |_| Ok(())).optional()?;
        Ok(())
    }

    fn matching(&self, access: &Access, id: &IdRef, limit: usize) -> Result<Vec<Memory>> {
        let conn = self.read()?;
        matching_in(&conn, access, id, limit)
    }

    fn replace(
        &self,
        access: &Access,
        m: &Memory,
        embedding: Option<Embedding<'_>>,
    ) -> Result<bool> {
        let body = encode(m)?;
        let mut w = Where::default();
        w.and("m.id = ?", [Value::Text(m.id.to_string())]);
        w.owned(access);
        let replaced = self.write(|tx| {
            let owned: Option<i64> = tx
                .prepare_cached(&format!("SELECT m.rowid FROM memories m WHERE {}", w.sql))?
                .query_row(params_from_iter(w.params), |r| r.get(0))
                .optional()?;
            if owned.is_none() {
                return Ok(false);
            }
            let rowid = write_row(tx, m, &body)?;
            if let Some(e) = embedding {
                write_vector(tx, rowid, e)?;
            }
            audit::record(tx, access, [(m.id, m.scope.as_str().to_owned())])?;
            Ok(true)
        })?;
        if replaced {
            access.recorded();
        }
        Ok(replaced)
    }

    /// Commits without waiting for the flush (module docs, "Durability"): the next write's
    /// flush takes it to the disk.
    fn touch(&self, id: &RecordId, at: Timestamp) -> Result<()> {
        // Its log group is not waited for (module docs, "Durability").
        let (out, _through) = self.combined(super::Kind::Touch, |conn| {
            conn.prepare_cached(
                "UPDATE memories SET body = json_set(body,
                    '$.access_count', coalesce(json_extract(body, '$.access_count'), 0) + 1,
                    '$.last_accessed_at', ?2)
                 WHERE id = ?1",
            )?
            .execute(params![id.to_string(), at.to_rfc3339()])?;
            Ok(())
        })?;
        out
    }

    fn delete(&self, access: &Access, id: &RecordId) -> Result<bool> {
        let mut w = Where::default();
        w.and("m.id = ?", [Value::Text(id.to_string())]);
        w.owned(access);
        Ok(self.delete_recorded(access, w)? > 0)
    }

    fn delete_scope(&self, access: &Access, scope: &Scope) -> Result<u64> {
        let mut w = Where::default();
        w.and("m.scope = ?", [Value::Text(scope.as_str().to_owned())]);
        w.owned(access);
        self.delete_recorded(access, w)
    }

    fn nearest(&self, q: &NearestQuery<'_>) -> Result<Vec<Neighbour>> {
        let mut conn = self.read()?;
        // One read transaction: the index at least as current as its snapshot
        // (`read_synced`), the proposals re-scored from that snapshot.
        let tx = conn.transaction()?;
        if self.scans_unloaded() {
            return scan_nearest(&tx, q);
        }
        let proposals = read_synced(&self.index, &tx)?.propose(q);
        let mut stmt = tx.prepare_cached("SELECT model, vec FROM vectors WHERE memory = ?1")?;
        let mut scored = Vec::with_capacity(proposals.len());
        // Each row is read in place (model and bytes borrowed from SQLite), its values into
        // one buffer: no allocation per candidate.
        let mut vector = Vec::with_capacity(q.vector.len());
        for p in proposals {
            let mut rows = stmt.query([p.rowid])?;
            let Some(r) = rows.next()? else { continue };
            if r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)? != q.model {
                continue;
            }
            blob_into(r.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?, &mut vector);
            let score = spine_core::cosine(q.vector, &vector);
            scored.push(Scored { score, id: p.id, markers: p.markers, record: p.rowid });
        }
        // Only records whose vector this snapshot holds were scored: their rows are here.
        answer(&tx, q, scored)
    }

    fn get_many(&self, ids: &[RecordId]) -> Result<Vec<Memory>> {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached("SELECT body FROM memories WHERE id = ?1")?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(body) =
                stmt.query_row([id.to_string()], |r| r.get::<_, String>(0)).optional()?
            {
                out.push(decode(&body)?);
            }
        }
        Ok(out)
    }

    fn list(&self, sel: Selection<'_>, page: Page) -> Result<Vec<Memory>> {
        bodies(&*self.read()?, Where::page(sel, &page), page.order.sql(), page.limit, page.offset)
    }

    fn count(&self, sel: Selection<'_>) -> Result<u64> {
        super::query::count(&*self.read()?, Where::read(sel))
    }

    fn scopes(&self, access: &Access, filter: &Filter, limit: usize) -> Result<Vec<String>> {
        let mut conn = self.read()?;
        // A process whose search index is loaded (a server, soon after its start; any
        // process, from its first search) scans the index's columns, milliseconds at a
        // million records. One whose index is not (a hook, a command, a server still loading
        // it) asks SQLite, whose loose index scan costs a few lookups a scope, instead of
        // loading every record first (which grows with the store: docs/performance.md,
        // "Search at scale", index load).
        if !self.index_loaded() {
            let (w, sql) = Where::scopes(access, filter, limit);
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows = stmt.query_map(params_from_iter(w.params.iter()), |r| r.get(0))?;
            return Ok(rows.collect::<Result<_, _>>()?);
        }
        let tx = conn.transaction()?;
        let mut scopes = read_synced(&self.index, &tx)?.scopes(access, filter);
        scopes.truncate(limit);
        Ok(scopes)
    }

    fn tag_counts(&self, sel: Selection<'_>, limit: usize) -> Result<Vec<TagCount>> {
        let mut w = Where::read(sel);
        w.params.push(Value::Integer(limit as i64));
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT t.tag, COUNT(*) AS n FROM memory_tags t JOIN memories m ON m.rowid = t.memory
             WHERE {} GROUP BY t.tag ORDER BY n DESC, t.tag ASC LIMIT ?",
            w.sql
        ))?;
        let rows = stmt
            .query_map(params_from_iter(w.params), |r| {
                Ok(TagCount { tag: r.get(0)?, count: r.get::<_, i64>(1)? as u64 })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    fn supersede(
        &self,
        access: &Access,
        new: &Memory,
        embedding: Embedding<'_>,
        targets: &[RecordId],
        idempotency: Option<&IdempotencyEntry>,
    ) -> Result<std::result::Result<(), SupersedeRejection>> {
        let body = encode(new)?;
        let outcome = self.write(|tx| {
            let mut check = tx.prepare_cached(&format!(
                "SELECT m.category, m.superseded_by IS NOT NULL FROM memories m
                 WHERE m.id = ?1 AND {}",
                writable_at(access, "?2")
            ))?;
            let rejection = SupersedeRejection::of(targets, |t| {
                let row = check.query_row(params![t.to_string(), access.owner], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                });
                Ok(row.optional()?)
            })?;
            drop(check);
            if !rejection.is_empty() {
                return Ok(Err(rejection));
            }
            let rowid = write_row(tx, new, &body)?;
            write_vector(tx, rowid, embedding)?;
            for t in targets {
                stamp_successor(tx, t, &new.id)?;
            }
            if let Some(e) = idempotency {
                tx.execute(
                    "INSERT INTO idempotency (owner, key, fingerprint, id, short_id)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        access.owner,
                        e.key,
                        e.fingerprint,
                        e.id.to_string(),
                        e.short_id.as_str()
                    ],
                )?;
            }
            // The new record's scope stands for the change's (its targets may lie elsewhere).
            let scope = new.scope.as_str();
            let changed = std::iter::once(new.id).chain(targets.iter().copied());
            audit::record(tx, access, changed.map(|id| (id, scope.to_owned())))?;
            Ok(Ok(()))
        })?;
        if outcome.is_ok() {
            access.recorded();
        }
        Ok(outcome)
    }

    fn idempotency(&self, access: &Access, key: &str) -> Result<Option<IdempotencyEntry>> {
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(
            "SELECT fingerprint, id, short_id FROM idempotency WHERE owner = ?1 AND key = ?2",
        )?;
        let mut rows = stmt.query(params![access.owner, key])?;
        rows.next()?.map(|r| IdempotencyEntry::read(key, r)).transpose()
    }

    fn set_archived(
        &self,
        access: &Access,
        ids: &[RecordId],
        at: Option<EpochSeconds>,
    ) -> Result<Vec<bool>> {
        let flips = self.write(|tx| {
            let mut out = Vec::with_capacity(ids.len());
            let mut changed = Vec::new();
            {
                let mut stmt = match at {
                    Some(_) => tx.prepare_cached(&format!(
                        "UPDATE memories AS m SET archived_at = ?1,
                            body = json_set(body, '$.archived_at', ?2, {STAMP_VERSION})
                         WHERE m.id = ?4 AND {} AND m.archived_at IS NULL RETURNING scope",
                        writable_at(access, "?5")
                    ))?,
                    None => tx.prepare_cached(&format!(
                        "UPDATE memories AS m SET archived_at = NULL,
                            body = json_set(json_remove(body, '$.archived_at'), {STAMP_VERSION})
                         WHERE m.id = ?2 AND {} AND m.archived_at IS NOT NULL RETURNING scope",
                        writable_at(access, "?3")
                    ))?,
                };
                for id in ids {
                    let scope: Option<String> = match at {
                        Some(t) => stmt.query_row(
                            params![
                                t.as_secs(),
                                t.to_rfc3339(),
                                SCHEMA_VERSION,
                                id.to_string(),
                                access.owner
                            ],
                            |r| r.get(0),
                        ),
                        None => stmt.query_row(
                            params![SCHEMA_VERSION, id.to_string(), access.owner],
                            |r| r.get(0),
                        ),
                    }
                    .optional()?;
                    out.push(scope.is_some());
                    changed.extend(scope.map(|s| (*id, s)));
                }
            }
            audit::record(tx, access, changed)?;
            Ok(out)
        })?;
        if flips.contains(&true) {
            access.recorded();
        }
        Ok(flips)
    }

    fn sharing(
        &self,
        access: &Access,
        gate: Gate,
        exclude: &RecordId,
        shared: Shared<'_>,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        match Where::sharing(access, gate, exclude, shared) {
            Some(w) => bodies(&*self.read()?, w, Order::Recent.sql(), limit, 0),
            None => Ok(vec![]),
        }
    }

    fn adjacent(
        &self,
        sel: Selection<'_>,
        anchors: &[&Memory],
        model: &str,
        radius: usize,
        known: &dyn Fn(&RecordId) -> bool,
    ) -> Result<Vec<Adjacent>> {
        let w = Where::read_any_scope(sel);
        // The anchor's scope and position come after the filter's parameters; the row-value
        // comparison lets SQLite seek `memories_scope_recent` to the anchor and step
        // `radius` rows.
        let side = |cmp: char, order: &str| {
            format!(
                "SELECT m.id, m.body, v.vec FROM memories m JOIN vectors v ON v.memory = m.rowid
                 WHERE {} AND v.model = ? AND m.scope = ? AND (m.created_at, m.id) {cmp} (?, ?)
                 ORDER BY m.created_at {order}, m.id {order} LIMIT ?",
                w.sql
            )
        };
        // One read transaction for every anchor: the neighbours come from one snapshot, and
        // 2 × anchors statements begin and end one read (each a round of SQLite's file and
        // WAL-index locks, shared by every connection of the process) instead of one each.
        let mut conn = self.read()?;
        let tx = conn.transaction()?;
        let mut before = tx.prepare_cached(&side('<', "DESC"))?;
        let mut after = tx.prepare_cached(&side('>', "ASC"))?;
        let mut out = Vec::with_capacity(anchors.len() * 2);
        for a in anchors {
            let mut params = w.params.clone();
            params.extend([
                Value::Text(model.to_owned()),
                Value::Text(a.scope.as_str().to_owned()),
                Value::Integer(a.created_at.as_micros()),
                Value::Text(a.id.to_string()),
                Value::Integer(radius as i64),
            ]);
            for stmt in [&mut before, &mut after] {
                let mut rows = stmt.query(params_from_iter(params.iter()))?;
                while let Some(r) = rows.next()? {
                    let id = parse_id(r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?)?;
                    let record = match known(&id) {
                        true => None,
                        false => Some((
                            Body::new(r.get(1)?),
                            blob_to_vec(r.get_ref(2)?.as_blob().map_err(rusqlite::Error::from)?),
                        )),
                    };
                    out.push(Adjacent { anchor: a.id, id, record });
                }
            }
        }
        Ok(out)
    }

    fn vector(&self, id: &RecordId, model: &str) -> Result<Option<Vec<f32>>> {
        let conn = self.read()?;
        let blob: Option<Vec<u8>> = conn
            .query_row(
                "SELECT v.vec FROM vectors v JOIN memories m ON m.rowid = v.memory
                 WHERE m.id = ?1 AND v.model = ?2",
                params![id.to_string(), model],
                |r| r.get(0),
            )
            .optional()?;
        Ok(blob.map(|b| blob_to_vec(&b)))
    }

    fn embedder_models(&self) -> Result<Vec<(String, u64)>> {
        let conn = self.read()?;
        let mut stmt =
            conn.prepare("SELECT model, COUNT(*) FROM vectors GROUP BY model ORDER BY model")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    fn needing_embedding(
        &self,
        model: &str,
        after: Option<RecordId>,
        limit: usize,
    ) -> Result<Vec<(RecordId, String)>> {
        // Ids are lowercase hyphenated UUIDs, so text order is id order and '' precedes all.
        let after = after.map(|a| a.to_string()).unwrap_or_default();
        let conn = self.read()?;
        let mut stmt = conn.prepare_cached(
            "SELECT m.id, coalesce(json_extract(m.body, '$.content'), '')
             FROM memories m LEFT JOIN vectors v ON v.memory = m.rowid
             WHERE (v.memory IS NULL OR v.model <> ?1) AND m.id > ?2
             ORDER BY m.id LIMIT ?3",
        )?;
        let mut rows = stmt.query(params![model, after, limit as i64])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push((parse_id(&r.get::<_, String>(0)?)?, r.get(1)?));
        }
        Ok(out)
    }

    fn append_audit(&self, event: &AuditEvent) -> Result<()> {
        self.write(|tx| audit::append(tx, event))
    }

    fn audit_events(&self, q: &AuditQuery) -> Result<Vec<AuditEvent>> {
        audit::list(&*self.read()?, q)
    }

    fn prune_audit(&self, before: Timestamp) -> Result<u64> {
        self.write(|tx| audit::prune(tx, before))
    }

    fn set_vector(&self, id: &RecordId, embedding: Embedding<'_>) -> Result<bool> {
        let (set, wrote) = self.write(|tx| {
            let row: Option<(i64, String)> = tx
                .query_row(
                    "SELECT rowid, scope FROM memories WHERE id = ?1",
                    [id.to_string()],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((rowid, scope)) = row else {
                return Ok((false, false));
            };
            write_vector(tx, rowid, embedding)?;
            Ok((true, self.record_operator(tx, vec![(*id, scope)])?))
        })?;
        self.operator_recorded(wrote);
        Ok(set)
    }
}

impl SqliteStore {
    /// Deletes the records `w` matches, writing the change's audit event with it: how many.
    fn delete_recorded(&self, access: &Access, w: Where) -> Result<u64> {
        let n = self.write(|tx| {
            let gone = delete_where(tx, w)?;
            let n = gone.len() as u64;
            audit::record(tx, access, gone)?;
            Ok(n)
        })?;
        if n > 0 {
            access.recorded();
        }
        Ok(n)
    }
}
