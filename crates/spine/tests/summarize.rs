//! `spine summarize-missing` end to end: the real binary against a real store, with the
//! built-in extractive summarizer and with a local OpenAI-compatible chat server.
//!
//! The chat server is a fake (a hosted model cannot run here) that speaks the real wire
//! protocol over a real socket; each test scripts its answers and checks the requests.
//! Flags, printing, exit codes and signals; the sweep's rules with a chat model (retries,
//! failures per record, edits meanwhile, the length bound) are tested in-process in
//! spine-ops' `chat` tests.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use spine_core::{
    Caller, Category, Memory, RecordId, Scope, ShortId, Source, SummarySource, Timestamp,
};
use spine_store::Embedding;
use spine_testkit::provider::FakeProvider;
use tempfile::TempDir;

const SCOPE: &str = "acme:project:spine";
const BUILTIN_EMBEDDER: &str = "builtin:all-MiniLM-L6-v2";

// ---------------------------------------------------------------------------------------
// The fake chat-completions server.

/// The chat-specific replies (the shared ones are in `spine_testkit::provider`).
enum Answer {
    /// 200 with this assistant message.
    Say(String),
}

type Reply = spine_testkit::provider::Reply<Answer>;
type Fake = FakeProvider<Answer>;

/// The default answer: a recognisable summary of the note, padded with whitespace the
/// command must strip.
fn default_summary(note: &str) -> String {
    format!(
        "  \n Summary of: {}  \n",
        note.split_whitespace().take(4).collect::<Vec<_>>().join(" ")
    )
}

fn chat_answer(content: &str) -> Response {
    Json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "fake",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    }))
    .into_response()
}

/// The chat-completions answer to `body`: the scripted message, or by default a summary of
/// the note (the user message).
fn completions(answer: Option<Answer>, body: &Value) -> Response {
    let note = body["messages"][1]["content"].as_str().unwrap_or_default();
    match answer {
        Some(Answer::Say(s)) => chat_answer(&s),
        None => chat_answer(&default_summary(note)),
    }
}

/// Answer with this assistant message.
fn say(s: String) -> Reply {
    Reply::Answer(Answer::Say(s))
}

/// Starts the fake on a free loopback port.
fn fake() -> Fake {
    FakeProvider::start("/v1/chat/completions", completions)
}

// ---------------------------------------------------------------------------------------
// Records and the binary.

/// Stores records directly (as a server would), `created_at` spaced a second apart from
/// `start`, oldest first.
fn seed_at(data: &Path, scope: &str, notes: &[&str], start: Timestamp) -> Vec<RecordId> {
    let store = open_store(data);
    let mut vector = vec![0f32; 384];
    vector[0] = 1.0;
    notes
        .iter()
        .enumerate()
        .map(|(i, note)| {
            let m = Memory::new(
                ShortId::mint(),
                (*note).to_owned(),
                Scope::parse("scope", scope).unwrap(),
                Source::UserSaid,
                Category::Convention,
                &Caller::anonymous(),
                Timestamp::from_micros(start.as_micros() + i as i64 * 1_000_000),
            );
            store
                .insert(
                    &spine_store::Access::operator(),
                    &m,
                    Embedding { model: BUILTIN_EMBEDDER, vector: &vector },
                )
                .unwrap();
            m.id
        })
        .collect()
}

fn seed(data: &Path, notes: &[&str]) -> Vec<RecordId> {
    seed_at(data, SCOPE, notes, Timestamp::from_micros(1_767_225_600_000_000)) // 2026-01-01
}

fn records(data: &Path, ids: &[RecordId]) -> Vec<Memory> {
    let got = open_store(data).get_many(ids).unwrap();
    assert_eq!(got.len(), ids.len());
    got
}

