//! `spine import-notes`: what a project already wrote down for agents — `CLAUDE.md`,
//! `AGENTS.md`, and Claude Code's own memory files (`~/.claude/projects/<project>/memory/*.md`)
//! — as Spine memories of the repository's scope, one per bullet or paragraph.
//!
//! - Each record is self-contained: the nearest heading, then the bullet's or paragraph's
//!   text (nested bullets stay with their parent).
//! - `source` is chosen honestly: `user-said` for `CLAUDE.md` / `AGENTS.md` (instructions
//!   people write and review), `agent-inferred` for Claude Code's memory files (the agent
//!   wrote them); `--source` overrides both.
//! - Tagged `imported` and `from:<file name>`; a record whose text the caller already holds
//!   with that tag in the scope (in any state, archived included) is not stored again, so a
//!   second run imports nothing twice.
//! - `--dry-run` shows every record it would store and stores nothing.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;
use serde_json::json;
use spine_core::{Caller, Category, Scope, Source};
use spine_service::Service;
use spine_service::args::parse_args;

use crate::ops::{OutputArgs, count};
use spine_service::repo::{Checkout, RepoConfig};

/// Words a bullet or paragraph needs to become a record (headings alone, "TODO", … do not).
const MIN_WORDS: usize = 3;

/// `spine import-notes` flags.
#[derive(Debug, Clone, Args)]
pub struct ImportNotesArgs {
    /// Files to import [default: CLAUDE.md and AGENTS.md at the repository's top, and
    /// Claude Code's memory files of the repository].
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The directory whose repository is imported [default: the current directory].
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// The memory scope to store into [default: the repository's `.spine.toml` scope, else
    /// its one existing scope].
    #[arg(long)]
    pub scope: Option<String>,
    /// `user-said` or `agent-inferred` for every record [default: by file, see above].
    #[arg(long)]
    pub source: Option<String>,
    /// The category of every record [default: `convention`; Claude Code memory files by
    /// their `type`].
    #[arg(long)]
    pub category: Option<String>,
    /// Leave Claude Code's memory files out of the default set.
    #[arg(long)]
    pub no_claude_memory: bool,
    /// Show what would be stored; store nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// One bullet or paragraph, ready to store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    /// The record's content.
    pub content: String,
    /// Its first line in the file.
    pub line: usize,
}

/// A parsed file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The notes, in file order.
    pub notes: Vec<Note>,
    /// The front matter's `type:` (Claude Code memory files), if any.
    pub kind: Option<String>,
}

fn bullet(line: &str) -> Option<(usize, &str)> {
    let indent = line.len() - line.trim_start().len();
    let t = line.trim_start();
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = t.strip_prefix(marker) {
            return Some((indent, rest));
        }
    }
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        let rest = &t[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return Some((indent, rest));
        }
    }
    None
}

/// Splits markdown into notes: each top-level bullet, and each paragraph outside a list,
/// prefixed with its nearest heading; nested bullets and continuation lines stay with
/// their item; fenced code stays with the paragraph it is in.
pub fn split_markdown(text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let mut lines: Vec<(usize, &str)> = text.lines().enumerate().map(|(i, l)| (i + 1, l)).collect();
    // YAML front matter.
    if lines.first().is_some_and(|(_, l)| l.trim() == "---")
        && let Some(end) = lines.iter().skip(1).position(|(_, l)| l.trim() == "---")
    {
        for (_, l) in &lines[1..=end] {
            if let Some(v) = l.trim().strip_prefix("type:") {
                parsed.kind = Some(v.trim().trim_matches(['"', '\'']).to_owned());
            }
        }
        lines.drain(..end + 2);
    }
    let mut heading = String::new();
    let mut item: Option<(usize, Vec<String>)> = None;
    let mut in_fence = false;
    let flush = |item: &mut Option<(usize, Vec<String>)>, heading: &str, out: &mut Vec<Note>| {
        if let Some((line, parts)) = item.take() {
            let body = parts.join("\n").trim().to_owned();
            if body.split_whitespace().count() >= MIN_WORDS {
                let content =
                    if heading.is_empty() { body } else { format!("{heading} — {body}") };
                out.push(Note { content, line });
            }
        }
    };
    for (no, line) in lines {
        let t = line.trim();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            item.get_or_insert((no, vec![])).1.push(line.to_owned());
            continue;
        }
        if in_fence {
            item.get_or_insert((no, vec![])).1.push(line.to_owned());
            continue;
        }
        if t.starts_with('#') && t.trim_start_matches('#').starts_with(' ') {
            flush(&mut item, &heading, &mut parsed.notes);
            heading = t.trim_start_matches('#').trim().to_owned();
            continue;
        }
        if t.is_empty() {
            // A blank line ends the paragraph or list item.
            flush(&mut item, &heading, &mut parsed.notes);
            continue;
        }
        match bullet(line) {
            Some((indent, rest)) if indent < 2 => {
                flush(&mut item, &heading, &mut parsed.notes);
                item = Some((no, vec![rest.trim().to_owned()]));
            }
            Some((_, rest)) => {
                item.get_or_insert((no, vec![])).1.push(format!("- {}", rest.trim()));
            }
            None => item.get_or_insert((no, vec![])).1.push(t.to_owned()),
        }
    }
    flush(&mut item, &heading, &mut parsed.notes);
    parsed
}

