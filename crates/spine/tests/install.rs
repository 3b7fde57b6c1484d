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
        .env_remove("XDG_CONFIG_HOME")
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

/// How a client's file is written.
#[derive(Clone, Copy)]
enum Fmt {
    /// Strict JSON: parsed with serde_json.
    Json,
    /// JSON with comments and trailing commas (VS Code, Zed, opencode).
    Jsonc,
    Yaml,
}

fn parse(fmt: Fmt, text: &str) -> Value {
    match fmt {
        Fmt::Json => {
            serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
        }
        Fmt::Jsonc => jsonc_parser::parse_to_serde_value::<Value>(text, &Default::default())
            .unwrap_or_else(|e| panic!("not JSONC ({e}): {text}")),
        Fmt::Yaml => {
            serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}): {text}"))
        }
    }
}

/// One client, one scope: a file of the client's real format (`fixture`, at `rel` under
/// `base` — the home or the project) gets Spine's entry under `servers` and keeps every
/// other entry; a second install changes nothing and backs nothing up; the uninstall puts
/// the file back byte for byte. Returns the installed data.
#[allow(clippy::too_many_arguments)]
fn round_trip(
    client: &str,
    scope: &[&str],
    base: &Path,
    home: &Path,
    rel: &str,
    fixture: &str,
    fmt: Fmt,
    servers: &str,
    command_of: fn(&Value) -> &Value,
) -> Value {
    let file = base.join(rel);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, fixture).unwrap();
    let dir = file.parent().unwrap();
    let original = parse(fmt, fixture);

    let mut args = vec!["install", client];
    args.extend(scope);
    let first = run(home, base, &args);
    assert!(first.stdout.contains("wrote") && first.stdout.contains("backup"), "{}", first.stdout);
    let text = std::fs::read_to_string(&file).unwrap();
    let v = parse(fmt, &text);
    assert_eq!(command_of(&v[servers]["spine"]), SPINE, "{text}");
    // Every other entry, at the top and among the servers, is the user's as it was.
    // (Spine's hooks share Gemini CLI's settings.json: its test checks them.)
    for (k, want) in original.as_object().unwrap() {
        if k != servers && k != "hooks" {
            assert_eq!(&v[k], want, "{client}: {k} changed: {text}");
        }
    }
    for (k, want) in original[servers].as_object().unwrap() {
        assert_eq!(&v[servers][k], want, "{client}: server {k} changed: {text}");
    }
    assert_eq!(backups(dir), 1);

    let again = run(home, base, &args);
    assert!(
        again.stdout.contains("unchanged") && !again.stdout.contains("wrote"),
        "{}",
        again.stdout
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "a second install changes nothing");
    assert_eq!(backups(dir), 1, "and backs nothing up");

    let mut args = vec!["uninstall", client];
    args.extend(scope);
    run(home, base, &args);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        fixture,
        "{client}: uninstall restores the file"
    );
    v
}

fn command(entry: &Value) -> &Value {
    &entry["command"]
}

/// Gemini CLI's settings.json, after its documentation (mcpServers, hooks).
const GEMINI: &str = r#"{
  "theme": "GitHub",
  "mcpServers": {
    "pythonTools": {
      "command": "python",
      "args": ["-m", "my_mcp_server", "--port", "8080"],
      "cwd": "./mcp-servers/python",
      "env": { "DATABASE_URL": "$DB_CONNECTION_STRING" },
      "timeout": 15000
    }
  },
  "hooks": {
    "BeforeTool": [
      {
        "matcher": "run_shell_command",
        "hooks": [{ "name": "audit", "type": "command", "command": "./audit.sh", "timeout": 5000 }]
      }
    ]
  }
}
"#;

#[test]
fn gemini_gets_its_server_and_session_start_and_before_agent_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let v = round_trip(
        "gemini",
        &[],
        &home,
        &home,
        ".gemini/settings.json",
        GEMINI,
        Fmt::Json,
        "mcpServers",
        command,
    );
    assert_eq!(v["mcpServers"]["spine"]["args"], json!(["mcp"]));
    let start = v["hooks"]["SessionStart"][0]["hooks"][0]["command"].as_str().unwrap();
    assert_eq!(start, format!("{SPINE} hook session-start --format gemini"));
    let prompt = v["hooks"]["BeforeAgent"][0]["hooks"][0]["command"].as_str().unwrap();
    assert_eq!(prompt, format!("{SPINE} hook prompt --format gemini"));
    let user: Value = serde_json::from_str(GEMINI).unwrap();
    assert_eq!(v["hooks"]["BeforeTool"], user["hooks"]["BeforeTool"], "the user's hook stays");
}

