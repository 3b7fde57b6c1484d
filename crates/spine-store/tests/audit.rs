//! The audit log on both engines: each write method that changes records writes the call's
//! event with the change; one that changes nothing writes none; events list newest first,
//! filtered, and go only by pruning.

use spine_core::audit::{Audit, Lane};
use spine_core::{Caller, EpochSeconds, RecordId, Timestamp};
use spine_store::{Access, AuditEvent, AuditQuery, Embedding, SqliteStore, Store};
use spine_testkit::records::record;

use super::on_both;

const SCOPE: &str = "acme:project:audit";
const OTHER: &str = "acme:project:elsewhere";
const E: Embedding<'static> = Embedding { model: "m", vector: &[0.6, 0.8] };

/// Alice's call of `action`, as an MCP client named `test-client/1.0` makes it.
fn alice(action: &str) -> Caller {
    Caller::authenticated("alice@example.com", "alice").with_audit(Audit::new(
        Lane::Mcp,
        action,
        "test-client/1.0",
    ))
}

fn every_event(s: &dyn Store) -> Vec<AuditEvent> {
    s.audit_events(&AuditQuery { limit: 1000, ..Default::default() }).unwrap()
}

fn sorted(mut ids: Vec<RecordId>) -> Vec<RecordId> {
    ids.sort();
    ids
}

#[test]
fn each_change_writes_one_event_naming_its_records() {
    on_both(|s| {
        let caller = alice("store_memory");
        let a = record(SCOPE, "Deploys happen on Thursdays.", "alice", 1_800_000_000);
        s.insert(&Access::owned(&caller), &a, E).unwrap();
        assert!(caller.audit().unwrap().was_recorded(), "the store wrote the event");
        let b = record(SCOPE, "Release notes live in docs/releases.", "alice", 1_800_000_001);
        s.insert(&Access::owned(&alice("store_memory")), &b, E).unwrap();

        let mut edited = a.clone();
        edited.content = "Deploys happen on Wednesdays.".into();
        assert!(s.replace(&Access::owned(&alice("update_memory")), &edited, Some(E)).unwrap());

        let at = Some(EpochSeconds::from_secs(1_800_000_100));
        let archive = alice("archive_memory");
        let flips = s.set_archived(&Access::owned(&archive), &[a.id, b.id, a.id], at).unwrap();
        assert_eq!(flips, [true, true, false]);

        let new = record(SCOPE, "Deploys happen on Tuesdays.", "alice", 1_800_000_002);
        let supersede = alice("supersede_memory");
        s.supersede(&Access::owned(&supersede), &new, E, &[a.id], None).unwrap().unwrap();
        assert!(supersede.audit().unwrap().was_recorded());

        assert!(s.delete(&Access::owned(&alice("delete_memory")), &b.id).unwrap());
        let c = record(OTHER, "Staging is at staging.example.com.", "alice", 1_800_000_003);
        s.insert(&Access::operator(), &c, E).unwrap();
        let d = record(OTHER, "Staging resets nightly.", "alice", 1_800_000_004);
        s.insert(&Access::operator(), &d, E).unwrap();
        let scope = spine_core::Scope::parse("scope", OTHER).unwrap();
        assert_eq!(s.delete_scope(&Access::owned(&alice("delete_all")), &scope).unwrap(), 2);

        let events = every_event(s);
        let got: Vec<(&str, Vec<RecordId>, &str)> = events
            .iter()
            .rev()
            .map(|e| (e.action.as_str(), e.record_ids.clone(), e.scope.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("store_memory", vec![a.id], SCOPE),
                ("store_memory", vec![b.id], SCOPE),
                ("update_memory", vec![a.id], SCOPE),
                ("archive_memory", sorted(vec![a.id, b.id]), SCOPE),
                ("supersede_memory", sorted(vec![new.id, a.id]), SCOPE),
                ("delete_memory", vec![b.id], SCOPE),
                ("delete_all", sorted(vec![c.id, d.id]), OTHER),
            ],
            "one event per change, oldest last; the operator's inserts carry none"
        );
        for e in &events {
            assert_eq!((e.actor.as_str(), e.owner.as_str()), ("alice@example.com", "alice"));
            assert_eq!(
                (e.lane, e.client.as_str(), e.outcome.as_str()),
                (Lane::Mcp, "test-client/1.0", "ok")
            );
            assert_eq!(e.trace_id, "");
        }
    });
}

