use super::*;
use spine_core::Caller;

/// A clause that spells placeholders `:n` and lists, to read the rendering.
type Plain = Clause<Bound>;

impl Dialect for Plain {
    fn bind(&mut self, v: Bound) -> String {
        self.params.push(v);
        format!(":{}", self.params.len())
    }
    fn category_in(&mut self, categories: &[Category]) -> String {
        let names: Vec<&str> = categories.iter().map(|c| c.as_str()).collect();
        format!("m.category IN [{}]", names.join(","))
    }
    fn has_tags(&mut self, tags: &[String]) -> String {
        format!("tags ⊇ [{}]", tags.join(","))
    }
    fn body_text(&self, field: &str) -> String {
        format!("m.body.{field}")
    }
    fn shares(&mut self, shared: Shared<'_>) -> String {
        match shared {
            Shared::Tags(tags) => format!("tags ∩ [{}]", tags.join(",")),
            Shared::Citations(c) => format!("{} citations", c.len()),
        }
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
    let sql =
        gate(Gate::ScheduledOrExpiredAt(Timestamp::from_micros(7_000_000))).unwrap().sql(&mut d);
    assert!(sql.starts_with("(m.not_after IS NOT NULL AND m.not_after <= :1) OR"), "{sql}");
    assert_eq!(d.params, vec![Bound::Int(7), Bound::Int(7), Bound::Int(7)]);
    assert_eq!(gate(Gate::Off), None);
}

#[test]
fn a_page_starts_strictly_after_the_last_row_of_the_previous_one() {
    let id = RecordId::mint();
    let mut w = Plain::default();
    w.past(Order::Recent, Timestamp::from_micros(5), &id);
    assert_eq!(w.sql, "1 = 1 AND (m.created_at < :1 OR (m.created_at = :2 AND m.id < :3))");
    assert_eq!(w.params, [Bound::Int(5), Bound::Int(5), Bound::Text(id.to_string())]);
    let mut w = Plain::default();
    w.past(Order::Oldest, Timestamp::from_micros(5), &id);
    assert!(w.sql.contains("m.created_at > :1 OR (m.created_at = :2 AND m.id > :3)"));
}

#[test]
fn any_state_passes_a_record_in_one_of_them() {
    let mut d = Plain::default();
    let sql = Cond::AnyState(vec![StateAt::Archived, StateAt::Expired(7)]).sql(&mut d);
    assert_eq!(
        sql,
        "(m.archived_at IS NOT NULL) OR (m.not_after IS NOT NULL AND m.not_after <= :1)"
    );
    assert_eq!(d.params, [Bound::Int(7)]);
}

#[test]
fn summarize_missing_picks_unsummarised_records_of_its_scope_and_time() {
    let scope = spine_core::Scope::parse("scope", "acme:project:api").unwrap();
    let which =
        MissingSummaries { scope: Some(scope), created_at_or_before: Timestamp::from_micros(9) };
    let w = Plain::missing_summaries(&which);
    assert_eq!(
        w.sql,
        "1 = 1 AND (m.scope = :1) AND (m.created_at <= :2) AND \
         (coalesce(m.body.summary, '') = '' AND coalesce(m.body.summary_source, '') <> 'client')"
    );
    assert_eq!(w.params, [Bound::Text("acme:project:api".into()), Bound::Int(9)]);
    let every = MissingSummaries { scope: None, ..which };
    assert!(Plain::missing_summaries(&every).sql.starts_with("1 = 1 AND (m.created_at <= :1)"));
}

/// The probes of a scope listing across scopes, in the order they appear.
fn probes(sql: &str) -> Vec<&str> {
    sql.split("EXISTS (SELECT 1 FROM memories m WHERE ")
        .skip(1)
        .map(|p| &p[..p.find(')').unwrap_or(p.len())])
        .collect()
}

#[test]
fn the_scope_listing_probes_the_read_rule_one_alternative_at_a_time_in_binding_order() {
    let alice = Caller::authenticated("alice", "alice");
    let mut f = Filter::new(ScopeFilter::All);
    f.created_after = Some(spine_core::Timestamp::from_micros(5_000_000));
    // Own records, then shared ones: each probe binds its own values where they appear
    // (SQLite's placeholders are positional), the limit last.
    let (w, sql) = Plain::scopes(&Access::read(&alice), &f, 7);
    assert_eq!(
        probes(&sql),
        [
            "m.scope = s.scope AND m.owner IS NOT NULL AND m.owner = :1 AND (m.created_at >= :2",
            "m.scope = s.scope AND m.owner IS NOT NULL AND m.visibility = 'shared' \
             AND (m.created_at >= :3",
        ]
    );
    assert!(sql.ends_with("LIMIT :4"), "{sql}");
    let from = Bound::Int(5_000_000);
    assert_eq!(w.params, [Bound::Text("alice".into()), from.clone(), from, Bound::Int(7)]);
    // Own records only: one probe.
    let (w, sql) = Plain::scopes(&Access::owned(&alice), &Filter::new(ScopeFilter::All), 3);
    assert_eq!(probes(&sql), ["m.scope = s.scope AND m.owner IS NOT NULL AND m.owner = :1"]);
    assert_eq!(w.params, [Bound::Text("alice".into()), Bound::Int(3)]);
    // The operator reads every record: the probe only asks that the scope has one.
    let (w, sql) = Plain::scopes(&Access::operator(), &Filter::new(ScopeFilter::All), 3);
    assert_eq!(probes(&sql), ["m.scope = s.scope"]);
    assert_eq!(w.params, [Bound::Int(3)]);
}

#[test]
fn operator_pages_walk_in_their_order_after_the_last_row() {
    let id = RecordId::mint();
    let which = MissingSummaries { scope: None, created_at_or_before: Timestamp::from_micros(9) };
    let (w, sql) = Plain::missing_summaries_page(&which, Some((Timestamp::from_micros(5), id)), 3);
    assert!(sql.starts_with("SELECT m.id, m.created_at, coalesce(m.body.content, '')"), "{sql}");
    assert!(
        sql.ends_with(
            "AND (m.created_at > :2 OR (m.created_at = :3 AND m.id > :4)) \
             ORDER BY m.created_at ASC, m.id ASC LIMIT :5"
        ),
        "{sql}"
    );
    assert_eq!(w.params[4], Bound::Int(3));
    let (w, sql) = Plain::expired_page(EpochSeconds::from_secs(7), 40, 2);
    assert!(sql.ends_with("AND m.rowid > :2 ORDER BY m.rowid LIMIT :3"), "{sql}");
    assert_eq!(w.params, [Bound::Int(7), Bound::Int(40), Bound::Int(2)]);
}

#[test]
fn nothing_shares_an_empty_set() {
    let alice = Access::read(&Caller::authenticated("alice", "alice"));
    let id = RecordId::mint();
    assert!(Plain::sharing(&alice, Gate::Off, &id, Shared::Tags(&[])).is_none());
    let tags = ["db".to_owned()];
    let w = Plain::sharing(&alice, Gate::Off, &id, Shared::Tags(&tags)).unwrap();
    assert!(w.sql.ends_with("AND (m.id <> :2) AND (tags ∩ [db])"), "{}", w.sql);
}

#[test]
fn state_counts_use_the_gates_conditions_bound_in_order() {
    let (w, sql) = Plain::state_counts(Some("acme:project:api"), Timestamp::from_micros(7_000_000));
    assert!(
        sql.starts_with(
            "SELECT m.scope, COUNT(*), SUM(CASE WHEN (m.archived_at IS NULL AND \
             m.superseded_by IS NULL AND (m.not_after IS NULL OR m.not_after > :1)"
        ),
        "{sql}"
    );
    assert!(sql.ends_with("WHERE 1 = 1 AND (m.scope = :6) GROUP BY m.scope ORDER BY m.scope"));
    let mut want = vec![Bound::Int(7); 5];
    want.push(Bound::Text("acme:project:api".into()));
    assert_eq!(w.params, want);
    let (w, sql) = Plain::state_counts(None, Timestamp::from_micros(7_000_000));
    assert!(sql.contains("WHERE 1 = 1 GROUP BY"), "{sql}");
    assert_eq!(w.params.len(), 5);
}
