//! OIDC end to end: the real `spine` binary with `--oidc-issuer` pointing at a local issuer
//! (spine-testkit), driven over streamable HTTP and stdio (SPEC Authentication, Errors 2).
//!
//! The leak suite runs every tool as a second owner and checks that nothing of the first
//! owner's private records — values, ids, short ids, counts or scope names — comes back,
//! and that every write is refused as not_found.

use std::process::Stdio;

use rmcp::ServiceExt;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};
use spine_testkit::TestIssuer;
use tempfile::TempDir;

use crate::common::*;

const AUDIENCE: &str = "spine-tests";

async fn oidc_server(issuer: &TestIssuer, extra: &[&str]) -> Server {
    let iss = issuer.issuer();
    let mut args = vec!["--oidc-issuer", iss.as_str(), "--oidc-audience", AUDIENCE];
    args.extend_from_slice(extra);
    start_http_with(&args).await
}

async fn http_client(server: &Server, token: &str) -> Client {
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", server.addr))
            .auth_header(token);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("initialize over HTTP")
}

fn token(issuer: &TestIssuer, email: &str) -> String {
    issuer.mint(issuer.claims_for(email, AUDIENCE))
}

async fn post_initialize(addr: &str, auth: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("http://{addr}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}));
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn http_requires_a_valid_bearer_token_and_points_at_the_issuer() {
    let issuer = TestIssuer::start().await;
    let mut server = oidc_server(&issuer, &[]).await;
    let addr = server.addr.clone();

    // No token: 401 with the challenge of the MCP authorization spec.
    let r = post_initialize(&addr, None).await;
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    let metadata_url = format!("http://{addr}/.well-known/oauth-protected-resource");
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{challenge}");
    let metadata: Value = reqwest::get(&metadata_url).await.unwrap().json().await.unwrap();
    assert_eq!(metadata["authorization_servers"], json!([issuer.issuer()]));
    assert_eq!(metadata["resource"], format!("http://{addr}/mcp"));

    // Every kind of bad token is refused before MCP sees it.
    let mut expired = issuer.claims_for("a@example.com", AUDIENCE);
    expired["exp"] = json!(now() - 3600);
    let mut early = issuer.claims_for("a@example.com", AUDIENCE);
    early["nbf"] = json!(now() + 3600);
    let mut wrong_iss = issuer.claims_for("a@example.com", AUDIENCE);
    wrong_iss["iss"] = json!("http://127.0.0.1:1");
    let ok_claims = issuer.claims_for("a@example.com", AUDIENCE);
    let bad = [
        ("malformed", "not-a-jwt".to_owned()),
        ("bad signature", issuer.mint_bad_signature(ok_claims.clone())),
        ("expired", issuer.mint(expired)),
        ("not yet valid", issuer.mint(early)),
        ("wrong issuer", issuer.mint(wrong_iss)),
        ("wrong audience", issuer.mint(issuer.claims_for("a@example.com", "other"))),
        ("alg none", issuer.mint_none(ok_claims.clone())),
        ("HS256 with the public key", issuer.mint_hs256_with_public_key(ok_claims.clone())),
        ("unknown kid", issuer.mint_unknown_kid(ok_claims.clone())),
    ];
    for (what, t) in bad {
        let r = post_initialize(&addr, Some(&format!("Bearer {t}"))).await;
        assert_eq!(r.status(), 401, "{what} must be refused");
        let challenge = r.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.contains("error=\"invalid_token\""), "{what}: {challenge}");
    }
    let r = post_initialize(&addr, Some("Basic dXNlcjpwYXNz")).await;
    assert_eq!(r.status(), 401, "only bearer tokens");

    // A valid token works end to end, and the record belongs to the token's owner.
    let client = http_client(&server, &token(&issuer, "alice@example.com")).await;
    let s = ok(call(
        &client,
        "store_memory",
        json!({
        "content": "Alice prefers squash merges.", "scope": "a:project:spine",
        "source": "user-said", "category": "preference"}),
    )
    .await);
    let got = ok(call(&client, "get_memory", json!({"id": s["id"]})).await);
    assert_eq!(got["owner"], "alice@example.com");
    assert_eq!(got["actor"], "alice@example.com");
    client.cancel().await.unwrap();

    // /metrics counts the refusals by reason, and says nothing of the tokens.
    let text = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    for (reason, n) in
        [("missing_token", 2), ("expired", 1), ("malformed", 1), ("wrong_audience", 1)]
    {
        let series = format!("spine_auth_failures_total{{reason=\"{reason}\"}} {n}");
        assert!(text.lines().any(|l| l == series), "{series} in {text}");
    }
    assert!(!text.contains("alice"), "no owner in the metrics");
    server.child.kill().await.unwrap();
}

/// A successful call whose strings are collected into `seen`.
async fn bob_ok(bob: &Client, seen: &mut Vec<String>, tool: &'static str, args: Value) -> Value {
    let v = ok(call(bob, tool, args).await);
    strings(&v, seen);
    v
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Every string in `v`, recursively (keys and values).
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => {
            for (k, x) in o {
                out.push(k.clone());
                strings(x, out);
            }
        }
        _ => {}
    }
}

