//! [`Store`] on PostgreSQL.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use pgvector::Vector;
use spine_core::{
    Category, Citation, EpochSeconds, IdRef, Memory, RecordId, SCHEMA_VERSION, Scope, ShortId,
    StateMarkers, Timestamp,
};

use super::PgStore;
use super::query::{Param, Where, decode};
use crate::{
    Access, Adjacent, Cursor, Embedding, Filter, Gate, IdempotencyEntry, NearestQuery, Neighbour,
    Result, Store, StoreError, SupersedeRejection, TagCount,
};

/// At most this many rows left by a search's filters are scanned exactly instead of through
/// the HNSW index.
const EXACT_SCAN_ROWS: i64 = 5_000;

/// How many index tuples pgvector's iterative scan may visit to find enough rows that pass
/// the filters (its default is 20,000); with more than [`EXACT_SCAN_ROWS`] passing, the
/// scan finds them long before this.
const MAX_SCAN_TUPLES: u32 = 100_000;

/// `expr` (a jsonb value; the stored payload is `json`, read it as `body::jsonb`) with `schema_version` raised to this binary's, never lowered
/// (SPEC Versioning 2 and 4).
pub(super) fn stamp(expr: &str) -> String {
    format!(
        "jsonb_set({expr}, '{{schema_version}}', to_jsonb(greatest(coalesce(({expr}->>'schema_version')::int, 0), {SCHEMA_VERSION})))"
    )
}

const COLUMNS: &str = "id, short_id, owner, visibility, scope, category, kind, created_at,
    not_before, not_after, archived_at, superseded_by, tags, body";

/// Inserts or rewrites a record's row from its payload; with `vector`, its vector too.
fn upsert_sql(vector: bool) -> String {
    let mut cols = COLUMNS.to_owned();
    let mut values = (1..=13).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
    values.push_str(", $14::text::json");
    let mut set = "short_id = excluded.short_id, owner = excluded.owner,
        visibility = excluded.visibility, scope = excluded.scope, category = excluded.category,
        kind = excluded.kind, created_at = excluded.created_at,
        not_before = excluded.not_before, not_after = excluded.not_after,
        archived_at = excluded.archived_at, superseded_by = excluded.superseded_by,
        tags = excluded.tags, body = excluded.body"
        .to_owned();
    if vector {
        cols.push_str(", model, dims, vec");
        values.push_str(", $15, $16, $17");
        set.push_str(", model = excluded.model, dims = excluded.dims, vec = excluded.vec");
    }
    format!("INSERT INTO memories ({cols}) VALUES ({values}) ON CONFLICT (id) DO UPDATE SET {set}")
}

fn secs(v: Option<EpochSeconds>) -> Option<i64> {
    v.map(EpochSeconds::as_secs)
}

/// The parameters of [`upsert_sql`] for `m`, whose payload is `body`.
fn row_params(m: &Memory, body: String, embedding: Option<Embedding<'_>>) -> Vec<Param> {
    let mut tags: Vec<String> = Vec::with_capacity(m.tags.len());
    for t in &m.tags {
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    let mut p: Vec<Param> = vec![
        Box::new(m.id.to_string()),
        Box::new(m.short_id.as_str().to_owned()),
        Box::new(m.owner.clone()),
        Box::new(m.visibility.as_str().to_owned()),
        Box::new(m.scope.as_str().to_owned()),
        Box::new(m.category.as_str().to_owned()),
        Box::new(m.kind.map(|k| k.as_str().to_owned())),
        Box::new(m.created_at.as_micros()),
        Box::new(secs(m.not_before)),
        Box::new(secs(m.not_after)),
        Box::new(secs(m.archived_at)),
        Box::new(m.superseded_by.map(|s| s.to_string())),
        Box::new(tags),
        Box::new(body),
    ];
    if let Some(e) = embedding {
        p.push(Box::new(e.model.to_owned()));
        p.push(Box::new(e.vector.len() as i32));
        p.push(Box::new(Vector::from(e.vector.to_vec())));
    }
    p
}

fn refs(p: &[Param]) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
    p.iter().map(|p| p.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync)).collect()
}

