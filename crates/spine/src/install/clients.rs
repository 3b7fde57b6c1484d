//! Each client's configuration: where its files are, how its MCP server entry is spelled,
//! which hook events (if any) can put Spine's output in front of the model, and which file
//! is its project instruction file. Sources for every row are in docs/clients.md.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::ValueEnum;
use serde_json::{Value, json};

/// The clients `spine install` configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    /// Claude Code: MCP server and SessionStart / UserPromptSubmit hooks.
    ClaudeCode,
    /// OpenAI Codex CLI: MCP server and SessionStart / UserPromptSubmit hooks.
    Codex,
    /// Cursor: MCP server (its hooks cannot add context).
    Cursor,
    /// Gemini CLI: MCP server and SessionStart / BeforeAgent hooks.
    Gemini,
    /// VS Code (GitHub Copilot agent mode): MCP server.
    Vscode,
    /// Windsurf (Cascade): MCP server.
    Windsurf,
    /// Zed (agent panel): context server.
    Zed,
    /// Cline (VS Code extension): MCP server.
    Cline,
    /// opencode: local MCP server.
    Opencode,
    /// goose (Block): stdio extension.
    Goose,
    /// Claude Desktop: MCP server.
    ClaudeDesktop,
}

impl Client {
    /// Every client, in the order `--all` and `spine doctor` list them.
    pub const ALL: [Client; 11] = [
        Client::ClaudeCode,
        Client::Codex,
        Client::Cursor,
        Client::Gemini,
        Client::Vscode,
        Client::Windsurf,
        Client::Zed,
        Client::Cline,
        Client::Opencode,
        Client::Goose,
        Client::ClaudeDesktop,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Client::ClaudeCode => "claude-code",
            Client::Codex => "codex",
            Client::Cursor => "cursor",
            Client::Gemini => "gemini",
            Client::Vscode => "vscode",
            Client::Windsurf => "windsurf",
            Client::Zed => "zed",
            Client::Cline => "cline",
            Client::Opencode => "opencode",
            Client::Goose => "goose",
            Client::ClaudeDesktop => "claude-desktop",
        }
    }
}

/// How a configuration file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON, or JSON with comments: edited through a syntax tree.
    Json,
    /// Codex's config.toml: edited with `toml_edit`.
    Toml,
    /// goose's config.yaml: edited line by line.
    Yaml,
}

/// Where and how one client keeps Spine's entries, in one scope.
pub struct Target {
    pub client: Client,
    /// The file holding the MCP server entry.
    pub mcp: PathBuf,
    pub format: Format,
    /// The key of the object of servers in that file.
    pub servers_key: &'static str,
    /// The hooks file and its events (the client's name, `spine hook`'s name), when the
    /// client has hooks whose output reaches the model.
    pub hooks: Option<(PathBuf, &'static [(&'static str, &'static str)])>,
    /// Why there are no hooks, for the output.
    pub no_hooks: &'static str,
    /// The project instruction file (`--instructions`), relative to the project.
    pub instructions: Option<&'static str>,
}

/// Claude Code's (and Codex's) events.
const CLAUDE_HOOKS: &[(&str, &str)] =
    &[("SessionStart", "session-start"), ("UserPromptSubmit", "prompt")];
/// Gemini CLI's: BeforeAgent fires after a prompt is submitted, and its
/// `hookSpecificOutput.additionalContext` is appended to the prompt; `--format gemini`
/// names the events as Gemini does.
const GEMINI_HOOKS: &[(&str, &str)] =
    &[("SessionStart", "session-start --format gemini"), ("BeforeAgent", "prompt --format gemini")];

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from)
}

pub fn home() -> Result<PathBuf> {
    env_dir("HOME").ok_or_else(|| anyhow::anyhow!("HOME is not set: use --project, or set HOME"))
}

/// The user's configuration directory: `~/Library/Application Support` on macOS, else
/// `$XDG_CONFIG_HOME` or `~/.config`.
fn app_config_dir() -> Result<PathBuf> {
    if cfg!(target_os = "macos") {
        return Ok(home()?.join("Library/Application Support"));
    }
    env_dir("XDG_CONFIG_HOME").map_or_else(|| home().map(|h| h.join(".config")), Ok)
}

