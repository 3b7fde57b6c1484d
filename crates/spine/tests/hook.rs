//! `spine hook` end to end: the real binary run as Claude Code runs a hook, with the JSON
//! Claude Code sends on stdin, against a store written through MCP.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::*;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// Runs `spine hook <args>` with `input` on stdin.
async fn hook(data: &Path, args: &[&str], input: &str) -> Run {
    let mut c = tokio::process::Command::new(SPINE);
    c.arg("hook")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env_remove("SPINE_LOG")
        .env_remove("SPINE_OIDC_ISSUER")
        .env_remove("SPINE_EMBEDDER")
        .env_remove("SPINE_HOOK_BUDGET")
        .env_remove("SPINE_HOOK_MIN_SCORE")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    crate::common::backend_env(c.as_std_mut(), data);
    let mut child = c.spawn().expect("spawn spine hook");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the hook finished in time")
        .unwrap();
    let run = Run::of(out);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert_eq!(run.code, 0, "a hook never fails the session: {}", run.stderr);
    run
}

/// SessionStart as Claude Code sends it.
fn session_start(cwd: &Path, source: &str) -> String {
    json!({"session_id": "abc123", "transcript_path": "/tmp/t.jsonl", "cwd": cwd,
           "hook_event_name": "SessionStart", "source": source})
    .to_string()
}

/// UserPromptSubmit as Claude Code sends it.
fn prompt(cwd: &Path, text: &str) -> String {
    json!({"session_id": "abc123", "transcript_path": "/tmp/t.jsonl", "cwd": cwd,
           "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": text})
    .to_string()
}

/// The additionalContext of a hook's JSON output, after checking its shape.
fn context(run: &Run, event: &str) -> String {
    let v: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.stdout));
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], event, "{v}");
    assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    v["hookSpecificOutput"]["additionalContext"].as_str().unwrap().to_owned()
}

/// A checkout named `acme-app` whose origin is `acme/spine`, with a `src` directory.
fn checkout(root: &Path) -> PathBuf {
    let top = root.join("acme-app");
    std::fs::create_dir_all(top.join(".git")).unwrap();
    std::fs::create_dir_all(top.join("src")).unwrap();
    std::fs::write(
        top.join(".git/config"),
        "[remote \"origin\"]\n\turl = git@github.com:acme/spine.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n",
    )
    .unwrap();
    top
}

struct Seeded {
    rule: String,
    tls: String,
    summarized: String,
    other: String,
}

