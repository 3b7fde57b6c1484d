//! `spine install <client>` / `spine uninstall <client>`: Spine's entries in a coding
//! client's own configuration files — the MCP server (`spine mcp`) and, where the client
//! injects a hook's output into the model's context, the session hooks (`spine hook`).
//!
//! Which files, keys and events each client has is in [`clients`] (and docs/clients.md);
//! how a file is edited depends only on its format: JSON and JSON with comments through a
//! syntax tree ([`json`]), Codex's TOML through `toml_edit` ([`toml`]), goose's YAML line by
//! line ([`yaml`]). Every other entry of those files is kept as it was, with its comments
//! and layout. Running install twice changes nothing the second time; a file that changes
//! is first copied to `<file>.spine-backup-<time>`. Spine's hook entries are recognised by
//! their command (`<spine> hook <event>`), so an install replaces them and an uninstall
//! removes exactly them.

mod clients;
mod json;
mod toml;
mod yaml;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{ArgGroup, Args};

pub use clients::Client;
use clients::{Format, Target};

/// `spine install` / `spine uninstall` flags: a client, or --all.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["client", "all"])))]
pub struct InstallArgs {
    /// The client: claude-code, codex, cursor, gemini, vscode, windsurf, zed, cline,
    /// opencode, goose or claude-desktop.
    #[arg(value_enum)]
    pub client: Option<Client>,
    /// Every client found on this machine (its configuration folder, or its executable on
    /// PATH), user-wide; prints a table of what was done.
    #[arg(long, conflicts_with_all = ["client", "project", "project_dir"])]
    pub all: bool,
    /// Configure this project only (the current directory, or --project-dir).
    #[arg(long, conflicts_with = "user")]
    pub project: bool,
    /// Configure every project of this user (the default).
    #[arg(long)]
    pub user: bool,
    /// The project directory for --project and --instructions [default: the current
    /// directory].
    #[arg(long, value_name = "DIR")]
    pub project_dir: Option<PathBuf>,
    /// Show what would change (the lines of each file); write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The spine executable the entries run [default: this one].
    #[arg(long, value_name = "PATH")]
    pub spine: Option<PathBuf>,
    /// Leave the hooks out (MCP server only).
    #[arg(long)]
    pub no_hooks: bool,
    /// Also add one line pointing the agent at Spine's memory tools to the project's
    /// instruction file (CLAUDE.md, AGENTS.md, GEMINI.md, .windsurfrules, …); with
    /// uninstall, remove that line.
    #[arg(long)]
    pub instructions: bool,
}

/// The line `--instructions` adds to a project's instruction file.
pub const INSTRUCTION: &str = "- Memory: this project keeps its decisions and conventions in Spine (MCP server `spine`): search_memory before a task, store_memory what you learn.";

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

/// One file's change.
struct Change {
    path: PathBuf,
    before: Option<String>,
    after: String,
    what: &'static str,
}