#[tokio::test]
async fn a_second_owner_sees_and_changes_nothing_private_over_http() {
    let issuer = TestIssuer::start().await;
    let mut server = oidc_server(&issuer, &[]).await;
    let alice = http_client(&server, &token(&issuer, "alice@example.com")).await;
    let bob = http_client(&server, &token(&issuer, "bob@example.com")).await;
    leak_suite(&alice, &bob).await;
    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
    server.child.kill().await.unwrap();
}

#[tokio::test]
async fn a_second_owner_sees_and_changes_nothing_private_over_stdio() {
    let issuer = TestIssuer::start().await;
    let dir = TempDir::new().unwrap();
    let alice =
        stdio_with_token(&issuer, dir.path(), &token(&issuer, "alice@example.com"), &[]).await;
    let bob = stdio_with_token(&issuer, dir.path(), &token(&issuer, "bob@example.com"), &[]).await;
    leak_suite(&alice, &bob).await;
    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
}

/// Alice writes private, scheduled, discovery, shared and rule records; Bob runs every tool
/// against them and his own.
async fn leak_suite(alice: &Client, bob: &Client) {
    // Alice's private world, in a scope only she uses.
    let secret_scope = "alice-run:project:secret";
    let p = ok(call(
        alice,
        "store_memory",
        json!({
        "content": "The staging database password rotates on Mondays.", "scope": secret_scope,
        "source": "user-said", "category": "gotcha", "tags": ["alice-only"],
        "citations": [{"kind": "file", "ref": "deploy/staging.tf"}]}),
    )
    .await);
    let sched = ok(call(
        alice,
        "schedule_memory",
        json!({
        "content": "Staging freeze next quarter.", "scope": secret_scope, "source": "user-said",
        "category": "decision", "not_before": "2999-01-01T00:00:00Z"}),
    )
    .await);
    let d = ok(call(alice, "store_discovery", json!({
        "content": "Staging is provisioned by deploy/staging.tf.", "kind": "fact",
        "scope": "discovery:repo:secret", "citations": [{"kind": "file", "ref": "deploy/staging.tf"}]
    })).await);
    // Alice's shared record and rule are readable by Bob (read only).
    let shared_scope = "team:project:spine";
    let sh = ok(call(
        alice,
        "store_memory",
        json!({
        "content": "We deploy staging with Terraform.", "scope": shared_scope,
        "source": "user-said", "category": "decision", "tags": ["deploy"]}),
    )
    .await);
    ok(call(alice, "set_visibility", json!({"id": sh["id"], "shared": true})).await);
    let rule = ok(call(
        alice,
        "store_rule",
        json!({
        "content": "Never apply Terraform from a laptop.", "scope": "rule:repo:spine",
        "summary": "No laptop applies"}),
    )
    .await);
    // A shared scheduled record: readable by Bob, but list_scheduled stays owner-only.
    let shared_sched = ok(call(
        alice,
        "schedule_memory",
        json!({
        "content": "Team offsite freeze.", "scope": shared_scope, "source": "user-said",
        "category": "decision", "not_before": "2999-01-01T00:00:00Z"}),
    )
    .await);
    ok(call(alice, "set_visibility", json!({"id": shared_sched["id"], "shared": true})).await);
    let own = ok(call(
        bob,
        "store_memory",
        json!({
        "content": "Bob deploys staging with Terraform too.", "scope": shared_scope,
        "source": "agent-inferred", "category": "convention", "tags": ["deploy"],
        "citations": [{"kind": "file", "ref": "deploy/staging.tf"}]}),
    )
    .await);

    let private_ids = [&p, &sched, &d];
    let mut forbidden: Vec<String> = vec![
        secret_scope.into(),
        "discovery:repo:secret".into(),
        "alice-only".into(),
        "The staging database password rotates on Mondays.".into(),
        "Staging freeze next quarter.".into(),
        "Staging is provisioned by deploy/staging.tf.".into(),
    ];
    for r in private_ids {
        forbidden.push(r["id"].as_str().unwrap().into());
        forbidden.push(r["short_id"].as_str().unwrap().into());
    }
    // Strings Bob saw in results (must hold nothing private) and in refusals and batch
    // rows (may echo ids Bob himself sent, nothing else).
    let mut seen = Vec::new();
    let mut echoes = Vec::new();

    // Reads.
    let s = bob_ok(
        bob,
        &mut seen,
        "search_memory",
        json!({"query": "staging database password", "cross_spine": true, "k": 50}),
    )
    .await;
    assert_eq!(
        s["recall_gate_hidden"],
        json!({"total": 1, "archived": 0, "superseded": 0, "expired": 0, "scheduled": 1}),
        "only the shared scheduled record is counted, never Alice's private one"
    );
    assert!(s["searched_scopes"].as_array().unwrap().iter().all(|x| x != secret_scope));
    let s = bob_ok(
        bob,
        &mut seen,
        "search_memory",
        json!({"query": "password", "scope": secret_scope}),
    )
    .await;
    assert_eq!(s["memories"], json!([]));
    let l =
        bob_ok(bob, &mut seen, "list_memory", json!({"cross_spine": true, "limit": 1000})).await;
    let ids: Vec<&Value> = l["memories"].as_array().unwrap().iter().map(|m| &m["id"]).collect();
    assert!(ids.contains(&&sh["id"]) && ids.contains(&&own["id"]));
    assert_eq!(l["recall_gate_hidden"]["total"], 1, "the shared scheduled record only");
    let l = bob_ok(bob, &mut seen, "list_scheduled", json!({"cross_spine": true, "state": "all"}))
        .await;
    assert_eq!(l["memories"], json!([]), "owner-only, even for shared records");
    let t = bob_ok(bob, &mut seen, "list_tags", json!({})).await;
    assert_eq!(t["tags"], json!([{"tag": "deploy", "count": 2}]));
    let disc = bob_ok(
        bob,
        &mut seen,
        "search_discovery",
        json!({"query": "staging", "cross_spine": true}),
    )
    .await;
    assert_eq!(disc["discoveries"], json!([]));
    let rules = bob_ok(bob, &mut seen, "list_rules", json!({})).await;
    assert_eq!(rules["rules"][0]["id"], rule["id"], "rules are always shared");
    let rel = bob_ok(bob, &mut seen, "related_memories", json!({"id": own["id"], "k": 50})).await;
    let related: Vec<&Value> =
        rel["related"].as_array().unwrap().iter().map(|r| &r["memory"]["id"]).collect();
    assert!(related.contains(&&sh["id"]), "shared records relate");
    let got = bob_ok(bob, &mut seen, "get_memory", json!({"id": sh["id"]})).await;
    assert_eq!(got["visibility"], "shared");

    // Every read or write of a private record is the one not_found, echoing only the input.
    let mut refused = Vec::new();
    for r in private_ids {
        for handle in [&r["id"], &r["short_id"]] {
            refused.push(("get_memory", json!({"id": handle})));
            refused.push(("related_memories", json!({"id": handle})));
            refused.push(("update_memory", json!({"id": handle, "content": "pwned"})));
            refused.push(("delete_memory", json!({"id": handle})));
            refused.push(("set_visibility", json!({"id": handle, "shared": true})));
            refused.push((
                "supersede_memory",
                json!({"content": "pwned", "scope": shared_scope,
                "source": "user-said", "category": "decision", "supersedes": [handle]}),
            ));
            refused.push((
                "store_discovery",
                json!({"id": handle, "content": "pwned", "kind": "fact",
                "scope": "discovery:repo:secret", "citations": [{"kind": "url", "ref": "x"}]}),
            ));
        }
    }
    // Writes to Alice's shared record and rule: sharing grants read only.
    for r in [&sh, &rule] {
        refused.push(("update_memory", json!({"id": r["id"], "content": "pwned", "summary": "x"})));
        refused.push(("delete_memory", json!({"id": r["id"]})));
        refused.push(("set_visibility", json!({"id": r["id"], "shared": false})));
        refused.push((
            "supersede_memory",
            json!({"content": "pwned", "scope": shared_scope,
            "source": "user-said", "category": "decision", "supersedes": [r["id"]]}),
        ));
    }
    refused.push((
        "store_rule",
        json!({"id": rule["id"], "content": "pwned",
        "scope": "rule:repo:spine", "summary": "pwned"}),
    ));
    for (tool, args) in refused {
        let e = err(call(bob, tool, args.clone()).await);
        assert_eq!(e["code"], "not_found", "{tool} {args}");
        strings(&e, &mut echoes);
    }
    for tool in ["archive_memory", "restore_memory"] {
        let ids = json!([p["id"], sched["short_id"], d["id"], sh["id"], rule["id"]]);
        let r = ok(call(bob, tool, json!({ "ids": ids })).await);
        strings(&r, &mut echoes);
        for row in r["results"].as_array().unwrap() {
            assert_eq!(row["outcome"], "not_found", "{tool}: {row}");
            assert_eq!(row["id"], "", "{tool}: {row}");
        }
    }
    let cleared = bob_ok(bob, &mut seen, "delete_all", json!({"scope": secret_scope})).await;
    assert_eq!(cleared["deleted"], 0);
    let cleared = bob_ok(bob, &mut seen, "delete_all", json!({"scope": shared_scope})).await;
    assert_eq!(cleared["deleted"], 1, "only Bob's own record");

    // Nothing private leaked: no value, id, short id, tag or scope name in any result, and
    // refusals echo only the ids Bob sent — never content, tags or scope names.
    let echoed: Vec<String> = private_ids
        .iter()
        .flat_map(|r| {
            [r["id"].as_str().unwrap().to_owned(), r["short_id"].as_str().unwrap().to_owned()]
        })
        .collect();
    for f in &forbidden {
        assert!(!seen.iter().any(|s| s.contains(f.as_str())), "Bob saw {f:?} in a result");
        if !echoed.contains(f) {
            assert!(!echoes.iter().any(|s| s.contains(f.as_str())), "Bob saw {f:?} in a refusal");
        }
    }

    // Alice's records are all intact.
    for r in [&p, &sched, &d, &sh, &rule] {
        let got = ok(call(alice, "get_memory", json!({"id": r["id"]})).await);
        assert!(got.get("archived_at").is_none());
        assert_ne!(got["content"], "pwned");
    }
}

