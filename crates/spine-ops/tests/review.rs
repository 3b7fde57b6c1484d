//! `spine-review` in-process, on SQLite or (with `SPINE_TEST_BACKEND=postgres`) a fresh
//! PostgreSQL database: scan's state counts, consolidation by owner and visibility, the
//! purge gate and selection, and archive / restore of any owner's record. The binary's
//! tests drive each command once end to end (flags, printing, exit codes).

use serde_json::{Value, json};
use spine_core::{Caller, Category, EpochSeconds, Memory, RecordId, Scope, Timestamp, Visibility};
use spine_ops::Silent;
use spine_ops::review::{consolidate, purge, scan, set_archived};
use spine_store::{Access, Embedding, OperatorStore, PurgeClass};
use spine_testkit::postgres::FreshDatabase;
use tempfile::TempDir;

use super::{NOW, at};

const SCOPE: &str = "review:project:spine";
const OTHER: &str = "review:project:other";
/// When every fixture record was created.
const T0: i64 = 1_700_000_000;

/// A fresh store of the backend `SPINE_TEST_BACKEND` selects (SQLite by default).
struct Backend {
    store: Box<dyn OperatorStore>,
    _dir: TempDir,
    /// Dropped last: the store's connections close before the database goes.
    _db: Option<FreshDatabase>,
}

fn on_postgres() -> bool {
    std::env::var("SPINE_TEST_BACKEND").as_deref() == Ok("postgres")
}

fn backend() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    if on_postgres() {
        let db = spine_testkit::postgres::fresh_database()
            .expect("SPINE_TEST_BACKEND=postgres needs SPINE_TEST_DATABASE_URL");
        let store = Box::new(spine_store::PgStore::connect(&db.url).unwrap());
        return Backend { store, _dir: dir, _db: Some(db) };
    }
    let store = Box::new(spine_store::SqliteStore::open(dir.path()).unwrap());
    Backend { store, _dir: dir, _db: None }
}

/// A record as `owner` would store it (empty owner: the anonymous bucket), created at T0.
fn record(scope: &str, content: &str, owner: &str) -> Memory {
    spine_testkit::records::record(scope, content, owner, T0)
}

/// A unit vector pointing somewhere of its own.
fn vector(seed: u64) -> Vec<f32> {
    spine_testkit::records::unit_vector(seed, 16)
}

fn insert(store: &dyn OperatorStore, m: &Memory, seed: u64) {
    store
        .insert(
            &spine_store::Access::operator(),
            m,
            Embedding { model: "m", vector: &vector(seed) },
        )
        .unwrap();
}

fn scope(s: &str) -> Scope {
    Scope::parse("scope", s).unwrap()
}

fn json(v: impl serde::Serialize) -> Value {
    serde_json::to_value(v).unwrap()
}

fn ids(v: &Value) -> Vec<String> {
    let mut out: Vec<String> =
        v.as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect();
    out.sort();
    out
}

fn sorted(ids: &[&Memory]) -> Vec<String> {
    let mut out: Vec<String> = ids.iter().map(|m| m.id.to_string()).collect();
    out.sort();
    out
}

#[test]
fn scan_counts_each_state_with_archived_and_expired_apart() {
    let b = backend();
    let store = &*b.store;
    let past = EpochSeconds::from_secs(NOW - 3600);
    let future = EpochSeconds::from_secs(NOW + 3600);
    let mut n = 0;
    let mut put = |scope: &str, edit: &dyn Fn(&mut Memory)| {
        n += 1;
        let mut m = record(scope, &format!("record {n}"), "");
        edit(&mut m);
        insert(store, &m, n);
    };
    put(SCOPE, &|_| {});
    put(SCOPE, &|_| {});
    put(SCOPE, &|m| m.archived_at = Some(past));
    put(SCOPE, &|m| m.not_after = Some(past));
    put(SCOPE, &|m| {
        m.archived_at = Some(past);
        m.not_after = Some(past);
    });
    put(SCOPE, &|m| m.superseded_by = Some(RecordId::mint()));
    put(SCOPE, &|m| m.not_before = Some(future));
    // Expired suppresses scheduled (an inverted window can only come from old data).
    put(SCOPE, &|m| {
        m.not_before = Some(future);
        m.not_after = Some(past);
    });
    put(OTHER, &|_| {});

    let one = json(scan(store, Some(&scope(SCOPE)), at(NOW)).unwrap());
    let expected = json!({"scope": SCOPE, "records": 8, "active": 2, "hidden": 6, "archived": 2,
        "superseded": 1, "expired": 3, "scheduled": 1});
    assert_eq!(one["scopes"], json!([expected]), "{one}");
    assert_eq!(one["total"]["records"], 8);
    assert_eq!(one["scope"], SCOPE);

    let all = json(scan(store, None, at(NOW)).unwrap());
    assert_eq!(all["scopes"].as_array().unwrap().len(), 2, "{all}");
    assert_eq!(all["scopes"][0]["scope"], OTHER);
    assert_eq!(all["scopes"][0]["active"], 1);
    assert_eq!(all["total"]["records"], 9);
    assert_eq!(all["total"]["active"], 3);
    assert_eq!(all["scope"], Value::Null);

    let empty = json(scan(store, Some(&scope("nothing:here:yet")), at(NOW)).unwrap());
    assert_eq!(empty["scopes"], json!([]));
    assert_eq!(empty["total"]["records"], 0);
}

