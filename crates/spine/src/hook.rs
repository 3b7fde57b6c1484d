//! `spine hook <event>`: memory that arrives by itself, as a coding agent's session hook.
//!
//! The client runs the command with the hook's JSON on stdin (`cwd`, and `prompt` for
//! UserPromptSubmit); it reads the store directly (no MCP server process) and prints what
//! the client injects into the model's context:
//! - `session-start` / `pre-compact`: the repository's digest (rules, then recent memories);
//! - `prompt`: the few memories relevant to the prompt, or nothing at all.
//!
//! A hook must never block the user's session: whatever goes wrong (no input, no
//! repository, no store, an unreachable database, a failing model) prints nothing on stdout,
//! one line on stderr, and exits 0.
//!
//! Which repository: the git top-level directory above `cwd` names it, and so does its
//! `origin` remote's repository name when that differs; a `.spine.toml` at the top level
//! (`scope = "…"` or `scopes = [...]`, `rule_scopes = [...]`, `repo = "…"`) overrides the
//! choice. See docs/hooks.md.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use serde::Deserialize;
use serde_json::json;
use spine_core::{Caller, Scope, ScopeKind};
use spine_service::Service;
use spine_service::digest::{
    DEFAULT_DIGEST_BUDGET, DEFAULT_MIN_SCORE, DEFAULT_PROMPT_BUDGET, Digest, MAX_BUDGET, RepoScopes,
};

/// The hook events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Event {
    /// A session starts, resumes, is cleared or was compacted: the repository's digest.
    SessionStart,
    /// The user submitted a prompt: the memories relevant to it, if any.
    Prompt,
    /// The context is about to be compacted: the digest again.
    PreCompact,
}

impl Event {
    /// The client's name for the event (Claude Code's `hookEventName`).
    fn client_name(self) -> &'static str {
        match self {
            Event::SessionStart => "SessionStart",
            Event::Prompt => "UserPromptSubmit",
            Event::PreCompact => "PreCompact",
        }
    }

    /// Gemini CLI's name for the event (its hooks reference: BeforeAgent fires after a
    /// prompt is submitted, PreCompress before the context is compressed).
    fn gemini_name(self) -> &'static str {
        match self {
            Event::SessionStart => "SessionStart",
            Event::Prompt => "BeforeAgent",
            Event::PreCompact => "PreCompress",
        }
    }
}

/// What the hook prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Claude Code's hook JSON: `{"hookSpecificOutput": {"hookEventName", "additionalContext"}}`.
    Json,
    /// The text alone, for clients that inject a hook's stdout as it is.
    Text,
    /// Gemini CLI's hook JSON: the same shape, with Gemini's event names (`BeforeAgent`
    /// for prompt).
    Gemini,
}

/// `spine hook` flags.
#[derive(Debug, Clone, Args)]
pub struct HookArgs {
    /// session-start, prompt or pre-compact.
    #[arg(value_enum)]
    pub event: Event,
    /// json (Claude Code's and Codex's hook output), gemini (Gemini CLI's) or text.
    #[arg(long, value_enum, default_value = "json")]
    pub format: Format,
    /// Most characters to print [default: 8000 for the digest, 2000 for prompt; at most
    /// 10000, the Claude Code limit for injected context].
    #[arg(long, env = "SPINE_HOOK_BUDGET", value_parser = clap::value_parser!(u64).range(200..=MAX_BUDGET as u64))]
    pub budget: Option<u64>,
    /// prompt: the lowest similarity (dense cosine, 0 to 1) a memory needs to be shown.
    #[arg(long, env = "SPINE_HOOK_MIN_SCORE", default_value_t = DEFAULT_MIN_SCORE, value_parser = min_score)]
    pub min_score: f32,
    /// The working directory to find the repository from, when the hook input has no `cwd`.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
}

fn min_score(v: &str) -> Result<f32, String> {
    v.parse::<f32>()
        .ok()
        .filter(|s| (0.0..=1.0).contains(s))
        .ok_or_else(|| "must be a number from 0 to 1".to_owned())
}

/// The part of a hook's JSON input Spine reads (Claude Code sends more).
#[derive(Debug, Default, Deserialize)]
struct Input {
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
    /// Cursor names the workspace instead of a `cwd`.
    #[serde(default)]
    workspace_roots: Option<Vec<String>>,
}

/// `.spine.toml` at a repository's top level.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The repository's name, instead of the directory's or the origin's.
    #[serde(default)]
    repo: Option<String>,
    /// The one memory scope to read.
    #[serde(default)]
    scope: Option<String>,
    /// Several memory scopes to read, in this order.
    #[serde(default)]
    scopes: Option<Vec<String>>,
    /// Rule scopes to read (default: `rule:repo:<repo>`).
    #[serde(default)]
    rule_scopes: Option<Vec<String>>,
}

/// A repository found from a working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// Its top-level directory.
    pub top: PathBuf,
    /// Its names: the directory's, then the origin remote's when it differs.
    pub names: Vec<String>,
}

