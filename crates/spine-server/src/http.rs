//! The HTTP app: streamable HTTP MCP at `/mcp`, a liveness probe at `/healthz`, a readiness
//! probe at `/readyz`, and — with OIDC — the protected-resource metadata of the MCP
//! authorization spec.
//!
//! `/healthz` answers `ok` while the process serves HTTP at all. `/readyz` answers `200
//! ready` only when the server can answer calls now — the embedding model loaded, the store
//! answering a cheap read (PostgreSQL reachable, within its call timeout), and the server not
//! stopping — else `503` with `not ready: <reason>`, so a load balancer sends nothing to a node
//! whose database is gone, whose model is still loading, or that is draining after SIGTERM.
//! Neither probe needs a token or an allowed `Host` (orchestrators address pods by IP).
//!
//! With a [`Verifier`], every request to `/mcp` must carry `Authorization: Bearer <token>`;
//! the token is verified per request and the resulting [`Caller`] travels in the request's
//! extensions to the tool (see [`Identity::PerRequest`]). A request without a valid token is
//! answered `401` with a `WWW-Authenticate` header pointing at
//! `/.well-known/oauth-protected-resource`, which names the issuer (RFC 9728).
//!
//! Sessions (MCP streamable HTTP, session management) have a lifetime: a session idle for
//! [`HttpOptions::session_idle_timeout`] is closed and its memory freed, `DELETE /mcp` ends one
//! at once, and a request carrying an ended or unknown `Mcp-Session-Id` is answered `404` so
//! the client starts a new session. At most [`HttpOptions::max_sessions`] are open at a time:
//! beyond it an `initialize` is answered `503` with `Retry-After`, so clients that open
//! sessions and vanish cannot exhaust the server's memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONNECTION, HOST, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use spine_service::{Caller, Service};

use crate::SpineMcp;
use crate::auth::{AuthError, Verifier, parse_bearer};
use crate::guard::{Guard, refuse};
use crate::tools::Identity;
use crate::trace::Transport;

/// Where the protected-resource metadata is served (RFC 9728).
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// How long an idle session lives by default.
pub const DEFAULT_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How many sessions may be open at once by default.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;

/// How often the memory of closed sessions is handed back to the OS.
const REAP_INTERVAL: Duration = Duration::from_secs(10);
/// How many sessions must have closed since the last hand-back for another one.
const REAP_AFTER_CLOSED: usize = 64;

/// The largest `initialize` body read when checking the session cap.
const MAX_INITIALIZE_BYTES: usize = 1 << 20;

/// Options of the HTTP app.
#[derive(Clone)]
pub struct HttpOptions {
    /// Extra `Host` header values to accept besides loopback (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// Extra browser `Origin` values to accept besides loopback ones (`scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// Bearer-token verification; `None` serves every caller as the anonymous bucket.
    pub verifier: Option<Verifier>,
    /// A session without a request for this long is closed.
    pub session_idle_timeout: Duration,
    /// The most sessions open at once; further `initialize` requests get `503`.
    pub max_sessions: usize,
    /// Serve every MCP request on its own, with no session (any node behind a load
    /// balancer can answer any request); clients of protocol 2026-07-28 and later are
    /// served this way regardless.
    pub stateless: bool,
    /// Set once the server is stopping (SIGTERM): `/readyz` answers `503` from then on.
    pub draining: Arc<AtomicBool>,
    /// Hands the allocator's free memory back to the OS once many sessions have closed:
    /// glibc's `malloc_trim` unless the binary's allocator is another
    /// ([`trim_system_allocator`]).
    pub release_memory: fn(),
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            verifier: None,
            session_idle_timeout: DEFAULT_SESSION_IDLE_TIMEOUT,
            max_sessions: DEFAULT_MAX_SESSIONS,
            stateless: false,
            draining: Arc::default(),
            release_memory: trim_system_allocator,
        }
    }
}