#[test]
fn a_write_that_changes_nothing_writes_no_event() {
    on_both(|s| {
        let a = record(SCOPE, "Use rustls.", "alice", 1_800_000_000);
        s.insert(&Access::operator(), &a, E).unwrap();
        // Bob owns nothing here: his writes match no row.
        let bob = |action: &str| {
            Caller::authenticated("bob@example.com", "bob").with_audit(Audit::new(
                Lane::Connect,
                action,
                "",
            ))
        };
        let delete = bob("delete_memory");
        assert!(!s.delete(&Access::owned(&delete), &a.id).unwrap());
        assert!(!delete.audit().unwrap().was_recorded(), "left to the lane to append");
        let update = bob("update_memory");
        assert!(!s.replace(&Access::owned(&update), &a, None).unwrap());
        let archive = bob("archive_memory");
        let at = Some(EpochSeconds::from_secs(1_800_000_100));
        assert_eq!(s.set_archived(&Access::owned(&archive), &[a.id], at).unwrap(), [false]);
        assert!(!archive.audit().unwrap().was_recorded());
        let scope = spine_core::Scope::parse("scope", SCOPE).unwrap();
        assert_eq!(s.delete_scope(&Access::owned(&bob("delete_all")), &scope).unwrap(), 0);
        assert!(every_event(s).is_empty(), "nothing changed, nothing written");

        // The lane appends the event of such a call, with its outcome.
        let e = AuditEvent::unrecorded(&delete, "not_found", vec![]).unwrap();
        s.append_audit(&e).unwrap();
        let events = every_event(s);
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].actor.as_str(), events[0].action.as_str(), events[0].outcome.as_str()),
            ("bob@example.com", "delete_memory", "not_found")
        );
        assert_eq!(events[0].lane, Lane::Connect);
    });
}

fn event(at_secs: i64, actor: &str, action: &str, scope: &str, ids: &[RecordId]) -> AuditEvent {
    AuditEvent {
        at: Timestamp::from_micros(at_secs * 1_000_000),
        actor: actor.into(),
        owner: actor.into(),
        lane: Lane::Operator,
        client: String::new(),
        action: action.into(),
        scope: scope.into(),
        record_ids: ids.to_vec(),
        outcome: "ok".into(),
        trace_id: String::new(),
    }
}

#[test]
fn events_list_newest_first_filtered_and_go_only_by_pruning() {
    on_both(|s| {
        let (x, y) = (RecordId::mint(), RecordId::mint());
        let written = [
            event(100, "alice", "store_memory", SCOPE, &[x]),
            event(200, "bob", "store_memory", OTHER, &[y]),
            event(300, "alice", "delete_memory", SCOPE, &[x]),
            event(300, "alice", "purge", "", &[x, y]),
        ];
        for e in &written {
            s.append_audit(e).unwrap();
        }
        let list = |q: AuditQuery| -> Vec<String> {
            let q = AuditQuery { limit: if q.limit == 0 { 100 } else { q.limit }, ..q };
            s.audit_events(&q).unwrap().iter().map(|e| e.action.clone()).collect()
        };
        let t = |secs: i64| Some(Timestamp::from_micros(secs * 1_000_000));
        // Same time: the later written first.
        assert_eq!(
            list(AuditQuery::default()),
            ["purge", "delete_memory", "store_memory", "store_memory"]
        );
        assert_eq!(
            s.audit_events(&AuditQuery { limit: 100, ..Default::default() }).unwrap()[0],
            written[3]
        );
        // since is inclusive, until exclusive.
        assert_eq!(
            list(AuditQuery { since: t(300), ..Default::default() }),
            ["purge", "delete_memory"]
        );
        assert_eq!(list(AuditQuery { until: t(200), ..Default::default() }), ["store_memory"]);
        assert_eq!(
            list(AuditQuery { since: t(200), until: t(300), ..Default::default() }),
            ["store_memory"]
        );
        assert_eq!(
            list(AuditQuery { actor: Some("bob".into()), ..Default::default() }),
            ["store_memory"]
        );
        assert_eq!(
            list(AuditQuery { record: Some(y), ..Default::default() }),
            ["purge", "store_memory"]
        );
        assert_eq!(
            list(AuditQuery { scope: Some(SCOPE.into()), ..Default::default() }),
            ["delete_memory", "store_memory"]
        );
        assert_eq!(
            list(AuditQuery { action: Some("purge".into()), ..Default::default() }),
            ["purge"]
        );
        assert_eq!(list(AuditQuery { limit: 1, ..Default::default() }), ["purge"]);

        // Pruning removes what was written strictly before the cutoff.
        assert_eq!(s.prune_audit(Timestamp::from_micros(200 * 1_000_000)).unwrap(), 1);
        assert_eq!(list(AuditQuery::default()), ["purge", "delete_memory", "store_memory"]);
        assert_eq!(s.prune_audit(Timestamp::from_micros(200 * 1_000_000)).unwrap(), 0);
    });
}