/// The repository `cwd` is in: the nearest directory above it holding `.git` (or, outside
/// git, `.spine.toml`).
pub fn find_repo(cwd: &Path) -> Option<Repo> {
    let top =
        cwd.ancestors().find(|d| d.join(".git").exists() || d.join(".spine.toml").is_file())?;
    let mut names: Vec<String> =
        top.file_name().map(|n| n.to_string_lossy().into_owned()).into_iter().collect();
    if let Some(origin) = origin_name(top)
        && !names.contains(&origin)
    {
        names.push(origin);
    }
    (!names.is_empty()).then(|| Repo { top: top.to_path_buf(), names })
}

/// The git directory holding `top`'s config: `.git` itself, or for a worktree or submodule
/// (`.git` is a file `gitdir: …`), the common directory it points to.
fn git_config(top: &Path) -> Option<PathBuf> {
    let dot_git = top.join(".git");
    if dot_git.is_dir() {
        return Some(dot_git.join("config"));
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let gitdir = top.join(text.trim().strip_prefix("gitdir:")?.trim());
    let common = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(rel) => gitdir.join(rel.trim()),
        Err(_) => gitdir,
    };
    Some(common.join("config"))
}

/// The repository name of the `origin` remote's URL in `top`'s git config.
fn origin_name(top: &Path) -> Option<String> {
    let config = std::fs::read_to_string(git_config(top)?).ok()?;
    let mut in_origin = false;
    for line in config.lines().map(str::trim) {
        if line.starts_with('[') {
            in_origin = line.replace(' ', "") == "[remote\"origin\"]";
        } else if in_origin
            && let Some((key, value)) = line.split_once('=')
            && key.trim() == "url"
        {
            return repo_name_of_url(value.trim());
        }
    }
    None
}

/// `spine` for `git@github.com:acme/spine.git`, `https://host/acme/spine/` and the like.
pub fn repo_name_of_url(url: &str) -> Option<String> {
    let url = url.trim().trim_end_matches('/');
    let last = url.rsplit(['/', ':']).next()?;
    let name = last.strip_suffix(".git").unwrap_or(last);
    (!name.is_empty()).then(|| name.to_owned())
}

/// The `.spine.toml` at `top`, or the defaults when there is none.
fn read_config(top: &Path) -> Result<Config> {
    let path = top.join(".spine.toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text).with_context(|| format!("reading {}", path.display())),
        Err(_) => Ok(Config::default()),
    }
}

/// The one memory scope the `.spine.toml` at `top` names (`scope`), if it is readable.
pub fn configured_scope(top: &Path) -> Option<String> {
    read_config(top).ok()?.scope
}

/// The scopes to read for `repo`, from its `.spine.toml` or found in the store.
fn scopes_for(service: &Service, caller: &Caller, repo: &Repo) -> Result<RepoScopes> {
    let path = repo.top.join(".spine.toml");
    let config = read_config(&repo.top)?;
    let names: Vec<String> = match &config.repo {
        Some(r) => vec![r.clone()],
        None => repo.names.clone(),
    };
    let parse = |s: &str, want: ScopeKind| -> Result<Scope> {
        let scope =
            Scope::parse("scope", s).map_err(|e| anyhow!("{}: {}", path.display(), e.message))?;
        if scope.kind() != want {
            bail!(
                "{}: {s:?} is not a {} scope",
                path.display(),
                if want == ScopeKind::Rule { "rule" } else { "memory" }
            );
        }
        Ok(scope)
    };
    let configured: Vec<String> =
        config.scope.iter().cloned().chain(config.scopes.iter().flatten().cloned()).collect();
    let memory = if configured.is_empty() {
        let mut found = Vec::new();
        for name in &names {
            for s in service.repo_scopes(caller, name).map_err(|e| anyhow!("{}", e.message))? {
                if !found.contains(&s) {
                    found.push(s);
                }
            }
        }
        found
    } else {
        configured.iter().map(|s| parse(s, ScopeKind::Memory)).collect::<Result<_>>()?
    };
    let rules = match &config.rule_scopes {
        Some(list) => list.iter().map(|s| parse(s, ScopeKind::Rule)).collect::<Result<_>>()?,
        None => names
            .iter()
            .filter_map(|n| Scope::parse("scope", &format!("rule:repo:{n}")).ok())
            .collect(),
    };
    Ok(RepoScopes { repo: names.first().cloned().unwrap_or_default(), memory, rules })
}

