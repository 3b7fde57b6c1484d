//! The audit log as calls write it (`spine_store::audit`): which tools are audited, and the
//! event of a call whose store wrote none.

use spine_core::{Error, RecordId, Timestamp};
use spine_store::audit::OK;
use spine_store::{AuditEvent, AuditQuery};

use crate::args::IdArgs;
use crate::memory::not_found;
use crate::views::{HistoryEvent, HistoryResult};
use crate::{Access, Caller, Service, store_error};

/// The most events a record's history shows.
pub const HISTORY_LIMIT: usize = 100;

/// The most events read for a history: reads (`--audit-reads`) are dropped after reading.
const HISTORY_SCAN: usize = 5_000;

/// The tools that may change records: each call of one leaves exactly one audit event,
/// whatever its outcome (docs/observability.md, "Audit log").
pub const WRITING_TOOLS: [&str; 11] = [
    "store_memory",
    "schedule_memory",
    "update_memory",
    "delete_memory",
    "delete_all",
    "supersede_memory",
    "archive_memory",
    "restore_memory",
    "set_visibility",
    "store_rule",
    "store_discovery",
];

/// The tools that recall records: with `--audit-reads` each call of one leaves one event
/// naming the records it returned (never the query).
pub const RECALL_TOOLS: [&str; 7] = [
    "search_memory",
    "search_discovery",
    "get_memory",
    "list_memory",
    "list_scheduled",
    "list_rules",
    "related_memories",
];

/// Whether calls of `tool` may change records (and are always audited).
pub fn is_writing_tool(tool: &str) -> bool {
    WRITING_TOOLS.contains(&tool)
}

impl Service {
    /// The same service auditing recall calls too when `on` (`--audit-reads`).
    pub fn with_audit_reads(self, on: bool) -> Self {
        Service { audit_reads: on, ..self }
    }

    /// Whether calls of `tool` leave an audit event: every writing tool; the recall tools
    /// with `--audit-reads`.
    pub fn audits(&self, tool: &str) -> bool {
        is_writing_tool(tool) || (self.audit_reads && RECALL_TOOLS.contains(&tool))
    }

    /// Appends the audit event of `caller`'s call once it has run, when its store did not
    /// write one with a change: the call was refused or failed (`outcome` its error), changed
    /// nothing, or only read (`outcome` the records it returned, with their scopes). A call
    /// without an attribution writes nothing. An event that cannot be appended (the store
    /// cannot write) is logged; the call's answer stands.
    pub fn record_call(&self, caller: &Caller, outcome: Result<Vec<(RecordId, String)>, &Error>) {
        let (code, returned) = match outcome {
            Ok(returned) => (OK, returned),
            Err(e) => (e.code.as_str(), Vec::new()),
        };
        let Some(event) = AuditEvent::unrecorded(caller, code, returned) else { return };
        if let Err(e) = self.store.append_audit(&event) {
            tracing::warn!(error = %e, action = %event.action, "audit event not written");
        }
    }

    /// Removes the audit events written before `before` (`--audit-retention`): how many.
    pub fn prune_audit(&self, before: Timestamp) -> Result<u64, Error> {
        self.store.prune_audit(before).map_err(store_error)
    }

    /// The audit events `q` selects, newest first.
    pub fn audit_events(&self, q: &AuditQuery) -> Result<Vec<AuditEvent>, Error> {
        self.store.audit_events(q).map_err(store_error)
    }

    /// A record's history (the console; Connect's GetMemoryHistory): the events of the
    /// changes that name it (a refused attempt names no record), newest first, at most
    /// [`HISTORY_LIMIT`], for a record `caller` can read (any state); `not_found` otherwise,
    /// exactly like a missing id. Reads (`--audit-reads`) are left out: who else read a shared record is
    /// the operator's to know (`spine audit`), not every reader's.
    pub fn memory_history(&self, caller: &Caller, a: IdArgs) -> Result<HistoryResult, Error> {
        let m = self
            .store
            .resolve(&Access::read(caller), &a.id.id)
            .map_err(store_error)?
            .ok_or_else(|| not_found(&a.id.input))?;
        let q = AuditQuery { record: Some(m.id), limit: HISTORY_SCAN, ..AuditQuery::default() };
        let mut events: Vec<HistoryEvent> = self
            .store
            .audit_events(&q)
            .map_err(store_error)?
            .into_iter()
            .filter(|e| !RECALL_TOOLS.contains(&e.action.as_str()))
            .map(HistoryEvent::from)
            .collect();
        let truncated = events.len() > HISTORY_LIMIT;
        events.truncate(HISTORY_LIMIT);
        Ok(HistoryResult { id: m.id, events, truncated })
    }
}
