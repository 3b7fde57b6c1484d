//! purge on both backends: plans behind the export gate and the chain rule, applying
//! them after changes; and two PostgreSQL nodes purging the same records at once.

use spine_core::{Category, EpochSeconds, Memory, RecordId, State, Timestamp};
use spine_store::{Access, PurgeCandidate, PurgeClass, PurgeCriteria, PurgeRefusal, ReviewStore};

use super::{Backend, OTHER, SCOPE, T, V, at, backends, e, record, same, scope, two_nodes};

fn criteria(classes: &[PurgeClass]) -> PurgeCriteria {
    PurgeCriteria {
        classes: classes.to_vec(),
        scope: Some(scope()),
        category: None,
        tags_all: vec![],
        created_before: None,
    }
}

/// The verdicts of a plan by record, and the progress reported while gate-checking.
fn plan(b: &Backend, c: &PurgeCriteria, now: Timestamp) -> (Vec<PurgeCandidate>, Vec<(u64, u64)>) {
    let mut progress = Vec::new();
    let plan = b.store().purge_plan(c, now, &mut |n, total| progress.push((n, total))).unwrap();
    (plan, progress)
}

#[test]
fn purge_plan_and_apply_agree_behind_the_export_gate() {
    let backends = backends();
    let r = |content: &str, created: i64| record(SCOPE, content, "", created);
    let archive = |mut m: Memory| {
        m.archived_at = Some(EpochSeconds::from_secs(T - 50));
        m
    };
    let exported = archive(r("exported", T - 100));
    let never_exported = archive(r("never exported", T - 100));
    let edited = archive(r("edited after export", T - 100));
    // A chain whose old record stays (never exported): its head is held back.
    let (mut p, mut s) = (archive(r("p", T - 100)), archive(r("s", T - 90)));
    p.superseded_by = Some(s.id);
    s.supersedes = vec![p.id];
    // A chain whose old record is superseded but not archived.
    let (mut p2, mut s2) = (r("p2", T - 100), archive(r("s2", T - 90)));
    p2.superseded_by = Some(s2.id);
    s2.supersedes = vec![p2.id];
    // Expired exactly at now, and one second short of it.
    let mut expired = r("expired", T - 100);
    expired.not_after = Some(EpochSeconds::from_secs(T));
    expired.tags = vec!["t1".into(), "t2".into()];
    let mut not_yet = r("not yet", T - 100);
    not_yet.not_after = Some(EpochSeconds::from_secs(T + 1));
    not_yet.tags = vec!["t1".into()];
    let mut rule = r("a rule, newer", T);
    rule.category = Category::Rule;
    rule.tags = vec!["t1".into()];
    let elsewhere = archive(record(OTHER, "elsewhere", "", T - 100));
    let all = [&exported, &never_exported, &edited, &p, &s, &p2, &s2, &expired, &not_yet, &rule];
    for b in &backends {
        for m in all.into_iter().chain([&elsewhere]) {
            b.put(m, e("m", V));
        }
        let marked: Vec<Memory> =
            [&exported, &edited, &s, &p2, &s2, &expired, &not_yet, &rule, &elsewhere]
                .into_iter()
                .cloned()
                .collect();
        b.mark_exported(&marked, "x.jsonl");
        let mut changed = edited.clone();
        changed.content = "edited".into();
        assert!(b.store().replace(&Access::operator(), &changed, None).unwrap());
    }
    let now = at(T);
    let verdicts = |plan: &[PurgeCandidate]| -> Vec<(RecordId, Option<PurgeRefusal>)> {
        plan.iter().map(|c| (c.id, c.refused.clone())).collect()
    };
    let stay = |ids: &[&Memory]| PurgeRefusal::SupersedesRecordsThatStay {
        predecessors: ids.iter().map(|m| m.id).collect(),
    };

    // Archived: the edited record and the never exported one fail the gate; s supersedes a
    // record that stays (p), s2 too (p2 is not archived, so not selected).
    let (archived, progress) =
        same(&backends, |b| plan(b, &criteria(&[PurgeClass::Archived]), now));
    assert_eq!(
        verdicts(&archived),
        vec![
            (exported.id, None),
            (never_exported.id, Some(PurgeRefusal::NotExported)),
            (edited.id, Some(PurgeRefusal::ChangedSinceExport)),
            (p.id, Some(PurgeRefusal::NotExported)),
            (s.id, Some(stay(&[&p]))),
            (s2.id, Some(stay(&[&p2]))),
        ]
    );
    assert_eq!(progress, vec![(6, 6)]);
    assert_eq!(archived[0].exported_to.as_deref(), Some("x.jsonl"));
    assert_eq!(archived[1].exported_to, None);
    assert_eq!(archived[0].states, vec![State::Archived]);
    assert_eq!(archived[0].scope, SCOPE);
    assert_eq!(archived[0].category, "decision");
    assert_eq!(archived[0].created_at, at(T - 100));

    // Any of three classes: p2 is selected too, so its chain goes whole.
    let classes = [PurgeClass::Archived, PurgeClass::Superseded, PurgeClass::Expired];
    let (wide, _) = same(&backends, |b| plan(b, &criteria(&classes), now));
    assert_eq!(
        verdicts(&wide),
        vec![
            (exported.id, None),
            (never_exported.id, Some(PurgeRefusal::NotExported)),
            (edited.id, Some(PurgeRefusal::ChangedSinceExport)),
            (p.id, Some(PurgeRefusal::NotExported)),
            (s.id, Some(stay(&[&p]))),
            (p2.id, None),
            (s2.id, None),
            (expired.id, None),
        ]
    );
    assert_eq!(wide[6].states, vec![State::Archived]);
    assert_eq!(wide[7].states, vec![State::Expired]);

    // Free-form: any state, narrowed by tags, category and creation time.
    let free = PurgeCriteria {
        classes: vec![],
        scope: None,
        category: Some(Category::Decision),
        tags_all: vec!["t1".into()],
        created_before: Some(at(T)),
    };
    let (narrow, _) = same(&backends, |b| plan(b, &free, now));
    assert_eq!(verdicts(&narrow), vec![(expired.id, None), (not_yet.id, None)]);
    let (none, progress) = same(&backends, |b| {
        plan(b, &PurgeCriteria { tags_all: vec!["t1".into(), "t3".into()], ..free.clone() }, now)
    });
    assert!(none.is_empty() && progress.is_empty());

    // Apply the wide plan's eligible records after changes: exported restored (no longer
    // selected), expired edited (gate closed), p2 listed twice.
    let mut listed: Vec<RecordId> =
        wide.iter().filter(|c| c.refused.is_none()).map(|c| c.id).collect();
    listed.push(p2.id);
    listed.push(RecordId::mint());
    let (outcomes, left) = same(&backends, |b| {
        let op = Access::operator();
        assert_eq!(b.store().set_archived(&op, &[exported.id], None).unwrap(), vec![true]);
        let mut changed = expired.clone();
        changed.content = "edited".into();
        assert!(b.store().replace(&op, &changed, None).unwrap());
        let out = b.store().purge_apply(&listed, &criteria(&classes), now).unwrap();
        let ids: Vec<RecordId> = all.iter().map(|m| m.id).collect();
        let left: Vec<RecordId> = b.store().get_many(&ids).unwrap().iter().map(|m| m.id).collect();
        (out, left)
    });
    let result: Vec<(RecordId, bool, Option<&str>)> =
        outcomes.iter().map(|o| (o.id, o.deleted, o.skipped.as_deref())).collect();
    assert_eq!(
        result,
        vec![
            (exported.id, false, Some("gone, or no longer matches the selection")),
            (p2.id, true, None),
            (s2.id, true, None),
            (expired.id, false, Some("changed since it was exported")),
            (p2.id, false, Some("listed twice")),
            (listed[5], false, Some("gone, or no longer matches the selection")),
        ]
    );
    let mut want_left: Vec<RecordId> = all.iter().map(|m| m.id).collect();
    want_left.retain(|id| *id != p2.id && *id != s2.id);
    assert_eq!(left, want_left);

    // The chain rule inside the delete transaction: s listed alone is held back by p.
    let out = same(&backends, |b| {
        b.mark_exported(&[p.clone()], "y.jsonl");
        let held = b.store().purge_apply(&[s.id], &criteria(&[PurgeClass::Archived]), now).unwrap();
        let both = b.store().purge_apply(&[s.id, p.id], &criteria(&[PurgeClass::Archived]), now);
        (held, both.unwrap())
    });
    assert_eq!(out.0[0].skipped, Some(format!("supersedes records that stay: {}", p.id)));
    assert!(out.1.iter().all(|o| o.deleted), "{:?}", out.1);
}

