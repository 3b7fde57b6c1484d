//! Which records a read sees — the owner predicate (SPEC Authentication 4), the hard
//! pre-filters and the recall gate — written once, as a list of conditions, and rendered
//! per engine: as SQL through a [`Dialect`] (`sqlite/query.rs`, `postgres/query.rs`) and
//! as interned comparisons by the SQLite engine's in-memory index (`sqlite/index`). The
//! parity test (`tests/index.rs`) holds the three renderings together. Which records a
//! write may change is here too ([`writable`]), for every replace, delete, archive and
//! supersede of both engines.
//!
//! Adding a filterable field: a [`Cond`] variant, its line in [`conditions`], its SQL in
//! [`Cond::sql`] and its comparison in the index's `compile`/`passes`.
//!
//! Each engine's `Where` is a [`Clause`] of its parameter type that spells the
//! [`Dialect`]; reading through an access, a filter and a gate, excluding a record and
//! paging by (created_at, id) are written once here, and so are the operator commands'
//! selections built from the same conditions: the state counts, the expired records
//! `spine prune-expired` deletes, those `summarize-missing` fills and those `consolidate`
//! considers.

use spine_core::{Category, DiscoveryKind, EpochSeconds, RecordId, Timestamp};

use crate::{Access, Filter, Gate, MissingSummaries, Order, Page, ScopeFilter, Selection, Shared};

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bound {
    Text(String),
    Int(i64),
}

