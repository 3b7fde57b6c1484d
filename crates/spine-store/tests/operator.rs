//! The operator as a kind of caller: [`Access::operator`] reads and changes every owner's
//! records (legacy ones without an owner key included) through the same [`Store`] methods
//! the tools use, while owners' accesses stay confined.

use spine_core::{
    Caller, Category, EpochSeconds, IdRef, Memory, RecordId, Scope, ShortId, Source, Timestamp,
};
use spine_store::{
    Access, Embedding, Filter, Gate, NearestQuery, Neighbour, Page, ScopeFilter, Selection,
    SqliteStore, Store,
};

const SCOPE: &str = "acme:project:ops";

fn record(caller: &Caller, short: &ShortId, content: &str) -> Memory {
    Memory::new(
        short.clone(),
        content.into(),
        Scope::parse("scope", SCOPE).unwrap(),
        Source::UserSaid,
        Category::Decision,
        caller,
        Timestamp::from_micros(1_700_000_000_000_000),
    )
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: SqliteStore,
    alice: Memory,
    bob: Memory,
    legacy: Memory,
}

/// Alice's and Bob's private records share a short id; a legacy record has no owner key.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let shared = ShortId::mint();
    let alice = record(&Caller::authenticated("a", "alice"), &shared, "alice's");
    let bob = record(&Caller::authenticated("b", "bob"), &shared, "bob's");
    let mut legacy = record(&Caller::anonymous(), &ShortId::mint(), "legacy");
    legacy.owner = None;
    for m in [&alice, &bob, &legacy] {
        store
            .insert(
                &spine_store::Access::operator(),
                m,
                Embedding { model: "m", vector: &[1.0, 0.0] },
            )
            .unwrap();
    }
    Fixture { _dir: dir, store, alice, bob, legacy }
}

/// The ten nearest of every state and the ten nearest active records `access` reads.
fn nearest(store: &SqliteStore, access: &Access) -> Vec<Neighbour> {
    let q = NearestQuery {
        access,
        filter: &Filter::new(ScopeFilter::All),
        model: "m",
        vector: &[1.0, 0.0],
        now: Timestamp::from_micros(1_800_000_000_000_000),
        any: 10,
        active: 10,
        exclude: None,
    };
    store.nearest(&q).unwrap()
}

fn ids(records: &[Memory]) -> Vec<RecordId> {
    let mut out: Vec<RecordId> = records.iter().map(|m| m.id).collect();
    out.sort();
    out
}

#[test]
fn the_operator_reads_every_owner_and_legacy_records() {
    let f = fixture();
    let op = Access::operator();
    assert!(op.is_operator());
    let every = Filter::new(ScopeFilter::All);
    let sel = Selection { access: &op, filter: &every, gate: Gate::Off };
    let all = f.store.list(sel, Page::recent(None, 0, 10)).unwrap();
    assert_eq!(ids(&all), ids(&[f.alice.clone(), f.bob.clone(), f.legacy.clone()]));
    assert_eq!(f.store.count(sel).unwrap(), 3);
    let legacy = f.store.resolve(&op, &IdRef::Id(f.legacy.id)).unwrap();
    assert_eq!(legacy.map(|m| m.id), Some(f.legacy.id));
    assert_eq!(nearest(&f.store, &op).len(), 3, "the index has no owner predicate either");

    // An owner still sees only their own; the legacy record is nobody's.
    let alice = Access::read(&Caller::authenticated("a", "alice"));
    let theirs = f.store.list(Selection { access: &alice, ..sel }, Page::recent(None, 0, 10));
    assert_eq!(ids(&theirs.unwrap()), vec![f.alice.id]);
    assert_eq!(f.store.resolve(&alice, &IdRef::Id(f.legacy.id)).unwrap(), None);
}

#[test]
fn a_shared_short_id_lists_its_records_for_the_operator_and_resolves_to_none() {
    let f = fixture();
    let short = IdRef::Short(f.alice.short_id.clone());
    let op = Access::operator();
    let found = f.store.matching(&op, &short, 50).unwrap();
    assert_eq!(ids(&found), ids(&[f.alice.clone(), f.bob.clone()]));
    assert_eq!(f.store.matching(&op, &short, 1).unwrap().len(), 1, "limit holds");
    assert_eq!(f.store.resolve(&op, &short).unwrap(), None, "ambiguous is none (SPEC Errors 2)");
    // Alice reads only hers, so for her the short id is not ambiguous.
    let alice = Access::read(&Caller::authenticated("a", "alice"));
    assert_eq!(f.store.resolve(&alice, &short).unwrap().map(|m| m.id), Some(f.alice.id));
}