#[tokio::test]
async fn the_token_is_checked_per_request_not_per_session() {
    let issuer = TestIssuer::start().await;
    let mut server = oidc_server(&issuer, &[]).await;
    let alice = token(&issuer, "alice@example.com");
    let http = reqwest::Client::new();
    let url = format!("http://{}/mcp", server.addr);
    let r = post_initialize(&server.addr, Some(&format!("Bearer {alice}"))).await;
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let send = |auth: Option<String>, body: Value| {
        let mut req = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body);
        if let Some(a) = auth {
            req = req.header("authorization", format!("Bearer {a}"));
        }
        req.send()
    };
    let r =
        send(Some(alice.clone()), json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .unwrap();
    assert!(r.status().is_success());
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "list_tags", "arguments": {}}});
    // Same session, no token: refused.
    assert_eq!(send(None, list.clone()).await.unwrap().status(), 401);
    // Same session, an expired token: refused.
    let mut expired = issuer.claims_for("alice@example.com", AUDIENCE);
    expired["exp"] = json!(now() - 3600);
    assert_eq!(send(Some(issuer.mint(expired)), list.clone()).await.unwrap().status(), 401);
    // Same session, Bob's token: the call runs as Bob.
    let store = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "store_memory", "arguments": {"content": "Stored as Bob.",
        "scope": "s:t:r", "source": "user-said", "category": "decision"}}});
    let bob = token(&issuer, "bob@example.com");
    let text = send(Some(bob.clone()), store).await.unwrap().text().await.unwrap();
    let id = sse_result(&text)["structuredContent"]["id"].as_str().unwrap().to_owned();
    let get = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                     "params": {"name": "get_memory", "arguments": {"id": id}}});
    let text = send(Some(bob), get.clone()).await.unwrap().text().await.unwrap();
    assert_eq!(sse_result(&text)["structuredContent"]["owner"], "bob@example.com");
    let text = send(Some(alice), get).await.unwrap().text().await.unwrap();
    assert_eq!(sse_result(&text)["isError"], true, "Alice cannot read Bob's private record");
    server.child.kill().await.unwrap();
}