/// What the engines spell differently.
pub(crate) trait Dialect {
    /// Binds `v` and returns its placeholder.
    fn bind(&mut self, v: Bound) -> String;
    /// `m.category` is one of `categories` (never empty).
    fn category_in(&mut self, categories: &[Category]) -> String;
    /// The record carries every one of `tags` (never empty; sorted, distinct).
    fn has_tags(&mut self, tags: &[String]) -> String;
    /// The text of the record body's top-level `field` (`kind`, `summary`, …), NULL where
    /// it has none.
    fn body_text(&self, field: &str) -> String;
    /// The record has something of `shared`: one of its tags, or one of its citations
    /// (same kind and ref); `shared` is never empty.
    fn shares(&mut self, shared: Shared<'_>) -> String;
}

/// A WHERE clause under construction, conditions joined by AND, with its parameters in
/// placeholder order. Each engine's `Where` is one, with its parameter type and its
/// [`Dialect`].
pub(crate) struct Clause<P> {
    pub(crate) sql: String,
    pub(crate) params: Vec<P>,
}

impl<P> Default for Clause<P> {
    fn default() -> Self {
        Clause { sql: String::from("1 = 1"), params: Vec::new() }
    }
}

/// SQL: the records `spine-review consolidate` considers: readable by someone (an owner
/// key), recall-visible whatever the time (no state marker and no validity window: a
/// scheduled memory is deliberate), and not rules (SPEC: rules are immutable, never
/// superseded nor superseding). Each engine adds that the record has a vector where the
/// row itself may lack one.
pub(crate) const CONSOLIDATION_ELIGIBLE: &str = "m.owner IS NOT NULL AND m.archived_at IS NULL \
     AND m.superseded_by IS NULL AND m.not_before IS NULL AND m.not_after IS NULL \
     AND m.category <> 'rule'";

/// SQL: the record has no summary, and none written by a client (SPEC: an automatic summary
/// never touches one) — what `spine summarize-missing` may fill, checked again by the
/// `UPDATE` that writes it.
pub(crate) fn no_summary(d: &impl Dialect) -> String {
    format!(
        "coalesce({}, '') = '' AND coalesce({}, '') <> 'client'",
        d.body_text("summary"),
        d.body_text("summary_source")
    )
}

impl<P> Clause<P>
where
    Self: Dialect,
{
    /// Appends `AND (sql)`, whose values are bound already.
    pub(crate) fn push(&mut self, sql: &str) {
        self.sql.push_str(" AND (");
        self.sql.push_str(sql);
        self.sql.push(')');
    }

    /// The records of `sel`: those its access reads through its filter and gate.
    pub(crate) fn read(sel: Selection<'_>) -> Self {
        let mut w = Self::default();
        w.access(sel.access);
        w.filter(sel.filter);
        w.gate(sel.gate);
        w
    }

    /// The records of `sel` in every scope, its scope filter ignored (the neighbour step
    /// reads each anchor's own scope).
    pub(crate) fn read_any_scope(sel: Selection<'_>) -> Self {
        let mut w = Self::default();
        w.access(sel.access);
        w.conditions(filtered(sel.filter).into_iter().filter(|c| !matches!(c, Cond::Scope(_))));
        w.gate(sel.gate);
        w
    }

    /// The records of `sel` on `page` (its cursor; the order, offset and limit are the
    /// query's).
    pub(crate) fn page(sel: Selection<'_>, page: &Page) -> Self {
        let mut w = Self::read(sel);
        if let Some(c) = page.after {
            w.past(page.order, c.created_at, &c.id);
        }
        w
    }

    /// The records `access` reads through `gate`, other than `exclude`, that have
    /// something of `shared` (a related-records query around one record); `None` when
    /// `shared` is empty: no record shares nothing.
    pub(crate) fn sharing(
        access: &Access,
        gate: Gate,
        exclude: &RecordId,
        shared: Shared<'_>,
    ) -> Option<Self> {
        if shared.is_empty() {
            return None;
        }
        let mut w = Self::default();
        w.access(access);
        w.gate(gate);
        let p = w.bind(Bound::Text(exclude.to_string()));
        w.push(&format!("m.id <> {p}"));
        let sql = w.shares(shared);
        w.push(&sql);
        Some(w)
    }

    /// The records `which` picks for `spine summarize-missing`: in its scope, if any,
    /// created at or before its time, and [`no_summary`]. Every owner's: an operator view.
    pub(crate) fn missing_summaries(which: &MissingSummaries) -> Self {
        let mut w = Self::default();
        if let Some(scope) = &which.scope {
            let p = w.bind(Bound::Text(scope.as_str().to_owned()));
            w.push(&format!("m.scope = {p}"));
        }
        let p = w.bind(Bound::Int(which.created_at_or_before.as_micros()));
        w.push(&format!("m.created_at <= {p}"));
        let sql = no_summary(&w);
        w.push(&sql);
        w
    }

    /// `SummaryStore::missing_summaries`' query and its clause: up to `limit` records of
    /// [`Self::missing_summaries`], oldest first, strictly after `after` in that order, so
    /// that passing the last candidate of one page walks the matching records once. Columns
    /// as `SummaryCandidate::read` reads them.
    pub(crate) fn missing_summaries_page(
        which: &MissingSummaries,
        after: Option<(Timestamp, RecordId)>,
        limit: usize,
    ) -> (Self, String) {
        let mut w = Self::missing_summaries(which);
        if let Some((created_at, id)) = after {
            w.past(Order::Oldest, created_at, &id);
        }
        let l = w.bind(Bound::Int(limit as i64));
        let sql = format!(
            "SELECT m.id, m.created_at, coalesce({}, '') FROM memories m WHERE {} \
             ORDER BY {} LIMIT {l}",
            w.body_text("content"),
            w.sql,
            Order::Oldest.sql()
        );
        (w, sql)
    }

    /// The records expired at `cutoff` (the recall gate's [`StateAt::Expired`]): what
    /// `spine prune-expired` counts and deletes.
    pub(crate) fn expired(cutoff: EpochSeconds) -> Self {
        let mut w = Self::default();
        w.conditions([Cond::State(StateAt::Expired(cutoff.as_secs()))]);
        w
    }

    /// `TransferStore::expired_page`'s query and its clause: up to `limit` records of
    /// [`Self::expired`] in rowid order after rowid `after`. Columns as `ExpiredRecord::read`
    /// reads them.
    pub(crate) fn expired_page(cutoff: EpochSeconds, after: i64, limit: usize) -> (Self, String) {
        let mut w = Self::expired(cutoff);
        let (a, l) = (w.bind(Bound::Int(after)), w.bind(Bound::Int(limit as i64)));
        let sql = format!(
            "SELECT m.rowid, m.id, m.short_id, m.scope, m.not_after FROM memories m \
             WHERE {} AND m.rowid > {a} ORDER BY m.rowid LIMIT {l}",
            w.sql
        );
        (w, sql)
    }

    /// `ReviewStore::state_counts`' query and its clause: per scope (`scope`, or every
    /// scope), its records and how many are in each state at `now`, counted with the recall
    /// gate's own conditions ([`StateAt`]), so the counts cannot disagree with what a read
    /// sees. Columns as `StateCounts::read` reads them; the values are bound in the order
    /// their placeholders appear.
    pub(crate) fn state_counts(scope: Option<&str>, now: Timestamp) -> (Self, String) {
        let mut w = Self::default();
        let t = now.to_epoch_seconds().as_secs();
        let states = [
            StateAt::Active(t),
            StateAt::Archived,
            StateAt::Superseded,
            StateAt::Expired(t),
            StateAt::Scheduled(t),
        ];
        let counts: Vec<String> = states
            .into_iter()
            .map(|s| format!("SUM(CASE WHEN ({}) THEN 1 ELSE 0 END)", s.sql(&mut w)))
            .collect();
        if let Some(scope) = scope {
            let p = w.bind(Bound::Text(scope.to_owned()));
            w.push(&format!("m.scope = {p}"));
        }
        let sql = format!(
            "SELECT m.scope, COUNT(*), {} FROM memories m WHERE {} \
             GROUP BY m.scope ORDER BY m.scope",
            counts.join(", "),
            w.sql
        );
        (w, sql)
    }

    /// `Store::scopes`' query and its clause: the distinct scopes holding a record `access`
    /// reads that matches `filter` (any state), sorted, at most `limit`; the values are bound
    /// in the order their placeholders appear. One scope: `DISTINCT` over its rows. Across
    /// scopes, a loose index scan: walk the distinct scopes through the (scope, …) index, one
    /// probe each, and keep those holding a record the caller reads that matches, instead
    /// of `DISTINCT` over every readable row (a scan of the table). The caller's read rule
    /// is probed one alternative at a time, each through an index that answers it directly
    /// — (owner, scope) for the caller's own records, the partial (scope) index of shared
    /// ones — so a scope full of other owners' private records costs one index lookup, not
    /// a walk of its rows. The cost grows with the scopes, not the records.
    pub(crate) fn scopes(access: &Access, filter: &Filter, limit: usize) -> (Self, String) {
        let mut w = Self::default();
        if matches!(filter.scope, ScopeFilter::One(_)) {
            w.access(access);
            w.filter(filter);
            let l = w.bind(Bound::Int(limit as i64));
            let sql = format!(
                "SELECT DISTINCT m.scope FROM memories m WHERE {} ORDER BY m.scope LIMIT {l}",
                w.sql
            );
            return (w, sql);
        }
        // The read rule's alternatives, each rendered in its probe: its placeholders, then
        // the filter's, in the order they appear.
        enum Readable {
            Own(String),
            Shared,
            Every,
        }
        let alternatives = match readable(access) {
            Some(Cond::Readable { owner, shared: true }) => {
                vec![Readable::Own(owner), Readable::Shared]
            }
            Some(Cond::Readable { owner, .. }) => vec![Readable::Own(owner)],
            _ => vec![Readable::Every],
        };
        let probes: Vec<String> = alternatives
            .into_iter()
            .map(|alternative| {
                let mut probe = String::from("m.scope = s.scope");
                match alternative {
                    Readable::Own(owner) => {
                        let p = w.bind(Bound::Text(owner));
                        probe.push_str(&format!(" AND {}", owned_by(&p)));
                    }
                    Readable::Shared => probe.push_str(&format!(" AND {SHARED_BY_AN_OWNER}")),
                    Readable::Every => {}
                }
                for c in filtered(filter) {
                    probe.push_str(&format!(" AND ({})", c.sql(&mut w)));
                }
                format!("EXISTS (SELECT 1 FROM memories m WHERE {probe})")
            })
            .collect();
        let l = w.bind(Bound::Int(limit as i64));
        let sql = format!(
            "WITH RECURSIVE s(scope) AS (
                SELECT (SELECT scope FROM memories ORDER BY scope LIMIT 1)
                UNION ALL
                SELECT (SELECT n.scope FROM memories n WHERE n.scope > s.scope
                        ORDER BY n.scope LIMIT 1)
                FROM s WHERE s.scope IS NOT NULL
             )
             SELECT s.scope FROM s
             WHERE s.scope IS NOT NULL AND ({})
             ORDER BY s.scope LIMIT {l}",
            probes.join(" OR ")
        );
        (w, sql)
    }