pub(super) fn parse_id(id: &str) -> Result<RecordId> {
    RecordId::parse(id).ok_or_else(|| StoreError::Corrupt(format!("bad id {id}")))
}

/// Writes one record row (with its vector) through `client`.
async fn write<C: GenericClient>(
    client: &C,
    m: &Memory,
    embedding: Option<Embedding<'_>>,
) -> Result<()> {
    let body = serde_json::to_string(m).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    write_body(client, m, body, embedding).await
}

/// Writes one record row whose payload is `body` (verbatim: an import) through `client`.
pub(super) async fn write_body<C: GenericClient>(
    client: &C,
    m: &Memory,
    body: String,
    embedding: Option<Embedding<'_>>,
) -> Result<()> {
    let p = row_params(m, body, embedding);
    let stmt = client.prepare_cached(&upsert_sql(embedding.is_some())).await?;
    client.execute(&stmt, &refs(&p)).await?;
    Ok(())
}

/// Payloads of the rows `w` selects, in `order`, at most `limit` after `offset`.
async fn bodies(
    store: &PgStore,
    mut w: Where,
    order: &str,
    limit: usize,
    offset: usize,
) -> Result<Vec<Memory>> {
    let l = w.bind(limit as i64);
    let o = w.bind(offset as i64);
    let sql = format!(
        "SELECT m.body::text FROM memories m WHERE {} ORDER BY {order} LIMIT {l} OFFSET {o}",
        w.sql
    );
    let client = store.pool.get().await?;
    let rows = client.query(&sql, &w.refs()).await?;
    rows.iter().map(|r| decode(r.get(0))).collect()
}

const RECENT: &str = "m.created_at DESC, m.id DESC";
const OLDEST: &str = "m.created_at ASC, m.id ASC";

impl Store for PgStore {
    fn insert(&self, m: &Memory, embedding: Embedding<'_>) -> Result<()> {
        self.ensure_vector_index(embedding.vector.len())?;
        self.block(async {
            let client = self.pool.get().await?;
            write(&client, m, Some(embedding)).await
        })
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
        self.block(async {
            let client = self.pool.get().await?;
            let row = client
                .query_opt("SELECT 1 FROM memories WHERE short_id = $1", &[&short.as_str()])
                .await?;
            Ok(row.is_some())
        })
    }