#[test]
fn cursor_user_file_gets_the_server_and_says_why_no_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let fixture = r#"{
  "mcpServers": {
    "web-search": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-brave-search"],
      "env": { "BRAVE_API_KEY": "key" }
    }
  }
}
"#;
    round_trip(
        "cursor",
        &[],
        &home,
        &home,
        ".cursor/mcp.json",
        fixture,
        Fmt::Json,
        "mcpServers",
        command,
    );
}

/// VS Code's .vscode/mcp.json, after its documentation: `servers` and `inputs`, comments.
const VSCODE: &str = r#"{
  // Shared with the team: GitHub's remote server and Playwright.
  "inputs": [
    { "type": "promptString", "id": "github-token", "description": "GitHub token", "password": true }
  ],
  "servers": {
    "github": { "type": "http", "url": "https://api.githubcopilot.com/mcp/" },
    "playwright": { "command": "npx", "args": ["-y", "@microsoft/mcp-server-playwright"] } // browser
  }
}
"#;

#[test]
fn vscode_project_file_uses_servers_and_keeps_its_comments() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let project = dir.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let v = round_trip(
        "vscode",
        &["--project"],
        &project,
        &home,
        ".vscode/mcp.json",
        VSCODE,
        Fmt::Jsonc,
        "servers",
        command,
    );
    assert_eq!(v["servers"]["spine"]["type"], "stdio");
    assert!(!home.exists(), "--project writes nothing in the home");
}

#[test]
fn vscode_user_scope_is_its_user_mcp_json() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let fixture = "{\n  \"servers\": {\n    \"fetch\": { \"type\": \"stdio\", \"command\": \"uvx\", \"args\": [\"mcp-server-fetch\"] }\n  }\n}\n";
    round_trip(
        "vscode",
        &[],
        &home,
        &home,
        ".config/Code/User/mcp.json",
        fixture,
        Fmt::Jsonc,
        "servers",
        command,
    );
}

#[test]
fn windsurf_mcp_config_keeps_the_users_servers() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let fixture = r#"{
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "<YOUR_PERSONAL_ACCESS_TOKEN>" }
    },
    "figma": { "serverUrl": "https://example.com/mcp" }
  }
}
"#;
    round_trip(
        "windsurf",
        &[],
        &home,
        &home,
        ".codeium/windsurf/mcp_config.json",
        fixture,
        Fmt::Json,
        "mcpServers",
        command,
    );
}

/// Zed's settings.json, after its documentation: JSON with comments, context_servers.
const ZED: &str = r#"// Zed settings
//
// For information on how to configure Zed, see the Zed documentation.
{
  "theme": { "mode": "system", "light": "One Light", "dark": "One Dark" },
  "ui_font_size": 16,
  "context_servers": {
    "local-mcp-server": {
      "command": "some-command",
      "args": ["arg-1", "arg-2"],
      "env": {},
    },
    "remote-mcp-server": {
      "url": "https://example.com/mcp",
      "headers": { "Authorization": "Bearer <token>" },
    },
  },
}
"#;

#[test]
fn zed_context_servers_keep_comments_and_trailing_commas() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let v = round_trip(
        "zed",
        &[],
        &home,
        &home,
        ".config/zed/settings.json",
        ZED,
        Fmt::Jsonc,
        "context_servers",
        command,
    );
    assert_eq!(v["context_servers"]["spine"]["env"], json!({}));
}

#[test]
fn cline_settings_keep_disabled_and_auto_approve() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let fixture = r#"{
  "mcpServers": {
    "git": {
      "command": "uvx",
      "args": ["mcp-server-git", "--repository", "/path/to/repo"],
      "disabled": false,
      "autoApprove": ["git_status"],
      "networkTimeout": 60000
    }
  }
}
"#;
    let v = round_trip(
        "cline",
        &[],
        &home,
        &home,
        ".config/Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json",
        fixture,
        Fmt::Json,
        "mcpServers",
        command,
    );
    assert_eq!(v["mcpServers"]["spine"]["disabled"], false);
}

#[test]
fn opencode_project_gets_a_local_server_with_a_command_array() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let project = dir.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let fixture = r#"{
  "$schema": "https://opencode.ai/config.json",
  "theme": "opencode",
  "mcp": {
    "my-local-mcp-server": {
      "type": "local",
      // Or ["bun", "x", "my-mcp-command"]
      "command": ["npx", "-y", "my-mcp-command"],
      "enabled": true,
      "environment": { "MY_ENV_VAR": "my_env_var_value" },
    },
    "jira": { "type": "remote", "url": "https://jira.example.com/mcp", "enabled": true },
  },
}
"#;
    let v = round_trip(
        "opencode",
        &["--project"],
        &project,
        &home,
        "opencode.json",
        fixture,
        Fmt::Jsonc,
        "mcp",
        |e| &e["command"][0],
    );
    assert_eq!(v["mcp"]["spine"]["type"], "local");
    assert_eq!(v["mcp"]["spine"]["command"], json!([SPINE, "mcp"]));
}