/// `~/.config` on every Unix, as Zed, opencode and goose use it.
fn xdg_config_dir() -> Result<PathBuf> {
    env_dir("XDG_CONFIG_HOME").map_or_else(|| home().map(|h| h.join(".config")), Ok)
}

fn codex_home() -> Result<PathBuf> {
    env_dir("CODEX_HOME").map_or_else(|| home().map(|h| h.join(".codex")), Ok)
}

/// VS Code's user directory (`Code/User`).
fn vscode_user() -> Result<PathBuf> {
    Ok(app_config_dir()?.join("Code/User"))
}

/// Where `client` keeps its configuration for every project of the user (`project` None)
/// or for one project.
pub fn target(client: Client, project: Option<&Path>) -> Result<Target> {
    let base = |mcp: PathBuf, format, servers_key, no_hooks, instructions| Target {
        client,
        mcp,
        format,
        servers_key,
        hooks: None,
        no_hooks,
        instructions,
    };
    const NO_HOOKS: &str = "the client has no hook that adds context; agents use the MCP tools";
    Ok(match (client, project) {
        (Client::ClaudeCode, p) => {
            let (mcp, hooks) = match p {
                None => (home()?.join(".claude.json"), home()?.join(".claude/settings.json")),
                Some(p) => (p.join(".mcp.json"), p.join(".claude/settings.json")),
            };
            Target {
                hooks: Some((hooks, CLAUDE_HOOKS)),
                ..base(mcp, Format::Json, "mcpServers", "", Some("CLAUDE.md"))
            }
        }
        (Client::Codex, p) => {
            let dir = match p {
                None => codex_home()?,
                Some(p) => p.join(".codex"),
            };
            Target {
                hooks: Some((dir.join("hooks.json"), CLAUDE_HOOKS)),
                ..base(dir.join("config.toml"), Format::Toml, "mcp_servers", "", Some("AGENTS.md"))
            }
        }
        (Client::Cursor, p) => base(
            match p {
                None => home()?.join(".cursor/mcp.json"),
                Some(p) => p.join(".cursor/mcp.json"),
            },
            Format::Json,
            "mcpServers",
            "Cursor's hooks cannot add context: beforeSubmitPrompt may only allow or block, \
             and sessionStart's additional_context is not the output `spine hook` prints",
            Some("AGENTS.md"),
        ),
        (Client::Gemini, p) => {
            let file = match p {
                None => home()?.join(".gemini/settings.json"),
                Some(p) => p.join(".gemini/settings.json"),
            };
            Target {
                hooks: Some((file.clone(), GEMINI_HOOKS)),
                ..base(file, Format::Json, "mcpServers", "", Some("GEMINI.md"))
            }
        }
        (Client::Vscode, p) => base(
            match p {
                None => vscode_user()?.join("mcp.json"),
                Some(p) => p.join(".vscode/mcp.json"),
            },
            Format::Json,
            "servers",
            NO_HOOKS,
            Some(".github/copilot-instructions.md"),
        ),
        (Client::Windsurf, None) => base(
            home()?.join(".codeium/windsurf/mcp_config.json"),
            Format::Json,
            "mcpServers",
            "Windsurf's Cascade hooks cannot add context to the conversation",
            Some(".windsurfrules"),
        ),
        (Client::Zed, None) => base(
            xdg_config_dir()?.join("zed/settings.json"),
            Format::Json,
            "context_servers",
            NO_HOOKS,
            Some("AGENTS.md"),
        ),
        (Client::Cline, None) => base(
            vscode_user()?
                .join("globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json"),
            Format::Json,
            "mcpServers",
            "Cline's hooks are scripts in its own hooks folder with their own output format, \
             which `spine hook` does not print",
            Some(".clinerules"),
        ),
        (Client::Opencode, p) => base(
            match p {
                None => xdg_config_dir()?.join("opencode/opencode.json"),
                Some(p) => p.join("opencode.json"),
            },
            Format::Json,
            "mcp",
            "opencode's hooks are JavaScript plugins, not commands",
            Some("AGENTS.md"),
        ),
        (Client::Goose, None) => base(
            xdg_config_dir()?.join("goose/config.yaml"),
            Format::Yaml,
            "extensions",
            NO_HOOKS,
            Some(".goosehints"),
        ),
        (Client::ClaudeDesktop, None) => base(
            app_config_dir()?.join("Claude/claude_desktop_config.json"),
            Format::Json,
            "mcpServers",
            "Claude Desktop has no hooks",
            None,
        ),
        (
            c @ (Client::Windsurf
            | Client::Zed
            | Client::Cline
            | Client::Goose
            | Client::ClaudeDesktop),
            Some(_),
        ) => {
            bail!("{} keeps its MCP servers for the user only: install without --project", c.name())
        }
    })
}

