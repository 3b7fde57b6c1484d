//! One call path for every transport: the MCP tools (`tools.rs`) and the Connect methods
//! (`connect/`) both run a service operation through [`invoke`], so the blocking thread, the
//! metrics and the logging of internal errors are written once.
//!
//! Key design decision: the transport brings its own two ends. `make` builds the
//! operation's request from the transport's message (MCP: `parse_args` over the JSON
//! arguments; Connect: `TryFrom` the proto message) and `encode` renders the result in the
//! transport's form (MCP: JSON; Connect: `From` the view into the proto response), so
//! neither transport passes through the other's encoding.

use std::time::Instant;

use spine_core::audit::{Audit, Lane};
use spine_core::{Error, ErrorCode};
use spine_service::views::Returned;
use spine_service::{Caller, Service};

/// Who sent a call, as its audit event names it: the transport's lane, and the client as it
/// named itself (`name/version`; empty when unknown).
pub(crate) struct Origin {
    pub(crate) lane: Lane,
    pub(crate) client: String,
}

/// Runs `op` for `caller` with the request `make` builds, on a blocking thread (SQLite and
/// model inference never block the async runtime, and argument parsing runs there too);
/// renders its result with `encode`. The call is counted under its lane and `method` with
/// its outcome and duration; an internal error is logged. A call of a tool that may change
/// records leaves one audit event, refused and failed calls included.
pub(crate) async fn invoke<A, R, T>(
    origin: Origin,
    method: &'static str,
    service: &Service,
    caller: Result<Caller, Error>,
    make: impl FnOnce() -> Result<A, Error> + Send + 'static,
    op: impl FnOnce(&Service, &Caller, A) -> Result<R, Error> + Send + 'static,
    encode: impl FnOnce(R) -> Result<T, Error>,
) -> Result<T, Error>
where
    R: Returned + Send + 'static,
{
    let started = Instant::now();
    let lane = origin.lane.as_str();
    let result = match caller {
        Err(e) => Err(e),
        Ok(caller) => {
            let tool = tool_of(origin.lane, method);
            let caller = if service.audits(&tool) {
                let mut audit = Audit::new(origin.lane, tool, origin.client);
                audit.trace_id = crate::trace::current_trace_id();
                caller.with_audit(audit)
            } else {
                caller
            };
            run(service.clone(), caller, make, op).await.and_then(|r| {
                let _span = tracing::trace_span!("tool.encode").entered();
                encode(r)
            })
        }
    };
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) => e.code.as_str(),
    };
    crate::metrics::call(lane, method, outcome, started.elapsed());
    if let Err(e) = &result
        && e.code == ErrorCode::Internal
    {
        tracing::error!(error = %e, lane, method, "call failed");
    }
    result
}

async fn run<A, R>(
    service: Service,
    caller: Caller,
    make: impl FnOnce() -> Result<A, Error> + Send + 'static,
    op: impl FnOnce(&Service, &Caller, A) -> Result<R, Error> + Send + 'static,
) -> Result<R, Error>
where
    R: Returned + Send + 'static,
{
    // The call's span (its transport's SERVER span) goes on with it to the blocking thread.
    let span =
        if spine_core::telemetry::on() { tracing::Span::current() } else { tracing::Span::none() };
    let outcome = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let out = (|| {
            let span = tracing::trace_span!("tool.parse_args").entered();
            let a = make()?;
            drop(span);
            let _span = tracing::trace_span!("tool.service").entered();
            op(&service, &caller, a)
        })();
        // A refused or failed call, one that changed nothing, and an audited read are
        // recorded here; a change was recorded with it, in its transaction.
        service.record_call(&caller, out.as_ref().map(Returned::returned));
        out
    })
    .await;
    outcome.unwrap_or_else(|join| {
        tracing::error!(error = %join, "call task failed");
        Err(Error::internal("the operation failed unexpectedly"))
    })
}

/// The tool a call of `method` on `lane` runs: an MCP tool's own name; for a Connect method,
/// the tool it mirrors (`SearchMemories`: `search_memory`), else its name in snake case
/// (`ArchiveMemory`: `archive_memory`, `ListScopes`: `list_scopes`).
fn tool_of(lane: Lane, method: &str) -> String {
    match (lane, method) {
        (Lane::Connect, "SearchMemories") => "search_memory".to_owned(),
        (Lane::Connect, "ListMemories") => "list_memory".to_owned(),
        (Lane::Connect, _) => {
            let mut tool = String::with_capacity(method.len() + 4);
            for (i, c) in method.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    tool.push('_');
                }
                tool.push(c.to_ascii_lowercase());
            }
            tool
        }
        (Lane::Mcp | Lane::Operator, _) => method.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spine_service::audit::is_writing_tool;

    #[test]
    fn connect_methods_name_their_tools() {
        assert_eq!(tool_of(Lane::Connect, "ArchiveMemory"), "archive_memory");
        assert_eq!(tool_of(Lane::Connect, "RestoreMemory"), "restore_memory");
        assert_eq!(tool_of(Lane::Connect, "SearchMemories"), "search_memory");
        assert_eq!(tool_of(Lane::Connect, "ListMemories"), "list_memory");
        assert_eq!(tool_of(Lane::Connect, "RelatedMemories"), "related_memories");
        assert_eq!(tool_of(Lane::Mcp, "delete_all"), "delete_all");
        assert!(is_writing_tool(&tool_of(Lane::Connect, "ArchiveMemory")));
        assert!(!is_writing_tool(&tool_of(Lane::Connect, "SearchMemories")));
    }
}