/// The axum router serving `/mcp`, `/healthz`, the Connect API, the web console at
/// `/console` and, with OIDC, the resource metadata.
pub fn http_router(service: Service, options: HttpOptions) -> Router {
    let mut config =
        StreamableHttpServerConfig::default().with_legacy_session_mode(!options.stateless);
    let guard = Guard::new(options.allowed_hosts, options.allowed_origins);
    // `/mcp` applies the same lists through rmcp's own checks.
    config = config
        .with_allowed_hosts(guard.hosts.to_vec())
        .with_allowed_origins(guard.origins.to_vec())
        .enforce_origin_validation();
    let authenticated = options.verifier.is_some();
    let connect_service = service.clone();
    let readiness = Readiness { service: service.clone(), draining: options.draining.clone() };

    let identity =
        if options.verifier.is_some() { Identity::PerRequest } else { Identity::Anonymous };
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(options.session_idle_timeout);
    let sessions = Arc::new(sessions);
    let cap = SessionCap {
        sessions: sessions.clone(),
        max: options.max_sessions,
        high_water: Arc::new(AtomicUsize::new(0)),
    };
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let every = REAP_INTERVAL.min(options.session_idle_timeout).max(Duration::from_millis(100));
        runtime.spawn(reclaim_closed_sessions(cap.clone(), every, options.release_memory));
    }
    let mcp = StreamableHttpService::new(
        move || {
            Ok(SpineMcp::with_identity(service.clone(), identity.clone()).traced(Transport::Tcp))
        },
        sessions,
        config,
    );
    let mcp = Router::new()
        .nest_service("/mcp", mcp)
        .layer(from_fn_with_state(cap, cap_sessions))
        .layer(axum::middleware::from_fn(ended_session_no_content))
        .layer(axum::middleware::from_fn(malformed_is_bad_request))
        .layer(from_fn_with_state(Lane::Mcp, oversized_body));
    let connect = Router::new()
        .fallback_service(
            crate::connect::router(connect_service, authenticated).into_axum_service(),
        )
        .layer(from_fn_with_state(Lane::Connect, oversized_body));
    let connect = match &options.verifier {
        None => connect,
        Some(v) => {
            let gate = Bearer { verifier: v.clone(), lane: Lane::Connect };
            connect.layer(from_fn_with_state(gate, require_bearer))
        }
    };
    let console = crate::console::router(options.verifier.as_ref())
        .layer(from_fn_with_state(guard.clone(), crate::guard::guard));
    let connect = connect.layer(from_fn_with_state(guard, crate::guard::guard));
    let router = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz).with_state(readiness))
        .merge(console)
        .merge(connect);
    match options.verifier {
        None => router.merge(mcp),
        Some(verifier) => {
            let gate = Bearer { verifier: verifier.clone(), lane: Lane::Mcp };
            let guarded = mcp.layer(from_fn_with_state(gate, require_bearer));
            let issuer = verifier.issuer().to_owned();
            router
                .route(RESOURCE_METADATA_PATH, get(resource_metadata).with_state(issuer.clone()))
                .route(
                    &format!("{RESOURCE_METADATA_PATH}/mcp"),
                    get(resource_metadata).with_state(issuer),
                )
                .merge(guarded)
        }
    }
}

/// What `/readyz` asks.
#[derive(Clone)]
struct Readiness {
    service: Service,
    draining: Arc<AtomicBool>,
}

/// `200 ready`, or `503 not ready: <reason>` (module docs).
async fn readyz(State(r): State<Readiness>) -> Response {
    let not_ready = |why: &str| {
        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response()
    };
    if r.draining.load(Ordering::SeqCst) {
        return not_ready("the server is stopping (draining the calls in flight)");
    }
    // The store's read blocks (SQLite's connection, PostgreSQL's pool behind its own
    // runtime): off the async workers, as the tools' calls are.
    let service = r.service.clone();
    match tokio::task::spawn_blocking(move || service.readiness()).await {
        Ok(Ok(())) => "ready\n".into_response(),
        Ok(Err(why)) => not_ready(&why),
        Err(e) => not_ready(&format!("the readiness check failed: {e}")),
    }
}

/// `http(s)://host` as the client addressed this server.
fn base_url(headers: &HeaderMap) -> String {
    let host = headers.get(HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    format!("{}://{host}", if https { "https" } else { "http" })
}

/// RFC 9728 protected-resource metadata: which authorization server issues our tokens.
async fn resource_metadata(State(issuer): State<String>, headers: HeaderMap) -> Response {
    let base = base_url(&headers);
    axum::Json(json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": "Spine",
    }))
    .into_response()
}

/// Which API a request is for (a bearer-token check, a body limit): they shape a refusal differently.
#[derive(Clone, Copy)]
enum Lane {
    /// `/mcp`: Spine's error envelope under `error`.
    Mcp,
    /// The Connect API: a Connect error (`code` and `message` at the top level).
    Connect,
}

#[derive(Clone)]
struct Bearer {
    verifier: Verifier,
    lane: Lane,
}