/// goose's config.yaml, after its documentation.
const GOOSE: &str = "# goose configuration\nGOOSE_PROVIDER: anthropic\nGOOSE_MODEL: claude-sonnet\nextensions:\n  developer:\n    bundled: true\n    enabled: true # built in\n    name: developer\n    timeout: 300\n    type: builtin\n  github:\n    args:\n    - -y\n    - '@modelcontextprotocol/server-github'\n    cmd: npx\n    enabled: true\n    envs:\n      GITHUB_PERSONAL_ACCESS_TOKEN: <YOUR_TOKEN>\n    name: GitHub\n    timeout: 300\n    type: stdio\nGOOSE_MODE: smart_approve\n";

#[test]
fn goose_extensions_get_a_stdio_block_and_lose_it_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let v = round_trip(
        "goose",
        &[],
        &home,
        &home,
        ".config/goose/config.yaml",
        GOOSE,
        Fmt::Yaml,
        "extensions",
        |e| &e["cmd"],
    );
    assert_eq!(v["extensions"]["spine"]["type"], "stdio");
    assert_eq!(v["extensions"]["spine"]["enabled"], true);
    assert_eq!(v["GOOSE_MODE"], "smart_approve");
}

#[test]
fn claude_desktop_config_keeps_its_servers_and_preferences() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let fixture = r#"{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/username/Desktop"]
    }
  },
  "globalShortcut": "Ctrl+Space"
}
"#;
    round_trip(
        "claude-desktop",
        &[],
        &home,
        &home,
        ".config/Claude/claude_desktop_config.json",
        fixture,
        Fmt::Json,
        "mcpServers",
        command,
    );
}

#[test]
fn a_user_only_client_refuses_project_scope_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(SPINE)
        .args(["install", "windsurf", "--project"])
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let run = Run::of(out);
    assert!(!run.ok);
    assert!(
        run.stderr.contains("windsurf keeps its MCP servers for the user only"),
        "{}",
        run.stderr
    );
    let none = Run::of(std::process::Command::new(SPINE).arg("install").output().unwrap());
    // Neither a client nor --all: the message names both ways.
    assert!(!none.ok && none.stderr.contains("<CLIENT|--all>"), "{}", none.stderr);
}

#[test]
fn instructions_add_one_line_once_and_uninstall_takes_it_away() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let project = dir.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let agents = "# Agents\n\nRun `cargo test` before committing.";
    std::fs::write(project.join("AGENTS.md"), agents).unwrap();
    run(&home, &project, &["install", "opencode", "--project", "--instructions"]);
    let text = std::fs::read_to_string(project.join("AGENTS.md")).unwrap();
    assert!(text.starts_with(agents), "{text}");
    assert_eq!(text.lines().filter(|l| l.contains("Spine (MCP server `spine`)")).count(), 1);
    run(&home, &project, &["install", "opencode", "--project", "--instructions"]);
    assert_eq!(std::fs::read_to_string(project.join("AGENTS.md")).unwrap(), text);
    // Without the flag, no instruction file is touched.
    run(&home, &project, &["install", "gemini", "--project"]);
    assert!(!project.join("GEMINI.md").exists());
    run(&home, &project, &["uninstall", "opencode", "--project", "--instructions"]);
    let after = std::fs::read_to_string(project.join("AGENTS.md")).unwrap();
    assert_eq!(after.trim_end(), agents);
    // A client without an instruction file says so.
    let out = std::process::Command::new(SPINE)
        .args(["install", "claude-desktop", "--instructions"])
        .env("HOME", &home)
        .output()
        .unwrap();
    let r = Run::of(out);
    assert!(!r.ok && r.stderr.contains("no project instruction file"), "{}", r.stderr);
}