impl Change {
    fn changes(&self) -> bool {
        self.before.as_deref() != Some(self.after.as_str())
    }
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

fn read(p: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(p) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// The project directory of `--project` / `--instructions`.
fn project_dir(args: &InstallArgs) -> Result<PathBuf> {
    match &args.project_dir {
        Some(d) => Ok(d.clone()),
        None => std::env::current_dir().context("reading the current directory"),
    }
}

/// Computes the changes `spine install` (or `uninstall` when `install` is false) makes to
/// `target`'s files.
fn plan(
    target: &Target,
    args: &InstallArgs,
    install: bool,
    data_dir: Option<&Path>,
) -> Result<Vec<Change>> {
    let (exe, mcp_args, hook) = invocation(args, data_dir)?;
    let entry = clients::entry(target.client, &exe, &mcp_args);
    let wanted = install.then_some(&entry);
    let mut changes = Vec::new();
    let before = read(&target.mcp)?;
    let path = &target.mcp;
    let mut after = match target.format {
        Format::Json => {
            json::edit_server(before.as_deref(), path, target.servers_key, "spine", wanted)?
        }
        Format::Toml => toml::edit_codex_toml(before.as_deref(), path, install, &exe, &mcp_args)?,
        Format::Yaml => yaml::edit_extension(before.as_deref(), path, "spine", wanted)?,
    };
    let with_hooks = install && !args.no_hooks;
    let command_for: Option<&dyn Fn(&str) -> String> = with_hooks.then_some(&hook);
    let mut what = "MCP server";
    match &target.hooks {
        // Gemini CLI: hooks and servers in one settings.json.
        Some((hooks, events)) if hooks == path => {
            after = json::edit_hooks(Some(&after), path, events, command_for)?;
            if with_hooks {
                what = "MCP server and hooks";
            }
        }
        Some((hooks, events)) => {
            changes.push(Change { path: path.clone(), before, after, what });
            let before = read(hooks)?;
            let after = json::edit_hooks(before.as_deref(), hooks, events, command_for)?;
            changes.push(Change { path: hooks.clone(), before, after, what: "hooks" });
            return instructions(target, args, install, changes);
        }
        None => {}
    }
    changes.push(Change { path: path.clone(), before, after, what });
    instructions(target, args, install, changes)
}

/// Adds the `--instructions` change to `changes`.
fn instructions(
    target: &Target,
    args: &InstallArgs,
    install: bool,
    mut changes: Vec<Change>,
) -> Result<Vec<Change>> {
    if !args.instructions {
        return Ok(changes);
    }
    let Some(name) = target.instructions else {
        bail!("{} has no project instruction file: leave out --instructions", target.client.name());
    };
    let mut path = project_dir(args)?.join(name);
    // Cline reads every file of a .clinerules folder.
    if path.is_dir() {
        path = path.join("spine.md");
    }
    let before = read(&path)?;
    let text = before.clone().unwrap_or_default();
    let has = text.lines().any(|l| l == INSTRUCTION);
    let after = match (install, has) {
        (true, false) => {
            let mut t = text;
            if !t.is_empty() && !t.ends_with('\n') {
                t.push('\n');
            }
            t + INSTRUCTION + "\n"
        }
        (false, true) => text
            .split_inclusive('\n')
            .filter(|l| l.trim_end_matches(['\n', '\r']) != INSTRUCTION)
            .collect(),
        _ => text,
    };
    changes.push(Change { path, before, after, what: "instruction line" });
    Ok(changes)
}

/// The changed lines of `after` against `before`, as `-`/`+` lines (the common head and
/// tail left out).
fn diff(before: &str, after: &str) -> String {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail =
        a[head..].iter().rev().zip(b[head..].iter().rev()).take_while(|(x, y)| x == y).count();
    let mut out = format!("    @@ line {} @@\n", head + 1);
    for l in &a[head..a.len() - tail] {
        out.push_str(&format!("    -{l}\n"));
    }
    for l in &b[head..b.len() - tail] {
        out.push_str(&format!("    +{l}\n"));
    }
    out
}

/// A path beside `path` named `<file>.spine-backup-<stamp>` that does not exist yet.
fn backup_path(path: &Path, stamp: &str) -> PathBuf {
    let base = format!("{}.spine-backup-{stamp}", path.display());
    let mut candidate = PathBuf::from(&base);
    let mut n = 1;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{base}-{n}"));
        n += 1;
    }
    candidate
}

/// What applying a plan did.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Nothing to change.
    Unchanged,
    /// Something changed (or would, with --dry-run).
    Changed,
}

