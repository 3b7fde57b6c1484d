//! Hostile input (issue 19): garbage at every layer of both transports gets a clear answer —
//! an HTTP 4xx, a JSON-RPC error, or a tool error naming the field and a hint — the server
//! stays up with bounded memory, and nothing stored changes.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::common::*;

const SCOPE: &str = "a:project:hostile";

fn store_args(content: &str) -> Value {
    json!({"content": content, "scope": SCOPE, "source": "user-said", "category": "decision"})
}

/// A POST to `path` with this content type and body; the status and the body as text.
async fn post(
    http: &reqwest::Client,
    url: &str,
    content_type: &str,
    session: Option<&str>,
    body: Vec<u8>,
) -> (u16, String) {
    let mut req = http
        .post(url)
        .header("content-type", content_type)
        .header("accept", "application/json, text/event-stream")
        .header("connect-protocol-version", "1")
        .body(body);
    if let Some(s) = session {
        req = req.header("mcp-session-id", s).header("mcp-protocol-version", "2025-06-18");
    }
    let r = req.send().await.expect("the server answers");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// Opens an MCP session with a raw `initialize` POST; its `Mcp-Session-Id`.
async fn raw_session(http: &reqwest::Client, mcp_url: &str) -> String {
    let r = http
        .post(mcp_url)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}))
        .send()
        .await
        .unwrap();
    r.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}

fn deep(levels: usize) -> Vec<u8> {
    let mut b = vec![b'['; levels];
    b.extend(std::iter::repeat_n(b']', levels));
    b
}

fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_http_input_gets_clear_errors_and_changes_nothing() {
    let mut server = start_http().await;
    let base = format!("http://{}", server.addr);
    let mcp_url = format!("{base}/mcp");
    let client = ().serve(StreamableHttpClientTransport::from_uri(mcp_url.clone())).await.unwrap();
    let kept =
        ok(call(&client, "store_memory", store_args("We deploy with blue-green switches.")).await);

    // Tool arguments: each refused with its field and a hint.
    let many_tags: Vec<String> = (0..100_000).map(|i| format!("t{i}")).collect();
    let mut tags = store_args("Tags galore.");
    tags["tags"] = json!(many_tags);
    let big = "x".repeat(1 << 20);
    let bad_args = [
        ("store_memory", store_args(&big), "content"),
        ("store_memory", tags, "tags"),
        ("list_memory", json!({"scope": SCOPE, "limit": 1e300}), "limit"),
        ("list_memory", json!({"scope": SCOPE, "limit": 18446744073709551616u128 as f64}), "limit"),
        ("list_memory", json!({"scope": SCOPE, "limit": -1}), "limit"),
        ("list_memory", json!({"scope": SCOPE, "cursor": "%%%not-a-cursor%%%"}), "cursor"),
        ("search_memory", json!({"query": "deploy", "scope": SCOPE, "k": 1001}), "k"),
        ("get_memory", json!({"id": "x".repeat(100_000)}), "id"),
        ("store_memory", json!({"content": 7, "scope": SCOPE}), "content"),
    ];
    for (tool, args, field) in bad_args {
        let e = err(call(&client, tool, args).await);
        assert_eq!(e["field"], field, "{tool}: {e}");
        assert!(e["hint"].as_str().is_some_and(|h| !h.is_empty()), "{tool}: {e}");
    }
    // A NUL character: refused alike on both backends (PostgreSQL text cannot hold it), with
    // the path to the string that carries it.
    let e = err(call(&client, "store_memory", store_args("before\u{0}after")).await);
    assert_eq!((&e["field"], &e["hint"]), (&json!("content"), &json!("nul_character")), "{e}");
    let mut nul_tag = store_args("A tag with a NUL.");
    nul_tag["tags"] = json!(["fine", "bad\u{0}"]);
    let e = err(call(&client, "store_memory", nul_tag).await);
    assert_eq!((&e["field"], &e["hint"]), (&json!("tags[1]"), &json!("nul_character")), "{e}");
    let nul = ok(call(&client, "store_memory", store_args("A second record, stored.")).await);

    // The transport: malformed bodies are 400 with a JSON-RPC error, never a 415 or a hang.
    let http = reqwest::Client::new();
    let session = raw_session(&http, &mcp_url).await;
    let call_with = |content: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"store_memory","arguments":{{"content":{content},"scope":"{SCOPE}","source":"user-said","category":"decision"}}}}}}"#
        )
        .into_bytes()
    };
    let mut invalid_utf8 = call_with("\"abc\"");
    let at = invalid_utf8.windows(3).position(|w| w == b"abc").unwrap();
    invalid_utf8[at + 1] = 0xff;
    let batch: Vec<Value> =
        (0..5000).map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "tools/list"})).collect();
    let truncated = call_with("\"cut here");
    let cases: Vec<(&str, Vec<u8>, i64)> = vec![
        ("invalid JSON", b"{".to_vec(), -32700),
        ("a truncated body", truncated[..truncated.len() - 20].to_vec(), -32700),
        ("invalid UTF-8", invalid_utf8, -32700),
        ("a lone surrogate", call_with(r#""\ud800""#), -32700),
        ("100,000 levels of nesting", deep(100_000), -32700),
        ("a batch of 5,000 requests", serde_json::to_vec(&batch).unwrap(), -32600),
        ("a bare string", b"\"hello\"".to_vec(), -32600),
    ];
    for (what, body, code) in cases {
        let (status, text) = post(&http, &mcp_url, "application/json", Some(&session), body).await;
        assert_eq!(status, 400, "{what}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{what}: {text}"));
        assert_eq!(body["error"]["code"], code, "{what}: {text}");
    }
    let twenty_mb = call_with(&format!("\"{}\"", "y".repeat(20 << 20)));
    let (status, _) = post(&http, &mcp_url, "application/json", Some(&session), twenty_mb).await;
    assert_eq!(status, 413, "20 MB body");
    let ten_mb = call_with(&format!("\"{}\"", "y".repeat(10 << 20)));
    let (status, _) = post(&http, &mcp_url, "application/json", Some(&session), ten_mb).await;
    assert_eq!(status, 413, "10 MB content");
    let (status, _) = post(&http, &mcp_url, "text/plain", Some(&session), b"{}".to_vec()).await;
    assert_eq!(status, 415, "wrong content type");
    let list = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    let (status, _) =
        post(&http, &mcp_url, "application/json", Some("bogus-session"), list.unwrap()).await;
    assert_eq!(status, 404, "unknown session id");

    // The Connect API: the same garbage, its own error shape.
    let list_url = format!("{base}/spine.v1.MemoryService/ListMemories");
    let connect_cases: Vec<(&str, &str, Vec<u8>, u16)> = vec![
        ("invalid JSON", "application/json", b"{".to_vec(), 400),
        ("invalid UTF-8", "application/json", b"{\"scope\":\"\xff\"}".to_vec(), 400),
        ("100,000 levels of nesting", "application/json", deep(100_000), 400),
        ("a negative limit", "application/json", br#"{"scope":"a:b:c","limit":-1}"#.to_vec(), 400),
        (
            "a garbage cursor",
            "application/json",
            br#"{"scope":"a:b:c","cursor":"!!"}"#.to_vec(),
            400,
        ),
        ("protobuf garbage", "application/proto", vec![0xff; 64], 400),
        ("20 MB", "application/json", vec![b' '; 20 << 20], 429),
        ("a wrong content type", "text/plain", b"{}".to_vec(), 415),
    ];
    for (what, content_type, body, want) in connect_cases {
        let (status, text) = post(&http, &list_url, content_type, None, body).await;
        assert_eq!(status, want, "Connect, {what}: {text}");
    }

    // Still up, nothing changed, memory bounded.
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert!(health.status().is_success());
    assert!(server.child.try_wait().unwrap().is_none(), "the server is still running");
    let listed = ok(call(&client, "list_memory", json!({"scope": SCOPE})).await);
    let ids: Vec<&Value> =
        listed["memories"].as_array().unwrap().iter().map(|m| &m["id"]).collect();
    assert_eq!(ids, vec![&nul["id"], &kept["id"]], "only the two stored records: {listed}");
    let again = ok(call(&client, "get_memory", json!({"id": kept["id"]})).await);
    assert_eq!(again["content"], "We deploy with blue-green switches.");
    let pid = server.child.id().unwrap();
    let rss = peak_rss_mib(pid);
    assert!(rss < 1024, "peak RSS {rss} MiB after the hostile requests");
    client.cancel().await.unwrap();
    server.child.kill().await.unwrap();
}

#[tokio::test]
async fn hostile_stdio_lines_are_answered_and_the_session_goes_on() {
    let dir = tempfile::TempDir::new().unwrap();
    let mut child = raw_stdio_command(dir.path()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |line: &[u8]| {
        stdin.write_all(line).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    send(init.to_string().as_bytes()).await;
    send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    let batch: Vec<Value> = (0..3000)
        .map(|i| json!({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/list"}))
        .collect();
    let store = |content: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"store_memory","arguments":{{"content":{content},"scope":"{SCOPE}","source":"user-said","category":"decision"}}}}}}"#
        )
    };
    let hostile: Vec<Vec<u8>> = vec![
        b"{".to_vec(),
        b"\xff\xfe not UTF-8".to_vec(),
        deep(100_000),
        store(r#""\ud800""#).into_bytes(),
        vec![b' '; 5 << 20],
        serde_json::to_vec(&batch).unwrap(),
    ];
    for line in &hostile {
        send(line).await;
    }
    send(store(r#""after the garbage""#).as_bytes()).await;
    let mut answers = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = stdout.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap();
            let done = v["id"] == 8;
            answers.push(v);
            if done {
                break;
            }
        }
    });
    read.await.expect("every line is answered and the session goes on");
    assert!(answers.iter().any(|a| a["id"] == 1), "initialize answered");
    let codes: Vec<i64> = answers.iter().filter_map(|a| a["error"]["code"].as_i64()).collect();
    let parse_errors = codes.iter().filter(|&&c| c == -32700).count();
    let invalid = codes.iter().filter(|&&c| c == -32600).count();
    assert_eq!((parse_errors, invalid), (4, 2), "one error per hostile line: {codes:?}");
    let stored = answers.last().unwrap();
    assert!(stored["result"]["structuredContent"]["id"].is_string(), "{stored}");
    assert!(child.try_wait().unwrap().is_none(), "spine mcp is still running");
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap();
    assert!(status.unwrap().success(), "spine mcp ends cleanly when its input ends");
}