/// The JSON-RPC result carried by a streamable-HTTP answer (SSE or plain JSON).
fn sse_result(body: &str) -> Value {
    let json = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|l| l.starts_with('{'))
        .unwrap_or(body.trim());
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["result"].clone()
}

async fn stdio_with_token(
    issuer: &TestIssuer,
    dir: &std::path::Path,
    token: &str,
    extra: &[&str],
) -> Client {
    let iss = issuer.issuer();
    let mut cmd = tokio::process::Command::new(SPINE);
    cmd.args(["mcp", "--oidc-issuer", &iss, "--oidc-audience", AUDIENCE, "--data-dir"])
        .arg(dir)
        .args(extra)
        .env("SPINE_TOKEN", token);
    crate::common::backend_env(cmd.as_std_mut(), dir);
    let (transport, _) =
        TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn().expect("spawn spine mcp");
    ().serve(transport).await.expect("initialize over stdio")
}

#[tokio::test]
async fn stdio_takes_its_token_from_the_environment() {
    let issuer = TestIssuer::start().await;
    let dir = TempDir::new().unwrap();
    let client =
        stdio_with_token(&issuer, dir.path(), &token(&issuer, "carol@example.com"), &[]).await;
    let s = ok(call(
        &client,
        "store_memory",
        json!({
        "content": "Carol's note.", "scope": "c:project:spine", "source": "user-said",
        "category": "decision"}),
    )
    .await);
    let got = ok(call(&client, "get_memory", json!({"id": s["id"]})).await);
    assert_eq!(got["owner"], "carol@example.com");
    client.cancel().await.unwrap();

    // Missing or invalid SPINE_TOKEN: spine mcp refuses to start, saying why.
    let iss = issuer.issuer();
    for (token, needle) in [("", "SPINE_TOKEN"), ("garbage", "rejected")] {
        let out = tokio::process::Command::new(SPINE)
            .args(["mcp", "--oidc-issuer", &iss, "--oidc-audience", AUDIENCE, "--data-dir"])
            .arg(dir.path())
            .env("SPINE_TOKEN", token)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{stderr}");
    }
    // --oidc-issuer without an audience is a configuration error.
    let out = tokio::process::Command::new(SPINE)
        .args(["mcp", "--oidc-issuer", &iss, "--data-dir"])
        .arg(dir.path())
        .env_remove("SPINE_OIDC_AUDIENCE")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--oidc-audience"));
}

