//! The server's spans and OTLP metrics (docs/observability.md, "Traces and metrics"), after
//! OpenTelemetry's MCP semantic conventions: one SERVER span per MCP request, named
//! `{mcp.method.name} {target}` (`tools/call search_memory`, `prompts/get bootstrap`,
//! `tools/list`), one per Connect call (`spine.v1.MemoryService/{Method}`), each the child of
//! the caller's span when the request names one; `mcp.server.operation.duration` and
//! `mcp.server.session.duration`.
//!
//! Key design decision: [`Traced`] wraps the MCP handler as a handler of its own, forwarding
//! each request Spine answers (tools, prompts, resources, `initialize`, `ping`) through one
//! place that sees both the JSON-RPC error and a tool result's `isError`, which no HTTP or
//! JSON-RPC status shows. With export off (`spine_core::telemetry::on`) it forwards each
//! request untouched.
//!
//! No attribute carries record content, a query, a summary, tags, a scope, an owner, an actor
//! or a token: only the method, the tool or prompt name, ids of the protocol, versions and
//! Spine's error code.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::Histogram;
use opentelemetry::trace::TraceContextExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams,
    GetPromptResponse, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, NumberOrString,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use spine_core::telemetry::on;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::SpineMcp;

/// How an MCP session reaches the server (`network.transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP.
    Tcp,
    /// stdio.
    Pipe,
}

impl Transport {
    fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Pipe => "pipe",
        }
    }
}

/// The MCP handler with a span and a duration for each request; one per session (an HTTP
/// session's ends when the session closes, stdio's with the input).
pub struct Traced {
    inner: SpineMcp,
    transport: Transport,
    opened: Instant,
    /// Set by the session's `initialize`: only a session that began with one is a session
    /// (`mcp.server.session.duration`); a stateless request is not.
    initialized: AtomicBool,
    /// The protocol version the session last spoke.
    protocol: Mutex<String>,
}

impl SpineMcp {
    /// This handler, traced as [`Traced`] says, for sessions over `transport`.
    pub fn traced(self, transport: Transport) -> Traced {
        Traced {
            inner: self,
            transport,
            opened: Instant::now(),
            initialized: AtomicBool::new(false),
            protocol: Mutex::default(),
        }
    }
}

/// A request's span and what its duration is recorded under, while it runs.
struct Open {
    span: tracing::Span,
    started: Instant,
    attributes: Vec<KeyValue>,
}

