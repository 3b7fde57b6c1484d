//! Reads that save a round trip on PostgreSQL. A read that counts (`Store::resolve_touching`,
//! what `get_memory` does): the record as it was, the touch counted only on the one record
//! the caller may read, and on a database that cannot write, the read answered and the touch
//! reported as missed. Two pages at once (`Store::list_two`, `list_memory`'s).

use spine_core::{Caller, EpochSeconds, IdRef, Memory, ShortId, Timestamp, Visibility};
use spine_store::{Access, Filter, Gate, Page, PgStore, ScopeFilter, Selection, Store};
use spine_testkit::records::record;

const SCOPE: &str = "acme:project:reads";

fn at(secs: i64) -> Timestamp {
    Timestamp::from_micros(secs * 1_000_000)
}

/// The stored record, read without counting.
fn stored(store: &dyn Store, m: &Memory) -> Memory {
    store.get_many(std::slice::from_ref(&m.id)).unwrap().pop().expect("the record is stored")
}

#[test]
fn a_counted_read_touches_only_the_one_record_the_caller_reads() {
    let mut mine = record(SCOPE, "mine", "alice", 1_800_000_000);
    let mut private = record(SCOPE, "bob's private note", "bob", 1_800_000_001);
    private.visibility = Visibility::Private;
    mine.visibility = Visibility::Private;
    let mut shared = record(SCOPE, "bob's shared note", "bob", 1_800_000_002);
    shared.visibility = Visibility::Shared;
    crate::on_both_engines(&[mine.clone(), private.clone(), shared.clone()], |store| {
        let alice = Access::read(&Caller::authenticated("alice", "alice"));
        // By full id: the record as it was before this read, and the read counted.
        let (got, missed) = store
            .resolve_touching(&alice, &IdRef::Id(mine.id), at(1_900_000_000))
            .unwrap()
            .unwrap();
        assert_eq!((got.id, got.access_count, got.last_accessed_at), (mine.id, 0, None));
        assert!(missed.is_none());
        let after = stored(store, &mine);
        assert_eq!((after.access_count, after.last_accessed_at), (1, Some(at(1_900_000_000))));
        // By short id, a shared record of another owner: read and counted.
        let (got, missed) = store
            .resolve_touching(&alice, &IdRef::Short(shared.short_id.clone()), at(1_900_000_001))
            .unwrap()
            .unwrap();
        assert_eq!((got.id, missed.is_none()), (shared.id, true));
        assert_eq!(stored(store, &shared).access_count, 1);
        // Another owner's private record is not found, and not counted.
        for id in [IdRef::Id(private.id), IdRef::Short(private.short_id.clone())] {
            assert!(store.resolve_touching(&alice, &id, at(1_900_000_002)).unwrap().is_none());
        }
        assert_eq!(stored(store, &private).access_count, 0);
        // An id naming nothing.
        let nothing = IdRef::Short(ShortId::mint());
        assert!(store.resolve_touching(&alice, &nothing, at(1_900_000_003)).unwrap().is_none());
        // Everything else as it was.
        assert_eq!(stored(store, &mine).access_count, 1);
        assert_eq!(stored(store, &shared).content, shared.content);
    });
}

/// A short id two owners' records share resolves to nothing for a caller who reads both
/// (the operator), and neither is counted (SQLite: PostgreSQL keeps short ids unique).
#[test]
fn an_ambiguous_short_id_is_neither_read_nor_counted() {
    let dir = tempfile::tempdir().unwrap();
    let store = spine_store::SqliteStore::open(dir.path()).unwrap();
    let short = ShortId::mint();
    let mut records = Vec::new();
    for owner in ["alice", "bob"] {
        let mut m = record(SCOPE, &format!("{owner}'s"), owner, 1_800_000_000);
        m.short_id = short.clone();
        store
            .insert(
                &spine_store::Access::operator(),
                &m,
                spine_store::Embedding { model: "m", vector: &[1.0, 0.0] },
            )
            .unwrap();
        records.push(m);
    }
    let operator = Access::operator();
    let id = IdRef::Short(short);
    assert!(store.resolve_touching(&operator, &id, at(1_900_000_000)).unwrap().is_none());
    let alice = Access::read(&Caller::authenticated("alice", "alice"));
    let (got, _) = store.resolve_touching(&alice, &id, at(1_900_000_001)).unwrap().unwrap();
    assert_eq!(got.id, records[0].id);
    let counts: Vec<u64> = records.iter().map(|m| stored(&store, m).access_count).collect();
    assert_eq!(counts, [1, 0]);
}