#[test]
fn racing_nodes_delete_each_record_once() {
    let Some((a, b)) = two_nodes() else { return };
    let r = |content: String| record(SCOPE, &content, "alice", T);
    let n = 25;
    // Two purges of the same records at once: each record is deleted once.
    let mut doomed: Vec<Memory> = (0..n).map(|i| r(format!("doomed {i}"))).collect();
    for m in &mut doomed {
        m.archived_at = Some(EpochSeconds::from_secs(T - 1));
        a.put(m, e("m", V));
    }
    a.mark_exported(&doomed, "x.jsonl");
    let listed: Vec<RecordId> = doomed.iter().map(|m| m.id).collect();
    let mut reversed = listed.clone();
    reversed.reverse();
    let c = criteria(&[PurgeClass::Archived]);
    let (one, two) = std::thread::scope(|s| {
        let one = s.spawn(|| a.store().purge_apply(&listed, &c, at(T)).unwrap());
        let two = s.spawn(|| b.purge_apply(&reversed, &c, at(T)).unwrap());
        (one.join().unwrap(), two.join().unwrap())
    });
    for (i, first) in one.iter().enumerate() {
        let second = &two[n - 1 - i];
        assert_eq!((first.id, second.id), (listed[i], listed[i]));
        assert!(first.deleted != second.deleted, "{first:?} {second:?}");
        let loser = if first.deleted { second } else { first };
        assert_eq!(loser.skipped.as_deref(), Some("gone, or no longer matches the selection"));
    }
    assert!(a.store().get_many(&listed).unwrap().is_empty());
}
