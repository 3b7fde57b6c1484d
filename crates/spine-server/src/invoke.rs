//! One call path for every transport: the MCP tools (`tools.rs`) and the Connect methods
//! (`connect/`) both run a service operation through [`invoke`], so argument parsing, the
//! blocking thread, result encoding, the metrics and the logging of internal errors are
//! written once.

use std::time::Instant;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use spine_core::{Error, ErrorCode};
use spine_service::args::parse_args;
use spine_service::{Caller, Service};

/// Runs `op` for `caller` with `args` parsed as its argument struct `A`, on a blocking
/// thread (SQLite and model inference never block the async runtime); encodes its result as
/// JSON and hands it to `finish` (the transport's own response form). The call is counted
/// under `lane` and `method` with its outcome and duration; an internal error is logged.
pub(crate) async fn invoke<A, R, T>(
    lane: &'static str,
    method: &'static str,
    service: &Service,
    caller: Result<Caller, Error>,
    args: Map<String, Value>,
    op: impl FnOnce(&Service, &Caller, A) -> Result<R, Error> + Send + 'static,
    finish: impl FnOnce(Value) -> Result<T, Error>,
) -> Result<T, Error>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: Serialize + Send + 'static,
{
    let started = Instant::now();
    let result = match caller {
        Err(e) => Err(e),
        Ok(caller) => run(service.clone(), caller, args, op).await.and_then(finish),
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
    args: Map<String, Value>,
    op: impl FnOnce(&Service, &Caller, A) -> Result<R, Error> + Send + 'static,
) -> Result<Value, Error>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: Serialize + Send + 'static,
{
    let outcome = tokio::task::spawn_blocking(move || {
        let span = tracing::trace_span!("tool.parse_args").entered();
        let a = parse_args::<A>(args)?;
        drop(span);
        let _span = tracing::trace_span!("tool.service").entered();
        op(&service, &caller, a)
    })
    .await;
    let result = outcome.unwrap_or_else(|join| {
        tracing::error!(error = %join, "call task failed");
        Err(Error::internal("the operation failed unexpectedly"))
    });
    result.and_then(|r| {
        let _span = tracing::trace_span!("tool.encode").entered();
        serde_json::to_value(r).map_err(|e| Error::internal(format!("cannot encode result: {e}")))
    })
}
