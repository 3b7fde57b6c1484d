//! The audit log: one event for each call that may change records, append-only.
//!
//! Key design decision: a change and its event commit together. Every write method of
//! [`Store`](crate::Store) that changes at least one record writes the call's event in the
//! same transaction (SQLite: the write's savepoint; PostgreSQL: the same statement, as a
//! data-modifying CTE, or the same transaction), from the attribution the call's
//! [`Access`] carries, and then marks the attribution recorded. A call that changes
//! nothing — refused, not found, already in the wanted state — writes no change, so its
//! event is appended on its own by the lane ([`Store::append_audit`]) with its outcome. No
//! change without its event, no event of a change that did not commit.
//!
//! An event holds names and ids, never what a record says: no content, summary, tag or token
//! (docs/observability.md, "Audit log").
//!
//! [`Store::append_audit`]: crate::Store::append_audit

use spine_core::audit::Lane;
use spine_core::{Caller, Clock, RecordId, SystemClock, Timestamp};

use crate::Access;

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// When it was written (the server's clock).
    pub at: Timestamp,
    /// The verified identity that made the call (empty: anonymous or an operator).
    pub actor: String,
    /// The owner key the call acted as.
    pub owner: String,
    /// The lane it came in by.
    pub lane: Lane,
    /// The client as it named itself (`name/version`), empty when unknown.
    pub client: String,
    /// The tool or operator command.
    pub action: String,
    /// The scope of the records it changed when they share one, else empty.
    pub scope: String,
    /// The records it created or changed, in id order.
    pub record_ids: Vec<RecordId>,
    /// `ok`, or the error code the call answered.
    pub outcome: String,
    /// The call's trace id while tracing is on, else empty.
    pub trace_id: String,
}

/// The outcome of a call that succeeded.
pub const OK: &str = "ok";

impl AuditEvent {
    /// The event of `caller`'s attributed call when its store wrote none: the call failed
    /// (`outcome` is its error code), changed nothing, or read `returned` (the records a
    /// recall call returned, with their scopes: `--audit-reads`). `None` for a call without
    /// an attribution, or one whose event was written with its change.
    pub fn unrecorded(
        caller: &Caller,
        outcome: &str,
        returned: Vec<(RecordId, String)>,
    ) -> Option<AuditEvent> {
        let audit = caller.audit()?;
        if audit.was_recorded() {
            return None;
        }
        let (record_ids, scope) = records_and_scope(returned);
        Some(AuditEvent {
            at: SystemClock.now(),
            actor: caller.actor().to_owned(),
            owner: caller.owner().to_owned(),
            lane: audit.lane,
            client: audit.client.clone(),
            action: audit.action.clone(),
            scope,
            record_ids,
            outcome: outcome.to_owned(),
            trace_id: audit.trace_id.clone(),
        })
    }

    /// The event of the run `access` attributes (an operator command's) when no change it made
    /// wrote one: it changed nothing, or failed first (`outcome`). `None` without an
    /// attribution, or once a change was recorded.
    pub fn unrecorded_run(access: &Access, outcome: &str) -> Option<AuditEvent> {
        if access.audit()?.was_recorded() {
            return None;
        }
        let mut e = AuditEvent::attributed(access)?;
        e.outcome = outcome.to_owned();
        Some(e)
    }

    /// The event of a change `access` attributes, over the records it changed with their
    /// scopes: `None` when nothing changed or the access carries no attribution.
    pub(crate) fn of_change(
        access: &Access,
        changed: impl IntoIterator<Item = (RecordId, String)>,
    ) -> Option<AuditEvent> {
        let mut e = AuditEvent::attributed(access)?;
        (e.record_ids, e.scope) = records_and_scope(changed);
        if e.record_ids.is_empty() {
            return None;
        }
        Some(e)
    }