#[test]
fn the_audit_log_refuses_updates() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    store.append_audit(&event(100, "alice", "store_memory", SCOPE, &[])).unwrap();
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    let refused = conn.execute("UPDATE audit_events SET actor = 'mallory'", []);
    assert!(refused.unwrap_err().to_string().contains("append-only"));
    assert_eq!(every_event(&store)[0].actor, "alice");
}

#[test]
fn an_operator_handle_writes_one_event_per_transaction_that_changes_records() {
    on_both(|s| {
        let mut expired = record(SCOPE, "Freeze until Friday.", "alice", 1_800_000_000);
        expired.not_after = Some(EpochSeconds::from_secs(1_800_000_500));
        let kept = record(OTHER, "Use rustls.", "bob", 1_800_000_001);
        for m in [&expired, &kept] {
            s.insert(&Access::operator(), m, E).unwrap();
        }
        // Unattributed, an operator handle's changes write nothing.
        assert!(s.set_vector(&kept.id, E).unwrap());
        assert!(every_event(s).is_empty());

        let access = Access::operator()
            .audited("ops", Audit::new(Lane::Operator, "prune-expired", "spine/test"));
        s.audit_as(access.clone());
        let cutoff = EpochSeconds::from_secs(1_800_001_000);
        assert_eq!(s.delete_expired(&[kept.id], cutoff).unwrap(), [false]);
        assert!(every_event(s).is_empty(), "a transaction that changed nothing");
        assert!(!access.audit().unwrap().was_recorded());
        assert_eq!(s.delete_expired(&[expired.id, kept.id], cutoff).unwrap(), [true, false]);
        assert!(s.set_vector(&kept.id, E).unwrap());
        assert!(access.audit().unwrap().was_recorded());
        let events = every_event(s);
        assert_eq!(events.len(), 2, "{events:?}");
        let (vector, delete) = (&events[0], &events[1]);
        assert_eq!(
            (delete.record_ids.as_slice(), delete.scope.as_str()),
            (&[expired.id][..], SCOPE)
        );
        assert_eq!((vector.record_ids.as_slice(), vector.scope.as_str()), (&[kept.id][..], OTHER));
        for e in &events {
            assert_eq!(
                (e.lane, e.action.as_str(), e.actor.as_str()),
                (Lane::Operator, "prune-expired", "ops")
            );
            assert_eq!(
                (e.owner.as_str(), e.client.as_str(), e.outcome.as_str()),
                ("", "spine/test", "ok")
            );
        }
    });
}

#[test]
fn a_page_of_vectors_is_one_transaction_and_one_event() {
    on_both(|s| {
        let a = record(SCOPE, "Deploys on Tuesdays.", "alice", 1_800_000_000);
        let b = record(OTHER, "Use rustls.", "bob", 1_800_000_001);
        let gone = record(SCOPE, "Deleted meanwhile.", "alice", 1_800_000_002);
        for m in [&a, &b] {
            s.insert(&Access::operator(), m, E).unwrap();
        }
        let access =
            Access::operator().audited("ops", Audit::new(Lane::Operator, "reindex", "spine/test"));
        s.audit_as(access.clone());
        let set = s.set_vectors(&[(a.id, E), (gone.id, E), (b.id, E)]).unwrap();
        assert_eq!(set, [true, false, true]);
        assert!(access.audit().unwrap().was_recorded());
        let events = every_event(s);
        assert_eq!(events.len(), 1, "one event for the page: {events:?}");
        let mut both = vec![a.id, b.id];
        both.sort();
        assert_eq!((events[0].record_ids.clone(), events[0].scope.as_str()), (both, ""));
        assert_eq!(events[0].action, "reindex");
        // A page of records that are all gone changes nothing and writes nothing.
        assert_eq!(s.set_vectors(&[(gone.id, E)]).unwrap(), [false]);
        assert_eq!(every_event(s).len(), 1);
    });
}
