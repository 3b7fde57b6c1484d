//! SQLite's WHERE clauses: the read predicate (`crate::predicate`) in SQLite's dialect,
//! plus the clauses of single queries.

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};
use spine_core::{Category, IdRef, Memory, RecordId};

use super::rows::*;
use crate::predicate::{self, Bound, Cond, Dialect};
use crate::{Access, Filter, Gate, Result};

/// A WHERE clause under construction with its positional parameters.
pub(crate) struct Where {
    pub(crate) sql: String,
    pub(crate) params: Vec<Value>,
}

impl Where {
    pub(crate) fn new() -> Self {
        Where { sql: String::from("1 = 1"), params: Vec::new() }
    }

    /// The records `access` reads through `gate`, other than `exclude` (a related-records
    /// query around one record).
    pub(crate) fn others_than(access: &Access, gate: Gate, exclude: &RecordId) -> Self {
        let mut w = Where::new();
        w.access(access);
        w.gate(gate);
        w.and("m.id <> ?", [Value::Text(exclude.to_string())]);
        w
    }

    pub(crate) fn and(&mut self, clause: &str, params: impl IntoIterator<Item = Value>) {
        self.sql.push_str(" AND (");
        self.sql.push_str(clause);
        self.sql.push(')');
        self.params.extend(params);
    }

    /// SPEC Authentication 4: own + shared when authenticated, own (ownerless) when
    /// anonymous; a NULL owner (legacy record, no owner key) never matches.
    pub(crate) fn access(&mut self, a: &Access) {
        self.conditions(predicate::readable(a));
    }

    /// The hard pre-filters.
    pub(crate) fn filter(&mut self, f: &Filter) {
        self.conditions(predicate::filtered(f));
    }

    /// The recall gate.
    pub(crate) fn gate(&mut self, g: Gate) {
        self.conditions(predicate::gate(g));
    }

    fn conditions(&mut self, conds: impl IntoIterator<Item = Cond>) {
        for c in conds {
            let sql = c.sql(self);
            self.sql.push_str(" AND (");
            self.sql.push_str(&sql);
            self.sql.push(')');
        }
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

    fn kind(&self) -> &'static str {
        "json_extract(m.body, '$.kind')"
    }
}

pub(super) fn matching_in(
    conn: &Connection,
    access: &Access,
    id: &IdRef,
    limit: usize,
) -> Result<Vec<Memory>> {
    let mut w = Where::new();
    match id {
        IdRef::Id(id) => w.and("m.id = ?", [Value::Text(id.to_string())]),
        IdRef::Short(s) => w.and("m.short_id = ?", [Value::Text(s.as_str().to_owned())]),
    }
    w.access(access);
    w.params.push(Value::Integer(limit as i64));
    let mut stmt = conn
        .prepare(&format!("SELECT m.body FROM memories m WHERE {} ORDER BY m.id LIMIT ?", w.sql))?;
    let bodies: Vec<String> =
        stmt.query_map(params_from_iter(w.params), |r| r.get(0))?.collect::<Result<_, _>>()?;
    bodies.iter().map(|b| decode(b)).collect()
}

/// `AND`-clause matching the rows `access` may change, with its owner parameter at `?{n}`
/// (the operator's access binds an owner nobody has and skips the comparison).
pub(super) fn owned_by(access: &Access, n: usize) -> String {
    if access.every_owner {
        format!("(?{n} IS NOT NULL)")
    } else {
        format!("(owner IS NOT NULL AND owner = ?{n})")
    }
}