#[test]
fn the_operator_archives_and_restores_any_record_an_owner_only_their_own() {
    let f = fixture();
    let at = Some(EpochSeconds::from_secs(1_750_000_000));
    let alice = Access::owned(&Caller::authenticated("a", "alice"));
    assert_eq!(f.store.set_archived(&alice, &[f.bob.id, f.alice.id], at).unwrap(), [false, true]);
    let op = Access::operator();
    let targets = [f.alice.id, f.bob.id, f.legacy.id, RecordId::mint()];
    assert_eq!(f.store.set_archived(&op, &targets, at).unwrap(), [false, true, true, false]);
    let archived = f.store.get_many(&[f.bob.id, f.legacy.id]).unwrap();
    assert!(archived.iter().all(|m| m.archived_at.is_some()));
    assert_eq!(f.store.set_archived(&op, &targets, None).unwrap(), [true, true, true, false]);
    assert!(f.store.get_many(&targets).unwrap().iter().all(|m| m.archived_at.is_none()));
}

#[test]
fn nearest_returns_active_records_with_their_payload_and_hidden_ones_without() {
    let f = fixture();
    let op = Access::operator();
    f.store.set_archived(&op, &[f.bob.id], Some(EpochSeconds::from_secs(1_750_000_000))).unwrap();
    let found = nearest(&f.store, &op);
    assert_eq!(found.len(), 3);
    for n in &found {
        match n.states.is_empty() {
            true => assert_eq!(n.record.as_ref().map(|m| m.memory().unwrap().id), Some(n.id)),
            false => assert_eq!((n.id, n.record.as_ref()), (f.bob.id, None)),
        }
    }
    let alice = found.iter().find(|n| n.id == f.alice.id).unwrap();
    assert_eq!(alice.record.as_ref().unwrap().memory().unwrap().content, "alice's");
}

/// The write rule (SPEC Authentication 4), on both engines: an owner changes only their own
/// records — never another owner's shared one, though they read it, nor a legacy record —
/// while the operator changes any.
#[test]
fn writes_reach_only_the_writers_own_records_and_every_record_for_the_operator() {
    let alice_caller = Caller::authenticated("a", "alice");
    let alice_own = record(&alice_caller, &ShortId::mint(), "alice's");
    let mut bobs = record(&Caller::authenticated("b", "bob"), &ShortId::mint(), "bob's shared");
    bobs.visibility = spine_core::Visibility::Shared;
    let mut legacy = record(&Caller::anonymous(), &ShortId::mint(), "legacy");
    legacy.owner = None;
    let scope = Scope::parse("scope", SCOPE).unwrap();
    let embedding = Embedding { model: "m", vector: &[0.6, 0.8] };
    crate::on_both_engines(&[alice_own.clone(), bobs.clone(), legacy.clone()], |store| {
        // Alice reads Bob's shared record: the write rule, not the read rule, keeps it.
        let alice = Access::read(&alice_caller);
        assert!(store.resolve(&alice, &IdRef::Id(bobs.id)).unwrap().is_some());
        for other in [&bobs, &legacy] {
            let mut edited = other.clone();
            edited.content = "edited by alice".into();
            assert!(!store.replace(&alice, &edited, None).unwrap(), "{}", other.content);
            assert!(!store.delete(&alice, &other.id).unwrap(), "{}", other.content);
        }
        let at = Some(EpochSeconds::from_secs(1_750_000_000));
        let archived = store.set_archived(&alice, &[bobs.id, legacy.id, alice_own.id], at);
        assert_eq!(archived.unwrap(), [false, false, true]);
        let successor = record(&alice_caller, &ShortId::mint(), "alice's successor");
        let rejected = store.supersede(&alice, &successor, embedding, &[bobs.id], None).unwrap();
        assert_eq!(rejected.unwrap_err().not_found, [bobs.id]);
        assert_eq!(store.delete_scope(&alice, &scope).unwrap(), 1, "her record alone");
        let left = store.get_many(&[alice_own.id, bobs.id, legacy.id]).unwrap();
        assert_eq!(ids(&left), ids(&[bobs.clone(), legacy.clone()]));
        assert!(left.iter().all(|m| m.archived_at.is_none() && m.content != "edited by alice"));

        // The operator changes anyone's.
        let op = Access::operator();
        let mut edited = legacy.clone();
        edited.content = "edited by the operator".into();
        assert!(store.replace(&op, &edited, None).unwrap());
        assert_eq!(store.get_many(&[legacy.id]).unwrap()[0].content, "edited by the operator");
        assert_eq!(store.set_archived(&op, &[bobs.id], at).unwrap(), [true]);
        assert!(store.delete(&op, &bobs.id).unwrap());
        assert_eq!(store.delete_scope(&op, &scope).unwrap(), 1, "the legacy record");
        // Not even the operator's rewrite creates a record that is not there.
        let never = record(&alice_caller, &ShortId::mint(), "never stored");
        assert!(!store.replace(&op, &never, None).unwrap());
        assert!(store.get_many(&[never.id]).unwrap().is_empty());
    });
}