/// Writes (or, with `dry_run`, shows) `changes`, one line per file.
fn apply(changes: &[Change], install: bool, dry_run: bool) -> Result<Outcome> {
    let stamp = chrono_like_stamp();
    let mut outcome = Outcome::Unchanged;
    for c in changes {
        let shown = c.path.display();
        // Nothing to remove from a file that does not exist.
        if !c.changes() || (c.before.is_none() && !install) {
            println!("unchanged  {shown} ({})", c.what);
            continue;
        }
        outcome = Outcome::Changed;
        if dry_run {
            let (verb, prep) = if install { ("would add", "in") } else { ("would remove", "from") };
            println!("{verb}  Spine's {} {prep} {shown}:", c.what);
            print!("{}", diff(c.before.as_deref().unwrap_or_default(), &c.after));
            continue;
        }
        if let Some(dir) = c.path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut note = String::new();
        if c.before.is_some() {
            let backup = backup_path(&c.path, &stamp);
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
    Ok(outcome)
}

/// `spine install` (or `uninstall`): applies the plan, printing one line per file.
pub fn run(args: &InstallArgs, install: bool, data_dir: Option<&Path>) -> Result<()> {
    if args.all {
        return run_all(args, install, data_dir);
    }
    let client = args.client.context("name a client, or pass --all")?;
    if !args.project && args.project_dir.is_some() && !args.instructions {
        bail!("--project-dir needs --project (or --instructions)");
    }
    let project = if args.project { Some(project_dir(args)?) } else { None };
    let target = clients::target(client, project.as_deref())?;
    let changes = plan(&target, args, install, data_dir)?;
    apply(&changes, install, args.dry_run)?;
    if install && target.hooks.is_none() {
        println!("hooks: not installed for {}: {}", client.name(), target.no_hooks);
    }
    Ok(())
}

/// `--all`: every client found, user-wide, then a table.
fn run_all(args: &InstallArgs, install: bool, data_dir: Option<&Path>) -> Result<()> {
    let mut rows = vec![["client", "installed", "where", "hooks"].map(str::to_owned)];
    let mut failed = 0;
    let mut missing = Vec::new();
    for client in Client::ALL {
        let Some(found) = clients::detect(client) else {
            missing.push(client.name());
            continue;
        };
        tracing::debug!(client = client.name(), %found, "client found");
        let result = clients::target(client, None).and_then(|target| {
            let changes = plan(&target, args, install, data_dir)?;
            let outcome = apply(&changes, install, args.dry_run)?;
            Ok((target, outcome))
        });
        let row = match result {
            Ok((target, outcome)) => {
                let hooks = match (&target.hooks, args.no_hooks) {
                    (Some(_), false) => "yes".to_owned(),
                    (Some(_), true) => "no: --no-hooks".to_owned(),
                    (None, _) => format!("no: {}", target.no_hooks),
                };
                let what = match target.hooks.is_some() && !args.no_hooks {
                    true => "MCP server + hooks",
                    false => "MCP server",
                };
                let done = match (outcome, args.dry_run, install) {
                    (Outcome::Unchanged, _, _) => "unchanged".to_owned(),
                    (Outcome::Changed, true, true) => format!("would add {what}"),
                    (Outcome::Changed, true, false) => format!("would remove {what}"),
                    (Outcome::Changed, false, true) => what.to_owned(),
                    (Outcome::Changed, false, false) => format!("removed {what}"),
                };
                [client.name().to_owned(), done, target.mcp.display().to_string(), hooks]
            }
            Err(e) => {
                failed += 1;
                [client.name().to_owned(), format!("error: {e:#}"), String::new(), String::new()]
            }
        };
        rows.push(row);
    }
    println!();
    let widths: Vec<usize> =
        (0..4).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    for r in &rows {
        let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
    if rows.len() == 1 {
        println!("no client found (looked for their configuration folders and executables)");
    }
    if !missing.is_empty() {
        println!("not found: {}", missing.join(", "));
    }
    if failed > 0 {
        bail!("{failed} client(s) failed; see the table");
    }
    Ok(())
}

/// What `spine doctor` learns of one client's configuration.
pub struct Installed {
    pub client: Client,
    /// `user` or `project`.
    pub scope: &'static str,
    /// The file holding Spine's MCP server entry.
    pub path: PathBuf,
    /// The executable that entry runs.
    pub command: Option<String>,
    /// The hooks file and, per event, whether Spine's hook is there (clients with hooks).
    pub hooks: Option<(PathBuf, Vec<(&'static str, bool)>)>,
}

/// Spine's entry in `client`'s configuration (user-wide, or in `project`), if any.
pub fn inspect(client: Client, project: Option<&Path>) -> Result<Option<Installed>> {
    let target = clients::target(client, project)?;
    let Some(text) = read(&target.mcp)? else { return Ok(None) };
    let parse = |format: Format, text: &str, path: &Path| match format {
        Format::Json => json::parse_value(text, path),
        Format::Toml => toml::parse_value(text, path),
        Format::Yaml => yaml::parse_value(text, path),
    };
    let Some(value) = parse(target.format, &text, &target.mcp)? else { return Ok(None) };
    let Some(entry) = value.get(target.servers_key).and_then(|s| s.get("spine")) else {
        return Ok(None);
    };
    let hooks = match &target.hooks {
        None => None,
        Some((path, events)) => {
            let value = match read(path)? {
                Some(t) => json::parse_value(&t, path)?.unwrap_or_default(),
                None => serde_json::Value::Null,
            };
            let present = json::hooks_present(&value, events);
            Some((path.clone(), events.iter().map(|(e, _)| *e).zip(present).collect()))
        }
    };
    Ok(Some(Installed {
        client,
        scope: if project.is_some() { "project" } else { "user" },
        path: target.mcp.clone(),
        command: clients::entry_command(client, entry),
        hooks,
    }))
}

/// Whether `client` has a project scope.
pub fn has_project_scope(client: Client) -> bool {
    clients::has_project_scope(client)
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
    fn the_diff_shows_only_the_changed_lines() {
        let d = diff("a\nb\nc\n", "a\nb\nx\ny\nc\n");
        assert_eq!(d, "    @@ line 3 @@\n    +x\n    +y\n");
        assert_eq!(diff("a\nold\nc", "a\nnew\nc"), "    @@ line 2 @@\n    -old\n    +new\n");
    }
}