/// `spine summarize-missing` with `args`, the summarizer settings cleared then set to `env`.
fn command(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(SPINE);
    c.arg("summarize-missing").args(args).arg("--data-dir").arg(data);
    for var in [
        "SPINE_SUMMARY_MODEL",
        "SPINE_SUMMARY_URL",
        "SPINE_SUMMARY_API_KEY",
        "SPINE_SUMMARY_MAX_CHARS",
        "SPINE_SUMMARY_REQUEST_TIMEOUT",
    ] {
        c.env_remove(var);
    }
    backend_env(&mut c, data);
    c.envs(env.iter().copied()).stdin(Stdio::null());
    c
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{e}: stdout {} / stderr {}", self.stdout, self.stderr))
    }
}

fn finished(out: Output) -> Run {
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    finished(command(data, args, env).output().expect("spine ran"))
}

fn wait(mut child: Child, limit: Duration) -> Run {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            panic!("spine did not stop within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    finished(child.wait_with_output().unwrap())
}

/// Environment variables for the child.
type Env<'a> = &'a [(&'a str, &'a str)];

const EXTRACTIVE: Env = &[("SPINE_SUMMARY_MODEL", "builtin:extractive")];

const NOTES: [&str; 4] = [
    "Integration tests need the postgres container running. Start it with make db.",
    "Prefer snake_case names for database columns; the ORM maps them.",
    "Release notes are generated from conventional commits by the release job.",
    "The parser rejects tabs inside YAML anchors, so indent with spaces.",
];

// ---------------------------------------------------------------------------------------
// The built-in summarizer, beside a live server.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_extractive_fills_missing_summaries_beside_a_live_server() {
    let dir = TempDir::new().unwrap();
    let data = dir.path().to_owned();
    let client = stdio_client(&data).await;
    let mut ids = Vec::new();
    for (i, note) in NOTES.iter().enumerate() {
        let mut args = json!({"content": note, "scope": SCOPE, "source": "user-said",
                              "category": "convention"});
        if i == 1 {
            args["summary"] = json!("snake_case columns (written by the client)");
        }
        let r = ok(call(&client, "store_memory", args).await);
        ids.push(r["id"].as_str().unwrap().to_owned());
    }

    let d = data.clone();
    let r = tokio::task::spawn_blocking(move || run(&d, &["--all-scopes", "--json"], EXTRACTIVE))
        .await
        .unwrap();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let report = r.json();
    assert_eq!(report["model"], "builtin:extractive");
    assert_eq!(report["endpoint"], Value::Null);
    assert_eq!(report["dry_run"], false);
    assert_eq!((report["eligible"].as_u64(), report["summarized"].as_u64()), (Some(3), Some(3)));
    assert_eq!((report["failed"].as_u64(), report["not_reached"].as_u64()), (Some(0), Some(0)));
    assert_eq!(report["stopped"], Value::Null);

    // The live server reads them at once.
    let first = ok(call(&client, "get_memory", json!({"id": ids[0]})).await);
    assert_eq!(
        first["summary"],
        "Integration tests need the postgres container running. Start it with make db."
    );
    assert_eq!(first["summary_source"], "auto");
    assert_eq!(first["summary_model"], "builtin:extractive");
    assert!(first.get("summary_egress_at").is_none_or(Value::is_null), "{first}");
    let client_written = ok(call(&client, "get_memory", json!({"id": ids[1]})).await);
    assert_eq!(client_written["summary"], "snake_case columns (written by the client)");
    assert_eq!(client_written["summary_source"], "client");
    assert_eq!(client_written["summary_model"].as_str().unwrap_or(""), "");

    // Recall shows the auto summary; search still finds the record (the index is intact).
    let found = ok(call(
        &client,
        "search_memory",
        json!({"query": "YAML anchors with tabs", "scope": SCOPE, "k": 1}),
    )
    .await);
    assert_eq!(found["memories"][0]["id"], ids[3].as_str(), "{found}");

    // update_memory on an auto-summarized record: new content drops the stale summary, and
    // the next run summarizes it again.
    let new = "Release notes come from the changelog file now, edited by hand.";
    ok(call(&client, "update_memory", json!({"id": ids[2], "content": new})).await);
    let d = data.clone();
    let again = tokio::task::spawn_blocking(move || run(&d, &["--scope", SCOPE], EXTRACTIVE))
        .await
        .unwrap();
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(
        again.stdout.contains("summarized 1 of 1 record with builtin:extractive"),
        "{}",
        again.stdout
    );
    let third = ok(call(&client, "get_memory", json!({"id": ids[2]})).await);
    assert_eq!(third["summary"], new);

    let d = data.clone();
    let idle =
        tokio::task::spawn_blocking(move || run(&d, &["--all-scopes"], EXTRACTIVE)).await.unwrap();
    assert_eq!(idle.code, Some(0));
    assert!(idle.stdout.contains("nothing to summarize"), "{}", idle.stdout);
    client.cancel().await.unwrap();
}

