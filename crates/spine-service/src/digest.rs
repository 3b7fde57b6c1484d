//! Memory that arrives by itself: the digest of a repository (its rules, then its most
//! recent memories) and the few memories relevant to a prompt, as plain text under a
//! character budget. `spine hook` prints them for a coding agent's session hooks; the MCP
//! `bootstrap` prompt returns the same digest.
//!
//! Both read through the tools' own operations (`list_rules`, `list_memory`,
//! `search_memory`), so the recall gate, the owner predicate and the views are exactly the
//! tools'. Each record is one line that starts with its short_id, so the agent can cite it
//! or fetch it with get_memory; a summary stands in for the content when there is one.

use spine_core::{Caller, Error, Scope};

use crate::Service;
use crate::request::{ListRequest, RulesRequest, SearchRequest};
use crate::views::{MemoryView, RuleEntry};

/// The most a digest may take: Claude Code's limit for context a hook injects.
pub const MAX_BUDGET: usize = 10_000;
/// The session digest's default budget, in characters.
pub const DEFAULT_DIGEST_BUDGET: usize = 8_000;
/// The prompt context's default budget, in characters.
pub const DEFAULT_PROMPT_BUDGET: usize = 2_000;
/// The lowest dense cosine a memory needs to be shown for a prompt. all-MiniLM-L6-v2 puts
/// unrelated sentences below ~0.25 and a memory answering a question usually above ~0.45.
pub const DEFAULT_MIN_SCORE: f32 = 0.40;
/// Memories shown for a prompt at most.
pub const PROMPT_MEMORIES: usize = 5;
/// Recent memories read per scope for a digest (the budget usually ends it earlier).
const RECENT_PER_SCOPE: usize = 200;
/// Characters of one record's text shown on its line.
const LINE_TEXT: usize = 300;

/// The scopes a repository's memory lives in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepoScopes {
    /// The repository's name, for the heading.
    pub repo: String,
    /// Scopes of its ordinary memories, most relevant first.
    pub memory: Vec<Scope>,
    /// Its rule scopes (`rule:repo:<repo>`, `rule:project:<project>`).
    pub rules: Vec<Scope>,
}

/// Text for the agent's context, and what it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Digest {
    /// The text; empty when there is nothing to show.
    pub text: String,
    /// Records shown.
    pub shown: usize,
    /// Records that matched but did not fit the budget.
    pub omitted: usize,
}

/// Lines under a character budget: a line is added only when it fits whole, keeping room
/// for the closing line that counts what was left out.
struct Budget {
    text: String,
    limit: usize,
    used: usize,
}

/// Room kept for the closing "… more" line.
const TAIL_ROOM: usize = 120;

impl Budget {
    fn new(limit: usize) -> Self {
        Budget { text: String::new(), limit: limit.min(MAX_BUDGET), used: 0 }
    }

    /// Adds `line` when it fits with room for the tail; false when it does not.
    fn push(&mut self, line: &str) -> bool {
        let n = line.chars().count() + 1;
        if self.used + n + TAIL_ROOM > self.limit {
            return false;
        }
        self.text.push_str(line);
        self.text.push('\n');
        self.used += n;
        true
    }

    /// Adds the closing line when it fits the whole budget (it has room reserved).
    fn close(&mut self, line: &str) {
        if self.used + line.chars().count() < self.limit {
            self.text.push_str(line);
        }
        let trimmed = self.text.trim_end().len();
        self.text.truncate(trimmed);
    }
}

