//! The audit log end to end: the real `spine serve` with OIDC (two users), every writing tool
//! called over MCP, then `spine audit` read back: one event per call, with its actor, ids
//! and outcome, refused and not-found attempts included; never a record's content.

use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use spine_testkit::TestIssuer;
use tempfile::TempDir;

use crate::common::*;

const AUDIENCE: &str = "spine-tests";
const SCOPE: &str = "a:project:audit";
const SECRET_WORD: &str = "zanzibarquokka";

async fn client(server: &Server, issuer: &TestIssuer, email: &str) -> Client {
    let token = issuer.mint(issuer.claims_for(email, AUDIENCE));
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", server.addr))
            .auth_header(token);
    ().serve(StreamableHttpClientTransport::from_config(config)).await.expect("initialize")
}

fn memory(content: &str, scope: &str) -> Value {
    json!({"content": content, "scope": scope, "source": "user-said", "category": "decision",
           "tags": [SECRET_WORD]})
}

/// `spine audit --json` with `args`: its events, newest first.
async fn audit(data: &std::path::Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["audit", "--json"];
    all.extend_from_slice(args);
    let run = spine(data, &all).await;
    assert!(run.ok, "spine audit failed: {}", run.stderr);
    assert!(!run.stdout.contains(SECRET_WORD), "no content, tag or query in the log");
    run.json()["events"].as_array().unwrap().clone()
}

#[tokio::test]
async fn every_writing_call_leaves_one_event_with_its_actor_records_and_outcome() {
    let issuer = TestIssuer::start().await;
    let dir = TempDir::new().unwrap();
    let data = dir.path().to_path_buf();
    let iss = issuer.issuer();
    let mut server =
        start_http_in(dir, &["--oidc-issuer", &iss, "--oidc-audience", AUDIENCE]).await;
    let alice = client(&server, &issuer, "alice@example.com").await;
    let bob = client(&server, &issuer, "bob@example.com").await;

    let content = format!("Deploys happen on Thursdays ({SECRET_WORD}).");
    let a = ok(call(&alice, "store_memory", memory(&content, SCOPE)).await);
    let b = ok(call(
        &alice,
        "schedule_memory",
        json!({"content": "Code freeze.", "scope": SCOPE, "source": "user-said",
               "category": "decision", "not_before": "2999-01-01T00:00:00Z"}),
    )
    .await);
    ok(call(&alice, "update_memory", json!({"id": a["id"], "content": "Deploys: Wednesdays."}))
        .await);
    ok(call(&alice, "set_visibility", json!({"id": a["id"], "shared": true})).await);
    ok(call(&alice, "archive_memory", json!({"ids": [a["id"], b["id"]]})).await);
    ok(call(&alice, "restore_memory", json!({"ids": [a["id"]]})).await);
    let mut next = memory("Deploys happen on Tuesdays.", SCOPE);
    next["supersedes"] = json!([a["id"]]);
    let c = ok(call(&alice, "supersede_memory", next).await);
    let rule = ok(call(
        &alice,
        "store_rule",
        json!({"content": "Every public function has a doc comment.", "scope": "rule:repo:audit",
               "summary": "Document every public function."}),
    )
    .await);
    let fact = ok(call(
        &alice,
        "store_discovery",
        json!({"content": "The router is in src/http.rs.", "kind": "fact",
               "scope": "discovery:repo:audit",
               "citations": [{"kind": "file", "ref": "src/http.rs"}]}),
    )
    .await);
    ok(call(&alice, "delete_memory", json!({"id": b["id"]})).await);
    let d =
        ok(call(&alice, "store_memory", memory("Staging resets nightly.", "a:project:other"))
            .await);
    ok(call(&alice, "delete_all", json!({"scope": "a:project:other"})).await);
    // Bob cannot reach Alice's record, and a malformed write is refused: both recorded.
    let e = err(call(&bob, "delete_memory", json!({"id": c["id"]})).await);
    assert_eq!(e["code"], "not_found");
    let e = err(call(
        &bob,
        "store_memory",
        json!({"content": "x", "scope": SCOPE,
        "source": "user-said", "category": "no-such-category"}),
    )
    .await);
    assert_eq!(e["code"], "invalid_argument");
    // Reads are not audited (without --audit-reads).
    ok(call(&alice, "search_memory", json!({"query": "which weekday", "scope": SCOPE})).await);

    let events = audit(&data, &["--limit", "1000"]).await;
    let seen: Vec<(String, String, String)> = events
        .iter()
        .rev()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap().to_owned();
            (s("action"), s("actor"), s("outcome"))
        })
        .collect();
    let want = |action: &str, actor: &str, outcome: &str| {
        (action.to_owned(), format!("{actor}@example.com"), outcome.to_owned())
    };
    assert_eq!(
        seen,
        [
            want("store_memory", "alice", "ok"),
            want("schedule_memory", "alice", "ok"),
            want("update_memory", "alice", "ok"),
            want("set_visibility", "alice", "ok"),
            want("archive_memory", "alice", "ok"),
            want("restore_memory", "alice", "ok"),
            want("supersede_memory", "alice", "ok"),
            want("store_rule", "alice", "ok"),
            want("store_discovery", "alice", "ok"),
            want("delete_memory", "alice", "ok"),
            want("store_memory", "alice", "ok"),
            want("delete_all", "alice", "ok"),
            want("delete_memory", "bob", "not_found"),
            want("store_memory", "bob", "invalid_argument"),
        ]
    );
    let ids = |e: &Value| -> Vec<String> {
        e["record_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect()
    };
    let oldest = events.last().unwrap();
    assert_eq!(ids(oldest), [a["id"].as_str().unwrap()]);
    assert_eq!((oldest["lane"].as_str(), oldest["scope"].as_str()), (Some("mcp"), Some(SCOPE)));
    assert_eq!(oldest["owner"], "alice@example.com");
    assert!(!oldest["client"].as_str().unwrap().is_empty(), "the client's initialize names it");
    let by_action = |action: &str| events.iter().rev().find(|e| e["action"] == action).unwrap();
    let mut archived = vec![a["id"].as_str().unwrap(), b["id"].as_str().unwrap()];
    archived.sort();
    assert_eq!(ids(by_action("archive_memory")), archived);
    assert_eq!(ids(by_action("store_rule")), [rule["id"].as_str().unwrap()]);
    assert_eq!(ids(by_action("store_discovery")), [fact["id"].as_str().unwrap()]);
    assert_eq!(ids(by_action("delete_all")), [d["id"].as_str().unwrap()]);
    assert_eq!(ids(&events[1]), Vec::<String>::new(), "bob's attempt changed nothing");

    // The filters, as an operator asks "who touched this record?".
    let on_a = audit(&data, &["--record", a["id"].as_str().unwrap()]).await;
    let actions: Vec<&str> = on_a.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "supersede_memory",
            "restore_memory",
            "archive_memory",
            "set_visibility",
            "update_memory",
            "store_memory"
        ]
    );
    assert_eq!(audit(&data, &["--actor", "bob@example.com"]).await.len(), 2);
    assert_eq!(audit(&data, &["--action", "delete_all"]).await.len(), 1);
    assert_eq!(audit(&data, &["--limit", "3"]).await.len(), 3);
    assert_eq!(audit(&data, &["--until", "2000-01-01T00:00:00Z"]).await.len(), 0);
    assert_eq!(audit(&data, &["--since", "1h"]).await.len(), 14);

    // Pruning is the only way events go: nothing is older than an hour yet.
    let run = spine(&data, &["audit", "prune", "--older-than", "1h", "--json"]).await;
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(run.json()["removed"], 0);
    assert_eq!(audit(&data, &["--limit", "1000"]).await.len(), 14);
    let run = spine(&data, &["audit", "--record", "not-an-id"]).await;
    assert!(!run.ok && run.stderr.contains("full record id"), "{}", run.stderr);

    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
    server.child.kill().await.unwrap();
}