/// SPEC Authentication 2: the owner is the configured claim's value, so renaming the email
/// moves a user to a new, empty bucket — unless the owner claim is the stable subject.
#[tokio::test]
async fn claim_changes_follow_the_owner_claim() {
    let issuer = TestIssuer::start().await;
    let renamed = |email: &str| {
        let mut c = issuer.claims_for(email, AUDIENCE);
        c["sub"] = json!("user-42");
        issuer.mint(c)
    };
    for (owner_claim, visible_after_rename) in [("email", false), ("sub", true)] {
        let dir = TempDir::new().unwrap();
        let before = stdio_with_token(
            &issuer,
            dir.path(),
            &renamed("dana@old.example"),
            &["--owner-claim", owner_claim],
        )
        .await;
        let s = ok(call(
            &before,
            "store_memory",
            json!({
            "content": "Dana's private decision.", "scope": "d:project:spine",
            "source": "user-said", "category": "decision"}),
        )
        .await);
        before.cancel().await.unwrap();
        let after = stdio_with_token(
            &issuer,
            dir.path(),
            &renamed("dana@new.example"),
            &["--owner-claim", owner_claim],
        )
        .await;
        let r = call(&after, "get_memory", json!({"id": s["id"]})).await;
        assert_eq!(r.is_error != Some(true), visible_after_rename, "owner claim {owner_claim}");
        after.cancel().await.unwrap();
    }
}

