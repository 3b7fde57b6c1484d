//! Load (issue 19, short form): many sessions at once on one server, and many `spine mcp`
//! processes on one data directory — every call must succeed and every write be visible.
//! The long form with figures is `spine-bench load` (the server's view) and
//! `scripts/bench-load.py` (the Python SDK's); docs/performance.md.

use std::time::Instant;

use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};

use crate::common::*;

const SESSIONS: usize = 50;
const CALLS_PER_SESSION: usize = 8;

fn store_args(scope: &str, content: &str, tags: &[&str]) -> Value {
    json!({"content": content, "scope": scope, "source": "agent-inferred",
           "category": "convention", "tags": tags})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_http_sessions_mix_every_tool_without_a_failure() {
    let mut server = start_http().await;
    let url = format!("http://{}/mcp", server.addr);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
            let scope = format!("load:project:s{}", s % 5);
            let mut mine: Vec<Value> = Vec::new();
            let mut calls = Vec::new();
            for i in 0..CALLS_PER_SESSION {
                let t = Instant::now();
                let tool = match (i, mine.len()) {
                    (0, _) | (_, 0) => {
                        let text =
                            format!("Session {s} note {i}: the build cache is pruned nightly.");
                        let r =
                            ok(call(&client, "store_memory", store_args(&scope, &text, &["ci"]))
                                .await);
                        mine.push(r["id"].clone());
                        "store_memory"
                    }
                    (1, _) => {
                        ok(call(
                            &client,
                            "search_memory",
                            json!({"query": format!("cache pruning {s}"), "scope": scope}),
                        )
                        .await);
                        "search_memory"
                    }
                    (2, _) => {
                        ok(call(&client, "get_memory", json!({"id": mine[0]})).await);
                        "get_memory"
                    }
                    (3, _) => {
                        ok(call(&client, "list_memory", json!({"scope": scope, "limit": 20}))
                            .await);
                        "list_memory"
                    }
                    (4, _) => {
                        let content =
                            format!("Session {s}: the build cache is pruned every night at two.");
                        ok(call(
                            &client,
                            "update_memory",
                            json!({"id": mine[0], "content": content}),
                        )
                        .await);
                        "update_memory"
                    }
                    (5, _) => {
                        ok(call(&client, "list_tags", json!({"scope": scope})).await);
                        "list_tags"
                    }
                    (6, _) => {
                        ok(call(&client, "related_memories", json!({"id": mine[0]})).await);
                        "related_memories"
                    }
                    _ => {
                        ok(call(&client, "archive_memory", json!({"ids": [mine[0]]})).await);
                        ok(call(&client, "restore_memory", json!({"ids": [mine[0]]})).await);
                        "archive_memory"
                    }
                };
                calls.push((tool, t.elapsed()));
            }
            client.cancel().await.unwrap();
            calls
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("a session ran every call without a failure"));
    }
    let secs = started.elapsed().as_secs_f64();
    all.sort_by_key(|(_, d)| *d);
    let p50 = all[all.len() / 2].1;
    let p99 = all[all.len() * 99 / 100].1;
    eprintln!(
        "{SESSIONS} sessions, {} calls in {secs:.1} s ({:.0} calls/s), p50 {p50:?}, p99 {p99:?}",
        all.len(),
        all.len() as f64 / secs
    );
    assert_eq!(all.len(), SESSIONS * CALLS_PER_SESSION);
    // Every session's record is there, once.
    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    let mut total = 0;
    for s in 0..5 {
        let listed = ok(call(
            &client,
            "list_memory",
            json!({"scope": format!("load:project:s{s}"), "limit": 100}),
        )
        .await);
        total += listed["memories"].as_array().unwrap().len();
    }
    assert_eq!(total, SESSIONS, "one record per session, none lost or doubled");
    client.cancel().await.unwrap();
    server.child.kill().await.unwrap();
}

/// The laptop case: several agent sessions, each its own `spine mcp`, on one data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_stdio_processes_on_one_data_directory() {
    const PROCESSES: usize = 10;
    const WRITES: usize = 5;
    let dir = tempfile::TempDir::new().unwrap();
    let mut tasks = Vec::new();
    for p in 0..PROCESSES {
        let path = dir.path().to_path_buf();
        tasks.push(tokio::spawn(async move {
            let client = stdio_client(&path).await;
            for i in 0..WRITES {
                let text = format!("Agent {p} learned fact {i}: migrations run before deploys.");
                ok(call(&client, "store_memory", store_args("load:project:laptop", &text, &[]))
                    .await);
                ok(call(
                    &client,
                    "search_memory",
                    json!({"query": "when do migrations run", "scope": "load:project:laptop"}),
                )
                .await);
            }
            client.cancel().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.expect("every process's calls succeed");
    }
    let client = stdio_client(dir.path()).await;
    let listed =
        ok(call(&client, "list_memory", json!({"scope": "load:project:laptop", "limit": 100}))
            .await);
    assert_eq!(
        listed["memories"].as_array().unwrap().len(),
        PROCESSES * WRITES,
        "every write of every process"
    );
    let found = ok(call(
        &client,
        "search_memory",
        json!({"query": "Agent 7 learned fact 3", "scope": "load:project:laptop"}),
    )
    .await);
    assert!(
        found["memories"][0]["content"].as_str().unwrap().starts_with("Agent 7 learned fact 3"),
        "{found}"
    );
    client.cancel().await.unwrap();
}
