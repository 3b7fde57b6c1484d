//! The operator use cases in-process, on a real SQLite store: the prune cut-off, the purge
//! selection and chain rule, consolidation, archive / restore outcomes, migrate, export and
//! import ([`transfer`], [`import_and_migrate`]), the summarize sweep ([`summarize`], and
//! with a chat model [`chat`]), re-embedding ([`reindex`]), the review commands on either
//! backend ([`review`]) and import-notes ([`notes`]).
//!
//! One test binary for the crate; the binary's own tests drive each command once end to end
//! (flags, printing, exit codes).

mod chat;
mod import_and_migrate;
mod notes;
mod reindex;
mod review;
mod summarize;
mod transfer;

use std::time::Duration;

use spine_core::{
    Caller, Category, EpochSeconds, Memory, RecordId, Scope, ShortId, Source, Timestamp,
};
use spine_ops::review::{consolidate, purge, scan, set_archived};
use spine_ops::{Error, Silent, migrate, prune};
use spine_store::{Access, Embedding, PurgeClass, PurgeRefusal, SqliteStore, Store, TransferStore};

const SCOPE: &str = "acme:project:ops";
/// The instant the tests run at.
const NOW: i64 = 1_800_000_000;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_micros(secs * 1_000_000)
}

fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    (dir, store)
}

fn record(content: &str, created: i64) -> Memory {
    Memory::new(
        ShortId::mint(),
        content.into(),
        Scope::parse("scope", SCOPE).unwrap(),
        Source::UserSaid,
        Category::Decision,
        &Caller::authenticated("a", "alice"),
        at(created),
    )
}

fn put(store: &SqliteStore, m: &Memory, vector: &[f32]) {
    store.insert(&spine_store::Access::operator(), m, Embedding { model: "m", vector }).unwrap();
}

#[test]
fn prune_cuts_at_now_minus_the_grace_with_a_half_open_window() {
    let (_d, s) = store();
    let mut at_cutoff = record("expired exactly at the cut-off", 1);
    at_cutoff.not_after = Some(EpochSeconds::from_secs(NOW - 3600));
    let mut after_cutoff = record("expires a second after it", 1);
    after_cutoff.not_after = Some(EpochSeconds::from_secs(NOW - 3599));
    let live = record("no window", 1);
    for m in [&at_cutoff, &after_cutoff, &live] {
        put(&s, m, &[1.0]);
    }
    let grace = Duration::from_secs(3600);
    let preview = prune::prune(&s, false, grace, at(NOW), &mut Silent).unwrap();
    assert_eq!(preview.total, 1);
    assert_eq!(preview.records[0].id, at_cutoff.id.to_string());
    assert_eq!(s.count_records(None).unwrap(), 3, "a preview deletes nothing");
    let applied = prune::prune(&s, true, Duration::ZERO, at(NOW), &mut Silent).unwrap();
    assert_eq!(applied.total, 2, "without grace both expired records go");
    assert_eq!(s.count_records(None).unwrap(), 1);
}