    /// The event of a successful change `access` attributes, before the store knows what it
    /// changed (no records, no scope); `None` without an attribution. PostgreSQL fills in
    /// the records and scope in SQL, from what the change's statement returns.
    pub(crate) fn attributed(access: &Access) -> Option<AuditEvent> {
        let by = access.attribution()?;
        Some(AuditEvent {
            at: SystemClock.now(),
            actor: by.actor.clone(),
            owner: access.owner().to_owned(),
            lane: by.audit.lane,
            client: by.audit.client.clone(),
            action: by.audit.action.clone(),
            scope: String::new(),
            record_ids: vec![],
            outcome: OK.to_owned(),
            trace_id: by.audit.trace_id.clone(),
        })
    }

    /// The record ids as a JSON array (SQLite's column).
    pub(crate) fn ids_json(&self) -> String {
        let ids: Vec<String> = self.record_ids.iter().map(RecordId::to_string).collect();
        serde_json::to_string(&ids).expect("a list of strings always encodes")
    }
}

/// The ids of `records`, in id order without repeats, and the scope they share (empty when
/// they are in several, or there are none).
fn records_and_scope(
    records: impl IntoIterator<Item = (RecordId, String)>,
) -> (Vec<RecordId>, String) {
    let mut ids = Vec::new();
    let mut scope: Option<String> = None;
    let mut one_scope = true;
    for (id, s) in records {
        ids.push(id);
        match &scope {
            None => scope = Some(s),
            Some(first) if *first != s => one_scope = false,
            Some(_) => {}
        }
    }
    ids.sort_unstable();
    ids.dedup();
    (ids, if one_scope { scope.unwrap_or_default() } else { String::new() })
}

/// Which events [`Store::audit_events`](crate::Store::audit_events) lists, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Events at or after this time.
    pub since: Option<Timestamp>,
    /// Events strictly before this time.
    pub until: Option<Timestamp>,
    /// Events of this actor only.
    pub actor: Option<String>,
    /// Events that name this record only.
    pub record: Option<RecordId>,
    /// Events in this scope only.
    pub scope: Option<String>,
    /// Events of this action only.
    pub action: Option<String>,
    /// The most events listed.
    pub limit: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use spine_core::audit::Audit;

    fn id(n: u128) -> RecordId {
        RecordId::from_uuid(uuid::Uuid::from_u128(n))
    }

    #[test]
    fn a_change_names_its_records_in_id_order_and_their_common_scope() {
        let caller = Caller::authenticated("alice@example.com", "alice").with_audit(Audit::new(
            Lane::Mcp,
            "archive_memory",
            "claude-code/2.1",
        ));
        let access = Access::owned(&caller);
        let e = AuditEvent::of_change(&access, [(id(2), "a".into()), (id(1), "a".into())]).unwrap();
        assert_eq!(e.record_ids, vec![id(1), id(2)]);
        assert_eq!((e.scope.as_str(), e.outcome.as_str()), ("a", OK));
        assert_eq!((e.actor.as_str(), e.owner.as_str()), ("alice@example.com", "alice"));
        assert_eq!((e.action.as_str(), e.client.as_str()), ("archive_memory", "claude-code/2.1"));
        let mixed = AuditEvent::of_change(&access, [(id(1), "a".into()), (id(2), "b".into())]);
        assert_eq!(mixed.unwrap().scope, "", "records in several scopes name none");
        assert_eq!(AuditEvent::of_change(&access, []), None, "nothing changed, no event");
        let plain = Access::owned(&Caller::authenticated("a", "alice"));
        assert_eq!(AuditEvent::of_change(&plain, [(id(1), "a".into())]), None);
    }

    #[test]
    fn a_call_recorded_with_its_change_is_not_appended_again() {
        let caller =
            Caller::anonymous().with_audit(Audit::new(Lane::Connect, "restore_memory", ""));
        let e = AuditEvent::unrecorded(&caller, "not_found", vec![]).unwrap();
        assert_eq!((e.lane, e.outcome.as_str()), (Lane::Connect, "not_found"));
        assert!(e.record_ids.is_empty());
        caller.audit().unwrap().mark_recorded();
        assert_eq!(AuditEvent::unrecorded(&caller, OK, vec![]), None);
        assert_eq!(AuditEvent::unrecorded(&Caller::anonymous(), OK, vec![]), None);
    }
}