#[test]
fn consolidate_compares_records_of_one_owner_and_visibility_only() {
    // Four records with the same vector: only the two of one owner and visibility pair up.
    let b = backend();
    let store = &*b.store;
    let mut older = record(SCOPE, "same", "alice@example.com");
    older.created_at = Timestamp::from_micros(T0 * 1_000_000);
    let mut newer = record(SCOPE, "same again", "alice@example.com");
    newer.created_at = Timestamp::from_micros((T0 + 10) * 1_000_000);
    let mut bobs = record(SCOPE, "same for bob", "bob@example.com");
    bobs.created_at = Timestamp::from_micros((T0 + 20) * 1_000_000);
    let mut shared = record(SCOPE, "same but shared", "alice@example.com");
    shared.created_at = Timestamp::from_micros((T0 + 30) * 1_000_000);
    shared.visibility = Visibility::Shared;
    for m in [&older, &newer, &bobs, &shared] {
        insert(store, m, 7);
    }
    let s = scope(SCOPE);
    let preview =
        json(consolidate::consolidate(store, Some(&s), 0.95, false, &mut Silent).unwrap());
    let p = preview["proposals"].as_array().unwrap();
    assert_eq!(p.len(), 1, "{preview:#}");
    assert_eq!(p[0]["owner"], "alice@example.com");
    assert_eq!(p[0]["visibility"], "");
    assert_eq!(p[0]["successor"]["id"], newer.id.to_string());
    assert_eq!(p[0]["supersedes"][0]["id"], older.id.to_string());
    assert!(p[0]["supersedes"][0]["similarity"].as_f64().unwrap() > 0.9999);
    let applied = json(consolidate::consolidate(store, Some(&s), 0.95, true, &mut Silent).unwrap());
    assert_eq!(applied["summary"]["applied"], 1);
    assert_eq!(store.get_many(&[older.id]).unwrap()[0].superseded_by, Some(newer.id));
}

#[test]
fn consolidate_refuses_a_threshold_outside_zero_to_one() {
    let b = backend();
    for t in [0.0, 1.5, -0.2, f32::NAN] {
        let e = consolidate::consolidate(&*b.store, None, t, false, &mut Silent).unwrap_err();
        assert!(e.to_string().contains("--threshold must be"), "{t}: {e}");
    }
}

/// Records for the purge tests, stored directly with exact states.
struct PurgeFixture {
    b: Backend,
    exported: Memory,
    edited: Memory,
    unexported: Memory,
    expired: Memory,
    old_link: Memory,
    new_link: Memory,
    archived_head: Memory,
    its_predecessor: Memory,
    active: Memory,
}

impl PurgeFixture {
    fn all(&self) -> [&Memory; 9] {
        [
            &self.exported,
            &self.edited,
            &self.unexported,
            &self.expired,
            &self.old_link,
            &self.new_link,
            &self.archived_head,
            &self.its_predecessor,
            &self.active,
        ]
    }

    /// `purge` as the command line would ask for it, as JSON.
    fn purge(&self, req: purge::Request, apply: bool) -> Value {
        let criteria = purge::criteria(req, at(NOW)).unwrap();
        json(purge::purge(&*self.b.store, &criteria, at(NOW), apply, &mut Silent).unwrap())
    }
}

