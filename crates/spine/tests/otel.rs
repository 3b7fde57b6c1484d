//! OpenTelemetry over OTLP (docs/observability.md, "Traces and metrics"): the real binary
//! exporting to a real receiver on a loopback socket, which decodes every request with the
//! protocol's own messages (`opentelemetry-proto`): OTLP/HTTP protobuf here, gRPC once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::common::*;

/// What a receiver got: every decoded request, the raw bytes of all of them, and the
/// headers of the last.
#[derive(Clone, Default)]
struct Received {
    traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
    raw: Arc<Mutex<Vec<u8>>>,
    headers: Arc<Mutex<Option<HeaderMap>>>,
}

impl Received {
    fn spans(&self) -> Vec<Span> {
        let traces = self.traces.lock().unwrap();
        let scopes = traces.iter().flat_map(|r| &r.resource_spans).flat_map(|r| &r.scope_spans);
        scopes.flat_map(|s| s.spans.iter().cloned()).collect()
    }

    /// Every metric received, in the order received.
    fn metrics(&self) -> Vec<Metric> {
        let requests = self.metrics.lock().unwrap();
        let scopes =
            requests.iter().flat_map(|r| &r.resource_metrics).flat_map(|r| &r.scope_metrics);
        scopes.flat_map(|s| s.metrics.iter().cloned()).collect()
    }

    /// The attributes of each data point of the histograms named `name`.
    fn histogram_points(&self, name: &str) -> Vec<HashMap<String, String>> {
        let metrics = self.metrics();
        let histograms = metrics.iter().filter(|m| m.name == name).filter_map(|m| match &m.data {
            Some(Data::Histogram(h)) => Some(h),
            _ => None,
        });
        histograms.flat_map(|h| &h.data_points).map(|p| attrs(&p.attributes)).collect()
    }

    fn span(&self, name: &str) -> Span {
        let spans = self.spans();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("a span named {name:?} among {names:?}"))
            .clone()
    }

    /// The spans below `root` (children, their children…).
    fn under(&self, root: &Span) -> Vec<Span> {
        let spans = self.spans();
        let mut ids = vec![root.span_id.clone()];
        let mut out: Vec<Span> = Vec::new();
        while let Some(id) = ids.pop() {
            for s in spans.iter().filter(|s| s.parent_span_id == id && s.trace_id == root.trace_id)
            {
                ids.push(s.span_id.clone());
                out.push(s.clone());
            }
        }
        out
    }
}

/// Every attribute a span may carry (docs/observability.md, "Spans").
const ATTRIBUTES: &[&str] = &[
    "mcp.method.name",
    "gen_ai.tool.name",
    "gen_ai.operation.name",
    "gen_ai.prompt.name",
    "gen_ai.request.model",
    "mcp.session.id",
    "mcp.protocol.version",
    "jsonrpc.request.id",
    "network.transport",
    "network.protocol.name",
    "error.type",
    "rpc.system",
    "rpc.service",
    "rpc.method",
    "db.system.name",
    "db.operation.name",
    "spine.embed.kind",
    "spine.embed.texts",
    "spine.embed.chars",
    "spine.pool",
    "spine.rerank.documents",
];

/// An OTLP/HTTP receiver on a free loopback port: `POST /v1/traces` and `/v1/metrics` with
/// protobuf bodies. Returns its base URL.
async fn http_receiver() -> (String, Received) {
    let got = Received::default();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(|State(got): State<Received>, headers: HeaderMap, body: Bytes| async move {
                got.raw.lock().unwrap().extend_from_slice(&body);
                let request = ExportTraceServiceRequest::decode(body.as_ref())
                    .expect("an OTLP/HTTP traces body decodes");
                got.traces.lock().unwrap().push(request);
                *got.headers.lock().unwrap() = Some(headers);
                protobuf(ExportTraceServiceResponse::default().encode_to_vec())
            }),
        )
        .route(
            "/v1/metrics",
            post(|State(got): State<Received>, body: Bytes| async move {
                got.raw.lock().unwrap().extend_from_slice(&body);
                let request = ExportMetricsServiceRequest::decode(body.as_ref())
                    .expect("an OTLP/HTTP metrics body decodes");
                got.metrics.lock().unwrap().push(request);
                protobuf(ExportMetricsServiceResponse::default().encode_to_vec())
            }),
        )
        .with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), got)
}

fn protobuf(body: Vec<u8>) -> impl axum::response::IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "application/x-protobuf")], body)
}

/// An OTLP/gRPC trace receiver (tonic, the collector's own service definition).
struct GrpcTraces(Received);

/// An OTLP/gRPC metrics receiver, the same way.
struct GrpcMetrics(Received);

