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
//! - A dry run lists every record it would store and stores nothing.
//!
//! Unlike the other operator use cases this one is a caller of the service: it stores
//! through [`Service::store`] as the caller the binary names, each note a [`NewRecord`]
//! checked by store_memory's rules (limits, secrets), near-duplicates reported as for any
//! write.

use std::path::{Path, PathBuf};

use serde::Serialize;
use spine_core::{Caller, Category, Scope, Source};
use spine_service::Service;
use spine_service::repo::{Checkout, RepoConfig};
use spine_service::request::NewRecord;

use crate::{Error, Result};

/// Words a bullet or paragraph needs to become a record (headings alone, "TODO", … do not).
const MIN_WORDS: usize = 3;

/// What to import, as the operator asked for it (flags not yet parsed).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Files to import; empty: the repository's default files ([`default_inputs`]).
    pub files: Vec<PathBuf>,
    /// The directory whose repository is imported.
    pub cwd: PathBuf,
    /// The home directory holding `.claude/projects` (Claude Code's memory files).
    pub home: Option<PathBuf>,
    /// `--scope`: the memory scope to store into.
    pub scope: Option<String>,
    /// `--source` for every record.
    pub source: Option<String>,
    /// `--category` for every record.
    pub category: Option<String>,
    /// Whether the default files include Claude Code's memory files.
    pub claude_memory: bool,
    /// Store nothing; list what would be stored.
    pub dry_run: bool,
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

/// What one file gave.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    /// The file, as given or found.
    pub file: String,
    /// The source its records were (or would be) stored with.
    pub source: Source,
    /// The category its records were (or would be) stored with.
    pub category: Category,
    /// Notes found in it.
    pub found: usize,
    /// Notes stored.
    pub imported: usize,
    /// Notes the caller already holds with the file's tag in the scope.
    pub already_present: usize,
    /// A dry run's notes that would be stored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub would_import: Vec<Note>,
}

/// What an import did (or, dry, would do).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scope stored into.
    pub scope: Scope,
    /// Whether nothing was stored.
    pub dry_run: bool,
    /// One report per file, in import order.
    pub files: Vec<FileReport>,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The file.
    pub path: PathBuf,
    /// The source its records get unless `--source` says otherwise.
    pub source: Source,
    /// A Claude Code memory file (its category follows its front matter's `type`).
    pub claude_memory: bool,
}

/// The default files of the repository at `top`: `CLAUDE.md`, `AGENTS.md` and
/// `.claude/CLAUDE.md` as `user-said`, then (`with_memory`, and a `home`) Claude Code's
/// memory files of the repository as `agent-inferred`, in name order.
pub fn default_inputs(top: &Path, home: Option<&Path>, with_memory: bool) -> Vec<Input> {
    let mut out: Vec<Input> = ["CLAUDE.md", "AGENTS.md", ".claude/CLAUDE.md"]
        .iter()
        .map(|f| top.join(f))
        .filter(|p| p.is_file())
        .map(|path| Input { path, source: Source::UserSaid, claude_memory: false })
        .collect();
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
pub fn category_of_kind(kind: Option<&str>) -> Category {
    match kind {
        Some("user" | "feedback") => Category::Preference,
        Some("project") => Category::Decision,
        _ => Category::Convention,
    }
}

fn invalid(e: spine_core::Error) -> Error {
    Error::Invalid(e.message)
}

/// The scope to import into: `--scope`, else the repository's `.spine.toml` scope, else the
/// one memory scope of `repo` the caller can read.
pub fn choose_scope(
    service: &Service,
    caller: &Caller,
    flag: Option<&str>,
    top: Option<&Path>,
    repo: &str,
) -> Result<Scope> {
    let parse = |s: &str| {
        Scope::parse("--scope", s).and_then(|s| s.require_memory("--scope")).map_err(invalid)
    };
    if let Some(s) = flag {
        return parse(s);
    }
    if let Some(s) = top.and_then(|t| RepoConfig::read(t).ok()?.scope) {
        return parse(&s);
    }
    let found = service.repo_scopes(caller, repo).map_err(invalid)?;
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::Invalid(format!(
            "no scope of {repo:?} exists yet: give --scope <run>:<tier>:{repo} (e.g. \
             --scope local:project:{repo}) or set scope in {}/.spine.toml",
            top.map_or(".".into(), |t| t.display().to_string())
        ))),
        many => Err(Error::Invalid(format!(
            "{repo:?} has several scopes ({}): choose one with --scope",
            many.iter().map(Scope::as_str).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Imports the notes `request` names, storing through `service` as `caller`. Blocking.
///
/// A record the service refuses stops the import with the file, line and what was stored
/// before it (running again goes on: what is stored is skipped).
pub fn import_notes(service: &Service, caller: &Caller, request: &Request) -> Result<Report> {
    let repo = Checkout::find(&request.cwd);
    let top = repo.as_ref().map(|r| r.top.clone());
    let inputs: Vec<Input> = if request.files.is_empty() {
        let Some(top) = &top else {
            return Err(Error::Invalid(format!(
                "{} is not in a git repository: name the files to import",
                request.cwd.display()
            )));
        };
        default_inputs(top, request.home.as_deref(), request.claude_memory)
    } else {
        request
            .files
            .iter()
            .map(|p| Input { path: p.clone(), source: Source::UserSaid, claude_memory: false })
            .collect()
    };
    if inputs.is_empty() {
        return Err(Error::Invalid(
            "nothing to import: no CLAUDE.md, AGENTS.md or Claude Code memory files found".into(),
        ));
    }
    let repo_name = repo.as_ref().and_then(|r| r.names.last().cloned()).unwrap_or_default();
    let scope =
        choose_scope(service, caller, request.scope.as_deref(), top.as_deref(), &repo_name)?;
    let source_flag = request
        .source
        .as_deref()
        .map(|s| Source::parse("--source", s).map_err(invalid))
        .transpose()?;
    let category_flag = request
        .category
        .as_deref()
        .map(|c| Category::parse("--category", c).map_err(invalid))
        .transpose()?;

    let mut files = Vec::new();
    for input in &inputs {
        let text = std::fs::read_to_string(&input.path).map_err(|source| Error::Io {
            context: format!("reading {}", input.path.display()),
            source,
        })?;
        let parsed = split_markdown(&text);
        let name =
            input.path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let tag = format!("from:{name}");
        let source = source_flag.unwrap_or(input.source);
        let category = category_flag.unwrap_or(match input.claude_memory {
            true => category_of_kind(parsed.kind.as_deref()),
            false => Category::Convention,
        });
        let present = service.own_contents_tagged(caller, &scope, &tag).map_err(invalid)?;
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
            if request.dry_run {
                report.would_import.push(note);
                continue;
            }
            let mut record = NewRecord::new(note.content, scope.clone(), source, category);
            record.tags = vec!["imported".into(), tag.clone()];
            let stored =
                record.check(&service.write_rules()).and_then(|r| service.store(caller, r));
            if let Err(e) = stored {
                return Err(Error::Invalid(format!(
                    "{} line {}: {} ({} imported from it before this one; run again to go on)",
                    input.path.display(),
                    note.line,
                    e.message,
                    report.imported
                )));
            }
            report.imported += 1;
        }
        files.push(report);
    }
    Ok(Report { scope, dry_run: request.dry_run, files })
}