/// `s` on one line, at most `max` characters (cut on a character boundary, with `…`).
fn one_line(s: &str, max: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// A memory's line: short_id, category, date, then its summary or its content.
fn memory_line(m: &MemoryView, score: Option<f32>) -> String {
    let text = m.summary.as_deref().or(m.content.as_deref()).unwrap_or_default();
    let date = m.created_at.to_rfc3339();
    let day = date.get(..10).unwrap_or(&date);
    let score = score.map(|s| format!(", score {s:.2}")).unwrap_or_default();
    format!("- [{}] {} {day}{score}: {}", m.short_id, m.category, one_line(text, LINE_TEXT))
}

impl Service {
    /// The memory scopes of `repo` that `caller` can read: every readable scope whose last
    /// part is `repo` (`<run>:<tier>:<repo>`), sorted.
    pub fn repo_scopes(&self, caller: &Caller, repo: &str) -> Result<Vec<Scope>, Error> {
        Ok(self
            .readable_scopes(caller)?
            .into_iter()
            .filter(|s| s.kind() == spine_core::ScopeKind::Memory && s.repo() == repo)
            .collect())
    }

    /// The scopes a digest reads for `target`: a memory scope (`<run>:<tier>:<repo>`) reads
    /// that scope and `rule:repo:<repo>`; a rule scope reads its rules; anything else is a
    /// repository name, read through every readable scope of it ([`Service::repo_scopes`]).
    pub fn scopes_for(&self, caller: &Caller, target: &str) -> Result<RepoScopes, Error> {
        let target = target.trim();
        if target.is_empty() {
            return Err(Error::invalid(
                "repo",
                spine_core::Hint::Required,
                "repo is required: a repository name or a scope",
            ));
        }
        let rule_of = |repo: &str| Scope::parse("repo", &format!("rule:repo:{repo}")).ok();
        if target.contains(':') {
            let scope = Scope::parse("repo", target)?;
            let repo = scope.repo().to_owned();
            return Ok(match scope.kind() {
                spine_core::ScopeKind::Rule => {
                    RepoScopes { repo, memory: vec![], rules: vec![scope] }
                }
                _ => RepoScopes {
                    rules: rule_of(&repo).into_iter().collect(),
                    repo,
                    memory: vec![scope],
                },
            });
        }
        self.named_repo_scopes(caller, &[target.to_owned()])
    }

    /// Every scope `caller` can read, sorted (at most [`crate::SCOPE_CEILING`]).
    pub fn readable_scopes(&self, caller: &Caller) -> Result<Vec<Scope>, Error> {
        use spine_store::{Access, Filter, ScopeFilter};
        let scopes = self
            .store
            .scopes(&Access::read(caller), &Filter::new(ScopeFilter::All), crate::SCOPE_CEILING)
            .map_err(crate::store_error)?;
        Ok(scopes.iter().filter_map(|s| Scope::parse("scope", s).ok()).collect())
    }

    /// Every scope `caller` can read with its recall-visible records, sorted by scope (at
    /// most [`crate::SCOPE_CEILING`]); `true` when the ceiling cut the list.
    pub fn scope_counts(&self, caller: &Caller) -> Result<(Vec<(String, u64)>, bool), Error> {
        use spine_store::{Access, Filter, Gate, ScopeFilter, Selection};
        let access = Access::read(caller);
        let mut scopes = self
            .store
            .scopes(&access, &Filter::new(ScopeFilter::All), crate::SCOPE_CEILING + 1)
            .map_err(crate::store_error)?;
        let truncated = scopes.len() > crate::SCOPE_CEILING;
        scopes.truncate(crate::SCOPE_CEILING);
        let now = self.clock.now();
        let mut out = Vec::with_capacity(scopes.len());
        for s in scopes {
            let Ok(scope) = Scope::parse("scope", &s) else { continue };
            let filter = Filter::new(ScopeFilter::One(scope));
            let sel = Selection { access: &access, filter: &filter, gate: Gate::ActiveAt(now) };
            let n = self.store.count(sel).map_err(crate::store_error)?;
            out.push((s, n));
        }
        Ok((out, truncated))
    }

    /// The session digest of `scopes`: every rule (oldest first), then the most recent
    /// memories of the memory scopes (newest first), within `budget` characters.
    pub fn digest(
        &self,
        caller: &Caller,
        scopes: &RepoScopes,
        budget: usize,
    ) -> Result<Digest, Error> {
        let rules = match scopes.rules.is_empty() {
            true => vec![],
            false => self.rules(caller, RulesRequest::of(scopes.rules.clone()))?.rules,
        };
        let mut memories: Vec<MemoryView> = Vec::new();
        for scope in &scopes.memory {
            let request = ListRequest::newest(scope.clone(), RECENT_PER_SCOPE);
            memories.extend(self.list(caller, request)?.memories);
        }
        memories.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        if rules.is_empty() && memories.is_empty() {
            return Ok(Digest::default());
        }

        let mut out = Budget::new(budget);
        let mut d = Digest::default();
        let names: Vec<&str> = scopes.memory.iter().map(Scope::as_str).collect();
        out.push(&format!(
            "Spine memory for the repository {:?} (memory scopes: {}). Each line starts with \
             a short_id: get_memory shows the whole record; search_memory finds more.",
            scopes.repo,
            if names.is_empty() { "none".to_owned() } else { names.join(", ") }
        ));
        let mut omitted = 0;
        if !rules.is_empty() {
            out.push("");
            out.push("Rules the user approved (follow them):");
            for r in &rules {
                let line = match r {
                    RuleEntry::Compact(v) => {
                        format!("- [{}] {}", v.short_id, one_line(&v.summary, LINE_TEXT))
                    }
                    RuleEntry::Full(m) => memory_line(m, None),
                };
                if out.push(&line) {
                    d.shown += 1;
                } else {
                    omitted += 1;
                }
            }
        }
        if !memories.is_empty() && omitted == 0 {
            out.push("");
            out.push("Recent memories (newest first):");
        }
        for m in &memories {
            if omitted == 0 && out.push(&memory_line(m, None)) {
                d.shown += 1;
            } else {
                omitted += 1;
            }
        }
        if omitted > 0 {
            out.close(&format!(
                "… and {omitted} more not shown (list_memory or list_rules with the scopes \
                 above)."
            ));
        } else {
            out.close("");
        }
        d.omitted = omitted;
        d.text = out.text;
        Ok(d)
    }

    /// The few memories of `scopes` most relevant to `prompt`: at most [`PROMPT_MEMORIES`],
    /// each at dense cosine `min_score` or above, best first, within `budget` characters.
    /// Empty when none is relevant.
    pub fn prompt_context(
        &self,
        caller: &Caller,
        scopes: &RepoScopes,
        prompt: &str,
        min_score: f32,
        budget: usize,
    ) -> Result<Digest, Error> {
        let mut query: String = prompt.trim().to_owned();
        if query.is_empty() || scopes.memory.is_empty() {
            return Ok(Digest::default());
        }
        let max = spine_core::limits::MAX_QUERY_BYTES;
        if query.len() > max {
            let mut cut = max;
            while !query.is_char_boundary(cut) {
                cut -= 1;
            }
            query.truncate(cut);
        }
        let mut hits: Vec<MemoryView> = Vec::new();
        for scope in &scopes.memory {
            let request = SearchRequest::in_scope(query.clone(), scope.clone(), PROMPT_MEMORIES);
            let found = self.search(caller, request)?.memories;
            hits.extend(found.into_iter().filter(|m| m.score.is_some_and(|s| s >= min_score)));
        }
        if hits.is_empty() {
            return Ok(Digest::default());
        }
        let score = |m: &MemoryView| m.score.unwrap_or(0.0);
        hits.sort_by(|a, b| score(b).total_cmp(&score(a)));
        hits.truncate(PROMPT_MEMORIES);

        let mut out = Budget::new(budget);
        let mut d = Digest::default();
        out.push("Spine memories that may bear on this prompt (get_memory <short_id> for more):");
        for m in &hits {
            if d.omitted == 0 && out.push(&memory_line(m, m.score)) {
                d.shown += 1;
            } else {
                d.omitted += 1;
            }
        }
        if d.shown == 0 {
            return Ok(Digest::default());
        }
        out.close("");
        d.text = out.text;
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_keeps_whole_lines_and_room_for_the_tail() {
        let mut b = Budget::new(200);
        assert!(b.push(&"a".repeat(40)));
        assert!(b.push(&"b".repeat(38)));
        assert!(!b.push("c"), "120 characters stay free for the tail");
        b.close("… and 1 more");
        assert!(b.text.chars().count() <= 200);
        assert!(b.text.ends_with("… and 1 more"));
        assert_eq!(Budget::new(50_000).limit, MAX_BUDGET, "never above the client's limit");
    }

    #[test]
    fn lines_are_flattened_and_cut() {
        assert_eq!(one_line("a\n  b\tc", 10), "a b c");
        let cut = one_line(&"word ".repeat(100), 20);
        assert_eq!(cut.chars().count(), 20);
        assert!(cut.ends_with('…'));
    }
}
