//! `Store::adjacent` (search's neighbour step) on SQLite and, when a server is configured,
//! PostgreSQL: the records stored next to an anchor in its scope, as the caller may read them.

use spine_core::{Caller, Memory, Timestamp, Visibility};
use spine_store::{Access, Filter, Gate, ScopeFilter, Selection, Store};
use spine_testkit::records::record;

/// One scope of alice's records at seconds 1..=9, with records the caller must not get as
/// neighbours in between: bob's private record (4), a record of another scope (5), an
/// archived record (6). Turn 8 is shared, which changes nothing for its owner.
fn fixture() -> Vec<Memory> {
    let mut out = Vec::new();
    for i in 1..=9 {
        let (scope, owner) = match i {
            4 => ("acme:project:chat", "bob"),
            5 => ("acme:project:other", "alice"),
            _ => ("acme:project:chat", "alice"),
        };
        let mut m = record(scope, &format!("turn {i}"), owner, 1_800_000_000 + i);
        if i == 6 {
            m.archived_at = Some(spine_core::EpochSeconds::from_secs(1_800_000_100));
        }
        if i == 8 {
            m.visibility = Visibility::Shared;
        }
        out.push(m);
    }
    out
}

fn check(store: &dyn Store, records: &[Memory]) {
    let alice = Caller::authenticated("alice", "alice");
    let access = Access::read(&alice);
    let now = Timestamp::from_micros(1_900_000_000_000_000);
    let filter = Filter::new(ScopeFilter::All);
    let sel = Selection { access: &access, filter: &filter, gate: Gate::ActiveAt(now) };
    let anchor = &records[6]; // turn 7
    let contents = |radius| {
        let mut got: Vec<String> = store
            .adjacent(sel, &[anchor], "m", radius, &|_| false)
            .unwrap()
            .into_iter()
            .inspect(|a| assert_eq!(a.anchor, anchor.id))
            .map(|a| a.record.unwrap().0.into_memory().unwrap().content)
            .collect();
        got.sort();
        got
    };
    // Before turn 7: 6 is archived, 5 in another scope, 4 bob's: the nearest are 3 and 2.
    assert_eq!(contents(2), vec!["turn 2", "turn 3", "turn 8", "turn 9"]);
    assert_eq!(contents(1), vec!["turn 3", "turn 8"]);
    assert!(contents(0).is_empty());
    // Vectors come with the records; a record the caller holds comes as its id alone.
    let turn_3 = records[2].id;
    let adj = store.adjacent(sel, &[anchor], "m", 1, &|id| *id == turn_3).unwrap();
    let ids: Vec<_> = adj.iter().map(|a| a.id).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&turn_3) && ids.contains(&records[7].id), "turns 3 and 8");
    for a in &adj {
        match &a.record {
            None => assert_eq!(a.id, turn_3),
            Some((m, vector)) => assert_eq!((m.memory().unwrap().id, vector.len()), (a.id, 2)),
        }
    }
    // Another model's vectors: nothing.
    assert!(store.adjacent(sel, &[anchor], "x", 2, &|_| false).unwrap().is_empty());
    // The filter applies: a window that ends at turn 8 leaves only 9 out after the anchor.
    let mut window = Filter::new(ScopeFilter::All);
    window.created_before = Some(Timestamp::from_micros((1_800_000_000 + 9) * 1_000_000));
    let after: Vec<String> = store
        .adjacent(Selection { filter: &window, ..sel }, &[anchor], "m", 2, &|_| false)
        .unwrap()
        .into_iter()
        .map(|a| a.record.unwrap().0.into_memory().unwrap().content)
        .filter(|c| c.as_str() > "turn 7")
        .collect();
    assert_eq!(after, vec!["turn 8"]);
}

#[test]
fn adjacent_records_are_the_callers_visible_neighbours_in_the_anchors_scope() {
    let records = fixture();
    crate::on_both_engines(&records, |store| check(store, &records));
}
