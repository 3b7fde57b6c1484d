//! consolidate on both backends: groups, candidates, links applied or skipped; and two
//! PostgreSQL nodes linking the same targets at once.

use spine_core::{Category, EpochSeconds, Memory, RecordId, SCHEMA_VERSION, Visibility};
use spine_store::{Access, ConsolidationGroup, ConsolidationLink, ReviewStore, record_digest};

use super::{OTHER, SCOPE, T, V, at, backends, e, record, same, scope, two_nodes, verify_all};

#[test]
fn consolidation_groups_candidates_and_links_agree() {
    let backends = backends();
    let alice = |content: &str, created: i64| record(SCOPE, content, "alice", created);
    let (a1, a2, a3, a4) =
        (alice("a1", T - 30), alice("a2", T - 20), alice("a3", T - 10), alice("a4", T));
    let a5 = alice("a5", T); // same instant as a4: ordered by id
    let mut shared = alice("shared", T);
    shared.visibility = Visibility::Shared;
    let bob = record(SCOPE, "bob's", "bob", T);
    let other_model = alice("other model", T);
    let elsewhere = record(OTHER, "elsewhere", "alice", T);
    // Not compared: archived, superseded, windowed, a rule, no owner key.
    let mut archived = alice("archived", T);
    archived.archived_at = Some(EpochSeconds::from_secs(T));
    let mut superseded = alice("superseded", T);
    superseded.superseded_by = Some(a4.id);
    let mut windowed = alice("windowed", T);
    windowed.not_before = Some(EpochSeconds::from_secs(T - 1000));
    let mut rule = alice("rule", T);
    rule.category = Category::Rule;
    let mut legacy = alice("legacy", T);
    legacy.owner = None;
    for b in &backends {
        for m in [&a1, &a2, &a3, &a4, &a5, &shared, &bob, &elsewhere, &archived, &superseded]
            .into_iter()
            .chain([&windowed, &rule, &legacy])
        {
            b.put(m, e("m", V));
        }
        b.put(&other_model, e("n", V));
    }
    let group =
        |scope: &str, owner: &str, visibility: &str, model: &str, records| ConsolidationGroup {
            scope: scope.into(),
            owner: owner.into(),
            visibility: visibility.into(),
            model: model.into(),
            records,
        };
    let all = same(&backends, |b| b.store().consolidation_groups(None).unwrap());
    assert_eq!(
        all,
        vec![
            group(OTHER, "alice", "", "m", 1),
            group(SCOPE, "alice", "", "m", 5),
            group(SCOPE, "alice", "", "n", 1),
            group(SCOPE, "alice", "shared", "m", 1),
            group(SCOPE, "bob", "", "m", 1),
        ]
    );
    let groups = same(&backends, |b| b.store().consolidation_groups(Some(&scope())).unwrap());
    assert_eq!(groups, all[1..]);
    let candidates = same(&backends, |b| b.store().consolidation_candidates(&groups[0]).unwrap());
    let mut last_two = [a4.id, a5.id];
    last_two.sort();
    let order: Vec<RecordId> = candidates.iter().map(|c| c.record.id).collect();
    assert_eq!(order, [a1.id, a2.id, a3.id, last_two[0], last_two[1]]);
    for c in &candidates {
        assert_eq!(c.vector, V);
        assert_eq!(c.digest, record_digest(&c.record).unwrap());
    }

    let link = |t: &Memory, s: &Memory| ConsolidationLink {
        target: t.id,
        target_digest: record_digest(t).unwrap(),
        successor: s.id,
        successor_digest: record_digest(s).unwrap(),
    };
    let mut gone = alice("never stored", T);
    gone.id = RecordId::mint();
    let links = [
        link(&a1, &a4),
        link(&a2, &a4),
        link(&a1, &a3),   // a1 already got a successor above
        link(&a3, &a5),   // a5 is edited below
        link(&rule, &a3), // rules are immutable
        link(&gone, &a3), // no such record
        link(&shared, &shared),
    ];
    let outcomes = same(&backends, |b| {
        let op = Access::operator();
        b.store().touch(&a2.id, at(T + 1)).unwrap(); // a read is not a change
        let mut edited = a5.clone();
        edited.tags = vec!["edited".into()];
        assert!(b.store().replace(&op, &edited, None).unwrap());
        let out = b.store().apply_consolidation(&links).unwrap();
        let after = b.store().get_many(&[a1.id, a2.id, a3.id, a4.id, a5.id, shared.id]).unwrap();
        (out, after)
    });
    let (out, after) = outcomes;
    let reason = |i: usize| out[i].clone().unwrap_or_else(|| panic!("link {i} applied: {out:?}"));
    assert_eq!(out[0], None);
    assert_eq!(out[1], None);
    assert_eq!(reason(2), format!("{} already has a successor", a1.id));
    assert_eq!(reason(3), format!("{} changed since it was compared", a5.id));
    assert_eq!(reason(4), format!("{} is a rule (rules are immutable)", rule.id));
    assert_eq!(reason(5), format!("{} no longer exists", gone.id));
    assert_eq!(reason(6), format!("{} already has a successor", shared.id));
    assert_eq!(after[0].superseded_by, Some(a4.id));
    assert_eq!(after[1].superseded_by, Some(a4.id));
    assert_eq!(after[1].access_count, 1);
    assert_eq!((after[2].superseded_by, &after[2].supersedes), (None, &vec![]));
    assert_eq!(after[3].supersedes, vec![a1.id, a2.id]);
    assert_eq!((after[4].superseded_by, &after[4].supersedes), (None, &vec![]));
    assert_eq!((after[5].superseded_by, &after[5].supersedes), (None, &vec![]));
    assert!(after[..4].iter().all(|m| m.schema_version == SCHEMA_VERSION));

    // The links hold both ways: verify finds nothing wrong with them.
    let links_ok = same(&backends, |b| {
        let (_, found) = verify_all(b.store(), Some(&scope()), 100);
        found
            .into_iter()
            .filter(|v| [a1.id, a2.id, a4.id].iter().any(|id| v.id == id.to_string()))
            .collect::<Vec<_>>()
    });
    assert!(links_ok.is_empty(), "{links_ok:?}");
    let groups = same(&backends, |b| b.store().consolidation_groups(Some(&scope())).unwrap());
    assert_eq!(groups[0].records, 3, "a1 and a2 are superseded now");
}

