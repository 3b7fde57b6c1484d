//! What the HTTP listener refuses before any handler runs, and how: the `Host` / `Origin`
//! guard (DNS rebinding, other sites' pages) and [`refuse`], which answers a refused request
//! without breaking its kept-alive connection.

use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderValue;
use axum::http::header::CONNECTION;
use axum::response::Response;
use serde_json::json;

/// Hosts and origins accepted without configuration: loopback only.
const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "::1", "[::1]"];
const LOOPBACK_ORIGINS: &[&str] = &["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// Which browsers and names may reach the listener: the `Host` values and `Origin` patterns
/// accepted (`scheme://host:*` matches any port), loopback plus the configured ones.
#[derive(Clone)]
pub(crate) struct Guard {
    pub(crate) hosts: Arc<Vec<String>>,
    pub(crate) origins: Arc<Vec<String>>,
}

impl Guard {
    /// Loopback plus `hosts` and `origins` (`--allowed-hosts`, `--allowed-origins`).
    pub(crate) fn new(hosts: Vec<String>, origins: Vec<String>) -> Guard {
        let loopback = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut h = loopback(LOOPBACK_HOSTS);
        h.extend(hosts);
        let mut o = loopback(LOOPBACK_ORIGINS);
        o.extend(origins);
        Guard { hosts: Arc::new(h), origins: Arc::new(o) }
    }
}

fn origin_allowed(origin: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| match p.strip_suffix(":*") {
        Some(base) => {
            origin == base
                || origin.strip_prefix(base).and_then(|r| r.strip_prefix(':')).is_some_and(|port| {
                    !port.is_empty() && port.chars().all(|c| c.is_ascii_digit())
                })
        }
        None => origin == p,
    })
}

fn host_allowed(host: &str, hosts: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().map(|h| format!("[{h}]")).unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h).to_owned(),
    };
    hosts.iter().any(|h| h.eq_ignore_ascii_case(&name) || h.eq_ignore_ascii_case(host))
}

/// Refuses (403) a request whose `Host` is not accepted (DNS rebinding) or whose `Origin`
/// is another site's, as rmcp does for `/mcp`: the layer in front of the Connect API and
/// the console.
pub(crate) async fn guard(
    axum::extract::State(guard): axum::extract::State<Guard>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let allowed = {
        let headers = req.headers();
        let get = |name: axum::http::header::HeaderName| {
            headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
        };
        let host_ok = get(axum::http::header::HOST).is_none_or(|h| host_allowed(&h, &guard.hosts));
        let origin_ok =
            get(axum::http::header::ORIGIN).is_none_or(|o| origin_allowed(&o, &guard.origins));
        host_ok && origin_ok
    };
    if !allowed {
        let body = json!({"code": "permission_denied", "message": "this Host or Origin may not call the Spine API"});
        let response = (axum::http::StatusCode::FORBIDDEN, axum::Json(body)).into_response();
        return refuse(req.into_body(), response).await;
    }
    next.run(req).await
}

/// The bytes of a refused request's body read and dropped to keep its connection usable.
const DRAIN_BYTES: usize = 1 << 20;

/// Sends `response` for a request refused before its body was read. hyper closes a
/// keep-alive connection whose request body was left unread, without saying so, and a client
/// that sends its next request on that connection fails (`EPIPE` in Node's HTTP agent, which
/// the Connect and MCP TypeScript clients use): so the rest of the body is read first, and a
/// body too large for that gets `connection: close` to tell the client not to reuse it.
pub(crate) async fn refuse(body: Body, mut response: Response) -> Response {
    if axum::body::to_bytes(body, DRAIN_BYTES).await.is_err() {
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_hosts_match_like_the_mcp_endpoint() {
        let patterns = vec!["http://localhost:*".to_owned(), "https://console.example".to_owned()];
        assert!(origin_allowed("http://localhost:3000", &patterns));
        assert!(origin_allowed("http://localhost", &patterns));
        assert!(origin_allowed("https://console.example", &patterns));
        assert!(!origin_allowed("http://localhost.evil.example:80", &patterns));
        assert!(!origin_allowed("https://evil.example", &patterns));
        let hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "[::1]".to_owned()];
        assert!(host_allowed("127.0.0.1:8080", &hosts));
        assert!(host_allowed("[::1]:8080", &hosts));
        assert!(!host_allowed("evil.example:8080", &hosts));
    }

    #[test]
    fn loopback_is_always_accepted_and_the_configured_names_too() {
        let g = Guard::new(vec!["memory.example".into()], vec!["https://console.example".into()]);
        assert!(host_allowed("localhost:8080", &g.hosts));
        assert!(host_allowed("memory.example", &g.hosts));
        assert!(!host_allowed("other.example", &g.hosts));
        assert!(origin_allowed("http://127.0.0.1:5173", &g.origins));
        assert!(origin_allowed("https://console.example", &g.origins));
        assert!(!origin_allowed("https://other.example", &g.origins));
    }
}