    fn matching(&self, access: &Access, id: &IdRef, limit: usize) -> Result<Vec<Memory>> {
        let mut w = Where::new();
        match id {
            IdRef::Id(id) => {
                let p = w.bind(id.to_string());
                w.and(&format!("m.id = {p}"));
            }
            IdRef::Short(s) => {
                let p = w.bind(s.as_str().to_owned());
                w.and(&format!("m.short_id = {p}"));
            }
        }
        w.access(access);
        self.block(bodies(self, w, "m.id", limit, 0))
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
        let mut w = Where::new();
        let p = w.bind(m.id.to_string());
        w.and(&format!("m.id = {p}"));
        w.owned(access);
        self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let sql = format!("SELECT 1 FROM memories m WHERE {} FOR UPDATE", w.sql);
            if tx.query_opt(&sql, &w.refs()).await?.is_none() {
                return Ok(false);
            }
            write(&tx, m, embedding).await?;
            tx.commit().await?;
            Ok(true)
        })
    }

    fn touch(&self, id: &RecordId, at: Timestamp) -> Result<()> {
        self.block(async {
            let client = self.pool.get().await?;
            client
                .execute(
                    "UPDATE memories SET body = jsonb_set(jsonb_set(body::jsonb, '{access_count}',
                        to_jsonb(coalesce((body->>'access_count')::bigint, 0) + 1)),
                        '{last_accessed_at}', to_jsonb($2::text))
                     WHERE id = $1",
                    &[&id.to_string(), &at.to_rfc3339()],
                )
                .await?;
            Ok(())
        })
    }

    fn delete(&self, access: &Access, id: &RecordId) -> Result<bool> {
        let mut w = Where::new();
        let p = w.bind(id.to_string());
        w.and(&format!("m.id = {p}"));
        w.owned(access);
        self.block(async {
            let client = self.pool.get().await?;
            let sql = format!("DELETE FROM memories m WHERE {}", w.sql);
            Ok(client.execute(&sql, &w.refs()).await? > 0)
        })
    }

    fn delete_scope(&self, access: &Access, scope: &Scope) -> Result<u64> {
        let mut w = Where::new();
        let p = w.bind(scope.as_str().to_owned());
        w.and(&format!("m.scope = {p}"));
        w.owned(access);
        self.block(async {
            let client = self.pool.get().await?;
            let sql = format!("DELETE FROM memories m WHERE {}", w.sql);
            Ok(client.execute(&sql, &w.refs()).await?)
        })
    }

    fn nearest(&self, q: &NearestQuery<'_>) -> Result<Vec<Neighbour>> {
        let dims = q.vector.len();
        if dims == 0 || (q.any == 0 && q.active == 0) {
            return Ok(vec![]);
        }
        self.ensure_vector_index(dims)?;
        // Two nearest scans in one snapshot: the `any` nearest of every state and the
        // `active` nearest the gate lets through. Their union, re-scored exactly, ordered
        // as the SQLite backend orders it, gives the same answer. When the filters leave
        // few rows (one owner's scope, a rare tag), an exact scan of those rows beats the
        // HNSW index, whose filtered walk may give up before it found enough of them; else
        // the index with pgvector's iterative scan keeps the filters exact.
        let base = |gated: bool| {
            let mut w = Where::new();
            w.access(q.access);
            w.filter(q.filter);
            if gated {
                w.gate(Gate::ActiveAt(q.now));
            }
            let model = w.bind(q.model.to_owned());
            w.and(&format!("m.model = {model} AND m.dims = {dims}"));
            if let Some(ex) = q.exclude {
                let p = w.bind(ex.to_string());
                w.and(&format!("m.id <> {p}"));
            }
            w
        };
        let scan = |gated: bool, limit: usize, exact: bool| {
            let mut w = base(gated);
            let v = w.bind(Vector::from(q.vector.to_vec()));
            let l = w.bind(limit as i64);
            // `+ 0` orders by the same distance without matching the index's operator.
            let order = match exact {
                true => format!("(m.vec::vector({dims}) <=> {v}::vector({dims})) + 0"),
                false => format!("m.vec::vector({dims}) <=> {v}::vector({dims})"),
            };
            let sql = format!(
                "SELECT m.id, m.archived_at IS NOT NULL, m.superseded_by IS NOT NULL,
                    m.not_before, m.not_after, m.vec, m.body::text
                 FROM memories m WHERE {} ORDER BY {order} LIMIT {l}",
                w.sql
            );
            (sql, w)
        };
        let probe = base(false);
        let probe_sql = format!(
            "SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {} LIMIT {}) few",
            probe.sql,
            EXACT_SCAN_ROWS + 1
        );
        let ef = q.any.max(q.active).clamp(40, 1000);
        let rows = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = super::snapshot(&mut client).await?;
            let candidates: i64 = tx.query_one(probe_sql.as_str(), &probe.refs()).await?.get(0);
            let exact = candidates <= EXACT_SCAN_ROWS;
            if !exact {
                tx.batch_execute(&format!(
                    "SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {ef};
                     SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}"
                ))
                .await?;
            }
            let mut scans = Vec::new();
            if q.any > 0 {
                scans.push(scan(false, q.any, exact));
            }
            if q.active > 0 {
                scans.push(scan(true, q.active, exact));
            }
            let mut rows = Vec::new();
            for (sql, w) in &scans {
                rows.extend(tx.query(sql.as_str(), &w.refs()).await?);
            }
            tx.commit().await?;
            Ok::<_, StoreError>(rows)
        })?;
        let mut scored: HashMap<RecordId, (f32, StateMarkers, String)> = HashMap::new();
        for r in &rows {
            let id = parse_id(r.get(0))?;
            if scored.contains_key(&id) {
                continue;
            }
            let markers = StateMarkers {
                archived: r.get(1),
                superseded: r.get(2),
                not_before: r.get::<_, Option<i64>>(3).map(EpochSeconds::from_secs),
                not_after: r.get::<_, Option<i64>>(4).map(EpochSeconds::from_secs),
            };
            let v: Vector = r.get(5);
            let score = spine_core::cosine(q.vector, v.as_slice());
            scored.insert(id, (score, markers, r.get::<_, String>(6)));
        }
        let mut scored: Vec<_> = scored.into_iter().collect();
        scored.sort_by(|a, b| b.1.0.total_cmp(&a.1.0).then_with(|| b.0.cmp(&a.0)));
        let (mut seen, mut seen_active) = (0, 0);
        let mut out = Vec::new();
        for (id, (score, markers, body)) in scored {
            let states = markers.derive(q.now);
            let active = states.is_empty();
            let wanted = seen < q.any || (active && seen_active < q.active);
            seen += 1;
            seen_active += usize::from(active);
            if wanted {
                let record = if active { Some(decode(&body)?) } else { None };
                out.push(Neighbour { id, score, states, record });
            }
        }
        Ok(out)
    }

    fn get_many(&self, ids: &[RecordId]) -> Result<Vec<Memory>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let wanted: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        let rows = self.block(async {
            let client = self.pool.get().await?;
            Ok::<_, StoreError>(
                client
                    .query("SELECT id, body::text FROM memories WHERE id = ANY($1)", &[&wanted])
                    .await?,
            )
        })?;
        let mut found: HashMap<String, String> =
            rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, String>(1))).collect();
        wanted.iter().filter_map(|id| found.remove(id)).map(|b| decode(&b)).collect()
    }

    fn list(
        &self,
        access: &Access,
        filter: &Filter,
        gate: Gate,
        cursor: Option<Cursor>,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        let mut w = Where::new();
        w.access(access);
        w.filter(filter);
        w.gate(gate);
        if let Some(c) = cursor {
            let t = w.bind(c.created_at.as_micros());
            let id = w.bind(c.id.to_string());
            w.and(&format!("m.created_at < {t} OR (m.created_at = {t} AND m.id < {id})"));
        }
        self.block(bodies(self, w, RECENT, limit, offset))
    }

    fn count(&self, access: &Access, filter: &Filter, gate: Gate) -> Result<u64> {
        let mut w = Where::new();
        w.access(access);
        w.filter(filter);
        w.gate(gate);
        self.block(async {
            let client = self.pool.get().await?;
            let sql = format!("SELECT count(*) FROM memories m WHERE {}", w.sql);
            let n: i64 = client.query_one(&sql, &w.refs()).await?.get(0);
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    fn scopes(&self, access: &Access, filter: &Filter, limit: usize) -> Result<Vec<String>> {
        let one_scope = matches!(filter.scope, crate::ScopeFilter::One(_));
        let mut w = Where::new();
        let sql = if one_scope {
            w.access(access);
            w.filter(filter);
            let l = w.bind(limit as i64);
            format!(
                "SELECT DISTINCT m.scope FROM memories m WHERE {} ORDER BY m.scope LIMIT {l}",
                w.sql
            )
        } else {
            // Across scopes, a loose index scan: walk the distinct scopes through the
            // (scope, …) index, one probe each, and keep those holding a record the caller
            // reads that matches, instead of DISTINCT over every readable row (a scan of the
            // table). The probe for "a record the caller reads" goes through an index that
            // answers it directly — (owner, scope) for the caller's own records, the
            // partial (scope) index of shared ones — so a scope full of other owners'
            // private records costs one index lookup, not a walk of its rows.
            w.filter(filter);
            let probes = if access.every_owner {
                format!("EXISTS (SELECT 1 FROM memories m WHERE m.scope = s.scope AND {})", w.sql)
            } else {
                let owner = w.bind(access.owner.clone());
                let own = format!(
                    "EXISTS (SELECT 1 FROM memories m WHERE m.owner = {owner} AND m.scope = s.scope AND {})",
                    w.sql
                );
                if access.include_shared {
                    format!(
                        "({own} OR EXISTS (SELECT 1 FROM memories m WHERE m.visibility = 'shared'
                            AND m.scope = s.scope AND m.owner IS NOT NULL AND {}))",
                        w.sql
                    )
                } else {
                    own
                }
            };
            let l = w.bind(limit as i64);
            format!(
                "WITH RECURSIVE s(scope) AS (
                    (SELECT scope FROM memories ORDER BY scope LIMIT 1)
                    UNION ALL
                    SELECT (SELECT n.scope FROM memories n WHERE n.scope > s.scope
                            ORDER BY n.scope LIMIT 1)
                    FROM s WHERE s.scope IS NOT NULL
                 )
                 SELECT s.scope FROM s
                 WHERE s.scope IS NOT NULL AND {probes}
                 ORDER BY s.scope LIMIT {l}"
            )
        };
        self.block(async {
            let client = self.pool.get().await?;
            let rows = client.query(&sql, &w.refs()).await?;
            Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
        })
    }

    fn tag_counts(
        &self,
        access: &Access,
        scope: Option<&Scope>,
        gate: Gate,
        limit: usize,
    ) -> Result<Vec<TagCount>> {
        let mut w = Where::new();
        w.access(access);
        if let Some(s) = scope {
            let p = w.bind(s.as_str().to_owned());
            w.and(&format!("m.scope = {p}"));
        }
        w.gate(gate);
        let l = w.bind(limit as i64);
        self.block(async {
            let client = self.pool.get().await?;
            let sql = format!(
                "SELECT t.tag, count(*) AS n FROM memories m, unnest(m.tags) AS t(tag)
                 WHERE {} GROUP BY t.tag ORDER BY n DESC, t.tag ASC LIMIT {l}",
                w.sql
            );
            let rows = client.query(&sql, &w.refs()).await?;
            Ok(rows
                .iter()
                .map(|r| TagCount { tag: r.get(0), count: r.get::<_, i64>(1) as u64 })
                .collect())
        })
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
        let mut w = Where::new();
        let ids = w.bind(targets.iter().map(|t| t.to_string()).collect::<Vec<_>>());
        w.and(&format!("m.id = ANY({ids})"));
        w.owned(access);
        self.block(async {
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
                .query(&sql, &w.refs())
                .await?
                .iter()
                .map(|r| (r.get::<_, String>(0), (r.get::<_, String>(1), r.get::<_, bool>(2))))
                .collect();
            let mut rejection = SupersedeRejection::default();
            for t in targets {
                match found.get(&t.to_string()) {
                    None => rejection.not_found.push(*t),
                    Some((category, _)) if category == Category::Rule.as_str() => {
                        rejection.rules.push(*t)
                    }
                    Some((_, true)) => rejection.already_superseded.push(*t),
                    Some(_) => {}
                }
            }
            if !rejection.is_empty() {
                return Ok(Err(rejection));
            }
            write(&tx, new, Some(embedding)).await?;
            let body = stamp("jsonb_set(body::jsonb, '{superseded_by}', to_jsonb($1::text))");
            let stamp_sql =
                format!("UPDATE memories SET superseded_by = $1, body = {body} WHERE id = $2");
            let new_id = new.id.to_string();
            for t in targets {
                tx.execute(stamp_sql.as_str(), &[&new_id, &t.to_string()]).await?;
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
            tx.commit().await?;
            Ok(Ok(()))
        })
    }

    fn idempotency(&self, access: &Access, key: &str) -> Result<Option<IdempotencyEntry>> {
        let row = self.block(async {
            let client = self.pool.get().await?;
            Ok::<_, StoreError>(
                client
                    .query_opt(
                        "SELECT fingerprint, id, short_id FROM idempotency
                         WHERE owner = $1 AND key = $2",
                        &[&access.owner, &key],
                    )
                    .await?,
            )
        })?;
        row.map(|r| {
            let short: String = r.get(2);
            Ok(IdempotencyEntry {
                key: key.to_owned(),
                fingerprint: r.get(0),
                id: parse_id(r.get(1))?,
                short_id: ShortId::parse(&short)
                    .ok_or_else(|| StoreError::Corrupt(format!("bad short id {short}")))?,
            })
        })
        .transpose()
    }

    fn set_archived(
        &self,
        access: &Access,
        ids: &[RecordId],
        at: Option<EpochSeconds>,
    ) -> Result<Vec<bool>> {
        // The operator binds an owner nobody has and skips the comparison.
        let owner = match access.every_owner {
            true => "$2::text IS NOT NULL",
            false => "m.owner IS NOT NULL AND m.owner = $2",
        };
        let sql = match at {
            Some(_) => format!(
                "UPDATE memories m SET archived_at = $3, body = {}
                 WHERE m.id = $1 AND {owner} AND m.archived_at IS NULL",
                stamp("jsonb_set(m.body::jsonb, '{archived_at}', to_jsonb($4::text))")
            ),
            None => format!(
                "UPDATE memories m SET archived_at = NULL, body = {}
                 WHERE m.id = $1 AND {owner} AND m.archived_at IS NOT NULL",
                stamp("(m.body::jsonb - 'archived_at')")
            ),
        };
        let stamp_at = at.map(|t| (t.as_secs(), t.to_rfc3339()));
        self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            let stmt = tx.prepare(&sql).await?;
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let id = id.to_string();
                let n = match &stamp_at {
                    Some((secs, rfc)) => {
                        tx.execute(&stmt, &[&id, &access.owner, secs, rfc]).await?
                    }
                    None => tx.execute(&stmt, &[&id, &access.owner]).await?,
                };
                out.push(n > 0);
            }
            tx.commit().await?;
            Ok(out)
        })
    }

    fn with_any_tag(
        &self,
        access: &Access,
        tags: &[String],
        gate: Gate,
        exclude: &RecordId,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        if tags.is_empty() {
            return Ok(vec![]);
        }
        let mut w = others_than(access, gate, exclude);
        let p = w.bind(tags.to_vec());
        w.and(&format!("m.tags && {p}::text[]"));
        self.block(bodies(self, w, RECENT, limit, 0))
    }

    fn with_any_citation(
        &self,
        access: &Access,
        citations: &[Citation],
        gate: Gate,
        exclude: &RecordId,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        if citations.is_empty() {
            return Ok(vec![]);
        }
        let mut w = others_than(access, gate, exclude);
        let kinds =
            w.bind(citations.iter().map(|c| c.kind.as_str().to_owned()).collect::<Vec<_>>());
        let refs = w.bind(citations.iter().map(|c| c.reference.clone()).collect::<Vec<_>>());
        w.and(&format!(
            "EXISTS (SELECT 1 FROM json_array_elements(coalesce(m.body->'citations', '[]'::json)) c,
                unnest({kinds}::text[], {refs}::text[]) AS w(kind, ref)
             WHERE c->>'kind' = w.kind AND c->>'ref' = w.ref)"
        ));
        self.block(bodies(self, w, RECENT, limit, 0))
    }

    fn adjacent(
        &self,
        access: &Access,
        filter: &Filter,
        gate: Gate,
        anchors: &[&Memory],
        model: &str,
        radius: usize,
    ) -> Result<Vec<Adjacent>> {
        if anchors.is_empty() || radius == 0 {
            return Ok(vec![]);
        }
        let mut f = filter.clone();
        f.scope = crate::ScopeFilter::All;
        let mut w = Where::new();
        w.access(access);
        w.filter(&f);
        w.gate(gate);
        let model = w.bind(model.to_owned());
        let scopes =
            w.bind(anchors.iter().map(|a| a.scope.as_str().to_owned()).collect::<Vec<_>>());
        let times = w.bind(anchors.iter().map(|a| a.created_at.as_micros()).collect::<Vec<_>>());
        let ids = w.bind(anchors.iter().map(|a| a.id.to_string()).collect::<Vec<_>>());
        let radius = w.bind(radius as i64);
        // Both sides in one round trip: each anchor's `radius` nearest records below and above.
        let side = |cmp: char, order: &str| {
            format!(
                "SELECT a.id, n.body, n.vec
                 FROM unnest({scopes}::text[], {times}::bigint[], {ids}::text[])
                      AS a(scope, created_at, id)
                 CROSS JOIN LATERAL (
                     SELECT m.body::text AS body, m.vec FROM memories m
                     WHERE {} AND m.model = {model} AND m.vec IS NOT NULL
                       AND m.scope = a.scope COLLATE \"C\"
                       AND (m.created_at, m.id) {cmp} (a.created_at, a.id COLLATE \"C\")
                     ORDER BY m.created_at {order}, m.id {order} LIMIT {radius}) n",
                w.sql
            )
        };
        let sql = format!("{} UNION ALL {}", side('<', "DESC"), side('>', "ASC"));
        self.block(async {
            let client = self.pool.get().await?;
            let rows = client.query(&sql, &w.refs()).await?;
            rows.iter()
                .map(|r| {
                    let anchor: String = r.get(0);
                    Ok(Adjacent {
                        anchor: RecordId::parse(&anchor).ok_or_else(|| {
                            StoreError::Corrupt(format!("adjacent: bad anchor id {anchor:?}"))
                        })?,
                        record: decode(r.get(1))?,
                        vector: r.get::<_, Vector>(2).to_vec(),
                    })
                })
                .collect()
        })
    }

    fn vector(&self, id: &RecordId, model: &str) -> Result<Option<Vec<f32>>> {
        self.block(async {
            let client = self.pool.get().await?;
            let row = client
                .query_opt(
                    "SELECT vec FROM memories WHERE id = $1 AND model = $2 AND vec IS NOT NULL",
                    &[&id.to_string(), &model],
                )
                .await?;
            Ok(row.map(|r| r.get::<_, Vector>(0).to_vec()))
        })
    }

    fn list_oldest(
        &self,
        access: &Access,
        filter: &Filter,
        gate: Gate,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        let mut w = Where::new();
        w.access(access);
        w.filter(filter);
        w.gate(gate);
        self.block(bodies(self, w, OLDEST, limit, 0))
    }

    fn embedder_models(&self) -> Result<Vec<(String, u64)>> {
        self.block(async {
            let client = self.pool.get().await?;
            let rows = client
                .query(
                    "SELECT model, count(*) FROM memories WHERE model IS NOT NULL
                     GROUP BY model ORDER BY model",
                    &[],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64)).collect())
        })
    }

    fn needing_embedding(
        &self,
        model: &str,
        after: Option<RecordId>,
        limit: usize,
    ) -> Result<Vec<(RecordId, String)>> {
        let after = after.map(|a| a.to_string()).unwrap_or_default();
        let rows = self.block(async {
            let client = self.pool.get().await?;
            Ok::<_, StoreError>(
                client
                    .query(
                        "SELECT id, coalesce(body->>'content', '') FROM memories
                         WHERE (model IS NULL OR model <> $1) AND id > $2
                         ORDER BY id LIMIT $3",
                        &[&model, &after, &(limit as i64)],
                    )
                    .await?,
            )
        })?;
        rows.iter().map(|r| Ok((parse_id(r.get(0))?, r.get::<_, String>(1)))).collect()
    }

    fn set_vector(&self, id: &RecordId, embedding: Embedding<'_>) -> Result<bool> {
        self.ensure_vector_index(embedding.vector.len())?;
        self.block(async {
            let client = self.pool.get().await?;
            let n = client
                .execute(
                    "UPDATE memories SET model = $2, dims = $3, vec = $4 WHERE id = $1",
                    &[
                        &id.to_string(),
                        &embedding.model,
                        &(embedding.vector.len() as i32),
                        &Vector::from(embedding.vector.to_vec()),
                    ],
                )
                .await?;
            Ok(n > 0)
        })
    }
}

/// The records `access` reads through `gate`, other than `exclude`.
fn others_than(access: &Access, gate: Gate, exclude: &RecordId) -> Where {
    let mut w = Where::new();
    w.access(access);
    w.gate(gate);
    let p = w.bind(exclude.to_string());
    w.and(&format!("m.id <> {p}"));
    w
}
