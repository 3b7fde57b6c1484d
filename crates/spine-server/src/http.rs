//! The HTTP app: streamable HTTP MCP at `/mcp` and a liveness probe at `/healthz`.

use axum::Router;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use spine_service::Service;

use crate::SpineMcp;

/// Options of the HTTP app.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Extra `Host` header values to accept besides loopback (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
}

/// The axum router serving `/mcp` and `/healthz`.
pub fn http_router(service: Service, options: HttpOptions) -> Router {
    let mut config = StreamableHttpServerConfig::default();
    if !options.allowed_hosts.is_empty() {
        let mut hosts: Vec<String> =
            ["localhost", "127.0.0.1", "::1", "[::1]"].iter().map(|s| s.to_string()).collect();
        hosts.extend(options.allowed_hosts);
        config = config.with_allowed_hosts(hosts);
    }
    let mcp = StreamableHttpService::new(
        move || Ok(SpineMcp::new(service.clone())),
        LocalSessionManager::default().into(),
        config,
    );
    Router::new().nest_service("/mcp", mcp).route("/healthz", get(|| async { "ok\n" }))
}
