//! PostgreSQL's WHERE clauses: the read predicate (`crate::predicate`) in PostgreSQL's
//! dialect (numbered parameters, arrays), plus the clauses of single queries.

use tokio_postgres::types::ToSql;

use spine_core::Category;

use crate::predicate::{self, Bound, Cond, Dialect};
use crate::{Access, Filter, Gate};

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
        self.conditions(predicate::readable(a));
    }

    /// The hard pre-filters.
    pub(super) fn filter(&mut self, f: &Filter) {
        self.conditions(predicate::filtered(f));
    }

    /// The recall gate.
    pub(super) fn gate(&mut self, g: Gate) {
        self.conditions(predicate::gate(g));
    }

    fn conditions(&mut self, conds: impl IntoIterator<Item = Cond>) {
        for c in conds {
            let sql = c.sql(self);
            self.and(&sql);
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

impl Dialect for Where {
    fn bind(&mut self, v: Bound) -> String {
        match v {
            Bound::Text(t) => Where::bind(self, t),
            Bound::Int(i) => Where::bind(self, i),
        }
    }

    fn category_in(&mut self, categories: &[Category]) -> String {
        let names: Vec<String> = categories.iter().map(|c| c.as_str().to_owned()).collect();
        format!("m.category = ANY({}::text[])", Where::bind(self, names))
    }

    fn has_tags(&mut self, tags: &[String]) -> String {
        format!("m.tags @> {}::text[]", Where::bind(self, tags.to_vec()))
    }

    fn kind(&self) -> &'static str {
        "m.kind"
    }
}