#[tonic::async_trait]
impl MetricsService for GrpcMetrics {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.metrics.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl TraceService for GrpcTraces {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        self.0.raw.lock().unwrap().extend_from_slice(&request.encode_to_vec());
        self.0.traces.lock().unwrap().push(request);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn text(v: &Option<any_value::Value>) -> Option<String> {
    match v {
        Some(AnyValue::StringValue(s)) => Some(s.clone()),
        Some(AnyValue::IntValue(i)) => Some(i.to_string()),
        Some(AnyValue::BoolValue(b)) => Some(b.to_string()),
        Some(AnyValue::DoubleValue(d)) => Some(d.to_string()),
        _ => None,
    }
}

fn attrs(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter().filter_map(|kv| Some((kv.key.clone(), text(&kv.value.as_ref()?.value)?))).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh id of `bytes` random bytes, in hex.
fn random_hex(bytes: usize) -> String {
    (0..bytes).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}

/// Sends SIGTERM and waits for the process to exit (the binary flushes its exports first).
async fn stop(server: &mut Server) {
    let pid = server.child.id().expect("the server is running") as i32;
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(60), server.child.wait())
        .await
        .expect("the server stopped within a minute")
        .unwrap();
    assert!(status.success(), "spine serve exited {status}");
}

/// The Python SDK, in a trace of its own sending `_meta.traceparent`, against `spine serve`
/// exporting OTLP/HTTP protobuf: each MCP request is a SERVER span, the child of the
/// client's span, with the MCP conventions' attributes; a tool error carries `error.type`;
/// the store, the embedding and the fusion are child spans; a Connect call joins the trace
/// its `traceparent` header names; the audit event names the trace; the metrics arrive; and
/// no exported byte holds the stored text, the query, the scope or a tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_reach_a_real_receiver_and_hold_no_content() {
    let Some(python) = crate::common::python() else { return };
    let root = crate::common::repo();
    let (endpoint, got) = http_receiver().await;
    let dir = TempDir::new().unwrap();
    let data = dir.path().to_owned();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=sesame"),
        ("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=spine-0"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
    ];
    let mut server = start_http_env(dir, &[], &env).await;
    let marker = format!("mk{}", random_hex(6));
    let (trace_id, parent_id) = (random_hex(16), random_hex(8));
    let out = tokio::process::Command::new(&python)
        .arg(root.join("tests/python/otel_client.py"))
        .arg(format!("http://{}/mcp", server.addr))
        .args([&trace_id, &parent_id, &marker])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let client: Value = serde_json::from_str(stdout.trim()).expect("the client's JSON line");