    /// SPEC Authentication 4: own + shared when authenticated, own (ownerless) when
    /// anonymous; a NULL owner (legacy record, no owner key) never matches.
    pub(crate) fn access(&mut self, a: &Access) {
        self.conditions(readable(a));
    }

    /// The records `a` may change ([`writable`]).
    pub(crate) fn owned(&mut self, a: &Access) {
        self.conditions(writable(a));
    }

    /// The hard pre-filters.
    pub(crate) fn filter(&mut self, f: &Filter) {
        self.conditions(filtered(f));
    }

    /// The recall gate.
    pub(crate) fn gate(&mut self, g: Gate) {
        self.conditions(gate(g));
    }

    /// Keyset paging: only the rows strictly after `(created_at, id)` in `order`.
    pub(crate) fn past(&mut self, order: Order, created_at: Timestamp, id: &RecordId) {
        let op = match order {
            Order::Recent => '<',
            Order::Oldest => '>',
        };
        let t = created_at.as_micros();
        let (a, b) = (self.bind(Bound::Int(t)), self.bind(Bound::Int(t)));
        let id = self.bind(Bound::Text(id.to_string()));
        self.push(&format!("m.created_at {op} {a} OR (m.created_at = {b} AND m.id {op} {id})"));
    }

    pub(crate) fn conditions(&mut self, conds: impl IntoIterator<Item = Cond>) {
        for c in conds {
            let sql = c.sql(self);
            self.push(&sql);
        }
    }
}