/// Verifies the bearer token of every request; 401 without a valid one.
async fn require_bearer(State(gate): State<Bearer>, mut req: Request, next: Next) -> Response {
    let header = req.headers().get(AUTHORIZATION).and_then(|h| h.to_str().ok());
    let problem = match parse_bearer(header) {
        // No bearer token at all (absent, another scheme, empty): the challenge alone
        // (RFC 6750 §3.1: no error code when the request carries no credentials for it).
        Err(AuthError::Missing | AuthError::Malformed) => {
            crate::metrics::auth_failure("missing_token");
            None
        }
        Err(e) => {
            crate::metrics::auth_failure(e.reason());
            Some(e.to_string())
        }
        Ok(token) => match gate.verifier.verify(token).await {
            Ok(caller) => {
                req.extensions_mut().insert::<Caller>(caller);
                return next.run(req).await;
            }
            Err(e) => {
                tracing::info!(error = %e, "bearer token rejected");
                crate::metrics::auth_failure(e.reason());
                Some(e.to_string())
            }
        },
    };
    let response = unauthorized(req.headers(), gate.lane, problem);
    refuse(req.into_body(), response).await
}

/// 401 with a `WWW-Authenticate` challenge pointing at the protected-resource metadata.
fn unauthorized(headers: &HeaderMap, lane: Lane, problem: Option<String>) -> Response {
    let metadata = format!("{}{RESOURCE_METADATA_PATH}", base_url(headers));
    let mut challenge = format!("Bearer resource_metadata=\"{metadata}\"");
    let message = match &problem {
        Some(p) => {
            let quoted = p.replace(['"', '\\'], "'");
            challenge
                .push_str(&format!(", error=\"invalid_token\", error_description=\"{quoted}\""));
            format!("the bearer token was rejected: {p}")
        }
        None => "this server requires an OIDC bearer token (Authorization: Bearer <token>)".into(),
    };
    let body = match lane {
        Lane::Mcp => json!({"error": {"code": "unauthenticated", "message": message}}),
        Lane::Connect => json!({"code": "unauthenticated", "message": message}),
    };
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(WWW_AUTHENTICATE, v);
    }
    response
}

/// The open sessions and their ceiling.
#[derive(Clone)]
struct SessionCap {
    sessions: Arc<LocalSessionManager>,
    max: usize,
    /// The most sessions seen open since memory was last handed back.
    high_water: Arc<AtomicUsize>,
}

/// A session ended by `DELETE /mcp` is answered `204 No Content` rather than the transport's
/// `202 Accepted`: the MCP specification names no success status, and the official Python
/// SDK logs "Session termination failed: 202" for every session it closes (it accepts 200
/// and 204).
async fn ended_session_no_content(req: Request, next: Next) -> Response {
    let delete = req.method() == Method::DELETE;
    let mut response = next.run(req).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = Body::empty();
        response.headers_mut().remove(axum::http::header::CONTENT_TYPE);
        response.headers_mut().remove(axum::http::header::CONTENT_LENGTH);
    }
    response
}

/// The largest request body either API reads: rmcp's and connect-rust's default, far above
/// every argument limit of the tools.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How much of a body declared too large is read and thrown away so its client hears the
/// refusal; a larger one gets the refusal with `connection: close`.
const DISCARD_BYTES: u64 = 64 * 1024 * 1024;

