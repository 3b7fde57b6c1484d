//! [`Store`] on PostgreSQL.

use std::collections::{HashMap, HashSet};

use pgvector::Vector;
use spine_core::{EpochSeconds, IdRef, Memory, RecordId, Scope, ShortId, Timestamp};

use super::PgStore;
use super::audit;
use super::query::Where;
use super::rows::{rewrite, stamp, stamp_successor, write, write_recorded};
use crate::Body;
use crate::codec::{decode, parse_id};
use crate::fields::Fields;
use crate::predicate::writable_at;
use crate::{
    Access, Adjacent, AuditEvent, AuditQuery, Embedding, Filter, Gate, IdempotencyEntry,
    NearestQuery, Neighbour, Order, Page, Result, Selection, Shared, Store, StoreError,
    SupersedeRejection, TagCount,
};

/// Payloads of the rows `w` selects, in `order` (ORDER BY terms), at most `limit` after
/// `offset`.
fn bodies(
    store: &PgStore,
    w: Where,
    order: &str,
    limit: usize,
    offset: usize,
) -> Result<Vec<Memory>> {
    let (sql, w) = bodies_statement(w, order, limit, offset);
    decode_bodies(&store.query_where(&sql, &w)?)
}

/// [`bodies`]'s statement, with its parameters.
fn bodies_statement(mut w: Where, order: &str, limit: usize, offset: usize) -> (String, Where) {
    let l = w.bind(limit as i64);
    let o = w.bind(offset as i64);
    let sql = format!(
        "SELECT m.body::text FROM memories m WHERE {} ORDER BY {order} LIMIT {l} OFFSET {o}",
        w.sql
    );
    (sql, w)
}

/// Rows of one payload column, decoded.
fn decode_bodies(rows: &[tokio_postgres::Row]) -> Result<Vec<Memory>> {
    rows.iter().map(|r| decode(&r.text(0)?)).collect()
}

/// Payloads of the rows with the id or short id `key` that `access` may read, at most
/// `limit`: a lookup on a key's index, prepared once ([`PgStore::query_by_key`]).
fn bodies_by_key(
    store: &PgStore,
    mut w: Where,
    access: &Access,
    limit: usize,
) -> Result<Vec<Memory>> {
    w.access(access);
    let l = w.bind(limit as i64);
    let sql =
        format!("SELECT m.body::text FROM memories m WHERE {} ORDER BY m.id LIMIT {l}", w.sql);
    store.query_by_key(&sql, &w.refs())?.iter().map(|r| decode(&r.text(0)?)).collect()
}

/// The rows a full or short id names.
fn by_key(id: &IdRef) -> Where {
    let mut w = Where::default();
    match id {
        IdRef::Id(id) => {
            let p = w.bind(id.to_string());
            w.push(&format!("m.id = {p}"));
        }
        IdRef::Short(s) => {
            let p = w.bind(s.as_str().to_owned());
            w.push(&format!("m.short_id = {p}"));
        }
    }
    w
}

/// A touch's assignment to the row `t`: `access_count` + 1, `last_accessed_at` = the
/// parameter `at` (`$N`). Only those two keys of the payload change ([`Store::touch`]).
fn touch_assignment(at: &str) -> String {
    format!(
        "body = jsonb_set(jsonb_set(t.body::jsonb, '{{access_count}}',
            to_jsonb(coalesce((t.body->>'access_count')::bigint, 0) + 1)),
            '{{last_accessed_at}}', to_jsonb({at}::text))"
    )
}