/// `--audit-reads`: every recall call leaves one event naming the records it returned (over
/// MCP and Connect), a failed read its error code; never the query; writes as before.
#[tokio::test]
async fn audit_reads_records_each_recall_call_with_the_ids_it_returned() {
    let issuer = TestIssuer::start().await;
    let dir = TempDir::new().unwrap();
    let data = dir.path().to_path_buf();
    let iss = issuer.issuer();
    let args = ["--oidc-issuer", &iss, "--oidc-audience", AUDIENCE, "--audit-reads"];
    let mut server = start_http_in(dir, &args).await;
    let alice = client(&server, &issuer, "alice@example.com").await;
    let bob = client(&server, &issuer, "bob@example.com").await;
    let a = ok(call(&alice, "store_memory", memory("Deploys happen on Thursdays.", SCOPE)).await);
    let b = ok(call(&alice, "store_memory", memory("Staging resets nightly.", SCOPE)).await);
    let query = format!("which weekday ({SECRET_WORD})");
    let found = ok(call(&alice, "search_memory", json!({"query": query, "scope": SCOPE})).await);
    ok(call(&alice, "get_memory", json!({"id": a["id"]})).await);
    ok(call(&alice, "list_memory", json!({"scope": SCOPE})).await);
    let e = err(call(&bob, "get_memory", json!({"id": a["id"]})).await);
    assert_eq!(e["code"], "not_found");
    let token = issuer.mint(issuer.claims_for("alice@example.com", AUDIENCE));
    let r = reqwest::Client::new()
        .post(format!("http://{}/spine.v1.MemoryService/ListMemories", server.addr))
        .header("content-type", "application/json")
        .bearer_auth(token)
        .body(json!({"scope": SCOPE}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let events = audit(&data, &["--limit", "100"]).await;
    let seen: Vec<(&str, &str, &str, &str)> = events
        .iter()
        .rev()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap();
            (s("action"), s("lane"), s("actor"), s("outcome"))
        })
        .collect();
    let (alice_at, bob_at) = ("alice@example.com", "bob@example.com");
    assert_eq!(
        seen,
        [
            ("store_memory", "mcp", alice_at, "ok"),
            ("store_memory", "mcp", alice_at, "ok"),
            ("search_memory", "mcp", alice_at, "ok"),
            ("get_memory", "mcp", alice_at, "ok"),
            ("list_memory", "mcp", alice_at, "ok"),
            ("get_memory", "mcp", bob_at, "not_found"),
            ("list_memory", "connect", alice_at, "ok"),
        ]
    );
    let ids = |e: &Value| -> Vec<String> {
        e["record_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect()
    };
    let mut both = vec![a["id"].as_str().unwrap().to_owned(), b["id"].as_str().unwrap().to_owned()];
    both.sort();
    let mut returned: Vec<String> = found["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    returned.sort();
    assert_eq!(ids(&events[4]), returned, "search: the records it returned");
    assert_eq!(events[4]["scope"], SCOPE);
    assert_eq!(ids(&events[3]), [a["id"].as_str().unwrap()], "get: the record read");
    assert_eq!(ids(&events[2]), both, "list: every record listed");
    assert!(ids(&events[1]).is_empty(), "bob's read found nothing");
    assert_eq!(ids(&events[0]), both, "Connect's list");
    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
    server.child.kill().await.unwrap();
}
