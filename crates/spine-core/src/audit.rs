//! Who made a change, for the audit log (docs/observability.md, "Audit log").
//!
//! A call that may change records carries an [`Audit`]: the lane it came in by, the tool or
//! command it runs, the client that sent it. The store writes the call's event from it in the
//! same transaction as the change (`spine_store::audit`), and marks it [recorded]; a call whose
//! store wrote no event — it was refused, found nothing, or changed nothing — has its event
//! appended by the lane once the call returns, with its outcome. Either way one call leaves one
//! event, and a change never commits without its event.
//!
//! [recorded]: Audit::was_recorded

use std::sync::atomic::{AtomicBool, Ordering};

/// How a change reached the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// An MCP tool call (stdio or streamable HTTP).
    Mcp,
    /// A Connect API call.
    Connect,
    /// An operator command (`spine purge`, `spine import`, …).
    Operator,
}

impl Lane {
    /// Every lane, in the order documented.
    pub const ALL: [Lane; 3] = [Lane::Mcp, Lane::Connect, Lane::Operator];

    /// The wire name: `mcp`, `connect`, `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Mcp => "mcp",
            Lane::Connect => "connect",
            Lane::Operator => "operator",
        }
    }

    /// The lane named `s`, if any.
    pub fn parse(s: &str) -> Option<Lane> {
        Lane::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

impl std::fmt::Display for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The attribution of one call that may change records: everything its audit event says
/// except what the store learns as it writes (the records it changed, their scope).
///
/// Invariant: carries no record content, query, tag, summary or token — only names the
/// operator chose (the tool, the client's declared name and version) and the trace id.
#[derive(Debug)]
pub struct Audit {
    /// The lane the call came in by.
    pub lane: Lane,
    /// The tool or operator command, e.g. `update_memory`, `purge`.
    pub action: String,
    /// The client as it named itself (`clientInfo` name and version, `name/version`);
    /// empty when unknown.
    pub client: String,
    /// The call's trace id (32 hex digits) while tracing is on; empty otherwise.
    pub trace_id: String,
    recorded: AtomicBool,
}

impl Audit {
    /// The attribution of a call of `action` that came in by `lane` from `client`.
    pub fn new(lane: Lane, action: impl Into<String>, client: impl Into<String>) -> Self {
        Audit {
            lane,
            action: action.into(),
            client: client.into(),
            trace_id: String::new(),
            recorded: AtomicBool::new(false),
        }
    }

    /// Notes that the store wrote this call's event with its change (committed).
    pub fn mark_recorded(&self) {
        self.recorded.store(true, Ordering::Release);
    }

    /// Whether the store wrote this call's event; if not, the lane appends it.
    pub fn was_recorded(&self) -> bool {
        self.recorded.load(Ordering::Acquire)
    }
}

/// Two attributions are alike when they say the same; whether one was recorded is state, not
/// what it says.
impl PartialEq for Audit {
    fn eq(&self, other: &Self) -> bool {
        (self.lane, &self.action, &self.client, &self.trace_id)
            == (other.lane, &other.action, &other.client, &other.trace_id)
    }
}

impl Eq for Audit {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_read_back_from_their_names() {
        for lane in Lane::ALL {
            assert_eq!(Lane::parse(lane.as_str()), Some(lane));
        }
        assert_eq!(Lane::parse("grpc"), None);
    }

    #[test]
    fn an_attribution_is_recorded_once_marked() {
        let a = Audit::new(Lane::Mcp, "store_memory", "claude-code/2.1");
        assert!(!a.was_recorded());
        a.mark_recorded();
        assert!(a.was_recorded());
        assert_eq!(a, Audit::new(Lane::Mcp, "store_memory", "claude-code/2.1"));
    }
}
