//! SQL built from the store's filters: the owner predicate, the hard pre-filters, the
//! recall gate.

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};
use spine_core::{IdRef, Memory, RecordId, Timestamp};

use super::rows::*;
use crate::{Access, Filter, Gate, Result, ScopeFilter};

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
        if a.every_owner {
            return;
        }
        if a.include_shared {
            self.and(
                "m.owner IS NOT NULL AND (m.owner = ? OR m.visibility = 'shared')",
                [Value::Text(a.owner.clone())],
            );
        } else {
            self.and("m.owner IS NOT NULL AND m.owner = ?", [Value::Text(a.owner.clone())]);
        }
    }

    pub(crate) fn filter(&mut self, f: &Filter) {
        if let ScopeFilter::One(scope) = &f.scope {
            self.and("m.scope = ?", [Value::Text(scope.as_str().to_owned())]);
        }
        let mut tags: Vec<&String> = f.tags_all.iter().collect();
        tags.sort();
        tags.dedup();
        if !tags.is_empty() {
            let marks = vec!["?"; tags.len()].join(", ");
            let mut p: Vec<Value> = tags.iter().map(|t| Value::Text((*t).clone())).collect();
            p.push(Value::Integer(tags.len() as i64));
            self.and(
                &format!(
                    "(SELECT COUNT(*) FROM memory_tags t WHERE t.memory = m.rowid AND t.tag IN ({marks})) = ?"
                ),
                p,
            );
        }
        match f.categories_any.as_deref() {
            None => {}
            Some([]) => self.and("0 = 1", []),
            Some(any) => {
                let marks = vec!["?"; any.len()].join(", ");
                self.and(
                    &format!("m.category IN ({marks})"),
                    any.iter().map(|c| Value::Text(c.as_str().into())),
                );
            }
        }
        if !f.categories_none.is_empty() {
            let marks = vec!["?"; f.categories_none.len()].join(", ");
            self.and(
                &format!("m.category NOT IN ({marks})"),
                f.categories_none.iter().map(|c| Value::Text(c.as_str().into())),
            );
        }
        if let Some(t) = f.created_after {
            self.and("m.created_at >= ?", [Value::Integer(t.as_micros())]);
        }
        if let Some(t) = f.created_before {
            self.and("m.created_at < ?", [Value::Integer(t.as_micros())]);
        }
        if f.windowed_only {
            self.and("m.not_before IS NOT NULL OR m.not_after IS NOT NULL", []);
        }
        if f.exclude_archived_superseded {
            self.and("m.archived_at IS NULL AND m.superseded_by IS NULL", []);
        }
        if let Some(kind) = f.kind {
            self.and("json_extract(m.body, '$.kind') = ?", [Value::Text(kind.as_str().into())]);
        }
    }

    /// The recall gate in SQL; mirrors `spine_core::derive_states` (half-open window in
    /// whole seconds, expired suppressing scheduled).
    pub(crate) fn gate(&mut self, g: Gate) {
        let now = |t: Timestamp| Value::Integer(t.to_epoch_seconds().as_secs());
        const NOT_EXPIRED: &str = "(m.not_after IS NULL OR m.not_after > ?)";
        match g {
            Gate::Off => {}
            Gate::ActiveAt(t) => self.and(
                &format!(
                    "m.archived_at IS NULL AND m.superseded_by IS NULL AND {NOT_EXPIRED} \
                     AND (m.not_before IS NULL OR m.not_before <= ?)"
                ),
                [now(t), now(t)],
            ),
            Gate::ScheduledAt(t) => self.and(
                &format!("{NOT_EXPIRED} AND m.not_before IS NOT NULL AND m.not_before > ?"),
                [now(t), now(t)],
            ),
            Gate::ExpiredAt(t) => {
                self.and("m.not_after IS NOT NULL AND m.not_after <= ?", [now(t)])
            }
            Gate::ScheduledOrExpiredAt(t) => self.and(
                &format!(
                    "(m.not_after IS NOT NULL AND m.not_after <= ?) OR \
                     ({NOT_EXPIRED} AND m.not_before IS NOT NULL AND m.not_before > ?)"
                ),
                [now(t), now(t), now(t)],
            ),
            Gate::Archived => self.and("m.archived_at IS NOT NULL", []),
            Gate::Superseded => self.and("m.superseded_by IS NOT NULL", []),
        }
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
