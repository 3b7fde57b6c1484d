//! Rows: a record written as its row (payload, filter columns, tags, vector), and the edits
//! that stamp a payload in place.

use deadpool_postgres::GenericClient;
use pgvector::Vector;
use spine_core::{Memory, RecordId, SCHEMA_VERSION};

use super::audit;
use super::query::Param;
use crate::audit::AuditEvent;
use crate::codec::{encode, secs};
use crate::predicate::writable_at;
use crate::{Access, Embedding, Result};

/// `expr` (a jsonb value; the stored payload is `json`, read it as `body::jsonb`) with
/// `schema_version` raised to this binary's, never lowered (SPEC Versioning 2 and 4).
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

/// Rewrites the row of the record `$1` where `access` may change it, from the parameters
/// of [`upsert_sql`] and the writer's owner after them; never creates one.
fn rewrite_sql(vector: bool, access: &Access) -> String {
    // Every column but the id, which finds the row.
    let mut cols = COLUMNS.trim_start_matches("id, ").to_owned();
    let mut values = (2..=13).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
    values.push_str(", $14::text::json");
    let mut owner = 15;
    if vector {
        cols.push_str(", model, dims, vec");
        values.push_str(", $15, $16, $17");
        owner = 18;
    }
    let owned = writable_at(access, &format!("${owner}::text"));
    format!("UPDATE memories m SET ({cols}) = ({values}) WHERE m.id = $1 AND {owned}")
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

/// Writes one record row (with its vector) through `client`.
pub(super) async fn write<C: GenericClient>(
    client: &C,
    m: &Memory,
    embedding: Option<Embedding<'_>>,
) -> Result<()> {
    write_body(client, m, encode(m)?, embedding).await
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

/// Writes one new record row (with its vector) through `client`, and the audit event of
/// `access`'s attribution with it in the same statement ([`audit::recorded_sql`]): whether
/// it wrote one.
pub(super) async fn write_recorded<C: GenericClient>(
    client: &C,
    access: &Access,
    m: &Memory,
    embedding: Embedding<'_>,
) -> Result<bool> {
    let mut p = row_params(m, encode(m)?, Some(embedding));
    let Some(event) = AuditEvent::attributed(access) else {
        let stmt = client.prepare_cached(&upsert_sql(true)).await?;
        client.execute(&stmt, &refs(&p)).await?;
        return Ok(false);
    };
    let at = audit::placeholders_after(p.len());
    p.extend(audit::event_params(&event));
    let sql = audit::recorded_sql(&format!("{} RETURNING id, scope", upsert_sql(true)), &at);
    let stmt = client.prepare_cached(&sql).await?;
    client.query(&stmt, &refs(&p)).await?;
    Ok(true)
}

/// Rewrites the row of the record `m` (with its vector when given) where `access` may
/// change it, in one statement, with the audit event of `access`'s attribution: whether it
/// did (a record not found and one `access` may not change are alike). By its id, so
/// prepared once per connection.
pub(super) async fn rewrite<C: GenericClient>(
    client: &C,
    access: &Access,
    m: &Memory,
    embedding: Option<Embedding<'_>>,
) -> Result<bool> {
    let mut p = row_params(m, encode(m)?, embedding);
    p.push(Box::new(access.owner.clone()));
    let change = rewrite_sql(embedding.is_some(), access);
    let Some(event) = AuditEvent::attributed(access) else {
        let stmt = client.prepare_cached(&change).await?;
        return Ok(client.execute(&stmt, &refs(&p)).await? > 0);
    };
    let at = audit::placeholders_after(p.len());
    p.extend(audit::event_params(&event));
    let sql = audit::recorded_sql(&format!("{change} RETURNING m.id, m.scope"), &at);
    let stmt = client.prepare_cached(&sql).await?;
    Ok(!client.query(&stmt, &refs(&p)).await?.is_empty())
}

/// Stamps `successor` as `target`'s successor, in its column and its payload (a
/// supersession, a consolidation link).
pub(super) async fn stamp_successor<C: GenericClient>(
    client: &C,
    target: &RecordId,
    successor: &RecordId,
) -> Result<()> {
    let body = stamp("jsonb_set(body::jsonb, '{superseded_by}', to_jsonb($1::text))");
    let sql = format!("UPDATE memories SET superseded_by = $1, body = {body} WHERE id = $2");
    let stmt = client.prepare_cached(&sql).await?;
    client.execute(&stmt, &[&successor.to_string(), &target.to_string()]).await?;
    Ok(())
}
