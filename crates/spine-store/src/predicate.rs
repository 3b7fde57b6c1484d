//! Which records a read sees — the owner predicate (SPEC Authentication 4), the hard
//! pre-filters and the recall gate — written once, as a list of conditions, and rendered
//! per engine: as SQL through a [`Dialect`] (`sqlite/query.rs`, `postgres/query.rs`) and
//! as interned comparisons by the SQLite engine's in-memory index (`sqlite/index`). The
//! parity test (`tests/index.rs`) holds the three renderings together.
//!
//! Adding a filterable field: a [`Cond`] variant, its line in [`conditions`], its SQL in
//! [`Cond::sql`] and its comparison in the index's `compile`/`passes`.

use spine_core::{Category, DiscoveryKind, Timestamp};

use crate::{Access, Filter, Gate, ScopeFilter};

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
    /// The expression of a record's discovery kind.
    fn kind(&self) -> &'static str;
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
                    format!("m.owner IS NOT NULL AND m.owner = {p}")
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
                format!("{} = {p}", d.kind())
            }
            Cond::State(state) => state.sql(d),
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
mod tests {
    use super::*;
    use spine_core::Caller;

    /// A dialect that spells placeholders `:n` and lists, to read the rendering.
    #[derive(Default)]
    struct Plain(Vec<Bound>);

    impl Dialect for Plain {
        fn bind(&mut self, v: Bound) -> String {
            self.0.push(v);
            format!(":{}", self.0.len())
        }
        fn category_in(&mut self, categories: &[Category]) -> String {
            let names: Vec<&str> = categories.iter().map(|c| c.as_str()).collect();
            format!("m.category IN [{}]", names.join(","))
        }
        fn has_tags(&mut self, tags: &[String]) -> String {
            format!("tags ⊇ [{}]", tags.join(","))
        }
        fn kind(&self) -> &'static str {
            "m.kind"
        }
    }

    #[test]
    fn a_filter_becomes_its_conditions_in_order() {
        let mut f = Filter::new(ScopeFilter::All);
        f.tags_all = vec!["ui".into(), "db".into(), "ui".into()];
        f.categories_any = Filter::categories_named(&["gotcha".into(), "nope".into()]);
        f.kind = Some(DiscoveryKind::Map);
        let alice = Access::read(&Caller::authenticated("alice", "alice"));
        let c = conditions(&alice, &f);
        assert_eq!(
            c,
            vec![
                Cond::Readable { owner: "alice".into(), shared: true },
                Cond::Tags(vec!["db".into(), "ui".into()]),
                Cond::CategoryIn(vec![Category::Gotcha]),
                Cond::Kind(DiscoveryKind::Map),
            ]
        );
        // The operator reads every owner's records: no owner condition at all.
        assert!(conditions(&Access::operator(), &Filter::new(ScopeFilter::All)).is_empty());
        // Only unknown categories: nothing passes.
        let mut d = Plain::default();
        assert_eq!(Cond::CategoryIn(vec![]).sql(&mut d), "1 = 0");
    }

    #[test]
    fn placeholders_are_bound_in_the_order_they_appear() {
        let mut d = Plain::default();
        let sql = gate(Gate::ScheduledOrExpiredAt(Timestamp::from_micros(7_000_000)))
            .unwrap()
            .sql(&mut d);
        assert!(sql.starts_with("(m.not_after IS NOT NULL AND m.not_after <= :1) OR"), "{sql}");
        assert_eq!(d.0, vec![Bound::Int(7), Bound::Int(7), Bound::Int(7)]);
        assert_eq!(gate(Gate::Off), None);
    }
}