impl Store for PgStore {
    fn db_system(&self) -> &'static str {
        "postgresql"
    }

    fn insert(&self, access: &Access, m: &Memory, embedding: Embedding<'_>) -> Result<()> {
        self.ensure_vector_index(embedding.vector.len())?;
        self.block(async {
            let client = self.pool.get().await?;
            write_recorded(&client, access, m, embedding).await
        })?;
        access.recorded();
        Ok(())
    }

    fn insert_batch(&self, items: &[(Memory, Embedding<'_>)]) -> Result<()> {
        if let Some((_, e)) = items.first() {
            self.ensure_vector_index(e.vector.len())?;
        }
        self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            for (m, e) in items {
                write(&tx, m, Some(*e)).await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn short_id_taken(&self, short: &ShortId) -> Result<bool> {
        let sql = "SELECT 1 FROM memories WHERE short_id = $1 LIMIT 1";
        Ok(!self.query_by_key(sql, &[&short.as_str()])?.is_empty())
    }

    fn ping(&self) -> Result<()> {
        self.query_by_key("SELECT 1 FROM memories LIMIT 1", &[])?;
        Ok(())
    }

    fn matching(&self, access: &Access, id: &IdRef, limit: usize) -> Result<Vec<Memory>> {
        bodies_by_key(self, by_key(id), access, limit)
    }

    /// Several ids: one statement reads every readable row any of them names, and each id
    /// takes its row when exactly one matched it, as [`Store::resolve`] does.
    fn resolve_each(&self, access: &Access, ids: &[IdRef]) -> Result<Vec<Option<Memory>>> {
        if ids.len() < 2 {
            return ids.iter().map(|id| self.resolve(access, id)).collect();
        }
        let (mut full, mut short) = (Vec::new(), Vec::new());
        for id in ids {
            match id {
                IdRef::Id(id) => full.push(id.to_string()),
                IdRef::Short(s) => short.push(s.as_str().to_owned()),
            }
        }
        let mut w = Where::default();
        let (f, s) = (w.bind(full), w.bind(short));
        w.push(&format!("(m.id = ANY({f}) OR m.short_id = ANY({s}))"));
        w.access(access);
        let sql = format!("SELECT m.id, m.short_id, m.body::text FROM memories m WHERE {}", w.sql);
        let rows = self.query_where(&sql, &w)?;
        let mut by_id: HashMap<String, usize> = HashMap::new();
        let mut by_short: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            by_id.insert(r.text(0)?, i);
            by_short.entry(r.text(1)?).or_default().push(i);
        }
        let one = |i: Option<usize>| i.map(|i| decode(&rows[i].text(2)?)).transpose();
        ids.iter()
            .map(|id| match id {
                IdRef::Id(id) => one(by_id.get(&id.to_string()).copied()),
                IdRef::Short(s) => match by_short.get(s.as_str()).map(Vec::as_slice) {
                    Some([i]) => one(Some(*i)),
                    _ => Ok(None),
                },
            })
            .collect()
    }

    fn replace(
        &self,
        access: &Access,
        m: &Memory,
        embedding: Option<Embedding<'_>>,
    ) -> Result<bool> {
        if let Some(e) = embedding {
            self.ensure_vector_index(e.vector.len())?;
        }
        // One statement, its ownership check in its WHERE: the row it finds is locked and
        // re-checked as it is written, as a transaction locking it first would.
        let replaced =
            self.block(async { rewrite(&self.pool.get().await?, access, m, embedding).await })?;
        if replaced {
            access.recorded();
        }
        Ok(replaced)
    }

    fn touch(&self, id: &RecordId, at: Timestamp) -> Result<()> {
        self.execute_by_key(
            &format!("UPDATE memories t SET {} WHERE t.id = $1", touch_assignment("$2")),
            &[&id.to_string(), &at.to_rfc3339()],
        )?;
        Ok(())
    }

    /// One statement: the read (at most two matches, as [`Store::resolve`] reads) and, when it
    /// found exactly one, the touch, in a data-modifying CTE. The outer SELECT sees the rows
    /// as they were before it, as a read before a touch would. A database that cannot write
    /// refuses the whole statement; the read is then made again alone.
    fn resolve_touching(
        &self,
        access: &Access,
        id: &IdRef,
        at: Timestamp,
    ) -> Result<Option<(Memory, Option<StoreError>)>> {
        let mut w = by_key(id);
        w.access(access);
        let at = w.bind(at.to_rfc3339());
        let sql = format!(
            "WITH hit AS (SELECT m.id, m.body FROM memories m WHERE {} ORDER BY m.id LIMIT 2),
             touched AS (UPDATE memories t SET {} WHERE t.id IN (SELECT id FROM hit)
                         AND (SELECT count(*) FROM hit) = 1)
             SELECT body::text FROM hit",
            w.sql,
            touch_assignment(&at),
        );
        match self.query_by_key(&sql, &w.refs()) {
            Ok(rows) if rows.len() == 1 => Ok(Some((decode(&rows[0].text(0)?)?, None))),
            Ok(_) => Ok(None),
            Err(e) if e.resource_fault().is_some() => {
                Ok(self.resolve(access, id)?.map(|m| (m, Some(e))))
            }
            Err(e) => Err(e),
        }
    }

    fn delete(&self, access: &Access, id: &RecordId) -> Result<bool> {
        let mut w = Where::default();
        let p = w.bind(id.to_string());
        w.push(&format!("m.id = {p}"));
        w.owned(access);
        Ok(self.delete_recorded(access, w)? > 0)
    }

    fn delete_scope(&self, access: &Access, scope: &Scope) -> Result<u64> {
        let mut w = Where::default();
        let p = w.bind(scope.as_str().to_owned());
        w.push(&format!("m.scope = {p}"));
        w.owned(access);
        self.delete_recorded(access, w)
    }

    fn nearest(&self, q: &NearestQuery<'_>) -> Result<Vec<Neighbour>> {
        self.scan_nearest(q)
    }

    fn get_many(&self, ids: &[RecordId]) -> Result<Vec<Memory>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let wanted: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        let rows =
            self.query("SELECT id, body::text FROM memories WHERE id = ANY($1)", &[&wanted])?;
        let mut found: HashMap<String, String> =
            rows.iter().map(|r| Ok((r.text(0)?, r.text(1)?))).collect::<Result<_>>()?;
        wanted.iter().filter_map(|id| found.remove(id)).map(|b| decode(&b)).collect()
    }

    fn list(&self, sel: Selection<'_>, page: Page) -> Result<Vec<Memory>> {
        bodies(self, Where::page(sel, &page), page.order.sql(), page.limit, page.offset)
    }

    /// Both statements go out before either answer is awaited: tokio-postgres pipelines
    /// the requests made at once on one connection.
    fn list_two(
        &self,
        first: (Selection<'_>, Page),
        second: (Selection<'_>, Page),
    ) -> Result<(Vec<Memory>, Vec<Memory>)> {
        let statement = |(sel, page): (Selection<'_>, Page)| {
            bodies_statement(Where::page(sel, &page), page.order.sql(), page.limit, page.offset)
        };
        let ((a, wa), (b, wb)) = (statement(first), statement(second));
        self.block(async {
            let client = self.pool.get().await?;
            super::know_vectors(&client).await?;
            let (pa, pb) = (wa.typed(), wb.typed());
            let (ra, rb) =
                tokio::try_join!(client.query_typed(&a, &pa), client.query_typed(&b, &pb))?;
            Ok((decode_bodies(&ra)?, decode_bodies(&rb)?))
        })
    }

    fn count(&self, sel: Selection<'_>) -> Result<u64> {
        self.count_where(&Where::read(sel))
    }

    fn scopes(&self, access: &Access, filter: &Filter, limit: usize) -> Result<Vec<String>> {
        let (w, sql) = Where::scopes(access, filter, limit);
        self.query_where(&sql, &w)?.iter().map(|r| r.text(0)).collect()
    }

    fn tag_counts(&self, sel: Selection<'_>, limit: usize) -> Result<Vec<TagCount>> {
        let mut w = Where::read(sel);
        let l = w.bind(limit as i64);
        let sql = format!(
            "SELECT t.tag, count(*) AS n FROM memories m, unnest(m.tags) AS t(tag)
             WHERE {} GROUP BY t.tag ORDER BY n DESC, t.tag ASC LIMIT {l}",
            w.sql
        );
        let rows = self.query_where(&sql, &w)?;
        rows.iter().map(|r| Ok(TagCount { tag: r.text(0)?, count: r.int(1)? as u64 })).collect()
    }

    fn supersede(
        &self,
        access: &Access,
        new: &Memory,
        embedding: Embedding<'_>,
        targets: &[RecordId],
        idempotency: Option<&IdempotencyEntry>,
    ) -> Result<std::result::Result<(), SupersedeRejection>> {
        self.ensure_vector_index(embedding.vector.len())?;
        let mut w = Where::default();
        let ids = w.bind(targets.iter().map(|t| t.to_string()).collect::<Vec<_>>());
        w.push(&format!("m.id = ANY({ids})"));
        w.owned(access);
        let outcome = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            // Locks the targets (in id order, so two racing calls cannot deadlock) and reads
            // them as the last committed change left them: of two nodes superseding the same
            // record at once, the second sees the first one's stamp and is rejected.
            let sql = format!(
                "SELECT m.id, m.category, m.superseded_by IS NOT NULL FROM memories m
                 WHERE {} ORDER BY m.id FOR UPDATE",
                w.sql
            );
            let found: HashMap<String, (String, bool)> = tx
                .query_typed(&sql, &w.typed())
                .await?
                .iter()
                .map(|r| Ok((r.text(0)?, (r.text(1)?, r.flag(2)?))))
                .collect::<Result<_>>()?;
            let rejection =
                SupersedeRejection::of(targets, |t| Ok(found.get(&t.to_string()).cloned()))?;
            if !rejection.is_empty() {
                return Ok(Err(rejection));
            }
            write(&tx, new, Some(embedding)).await?;
            for t in targets {
                stamp_successor(&tx, t, &new.id).await?;
            }
            if let Some(e) = idempotency {
                tx.execute(
                    "INSERT INTO idempotency (owner, key, fingerprint, id, short_id)
                     VALUES ($1, $2, $3, $4, $5)",
                    &[
                        &access.owner,
                        &e.key,
                        &e.fingerprint,
                        &e.id.to_string(),
                        &e.short_id.as_str(),
                    ],
                )
                .await?;
            }
            // The new record's scope stands for the change's (its targets may lie elsewhere).
            let scope = new.scope.as_str();
            let changed = std::iter::once(new.id).chain(targets.iter().copied());
            if let Some(e) = AuditEvent::of_change(access, changed.map(|id| (id, scope.into()))) {
                audit::append(&tx, &e).await?;
            }
            tx.commit().await?;
            Ok(Ok(()))
        })?;
        if outcome.is_ok() {
            access.recorded();
        }
        Ok(outcome)
    }

    fn idempotency(&self, access: &Access, key: &str) -> Result<Option<IdempotencyEntry>> {
        let sql = "SELECT fingerprint, id, short_id FROM idempotency WHERE owner = $1 AND key = $2";
        let rows = self.query_by_key(sql, &[&access.owner, &key])?;
        rows.first().map(|r| IdempotencyEntry::read(key, r)).transpose()
    }

    fn set_archived(
        &self,
        access: &Access,
        ids: &[RecordId],
        at: Option<EpochSeconds>,
    ) -> Result<Vec<bool>> {
        let owner = writable_at(access, "$2::text");
        // Every record in one statement (atomic, as a transaction of one statement per
        // record was, in one round trip), with the call's audit event: the ones it changed
        // come back. Its rows are locked in the index's order, so two calls naming the same
        // records in different orders cannot deadlock.
        let change = match at {
            Some(_) => format!(
                "UPDATE memories m SET archived_at = $3, body = {}
                 WHERE m.id = ANY($1) AND {owner} AND m.archived_at IS NULL
                 RETURNING m.id, m.scope",
                stamp("jsonb_set(m.body::jsonb, '{archived_at}', to_jsonb($4::text))")
            ),
            None => format!(
                "UPDATE memories m SET archived_at = NULL, body = {}
                 WHERE m.id = ANY($1) AND {owner} AND m.archived_at IS NOT NULL
                 RETURNING m.id, m.scope",
                stamp("(m.body::jsonb - 'archived_at')")
            ),
        };
        let keys: Vec<String> = ids.iter().map(RecordId::to_string).collect();
        let stamp_at = at.map(|t| (t.as_secs(), t.to_rfc3339()));
        let mut p: Vec<super::query::Param> =
            vec![Box::new(keys.clone()), Box::new(access.owner.clone())];
        if let Some((secs, rfc)) = &stamp_at {
            p.push(Box::new(*secs));
            p.push(Box::new(rfc.clone()));
        }
        let event = AuditEvent::attributed(access);
        let sql = match &event {
            Some(e) => {
                let at = audit::placeholders_after(p.len());
                p.extend(audit::event_params(e));
                audit::recorded_sql(&change, &at)
            }
            None => change,
        };
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            p.iter().map(|p| p.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
        let rows = self.query_by_key(&sql, &refs)?;
        let mut changed: HashSet<String> = rows.iter().map(|r| r.text(0)).collect::<Result<_>>()?;
        if !changed.is_empty() {
            access.recorded();
        }
        // A record named twice changed at its first mention; the later ones find it done.
        Ok(keys.iter().map(|k| changed.remove(k)).collect())
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
            Some(w) => bodies(self, w, Order::Recent.sql(), limit, 0),
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
        if anchors.is_empty() || radius == 0 {
            return Ok(vec![]);
        }
        let mut w = Where::read_any_scope(sel);
        let model = w.bind(model.to_owned());
        let scopes =
            w.bind(anchors.iter().map(|a| a.scope.as_str().to_owned()).collect::<Vec<_>>());
        let times = w.bind(anchors.iter().map(|a| a.created_at.as_micros()).collect::<Vec<_>>());
        let ids = w.bind(anchors.iter().map(|a| a.id.to_string()).collect::<Vec<_>>());
        let radius = w.bind(radius as i64);
        // Both sides in one round trip: each anchor's `radius` nearest records below and above.
        let side = |cmp: char, order: &str| {
            format!(
                "SELECT a.id, n.id, n.body, n.vec
                 FROM unnest({scopes}::text[], {times}::bigint[], {ids}::text[])
                      AS a(scope, created_at, id)
                 CROSS JOIN LATERAL (
                     SELECT m.id, m.body::text AS body, m.vec FROM memories m
                     WHERE {} AND m.model = {model} AND m.vec IS NOT NULL
                       AND m.scope = a.scope COLLATE \"C\"
                       AND (m.created_at, m.id) {cmp} (a.created_at, a.id COLLATE \"C\")
                     ORDER BY m.created_at {order}, m.id {order} LIMIT {radius}) n",
                w.sql
            )
        };
        let sql = format!("{} UNION ALL {}", side('<', "DESC"), side('>', "ASC"));
        let rows = self.query_where(&sql, &w)?;
        rows.iter()
            .map(|r| {
                let id = parse_id(&r.text(1)?)?;
                let record = match known(&id) {
                    true => None,
                    false => Some((Body::new(r.text(2)?), r.get::<_, Vector>(3).to_vec())),
                };
                Ok(Adjacent { anchor: parse_id(&r.text(0)?)?, id, record })
            })
            .collect()
    }

    fn vector(&self, id: &RecordId, model: &str) -> Result<Option<Vec<f32>>> {
        let sql = "SELECT vec FROM memories WHERE id = $1 AND model = $2 AND vec IS NOT NULL";
        let row = self.query_opt(sql, &[&id.to_string(), &model])?;
        Ok(row.map(|r| r.get::<_, Vector>(0).to_vec()))
    }

    fn embedder_models(&self) -> Result<Vec<(String, u64)>> {
        let rows = self.query(
            "SELECT model, count(*) FROM memories WHERE model IS NOT NULL
             GROUP BY model ORDER BY model",
            &[],
        )?;
        rows.iter().map(|r| Ok((r.text(0)?, r.int(1)? as u64))).collect()
    }

    fn needing_embedding(
        &self,
        model: &str,
        after: Option<RecordId>,
        limit: usize,
    ) -> Result<Vec<(RecordId, String)>> {
        let after = after.map(|a| a.to_string()).unwrap_or_default();
        let rows = self.query(
            "SELECT id, coalesce(body->>'content', '') FROM memories
             WHERE (model IS NULL OR model <> $1) AND id > $2
             ORDER BY id LIMIT $3",
            &[&model, &after, &(limit as i64)],
        )?;
        rows.iter().map(|r| Ok((parse_id(&r.text(0)?)?, r.text(1)?))).collect()
    }

    fn append_audit(&self, event: &AuditEvent) -> Result<()> {
        self.block(async { audit::append(&self.pool.get().await?, event).await })
    }

    fn audit_events(&self, q: &AuditQuery) -> Result<Vec<AuditEvent>> {
        let (sql, w) = audit::list_sql(q);
        self.query_where(&sql, &w)?.iter().map(audit::read_event).collect()
    }

    fn prune_audit(&self, before: Timestamp) -> Result<u64> {
        let mut w = Where::default();
        let p = w.bind(before.as_micros());
        w.push(&format!("at < {p}"));
        self.execute_where(&format!("DELETE FROM audit_events WHERE {}", w.sql), &w)
    }

    fn set_vector(&self, id: &RecordId, embedding: Embedding<'_>) -> Result<bool> {
        self.ensure_vector_index(embedding.vector.len())?;
        let n = self.change_recorded(
            "UPDATE memories SET model = $2, dims = $3, vec = $4 WHERE id = $1 RETURNING id, scope",
            &[
                &id.to_string(),
                &embedding.model,
                &(embedding.vector.len() as i32),
                &Vector::from(embedding.vector.to_vec()),
            ],
        )?;
        Ok(n > 0)
    }
}

impl PgStore {
    /// Deletes the records `w` matches, with the call's audit event in the same statement:
    /// how many.
    fn delete_recorded(&self, access: &Access, mut w: Where) -> Result<u64> {
        let n = match AuditEvent::attributed(access) {
            None => self.execute_where(&format!("DELETE FROM memories m WHERE {}", w.sql), &w)?,
            Some(e) => {
                let at = audit::bind_event(&mut w, &e);
                let change =
                    format!("DELETE FROM memories m WHERE {} RETURNING m.id, m.scope", w.sql);
                self.query_where(&audit::recorded_sql(&change, &at), &w)?.len() as u64
            }
        };
        if n > 0 {
            access.recorded();
        }
        Ok(n)
    }
}