#[test]
fn purge_selection_needs_a_class_or_a_scoped_filter() {
    let now = at(NOW);
    let refused = |req: purge::Request| match purge::criteria(req, now) {
        Err(Error::Invalid(m)) => m,
        other => panic!("expected Invalid, got {other:?}"),
    };
    assert!(refused(purge::Request::default()).contains("say what to purge"));
    let free = purge::Request { category: Some("decision".into()), ..Default::default() };
    assert!(refused(free.clone()).contains("--all-scopes"));
    let empty = purge::Request { scope: Some(" ".into()), ..free.clone() };
    assert!(refused(empty).contains("must not be empty"));
    let blank_tag =
        purge::Request { tags: vec![" ".into()], all_scopes: true, ..Default::default() };
    assert!(refused(blank_tag).contains("blank tag"));
    let ok = purge::criteria(purge::Request { all_scopes: true, ..free }, now).unwrap();
    assert_eq!(ok.category, Some(Category::Decision));
    let aged = purge::Request {
        classes: vec![PurgeClass::Archived],
        older_than: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    assert_eq!(purge::criteria(aged, now).unwrap().created_before, Some(at(NOW - 10)));
}

#[test]
fn purge_deletes_only_exported_records_and_never_a_head_whose_chain_stays() {
    let (_d, s) = store();
    let op = Access::operator();
    // old <- head (head supersedes old); both archived; a lone archived record.
    let mut old = record("old", 1);
    let mut head = record("head", 2);
    old.superseded_by = Some(head.id);
    head.supersedes = vec![old.id];
    let lone = record("lone", 3);
    for m in [&old, &head, &lone] {
        put(&s, m, &[1.0]);
    }
    s.set_archived(&op, &[old.id, head.id, lone.id], Some(EpochSeconds::from_secs(NOW - 5)))
        .unwrap();
    // Export the head and the lone record as they are now, not the old one.
    let exported = s.get_many(&[head.id, lone.id]).unwrap();
    s.mark_exported(&exported, "backup.jsonl", EpochSeconds::from_secs(NOW)).unwrap();

    let criteria = purge::criteria(
        purge::Request { classes: vec![PurgeClass::Archived], ..Default::default() },
        at(NOW),
    )
    .unwrap();
    let report = purge::purge(&s, &criteria, at(NOW), true, &mut Silent).unwrap();
    let eligible: Vec<RecordId> = report.eligible.iter().map(|c| c.id).collect();
    assert_eq!(eligible, vec![lone.id]);
    let why = |id: RecordId| {
        report.refused.iter().find(|r| r.candidate.id == id).unwrap().candidate.refused.clone()
    };
    assert_eq!(why(old.id), Some(PurgeRefusal::NotExported));
    assert_eq!(
        why(head.id),
        Some(PurgeRefusal::SupersedesRecordsThatStay { predecessors: vec![old.id] })
    );
    assert!(report.refused.iter().all(|r| !r.hint.is_empty()));
    assert_eq!(report.summary.deleted, 1);
    assert_eq!(s.count_records(None).unwrap(), 2, "old and head stay");
}

#[test]
fn consolidate_proposes_the_newest_near_copy_and_applies_links_both_ways() {
    let (_d, s) = store();
    let older = record("Use rustls for TLS.", 1);
    let newer = record("Use rustls for TLS!", 2);
    let other = record("Tabs, not spaces.", 3);
    put(&s, &older, &[1.0, 0.0, 0.01]);
    put(&s, &newer, &[1.0, 0.0, 0.0]);
    put(&s, &other, &[0.0, 1.0, 0.0]);
    let scope = Scope::parse("scope", SCOPE).unwrap();
    assert!(matches!(
        consolidate::consolidate(&s, None, 1.5, false, &mut Silent),
        Err(Error::Invalid(_))
    ));
    let preview = consolidate::consolidate(&s, Some(&scope), 0.95, false, &mut Silent).unwrap();
    assert_eq!(preview.summary.targets, 1);
    assert_eq!(preview.proposals[0].successor.id, newer.id);
    assert_eq!(preview.proposals[0].supersedes[0].record.id, older.id);
    assert_eq!(s.get_many(&[older.id]).unwrap()[0].superseded_by, None, "a preview writes nothing");
    let applied = consolidate::consolidate(&s, Some(&scope), 0.95, true, &mut Silent).unwrap();
    assert_eq!(applied.summary.applied, 1);
    let got = s.get_many(&[older.id, newer.id]).unwrap();
    assert_eq!(got[0].superseded_by, Some(newer.id));
    assert_eq!(got[1].supersedes, vec![older.id]);
    let again = consolidate::consolidate(&s, Some(&scope), 0.95, true, &mut Silent).unwrap();
    assert_eq!(again.summary.targets, 0, "a superseded record is no longer a candidate");
}

#[test]
fn archive_and_restore_report_one_outcome_per_id() {
    let (_d, s) = store();
    let a = record("a", 1);
    let mut b = record("b", 2);
    b.owner = Some("bob".into());
    put(&s, &a, &[1.0]);
    put(&s, &b, &[1.0]);
    let ids = vec![a.id.to_string(), b.short_id.to_string(), RecordId::mint().to_string()];
    let report = set_archived(&s, &Access::operator(), ids.clone(), true, at(NOW)).unwrap();
    let outcomes: Vec<&str> = report.results.iter().map(|r| r.outcome.as_str()).collect();
    assert_eq!(outcomes, ["archived", "archived", "not_found"]);
    let again = set_archived(&s, &Access::operator(), ids[..1].to_vec(), true, at(NOW)).unwrap();
    assert_eq!(again.results[0].outcome, spine_ops::review::Archival::AlreadyArchived);
    let restored = set_archived(&s, &Access::operator(), ids.clone(), false, at(NOW)).unwrap();
    let outcomes: Vec<&str> = restored.results.iter().map(|r| r.outcome.as_str()).collect();
    assert_eq!(outcomes, ["restored", "restored", "not_found"]);
    let json = serde_json::to_value(&restored.results[2]).unwrap();
    assert_eq!(json["outcome"], "not_found", "the JSON report keeps the names");
    assert!(matches!(
        set_archived(&s, &Access::operator(), vec!["nope!".into()], true, at(NOW)),
        Err(Error::Invalid(_))
    ));
    let many = vec![a.id.to_string(); spine_ops::review::MAX_IDS + 1];
    assert!(matches!(
        set_archived(&s, &Access::operator(), many, true, at(NOW)),
        Err(Error::Invalid(_))
    ));
    let counts = scan(&s, None, at(NOW)).unwrap();
    assert_eq!((counts.total.records, counts.total.archived), (2, 0));
}

#[test]
fn migrate_reports_a_current_store_as_current() {
    let (_d, s) = store();
    put(&s, &record("a", 1), &[1.0]);
    let report = migrate::migrate(&s, 10, &mut Silent).unwrap();
    assert_eq!((report.migrated, report.already_current), (0, 1));
    assert!(report.kept.is_empty());
}
