//! `spine install <client>` / `spine uninstall <client>`: Spine's entries in a coding
//! client's own configuration files — the MCP server (`spine mcp`) and, where the client
//! injects a hook's output into the model's context, the session hooks (`spine hook`).
//!
//! | client | MCP server | hooks |
//! |---|---|---|
//! | claude-code | `~/.claude.json` `mcpServers` (user) or `<project>/.mcp.json` | `~/.claude/settings.json` or `<project>/.claude/settings.json` |
//! | codex | `$CODEX_HOME/config.toml` `[mcp_servers.spine]` (`~/.codex`) or `<project>/.codex/config.toml` | `hooks.json` beside it |
//! | cursor | `~/.cursor/mcp.json` or `<project>/.cursor/mcp.json` | none: Cursor's hooks cannot add context |
//!
//! Every other key of those files is kept as it was, in its order (JSON) and with its
//! comments and layout (TOML, through `toml_edit`). Running install twice changes nothing
//! the second time; a file that changes is first copied to `<file>.spine-backup-<time>`.
//! Spine's hook entries are recognised by their command (`<spine> hook <event>`), so an
//! install replaces them and an uninstall removes exactly them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use serde_json::{Map, Value, json};

/// The clients `spine install` configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    /// Claude Code: MCP server and SessionStart / UserPromptSubmit hooks.
    ClaudeCode,
    /// OpenAI Codex CLI: MCP server and SessionStart / UserPromptSubmit hooks.
    Codex,
    /// Cursor: MCP server.
    Cursor,
}

/// `spine install` / `spine uninstall` flags.
#[derive(Debug, Clone, Args)]
pub struct InstallArgs {
    /// claude-code, codex or cursor.
    #[arg(value_enum)]
    pub client: Client,
    /// Configure this project only (the current directory, or --project-dir).
    #[arg(long, conflicts_with = "user")]
    pub project: bool,
    /// Configure every project of this user (the default).
    #[arg(long)]
    pub user: bool,
    /// The project directory for --project [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub project_dir: Option<PathBuf>,
    /// Show what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The spine executable the entries run [default: this one].
    #[arg(long, value_name = "PATH")]
    pub spine: Option<PathBuf>,
    /// Leave the hooks out (MCP server only).
    #[arg(long)]
    pub no_hooks: bool,
}

/// Where a client's files are.
struct Places {
    /// The file holding the MCP server entry.
    mcp: PathBuf,
    /// The file holding the hooks, when the client has usable hooks.
    hooks: Option<PathBuf>,
}

fn home() -> Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .context("HOME is not set: use --project, or set HOME")
}

fn places(client: Client, project: Option<&Path>) -> Result<Places> {
    Ok(match (client, project) {
        (Client::ClaudeCode, None) => {
            let home = home()?;
            Places {
                mcp: home.join(".claude.json"),
                hooks: Some(home.join(".claude/settings.json")),
            }
        }
        (Client::ClaudeCode, Some(p)) => {
            Places { mcp: p.join(".mcp.json"), hooks: Some(p.join(".claude/settings.json")) }
        }
        (Client::Codex, None) => {
            let dir = match std::env::var_os("CODEX_HOME").filter(|h| !h.is_empty()) {
                Some(d) => PathBuf::from(d),
                None => home()?.join(".codex"),
            };
            Places { mcp: dir.join("config.toml"), hooks: Some(dir.join("hooks.json")) }
        }
        (Client::Codex, Some(p)) => {
            Places { mcp: p.join(".codex/config.toml"), hooks: Some(p.join(".codex/hooks.json")) }
        }
        (Client::Cursor, None) => Places { mcp: home()?.join(".cursor/mcp.json"), hooks: None },
        (Client::Cursor, Some(p)) => Places { mcp: p.join(".cursor/mcp.json"), hooks: None },
    })
}

/// The hook events Spine registers, with the `spine hook` event each runs. Both clients
/// name them as Claude Code does.
const HOOKS: [(&str, &str); 2] =
    [("SessionStart", "session-start"), ("UserPromptSubmit", "prompt")];

/// `path` quoted for a shell command line when it needs to be.
fn shell_word(path: &str) -> String {
    if path.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:@%".contains(c)) {
        path.to_owned()
    } else {
        format!("'{}'", path.replace('\'', r"'\''"))
    }
}

