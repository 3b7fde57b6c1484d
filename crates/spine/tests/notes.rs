//! `spine import-notes` end to end: CLAUDE.md, AGENTS.md and a Claude Code memory file of a
//! temporary repository and home, through the real binary and the built-in model: flags,
//! output and exit codes (the rules are tested in-process in spine-ops' `notes` tests).

use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::{Value, json};

/// The model directory the tests use, whatever HOME the command gets.
fn model_dir() -> PathBuf {
    spine_embed::default_model_dir()
}

fn import(home: &Path, data: &Path, args: &[&str]) -> Run {
    let mut cmd = std::process::Command::new(SPINE);
    cmd.arg("import-notes")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .arg("--model-dir")
        .arg(model_dir())
        .env("HOME", home)
        .env_remove("SPINE_OIDC_ISSUER")
        .env_remove("SPINE_EMBEDDER")
        .env("SPINE_LOG", "warn");
    backend_env(&mut cmd, data);
    let out = cmd.output().unwrap();
    Run::of(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_import_once_with_honest_sources_and_their_file_as_tag() {
    let dir = tempfile::tempdir().unwrap();
    let (home, data) = (dir.path().join("home"), dir.path().join("data"));
    let repo = dir.path().join("spine");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(
        repo.join("CLAUDE.md"),
        "# Spine\n\n## Conventions\n- Run cargo fmt and clippy before every commit.\n- Never \
         commit generated protobuf code.\n",
    )
    .unwrap();
    std::fs::write(repo.join("AGENTS.md"), "Tests use the real model, never a stub.\n").unwrap();
    let top = std::fs::canonicalize(&repo).unwrap();
    // Claude Code names the directory by the path, every non-alphanumeric character a `-`.
    let slug: String = top
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let memory = home.join(".claude/projects").join(slug).join("memory");
    std::fs::create_dir_all(&memory).unwrap();
    std::fs::write(
        memory.join("release.md"),
        "---\nname: release\ntype: project\n---\nReleases are cut from main every Tuesday.\n",
    )
    .unwrap();
    let cwd = repo.to_str().unwrap();

    // No scope yet: the command says how to choose one.
    let refused = import(&home, &data, &["--cwd", cwd]);
    assert!(!refused.ok && refused.stderr.contains("--scope"), "{}", refused.stderr);

    let scope = ["--cwd", cwd, "--scope", "acme:project:spine", "--json"];
    let dry = import(&home, &data, &[&scope[..], &["--dry-run"]].concat());
    assert!(dry.ok, "{}", dry.stderr);
    let report = dry.json();
    let would: usize = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["would_import"].as_array().unwrap().len())
        .sum();
    assert_eq!(would, 4, "{report}");

    let run = import(&home, &data, &scope);
    assert!(run.ok, "{}", run.stderr);
    let files = run.json()["files"].clone();
    let by_name = |name: &str| {
        files
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["file"].as_str().unwrap().ends_with(name))
            .unwrap()
            .clone()
    };
    assert_eq!(by_name("CLAUDE.md")["imported"], 2);
    assert_eq!(by_name("CLAUDE.md")["source"], "user-said");
    assert_eq!(by_name("release.md")["source"], "agent-inferred");
    assert_eq!(by_name("release.md")["category"], "decision");

    let again = import(&home, &data, &scope);
    let imported: u64 = again.json()["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["imported"].as_u64().unwrap())
        .sum();
    assert_eq!(imported, 0, "a second run imports nothing twice: {}", again.stdout);
    let human = import(&home, &data, &scope[..4]);
    assert!(human.ok, "{}", human.stderr);
    assert!(
        human.stdout.contains(
            "CLAUDE.md: imported 0 records (2 found, 2 already present) as user-said convention \
             into acme:project:spine"
        ),
        "{}",
        human.stdout
    );

    let client = stdio_client(&data).await;
    let listed = ok(call(
        &client,
        "list_memory",
        json!({"scope": "acme:project:spine", "tags": ["from:CLAUDE.md"], "full": true}),
    )
    .await);
    let contents: Vec<&str> = listed["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        contents.contains(&"Conventions — Never commit generated protobuf code."),
        "{contents:?}"
    );
    let tags: &Value = &listed["memories"][0]["tags"];
    assert!(tags.as_array().unwrap().contains(&json!("imported")), "{tags}");
    client.cancel().await.unwrap();
}