fn purge_fixture() -> PurgeFixture {
    let b = backend();
    let store = &*b.store;
    let past = EpochSeconds::from_secs(NOW - 60);
    let archived = |content: &str| {
        let mut m = record(SCOPE, content, "");
        m.archived_at = Some(past);
        m.tags = vec!["old".into()];
        m
    };
    let exported = archived("archived, exported as it is");
    let edited = archived("archived, edited after its export");
    let unexported = archived("archived, never exported");
    let mut expired = record(OTHER, "expired, exported", "");
    expired.not_after = Some(past);
    let mut new_link = record(SCOPE, "the correction", "");
    let mut old_link = record(SCOPE, "the corrected", "");
    old_link.superseded_by = Some(new_link.id);
    new_link.supersedes = vec![old_link.id];
    // An archived chain head whose predecessor is not archived.
    let mut archived_head = archived("archived head");
    let mut its_predecessor = record(SCOPE, "its predecessor", "");
    its_predecessor.superseded_by = Some(archived_head.id);
    archived_head.supersedes = vec![its_predecessor.id];
    let mut active = record(SCOPE, "active, exported", "");
    active.category = Category::Gotcha;
    active.tags = vec!["ci".into(), "flaky".into()];
    for (i, m) in [
        &exported,
        &edited,
        &unexported,
        &expired,
        &old_link,
        &new_link,
        &archived_head,
        &its_predecessor,
        &active,
    ]
    .into_iter()
    .enumerate()
    {
        insert(store, m, i as u64 + 100);
    }
    let out = [&exported, &edited, &expired, &old_link, &new_link, &archived_head, &active];
    let out: Vec<Memory> = out.into_iter().cloned().collect();
    store.mark_exported(&out, "backup.jsonl", EpochSeconds::from_secs(NOW)).unwrap();
    let mut changed = edited.clone();
    changed.content = "archived, edited after its export (edited)".into();
    assert!(store.replace(&Access::owned(&Caller::anonymous()), &changed, None).unwrap());
    PurgeFixture {
        b,
        exported,
        edited: changed,
        unexported,
        expired,
        old_link,
        new_link,
        archived_head,
        its_predecessor,
        active,
    }
}