/// The Python SDK (what most agent tooling uses) against `spine serve --oidc-issuer`, with a
/// bearer token: refused without it, every check of tests/python/sdk_client.py with it.
/// Needs the SDK environment `scripts/test.sh` creates (target/pyenv); the README's test
/// command sets SPINE_REQUIRE_PYTHON so it can never be skipped there.
#[tokio::test]
async fn python_sdk_client_with_a_bearer_token() {
    let Some(python) = crate::common::python() else { return };
    let root = crate::common::repo();
    let issuer = TestIssuer::start().await;
    let mut server = oidc_server(&issuer, &[]).await;
    let out = tokio::process::Command::new(&python)
        .arg(root.join("tests/python/sdk_client.py"))
        .arg("--oidc")
        .arg(format!("http://{}/mcp", server.addr))
        .arg(token(&issuer, "erin@example.com"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("[oidc] owner erin@example.com"), "{stdout}");
    server.child.kill().await.unwrap();
}

/// The Connect API with OIDC: every call needs a bearer token (401 `unauthenticated`
/// without), and one owner's private records never reach another.
#[tokio::test]
async fn connect_calls_need_a_token_and_keep_owners_apart() {
    let issuer = TestIssuer::start().await;
    let mut server = oidc_server(&issuer, &[]).await;
    let alice = http_client(&server, &token(&issuer, "alice@example.com")).await;
    let private = ok(call(
        &alice,
        "store_memory",
        json!({"content": "Alice's private note about payroll.", "scope": "a:project:hr",
               "source": "user-said", "category": "decision"}),
    )
    .await);
    alice.cancel().await.unwrap();
    let post = |auth: Option<String>, method: &str, body: Value| {
        let mut req = reqwest::Client::new()
            .post(format!("http://{}/spine.v1.MemoryService/{method}", server.addr))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (s, e) = post(None, "ListScopes", json!({})).await;
    assert_eq!((s, &e["code"]), (401, &json!("unauthenticated")), "no token: a Connect error {e}");
    let alice_auth = Some(format!("Bearer {}", token(&issuer, "alice@example.com")));
    let bob_auth = Some(format!("Bearer {}", token(&issuer, "bob@example.com")));
    let (s, mine) = post(alice_auth.clone(), "GetMemory", json!({"id": private["id"]})).await;
    assert_eq!((s, &mine["memory"]["owner"]), (200, &json!("alice@example.com")));
    let (s, e) = post(bob_auth.clone(), "GetMemory", json!({"id": private["id"]})).await;
    assert_eq!((s, &e["code"]), (404, &json!("not_found")), "another owner's record looks missing");
    let (s, listed) = post(bob_auth.clone(), "ListMemories", json!({"cross_spine": true})).await;
    assert_eq!(s, 200);
    assert!(listed.get("memories").is_none_or(|m| m.as_array().unwrap().is_empty()), "{listed}");
    let (s, archived) = post(bob_auth, "ArchiveMemory", json!({"ids": [private["id"]]})).await;
    assert_eq!((s, &archived["results"][0]["outcome"]), (200, &json!("not_found")));
    server.child.kill().await.unwrap();
}

/// The official TypeScript Connect client (tests/typescript/connect_client.mjs, code generated
/// by `buf generate` with protoc-gen-es) against `spine serve --oidc-issuer`: every method over
/// the JSON and the binary codec, two owners kept apart, and the error codes — including
/// `unavailable` from a second server whose embedder cannot be reached. Needs what
/// `scripts/test.sh` installs and generates; the README's test command sets SPINE_REQUIRE_NODE
/// so it can never be skipped there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_connect_client_over_both_codecs() {
    let root = crate::common::repo();
    let script = root.join("tests/typescript/connect_client.mjs");
    if !root.join("tests/typescript/gen/spine/v1/memory_pb.js").exists() {
        assert!(
            std::env::var_os("SPINE_REQUIRE_NODE").is_none(),
            "the TypeScript Connect client is not generated: run scripts/test.sh"
        );
        eprintln!("skipped: no generated TypeScript Connect client (scripts/test.sh makes it)");
        return;
    }
    let issuer = TestIssuer::start().await;
    let mut server = oidc_server(&issuer, &[]).await;
    // Nothing listens on this port: every embedding fails.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dead_url = format!("http://{dead}");
    let mut broken = start_http_with(&[
        "--embedder",
        "openai",
        "--embed-url",
        &dead_url,
        "--embed-model",
        "unreachable",
    ])
    .await;
    let out = tokio::process::Command::new("node")
        .arg(&script)
        .arg(format!("http://{}", server.addr))
        .arg(token(&issuer, "alice@example.com"))
        .arg(token(&issuer, "bob@example.com"))
        .arg(format!("http://{}", broken.addr))
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("connect client: all checks passed"), "{stdout}");
    server.child.kill().await.unwrap();
    broken.child.kill().await.unwrap();
}