/// One condition on a record; a predicate is their conjunction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cond {
    /// Owned by `owner`, or shared when `shared`; a record with no owner never passes.
    Readable {
        owner: String,
        shared: bool,
    },
    Scope(String),
    /// Carries every one of these tags (sorted, distinct, never empty).
    Tags(Vec<String>),
    /// In one of these categories; empty: nothing passes.
    CategoryIn(Vec<Category>),
    CategoryNotIn(Vec<Category>),
    /// `created_at >= micros`.
    CreatedFrom(i64),
    /// `created_at < micros`.
    CreatedBefore(i64),
    /// Has a validity window (`not_before` or `not_after`).
    Windowed,
    /// Neither archived nor superseded.
    Current,
    Kind(DiscoveryKind),
    /// The recall gate at `now` (whole seconds; SPEC "Record states").
    State(StateAt),
    /// In any of these states (never empty): a purge's classes.
    AnyState(Vec<StateAt>),
}

/// A state the recall gate selects at a time in whole seconds; mirrors
/// `spine_core::derive_states` (a half-open window, expired suppressing scheduled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateAt {
    Active(i64),
    Scheduled(i64),
    Expired(i64),
    ScheduledOrExpired(i64),
    Archived,
    Superseded,
}

/// The conditions of a read by `access` through `filter` (no gate).
pub(crate) fn conditions(access: &Access, f: &Filter) -> Vec<Cond> {
    readable(access).into_iter().chain(filtered(f)).collect()
}

/// What `access` may read (SPEC Authentication 4): own + shared when authenticated, own
/// (ownerless) when anonymous; `None` for the operator, who reads every owner's records.
pub(crate) fn readable(access: &Access) -> Option<Cond> {
    (!access.every_owner)
        .then(|| Cond::Readable { owner: access.owner.clone(), shared: access.include_shared })
}

/// What `access` may change (SPEC Authentication 4): its own records only, shared or not;
/// `None` for the operator, who changes every owner's records.
pub(crate) fn writable(access: &Access) -> Option<Cond> {
    (!access.every_owner).then(|| Cond::Readable { owner: access.owner.clone(), shared: false })
}

/// SQL: [`writable`] for a statement prepared once and run for many rows, with the owner
/// bound at the placeholder `p` whoever writes. For the operator the owner is bound but not
/// compared (`p IS NOT NULL`: every access has an owner string), so the statement takes the
/// same parameters either way.
pub(crate) fn writable_at(access: &Access, p: &str) -> String {
    if access.every_owner { format!("{p} IS NOT NULL") } else { owned_by(p) }
}

/// SQL: the record belongs to the owner at placeholder `p`; a record with no owner belongs
/// to nobody.
fn owned_by(p: &str) -> String {
    format!("m.owner IS NOT NULL AND m.owner = {p}")
}

/// SQL: the record is shared (by an owner: a record with no owner is nobody's to share).
const SHARED_BY_AN_OWNER: &str = "m.owner IS NOT NULL AND m.visibility = 'shared'";

/// The hard pre-filters of `f`.
pub(crate) fn filtered(f: &Filter) -> Vec<Cond> {
    let mut c = Vec::new();
    if let ScopeFilter::One(scope) = &f.scope {
        c.push(Cond::Scope(scope.as_str().to_owned()));
    }
    let mut tags = f.tags_all.clone();
    tags.sort();
    tags.dedup();
    if !tags.is_empty() {
        c.push(Cond::Tags(tags));
    }
    if let Some(any) = &f.categories_any {
        c.push(Cond::CategoryIn(any.clone()));
    }
    if !f.categories_none.is_empty() {
        c.push(Cond::CategoryNotIn(f.categories_none.clone()));
    }
    if let Some(t) = f.created_after {
        c.push(Cond::CreatedFrom(t.as_micros()));
    }
    if let Some(t) = f.created_before {
        c.push(Cond::CreatedBefore(t.as_micros()));
    }
    if f.windowed_only {
        c.push(Cond::Windowed);
    }
    if f.exclude_archived_superseded {
        c.push(Cond::Current);
    }
    if let Some(kind) = f.kind {
        c.push(Cond::Kind(kind));
    }
    c
}