/// Claude Code's project directory name for `path`: every character that is not an ASCII
/// letter or digit becomes `-` (`/home/a/app` → `-home-a-app`).
pub fn claude_project_dir(path: &Path) -> String {
    path.to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// A file to import, with how its records are stamped.
struct Input {
    path: PathBuf,
    source: Source,
    claude_memory: bool,
}

/// The default files of the repository at `top`.
fn default_inputs(top: &Path, with_memory: bool) -> Vec<Input> {
    let mut out: Vec<Input> = ["CLAUDE.md", "AGENTS.md", ".claude/CLAUDE.md"]
        .iter()
        .map(|f| top.join(f))
        .filter(|p| p.is_file())
        .map(|path| Input { path, source: Source::UserSaid, claude_memory: false })
        .collect();
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    if let (true, Some(home)) = (with_memory, home) {
        let top = std::fs::canonicalize(top).unwrap_or_else(|_| top.to_path_buf());
        let dir = home.join(".claude/projects").join(claude_project_dir(&top)).join("memory");
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut files: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect();
            files.sort();
            out.extend(files.into_iter().map(|path| Input {
                path,
                source: Source::AgentInferred,
                claude_memory: true,
            }));
        }
    }
    out
}

/// The category a Claude Code memory file's `type` stands for.
fn category_of_kind(kind: Option<&str>) -> Category {
    match kind {
        Some("user" | "feedback") => Category::Preference,
        Some("project") => Category::Decision,
        _ => Category::Convention,
    }
}

/// What one file gave.
#[derive(Debug, Clone, Serialize)]
struct FileReport {
    file: String,
    source: Source,
    category: Category,
    found: usize,
    imported: usize,
    already_present: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    would_import: Vec<Note>,
}