/// Whether `command` runs `spine hook …` (any spine executable).
fn is_spine_hook(command: &str) -> bool {
    let command = command.trim_start();
    // The executable: a quoted word (as `shell_word` writes a path with spaces) or the
    // first word.
    let (exe, rest) = match command.chars().next() {
        Some(q @ ('\'' | '"')) => match command[1..].split_once(q) {
            Some((exe, rest)) => (exe, rest),
            None => return false,
        },
        _ => command.split_once(char::is_whitespace).unwrap_or((command, "")),
    };
    let named_spine = Path::new(exe).file_name().is_some_and(|n| n == "spine");
    named_spine && rest.split_whitespace().next() == Some("hook")
}

/// A JSON config file's content with Spine's entries set (or removed when `install` is
/// false): `mcpServers.spine` for `mcp`, the hook groups for `hooks`.
fn edit_json(
    text: Option<&str>,
    path: &Path,
    install: bool,
    mcp: Option<&Value>,
    hooks: Option<&dyn Fn(&str) -> String>,
) -> Result<String> {
    let mut root: Map<String, Value> = match text.map(str::trim) {
        None | Some("") => Map::new(),
        Some(t) => match serde_json::from_str(t).with_context(|| {
            format!("{} is not valid JSON; fix or move it first", path.display())
        })? {
            Value::Object(m) => m,
            _ => bail!("{} does not hold a JSON object", path.display()),
        },
    };
    if let Some(entry) = mcp {
        let servers = root.entry("mcpServers").or_insert_with(|| json!({}));
        let Some(servers) = servers.as_object_mut() else {
            bail!("{}: mcpServers is not an object", path.display());
        };
        match install {
            true => {
                servers.insert("spine".into(), entry.clone());
            }
            false => {
                servers.remove("spine");
            }
        }
    }
    if let Some(command_for) = hooks {
        let all = root.entry("hooks").or_insert_with(|| json!({}));
        let Some(all) = all.as_object_mut() else {
            bail!("{}: hooks is not an object", path.display());
        };
        for (event, hook_event) in HOOKS {
            let groups = all.entry(event).or_insert_with(|| json!([]));
            let Some(list) = groups.as_array_mut() else {
                bail!("{}: hooks.{event} is not a list", path.display());
            };
            // Drop Spine's handlers, then the groups they leave empty.
            for group in list.iter_mut() {
                if let Some(handlers) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                    handlers.retain(|h| {
                        !h.get("command").and_then(Value::as_str).is_some_and(is_spine_hook)
                    });
                }
            }
            list.retain(|g| g.get("hooks").and_then(Value::as_array).is_none_or(|h| !h.is_empty()));
            if install {
                let command = command_for(hook_event);
                list.push(json!({"hooks": [{"type": "command", "command": command}]}));
            }
            if list.is_empty() {
                all.remove(event);
            }
        }
    }
    let mut out = serde_json::to_string_pretty(&Value::Object(root))?;
    out.push('\n');
    Ok(out)
}

/// Codex's `config.toml` with `[mcp_servers.spine]` set or removed, everything else kept
/// byte for byte.
fn edit_codex_toml(
    text: Option<&str>,
    path: &Path,
    install: bool,
    spine: &str,
    args: &[String],
) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = text
        .unwrap_or_default()
        .parse()
        .with_context(|| format!("{} is not valid TOML; fix or move it first", path.display()))?;
    if install {
        let servers = doc
            .entry("mcp_servers")
            .or_insert_with(|| {
                let mut t = toml_edit::Table::new();
                t.set_implicit(true);
                toml_edit::Item::Table(t)
            })
            .as_table_mut()
            .with_context(|| format!("{}: mcp_servers is not a table", path.display()))?;
        let mut entry = toml_edit::Table::new();
        entry.insert("command", toml_edit::value(spine));
        let mut list = toml_edit::Array::new();
        for a in args {
            list.push(a.as_str());
        }
        entry.insert("args", toml_edit::value(list));
        let same = servers.get("spine").and_then(|e| e.as_table()).is_some_and(|t| {
            t.get("command").and_then(|c| c.as_str()) == Some(spine)
                && t.get("args").and_then(|a| a.as_array()).is_some_and(|a| {
                    a.iter()
                        .map(|v| v.as_str().unwrap_or_default())
                        .eq(args.iter().map(String::as_str))
                })
        });
        if !same {
            servers.insert("spine", toml_edit::Item::Table(entry));
        }
    } else if let Some(servers) = doc.get_mut("mcp_servers").and_then(|s| s.as_table_mut()) {
        servers.remove("spine");
    }
    Ok(doc.to_string())
}