/// Issue 19, secrets stay out: a credential in written text is refused by default (naming
/// what and where, never echoing it), redacted with `--secrets redact`, kept with `allow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_refused_redacted_or_allowed() {
    const KEY: &str = "AKIAIOSFODNN7EXAMPLE";
    let leaky = format!("The deploy job reads {KEY} from the runner's environment.");
    let mut reject = start_http().await;
    let client =
        ().serve(StreamableHttpClientTransport::from_uri(format!("http://{}/mcp", reject.addr)))
            .await
            .unwrap();
    let e = err(call(&client, "store_memory", store_args(&leaky)).await);
    assert_eq!((&e["field"], &e["hint"]), (&json!("content"), &json!("secret_detected")), "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("an AWS access key id") && message.contains("character 21"), "{e}");
    assert!(!e.to_string().contains(KEY), "the credential is never echoed: {e}");
    let mut with_summary = store_args("Where the deploy credentials live.");
    with_summary["summary"] = json!("password = \"Tr0ub4dor&3\"");
    let e = err(call(&client, "store_memory", with_summary).await);
    assert_eq!((&e["field"], &e["hint"]), (&json!("summary"), &json!("secret_detected")), "{e}");
    let kept =
        ok(call(&client, "store_memory", store_args("Deploy keys live in the vault.")).await);
    let e = err(call(&client, "update_memory", json!({"id": kept["id"], "content": leaky})).await);
    assert_eq!(e["hint"], "secret_detected", "{e}");
    let rule = json!({"scope": "rule:project:x", "summary": "Use the shared key",
        "content": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"});
    let e = err(call(&client, "store_rule", rule).await);
    assert_eq!((&e["field"], &e["hint"]), (&json!("content"), &json!("secret_detected")), "{e}");
    let listed = ok(call(&client, "list_memory", json!({"scope": SCOPE, "full": true})).await);
    assert_eq!(listed["memories"].as_array().unwrap().len(), 1, "nothing refused was stored");
    assert_eq!(listed["memories"][0]["content"], "Deploy keys live in the vault.");
    client.cancel().await.unwrap();
    reject.child.kill().await.unwrap();

    for (policy, want) in [
        ("redact", "The deploy job reads [REDACTED:aws-key] from the runner's environment."),
        ("allow", leaky.as_str()),
    ] {
        let mut server = start_http_with(&["--secrets", policy]).await;
        let url = format!("http://{}/mcp", server.addr);
        let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
        let s = ok(call(&client, "store_memory", store_args(&leaky)).await);
        let got = ok(call(&client, "get_memory", json!({"id": s["id"]})).await);
        assert_eq!(got["content"], want, "--secrets {policy}");
        client.cancel().await.unwrap();
        server.child.kill().await.unwrap();
    }
}

/// Sets the file-size limit (RLIMIT_FSIZE) of process `pid`; `None` lifts it.
fn set_file_size_limit(pid: u32, bytes: Option<u64>) {
    let limit = bytes.unwrap_or(libc::RLIM_INFINITY);
    let new = libc::rlimit { rlim_cur: limit, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: prlimit with a valid pid and a pointer to a live rlimit; no old value read.
    let rc = unsafe {
        libc::prlimit(pid as libc::pid_t, libc::RLIMIT_FSIZE, &new, std::ptr::null_mut())
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

/// Issue 19, resource faults: when the embedded store cannot write (here a file-size limit
/// the server reaches, as a full disk would be), writes fail with `unavailable` naming the
/// cause, reads go on, nothing stored is damaged, and writes work again once the limit goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_write_fails_writes_clearly_and_recovers() {
    if embedded_only() {
        return;
    }
    let mut server = start_http().await;
    let url = format!("http://{}/mcp", server.addr);
    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    let first =
        ok(call(&client, "store_memory", store_args("Releases are cut on Tuesdays.")).await);
    let pid = server.child.id().unwrap();
    set_file_size_limit(pid, Some(1));
    for attempt in 0..3 {
        let e = err(call(&client, "store_memory", store_args("Hotfixes skip the queue.")).await);
        assert_eq!(e["code"], "unavailable", "attempt {attempt}: {e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains("the store cannot write"), "{e}");
    }
    let e = err(call(&client, "archive_memory", json!({"ids": [first["id"]]})).await);
    assert_eq!(e["code"], "unavailable", "{e}");
    // Reads go on.
    let got = ok(call(&client, "get_memory", json!({"id": first["id"]})).await);
    assert_eq!(got["content"], "Releases are cut on Tuesdays.");
    let found =
        ok(call(&client, "search_memory", json!({"query": "release day", "scope": SCOPE})).await);
    assert_eq!(found["memories"][0]["id"], first["id"], "{found}");
    // Space returns: writes work, and everything is intact.
    set_file_size_limit(pid, None);
    let second = ok(call(&client, "store_memory", store_args("Hotfixes skip the queue.")).await);
    let listed = ok(call(&client, "list_memory", json!({"scope": SCOPE})).await);
    let ids: Vec<&Value> =
        listed["memories"].as_array().unwrap().iter().map(|m| &m["id"]).collect();
    assert_eq!(ids, vec![&second["id"], &first["id"]], "{listed}");
    assert!(server.child.try_wait().unwrap().is_none(), "the server is still running");
    client.cancel().await.unwrap();
    server.child.kill().await.unwrap();
    let review = spine(server._dir.path(), &["spine-review", "verify", "--all-scopes"]).await;
    assert!(review.ok, "{}\n{}", review.stdout, review.stderr);
}

/// Issue 19: SIGTERM stops `spine serve` gracefully — a call in flight when the signal
/// arrives (here: its headers read, its body not yet sent) still completes and is answered,
/// the write is durable, and the process exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_call_in_flight_finish() {
    use tokio::io::AsyncReadExt;
    let mut server = start_http().await;
    let addr = server.addr.clone();
    let http = reqwest::Client::new();
    let session = raw_session(&http, &format!("http://{addr}/mcp")).await;
    let (status, _) = post(
        &http,
        &format!("http://{addr}/mcp"),
        "application/json",
        Some(&session),
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 202);

    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "store_memory", "arguments": store_args("Stopping waits for calls in flight.")}})
    .to_string();
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\n\
         Mcp-Protocol-Version: 2025-06-18\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    // `100 Continue` arrives once the handler reads the body: the call is in flight.
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        tcp.read_exact(&mut byte).await.unwrap();
        got.push(byte[0]);
    }
    assert!(got.starts_with(b"HTTP/1.1 100"), "{}", String::from_utf8_lossy(&got));

    let pid = server.child.id().unwrap();
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    // The listener closes: new connections are refused while the call is still open.
    let refused = tokio::time::timeout(Duration::from_secs(10), async {
        while tokio::net::TcpStream::connect(&addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    refused.await.expect("the server stops accepting connections");

    tcp.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut answer));
    read.await.expect("the answer arrives").unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("structuredContent") && answer.contains("short_id"), "{answer}");
    let status = tokio::time::timeout(Duration::from_secs(20), server.child.wait()).await;
    assert!(status.expect("spine serve exits").unwrap().success(), "a clean exit");
    let store = open_store(server._dir.path());
    assert_eq!(store.count_records(None).unwrap(), 1, "the drained write is durable");
}

