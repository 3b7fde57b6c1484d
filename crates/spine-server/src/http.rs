//! The HTTP app: streamable HTTP MCP at `/mcp`, a liveness probe at `/healthz`, and — with
//! OIDC — the protected-resource metadata of the MCP authorization spec.
//!
//! With a [`Verifier`], every request to `/mcp` must carry `Authorization: Bearer <token>`;
//! the token is verified per request and the resulting [`Caller`] travels in the request's
//! extensions to the tool (see [`Identity::PerRequest`]). A request without a valid token is
//! answered `401` with a `WWW-Authenticate` header pointing at
//! `/.well-known/oauth-protected-resource`, which names the issuer (RFC 9728).

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, HOST, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use spine_service::{Caller, Service};

use crate::SpineMcp;
use crate::auth::Verifier;
use crate::tools::Identity;

/// Where the protected-resource metadata is served (RFC 9728).
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Hosts and origins accepted without configuration: loopback only.
const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "::1", "[::1]"];
const LOOPBACK_ORIGINS: &[&str] = &["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// Options of the HTTP app.
#[derive(Clone, Default)]
pub struct HttpOptions {
    /// Extra `Host` header values to accept besides loopback (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// Extra browser `Origin` values to accept besides loopback ones (`scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// Bearer-token verification; `None` serves every caller as the anonymous bucket.
    pub verifier: Option<Verifier>,
}

/// The axum router serving `/mcp`, `/healthz` and, with OIDC, the resource metadata.
pub fn http_router(service: Service, options: HttpOptions) -> Router {
    let mut config = StreamableHttpServerConfig::default();
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|s| s.to_string()).collect();
    hosts.extend(options.allowed_hosts);
    config = config.with_allowed_hosts(hosts);
    let mut origins: Vec<String> = LOOPBACK_ORIGINS.iter().map(|s| s.to_string()).collect();
    origins.extend(options.allowed_origins);
    config = config.with_allowed_origins(origins).enforce_origin_validation();

    let identity =
        if options.verifier.is_some() { Identity::PerRequest } else { Identity::Anonymous };
    let mcp = StreamableHttpService::new(
        move || Ok(SpineMcp::with_identity(service.clone(), identity.clone())),
        LocalSessionManager::default().into(),
        config,
    );
    let router = Router::new().route("/healthz", get(|| async { "ok\n" }));
    match options.verifier {
        None => router.nest_service("/mcp", mcp),
        Some(verifier) => {
            let guarded = Router::new()
                .nest_service("/mcp", mcp)
                .layer(from_fn_with_state(verifier.clone(), require_bearer));
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

/// Verifies the bearer token of every `/mcp` request; 401 without a valid one.
async fn require_bearer(
    State(verifier): State<Verifier>,
    mut req: Request,
    next: Next,
) -> Response {
    let header = req.headers().get(AUTHORIZATION).and_then(|h| h.to_str().ok());
    let token = header.and_then(|h| {
        let (scheme, token) = h.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    });
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return unauthorized(req.headers(), None);
    };
    match verifier.verify(token).await {
        Ok(caller) => {
            req.extensions_mut().insert::<Caller>(caller);
            next.run(req).await
        }
        Err(e) => {
            tracing::info!(error = %e, "bearer token rejected");
            unauthorized(req.headers(), Some(e.to_string()))
        }
    }
}

/// 401 with the `WWW-Authenticate` challenge of the MCP authorization spec.
fn unauthorized(headers: &HeaderMap, problem: Option<String>) -> Response {
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
    let mut response = (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({"error": {"code": "unauthenticated", "message": message}})),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(WWW_AUTHENTICATE, v);
    }
    response
}