/// One file's change.
struct Change {
    path: PathBuf,
    before: Option<String>,
    after: String,
    what: &'static str,
}

/// The spine executable, its `spine mcp` arguments, and the hook command of an event.
fn invocation(
    args: &InstallArgs,
    data_dir: Option<&Path>,
) -> Result<(String, Vec<String>, impl Fn(&str) -> String + use<>)> {
    let exe = match &args.spine {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding this spine executable")?,
    };
    let exe = exe.to_string_lossy().into_owned();
    let mut mcp_args = vec!["mcp".to_owned()];
    let mut flags = String::new();
    if let Some(d) = data_dir {
        let d = std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf());
        let d = d.to_string_lossy().into_owned();
        flags = format!(" --data-dir {}", shell_word(&d));
        mcp_args.extend(["--data-dir".to_owned(), d]);
    }
    let spine = shell_word(&exe);
    // `<spine> hook <event>` first: that is how an uninstall recognises the entry.
    let hook = move |event: &str| format!("{spine} hook {event}{flags}");
    Ok((exe, mcp_args, hook))
}

/// Computes the changes `spine install` (or `uninstall` when `install` is false) makes.
fn plan(args: &InstallArgs, install: bool, data_dir: Option<&Path>) -> Result<Vec<Change>> {
    let project = match (args.project, &args.project_dir) {
        (true, Some(d)) => Some(d.clone()),
        (true, None) => Some(std::env::current_dir().context("reading the current directory")?),
        (false, Some(_)) => bail!("--project-dir needs --project"),
        (false, None) => None,
    };
    let places = places(args.client, project.as_deref())?;
    let (exe, mcp_args, hook) = invocation(args, data_dir)?;
    let read = |p: &Path| -> Result<Option<String>> {
        match std::fs::read_to_string(p) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
        }
    };
    let mut changes = Vec::new();
    let before = read(&places.mcp)?;
    let after = match args.client {
        Client::Codex => edit_codex_toml(before.as_deref(), &places.mcp, install, &exe, &mcp_args)?,
        Client::ClaudeCode | Client::Cursor => {
            let mut entry = json!({"command": exe, "args": mcp_args});
            if args.client == Client::ClaudeCode {
                entry = json!({"type": "stdio", "command": exe, "args": mcp_args, "env": {}});
            }
            edit_json(before.as_deref(), &places.mcp, install, Some(&entry), None)?
        }
    };
    changes.push(Change { path: places.mcp.clone(), before, after, what: "MCP server" });
    if let Some(hooks) = places.hooks.filter(|_| !args.no_hooks || !install) {
        let before = read(&hooks)?;
        let after =
            edit_json(before.as_deref(), &hooks, install && !args.no_hooks, None, Some(&hook))?;
        changes.push(Change { path: hooks, before, after, what: "hooks" });
    }
    Ok(changes)
}

/// `spine install` (or `uninstall`): applies the plan, printing one line per file.
pub fn run(args: &InstallArgs, install: bool, data_dir: Option<&Path>) -> Result<()> {
    let changes = plan(args, install, data_dir)?;
    let stamp = chrono_like_stamp();
    for c in &changes {
        let shown = c.path.display();
        let unchanged = match &c.before {
            Some(b) => semantically_equal(b, &c.after),
            None => !install,
        };
        if unchanged {
            println!("unchanged  {shown} ({})", c.what);
            continue;
        }
        let verb = if install { "would add" } else { "would remove" };
        if args.dry_run {
            println!("{verb}  Spine's {} in {shown}", c.what);
            continue;
        }
        if let Some(dir) = c.path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut note = String::new();
        if c.before.is_some() {
            let backup = PathBuf::from(format!("{}.spine-backup-{stamp}", c.path.display()));
            std::fs::copy(&c.path, &backup)
                .with_context(|| format!("backing up {shown} to {}", backup.display()))?;
            note = format!(" (backup: {})", backup.display());
        }
        let tmp = PathBuf::from(format!("{}.spine-tmp", c.path.display()));
        std::fs::write(&tmp, &c.after).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &c.path).with_context(|| format!("writing {shown}"))?;
        let done = if install { "wrote" } else { "removed from" };
        println!("{done}  {shown}: Spine's {}{note}", c.what);
    }
    if install && !args.dry_run && args.client == Client::Cursor {
        println!(
            "note: Cursor's hooks cannot add context; agents in Cursor get memory through the \
             MCP tools"
        );
    }
    Ok(())
}