/// The scope to import into.
fn choose_scope(
    service: &Service,
    caller: &Caller,
    args: &ImportNotesArgs,
    top: Option<&Path>,
    repo: &str,
) -> Result<Scope> {
    let parse = |s: &str| {
        Scope::parse("--scope", s)
            .and_then(|s| s.require_memory("--scope"))
            .map_err(|e| anyhow::anyhow!("{}", e.message))
    };
    if let Some(s) = &args.scope {
        return parse(s);
    }
    if let Some(s) = top.and_then(|t| RepoConfig::read(t).ok()?.scope) {
        return parse(&s);
    }
    let found = service.repo_scopes(caller, repo).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "no scope of {repo:?} exists yet: give --scope <run>:<tier>:{repo} (e.g. \
             --scope local:project:{repo}) or set scope in {}/.spine.toml",
            top.map_or(".".into(), |t| t.display().to_string())
        ),
        many => bail!(
            "{repo:?} has several scopes ({}): choose one with --scope",
            many.iter().map(Scope::as_str).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// `spine import-notes`, storing through `service` as `caller`.
pub fn run(service: &Service, caller: &Caller, args: &ImportNotesArgs) -> Result<()> {
    let cwd = match &args.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let repo = Checkout::find(&cwd);
    let top = repo.as_ref().map(|r| r.top.clone());
    let inputs: Vec<Input> = if args.files.is_empty() {
        let Some(top) = &top else {
            bail!("{} is not in a git repository: name the files to import", cwd.display());
        };
        default_inputs(top, !args.no_claude_memory)
    } else {
        args.files
            .iter()
            .map(|p| Input { path: p.clone(), source: Source::UserSaid, claude_memory: false })
            .collect()
    };
    if inputs.is_empty() {
        bail!("nothing to import: no CLAUDE.md, AGENTS.md or Claude Code memory files found");
    }
    let repo_name = repo.as_ref().and_then(|r| r.names.last().cloned()).unwrap_or_default();
    let scope = choose_scope(service, caller, args, top.as_deref(), &repo_name)?;
    let source_flag = args
        .source
        .as_deref()
        .map(|s| Source::parse("--source", s).map_err(|e| anyhow::anyhow!("{}", e.message)))
        .transpose()?;
    let category_flag = args
        .category
        .as_deref()
        .map(|c| Category::parse("--category", c).map_err(|e| anyhow::anyhow!("{}", e.message)))
        .transpose()?;

    let mut reports = Vec::new();
    for input in &inputs {
        let text = std::fs::read_to_string(&input.path)
            .with_context(|| format!("reading {}", input.path.display()))?;
        let parsed = split_markdown(&text);
        let name =
            input.path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let tag = format!("from:{name}");
        let source = source_flag.unwrap_or(input.source);
        let category = category_flag.unwrap_or(match input.claude_memory {
            true => category_of_kind(parsed.kind.as_deref()),
            false => Category::Convention,
        });
        let present = service
            .own_contents_tagged(caller, &scope, &tag)
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        let mut report = FileReport {
            file: input.path.display().to_string(),
            source,
            category,
            found: parsed.notes.len(),
            imported: 0,
            already_present: 0,
            would_import: vec![],
        };
        for note in parsed.notes {
            if present.contains(&note.content) {
                report.already_present += 1;
                continue;
            }
            if args.dry_run {
                report.would_import.push(note);
                continue;
            }
            let v = json!({"content": note.content, "scope": scope.as_str(),
                           "source": source.as_str(), "category": category.as_str(),
                           "tags": ["imported", tag]});
            let stored = parse_args(v.as_object().cloned().unwrap_or_default())
                .and_then(|a| service.store_memory(caller, a));
            match stored {
                Ok(_) => report.imported += 1,
                Err(e) => bail!(
                    "{} line {}: {} ({} imported from it before this one; run again to go on)",
                    input.path.display(),
                    note.line,
                    e.message,
                    report.imported
                ),
            }
        }
        reports.push(report);
    }
    let summary = json!({"scope": scope.as_str(), "dry_run": args.dry_run, "files": reports});
    args.out.print(&summary, || {
        for r in &reports {
            let what = if args.dry_run { "would import" } else { "imported" };
            println!(
                "{}: {what} {} ({} found, {} already present) as {} {} into {scope}",
                r.file,
                count(
                    (if args.dry_run { r.would_import.len() } else { r.imported }) as u64,
                    "record"
                ),
                r.found,
                r.already_present,
                r.source,
                r.category,
            );
            for n in &r.would_import {
                let shown: String = n.content.chars().take(100).collect();
                println!("  line {}: {}", n.line, shown.replace('\n', " "));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bullets_and_paragraphs_become_self_contained_notes() {
        let md = "---\nname: x\ntype: feedback\n---\n# Project\n\nIntro paragraph about the \
                  whole project.\n\n## Testing\n- Run cargo test before every commit.\n  \
                  Including the doc tests.\n  - nested detail line here\n- Short\n1. Use the \
                  staging database for integration tests.\n\n## Build\n```sh\ncargo build \
                  --release\n```\nThen copy the binary.\n";
        let p = split_markdown(md);
        assert_eq!(p.kind.as_deref(), Some("feedback"));
        let contents: Vec<&str> = p.notes.iter().map(|n| n.content.as_str()).collect();
        assert_eq!(contents[0], "Project — Intro paragraph about the whole project.");
        assert_eq!(
            contents[1],
            "Testing — Run cargo test before every commit.\nIncluding the doc tests.\n- nested detail line here"
        );
        assert_eq!(contents[2], "Testing — Use the staging database for integration tests.");
        assert!(
            contents[3].starts_with("Build — ```sh\ncargo build --release\n```"),
            "{}",
            contents[3]
        );
        assert_eq!(contents.len(), 4, "\"Short\" has too few words: {contents:?}");
        assert_eq!(p.notes[1].line, 10, "the line of the bullet, front matter counted");
    }

    #[test]
    fn claude_code_names_project_directories_by_their_path() {
        assert_eq!(claude_project_dir(Path::new("/home/a/my.app")), "-home-a-my-app");
    }
}