#[test]
fn dry_run_counts_and_writes_nothing() {
    let dir = TempDir::new().unwrap();
    let ids = seed(dir.path(), &NOTES);
    seed_at(dir.path(), "other:project:x", &["Elsewhere."], Timestamp::from_micros(0));
    let before = records(dir.path(), &ids);

    let r = run(dir.path(), &["--scope", SCOPE, "--dry-run", "--json"], EXTRACTIVE);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let report = r.json();
    assert_eq!((report["dry_run"].as_bool(), report["eligible"].as_u64()), (Some(true), Some(4)));
    assert_eq!((report["selected"].as_u64(), report["summarized"].as_u64()), (Some(4), Some(0)));
    assert_eq!(report["scope"], SCOPE);

    let all = run(dir.path(), &["--all-scopes", "--dry-run", "--limit", "2"], EXTRACTIVE);
    assert_eq!(all.code, Some(0), "{}", all.stderr);
    assert!(
        all.stdout.contains("dry run: 5 records without a summary in all scopes"),
        "{}",
        all.stdout
    );
    assert!(all.stdout.contains("with --limit, a run would summarize 2 of them"), "{}", all.stdout);
    assert!(all.stdout.contains("nothing was written"), "{}", all.stdout);
    // --older-than reaches the sweep (its selection rule, oldest first up to --limit, is
    // spine-ops' to test): every note is older than a week, none older than a millennium.
    let aged = |age: &str| {
        let r = run(
            dir.path(),
            &["--all-scopes", "--older-than", age, "--dry-run", "--json"],
            EXTRACTIVE,
        );
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        r.json()["eligible"].as_u64()
    };
    assert_eq!((aged("7d"), aged("365000d")), (Some(5), Some(0)));
    assert_eq!(records(dir.path(), &ids), before, "a dry run writes nothing");
}

// ---------------------------------------------------------------------------------------
// Misuse.

#[test]
fn an_unset_model_is_refused_with_what_to_set() {
    let dir = TempDir::new().unwrap();
    seed(dir.path(), &NOTES);
    for env in [&[][..], &[("SPINE_SUMMARY_MODEL", "")][..]] {
        let r = run(dir.path(), &["--all-scopes"], env);
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        assert!(r.stderr.contains("(SPINE_SUMMARY_MODEL) is not set"), "{}", r.stderr);
        assert!(r.stderr.contains("builtin:extractive"), "{}", r.stderr);
    }
}

#[test]
fn misuse_is_refused_with_a_clear_message() {
    let dir = TempDir::new().unwrap();
    let ids = seed(dir.path(), &NOTES);
    let before = records(dir.path(), &ids);
    let cases: &[(&[&str], Env, &str)] = &[
        (&[], EXTRACTIVE, "give --scope <scope> or --all-scopes"),
        (&["--scope", "nope"], EXTRACTIVE, "scope"),
        (
            &["--all-scopes"],
            &[("SPINE_SUMMARY_MODEL", "builtin:extractive"), ("SPINE_SUMMARY_MAX_CHARS", "0")],
            "--summary-max-chars",
        ),
        (
            &[
                "--all-scopes",
                "--summary-model",
                "builtin:extractive",
                "--summary-max-chars",
                "5000",
            ],
            &[],
            "must be a whole number from 20 to 4096",
        ),
        (&["--all-scopes"], &[("SPINE_SUMMARY_MODEL", "llama3.2")], "SPINE_SUMMARY_URL"),
        (
            &["--all-scopes"],
            &[("SPINE_SUMMARY_MODEL", "m"), ("SPINE_SUMMARY_URL", "localhost:11434")],
            "must start with http://",
        ),
        (&["--all-scopes", "--timeout", "soon"], EXTRACTIVE, "such as 90s"),
    ];
    for (args, env, needle) in cases {
        let r = run(dir.path(), args, env);
        assert_ne!(r.code, Some(0), "{args:?}");
        assert!(r.stderr.contains(needle), "{args:?} {env:?}: {}", r.stderr);
    }
    if !on_postgres() {
        let missing = dir.path().join("typo");
        let r = run(&missing, &["--all-scopes"], EXTRACTIVE);
        assert_ne!(r.code, Some(0));
        assert!(!missing.join("spine.db").exists(), "no store is created by a typo");
    }
    assert_eq!(records(dir.path(), &ids), before);
}