    // A Connect call with a W3C traceparent header joins that trace.
    let (connect_trace, connect_parent) = (random_hex(16), random_hex(8));
    let r = reqwest::Client::new()
        .post(format!("http://{}/spine.v1.MemoryService/GetMemory", server.addr))
        .header("content-type", "application/json")
        .header("connect-protocol-version", "1")
        .header("traceparent", format!("00-{connect_trace}-{connect_parent}-01"))
        .body(json!({"id": "0000000000"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404, "a missing id is not_found over Connect");
    // A client of an older protocol opens an HTTP session with `initialize`: its requests
    // name the session, and the session's duration is recorded when it ends.
    let session = http_client_at(&server.addr).await;
    session.list_all_tools().await.unwrap();
    session.cancel().await.unwrap();
    stop(&mut server).await;

    let store = got.span("tools/call store_memory");
    assert_eq!(store.kind, SpanKind::Server as i32);
    assert_eq!(hex(&store.trace_id), trace_id, "the client's trace");
    assert_eq!(hex(&store.parent_span_id), parent_id, "the child of the client's span");
    let a = attrs(&store.attributes);
    assert_eq!(a["mcp.method.name"], "tools/call", "{a:?}");
    assert_eq!(a["gen_ai.tool.name"], "store_memory", "{a:?}");
    assert_eq!(a["gen_ai.operation.name"], "execute_tool", "{a:?}");
    assert_eq!(a["network.transport"], "tcp", "{a:?}");
    assert_eq!(a["mcp.protocol.version"], client["protocol"].as_str().unwrap(), "{a:?}");
    assert!(a.contains_key("jsonrpc.request.id"), "{a:?}");
    assert!(!a.contains_key("error.type"), "{a:?}");
    let children = got.under(&store);
    let names: Vec<&str> = children.iter().map(|s| s.name.as_str()).collect();
    assert!(names.iter().any(|n| n.starts_with("embeddings ")), "{names:?}");
    let insert =
        children.iter().find(|s| s.name == "insert").unwrap_or_else(|| panic!("{names:?}"));
    let db = attrs(&insert.attributes);
    let system = if on_postgres() { "postgresql" } else { "sqlite" };
    assert_eq!(db["db.system.name"], system, "{db:?}");
    assert_eq!(db["db.operation.name"], "insert", "{db:?}");
    assert_eq!(insert.kind, SpanKind::Client as i32);

    let search = got.span("tools/call search_memory");
    assert_eq!(hex(&search.trace_id), trace_id);
    let names: Vec<String> = got.under(&search).into_iter().map(|s| s.name).collect();
    for wanted in ["lexical fusion", "nearest"] {
        assert!(names.iter().any(|n| n == wanted), "{wanted} under search: {names:?}");
    }
    let list = got.span("tools/list");
    assert_eq!(attrs(&list.attributes)["mcp.method.name"], "tools/list");
    let init = attrs(&got.span("initialize").attributes);
    let in_session: Vec<HashMap<String, String>> = got
        .spans()
        .iter()
        .map(|s| attrs(&s.attributes))
        .filter(|a| a.contains_key("mcp.session.id"))
        .collect();
    assert!(
        in_session.iter().any(|a| a["mcp.method.name"] == "tools/list"),
        "the session's tools/list names it: {in_session:?} (initialize: {init:?})"
    );

    // A tool error is an ordinary JSON-RPC result: only the span says it failed.
    let missing = got.span("tools/call get_memory");
    assert_eq!(attrs(&missing.attributes)["error.type"], "not_found");

    let connect = got.span("spine.v1.MemoryService/GetMemory");
    assert_eq!(connect.kind, SpanKind::Server as i32);
    assert_eq!(hex(&connect.trace_id), connect_trace);
    assert_eq!(hex(&connect.parent_span_id), connect_parent);
    let c = attrs(&connect.attributes);
    assert_eq!(c["rpc.system"], "connect_rpc", "{c:?}");
    assert_eq!(c["rpc.service"], "spine.v1.MemoryService", "{c:?}");
    assert_eq!(c["rpc.method"], "GetMemory", "{c:?}");
    assert_eq!(c["error.type"], "not_found", "{c:?}");

    // The resource: the default service name, the operator's attributes; the headers sent.
    let resource = {
        let traces = got.traces.lock().unwrap();
        attrs(&traces[0].resource_spans[0].resource.as_ref().unwrap().attributes)
    };
    assert_eq!(resource["service.name"], "spine", "{resource:?}");
    assert_eq!(resource["k8s.pod.name"], "spine-0", "{resource:?}");
    let headers = got.headers.lock().unwrap().clone().unwrap();
    assert_eq!(headers["x-collector-key"], "sesame");

    // The MCP conventions' histograms, with the failed call under its error type.
    let metrics = got.metrics();
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    for m in metrics.iter().filter(|m| m.name == "mcp.server.operation.duration") {
        assert_eq!(m.unit, "s");
    }
    let points = got.histogram_points("mcp.server.operation.duration");
    let has = |tool: &str, error: Option<&str>| {
        points.iter().any(|p| {
            p.get("gen_ai.tool.name").map(String::as_str) == Some(tool)
                && p.get("error.type").map(String::as_str) == error
        })
    };
    assert!(has("store_memory", None), "{names:?} {points:?}");
    assert!(names.contains(&"mcp.server.session.duration"), "{names:?}");
    assert!(has("get_memory", Some("not_found")), "{points:?}");

    // Only the conventions' attributes, on every span: nothing else can carry a value.
    for span in got.spans() {
        for key in attrs(&span.attributes).keys() {
            assert!(ATTRIBUTES.contains(&key.as_str()), "{:?} carries {key}", span.name);
        }
    }
    // Not one exported byte carries what was stored or asked.
    let raw = got.raw.lock().unwrap().clone();
    let marker_bytes = marker.as_bytes();
    assert!(
        !raw.windows(marker_bytes.len()).any(|w| w == marker_bytes),
        "an export carries the marker {marker}"
    );

    // The write's audit event names its trace.
    let run = spine(&data, &["audit", "--action", "store_memory", "--json"]).await;
    assert!(run.ok, "{}", run.stderr);
    let events = run.json()["events"].as_array().unwrap().clone();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["trace_id"], trace_id.as_str());
    assert_eq!(events[0]["record_ids"][0], client["id"]);
}

/// `spine mcp` exporting OTLP over gRPC to one base endpoint: its spans and metrics reach a
/// gRPC receiver when stdin ends, with `network.transport` `pipe`, a root span for a request
/// that names no parent, the call's duration and the session's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_sessions_export_over_grpc_and_flush_at_the_end_of_input() {
    let got = Received::default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let traces = TraceServiceServer::new(GrpcTraces(got.clone()));
    let metrics = MetricsServiceServer::new(GrpcMetrics(got.clone()));
    tokio::spawn(
        tonic::transport::Server::builder().add_service(traces).add_service(metrics).serve(addr),
    );
    let data = TempDir::new().unwrap();
    let mut cmd = tokio::process::Command::new(SPINE);
    cmd.arg("mcp")
        .arg("--data-dir")
        .arg(data.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_SERVICE_NAME", "spine-stdio");
    backend_env(cmd.as_std_mut(), data.path());
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = rmcp::ServiceExt::serve((), transport).await.expect("initialize over stdio");
    let stored = ok(call(
        &client,
        "store_memory",
        json!({"content": "Deploys go out on Tuesdays.", "scope": "g:project:ops",
               "source": "user-said", "category": "convention"}),
    )
    .await);
    assert!(stored["id"].is_string());
    // Closing stdin ends the session; the process flushes its spans before it exits.
    client.cancel().await.unwrap();
    let mut spans = Vec::new();
    let session_ended = || got.metrics().iter().any(|m| m.name == "mcp.server.session.duration");
    for _ in 0..200 {
        spans = got.spans();
        if spans.iter().any(|s| s.name == "tools/call store_memory") && session_ended() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let store = got.span("tools/call store_memory");
    assert!(store.parent_span_id.is_empty(), "a root span: no parent was named");
    let a = attrs(&store.attributes);
    assert_eq!(a["network.transport"], "pipe", "{a:?}");
    assert!(!a.contains_key("mcp.session.id"), "stdio has no HTTP session: {a:?}");
    assert!(got.spans().iter().any(|s| s.name == "initialize"), "{spans:?}");
    let traces = got.traces.lock().unwrap();
    let resource = attrs(&traces[0].resource_spans[0].resource.as_ref().unwrap().attributes);
    assert_eq!(resource["service.name"], "spine-stdio", "{resource:?}");
    drop(traces);

    // The metrics went over gRPC too: the call's duration, on the pipe, and the session's.
    assert!(session_ended(), "{:?}", got.metrics());
    let calls = got.histogram_points("mcp.server.operation.duration");
    assert!(
        calls.iter().any(|a| a.get("gen_ai.tool.name").map(String::as_str) == Some("store_memory")
            && a.get("network.transport").map(String::as_str) == Some("pipe")),
        "{calls:?}"
    );
}

/// A collector that accepts connections and never answers: every call still succeeds with
/// its usual result, and the spans that no longer fit the bounded queue are dropped and
/// counted in /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_collector_changes_no_result_and_drops_are_counted() {
    let stuck = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", stuck.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = stuck.accept().await {
            held.push(socket);
        }
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics_addr = format!("127.0.0.1:{port}");
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
    ];
    let mut server =
        start_http_env(TempDir::new().unwrap(), &["--metrics-listen", &metrics_addr], &env).await;
    let client = http_client_at(&server.addr).await;
    let stored = ok(call(
        &client,
        "store_memory",
        json!({"content": "Releases are cut from the main branch.", "scope": "s:project:rel",
               "source": "user-said", "category": "convention"}),
    )
    .await);
    for _ in 0..10 {
        let found = ok(call(
            &client,
            "search_memory",
            json!({"query": "where are releases cut from?", "scope": "s:project:rel"}),
        )
        .await);
        assert_eq!(found["memories"][0]["id"], stored["id"], "{found}");
    }
    let text =
        reqwest::get(format!("http://{metrics_addr}/metrics")).await.unwrap().text().await.unwrap();
    let dropped = text
        .lines()
        .find(|l| l.starts_with("spine_otel_spans_dropped_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("spine_otel_spans_dropped_total in {text}"));
    assert!(dropped > 0.0, "{text}");
    client.cancel().await.unwrap();
    server.child.kill().await.unwrap();
}

/// `OTEL_SDK_DISABLED=true` keeps export off whatever endpoint is set: the receiver hears
/// nothing, and the calls are served as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_sdk_disabled_exports_nothing() {
    let (endpoint, got) = http_receiver().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "100"),
    ];
    let mut server = start_http_env(TempDir::new().unwrap(), &[], &env).await;
    let client = http_client_at(&server.addr).await;
    ok(call(
        &client,
        "store_memory",
        json!({"content": "Backups run nightly.", "scope": "d:project:ops",
               "source": "user-said", "category": "convention"}),
    )
    .await);
    client.cancel().await.unwrap();
    stop(&mut server).await;
    assert!(got.raw.lock().unwrap().is_empty(), "nothing was exported");
}