/// Whether `client` has a project scope.
pub fn has_project_scope(client: Client) -> bool {
    matches!(
        client,
        Client::ClaudeCode
            | Client::Codex
            | Client::Cursor
            | Client::Gemini
            | Client::Vscode
            | Client::Opencode
    )
}

/// The client's MCP server entry for `exe` with `args` (`spine mcp …`).
pub fn entry(client: Client, exe: &str, args: &[String]) -> Value {
    match client {
        Client::ClaudeCode => json!({"type": "stdio", "command": exe, "args": args, "env": {}}),
        Client::Vscode => json!({"type": "stdio", "command": exe, "args": args}),
        Client::Zed => json!({"command": exe, "args": args, "env": {}}),
        Client::Cline => json!({"command": exe, "args": args, "disabled": false}),
        Client::Opencode => {
            let mut command = vec![exe.to_owned()];
            command.extend(args.iter().cloned());
            json!({"type": "local", "command": command, "enabled": true})
        }
        Client::Goose => json!({
            "name": "spine", "type": "stdio", "cmd": exe, "args": args,
            "enabled": true, "envs": {}, "timeout": 300,
            "description": "Spine: memory for coding agents"
        }),
        Client::Codex
        | Client::Cursor
        | Client::Gemini
        | Client::Windsurf
        | Client::ClaudeDesktop => json!({"command": exe, "args": args}),
    }
}

/// The executable an installed entry runs.
pub fn entry_command(client: Client, entry: &Value) -> Option<String> {
    let v = match client {
        Client::Opencode => &entry["command"][0],
        Client::Goose => &entry["cmd"],
        _ => &entry["command"],
    };
    v.as_str().map(str::to_owned)
}

/// Whether `client` looks present on this machine: its configuration folder exists, or its
/// executable is on PATH.
pub fn detect(client: Client) -> Option<String> {
    let dirs: Vec<PathBuf> = match client {
        Client::ClaudeCode => home().map(|h| vec![h.join(".claude"), h.join(".claude.json")]),
        Client::Codex => codex_home().map(|d| vec![d]),
        Client::Cursor => home().map(|h| vec![h.join(".cursor")]),
        Client::Gemini => home().map(|h| vec![h.join(".gemini")]),
        Client::Vscode => vscode_user().map(|d| vec![d]),
        Client::Windsurf => home().map(|h| vec![h.join(".codeium/windsurf")]),
        Client::Zed => xdg_config_dir().map(|d| vec![d.join("zed")]),
        Client::Cline => {
            vscode_user().map(|d| vec![d.join("globalStorage/saoudrizwan.claude-dev")])
        }
        Client::Opencode => xdg_config_dir().map(|d| vec![d.join("opencode")]),
        Client::Goose => xdg_config_dir().map(|d| vec![d.join("goose")]),
        Client::ClaudeDesktop => app_config_dir().map(|d| vec![d.join("Claude")]),
    }
    .unwrap_or_default();
    if let Some(d) = dirs.iter().find(|d| d.exists()) {
        return Some(d.display().to_string());
    }
    let bins: &[&str] = match client {
        Client::ClaudeCode => &["claude"],
        Client::Codex => &["codex"],
        Client::Cursor => &["cursor", "cursor-agent"],
        Client::Gemini => &["gemini"],
        Client::Vscode => &["code"],
        Client::Windsurf => &["windsurf"],
        Client::Zed => &["zed", "zeditor"],
        Client::Opencode => &["opencode"],
        Client::Goose => &["goose"],
        Client::Cline | Client::ClaudeDesktop => &[],
    };
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| bins.iter().map(move |b| dir.join(b)))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}