// ---------------------------------------------------------------------------------------
// An OpenAI-compatible chat server.

#[test]
fn a_chat_model_summarizes_over_http() {
    let dir = TempDir::new().unwrap();
    let ids = seed(dir.path(), &NOTES);
    let fake = fake();
    // A transient failure is retried.
    fake.then([Reply::Status(503)]);
    let started = Timestamp::from_micros(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros()
            as i64,
    );
    let url = format!("{}/v1", fake.url());
    let env = [
        ("SPINE_SUMMARY_MODEL", "qwen2.5:0.5b"),
        ("SPINE_SUMMARY_URL", url.as_str()),
        ("SPINE_SUMMARY_API_KEY", "sk-test-summaries"),
    ];
    let r = run(dir.path(), &["--scope", SCOPE, "--json"], &env);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let report = r.json();
    assert_eq!(report["summarized"], 4);
    assert_eq!(report["endpoint"], format!("{}/v1/chat/completions", fake.url()));
    assert!(
        !r.stdout.contains("sk-test") && !r.stderr.contains("sk-test"),
        "the key is never shown"
    );

    let seen = fake.seen();
    assert_eq!(seen.len(), 5, "one retry, then one request per record");
    for s in &seen {
        assert_eq!(s.path, "/v1/chat/completions");
        assert_eq!(s.authorization.as_deref(), Some("Bearer sk-test-summaries"));
        assert_eq!(s.body["model"], "qwen2.5:0.5b");
        assert_eq!(s.body["stream"], false);
        let messages = s.body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0]["role"], "system");
        assert!(messages[0]["content"].as_str().unwrap().contains("at most 280 characters"));
        assert_eq!(messages[1]["role"], "user");
    }
    // Oldest first, each record's content as the user message.
    let sent: Vec<&str> =
        seen[1..].iter().map(|s| s.body["messages"][1]["content"].as_str().unwrap()).collect();
    assert_eq!(sent, NOTES);

    let finished = Timestamp::from_micros(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros()
            as i64,
    );
    for (m, note) in records(dir.path(), &ids).iter().zip(NOTES) {
        let words = note.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
        assert_eq!(m.summary, format!("Summary of: {words}"), "stripped and collapsed");
        assert_eq!(m.summary_source, SummarySource::Auto);
        assert_eq!(m.summary_model, "qwen2.5:0.5b");
        let egress = m.summary_egress_at.expect("an egress stamp on content sent out");
        assert!(started <= egress && egress <= finished, "{egress} not within the run");
        assert_eq!(m.content, note, "content untouched");
    }
}

#[test]
fn an_unusable_provider_stops_the_run() {
    let dir = TempDir::new().unwrap();
    let ids = seed(dir.path(), &NOTES);
    let fake = fake();
    fake.then([say("first".into()), Reply::Status(401)]);
    let url = fake.url();
    let env = [("SPINE_SUMMARY_MODEL", "m"), ("SPINE_SUMMARY_URL", url.as_str())];
    let r = run(dir.path(), &["--all-scopes"], &env);
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("401") && r.stderr.contains("3 records not reached"), "{}", r.stderr);
    assert_eq!(fake.seen().len(), 2, "no request after the provider refused");
    let got = records(dir.path(), &ids);
    assert_eq!(got.iter().filter(|m| m.summary_source == SummarySource::Auto).count(), 1);
}