/// `spine install --all` with PATH set to `bin` (and nothing else).
fn run_all(home: &Path, bin: &Path, args: &[&str]) -> Run {
    let out = std::process::Command::new(SPINE)
        .args(args)
        .current_dir(home)
        .env("HOME", home)
        .env("PATH", bin)
        .env_remove("CODEX_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("SPINE_DATA_DIR")
        .output()
        .expect("spine ran");
    Run::of(out)
}

#[test]
fn install_all_finds_clients_by_folder_or_executable_and_prints_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::create_dir_all(home.join(".config/zed")).unwrap();
    std::fs::write(home.join(".config/zed/settings.json"), ZED).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    // goose is found by its executable on PATH.
    std::fs::write(bin.join("goose"), "#!/bin/sh\n").unwrap();

    // A dry run writes nothing and says what it would do.
    let dry = run_all(&home, &bin, &["install", "--all", "--dry-run"]);
    assert!(dry.ok, "{}{}", dry.stdout, dry.stderr);
    assert!(dry.stdout.contains("would add MCP server + hooks"), "{}", dry.stdout);
    assert!(!home.join(".gemini/settings.json").exists());
    assert!(!home.join(".config/goose").exists());
    assert_eq!(std::fs::read_to_string(home.join(".config/zed/settings.json")).unwrap(), ZED);
    assert_eq!(backups(&home.join(".config/zed")), 0);

    let all = run_all(&home, &bin, &["install", "--all"]);
    assert!(all.ok, "{}{}", all.stdout, all.stderr);
    let row = |name: &str| -> String {
        all.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} row: {}", all.stdout))
            .to_owned()
    };
    assert!(
        all.stdout.lines().any(|l| l.starts_with("client") && l.contains("hooks")),
        "{}",
        all.stdout
    );
    let gemini = row("gemini");
    assert!(
        gemini.contains("MCP server + hooks") && gemini.trim_end().ends_with("yes"),
        "{gemini}"
    );
    let zed = row("zed");
    assert!(zed.contains("settings.json") && zed.contains("no: "), "{zed}");
    assert!(row("goose").contains("config.yaml"), "{}", all.stdout);
    assert!(all.stdout.contains("not found: claude-code, codex, cursor"), "{}", all.stdout);
    let gemini_settings = read_json(&home.join(".gemini/settings.json"));
    assert_eq!(gemini_settings["mcpServers"]["spine"]["command"], SPINE);
    let goose: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(home.join(".config/goose/config.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(goose["extensions"]["spine"]["cmd"], SPINE);

    let again = run_all(&home, &bin, &["install", "--all"]);
    assert!(
        again.stdout.lines().filter(|l| l.contains("unchanged")).count() >= 3,
        "{}",
        again.stdout
    );

    let gone = run_all(&home, &bin, &["uninstall", "--all"]);
    assert!(gone.ok, "{}{}", gone.stdout, gone.stderr);
    assert_eq!(std::fs::read_to_string(home.join(".config/zed/settings.json")).unwrap(), ZED);
}

#[test]
fn dry_run_prints_the_lines_it_would_add_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".codeium/windsurf")).unwrap();
    let fixture = "{\n  \"mcpServers\": {}\n}\n";
    std::fs::write(home.join(".codeium/windsurf/mcp_config.json"), fixture).unwrap();
    let out = run(&home, dir.path(), &["install", "windsurf", "--dry-run"]);
    assert!(out.stdout.contains("would add  Spine's MCP server in"), "{}", out.stdout);
    assert!(out.stdout.contains(&format!("+      \"command\": \"{SPINE}\"")), "{}", out.stdout);
    assert!(out.stdout.contains("hooks: not installed for windsurf"), "{}", out.stdout);
    assert_eq!(
        std::fs::read_to_string(home.join(".codeium/windsurf/mcp_config.json")).unwrap(),
        fixture
    );
    assert_eq!(backups(&home.join(".codeium/windsurf")), 0);
}

#[test]
fn the_claude_code_plugin_runs_the_spine_on_path_with_the_installed_hooks() {
    let root = crate::common::repo();
    let plugin = read_json(&root.join(".claude-plugin/plugin.json"));
    assert_eq!(plugin["name"], "spine");
    assert_eq!(
        plugin["mcpServers"]["spine"],
        json!({"type": "stdio", "command": "spine", "args": ["mcp"]})
    );
    let market = read_json(&root.join(".claude-plugin/marketplace.json"));
    assert_eq!(market["plugins"][0]["name"], "spine");
    assert_eq!(market["plugins"][0]["source"], "./");
    let hooks = read_json(&root.join("hooks/hooks.json"));
    for (event, command) in
        [("SessionStart", "spine hook session-start"), ("UserPromptSubmit", "spine hook prompt")]
    {
        assert_eq!(hooks["hooks"][event][0]["hooks"][0]["command"], command, "{event}");
    }
    // The commands are ones the binary takes.
    for event in ["session-start", "prompt"] {
        let help =
            std::process::Command::new(SPINE).args(["hook", event, "--help"]).output().unwrap();
        assert!(help.status.success(), "spine hook {event}");
    }
}
