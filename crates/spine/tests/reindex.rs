//! Changing the embedder end to end: records written with the built-in model, a server
//! configured with an OpenAI-compatible embedder refused, `spine reindex` (interrupted,
//! resumed, run beside a live server), then search with the new embedder. The reindex rules
//! themselves (paging, resume, the final pass, vanished records) are tested in-process in
//! spine-ops' `reindex` tests.
//!
//! The OpenAI-compatible server is a local fake (a hosted API cannot run here) that speaks
//! the real wire protocol over a real socket and returns hashed bag-of-words vectors.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tempfile::TempDir;

const BUILTIN: &str = "builtin:all-MiniLM-L6-v2";
const OPENAI: &str = "openai:fake-bow";
const DIMS: usize = 16;

/// Counts requests and texts; answers 400 once `answer_first` requests have been answered.
struct Fake {
    requests: AtomicUsize,
    texts: AtomicUsize,
    answer_first: AtomicUsize,
}

fn bag_of_words(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DIMS];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let mut h: u64 = 0xcbf29ce484222325;
        for b in word.to_lowercase().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
        v[(h % DIMS as u64) as usize] += 1.0;
    }
    v
}

async fn embeddings(State(fake): State<Arc<Fake>>, Json(body): Json<Value>) -> Response {
    let n = fake.requests.fetch_add(1, Ordering::SeqCst);
    if n >= fake.answer_first.load(Ordering::SeqCst) {
        let error = json!({"error": {"message": "scripted failure", "type": "invalid_request"}});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    assert_eq!(body["model"], "fake-bow");
    let inputs = body["input"].as_array().cloned().unwrap_or_default();
    fake.texts.fetch_add(inputs.len(), Ordering::SeqCst);
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| json!({"index": i, "embedding": bag_of_words(t.as_str().unwrap())}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

async fn start_fake() -> (SocketAddr, Arc<Fake>) {
    let fake = Arc::new(Fake {
        requests: AtomicUsize::new(0),
        texts: AtomicUsize::new(0),
        answer_first: AtomicUsize::new(usize::MAX),
    });
    let app = axum::Router::new()
        .route("/v1/embeddings", axum::routing::post(embeddings))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, fake)
}

fn openai_flags(addr: SocketAddr) -> Vec<String> {
    ["--embedder", "openai", "--embed-url", &format!("http://{addr}"), "--embed-model", "fake-bow"]
        .map(String::from)
        .to_vec()
}

fn spine(data: &std::path::Path, args: &[String]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(SPINE);
    c.args(args)
        .arg("--data-dir")
        .arg(data)
        .env_remove("SPINE_OIDC_ISSUER")
        .env_remove("SPINE_EMBEDDER")
        .env_remove("SPINE_EMBED_URL")
        .env_remove("SPINE_EMBED_MODEL")
        .env_remove("SPINE_EMBED_API_KEY")
        .env_remove("SPINE_EMBED_DIMS")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    crate::common::backend_env(c.as_std_mut(), data);
    c
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn run(data: &std::path::Path, args: &[String]) -> Run {
    let out = tokio::time::timeout(Duration::from_secs(120), spine(data, args).output())
        .await
        .expect("spine finished in time")
        .expect("spine ran");
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

async fn reindex(data: &std::path::Path, addr: SocketAddr, batch: usize) -> Run {
    let mut args = vec!["reindex".to_owned(), "--batch".to_owned(), batch.to_string()];
    args.extend(openai_flags(addr));
    run(data, &args).await
}

/// `spine mcp` with extra arguments, as an MCP client session.
async fn mcp_client(data: &std::path::Path, extra: &[String]) -> Client {
    let mut cmd = spine(data, &[]);
    cmd.arg("mcp").args(extra);
    let (transport, _) =
        TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn().expect("spawn spine mcp");
    ().serve(transport).await.expect("initialize over stdio")
}

fn models(data: &std::path::Path) -> Vec<(String, u64)> {
    open_store(data).embedder_models().unwrap()
}

const NOTES: [&str; 5] = [
    "Deploy the rocket service to staging with make deploy",
    "Integration tests need the postgres container running",
    "The parser rejects tabs inside YAML anchors",
    "Prefer snake_case names for database columns",
    "Release notes are generated from conventional commits",
];

async fn store(client: &Client, content: &str) -> String {
    let r = ok(call(
        client,
        "store_memory",
        json!({"content": content, "scope": "reindex:project:spine",
               "source": "user-said", "category": "convention"}),
    )
    .await);
    r["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_embedder_is_refused_until_reindex() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let (addr, fake) = start_fake().await;

    // Records written with the built-in model, by a server that stays up throughout.
    let old_server = mcp_client(data, &[]).await;
    let mut ids = Vec::new();
    for note in NOTES {
        ids.push(store(&old_server, note).await);
    }
    assert_eq!(models(data), [(BUILTIN.to_owned(), 5)]);

    // A server with another embedder refuses to start, naming both and the way out.
    let mut args = vec!["mcp".to_owned()];
    args.extend(openai_flags(addr));
    let refused = run(data, &args).await;
    assert!(!refused.ok, "started: {}", refused.stderr);
    for needle in [BUILTIN, OPENAI, "spine reindex", "--embedder builtin", "5 vectors"] {
        assert!(refused.stderr.contains(needle), "{needle} not in: {}", refused.stderr);
    }
    assert_eq!(fake.requests.load(Ordering::SeqCst), 0, "the check makes no request");

    // Interrupted reindex: the server answers one batch of 2, then fails.
    fake.answer_first.store(1, Ordering::SeqCst);
    let broken = reindex(data, addr, 2).await;
    assert!(!broken.ok, "{}", broken.stdout);
    assert!(broken.stderr.contains("run `spine reindex` again"), "{}", broken.stderr);
    assert!(broken.stderr.contains("scripted failure"), "{}", broken.stderr);
    assert_eq!(models(data), [(BUILTIN.to_owned(), 3), (OPENAI.to_owned(), 2)]);

    // Resumed: only the 3 records left are embedded, in ceil(3 / 2) requests.
    fake.answer_first.store(usize::MAX, Ordering::SeqCst);
    fake.requests.store(0, Ordering::SeqCst);
    fake.texts.store(0, Ordering::SeqCst);
    let done = reindex(data, addr, 2).await;
    assert!(done.ok, "{}", done.stderr);
    assert_eq!(fake.requests.load(Ordering::SeqCst), 2);
    assert_eq!(fake.texts.load(Ordering::SeqCst), 3);
    assert!(done.stdout.contains("re-embedded 3 records with openai:fake-bow"), "{}", done.stdout);
    assert!(done.stdout.contains("openai:fake-bow: 5"), "{}", done.stdout);
    assert!(done.stderr.contains("re-embedding: 3/3"), "{}", done.stderr);
    assert_eq!(models(data), [(OPENAI.to_owned(), 5)]);

    // The old server kept running on the same directory; what it writes now is caught by
    // the next run.
    store(&old_server, "Written by the old server after the reindex").await;
    old_server.cancel().await.unwrap();
    assert_eq!(models(data), [(BUILTIN.to_owned(), 1), (OPENAI.to_owned(), 5)]);
    let again = reindex(data, addr, 64).await;
    assert!(again.ok && again.stdout.contains("re-embedded 1 record with"), "{}", again.stdout);
    let idle = reindex(data, addr, 64).await;
    assert!(idle.ok && idle.stdout.contains("nothing to re-embed"), "{}", idle.stdout);
    assert_eq!(models(data), [(OPENAI.to_owned(), 6)]);

    // Now the built-in model is the stranger.
    let refused = run(data, &["mcp".to_owned()]).await;
    assert!(!refused.ok);
    assert!(refused.stderr.contains(OPENAI) && refused.stderr.contains(BUILTIN));
    assert!(refused.stderr.contains("--embed-model fake-bow"), "{}", refused.stderr);

    // The new embedder starts, finds records by the vectors reindex wrote, and stores more.
    let client = mcp_client(data, &openai_flags(addr)).await;
    for (note, id) in NOTES.iter().zip(&ids) {
        let found = ok(call(
            &client,
            "search_memory",
            json!({"query": note, "scope": "reindex:project:spine", "k": 3}),
        )
        .await);
        assert_eq!(found["memories"][0]["id"], id.as_str(), "{note}: {found}");
        assert!(found["memories"][0]["score"].as_f64().unwrap() > 0.99, "{found}");
    }
    let new_id = store(&client, "Feature flags live in the flags service").await;
    let found = ok(call(
        &client,
        "search_memory",
        json!({"query": "Feature flags live in the flags service",
               "scope": "reindex:project:spine", "k": 1}),
    )
    .await);
    assert_eq!(found["memories"][0]["id"], new_id.as_str());
    client.cancel().await.unwrap();
    assert_eq!(models(data), [(OPENAI.to_owned(), 7)]);
}

#[tokio::test]
async fn openai_without_url_or_model_is_refused_with_the_flags_to_set() {
    let dir = TempDir::new().unwrap();
    let r = run(dir.path(), &["mcp".into(), "--embedder".into(), "openai".into()]).await;
    assert!(!r.ok);
    assert!(r.stderr.contains("--embed-url") && r.stderr.contains("--embed-model"), "{}", r.stderr);
}

#[tokio::test]
async fn the_api_key_is_never_printed() {
    let dir = TempDir::new().unwrap();
    let (addr, _fake) = start_fake().await;
    let client = mcp_client(dir.path(), &[]).await;
    store(&client, "one record with the built-in model").await;
    client.cancel().await.unwrap();
    let mut args = vec!["mcp".to_owned(), "--embed-api-key".into(), "sk-very-secret".into()];
    args.extend(openai_flags(addr));
    let r = run(dir.path(), &args).await;
    assert!(!r.ok);
    assert!(!r.stderr.contains("sk-very-secret") && !r.stdout.contains("sk-very-secret"));
    assert!(r.stderr.contains("SPINE_EMBED_API_KEY"), "{}", r.stderr);
}
