//! `spine install` / `spine uninstall` end to end, against temporary home and project
//! directories holding existing client configuration that must survive untouched apart
//! from Spine's entries.

use std::path::Path;

use crate::common::*;
use serde_json::{Value, json};

/// `spine <args>` with HOME (and CODEX_HOME) in `home`, from `cwd`.
fn run(home: &Path, cwd: &Path, args: &[&str]) -> Run {
    let out = std::process::Command::new(SPINE)
        .args(args)
        .current_dir(cwd)
        .env("HOME", home)
        .env("CODEX_HOME", home.join(".codex"))
        .env_remove("SPINE_DATA_DIR")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("spine ran");
    let run = Run::of(out);
    assert!(run.ok, "spine {args:?} failed: {}{}", run.stdout, run.stderr);
    run
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn backups(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".spine-backup-"))
        .count()
}

#[test]
fn claude_code_user_install_is_idempotent_and_uninstall_restores_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    let claude_json = json!({
        "numStartups": 12,
        "mcpServers": {"github": {"type": "stdio", "command": "gh-mcp", "args": []}},
        "projects": {"/work/x": {"allowedTools": ["Bash"]}}
    });
    let settings = json!({
        "model": "opus",
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}],
            "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hello"}]}]
        },
        "permissions": {"allow": ["Read"]}
    });
    std::fs::write(home.join(".claude.json"), serde_json::to_string_pretty(&claude_json).unwrap())
        .unwrap();
    std::fs::write(home.join(".claude/settings.json"), settings.to_string()).unwrap();
    let data = dir.path().join("data");

    let first =
        run(&home, dir.path(), &["install", "claude-code", "--data-dir", data.to_str().unwrap()]);
    assert!(first.stdout.contains("wrote") && first.stdout.contains("backup"), "{}", first.stdout);
    let mcp = read_json(&home.join(".claude.json"));
    assert_eq!(mcp["numStartups"], 12);
    assert_eq!(mcp["projects"], claude_json["projects"]);
    assert_eq!(mcp["mcpServers"]["github"], claude_json["mcpServers"]["github"]);
    let spine = &mcp["mcpServers"]["spine"];
    assert_eq!(spine["command"], SPINE);
    assert_eq!(spine["args"][0], "mcp");
    assert_eq!(spine["args"][2], data.to_str().unwrap());
    let keys: Vec<&String> = mcp.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["numStartups", "mcpServers", "projects"], "key order kept");

    let s = read_json(&home.join(".claude/settings.json"));
    assert_eq!(s["model"], "opus");
    assert_eq!(s["permissions"], settings["permissions"]);
    assert_eq!(s["hooks"]["PreToolUse"], settings["hooks"]["PreToolUse"]);
    let starts = s["hooks"]["SessionStart"].as_array().unwrap();
    assert_eq!(starts[0], settings["hooks"]["SessionStart"][0], "the user's own hook stays");
    let command = starts[1]["hooks"][0]["command"].as_str().unwrap().to_owned();
    assert!(command.starts_with(&format!("{SPINE} hook session-start")), "{command}");
    assert!(command.contains("--data-dir"), "{command}");
    let prompt = s["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"].as_str().unwrap();
    assert!(prompt.contains(" hook prompt"), "{prompt}");
    assert_eq!(backups(&home), 1);
    assert_eq!(backups(&home.join(".claude")), 1);

    // The installed hook command runs (no store yet: nothing printed, exit 0).
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .stdin(std::fs::File::open(write_input(dir.path())).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");

    // A second install changes nothing and backs nothing up.
    let again =
        run(&home, dir.path(), &["install", "claude-code", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(again.stdout.matches("unchanged").count(), 2, "{}", again.stdout);
    assert_eq!(backups(&home), 1);

    // A dry run of the uninstall writes nothing; the uninstall restores the data.
    let dry = run(&home, dir.path(), &["uninstall", "claude-code", "--dry-run"]);
    assert!(dry.stdout.contains("would remove"), "{}", dry.stdout);
    assert!(read_json(&home.join(".claude.json"))["mcpServers"]["spine"].is_object());
    run(&home, dir.path(), &["uninstall", "claude-code"]);
    assert_eq!(read_json(&home.join(".claude.json")), claude_json);
    assert_eq!(read_json(&home.join(".claude/settings.json")), settings);
}

fn write_input(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("input.json");
    std::fs::write(&p, json!({"cwd": dir, "hook_event_name": "SessionStart"}).to_string()).unwrap();
    p
}

#[test]
fn codex_keeps_its_toml_comments_and_cursor_gets_a_project_entry() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".codex")).unwrap();
    let toml = "# my codex settings\nmodel = \"gpt-5\" # the fast one\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\n";
    std::fs::write(home.join(".codex/config.toml"), toml).unwrap();

    run(&home, dir.path(), &["install", "codex"]);
    let written = std::fs::read_to_string(home.join(".codex/config.toml")).unwrap();
    assert!(written.starts_with(toml), "untouched before Spine's table: {written}");
    assert!(written.contains("[mcp_servers.spine]"), "{written}");
    let hooks = read_json(&home.join(".codex/hooks.json"));
    assert!(
        hooks["hooks"]["SessionStart"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .ends_with(" hook session-start")
    );
    let again = run(&home, dir.path(), &["install", "codex"]);
    assert_eq!(again.stdout.matches("unchanged").count(), 2, "{}", again.stdout);
    run(&home, dir.path(), &["uninstall", "codex"]);
    assert_eq!(std::fs::read_to_string(home.join(".codex/config.toml")).unwrap(), toml);

    let project = dir.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let out = run(&home, &project, &["install", "cursor", "--project"]);
    assert!(out.stdout.contains("hooks cannot add context"), "{}", out.stdout);
    let mcp = read_json(&project.join(".cursor/mcp.json"));
    assert_eq!(mcp["mcpServers"]["spine"], json!({"command": SPINE, "args": ["mcp"]}));
    assert!(!home.join(".cursor").exists(), "--project writes nothing in the home");
}