fn reasons(report: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = report["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_owned(), r["reason"].as_str().unwrap().to_owned()))
        .collect();
    out.sort();
    out
}

fn classes(classes: &[PurgeClass]) -> purge::Request {
    purge::Request { classes: classes.to_vec(), ..Default::default() }
}

#[test]
fn purge_previews_then_deletes_exactly_the_exported_unchanged_records() {
    let f = purge_fixture();
    let store = &*f.b.store;
    let all_ids: Vec<RecordId> = f.all().iter().map(|m| m.id).collect();
    let archived = || classes(&[PurgeClass::Archived]);

    let preview = f.purge(archived(), false);
    assert_eq!(preview["applied"], false);
    assert_eq!(ids(&preview["eligible"]), sorted(&[&f.exported]), "{preview:#}");
    let mut expected = vec![
        (f.edited.id.to_string(), "changed_since_export".to_owned()),
        (f.unexported.id.to_string(), "not_exported".to_owned()),
        (f.archived_head.id.to_string(), "supersedes_records_that_stay".to_owned()),
    ];
    expected.sort();
    assert_eq!(reasons(&preview), expected);
    for r in preview["refused"].as_array().unwrap() {
        assert!(
            r["hint"].as_str().unwrap().contains(match r["reason"].as_str().unwrap() {
                "supersedes_records_that_stay" => "purge",
                _ => "spine export",
            }),
            "{r}"
        );
    }
    assert_eq!(preview["eligible"][0]["exported_to"], "backup.jsonl");
    assert_eq!(preview["eligible"][0]["states"], json!(["archived"]));
    assert_eq!(store.get_many(&all_ids).unwrap().len(), all_ids.len(), "a preview deletes nothing");

    // Applying deletes exactly what the preview listed as eligible.
    let applied = f.purge(archived(), true);
    assert_eq!(applied["applied"], true);
    assert_eq!(ids(&applied["eligible"]), ids(&preview["eligible"]));
    assert_eq!(reasons(&applied), reasons(&preview));
    assert_eq!(applied["summary"]["deleted"], 1);
    assert_eq!(applied["outcomes"], json!([{"id": f.exported.id.to_string(), "deleted": true}]));
    let left: Vec<RecordId> = store.get_many(&all_ids).unwrap().iter().map(|m| m.id).collect();
    assert_eq!(left.len(), all_ids.len() - 1);
    assert!(!left.contains(&f.exported.id));
    // Nothing eligible is left; the refused are still refused.
    let again = f.purge(archived(), true);
    assert_eq!(again["summary"]["deleted"], 0);
    assert_eq!(reasons(&again), reasons(&preview));

    // Exporting the predecessor and archiving it lets the head go with it.
    store
        .set_archived(
            &Access::operator(),
            &[f.its_predecessor.id],
            Some(EpochSeconds::from_secs(NOW)),
        )
        .unwrap();
    let archived_pred = store.get_many(&[f.its_predecessor.id]).unwrap();
    store.mark_exported(&archived_pred, "later.jsonl", EpochSeconds::from_secs(NOW)).unwrap();
    let both = f.purge(purge::Request { scope: Some(SCOPE.into()), ..archived() }, true);
    assert_eq!(ids(&both["eligible"]), sorted(&[&f.archived_head, &f.its_predecessor]), "{both:#}");
    assert_eq!(both["summary"]["deleted"], 2);

    // Superseded and expired classes, one scope or all.
    let sup = f.purge(classes(&[PurgeClass::Superseded]), true);
    assert_eq!(ids(&sup["eligible"]), sorted(&[&f.old_link]));
    let exp = f.purge(
        purge::Request { scope: Some(SCOPE.into()), ..classes(&[PurgeClass::Expired]) },
        false,
    );
    assert_eq!(exp["summary"]["selected"], 0, "the expired record is in another scope");
    let exp = f.purge(classes(&[PurgeClass::Expired, PurgeClass::Archived]), true);
    assert_eq!(ids(&exp["eligible"]), sorted(&[&f.expired]));
    assert_eq!(exp["summary"]["refused"], 2);
    // The correction survives its purged predecessor, and the store still verifies.
    let head = store.get_many(&[f.new_link.id]).unwrap();
    assert_eq!(head[0].supersedes, vec![f.old_link.id]);
    let verified =
        spine_ops::review::verify::verify(store, None, ("m", Some(16)), &mut Silent).unwrap();
    assert!(verified.ok, "{verified:?}");
}

#[test]
fn free_form_purge_filters_by_category_tags_and_age_within_a_scope() {
    let f = purge_fixture();
    let req = |edit: &dyn Fn(&mut purge::Request)| {
        let mut r = purge::Request::default();
        edit(&mut r);
        r
    };
    let in_scope = |s: &str| Some(s.to_owned());
    let by_category = f.purge(
        req(&|r| {
            r.category = Some("gotcha".into());
            r.scope = in_scope(SCOPE);
        }),
        false,
    );
    assert_eq!(ids(&by_category["eligible"]), sorted(&[&f.active]));
    assert_eq!(by_category["eligible"][0]["states"], json!([]));
    let by_tags = f.purge(
        req(&|r| {
            r.tags = vec!["ci".into(), "flaky".into()];
            r.all_scopes = true;
        }),
        false,
    );
    assert_eq!(ids(&by_tags["eligible"]), sorted(&[&f.active]));
    let none = f.purge(
        req(&|r| {
            r.tags = vec!["ci".into(), "unknown".into()];
            r.all_scopes = true;
        }),
        false,
    );
    assert_eq!(none["summary"]["selected"], 0);
    let other_scope = f.purge(
        req(&|r| {
            r.category = Some("gotcha".into());
            r.scope = in_scope(OTHER);
        }),
        false,
    );
    assert_eq!(other_scope["summary"]["selected"], 0);
    // Every fixture record was created at T0 (2023): all are older than 30 days, none
    // older than 100 years.
    let days = |n: u64| Some(std::time::Duration::from_secs(n * 86_400));
    let old = f.purge(
        req(&|r| {
            r.older_than = days(30);
            r.scope = in_scope(SCOPE);
        }),
        false,
    );
    assert_eq!(old["summary"]["selected"], 8, "{old:#}");
    let ancient = f.purge(
        req(&|r| {
            r.older_than = days(100 * 366);
            r.all_scopes = true;
        }),
        false,
    );
    assert_eq!(ancient["summary"]["selected"], 0);
    // A class narrowed by a filter.
    let tagged = f.purge(
        req(&|r| {
            r.classes = vec![PurgeClass::Archived];
            r.tags = vec!["old".into()];
        }),
        false,
    );
    assert_eq!(tagged["summary"]["selected"], 4);
    let applied = f.purge(
        req(&|r| {
            r.category = Some("gotcha".into());
            r.scope = in_scope(SCOPE);
        }),
        true,
    );
    assert_eq!(applied["summary"]["deleted"], 1);
    assert!(f.b.store.get_many(&[f.active.id]).unwrap().is_empty());
}

#[test]
fn purge_flags_are_checked_before_anything_is_selected() {
    let refused = |req: purge::Request| purge::criteria(req, at(NOW)).unwrap_err().to_string();
    let all = |r: purge::Request| purge::Request { all_scopes: true, ..r };
    let bad_category = purge::Request { category: Some("rumour".into()), ..Default::default() };
    assert!(refused(all(bad_category)).contains("category must be one of"));
    let blank = purge::Request { tags: vec!["a".into(), "".into()], ..Default::default() };
    assert!(refused(all(blank)).contains("blank tag"));
    let empty = purge::Request { scope: Some(String::new()), ..classes(&[PurgeClass::Archived]) };
    assert!(refused(empty).contains("must not be empty"));
    for free in [
        purge::Request { category: Some("gotcha".into()), ..Default::default() },
        purge::Request { tags: vec!["x".into()], ..Default::default() },
        purge::Request {
            older_than: Some(std::time::Duration::from_secs(60)),
            ..Default::default()
        },
    ] {
        assert!(refused(free).contains("--scope <scope> or --all-scopes"));
    }
}

#[test]
fn archive_and_restore_act_on_any_owners_record_by_id_or_short_id() {
    let b = backend();
    let store = &*b.store;
    let alices = record(SCOPE, "alice's private note", "alice@example.com");
    let bobs = record(SCOPE, "bob's private note", "bob@example.com");
    insert(store, &alices, 1);
    insert(store, &bobs, 2);
    let short = alices.short_id.as_str().to_lowercase();
    let run = |ids: &[&str], archive: bool| {
        let ids = ids.iter().map(|s| s.to_string()).collect();
        json(set_archived(store, &Access::operator(), ids, archive, at(NOW)).unwrap())
    };
    let (alice_id, bob_id) = (alices.id.to_string(), bobs.id.to_string());

    let r = run(&[&short, &bob_id], true);
    let outcomes: Vec<&str> =
        r["results"].as_array().unwrap().iter().map(|x| x["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["archived", "archived"]);
    assert_eq!(r["results"][0]["id"], alice_id);
    assert_eq!(r["results"][0]["input"], short);
    for m in store.get_many(&[alices.id, bobs.id]).unwrap() {
        assert_eq!(m.archived_at, Some(EpochSeconds::from_secs(NOW)), "archived now");
    }
    let again = run(&[&alice_id], true);
    assert_eq!(again["results"][0]["outcome"], "already_archived");
    let counted = json(scan(store, Some(&scope(SCOPE)), at(NOW)).unwrap());
    assert_eq!(counted["total"]["archived"], 2);

    let restored = run(&[&alice_id], false);
    assert_eq!(restored["results"][0]["outcome"], "restored");
    assert_eq!(store.get_many(&[alices.id]).unwrap()[0].archived_at, None);
    assert_eq!(run(&[&short], false)["results"][0]["outcome"], "not_archived");

    // One outcome per id, like the tools: an unknown id does not stop the others.
    let unknown = RecordId::mint().to_string();
    let r = run(&[&unknown, &bob_id], false);
    assert_eq!(
        r["results"][0],
        json!({"input": unknown, "id": "", "short_id": "", "scope": "", "outcome": "not_found"})
    );
    assert_eq!(r["results"][1]["outcome"], "restored");
    assert_eq!(store.get_many(&[bobs.id]).unwrap()[0].archived_at, None);

    // Malformed ids refuse the whole call.
    let e = set_archived(store, &Access::operator(), vec!["not an id".into()], true, at(NOW))
        .unwrap_err();
    assert!(e.to_string().contains("UUID or a 10-character short_id"), "{e}");
    if on_postgres() {
        return; // short_id is UNIQUE there: no two records can share one.
    }
    // A short id two records share is `ambiguous`, naming both, and changes neither.
    run(&[&bob_id], true);
    let mut twin = record(SCOPE, "a record sharing alice's short id", "carol@example.com");
    twin.short_id = alices.short_id.clone();
    twin.archived_at = Some(EpochSeconds::from_secs(NOW));
    insert(store, &twin, 3);
    let r = run(&[alices.short_id.as_str()], false);
    assert_eq!(r["results"][0]["outcome"], "ambiguous");
    let mut candidates: Vec<String> = r["results"][0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect();
    candidates.sort();
    let mut both = vec![alice_id, twin.id.to_string()];
    both.sort();
    assert_eq!(candidates, both);
    assert!(store.get_many(&[twin.id]).unwrap()[0].archived_at.is_some(), "changes neither");
}
