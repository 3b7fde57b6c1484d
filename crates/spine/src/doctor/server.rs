//! `spine doctor --url`: a running `spine serve` — its /healthz, whether it requires
//! authentication, and whether it answers without authentication beyond loopback.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use anyhow::{Context, Result};

use super::{Report, Status};
use crate::cli::Common;

/// This machine's address on its default route, for checking whether a server bound to
/// every address answers there (no packet is sent: connecting a UDP socket only picks
/// the route).
fn outward_address() -> Option<IpAddr> {
    let socket = UdpSocket::bind("0.0.0.0:0").ok()?;
    // TEST-NET-3 (RFC 5737): never a real destination.
    socket.connect("203.0.113.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// What one probe of a server learned.
struct Probe {
    healthy: bool,
    /// `/mcp` without credentials answered 401.
    auth_required: bool,
    status: u16,
}

async fn probe(http: &reqwest::Client, base: &str) -> Result<Probe> {
    let base = base.trim_end_matches('/');
    let health = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .with_context(|| format!("GET {base}/healthz"))?;
    let healthy =
        health.status().is_success() && health.text().await.unwrap_or_default().trim() == "ok";
    // An initialize without a token: 401 when OIDC is on. Sent with a loopback Host, as a
    // caller on the network can.
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "spine-doctor", "version": "1"}}});
    let mcp = http
        .post(format!("{base}/mcp"))
        .header("host", "localhost")
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .with_context(|| format!("POST {base}/mcp"))?;
    let status = mcp.status().as_u16();
    Ok(Probe { healthy, auth_required: status == 401, status })
}

/// Checks the server at `url`, adding its checks to `report`.
pub(super) async fn check_server(url: &str, _common: &Common, report: &mut Report) {
    const AREA: &str = "server";
    let parsed = match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => u,
        _ => {
            report.problem(
                AREA,
                "url",
                format!("{url} is not an http(s) URL"),
                "pass the server's base URL, e.g. --url http://127.0.0.1:8080",
            );
            return;
        }
    };
    let http = match reqwest::Client::builder().timeout(Duration::from_secs(5)).build() {
        Ok(h) => h,
        Err(e) => {
            report.problem(AREA, "client", format!("{e}"), "report this as a bug");
            return;
        }
    };
    let p = match probe(&http, url).await {
        Ok(p) => p,
        Err(e) => {
            report.problem(
                AREA,
                "health",
                format!("{e:#}"),
                "start `spine serve`, or check --url (host and port)",
            );
            return;
        }
    };
    match p.healthy {
        true => report.add(AREA, "health", Status::Ok, format!("{url}/healthz answers ok")),
        false => report.problem(
            AREA,
            "health",
            format!("{url}/healthz does not answer ok"),
            "check that --url points at `spine serve`",
        ),
    }
    let auth = if p.auth_required {
        "required (OIDC bearer tokens)".to_owned()
    } else {
        format!("none (POST /mcp without a token answered {})", p.status)
    };
    report.add(AREA, "auth", Status::Ok, auth);
    if p.auth_required {
        return;
    }
    // Without authentication, the server must be reachable on loopback only.
    let host = parsed.host_str().unwrap_or_default().trim_matches(['[', ']']);
    let host_ip: Option<IpAddr> = match host {
        "localhost" => Some(IpAddr::from([127, 0, 0, 1])),
        h => h.parse().ok(),
    };
    let unsafe_fix = "configure OIDC (--oidc-issuer, --oidc-audience), or listen on 127.0.0.1 only (--listen 127.0.0.1:PORT) and drop --allow-unauthenticated";
    match host_ip {
        Some(ip) if ip.is_loopback() => {
            let port = parsed.port_or_known_default().unwrap_or(80);
            let Some(outward) = outward_address() else {
                report.add(AREA, "bind", Status::Note, "answers without authentication on loopback; no other address of this machine to check the bind from");
                return;
            };
            let other = format!("{}://{}", parsed.scheme(), SocketAddr::new(outward, port));
            match probe(&http, &other).await {
                Ok(q) if !q.auth_required => report.problem(
                    AREA,
                    "bind",
                    format!("answers without authentication on {other}, a non-loopback address: anyone who can reach it reads and writes every record"),
                    unsafe_fix,
                ),
                Ok(_) => report.add(AREA, "bind", Status::Ok, format!("{other} requires authentication")),
                Err(_) => report.add(AREA, "bind", Status::Ok, format!("loopback only (nothing answers on {other})")),
            }
        }
        Some(_) => report.problem(
            AREA,
            "bind",
            format!("answers without authentication on {url}, a non-loopback address: anyone who can reach it reads and writes every record"),
            unsafe_fix,
        ),
        None => report.problem(
            AREA,
            "bind",
            format!("answers without authentication at {url}, a name that may not be loopback"),
            unsafe_fix,
        ),
    }
}
