//! Shared set-up for the end-to-end tests: the real `spine` binary over stdio and HTTP,
//! driven by the rmcp client, with helpers that check the result envelope.
#![allow(dead_code)]

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::Value;
use tempfile::TempDir;

pub const SPINE: &str = env!("CARGO_BIN_EXE_spine");

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The interpreter of the Python SDK environment `scripts/test.sh` creates (target/pyenv),
/// or `None` when it is missing and the test should skip. The README's test command sets
/// SPINE_REQUIRE_PYTHON, so there a missing environment fails instead.
pub fn python() -> Option<std::path::PathBuf> {
    let python = repo().join("target/pyenv/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var_os("SPINE_REQUIRE_PYTHON").is_none(),
        "the Python SDK environment is missing: run scripts/test.sh"
    );
    eprintln!("skipped: no Python SDK environment (scripts/test.sh creates it)");
    None
}

/// Whether the binary's store is PostgreSQL in this run (`SPINE_TEST_BACKEND=postgres`, with
/// `SPINE_TEST_DATABASE_URL` naming the server): every data directory a test hands to the
/// helpers below then stands for a fresh database of its own.
pub fn on_postgres() -> bool {
    std::env::var("SPINE_TEST_BACKEND").as_deref() == Ok("postgres")
}

/// The fresh databases standing for data directories, kept for the whole test run (the
/// throw-away server goes with them).
static DATABASES: LazyLock<
    Mutex<HashMap<std::path::PathBuf, spine_testkit::postgres::FreshDatabase>>,
> = LazyLock::new(Default::default);

/// Points `cmd` (`as_std_mut()` for a tokio one) at the store for `data`: with `on_postgres()` the database standing for that
/// directory (made on first use), else the directory itself (and no URL from the environment).
pub fn backend_env(cmd: &mut std::process::Command, data: &std::path::Path) {
    if !on_postgres() {
        cmd.env_remove("SPINE_DATABASE_URL");
        return;
    }
    cmd.env("SPINE_DATABASE_URL", database_for(data));
}

/// The URL of the database standing for `data`, made on first use.
fn database_for(data: &std::path::Path) -> String {
    let mut dbs = DATABASES.lock().unwrap();
    let db = dbs.entry(data.to_path_buf()).or_insert_with(|| {
        spine_testkit::postgres::fresh_database()
            .expect("SPINE_TEST_BACKEND=postgres needs SPINE_TEST_DATABASE_URL")
    });
    db.url.clone()
}

/// The store the binary uses for `data` (see [`backend_env`]), opened in the test.
pub fn open_store(data: &std::path::Path) -> Box<dyn spine_store::OperatorStore> {
    if !on_postgres() {
        return Box::new(spine_store::SqliteStore::open(data).unwrap());
    }
    Box::new(spine_store::PgStore::connect(&database_for(data)).unwrap())
}

/// True (and says so) on PostgreSQL, for a test that then returns: it checks the embedded
/// store's own files or SQL.
pub fn embedded_only() -> bool {
    let skip = on_postgres();
    if skip {
        eprintln!("skipped on PostgreSQL: this test checks the embedded store's files or SQL");
    }
    skip
}

pub type Client = RunningService<RoleClient, ()>;

pub async fn stdio_client(data: &std::path::Path) -> Client {
    stdio_client_with(data, &[]).await
}

/// [`stdio_client`] with extra arguments for `spine mcp`.
pub async fn stdio_client_with(data: &std::path::Path, extra: &[&str]) -> Client {
    let mut cmd = tokio::process::Command::new(SPINE);
    cmd.arg("mcp").arg("--data-dir").arg(data).args(extra);
    backend_env(cmd.as_std_mut(), data);
    // The server's log goes to a file of its own (the builder, unlike `new`, lets it go
    // somewhere other than the test's output), read back only if the server never answers.
    let log = tempfile::NamedTempFile::new().expect("a file for the server's log");
    let stderr = log.as_file().try_clone().expect("the log file's handle");
    let (transport, _) =
        TokioChildProcess::builder(cmd).stderr(stderr).spawn().expect("spawn spine mcp");
    match ().serve(transport).await {
        Ok(client) => client,
        Err(e) => {
            let said = std::fs::read_to_string(log.path()).unwrap_or_default();
            panic!("initialize over stdio: {e}; the server's log:\n{said}")
        }
    }
}

/// `spine mcp` over `data` with piped stdin and stdout, for tests that speak raw JSON-RPC.
pub fn raw_stdio_command(data: &std::path::Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(SPINE);
    cmd.arg("mcp")
        .arg("--data-dir")
        .arg(data)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    backend_env(cmd.as_std_mut(), data);
    cmd
}

/// Each tool's outputSchema as a compiled validator, from the first `tools/list` a test
/// makes (every server in a test run is the same binary).
static OUTPUT_SCHEMAS: LazyLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> =
    LazyLock::new(Default::default);