#[tokio::test]
async fn the_console_signs_in_as_its_own_client() {
    let issuer = TestIssuer::start().await;
    let iss = issuer.issuer();
    let http = reqwest::Client::new();
    let list = |addr: String, token: String| {
        let http = http.clone();
        async move {
            http.post(format!("http://{addr}/spine.v1.MemoryService/ListScopes"))
                .header("content-type", "application/json")
                .header("connect-protocol-version", "1")
                .bearer_auth(token)
                .body("{}")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    // An ID token the console got for its client id, not for the API's audience.
    let console_token = issuer.mint(issuer.claims_for("alice@example.com", "spine-console"));

    let mut server = oidc_server(&issuer, &["--console-client-id", "spine-console"]).await;
    let config: Value = http
        .get(format!("http://{}/console/config.json", server.addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["auth"]["issuer"], json!(iss));
    assert_eq!(config["auth"]["client_id"], json!("spine-console"));
    assert_eq!(config["auth"]["audience"], json!(AUDIENCE));
    let policy = http
        .get(format!("http://{}/console", server.addr))
        .send()
        .await
        .unwrap()
        .headers()
        .get("content-security-policy")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains(&format!("connect-src 'self' https: {iss}")), "{policy}");
    // The page itself needs no token; the API does, and takes the console's.
    let r = http.get(format!("http://{}/console", server.addr)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(list(server.addr.clone(), console_token.clone()).await, 200);
    assert_eq!(list(server.addr.clone(), token(&issuer, "alice@example.com")).await, 200);
    let stranger = issuer.mint(issuer.claims_for("alice@example.com", "another-client"));
    assert_eq!(list(server.addr.clone(), stranger).await, 401);
    server.child.kill().await.unwrap();

    // Without --console-client-id, tokens for that client are someone else's.
    let mut server = oidc_server(&issuer, &[]).await;
    let config: Value = http
        .get(format!("http://{}/console/config.json", server.addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["auth"]["client_id"], Value::Null);
    assert_eq!(list(server.addr.clone(), console_token).await, 401);
    server.child.kill().await.unwrap();
}

#[tokio::test]
async fn a_public_address_without_oidc_is_refused_unless_allowed() {
    let dir = TempDir::new().unwrap();
    let port = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
    let public = format!("0.0.0.0:{port}");
    // Refused: nothing binds, the operator is told why and what to do.
    let run = spine(dir.path(), &["serve", "--listen", &public]).await;
    assert!(!run.ok, "{}", run.stderr);
    assert!(run.stderr.contains("without authentication"), "{}", run.stderr);
    assert!(run.stderr.contains("--allow-unauthenticated"), "{}", run.stderr);
    assert!(std::net::TcpListener::bind(("0.0.0.0", port)).is_ok(), "the port stayed free");

    // Allowed explicitly: it serves, and says so on stderr.
    let mut child = tokio::process::Command::new(SPINE)
        .args(["serve", "--allow-unauthenticated", "--listen", &public, "--data-dir"])
        .arg(dir.path())
        .env("SPINE_LOG", "warn")
        .env_remove("SPINE_OIDC_ISSUER")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let mut healthy = false;
    for _ in 0..300 {
        if let Ok(r) = http.get(format!("http://127.0.0.1:{port}/healthz")).send().await {
            healthy = r.status().is_success();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(healthy, "spine serve --allow-unauthenticated did not serve");
    child.kill().await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WITHOUT authentication"), "{stderr}");

    // Loopback needs no flag (the local default), and OIDC needs none either.
    let mut local = start_http().await;
    local.child.kill().await.unwrap();
}