#[test]
fn racing_nodes_link_each_target_once() {
    let Some((a, b)) = two_nodes() else { return };
    let r = |content: String| record(SCOPE, &content, "alice", T);
    let n = 25;
    let targets: Vec<Memory> = (0..n).map(|i| r(format!("target {i}"))).collect();
    let (mine, theirs): (Vec<Memory>, Vec<Memory>) =
        (0..n).map(|i| (r(format!("a {i}")), r(format!("b {i}")))).unzip();
    for m in targets.iter().chain(&mine).chain(&theirs) {
        a.put(m, e("m", V));
    }
    let links = |successors: &[Memory]| -> Vec<ConsolidationLink> {
        targets
            .iter()
            .zip(successors)
            .map(|(t, s)| ConsolidationLink {
                target: t.id,
                target_digest: record_digest(t).unwrap(),
                successor: s.id,
                successor_digest: record_digest(s).unwrap(),
            })
            .collect()
    };
    let (to_mine, to_theirs) = (links(&mine), links(&theirs));
    let (one, two) = std::thread::scope(|s| {
        let one = s.spawn(|| a.store().apply_consolidation(&to_mine).unwrap());
        let two = s.spawn(|| b.apply_consolidation(&to_theirs).unwrap());
        (one.join().unwrap(), two.join().unwrap())
    });
    for i in 0..n {
        // Exactly one node linked each target; the other saw it changed.
        let (applied, skipped) = match (&one[i], &two[i]) {
            (None, Some(why)) => (&mine[i], why),
            (Some(why), None) => (&theirs[i], why),
            other => panic!("target {i}: {other:?}"),
        };
        assert_eq!(*skipped, format!("{} changed since it was compared", targets[i].id));
        let got = a.store().get_many(&[targets[i].id, applied.id]).unwrap();
        assert_eq!(got[0].superseded_by, Some(applied.id));
        assert_eq!(got[1].supersedes, vec![targets[i].id]);
    }
    let (_, found) = verify_all(a.store(), None, 1000);
    assert!(found.is_empty(), "{found:?}");
}
