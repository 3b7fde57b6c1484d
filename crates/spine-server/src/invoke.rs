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

use spine_core::{Error, ErrorCode};
use spine_service::{Caller, Service};

/// Runs `op` for `caller` with the request `make` builds, on a blocking thread (SQLite and
/// model inference never block the async runtime, and argument parsing runs there too);
/// renders its result with `encode`. The call is counted under `lane` and `method` with its
/// outcome and duration; an internal error is logged.
pub(crate) async fn invoke<A, R, T>(
    lane: &'static str,
    method: &'static str,
    service: &Service,
    caller: Result<Caller, Error>,
    make: impl FnOnce() -> Result<A, Error> + Send + 'static,
    op: impl FnOnce(&Service, &Caller, A) -> Result<R, Error> + Send + 'static,
    encode: impl FnOnce(R) -> Result<T, Error>,
) -> Result<T, Error>
where
    R: Send + 'static,
{
    let started = Instant::now();
    let result = match caller {
        Err(e) => Err(e),
        Ok(caller) => run(service.clone(), caller, make, op).await.and_then(|r| {
            let _span = tracing::trace_span!("tool.encode").entered();
            encode(r)
        }),
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
    R: Send + 'static,
{
    let outcome = tokio::task::spawn_blocking(move || {
        let span = tracing::trace_span!("tool.parse_args").entered();
        let a = make()?;
        drop(span);
        let _span = tracing::trace_span!("tool.service").entered();
        op(&service, &caller, a)
    })
    .await;
    outcome.unwrap_or_else(|join| {
        tracing::error!(error = %join, "call task failed");
        Err(Error::internal("the operation failed unexpectedly"))
    })
}