/// Whether two config texts say the same (JSON or TOML compared as data; else as text).
fn semantically_equal(a: &str, b: &str) -> bool {
    if let (Ok(x), Ok(y)) = (serde_json::from_str::<Value>(a), serde_json::from_str::<Value>(b)) {
        return x == y;
    }
    a == b
}

/// The current UTC time as `YYYYMMDDTHHMMSSZ`, for backup names.
fn chrono_like_stamp() -> String {
    use spine_core::Clock as _;
    let t = spine_core::SystemClock.now().to_rfc3339();
    t.chars().filter(|c| c.is_ascii_alphanumeric()).take(15).collect::<String>() + "Z"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spine_hook_commands_are_recognised_whatever_the_path() {
        assert!(is_spine_hook("/usr/local/bin/spine hook prompt"));
        assert!(is_spine_hook("'/home/a b/spine' hook session-start --data-dir /x"));
        assert!(is_spine_hook("spine hook session-start"));
        assert!(!is_spine_hook("spine mcp"));
        assert!(!is_spine_hook("/opt/other hook prompt"));
        assert!(!is_spine_hook("node spine.js hook"));
        assert_eq!(shell_word("/a b/spine"), "'/a b/spine'");
        assert_eq!(shell_word("/usr/bin/spine"), "/usr/bin/spine");
    }

    #[test]
    fn json_edits_keep_every_other_key_in_order_and_are_idempotent() {
        let text = r#"{"zeta": 1, "mcpServers": {"other": {"command": "x"}},
            "hooks": {"SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}]},
            "alpha": [1, 2]}"#;
        let entry = json!({"command": "/bin/spine", "args": ["mcp"]});
        let p = Path::new("settings.json");
        let hook = |event: &str| format!("/bin/spine hook {event}");
        let once = edit_json(Some(text), p, true, Some(&entry), Some(&hook)).unwrap();
        let twice = edit_json(Some(&once), p, true, Some(&entry), Some(&hook)).unwrap();
        assert_eq!(once, twice, "a second install changes nothing");
        let v: Value = serde_json::from_str(&once).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["zeta", "mcpServers", "hooks", "alpha"], "order kept");
        assert_eq!(v["mcpServers"]["other"], json!({"command": "x"}));
        assert_eq!(v["hooks"]["SessionStart"].as_array().unwrap().len(), 2);
        assert_eq!(v["hooks"]["SessionStart"][0]["hooks"][0]["command"], "echo hi");
        assert_eq!(
            v["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"],
            "/bin/spine hook prompt"
        );

        let removed = edit_json(Some(&once), p, false, Some(&entry), Some(&hook)).unwrap();
        let r: Value = serde_json::from_str(&removed).unwrap();
        let original: Value = serde_json::from_str(text).unwrap();
        assert_eq!(r, original, "uninstall leaves exactly what was there");
    }

    #[test]
    fn codex_toml_keeps_comments_and_layout() {
        let text =
            "# my settings\nmodel = \"o4\"  # fast\n\n[mcp_servers.other]\ncommand = \"x\"\n";
        let p = Path::new("config.toml");
        let args = vec!["mcp".to_owned()];
        let once = edit_codex_toml(Some(text), p, true, "/bin/spine", &args).unwrap();
        assert!(once.starts_with(text), "the existing text is untouched: {once}");
        assert!(
            once.contains("[mcp_servers.spine]\ncommand = \"/bin/spine\"\nargs = [\"mcp\"]"),
            "{once}"
        );
        assert_eq!(edit_codex_toml(Some(&once), p, true, "/bin/spine", &args).unwrap(), once);
        let removed = edit_codex_toml(Some(&once), p, false, "/bin/spine", &args).unwrap();
        assert_eq!(removed, text);
    }
}