impl Traced {
    /// The SERVER span of a request of `method` (`target`: the tool or prompt it names),
    /// the child of the caller's span when the request names one; `None` with export off.
    fn open(
        &self,
        method: &'static str,
        target: Option<&str>,
        cx: &RequestContext<RoleServer>,
        version: Option<String>,
    ) -> Option<Open> {
        if !on() {
            return None;
        }
        let version = version.or_else(|| cx.protocol_version().map(|v| v.to_string()));
        if let Some(v) = &version {
            *self.protocol.lock().unwrap_or_else(|p| p.into_inner()) = v.clone();
        }
        let parts = cx.extensions.get::<axum::http::request::Parts>();
        let span = tracing::info_span!(
            target: "spine::otel",
            "mcp",
            otel.name = match target {
                Some(t) => format!("{method} {t}"),
                None => method.to_owned(),
            },
            otel.kind = "server",
            mcp.method.name = method,
            gen_ai.tool.name = tracing::field::Empty,
            gen_ai.operation.name = tracing::field::Empty,
            gen_ai.prompt.name = tracing::field::Empty,
            mcp.session.id = tracing::field::Empty,
            mcp.protocol.version = tracing::field::Empty,
            jsonrpc.request.id = request_id(&cx.id),
            network.transport = self.transport.as_str(),
            network.protocol.name = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", method),
            KeyValue::new("network.transport", self.transport.as_str()),
        ];
        match (method, target) {
            ("tools/call", Some(t)) => {
                span.record("gen_ai.tool.name", t);
                span.record("gen_ai.operation.name", "execute_tool");
                attributes.push(KeyValue::new("gen_ai.tool.name", t.to_owned()));
            }
            ("prompts/get", Some(t)) => {
                span.record("gen_ai.prompt.name", t);
            }
            _ => {}
        }
        if let Some(v) = version {
            span.record("mcp.protocol.version", v.as_str());
            attributes.push(KeyValue::new("mcp.protocol.version", v));
        }
        if let Some(parts) = parts {
            span.record("network.protocol.name", "http");
            if let Some(id) = parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) {
                span.record("mcp.session.id", id);
            }
        }
        // MCP's own convention first (`params._meta`), else the HTTP request's header.
        let parent = match cx.meta.get_traceparent() {
            Some(traceparent) => parent_of(traceparent, cx.meta.get_tracestate()),
            None => parts.and_then(|p| {
                let header = |name: &str| p.headers.get(name).and_then(|v| v.to_str().ok());
                header("traceparent").and_then(|tp| parent_of(tp, header("tracestate")))
            }),
        };
        if let Some(parent) = parent {
            let _ = span.set_parent(parent);
        }
        Some(Open { span, started: Instant::now(), attributes })
    }

    /// Runs `request` inside its span (when `open`), then records its error type (a JSON-RPC
    /// error's code, or what `failed` finds in a result) and its duration.
    async fn run<T>(
        open: Option<Open>,
        request: impl Future<Output = Result<T, McpError>>,
        failed: impl FnOnce(&T) -> Option<String>,
    ) -> Result<T, McpError> {
        let Some(Open { span, started, mut attributes }) = open else {
            return request.await;
        };
        let result = request.instrument(span.clone()).await;
        let error = match &result {
            Err(e) => Some(e.code.0.to_string()),
            Ok(r) => failed(r),
        };
        if let Some(e) = error {
            span.record("error.type", e.as_str());
            attributes.push(KeyValue::new("error.type", e));
        }
        drop(span);
        instruments().operation.record(started.elapsed().as_secs_f64(), &attributes);
        result
    }
}

/// Nothing in the result says the request failed.
fn fine<T>(_: &T) -> Option<String> {
    None
}

/// Every request Spine answers goes through its span; the rest of the protocol (rmcp's
/// defaults) is the same as the inner handler's.
impl ServerHandler for Traced {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.get_tool(name)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        self.initialized.store(true, Ordering::Relaxed);
        let open = self.open("initialize", None, &cx, Some(request.protocol_version.to_string()));
        Self::run(open, self.inner.initialize(request, cx), fine).await
    }

    async fn ping(&self, cx: RequestContext<RoleServer>) -> Result<(), McpError> {
        let open = self.open("ping", None, &cx, None);
        Self::run(open, self.inner.ping(cx), fine).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let open = self.open("tools/call", Some(&request.name), &cx, None);
        Self::run(open, self.inner.call_tool(request, cx), |r| match r {
            CallToolResponse::Complete(r) if r.is_error == Some(true) => Some(tool_error_code(r)),
            _ => None,
        })
        .await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let open = self.open("tools/list", None, &cx, None);
        Self::run(open, self.inner.list_tools(request, cx), fine).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let open = self.open("prompts/list", None, &cx, None);
        Self::run(open, self.inner.list_prompts(request, cx), fine).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let open = self.open("prompts/get", Some(&request.name), &cx, None);
        Self::run(open, self.inner.get_prompt(request, cx), fine).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let open = self.open("resources/list", None, &cx, None);
        Self::run(open, self.inner.list_resources(request, cx), fine).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let open = self.open("resources/templates/list", None, &cx, None);
        Self::run(open, self.inner.list_resource_templates(request, cx), fine).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        // No target: a resource's URI may name a scope.
        let open = self.open("resources/read", None, &cx, None);
        Self::run(open, self.inner.read_resource(request, cx), fine).await
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        if on() && self.initialized.load(Ordering::Relaxed) {
            let protocol = self.protocol.get_mut().unwrap_or_else(|p| p.into_inner());
            let attributes = [
                KeyValue::new("network.transport", self.transport.as_str()),
                KeyValue::new("mcp.protocol.version", std::mem::take(protocol)),
            ];
            instruments().session.record(self.opened.elapsed().as_secs_f64(), &attributes);
        }
    }
}

