//! SQL built from the store's filters for PostgreSQL: the owner predicate, the hard
//! pre-filters, the recall gate (the same conditions as `sqlite/query.rs`, with numbered
//! parameters).

use tokio_postgres::types::ToSql;

use spine_core::Timestamp;

use crate::{Access, Filter, Gate, ScopeFilter};

/// One bound parameter.
pub(super) type Param = Box<dyn ToSql + Sync + Send>;

/// A WHERE clause under construction with its parameters (`$1`, `$2`, … in push order).
pub(super) struct Where {
    pub(super) sql: String,
    pub(super) params: Vec<Param>,
}

impl Where {
    pub(super) fn new() -> Self {
        Where { sql: String::from("TRUE"), params: Vec::new() }
    }

    /// Binds `v` and returns its placeholder.
    pub(super) fn bind(&mut self, v: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(v));
        format!("${}", self.params.len())
    }

    pub(super) fn and(&mut self, clause: &str) {
        self.sql.push_str(" AND (");
        self.sql.push_str(clause);
        self.sql.push(')');
    }

    /// The parameters as the client takes them.
    pub(super) fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)).collect()
    }

    /// SPEC Authentication 4: own + shared when authenticated, own (ownerless) when
    /// anonymous; a NULL owner (legacy record, no owner key) never matches.
    pub(super) fn access(&mut self, a: &Access) {
        if a.every_owner {
            return;
        }
        let owner = self.bind(a.owner.clone());
        if a.include_shared {
            self.and(&format!(
                "m.owner IS NOT NULL AND (m.owner = {owner} OR m.visibility = 'shared')"
            ));
        } else {
            self.and(&format!("m.owner IS NOT NULL AND m.owner = {owner}"));
        }
    }

    pub(super) fn filter(&mut self, f: &Filter) {
        if let ScopeFilter::One(scope) = &f.scope {
            let p = self.bind(scope.as_str().to_owned());
            self.and(&format!("m.scope = {p}"));
        }
        if !f.tags_all.is_empty() {
            let p = self.bind(f.tags_all.clone());
            self.and(&format!("m.tags @> {p}::text[]"));
        }
        match f.categories_any.as_deref() {
            None => {}
            Some([]) => self.and("FALSE"),
            Some(any) => {
                let any: Vec<String> = any.iter().map(|c| c.as_str().to_owned()).collect();
                let p = self.bind(any);
                self.and(&format!("m.category = ANY({p}::text[])"));
            }
        }
        if !f.categories_none.is_empty() {
            let none: Vec<String> =
                f.categories_none.iter().map(|c| c.as_str().to_owned()).collect();
            let p = self.bind(none);
            self.and(&format!("NOT (m.category = ANY({p}::text[]))"));
        }
        if let Some(t) = f.created_after {
            let p = self.bind(t.as_micros());
            self.and(&format!("m.created_at >= {p}"));
        }
        if let Some(t) = f.created_before {
            let p = self.bind(t.as_micros());
            self.and(&format!("m.created_at < {p}"));
        }
        if f.windowed_only {
            self.and("m.not_before IS NOT NULL OR m.not_after IS NOT NULL");
        }
        if f.exclude_archived_superseded {
            self.and("m.archived_at IS NULL AND m.superseded_by IS NULL");
        }
        if let Some(kind) = f.kind {
            let p = self.bind(kind.as_str().to_owned());
            self.and(&format!("m.kind = {p}"));
        }
    }

    /// The recall gate in SQL; mirrors `spine_core::derive_states` (half-open window in
    /// whole seconds, expired suppressing scheduled).
    pub(super) fn gate(&mut self, g: Gate) {
        let now = |t: Timestamp| t.to_epoch_seconds().as_secs();
        match g {
            Gate::Off => {}
            Gate::ActiveAt(t) => {
                let p = self.bind(now(t));
                self.and(&format!(
                    "m.archived_at IS NULL AND m.superseded_by IS NULL \
                     AND (m.not_after IS NULL OR m.not_after > {p}) \
                     AND (m.not_before IS NULL OR m.not_before <= {p})"
                ));
            }
            Gate::ScheduledAt(t) => {
                let p = self.bind(now(t));
                self.and(&format!(
                    "(m.not_after IS NULL OR m.not_after > {p}) \
                     AND m.not_before IS NOT NULL AND m.not_before > {p}"
                ));
            }
            Gate::ExpiredAt(t) => {
                let p = self.bind(now(t));
                self.and(&format!("m.not_after IS NOT NULL AND m.not_after <= {p}"));
            }
            Gate::ScheduledOrExpiredAt(t) => {
                let p = self.bind(now(t));
                self.and(&format!(
                    "(m.not_after IS NOT NULL AND m.not_after <= {p}) OR \
                     ((m.not_after IS NULL OR m.not_after > {p}) \
                      AND m.not_before IS NOT NULL AND m.not_before > {p})"
                ));
            }
            Gate::Archived => self.and("m.archived_at IS NOT NULL"),
            Gate::Superseded => self.and("m.superseded_by IS NOT NULL"),
        }
    }

    /// The condition on rows `access` may change (`m.owner` equal to its owner; any row
    /// for the operator).
    pub(super) fn owned(&mut self, access: &Access) {
        if !access.every_owner {
            let owner = self.bind(access.owner.clone());
            self.and(&format!("m.owner IS NOT NULL AND m.owner = {owner}"));
        }
    }
}

pub(super) use crate::codec::decode;