/// Refuses a body whose `Content-Length` is over [`MAX_BODY_BYTES`] before anything buffers
/// it: `413` on `/mcp`, Connect `resource_exhausted` (HTTP `429`, as the Connect protocol maps
/// it) on the Connect API. The body is read and discarded chunk by chunk first (memory stays
/// flat): a server that answers without reading leaves the client writing into a closed
/// socket, and the client reports a broken pipe instead of the refusal.
async fn oversized_body(State(lane): State<Lane>, req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let Some(declared) = declared.filter(|&n| n > MAX_BODY_BYTES as u64) else {
        return next.run(req).await;
    };
    let message = format!("request body of {declared} bytes exceeds {MAX_BODY_BYTES} bytes");
    let mut response = match lane {
        Lane::Mcp => (StatusCode::PAYLOAD_TOO_LARGE, format!("{message}\n")).into_response(),
        Lane::Connect => (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(json!({"code": "resource_exhausted", "message": message})),
        )
            .into_response(),
    };
    if declared > DISCARD_BYTES || !discard(req.into_body(), DISCARD_BYTES).await {
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Reads `body` to its end without keeping it; false if it is longer than `max` or fails.
async fn discard(body: Body, max: u64) -> bool {
    use axum::body::HttpBody as _;
    let mut body = std::pin::pin!(body);
    let mut read = 0u64;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let Ok(frame) = frame else { return false };
        if let Some(data) = frame.data_ref() {
            read += data.len() as u64;
            if read > max {
                return false;
            }
        }
    }
    true
}

/// rmcp answers every JSON body it cannot decode with `415` and a plain-text reason. When the
/// request did say `application/json`, the body is at fault, not its type: the MCP transport
/// asks for `400` with a JSON-RPC error that has no id — a parse error (-32700) for text that
/// is not JSON (truncated, invalid UTF-8, lone surrogates, nesting deeper than 128 levels), an
/// invalid request (-32600) for JSON that is not a JSON-RPC message (a batch, a bare value).
async fn malformed_is_bad_request(req: Request, next: Next) -> Response {
    let json = req.method() == Method::POST
        && req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"));
    let response = next.run(req).await;
    if !json || response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    let reason = axum::body::to_bytes(response.into_body(), 4096).await.unwrap_or_default();
    let reason = String::from_utf8_lossy(&reason);
    let reason = reason.trim().trim_start_matches("fail to deserialize request body").trim();
    let (code, message) = if reason.contains("unrecognized JSON-RPC message") {
        (-32600, format!("Invalid request: {reason}"))
    } else {
        (-32700, format!("Parse error: {reason}"))
    };
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}})),
    )
        .into_response()
}

/// Answers an `initialize` (a POST without `Mcp-Session-Id` whose method is `initialize`)
/// with `503` while [`SessionCap::max`] sessions are open. Concurrent initializes racing
/// the check can overshoot by their number; the ceiling bounds memory, not an exact count.
async fn cap_sessions(State(cap): State<SessionCap>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST || req.headers().contains_key("mcp-session-id") {
        return next.run(req).await;
    }
    let open = cap.sessions.sessions.read().await.len();
    crate::metrics::sessions(open);
    if open < cap.max {
        cap.high_water.fetch_max(open + 1, Ordering::Relaxed);
        return next.run(req).await;
    }
    // Full: only an initialize opens a session (stateless requests of newer protocol
    // versions do not), so look at the method before refusing.
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_INITIALIZE_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n").into_response();
    };
    let message: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if message.get("method").and_then(|m| m.as_str()) != Some("initialize") {
        return next.run(Request::from_parts(parts, Body::from(bytes))).await;
    }
    tracing::warn!(open, max = cap.max, "session limit reached; initialize refused");
    let id = message.get("id").cloned().unwrap_or(serde_json::Value::Null);
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": -32000,
                "message": format!(
                    "this server has {open} open MCP sessions, its limit (--max-sessions {}); \
                     end unused sessions with DELETE /mcp or retry after idle ones expire",
                    cap.max
                ),
            },
        })),
    )
        .into_response();
    response.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("60"));
    response
}

/// Hands the memory of closed sessions back to the OS once enough of them have closed.
///
/// rmcp frees a session when it expires or is deleted, but the allocator keeps freed memory
/// for reuse (glibc in its per-thread arenas, jemalloc until its decay runs out): after
/// thousands of abandoned sessions expire, the process would stay near its peak size. Every
/// [`REAP_INTERVAL`], if the open sessions are [`REAP_AFTER_CLOSED`] or more below their
/// high-water mark, `release` ([`HttpOptions::release_memory`]) returns the free pages and
/// the mark restarts from the open count.
async fn reclaim_closed_sessions(cap: SessionCap, every: Duration, release: fn()) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let open = cap.sessions.sessions.read().await.len();
        crate::metrics::sessions(open);
        let high_water = cap.high_water.fetch_max(open, Ordering::Relaxed).max(open);
        let closed = high_water - open;
        // A few closed sessions are not worth a trim; stateless requests also raise the mark
        // by one, so a looser test would trim every tick under stateless traffic.
        if closed >= REAP_AFTER_CLOSED {
            tracing::debug!(open, closed, "returning the memory of closed sessions");
            let _ = tokio::task::spawn_blocking(release).await;
            cap.high_water.store(open, Ordering::Relaxed);
        }
    }
}

/// Returns glibc's free memory to the OS (`malloc_trim`), where glibc keeps it otherwise;
/// nothing on other platforms.
pub fn trim_system_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it locks each arena itself and only releases
    // pages the allocator already holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}
