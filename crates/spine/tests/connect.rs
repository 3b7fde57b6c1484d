//! The Connect API end to end: `spine serve`, records written over MCP, read and curated over
//! Connect with the JSON and the binary protobuf codecs, and the error codes.

use buffa::Message;
use serde_json::{Value, json};
use spine_server::connect::proto::spine::v1 as pb;

use crate::common::*;

const SCOPE: &str = "acme:project:connect";

async fn post_json(addr: &str, method: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/spine.v1.MemoryService/{method}"))
        .header("content-type", "application/json")
        .header("connect-protocol-version", "1")
        .header("user-agent", "connect-test/1")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn post_proto<M: Message>(addr: &str, method: &str, msg: &impl Message) -> (u16, Option<M>) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/spine.v1.MemoryService/{method}"))
        .header("content-type", "application/proto")
        .header("connect-protocol-version", "1")
        .body(msg.encode_to_vec())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let bytes = r.bytes().await.unwrap();
    (status, (status == 200).then(|| M::decode(&mut bytes.as_ref()).unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_over_both_codecs_with_the_tools_rules() {
    let mut server = start_http().await;
    let addr = server.addr.clone();
    let transport =
        rmcp::transport::StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp"));
    let client = rmcp::ServiceExt::serve((), transport).await.unwrap();
    let mut ids = Vec::new();
    for (i, content) in [
        "Use rustls for every TLS connection.",
        "Deploys run on Tuesdays.",
        "The cache is warmed at start.",
    ]
    .iter()
    .enumerate()
    {
        let tags = if i == 0 { json!(["tls"]) } else { json!([]) };
        let r = ok(call(&client, "store_memory", json!({"content": content, "scope": SCOPE, "source": "user-said", "category": "decision", "tags": tags})).await);
        ids.push(r["id"].as_str().unwrap().to_owned());
    }
    ok(call(&client, "store_rule", json!({"content": "Never force-push main.", "scope": "rule:repo:connect", "summary": "No force-push to main"})).await);
    client.cancel().await.unwrap();

    // JSON codec, request fields in snake_case or camelCase.
    let (s, list) = post_json(&addr, "ListMemories", json!({"scope": SCOPE})).await;
    assert_eq!(s, 200, "{list}");
    assert_eq!(list["memories"].as_array().unwrap().len(), 3, "{list}");
    assert!(list["memories"][0]["shortId"].is_string(), "{list}");
    let (s, search) = post_json(
        &addr,
        "SearchMemories",
        json!({"query": "which TLS library", "scope": SCOPE, "k": 1}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(search["memories"][0]["id"], ids[0], "{search}");
    let (s, cross) =
        post_json(&addr, "ListMemories", json!({"crossSpine": true, "limit": 2})).await;
    assert_eq!(s, 200);
    assert_eq!(
        (cross["memories"].as_array().unwrap().len(), &cross["total"]),
        (2, &json!("4")),
        "{cross}"
    ); // the rule counts too
    assert!(
        cross["coverage"]["searchedScopes"].as_array().unwrap().contains(&json!(SCOPE)),
        "{cross}"
    );

    let (s, got) = post_json(&addr, "GetMemory", json!({"id": ids[1]})).await;
    assert_eq!((s, &got["memory"]["content"]), (200, &json!("Deploys run on Tuesdays.")));
    let (s, e) = post_json(&addr, "GetMemory", json!({"id": "not an id"})).await;
    assert_eq!((s, &e["code"]), (400, &json!("invalid_argument")), "{e}");
    assert!(e["message"].as_str().unwrap().contains("field: id; hint: malformed_id"), "{e}");
    let (s, e) =
        post_json(&addr, "GetMemory", json!({"id": "0190f5a0-0000-7000-8000-000000000001"})).await;
    assert_eq!((s, &e["code"]), (404, &json!("not_found")), "{e}");

    let (s, archived) =
        post_json(&addr, "ArchiveMemory", json!({"ids": [ids[2], "nope-nope-1"]})).await;
    assert_eq!(s, 200, "{archived}");
    let outcomes: Vec<&str> = archived["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["archived", "not_found"]);
    let (_, after) = post_json(&addr, "ListMemories", json!({"scope": SCOPE})).await;
    assert_eq!(after["memories"].as_array().unwrap().len(), 2, "archived leaves the list");
    let (s, restored) = post_json(&addr, "RestoreMemory", json!({"ids": [ids[2]]})).await;
    assert_eq!((s, &restored["results"][0]["outcome"]), (200, &json!("restored")));
    // Both were audited on the Connect lane, the client named by its User-Agent.
    let q = spine_store::AuditQuery { limit: 2, ..Default::default() };
    let events = open_store(server._dir.path()).audit_events(&q).unwrap();
    let seen: Vec<(&str, &str, &str, Vec<String>)> = events
        .iter()
        .map(|e| {
            let ids = e.record_ids.iter().map(|id| id.to_string()).collect();
            (e.action.as_str(), e.lane.as_str(), e.client.as_str(), ids)
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("restore_memory", "connect", "connect-test/1", vec![ids[2].clone()]),
            ("archive_memory", "connect", "connect-test/1", vec![ids[2].clone()]),
        ]
    );

    let (s, scopes) = post_json(&addr, "ListScopes", json!({})).await;
    assert_eq!(s, 200, "{scopes}");
    let counts: Vec<(&str, &Value)> = scopes["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["scope"].as_str().unwrap(), &c["records"]))
        .collect();
    assert!(counts.contains(&(SCOPE, &json!("3"))), "{scopes}");
    let (s, tags) = post_json(&addr, "ListTags", json!({"scope": SCOPE})).await;
    assert_eq!((s, &tags["tags"][0]["tag"]), (200, &json!("tls")), "{tags}");
    let (s, related) = post_json(&addr, "RelatedMemories", json!({"id": ids[0]})).await;
    assert_eq!((s, &related["anchor"]["id"]), (200, &json!(ids[0])), "{related}");
    let (s, rules) = post_json(&addr, "ListRules", json!({"scopes": ["rule:repo:connect"]})).await;
    assert_eq!(
        (s, &rules["rules"][0]["summary"]),
        (200, &json!("No force-push to main")),
        "{rules}"
    );

    // Binary protobuf codec.
    let req =
        pb::ListMemoriesRequest { scope: Some(SCOPE.into()), limit: Some(1), ..Default::default() };
    let (s, page) = post_proto::<pb::ListMemoriesResponse>(&addr, "ListMemories", &req).await;
    let page = page.unwrap_or_else(|| panic!("status {s}"));
    assert_eq!(page.memories.len(), 1);
    assert!(!page.next_cursor.is_empty());
    let req = pb::GetMemoryRequest { id: ids[0].clone(), ..Default::default() };
    let (_, got) = post_proto::<pb::GetMemoryResponse>(&addr, "GetMemory", &req).await;
    assert_eq!(got.unwrap().memory.into_option().unwrap().id, ids[0]);

    // A malformed body is a Connect error, never a 5xx; another site's Origin is refused.
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/spine.v1.MemoryService/ListMemories"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/spine.v1.MemoryService/ListMemories"))
        .header("content-type", "application/json")
        .header("origin", "https://evil.example")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    let metrics =
        reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains(
            r#"spine_calls_total{lane="connect",tool="GetMemory",outcome="not_found"} 1"#
        ),
        "{metrics}"
    );
    server.child.kill().await.unwrap();
}

fn contents(list: &Value) -> Vec<(String, Vec<String>)> {
    // proto3 JSON leaves an empty list out.
    list.get("memories")
        .map_or(&[][..], |m| m.as_array().unwrap_or_else(|| panic!("memories in {list}")))
        .iter()
        .map(|m| {
            let states = m["states"]
                .as_array()
                .map_or(vec![], |s| s.iter().map(|v| v.as_str().unwrap().to_owned()).collect());
            (m["content"].as_str().unwrap_or_default().to_owned(), states)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_memories_by_state_as_the_console_browses() {
    let mut server = start_http().await;
    let addr = server.addr.clone();
    let transport =
        rmcp::transport::StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp"));
    let client = rmcp::ServiceExt::serve((), transport).await.unwrap();
    let store = |content: &str| json!({"content": content, "scope": SCOPE, "source": "user-said", "category": "decision"});
    let old = ok(call(&client, "store_memory", store("Builds use make.")).await);
    let archived = ok(call(&client, "store_memory", store("Logs go to syslog.")).await);
    ok(call(&client, "store_memory", store("Tests run with nextest.")).await);
    ok(call(&client, "supersede_memory", json!({"supersedes": [old["id"]], "content": "Builds use cargo.", "scope": SCOPE, "source": "user-said", "category": "decision"})).await);
    ok(call(&client, "archive_memory", json!({"ids": [archived["id"]]})).await);
    ok(call(&client, "schedule_memory", json!({"content": "Freeze in 2999.", "scope": SCOPE, "source": "user-said", "category": "decision", "not_before": "2999-01-01T00:00:00Z"})).await);
    ok(call(&client, "schedule_memory", json!({"content": "Freeze in 2001.", "scope": SCOPE, "source": "user-said", "category": "decision", "not_after": "2001-01-01T00:00:00Z"})).await);
    ok(call(&client, "store_discovery", json!({"content": "The console lives in crates/spine-server/console.", "kind": "fact", "scope": "discovery:repo:connect", "citations": [{"kind": "file", "ref": "crates/spine-server/console/index.html"}]})).await);
    client.cancel().await.unwrap();

    let list = |state: Option<&str>, scope: &str| {
        let mut body = json!({"scope": scope});
        if let Some(state) = state {
            body["state"] = json!(state);
        }
        let addr = addr.clone();
        async move {
            let (s, v) = post_json(&addr, "ListMemories", body).await;
            assert_eq!(s, 200, "{v}");
            v
        }
    };
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // Unset: list_memory exactly (no states, no gate counts changed).
    let plain = list(None, SCOPE).await;
    assert_eq!(
        contents(&plain),
        [("Builds use cargo.".into(), vec![]), ("Tests run with nextest.".into(), vec![])]
    );
    assert_eq!(plain["recallGateHidden"]["total"], json!("4"), "{plain}");
    assert_eq!(contents(&list(Some("live"), SCOPE).await), contents(&plain));
    assert_eq!(
        contents(&list(Some("archived"), SCOPE).await),
        [("Logs go to syslog.".into(), s(&["archived"]))]
    );
    assert_eq!(
        contents(&list(Some("superseded"), SCOPE).await),
        [("Builds use make.".into(), s(&["superseded"]))]
    );
    assert_eq!(
        contents(&list(Some("scheduled"), SCOPE).await),
        [("Freeze in 2999.".into(), s(&["scheduled"]))]
    );
    assert_eq!(
        contents(&list(Some("expired"), SCOPE).await),
        [("Freeze in 2001.".into(), s(&["expired"]))]
    );
    let all = list(Some("all"), SCOPE).await;
    assert_eq!(contents(&all).len(), 6, "{all}");
    assert!(all.get("recallGateHidden").is_none(), "only the live view hides anything: {all}");
    // Discoveries: never in list_memory, listed when browsing.
    assert!(contents(&list(None, "discovery:repo:connect").await).is_empty());
    assert_eq!(contents(&list(Some("live"), "discovery:repo:connect").await).len(), 1);
    // An unknown state is the caller's error, naming the field.
    let (code, e) =
        post_json(&addr, "ListMemories", json!({"scope": SCOPE, "state": "deleted"})).await;
    assert_eq!((code, &e["code"]), (400, &json!("invalid_argument")), "{e}");
    assert!(e["message"].as_str().unwrap().contains("field: state"), "{e}");
    server.child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_with_a_strict_policy() {
    let mut server = start_http().await;
    let addr = server.addr.clone();
    let http = reqwest::Client::new();
    for (path, kind) in [
        ("/console", "text/html"),
        ("/console/", "text/html"),
        ("/console/callback?code=x&state=y", "text/html"),
        ("/console/console.js", "text/javascript"),
        ("/console/console.css", "text/css"),
        ("/console/config.json", "application/json"),
    ] {
        let r = http.get(format!("http://{addr}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let header = |name: &str| {
            r.headers().get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
        };
        assert!(header("content-type").starts_with(kind), "{path}: {}", header("content-type"));
        let policy = header("content-security-policy");
        assert!(policy.contains("default-src 'self'"), "{path}: {policy}");
        assert!(policy.contains("frame-ancestors 'none'"), "{path}: {policy}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
    }
    let index = http.get(format!("http://{addr}/console")).send().await.unwrap();
    let html = index.text().await.unwrap();
    assert!(html.contains("/console/console.js"), "the page loads its script: {html}");
    let config: Value = http
        .get(format!("http://{addr}/console/config.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config, json!({"auth": null}), "no OIDC: nothing to sign in to");
    // DNS rebinding: another Host is refused, as on /mcp.
    let r = http
        .get(format!("http://{addr}/console"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    server.child.kill().await.unwrap();
}