/// `/readyz` (issue 68): `503 not ready: …` until the model has loaded, then `200 ready`
/// while the store answers; once SIGTERM arrives, a probe still being read (its headers
/// half sent) is answered `503` naming the drain, while `/healthz` stays liveness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_ready_once_loaded_and_not_while_stopping() {
    use tokio::io::AsyncReadExt;
    let mut server = start_http().await;
    let addr = server.addr.clone();
    let http = reqwest::Client::new();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let r = http.get(format!("http://{addr}/readyz")).send().await.unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            match status {
                200 => return text,
                503 => assert!(text.starts_with("not ready: "), "{text}"),
                s => panic!("/readyz answered {s}: {text}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert_eq!(ready.await.expect("ready within a minute"), "ready\n");
    // No token and no allowed Host needed: orchestrators probe pods by IP.
    let r = http.get(format!("http://{addr}/readyz")).header("Host", "10.1.2.3:8080").send();
    assert_eq!(r.await.unwrap().status(), 200);

    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\n").as_bytes()).await.unwrap();
    // Only a request the server has begun to read outlives the signal (an idle connection is
    // closed): wait until its socket's receive queue is empty.
    let (server_port, client_port) =
        (tcp.peer_addr().unwrap().port(), tcp.local_addr().unwrap().port());
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        while unread_bytes(server_port, client_port) != Some(0) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    read.await.expect("the server reads the probe's first bytes");
    let pid = server.child.id().unwrap();
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    let refused = tokio::time::timeout(Duration::from_secs(10), async {
        while tokio::net::TcpStream::connect(&addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    refused.await.expect("the server stops accepting connections");
    tcp.write_all(b"\r\n").await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut answer));
    read.await.expect("the answer arrives").unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.ends_with("not ready: the server is stopping (draining the calls in flight)\n"));
    let status = tokio::time::timeout(Duration::from_secs(20), server.child.wait()).await;
    assert!(status.expect("spine serve exits").unwrap().success(), "a clean exit");
}

/// The bytes waiting in the receive queue of the server's side of a loopback TCP connection
/// (`/proc/net/tcp`: local port `server`, remote port `client`), if it is listed.
fn unread_bytes(server: u16, client: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = |addr: &str| u16::from_str_radix(addr.rsplit_once(':')?.1, 16).ok();
        if port(f.get(1)?)? != server || port(f.get(2)?)? != client {
            return None;
        }
        u64::from_str_radix(f.get(4)?.split_once(':')?.1, 16).ok()
    })
}
