//! SQLite's WHERE clauses: the read predicate (`crate::predicate`) in SQLite's dialect,
//! plus the clauses of single queries.

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};
use spine_core::{Category, IdRef, Memory, RecordId};

use crate::codec::parse_id;

use super::rows::*;
use crate::predicate::{Bound, Clause, Dialect};
use crate::{Access, Result, Shared};

/// A WHERE clause under construction with its positional parameters.
pub(crate) type Where = Clause<Value>;

impl Where {
    pub(crate) fn and(&mut self, clause: &str, params: impl IntoIterator<Item = Value>) {
        self.push(clause);
        self.params.extend(params);
    }
}

impl Dialect for Where {
    fn bind(&mut self, v: Bound) -> String {
        self.params.push(match v {
            Bound::Text(t) => Value::Text(t),
            Bound::Int(i) => Value::Integer(i),
        });
        "?".into()
    }

    fn category_in(&mut self, categories: &[Category]) -> String {
        let marks: Vec<String> =
            categories.iter().map(|c| self.bind(Bound::Text(c.as_str().into()))).collect();
        format!("m.category IN ({})", marks.join(", "))
    }

    fn has_tags(&mut self, tags: &[String]) -> String {
        let marks: Vec<String> = tags.iter().map(|t| self.bind(Bound::Text(t.clone()))).collect();
        let n = self.bind(Bound::Int(tags.len() as i64));
        format!(
            "(SELECT COUNT(*) FROM memory_tags t WHERE t.memory = m.rowid AND t.tag IN ({})) = {n}",
            marks.join(", ")
        )
    }

    fn body_text(&self, field: &str) -> String {
        format!("json_extract(m.body, '$.{field}')")
    }

    fn shares(&mut self, shared: Shared<'_>) -> String {
        match shared {
            Shared::Tags(tags) => {
                let marks: Vec<String> =
                    tags.iter().map(|t| self.bind(Bound::Text(t.clone()))).collect();
                format!(
                    "EXISTS (SELECT 1 FROM memory_tags t
                     WHERE t.memory = m.rowid AND t.tag IN ({}))",
                    marks.join(", ")
                )
            }
            Shared::Citations(citations) => {
                let pairs: Vec<String> = citations
                    .iter()
                    .map(|c| {
                        let kind = self.bind(Bound::Text(c.kind.as_str().to_owned()));
                        let reference = self.bind(Bound::Text(c.reference.clone()));
                        format!(
                            "(json_extract(c.value, '$.kind') = {kind}
                              AND json_extract(c.value, '$.ref') = {reference})"
                        )
                    })
                    .collect();
                format!(
                    "EXISTS (SELECT 1 FROM json_each(m.body, '$.citations') c WHERE {})",
                    pairs.join(" OR ")
                )
            }
        }
    }
}

/// The payloads of the rows `w` selects, in `order` (ORDER BY terms), at most `limit`
/// after skipping `offset`.
pub(super) fn bodies(
    conn: &Connection,
    mut w: Where,
    order: &str,
    limit: usize,
    offset: usize,
) -> Result<Vec<Memory>> {
    w.params.push(Value::Integer(limit as i64));
    w.params.push(Value::Integer(offset as i64));
    // Cached: the text depends only on the selection's shape (its values are parameters),
    // and `get_memory` and `list_memory` run it on every call.
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT m.body FROM memories m WHERE {} ORDER BY {order} LIMIT ? OFFSET ?",
        w.sql
    ))?;
    let bodies: Vec<String> =
        stmt.query_map(params_from_iter(w.params), |r| r.get(0))?.collect::<Result<_, _>>()?;
    bodies.iter().map(|b| decode(b)).collect()
}

pub(super) fn matching_in(
    conn: &Connection,
    access: &Access,
    id: &IdRef,
    limit: usize,
) -> Result<Vec<Memory>> {
    let mut w = Where::default();
    match id {
        IdRef::Id(id) => w.and("m.id = ?", [Value::Text(id.to_string())]),
        IdRef::Short(s) => w.and("m.short_id = ?", [Value::Text(s.as_str().to_owned())]),
    }
    w.access(access);
    bodies(conn, w, "m.id", limit, 0)
}

/// How many records `w` matches.
pub(super) fn count(conn: &Connection, w: Where) -> Result<u64> {
    let n: i64 = conn
        .prepare_cached(&format!("SELECT count(*) FROM memories m WHERE {}", w.sql))?
        .query_row(params_from_iter(w.params), |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Deletes the records `w` matches: each one's id and scope.
pub(super) fn delete_where(conn: &Connection, w: Where) -> Result<Vec<(RecordId, String)>> {
    let mut stmt = conn.prepare_cached(&format!(
        "DELETE FROM memories AS m WHERE {} RETURNING id, scope",
        w.sql
    ))?;
    let mut rows = stmt.query(params_from_iter(w.params))?;
    let mut gone = Vec::new();
    while let Some(r) = rows.next()? {
        gone.push((parse_id(r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?)?, r.get(1)?));
    }
    Ok(gone)
}