async fn seed(data: &Path) -> Seeded {
    let client = stdio_client(data).await;
    let store = |content: &str, scope: &str, extra: Value| {
        let mut args = json!({"content": content, "scope": scope, "source": "user-said",
                              "category": "decision"});
        args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        args
    };
    let short = |v: Value| v["short_id"].as_str().unwrap().to_owned();
    let rule = short(ok(call(
        &client,
        "store_rule",
        json!({"content": "Never commit generated protobuf code; regenerate it in CI.",
               "scope": "rule:repo:spine", "summary": "No generated protobuf in git"}),
    )
    .await));
    let tls = short(ok(call(
        &client,
        "store_memory",
        store(
            "We use rustls instead of OpenSSL for every TLS connection.",
            "acme:project:spine",
            json!({}),
        ),
    )
    .await));
    let summarized = short(ok(call(
        &client,
        "store_memory",
        store(
            &format!("The release checklist is long. {}", "Step detail. ".repeat(40)),
            "acme:project:spine",
            json!({"summary": "Release checklist lives in docs/release.md"}),
        ),
    )
    .await));
    let other = short(ok(call(
        &client,
        "store_memory",
        store("Another repository's private decision.", "acme:project:billing", json!({})),
    )
    .await));
    client.cancel().await.unwrap();
    Seeded { rule, tls, summarized, other }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_start_prints_the_repositorys_rules_then_recent_memories() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = seed(&data).await;
    let top = checkout(dir.path());

    let run = hook(&data, &["session-start"], &session_start(&top.join("src"), "startup")).await;
    let text = context(&run, "SessionStart");
    assert!(run.stderr.is_empty(), "a working hook is silent on stderr: {}", run.stderr);
    let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle} in {text}"));
    assert!(at(&format!("[{}] No generated protobuf in git", s.rule)) < at(&s.tls), "rules first");
    assert!(at(&s.summarized) < at(&s.tls), "newest first");
    assert!(text.contains("Release checklist lives in docs/release.md"), "the summary stands in");
    assert!(!text.contains("Step detail."), "not the content of a summarized record");
    assert!(!text.contains(&s.other), "another repository's scope stays out");
    assert!(text.contains("acme:project:spine"), "the scope is named");

    // After a compaction, on resume, and before compacting: the same digest.
    for source in ["compact", "resume", "clear"] {
        let again = hook(&data, &["session-start"], &session_start(&top, source)).await;
        assert_eq!(context(&again, "SessionStart"), text, "{source}");
    }
    let pre = hook(
        &data,
        &["pre-compact"],
        &json!({"session_id": "abc123", "transcript_path": "/tmp/t.jsonl", "cwd": top,
                "hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": ""})
        .to_string(),
    )
    .await;
    assert_eq!(context(&pre, "PreCompact"), text);
    // --format text: the text alone.
    let plain =
        hook(&data, &["session-start", "--format", "text"], &session_start(&top, "startup")).await;
    assert_eq!(plain.stdout.trim_end(), text);

    // A small budget keeps whole lines and says what it left out.
    let small =
        hook(&data, &["session-start", "--budget", "400"], &session_start(&top, "startup")).await;
    let cut = context(&small, "SessionStart");
    assert!(cut.chars().count() <= 400, "{} characters", cut.chars().count());
    assert!(cut.contains("more not shown"), "{cut}");

    // .spine.toml chooses the scopes.
    std::fs::write(top.join(".spine.toml"), "scope = \"acme:project:billing\"\nrule_scopes = []\n")
        .unwrap();
    let configured = hook(&data, &["session-start"], &session_start(&top, "startup")).await;
    let text = context(&configured, "SessionStart");
    assert!(text.contains(&s.other) && !text.contains(&s.tls) && !text.contains(&s.rule), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_prints_only_relevant_memories_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = seed(&data).await;
    let top = checkout(dir.path());

    let run =
        hook(&data, &["prompt"], &prompt(&top, "Which TLS library should the HTTP client use?"))
            .await;
    let text = context(&run, "UserPromptSubmit");
    assert!(text.contains(&s.tls), "{text}");
    assert!(text.contains("score 0."), "{text}");
    assert!(text.chars().count() <= 2_000);
    assert!(!text.contains(&s.other));

    let unrelated =
        hook(&data, &["prompt"], &prompt(&top, "What is the capital of Mongolia?")).await;
    assert_eq!(unrelated.stdout, "", "nothing relevant, nothing printed");

    // Gemini CLI's BeforeAgent, as its hooks reference gives the input: the same memories,
    // under Gemini's event name.
    let gemini = json!({"session_id": "g1", "transcript_path": "/tmp/g.json", "cwd": top,
                        "hook_event_name": "BeforeAgent", "timestamp": "2026-11-26T12:00:00Z",
                        "prompt": "Which TLS library should the HTTP client use?"})
    .to_string();
    let run = hook(&data, &["prompt", "--format", "gemini"], &gemini).await;
    assert_eq!(context(&run, "BeforeAgent"), text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_never_blocks_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let top = checkout(dir.path());

    // No store yet: nothing printed, and none created (a database has no such state: the
    // schema is there once a node or command connected).
    if !on_postgres() {
        let run = hook(&data, &["session-start"], &session_start(&top, "startup")).await;
        assert_eq!(run.stdout, "");
        assert!(run.stderr.contains("no Spine store"), "{}", run.stderr);
        assert_eq!(run.stderr.trim_end().lines().count(), 1, "one line: {}", run.stderr);
        assert!(!data.join("spine.db").exists(), "a hook never creates a store");
    }

    seed(&data).await;
    for (args, input, why) in [
        (&["session-start"][..], "{not json", "not JSON"),
        (&["session-start"][..], "", "no hook input"),
        (&["prompt"][..], &prompt(&top, "  ") as &str, "no `prompt`"),
        (
            &["session-start"][..],
            &session_start(dir.path(), "startup") as &str,
            "not in a git repository",
        ),
    ] {
        let run = hook(&data, args, input).await;
        assert_eq!(run.stdout, "", "{why}");
        assert!(run.stderr.contains(why), "{why}: {}", run.stderr);
        assert_eq!(run.stderr.trim_end().lines().count(), 1, "{}", run.stderr);
    }
    // A broken .spine.toml is reported, not fatal.
    std::fs::write(top.join(".spine.toml"), "scope = 5\n").unwrap();
    let run = hook(&data, &["session-start"], &session_start(&top, "startup")).await;
    assert_eq!(run.stdout, "");
    assert!(run.stderr.contains(".spine.toml"), "{}", run.stderr);
}

/// The text of a prompt message or resource content.
fn texts(v: Value) -> String {
    v["text"].as_str().unwrap_or_else(|| panic!("text content: {v}")).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_prompt_and_the_resources_give_the_same_digest() {
    use rmcp::model::{GetPromptRequestParams, GetPromptResponse, ReadResourceRequestParams};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = seed(&data).await;
    let top = checkout(dir.path());
    let hook_text = context(
        &hook(&data, &["session-start"], &session_start(&top, "startup")).await,
        "SessionStart",
    );

    let client = stdio_client(&data).await;
    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(prompts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["bootstrap"]);
    let args = json!({"repo": "spine"}).as_object().cloned().unwrap();
    let got = client
        .get_prompt_once(GetPromptRequestParams::new("bootstrap").with_arguments(args))
        .await
        .unwrap();
    let GetPromptResponse::Complete(got) = got else { panic!("complete") };
    let message = texts(serde_json::to_value(&got.messages[0].content).unwrap());
    assert!(message.contains(&s.rule) && message.contains(&s.tls), "{message}");
    assert!(!message.contains(&s.other));
    // The same digest as the hook's, but for the heading naming the repository.
    let body = |t: &str| t.lines().skip(1).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(body(&message), body(&hook_text));

    // No repo: an invalid-params error with Spine's envelope.
    let e = client.get_prompt_once(GetPromptRequestParams::new("bootstrap")).await.unwrap_err();
    assert!(e.to_string().contains("repo is required"), "{e}");

    let resources = client.list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(uris.contains(&"spine://recent/acme:project:spine"), "{uris:?}");
    assert!(uris.contains(&"spine://rules/rule:repo:spine"), "{uris:?}");
    let templates = client.list_all_resource_templates().await.unwrap();
    assert_eq!(templates.len(), 2);
    let read = client
        .read_resource(ReadResourceRequestParams::new("spine://rules/rule:repo:spine"))
        .await
        .unwrap();
    let rules = texts(serde_json::to_value(&read.contents[0]).unwrap());
    assert!(rules.contains(&s.rule) && !rules.contains(&s.tls), "{rules}");
    let e = client.read_resource(ReadResourceRequestParams::new("file:///etc/passwd")).await;
    assert!(e.is_err());
    client.cancel().await.unwrap();
}
