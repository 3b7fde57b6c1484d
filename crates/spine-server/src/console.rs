//! The web console at `/console`: three static files embedded in the binary and a
//! configuration document; everything it shows comes from the Connect API on the same port.
//!
//! Key design decision: no private endpoints. The page is a client of `spine.v1.MemoryService`
//! like any other, with the bearer token it obtained itself (authorization code with PKCE,
//! a public client, the token kept in the page's memory); `/console/config.json` only tells
//! it where to sign in. Every response carries a strict Content-Security-Policy: scripts and
//! styles from this origin only, network calls to this origin and the identity provider.

use axum::Router;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::auth::Verifier;

const INDEX_HTML: &str = include_str!("../console/index.html");
const CONSOLE_JS: &str = include_str!("../console/console.js");
const CONSOLE_CSS: &str = include_str!("../console/console.css");

/// Where the console signs in, as `/console/config.json` states it.
#[derive(Clone)]
struct Config {
    /// The configuration document.
    document: String,
    /// The Content-Security-Policy of every console response.
    policy: HeaderValue,
}

/// The console's routes; `verifier` is the server's OIDC configuration, if any.
pub(crate) fn router(verifier: Option<&Verifier>) -> Router {
    let auth = verifier.map(|v| {
        json!({
            "issuer": v.issuer(),
            "client_id": v.console_client_id(),
            "audience": v.audience(),
            "scope": "openid email profile",
        })
    });
    // The identity provider's token endpoint may live on another host than its issuer
    // (discovery says where): any https origin, and the issuer's own origin (which may be
    // plain http on a developer's machine).
    let issuer_origin = verifier.map(|v| origin_of(v.issuer())).unwrap_or_default();
    let policy = format!(
        "default-src 'self'; connect-src 'self' https: {issuer_origin}; img-src 'self' data:; \
         frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    );
    let config = Config {
        document: json!({ "auth": auth }).to_string(),
        policy: HeaderValue::from_str(policy.trim())
            .unwrap_or(HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'")),
    };
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route("/console/callback", get(index))
        .route("/console/console.js", get(script))
        .route("/console/console.css", get(style))
        .route("/console/config.json", get(config_document))
        .with_state(config)
}

/// `scheme://host[:port]` of a URL (the URL itself when it has no path).
fn origin_of(url: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url[..after_scheme + i].to_owned(),
        None => url.to_owned(),
    }
    .chars()
    .filter(|c| !c.is_whitespace() && *c != ';' && *c != ',')
    .collect()
}

fn page(config: &Config, content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (HeaderName::from_static("content-security-policy"), config.policy.clone()),
            (
                HeaderName::from_static("x-content-type-options"),
                HeaderValue::from_static("nosniff"),
            ),
            (HeaderName::from_static("referrer-policy"), HeaderValue::from_static("no-referrer")),
        ],
        body,
    )
        .into_response()
}

async fn index(State(config): State<Config>) -> Response {
    page(&config, "text/html; charset=utf-8", INDEX_HTML)
}

async fn script(State(config): State<Config>) -> Response {
    page(&config, "text/javascript; charset=utf-8", CONSOLE_JS)
}

async fn style(State(config): State<Config>) -> Response {
    page(&config, "text/css; charset=utf-8", CONSOLE_CSS)
}

async fn config_document(State(config): State<Config>) -> Response {
    let mut response = page(&config, "application/json", "");
    *response.body_mut() = config.document.clone().into();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_of_keeps_scheme_host_and_port() {
        assert_eq!(origin_of("https://login.example.com/realms/x"), "https://login.example.com");
        assert_eq!(origin_of("http://127.0.0.1:9000"), "http://127.0.0.1:9000");
        assert_eq!(origin_of("http://127.0.0.1:9000/"), "http://127.0.0.1:9000");
        // Nothing that would end or split the policy's directive survives.
        assert_eq!(origin_of("https://a.example; script-src *"), "https://a.examplescript-src*");
    }
}