/// On a database that refuses writes (its disk full: here a trigger answers every update
/// with PostgreSQL's `disk_full`), the counted read still answers, says the touch was missed
/// and why, and changes nothing.
#[test]
fn a_counted_read_on_a_database_that_cannot_write_answers_uncounted() {
    let Some(db) = spine_testkit::postgres::fresh_database() else { return };
    let m = record(SCOPE, "kept while the disk is full", "alice", 1_800_000_000);
    let store = PgStore::connect(&db.url).unwrap();
    store
        .insert(
            &spine_store::Access::operator(),
            &m,
            spine_store::Embedding { model: "m", vector: &[1.0, 0.0] },
        )
        .unwrap();
    spine_testkit::postgres::execute(
        &db.url,
        "CREATE FUNCTION full_disk() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
            RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full'; END $$;
         CREATE TRIGGER full_disk BEFORE UPDATE ON memories
            FOR EACH ROW EXECUTE FUNCTION full_disk()",
    );
    let alice = Access::read(&Caller::authenticated("alice", "alice"));
    let id = IdRef::Id(m.id);
    let (got, missed) = store.resolve_touching(&alice, &id, at(1_900_000_000)).unwrap().unwrap();
    assert_eq!(got.content, m.content);
    let missed = missed.expect("the touch could not be written");
    assert_eq!(missed.resource_fault(), Some("the database server's disk is full"), "{missed}");
    assert_eq!(stored(&store, &m).access_count, 0);
    // Another owner's private record stays unread, whether the touch can be written or not.
    let bob = Access::read(&Caller::authenticated("bob", "bob"));
    assert!(store.resolve_touching(&bob, &id, at(1_900_000_001)).unwrap().is_none());
}

/// `Store::list_two` (`list_memory`'s page and its ungated window, one round trip on
/// PostgreSQL) gives what two `Store::list` calls give, each page its own.
#[test]
fn two_pages_at_once_are_the_two_pages() {
    let mut records = Vec::new();
    for i in 0..7 {
        let mut m = record(SCOPE, &format!("note {i}"), "alice", 1_800_000_000 + i);
        if i % 3 == 0 {
            m.archived_at = Some(EpochSeconds::from_secs(1_800_000_100));
        }
        records.push(m);
    }
    crate::on_both_engines(&records, |store| {
        let access = Access::read(&Caller::authenticated("alice", "alice"));
        let filter = Filter::new(ScopeFilter::All);
        let live =
            Selection { access: &access, filter: &filter, gate: Gate::ActiveAt(at(1_900_000_000)) };
        let all = Selection { gate: Gate::Off, ..live };
        for (offset, limit) in [(0, 3), (1, 2), (0, 10)] {
            let first = (live, Page::recent(None, offset, limit + 1));
            let second = (all, Page::recent(None, offset, limit));
            let (a, b) = store.list_two(first, second).unwrap();
            let ids = |ms: &[Memory]| ms.iter().map(|m| m.id).collect::<Vec<_>>();
            assert_eq!(ids(&a), ids(&store.list(first.0, first.1).unwrap()));
            assert_eq!(ids(&b), ids(&store.list(second.0, second.1).unwrap()));
            // The newest record is archived: the gated page skips it, the window holds it.
            assert!(a.iter().all(|m| m.archived_at.is_none()));
            assert_eq!(b.iter().any(|m| m.id == records[6].id), offset == 0);
        }
    });
}

/// `Store::resolve_each` (archive and restore's ids, one round trip on PostgreSQL) resolves
/// every id as `Store::resolve` does, in order: full and short ids, another owner's private
/// record and an unknown id as nothing, and the same id twice twice.
#[test]
fn many_ids_resolve_each_as_one_would() {
    let mine = record(SCOPE, "mine", "alice", 1_800_000_000);
    let also_mine = record(SCOPE, "also mine", "alice", 1_800_000_001);
    let mut bobs = record(SCOPE, "bob's", "bob", 1_800_000_002);
    bobs.visibility = Visibility::Private;
    let records = [mine.clone(), also_mine.clone(), bobs.clone()];
    crate::on_both_engines(&records, |store| {
        let alice = Access::owned(&Caller::authenticated("alice", "alice"));
        let ids = [
            IdRef::Short(also_mine.short_id.clone()),
            IdRef::Id(bobs.id),
            IdRef::Id(mine.id),
            IdRef::Short(ShortId::mint()),
            IdRef::Short(bobs.short_id.clone()),
            IdRef::Id(mine.id),
        ];
        for n in [0, 1, 2, ids.len()] {
            let each = store.resolve_each(&alice, &ids[..n]).unwrap();
            let one_by_one: Vec<_> =
                ids[..n].iter().map(|id| store.resolve(&alice, id).unwrap()).collect();
            let found = |ms: &[Option<Memory>]| {
                ms.iter().map(|m| m.as_ref().map(|m| m.id)).collect::<Vec<_>>()
            };
            assert_eq!(found(&each), found(&one_by_one), "{n} ids");
        }
        let each = store.resolve_each(&alice, &ids).unwrap();
        let found: Vec<_> = each.iter().map(|m| m.as_ref().map(|m| m.content.as_str())).collect();
        assert_eq!(found, [Some("also mine"), None, Some("mine"), None, None, Some("mine")]);
    });
}
