//! Rows: encoding a record into its columns, tags and vector, and reading them back.

use rusqlite::{Connection, params};
use spine_core::{Memory, RecordId, SCHEMA_VERSION};

use super::STAMP_VERSION;
use super::index::Row;
use crate::codec::{parse_id, secs};
use crate::fields::{Fields, markers};
use crate::{Embedding, Result};

/// The indexed fields of a record, for `Row`; append `WHERE ...` or `ORDER BY ...`.
pub(super) const ROW_SELECT: &str =
    "SELECT m.rowid, m.id, m.owner, m.visibility = 'shared', m.scope,
        m.category, CASE WHEN m.category = 'discovery' THEN json_extract(m.body, '$.kind') END,
        m.created_at, m.archived_at IS NOT NULL, m.superseded_by IS NOT NULL, m.not_before,
        m.not_after
     FROM memories m";

pub(super) fn read_row(
    r: &rusqlite::Row<'_>,
    tags: Vec<String>,
    vector: Option<(String, Vec<f32>)>,
) -> Result<Row> {
    Ok(Row {
        rowid: r.get(0)?,
        id: parse_id(&r.get::<_, String>(1)?)?,
        owner: r.get(2)?,
        shared: r.get(3)?,
        scope: r.get(4)?,
        category: r.get(5)?,
        kind: r.get(6)?,
        created_at: r.get(7)?,
        markers: markers(r, 8)?,
        tags,
        vector,
    })
}

pub(crate) use crate::codec::{blob_into, blob_to_vec, decode, encode, vec_to_blob};

impl Fields for rusqlite::Row<'_> {
    fn text(&self, i: usize) -> Result<String> {
        Ok(self.get(i)?)
    }
    fn text_opt(&self, i: usize) -> Result<Option<String>> {
        Ok(self.get(i)?)
    }
    fn int(&self, i: usize) -> Result<i64> {
        Ok(self.get(i)?)
    }
    fn int_opt(&self, i: usize) -> Result<Option<i64>> {
        Ok(self.get(i)?)
    }
    fn flag(&self, i: usize) -> Result<bool> {
        Ok(self.get(i)?)
    }
    fn vector_bytes(&self, i: usize) -> Result<Option<Vec<u8>>> {
        Ok(self.get(i)?)
    }
}

/// Stamps `successor` as `target`'s successor, in its column and its payload (a
/// supersession, a consolidation link).
pub(super) fn stamp_successor(
    conn: &Connection,
    target: &RecordId,
    successor: &RecordId,
) -> Result<()> {
    conn.prepare_cached(&format!(
        "UPDATE memories SET superseded_by = ?1,
            body = json_set(body, '$.superseded_by', ?1, {STAMP_VERSION})
         WHERE id = ?3"
    ))?
    .execute(params![successor.to_string(), SCHEMA_VERSION, target.to_string()])?;
    Ok(())
}

/// Writes the indexed columns and tags of `m` at `rowid` (payload already encoded).
pub(crate) fn write_row(tx: &Connection, m: &Memory, body: &str) -> Result<i64> {
    tx.prepare_cached(
        "INSERT INTO memories (id, short_id, owner, visibility, scope, category, created_at,
            not_before, not_after, archived_at, superseded_by, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
         ON CONFLICT(id) DO UPDATE SET short_id = excluded.short_id, owner = excluded.owner,
            visibility = excluded.visibility, scope = excluded.scope,
            category = excluded.category, created_at = excluded.created_at,
            not_before = excluded.not_before, not_after = excluded.not_after,
            archived_at = excluded.archived_at, superseded_by = excluded.superseded_by,
            body = excluded.body",
    )?
    .execute(params![
        m.id.to_string(),
        m.short_id.as_str(),
        m.owner,
        m.visibility.as_str(),
        m.scope.as_str(),
        m.category.as_str(),
        m.created_at.as_micros(),
        secs(m.not_before),
        secs(m.not_after),
        secs(m.archived_at),
        m.superseded_by.map(|s| s.to_string()),
        body,
    ])?;
    let rowid: i64 = tx
        .prepare_cached("SELECT rowid FROM memories WHERE id = ?1")?
        .query_row([m.id.to_string()], |r| r.get(0))?;
    tx.prepare_cached("DELETE FROM memory_tags WHERE memory = ?1")?.execute([rowid])?;
    let mut ins =
        tx.prepare_cached("INSERT OR IGNORE INTO memory_tags (memory, tag) VALUES (?1, ?2)")?;
    for tag in &m.tags {
        ins.execute(params![rowid, tag])?;
    }
    Ok(rowid)
}

pub(crate) fn write_vector(tx: &Connection, rowid: i64, e: Embedding<'_>) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO vectors (memory, model, dims, vec) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(memory) DO UPDATE SET model = excluded.model, dims = excluded.dims,
            vec = excluded.vec",
    )?
    .execute(params![rowid, e.model, e.vector.len() as i64, vec_to_blob(e.vector)])?;
    Ok(())
}
