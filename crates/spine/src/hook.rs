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
//! Which repository and which scopes: `spine_service::repo` (the git top-level directory
//! above `cwd` and its `origin` remote name it; a `.spine.toml` may choose). See
//! docs/hooks.md.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use serde::Deserialize;
use serde_json::json;
use spine_core::Caller;
use spine_service::Service;
use spine_service::digest::{
    DEFAULT_DIGEST_BUDGET, DEFAULT_MIN_SCORE, DEFAULT_PROMPT_BUDGET, Digest, MAX_BUDGET,
};
use spine_service::repo::Checkout;

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
    let checkout = Checkout::find(&cwd).ok_or_else(|| {
        anyhow!("{} is not in a git repository (and has no .spine.toml above it)", cwd.display())
    })?;
    let (service, caller) = open(args.event == Event::Prompt)?;
    let scopes =
        service.checkout_scopes(&caller, &checkout).map_err(|e| anyhow!("{}", e.message))?;
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
