//! The audit log as calls write it (`spine_store::audit`): which tools are audited, and the
//! event of a call whose store wrote none.

use spine_core::{Error, RecordId, Timestamp};
use spine_store::audit::OK;
use spine_store::{AuditEvent, AuditQuery};

use crate::{Caller, Service, store_error};

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

    /// The audit events `q` selects, newest first (the console's record history).
    pub fn audit_events(&self, q: &AuditQuery) -> Result<Vec<AuditEvent>, Error> {
        self.store.audit_events(q).map_err(store_error)
    }
}
