//! Two `spine serve` nodes on one PostgreSQL database (`--database-url`, `--stateless`):
//! what one writes the other reads and finds at once, a supersession race between them has
//! one winner, MCP requests of one client may land on either node, and a node killed leaves
//! the other serving. Needs the server `SPINE_TEST_DATABASE_URL` names (scripts/test.sh
//! starts one); skipped without it outside CI. Start-up against an unreachable database needs
//! no server and always runs.

use std::time::{Duration, Instant};

use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use spine_testkit::postgres::{FreshDatabase, fresh_database};
use tempfile::TempDir;

use crate::common::*;

const SCOPE: &str = "team:project:shared";

async fn node(db: &FreshDatabase) -> Server {
    start_http_in(TempDir::new().unwrap(), &["--database-url", &db.url, "--stateless"]).await
}

async fn client(server: &Server) -> Client {
    let transport = StreamableHttpClientTransport::from_uri(format!("http://{}/mcp", server.addr));
    rmcp::ServiceExt::serve((), transport).await.expect("initialize over HTTP")
}

fn record(content: &str) -> Value {
    json!({"content": content, "scope": SCOPE, "source": "user-said", "category": "decision"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_one_database() {
    let Some(db) = fresh_database() else {
        eprintln!("skipped: no PostgreSQL (SPINE_TEST_DATABASE_URL)");
        return;
    };
    let (mut a, mut b) = (node(&db).await, node(&db).await);
    let (on_a, on_b) = (client(&a).await, client(&b).await);

    // Written on A, read, listed and found on B at once.
    let stored = ok(call(
        &on_a,
        "store_memory",
        record("Releases are cut from the main branch every Thursday."),
    )
    .await);
    ok(call(&on_a, "store_memory", record("The staging database is reset every night at 02:00."))
        .await);
    let id = stored["id"].as_str().unwrap();
    let got = ok(call(&on_b, "get_memory", json!({"id": stored["short_id"]})).await);
    assert_eq!(got["id"], stored["id"]);
    let found = ok(call(
        &on_b,
        "search_memory",
        json!({"query": "when do we cut a release", "scope": SCOPE}),
    )
    .await);
    assert_eq!(found["memories"][0]["id"], stored["id"], "{found}");
    let listed = ok(call(&on_b, "list_memory", json!({"scope": SCOPE})).await);
    assert_eq!(listed["memories"].as_array().unwrap().len(), 2, "{listed}");

    // A supersession race between the nodes: exactly one wins, the other is told the target
    // is already superseded (SPEC supersede_memory), and the chain has one head.
    for round in 0..4 {
        let target =
            ok(call(&on_a, "store_memory", record(&format!("Deploy window, version {round}.")))
                .await);
        let args = |who: &str| {
            let mut r = record(&format!("Deploy window, corrected by {who} in round {round}."));
            r["supersedes"] = json!([target["id"]]);
            r
        };
        let (ra, rb) = tokio::join!(
            call(&on_a, "supersede_memory", args("a")),
            call(&on_b, "supersede_memory", args("b"))
        );
        let outcomes = [ra.is_error == Some(true), rb.is_error == Some(true)];
        assert_eq!(
            outcomes.iter().filter(|failed| **failed).count(),
            1,
            "round {round}: one winner"
        );
        let loser = if outcomes[0] { err(ra) } else { err(rb) };
        assert_eq!(
            (loser["code"].as_str(), loser["hint"].as_str()),
            (Some("failed_precondition"), Some("already_superseded")),
            "{loser}"
        );
        let old = ok(call(&on_b, "get_memory", json!({"id": target["id"]})).await);
        assert!(old["superseded_by"].is_string(), "{old}");
    }

    // The same idempotency key sent to both nodes at once: one correction, both told its id.
    for round in 0..3 {
        let target =
            ok(call(&on_a, "store_memory", record(&format!("Freeze starts on day {round}.")))
                .await);
        let mut args = record(&format!("Freeze starts on day {round}, corrected."));
        args["supersedes"] = json!([target["id"]]);
        args["idempotency_key"] = json!(format!("fix-freeze-{round}"));
        let (ra, rb) = tokio::join!(
            call(&on_a, "supersede_memory", args.clone()),
            call(&on_b, "supersede_memory", args.clone())
        );
        let (ra, rb) = (ok(ra), ok(rb));
        assert_eq!(ra["id"], rb["id"], "round {round}: one correction for one key");
    }

    // One client's requests may land on either node (no session to find).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "lb", "version": "0"}}});
    let post = |addr: &str, body: Value| {
        reqwest::Client::new()
            .post(format!("http://{addr}/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body)
            .send()
    };
    let r = post(&a.addr, init).await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert!(r.headers().get("mcp-session-id").is_none(), "a stateless node issues no session");
    let call_b = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "get_memory", "arguments": {"id": id}}});
    let r = post(&b.addr, call_b).await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert!(r.text().await.unwrap().contains(id), "B answered the request A's client sent");

    // A node killed: the other keeps serving.
    on_a.cancel().await.ok();
    a.child.kill().await.unwrap();
    let after = ok(call(&on_b, "store_memory", record("Written while node A was down.")).await);
    let found =
        ok(call(&on_b, "search_memory", json!({"query": "node A down", "scope": SCOPE})).await);
    assert_eq!(found["memories"][0]["id"], after["id"], "{found}");
    on_b.cancel().await.ok();
    b.child.kill().await.unwrap();
}

/// A database that cannot be reached stops start-up within seconds, with a message naming
/// the host and the cause.
#[tokio::test]
async fn an_unreachable_database_stops_start_up_with_the_host_and_cause() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = TempDir::new().unwrap();
    let url = format!("postgres://spine@127.0.0.1:{port}/spine");
    let started = Instant::now();
    let run =
        spine(dir.path(), &["serve", "--listen", "127.0.0.1:0", "--database-url", &url]).await;
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    assert!(!run.ok);
    assert!(run.stderr.contains(&format!("127.0.0.1:{port}/spine")), "{}", run.stderr);
    assert!(run.stderr.to_lowercase().contains("refused"), "the cause: {}", run.stderr);
    let bad = spine(dir.path(), &["mcp", "--database-url", "mysql://nope"]).await;
    assert!(!bad.ok);
    assert!(bad.stderr.contains("--database-url"), "{}", bad.stderr);
}

/// A TCP relay between a node and the database that can cut every connection and refuse new
/// ones (the database "lost") and accept them again (the database "back").
struct Relay {
    addr: std::net::SocketAddr,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Relay {
    async fn to(target: String) -> Relay {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> =
            Default::default();
        let (up2, links2) = (up.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is closed at once
                }
                let target = target.clone();
                links2.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                }));
            }
        });
        Relay { addr, up, links }
    }

    fn cut(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The database lost while a node runs: calls fail at once with `unavailable` (nothing
/// half-written), and the node serves again by itself when the database is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_database_is_unavailable_and_the_node_recovers_by_itself() {
    let Some(db) = fresh_database() else {
        eprintln!("skipped: no PostgreSQL (SPINE_TEST_DATABASE_URL)");
        return;
    };
    // postgres://user@host:port/name → the same through the relay.
    let (head, rest) = db.url.split_once('@').unwrap();
    let (server, path) = rest.split_once('/').unwrap();
    let relay = Relay::to(server.to_owned()).await;
    let url = format!("{head}@{}/{path}", relay.addr);
    let mut node = start_http_in(TempDir::new().unwrap(), &["--database-url", &url]).await;
    let mcp = client(&node).await;
    let kept =
        ok(call(&mcp, "store_memory", record("Written before the database was lost.")).await);

    relay.cut();
    let started = Instant::now();
    for (tool, args) in [
        ("store_memory", record("Written while the database is lost.")),
        ("list_memory", json!({"scope": SCOPE})),
        ("get_memory", json!({"id": kept["id"]})),
    ] {
        let e = err(call(&mcp, tool, args).await);
        assert_eq!(e["code"], "unavailable", "{tool}: {e}");
    }
    assert!(started.elapsed() < Duration::from_secs(20), "no hang: {:?}", started.elapsed());

    relay.restore();
    let listed = ok(call(&mcp, "list_memory", json!({"scope": SCOPE})).await);
    let contents: Vec<&str> = listed["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["Written before the database was lost."], "nothing half-written");
    ok(call(&mcp, "store_memory", record("Written after the database came back.")).await);
    mcp.cancel().await.ok();
    node.child.kill().await.unwrap();
}

/// `spine export` of an embedded store, `spine import` into PostgreSQL, `spine export` from
/// there: the same records and vectors (as JSON values; PostgreSQL keeps its own key order),
/// and a node on the database finds them. The operator commands on PostgreSQL, end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_export_imports_into_postgres_whole() {
    let Some(db) = fresh_database() else {
        eprintln!("skipped: no PostgreSQL (SPINE_TEST_DATABASE_URL)");
        return;
    };
    let embedded = TempDir::new().unwrap();
    let agent = stdio_client(embedded.path()).await;
    let mut tagged = record("Use rustls for every TLS connection.");
    tagged["tags"] = json!(["tls", "security"]);
    tagged["citations"] = json!([{"kind": "file", "ref": "Cargo.toml", "locator": "L10"}]);
    let tls = ok(call(&agent, "store_memory", tagged).await);
    let old = ok(call(&agent, "store_memory", record("Deploys run on Fridays.")).await);
    let mut fix = record("Deploys run on Tuesdays.");
    fix["supersedes"] = json!([old["id"]]);
    ok(call(&agent, "supersede_memory", fix).await);
    let gone = ok(call(&agent, "store_memory", record("An archived note.")).await);
    ok(call(&agent, "archive_memory", json!({"ids": [gone["id"]]})).await);
    ok(call(
        &agent,
        "store_rule",
        json!({"content": "Never force-push main.", "scope": "rule:repo:shared", "summary": "No force-push"}),
    )
    .await);
    agent.cancel().await.ok();

    let exported = embedded.path().join("backup.jsonl");
    let run = spine(embedded.path(), &["export", "--output", exported.to_str().unwrap()]).await;
    assert!(run.ok, "{}", run.stderr);
    let elsewhere = TempDir::new().unwrap();
    let url = ["--database-url", db.url.as_str()];
    let run =
        spine(elsewhere.path(), &[&["import", exported.to_str().unwrap()][..], &url].concat())
            .await;
    assert!(run.ok, "{}", run.stderr);
    let again = elsewhere.path().join("again.jsonl");
    let run = spine(
        elsewhere.path(),
        &[&["export", "--output", again.to_str().unwrap()][..], &url].concat(),
    )
    .await;
    assert!(run.ok, "{}", run.stderr);
    let records = |path: &std::path::Path| -> Vec<Value> {
        let mut v: Vec<Value> = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l.get("record").is_some()) // not the header (export time) or the end
            .collect();
        v.sort_by_key(|r| r.to_string());
        v
    };
    let (before, after) = (records(&exported), records(&again));
    assert_eq!(before.len(), 5);
    assert_eq!(before, after, "every record and vector came through");

    let mut node = start_http_in(TempDir::new().unwrap(), &["--database-url", &db.url]).await;
    let mcp = client(&node).await;
    let found =
        ok(call(&mcp, "search_memory", json!({"query": "which TLS library", "scope": SCOPE}))
            .await);
    assert_eq!(found["memories"][0]["id"], tls["id"], "{found}");
    let verified =
        spine(elsewhere.path(), &[&["spine-review", "verify", "--all-scopes"][..], &url].concat())
            .await;
    assert!(verified.ok, "{}\n{}", verified.stdout, verified.stderr);
    mcp.cancel().await.ok();
    node.child.kill().await.unwrap();
}