/// Reads the hook input: stdin's JSON (not from a terminal).
fn read_input(event: Event, cwd_flag: Option<&Path>) -> Result<(PathBuf, Option<String>)> {
    let mut raw = String::new();
    if !std::io::stdin().is_terminal() {
        std::io::stdin().read_to_string(&mut raw).context("reading the hook input on stdin")?;
    }
    let input: Input = match raw.trim() {
        "" if cwd_flag.is_some() && event != Event::Prompt => Input::default(),
        "" => bail!("no hook input on stdin (the client sends JSON with `cwd`)"),
        text => serde_json::from_str(text).context("the hook input on stdin is not JSON")?,
    };
    let roots = input.workspace_roots.and_then(|r| r.into_iter().next());
    let cwd = match (input.cwd.filter(|c| !c.is_empty()).or(roots), cwd_flag) {
        (Some(c), _) => PathBuf::from(c),
        (None, Some(c)) => c.to_path_buf(),
        (None, None) => bail!("the hook input has no `cwd`"),
    };
    if event == Event::Prompt && input.prompt.as_deref().is_none_or(|p| p.trim().is_empty()) {
        bail!("the hook input has no `prompt`");
    }
    Ok((cwd, input.prompt))
}

/// The context to inject for `args.event`, built with `open` (which opens the store and
/// the embedder, and says who the caller is).
pub fn context(
    args: &HookArgs,
    open: impl FnOnce(bool) -> Result<(Service, Caller)>,
) -> Result<Digest> {
    let (cwd, prompt) = read_input(args.event, args.cwd.as_deref())?;
    let repo = find_repo(&cwd).ok_or_else(|| {
        anyhow!("{} is not in a git repository (and has no .spine.toml above it)", cwd.display())
    })?;
    let (service, caller) = open(args.event == Event::Prompt)?;
    let scopes = scopes_for(&service, &caller, &repo)?;
    let budget = |default: usize| args.budget.map_or(default, |b| b as usize);
    let digest = match args.event {
        Event::SessionStart | Event::PreCompact => {
            service.digest(&caller, &scopes, budget(DEFAULT_DIGEST_BUDGET))
        }
        Event::Prompt => service.prompt_context(
            &caller,
            &scopes,
            prompt.as_deref().unwrap_or_default(),
            args.min_score,
            budget(DEFAULT_PROMPT_BUDGET),
        ),
    };
    digest.map_err(|e| anyhow!("{}", e.message))
}

/// The event's name on the command line.
pub fn event_name(event: Event) -> &'static str {
    match event {
        Event::SessionStart => "session-start",
        Event::Prompt => "prompt",
        Event::PreCompact => "pre-compact",
    }
}

/// What to print on stdout for `digest`; nothing when it is empty.
pub fn render(event: Event, format: Format, digest: &Digest) -> Option<String> {
    if digest.text.is_empty() {
        return None;
    }
    Some(match format {
        Format::Text => digest.text.clone(),
        Format::Json | Format::Gemini => json!({
            "hookSpecificOutput": {
                "hookEventName": match format {
                    Format::Gemini => event.gemini_name(),
                    _ => event.client_name(),
                },
                "additionalContext": digest.text,
            }
        })
        .to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_names_come_from_remote_urls() {
        for (url, name) in [
            ("git@github.com:acme/spine.git", "spine"),
            ("https://github.com/acme/spine", "spine"),
            ("https://gitlab.example/group/sub/spine.git/", "spine"),
            ("ssh://git@host:2222/acme/tools.git", "tools"),
            ("/srv/git/local-repo", "local-repo"),
        ] {
            assert_eq!(repo_name_of_url(url).as_deref(), Some(name), "{url}");
        }
        assert_eq!(repo_name_of_url(""), None);
    }

    #[test]
    fn the_repository_is_the_git_top_level_with_its_origin_name() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("checkout");
        std::fs::create_dir_all(top.join(".git")).unwrap();
        std::fs::create_dir_all(top.join("src/deep")).unwrap();
        std::fs::write(
            top.join(".git/config"),
            "[core]\n\tbare = false\n[remote \"upstream\"]\n\turl = git@x:o/other.git\n\
             [remote \"origin\"]\n\turl = git@github.com:acme/spine.git\n",
        )
        .unwrap();
        let repo = find_repo(&top.join("src/deep")).unwrap();
        assert_eq!(repo.top, top);
        assert_eq!(repo.names, ["checkout", "spine"]);
        assert_eq!(find_repo(dir.path()), None, "not in a repository");
    }

    #[test]
    fn json_output_is_claude_codes_hook_shape_and_empty_prints_nothing() {
        let d = Digest { text: "hello".into(), shown: 1, omitted: 0 };
        let out = render(Event::Prompt, Format::Json, &d).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["hookSpecificOutput"]["hookEventName"], "UserPromptSubmit");
        assert_eq!(v["hookSpecificOutput"]["additionalContext"], "hello");
        assert_eq!(render(Event::Prompt, Format::Text, &d).unwrap(), "hello");
        let gemini: serde_json::Value =
            serde_json::from_str(&render(Event::Prompt, Format::Gemini, &d).unwrap()).unwrap();
        assert_eq!(gemini["hookSpecificOutput"]["hookEventName"], "BeforeAgent");
        assert_eq!(gemini["hookSpecificOutput"]["additionalContext"], "hello");
        assert_eq!(render(Event::SessionStart, Format::Json, &Digest::default()), None);
    }
}