/// The SERVER span of one Connect call of `method` (`SearchMemories`), the child of the
/// caller's span when `traceparent` names one; `Span::none()` with export off.
pub(crate) fn connect_span(
    method: &str,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> tracing::Span {
    if !on() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: "spine::otel",
        "connect",
        otel.name = format!("{CONNECT_SERVICE}/{method}"),
        otel.kind = "server",
        rpc.system = "connect_rpc",
        rpc.service = CONNECT_SERVICE,
        rpc.method = method,
        network.transport = "tcp",
        error.type = tracing::field::Empty,
    );
    if let Some(parent) = traceparent.and_then(|tp| parent_of(tp, tracestate)) {
        let _ = span.set_parent(parent);
    }
    span
}

/// The Connect service every method belongs to.
const CONNECT_SERVICE: &str = "spine.v1.MemoryService";

/// Records a failed call's error code on `span` (`error.type`).
pub(crate) fn record_error(span: &tracing::Span, code: &str) {
    if on() {
        span.record("error.type", code);
    }
}

/// The trace id of the span this thread is in (32 hex digits), for the call's audit event;
/// empty with export off or outside a sampled trace's span.
pub(crate) fn current_trace_id() -> String {
    if !on() {
        return String::new();
    }
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    if sc.is_valid() { sc.trace_id().to_string() } else { String::new() }
}

/// The remote parent a W3C `traceparent` (and `tracestate`) names, through the process's
/// propagator; `None` when it names none or is malformed.
fn parent_of(traceparent: &str, tracestate: Option<&str>) -> Option<opentelemetry::Context> {
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
    cx.span().span_context().is_valid().then_some(cx)
}

fn request_id(id: &NumberOrString) -> String {
    match id {
        NumberOrString::Number(n) => n.to_string(),
        NumberOrString::String(s) => s.to_string(),
    }
}

/// Spine's error code in a tool's error result (`{"error": {"code": …}}`, `tools.rs`);
/// `tool_error` for an error result of another shape.
fn tool_error_code(r: &CallToolResult) -> String {
    r.content
        .first()
        .and_then(|c| c.as_text())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t.text).ok())
        .and_then(|v| v.pointer("/error/code")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "tool_error".to_owned())
}

struct Instruments {
    operation: Histogram<f64>,
    session: Histogram<f64>,
}

/// The MCP semantic conventions' histograms, on the process's meter provider (built the
/// first time a request is traced, after the binary installed it).
fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("spine");
        // The conventions' advice for both: seconds, from 10 ms to 5 minutes.
        let buckets =
            vec![0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
        Instruments {
            operation: meter
                .f64_histogram("mcp.server.operation.duration")
                .with_unit("s")
                .with_description("Duration of an MCP request as the server handled it.")
                .with_boundaries(buckets.clone())
                .build(),
            session: meter
                .f64_histogram("mcp.server.session.duration")
                .with_unit("s")
                .with_description("Duration of an MCP session as the server saw it.")
                .with_boundaries(buckets)
                .build(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_error_result_names_spines_code() {
        let e = spine_core::Error::not_found("id", "no such memory");
        assert_eq!(tool_error_code(&crate::tools::error_result(&e)), "not_found");
        let other = CallToolResult::error(vec![rmcp::model::ContentBlock::text("boom")]);
        assert_eq!(tool_error_code(&other), "tool_error");
    }
}