// ---------------------------------------------------------------------------------------
// Stopping: --timeout and Ctrl-C leave every record whole or untouched.

/// The records with an auto summary, each complete; the others exactly as they were.
fn whole_or_untouched(data: &Path, ids: &[RecordId], before: &[Memory]) -> usize {
    let mut done = 0;
    for (m, old) in records(data, ids).iter().zip(before) {
        if m.summary_source == SummarySource::Auto {
            assert!(!m.summary.is_empty() && m.summary_model == "m", "{m:?}");
            assert!(m.summary_egress_at.is_some());
            assert_eq!(m.content, old.content);
            done += 1;
        } else {
            assert_eq!(m, old, "untouched");
        }
    }
    done
}

#[test]
fn timeout_stops_between_records_with_finished_ones_complete() {
    let dir = TempDir::new().unwrap();
    let notes: Vec<String> = (0..6).map(|i| format!("Note number {i} about the build.")).collect();
    let ids = seed(dir.path(), &notes.iter().map(String::as_str).collect::<Vec<_>>());
    let before = records(dir.path(), &ids);
    let fake = fake();
    fake.then([say("one".into()), say("two".into())]);
    fake.then_hang(Duration::from_secs(60));
    let url = fake.url();
    let env = [("SPINE_SUMMARY_MODEL", "m"), ("SPINE_SUMMARY_URL", url.as_str())];

    let started = Instant::now();
    let child = command(dir.path(), &["--all-scopes", "--timeout", "2s", "--json"], &env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = wait(child, Duration::from_secs(30));
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    assert_eq!(r.code, Some(124), "{}", r.stderr);
    let report = r.json();
    assert_eq!(report["stopped"], "timeout");
    assert_eq!((report["summarized"].as_u64(), report["not_reached"].as_u64()), (Some(2), Some(4)));
    assert!(r.stderr.contains("stopped by --timeout 2s"), "{}", r.stderr);
    assert_eq!(whole_or_untouched(dir.path(), &ids, &before), 2);
}

#[cfg(unix)]
#[test]
fn ctrl_c_stops_cleanly_and_reports_what_was_done() {
    let dir = TempDir::new().unwrap();
    let notes: Vec<String> = (0..8).map(|i| format!("Note number {i} about the tests.")).collect();
    let ids = seed(dir.path(), &notes.iter().map(String::as_str).collect::<Vec<_>>());
    let before = records(dir.path(), &ids);
    let fake = fake();
    fake.then((0..3).map(|i| say(format!("summary {i}"))));
    fake.then_hang(Duration::from_secs(60));
    let url = fake.url();
    let env = [("SPINE_SUMMARY_MODEL", "m"), ("SPINE_SUMMARY_URL", url.as_str())];

    let child = command(dir.path(), &["--all-scopes", "--json"], &env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Three answered, the fourth waiting on the server: interrupt now.
    let started = Instant::now();
    while fake.seen().len() < 4 {
        assert!(started.elapsed() < Duration::from_secs(30), "the fourth request never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    let interrupted = Instant::now();
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let r = wait(child, Duration::from_secs(20));
    assert!(
        interrupted.elapsed() < Duration::from_secs(5),
        "stopped without waiting for the answer"
    );
    assert_eq!(r.code, Some(130), "{}", r.stderr);
    let report = r.json();
    assert_eq!(report["stopped"], "interrupted");
    assert_eq!((report["summarized"].as_u64(), report["not_reached"].as_u64()), (Some(3), Some(5)));
    assert!(r.stderr.contains("stopping after the current record"), "{}", r.stderr);
    assert_eq!(whole_or_untouched(dir.path(), &ids, &before), 3);

    // Run again: it continues with what is left.
    fake.then((0..5).map(|i| say(format!("later {i}"))));
    let r = run(dir.path(), &["--all-scopes", "--json"], &env);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.json()["summarized"], 5);
    assert_eq!(whole_or_untouched(dir.path(), &ids, &before), 8);
}