/// The recall gate as a condition; `None` for [`Gate::Off`].
pub(crate) fn gate(g: Gate) -> Option<Cond> {
    let s = |t: Timestamp| t.to_epoch_seconds().as_secs();
    Some(Cond::State(match g {
        Gate::Off => return None,
        Gate::ActiveAt(t) => StateAt::Active(s(t)),
        Gate::ScheduledAt(t) => StateAt::Scheduled(s(t)),
        Gate::ExpiredAt(t) => StateAt::Expired(s(t)),
        Gate::ScheduledOrExpiredAt(t) => StateAt::ScheduledOrExpired(s(t)),
        Gate::Archived => StateAt::Archived,
        Gate::Superseded => StateAt::Superseded,
    }))
}

impl Cond {
    /// The condition in `d`'s SQL over the row alias `m`, binding its values in the order
    /// their placeholders appear.
    pub(crate) fn sql(&self, d: &mut impl Dialect) -> String {
        match self {
            Cond::Readable { owner, shared } => {
                let p = d.bind(Bound::Text(owner.clone()));
                if *shared {
                    format!("m.owner IS NOT NULL AND (m.owner = {p} OR m.visibility = 'shared')")
                } else {
                    owned_by(&p)
                }
            }
            Cond::Scope(scope) => format!("m.scope = {}", d.bind(Bound::Text(scope.clone()))),
            Cond::Tags(tags) => d.has_tags(tags),
            Cond::CategoryIn(any) if any.is_empty() => "1 = 0".into(),
            Cond::CategoryIn(any) => d.category_in(any),
            Cond::CategoryNotIn(none) => format!("NOT ({})", d.category_in(none)),
            Cond::CreatedFrom(t) => format!("m.created_at >= {}", d.bind(Bound::Int(*t))),
            Cond::CreatedBefore(t) => format!("m.created_at < {}", d.bind(Bound::Int(*t))),
            Cond::Windowed => "m.not_before IS NOT NULL OR m.not_after IS NOT NULL".into(),
            Cond::Current => "m.archived_at IS NULL AND m.superseded_by IS NULL".into(),
            Cond::Kind(kind) => {
                let p = d.bind(Bound::Text(kind.as_str().to_owned()));
                format!("{} = {p}", d.body_text("kind"))
            }
            Cond::State(state) => state.sql(d),
            Cond::AnyState(states) => {
                let any: Vec<String> = states.iter().map(|s| format!("({})", s.sql(d))).collect();
                any.join(" OR ")
            }
        }
    }
}

impl StateAt {
    fn sql(self, d: &mut impl Dialect) -> String {
        let mut now = |t: i64| d.bind(Bound::Int(t));
        match self {
            StateAt::Active(t) => {
                let (a, b) = (now(t), now(t));
                format!(
                    "m.archived_at IS NULL AND m.superseded_by IS NULL \
                     AND (m.not_after IS NULL OR m.not_after > {a}) \
                     AND (m.not_before IS NULL OR m.not_before <= {b})"
                )
            }
            StateAt::Scheduled(t) => {
                let (a, b) = (now(t), now(t));
                format!(
                    "(m.not_after IS NULL OR m.not_after > {a}) \
                     AND m.not_before IS NOT NULL AND m.not_before > {b}"
                )
            }
            StateAt::Expired(t) => format!("m.not_after IS NOT NULL AND m.not_after <= {}", now(t)),
            StateAt::ScheduledOrExpired(t) => {
                let (a, b, c) = (now(t), now(t), now(t));
                format!(
                    "(m.not_after IS NOT NULL AND m.not_after <= {a}) OR \
                     ((m.not_after IS NULL OR m.not_after > {b}) \
                      AND m.not_before IS NOT NULL AND m.not_before > {c})"
                )
            }
            StateAt::Archived => "m.archived_at IS NOT NULL".into(),
            StateAt::Superseded => "m.superseded_by IS NOT NULL".into(),
        }
    }
}

#[cfg(test)]
mod tests;