async fn output_validator(client: &Client, tool: &str) -> Arc<jsonschema::Validator> {
    if let Some(v) = OUTPUT_SCHEMAS.lock().unwrap().get(tool) {
        return v.clone();
    }
    let tools = client.list_all_tools().await.expect("tools/list");
    let mut schemas = OUTPUT_SCHEMAS.lock().unwrap();
    for t in tools {
        let schema =
            Value::Object((*t.output_schema.expect("every tool has an outputSchema")).clone());
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&schema)
            .unwrap_or_else(|e| panic!("{} outputSchema compiles: {e}", t.name));
        schemas.insert(t.name.to_string(), Arc::new(validator));
    }
    schemas.get(tool).unwrap_or_else(|| panic!("{tool} is listed")).clone()
}

/// Calls `tool`; a success result must validate against the tool's outputSchema (the
/// TypeScript SDK rejects one that does not), an error result must carry none.
pub async fn call(client: &Client, tool: &'static str, args: Value) -> CallToolResult {
    let r = client
        .call_tool(
            CallToolRequestParams::new(tool).with_arguments(args.as_object().cloned().unwrap()),
        )
        .await
        .expect("tools/call answered");
    if r.is_error == Some(true) {
        assert!(r.structured_content.is_none(), "{tool}: an error result has no structuredContent");
    } else {
        let structured = r.structured_content.as_ref().expect("structuredContent on success");
        let validator = output_validator(client, tool).await;
        let problems: Vec<String> = validator
            .iter_errors(structured)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            problems.is_empty(),
            "{tool} result does not match its outputSchema: {problems:?}\n{structured}"
        );
    }
    r
}

/// The JSON of the one text block.
pub fn text_json(r: &CallToolResult) -> Value {
    let text = &r.content[0].as_text().expect("a text block").text;
    serde_json::from_str(text).expect("the text block is JSON")
}

/// The structured content, after checking the text block carries the same JSON.
pub fn body(r: &CallToolResult) -> Value {
    let structured = r.structured_content.clone().expect("structuredContent present");
    assert_eq!(text_json(r), structured, "text block = structured");
    structured
}

pub fn ok(r: CallToolResult) -> Value {
    assert_ne!(r.is_error, Some(true), "unexpected error: {:?}", r.content);
    body(&r)
}

/// The `{"error": {...}}` envelope of a rejected call, read from its text block.
pub fn err(r: CallToolResult) -> Value {
    assert_eq!(r.is_error, Some(true), "expected a tool error: {:?}", r.content);
    assert!(r.structured_content.is_none(), "an error result has no structuredContent");
    assert_eq!(r.content.len(), 1, "an error result is one text block");
    text_json(&r)["error"].clone()
}

pub struct Server {
    pub child: tokio::process::Child,
    pub addr: String,
    pub _dir: TempDir,
}

pub async fn start_http() -> Server {
    start_http_with(&[]).await
}

/// `spine serve` on a free loopback port with extra arguments, in a fresh data directory.
pub async fn start_http_with(extra: &[&str]) -> Server {
    start_http_in(TempDir::new().unwrap(), extra).await
}

/// `spine serve` on a free loopback port over `dir`, with extra arguments.
pub async fn start_http_in(dir: TempDir, extra: &[&str]) -> Server {
    start_http_env(dir, extra, &[]).await
}

/// [`start_http_in`] with extra environment variables.
pub async fn start_http_env(dir: TempDir, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = tokio::process::Command::new(SPINE);
    cmd.args(["serve", "--listen", &addr, "--data-dir"])
        .arg(dir.path())
        .args(extra)
        .env_remove("SPINE_OIDC_ISSUER")
        .envs(env.iter().copied())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    backend_env(cmd.as_std_mut(), dir.path());
    let mut child = cmd.spawn().unwrap();
    let http = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(r) = http.get(format!("http://{addr}/healthz")).send().await
            && r.status().is_success()
        {
            return Server { child, addr, _dir: dir };
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("spine serve exited early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("spine serve did not become healthy");
}

/// An MCP session over streamable HTTP with `spine serve` at `addr`.
pub async fn http_client_at(addr: &str) -> Client {
    let transport =
        rmcp::transport::StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp"));
    rmcp::ServiceExt::serve((), transport).await.unwrap()
}

/// What an operator command printed, and how it exited.
pub struct Run {
    pub code: i32,
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// What a finished process printed, and how it exited.
    pub fn of(out: std::process::Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// stdout as the one JSON document `--json` prints.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", self.stdout))
    }
}

/// `spine <args> --data-dir <data>` with no embedder, auth or backend settings from the
/// environment; it must finish within three minutes and never panic.
pub async fn spine(data: &std::path::Path, args: &[&str]) -> Run {
    let mut c = tokio::process::Command::new(SPINE);
    c.args(args)
        .arg("--data-dir")
        .arg(data)
        .env("SPINE_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .env_remove("SPINE_OIDC_ISSUER")
        .env_remove("SPINE_EMBEDDER")
        .env_remove("SPINE_EMBED_URL")
        .env_remove("SPINE_EMBED_MODEL")
        .env_remove("SPINE_EMBED_DIMS")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    backend_env(c.as_std_mut(), data);
    let out = tokio::time::timeout(Duration::from_secs(180), c.output())
        .await
        .expect("spine finished in time")
        .expect("spine ran");
    let run = Run::of(out);
    assert!(!run.stderr.contains("panicked"), "spine panicked: {}", run.stderr);
    run
}
