//! Typed requests of the write tools.
//!
//! A write's checks read the service's configuration (a memory's content cap, the tag and
//! summary limits, the secrets policy), so a request is built by a `check` that takes those
//! as [`WriteRules`] rather than by `TryFrom`: still the one place the call's checks run, in
//! the order it reports them, before anything is embedded or written.

use spine_core::limits::{
    MAX_DISCOVERY_CONTENT_BYTES, MAX_RULE_CONTENT_BYTES, MAX_RULE_SUMMARY_BYTES, check_citations,
    check_content_bytes, check_context,
};
use spine_core::secrets::{SecretsPolicy, find_secrets, redact};
use spine_core::{
    Category, Citation, DiscoveryKind, EpochSeconds, Error, Hint, IdRef, Limits, Scope, ScopeKind,
    Source, Visibility,
};

use crate::args::{
    IdInput, ScheduleMemoryArgs, SetVisibilityArgs, StoreDiscoveryArgs, StoreMemoryArgs,
    StoreRuleArgs, SupersedeMemoryArgs, UpdateMemoryArgs,
};
use crate::request::{check_id_entries, scope_of};

/// Removes duplicate tags, keeping the first occurrence's position.
pub(crate) fn dedup_tags(tags: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    tags.into_iter().filter(|t| seen.insert(t.clone())).collect()
}

/// SPEC schedule_memory: when both bounds are given, not_before must be strictly before
/// not_after.
fn check_window(nb: Option<EpochSeconds>, na: Option<EpochSeconds>) -> Result<(), Error> {
    if let (Some(nb), Some(na)) = (nb, na)
        && nb >= na
    {
        return Err(Error::invalid(
            "not_after",
            Hint::EmptyWindow,
            format!(
                "not_before ({}) must be strictly before not_after ({})",
                nb.to_rfc3339(),
                na.to_rfc3339()
            ),
        ));
    }
    Ok(())
}

/// SPEC store_rule: a rule's summary is one physical line of at most 256 bytes.
pub(crate) fn check_rule_summary(summary: &str) -> Result<(), Error> {
    if summary.trim().is_empty() {
        return Err(Error::invalid("summary", Hint::Required, "a rule needs a one-line summary"));
    }
    if summary.contains(['\n', '\r']) {
        return Err(Error::invalid("summary", Hint::MultiLine, "a rule summary is a single line"));
    }
    if summary.len() > MAX_RULE_SUMMARY_BYTES {
        return Err(Error::invalid(
            "summary",
            Hint::TooLong,
            format!("rule summary is {} bytes; at most {MAX_RULE_SUMMARY_BYTES}", summary.len()),
        ));
    }
    Ok(())
}

/// The visibility a write's `shared` argument asks for.
fn visibility_of(shared: bool) -> Visibility {
    if shared { Visibility::Shared } else { Visibility::Private }
}

/// What a write's checks read from the service's configuration.
#[derive(Debug, Clone, Copy)]
pub struct WriteRules {
    /// The configured limits: a memory's content, tags, summary.
    pub limits: Limits,
    /// What a text holding a credential gets (`--secrets`).
    pub secrets: SecretsPolicy,
}

impl WriteRules {
    /// The content bound of a record's kind (SPEC Limits).
    pub fn content_limit(&self, category: Category) -> usize {
        match category {
            Category::Discovery => MAX_DISCOVERY_CONTENT_BYTES,
            Category::Rule => MAX_RULE_CONTENT_BYTES,
            _ => self.limits.max_content_bytes,
        }
    }

    /// Screens written text for credentials (SPEC store_memory: never secrets): refused with
    /// `secret_detected` naming `field`, what was found and where — never the credential
    /// itself — or redacted in place, or let through, by the configured policy.
    pub fn screen(&self, field: &str, text: &mut String) -> Result<(), Error> {
        if self.secrets == SecretsPolicy::Allow {
            return Ok(());
        }
        let found = find_secrets(text);
        let Some(first) = found.first() else { return Ok(()) };
        if self.secrets == SecretsPolicy::Redact {
            *text = redact(text, &found);
            return Ok(());
        }
        let at = text[..first.span.start].chars().count();
        Err(Error::invalid(
            field,
            Hint::SecretDetected,
            format!(
                "{field} looks like it holds {} (at character {at}); secrets never go into \
                 memory: remove it, or record where the secret is kept instead",
                first.kind
            ),
        ))
    }

    /// [`WriteRules::screen`] over a record's text fields: content, summary and citation
    /// excerpts.
    pub fn screen_record(
        &self,
        content: &mut String,
        summary: Option<&mut String>,
        citations: Option<&mut Vec<Citation>>,
    ) -> Result<(), Error> {
        self.screen("content", content)?;
        if let Some(summary) = summary {
            self.screen("summary", summary)?;
        }
        for (i, c) in citations.into_iter().flatten().enumerate() {
            self.screen(&format!("citations[{i}].excerpt"), &mut c.excerpt)?;
        }
        Ok(())
    }
}

/// A new memory's client-written fields, not yet checked: what store_memory's arguments
/// hold, omitted ones empty. [`NewRecord::check`] turns it into a [`StoreRequest`].
#[derive(Debug, Clone)]
pub struct NewRecord {
    /// The text that is embedded and recalled.
    pub content: String,
    /// Must be a memory scope (not `discovery:` or `rule:`).
    pub scope: Scope,
    /// `user-said` or `agent-inferred`.
    pub source: Source,
    /// Must be client-writable (not discovery or rule).
    pub category: Category,
    /// Labels, duplicates dropped by the check.
    pub tags: Vec<String>,
    /// Repository name or URL; empty: none.
    pub repo: String,
    /// Workspace id; empty: none.
    pub workspace: String,
    /// Git worktree path; empty: none.
    pub worktree_path: String,
    /// Project base directory; empty: none.
    pub base_dir: String,
    /// The client's summary; empty: none.
    pub summary: String,
    /// Evidence.
    pub citations: Vec<Citation>,
}

impl NewRecord {
    /// A record of `content` in `scope` with no tags, context, summary or citations.
    pub fn new(content: String, scope: Scope, source: Source, category: Category) -> Self {
        NewRecord {
            content,
            scope,
            source,
            category,
            tags: vec![],
            repo: String::new(),
            workspace: String::new(),
            worktree_path: String::new(),
            base_dir: String::new(),
            summary: String::new(),
            citations: vec![],
        }
    }

    /// store_memory's checks, in the order a call reports them; text holding a credential
    /// is redacted or refused by `rules.secrets`.
    pub fn check(mut self, rules: &WriteRules) -> Result<StoreRequest, Error> {
        rules.limits.check_content(&self.content)?;
        let summary = (!self.summary.is_empty()).then_some(&mut self.summary);
        rules.screen_record(&mut self.content, summary, Some(&mut self.citations))?;
        self.scope = self.scope.require_memory("scope")?;
        let category = self.category;
        if !category.is_client_writable() {
            let tool = if category == Category::Rule { "store_rule" } else { "store_discovery" };
            return Err(Error::invalid(
                "category",
                Hint::InvalidValue,
                format!("category {category} is set by the server; use {tool}"),
            ));
        }
        self.tags = dedup_tags(self.tags);
        rules.limits.check_tags("tags", &self.tags)?;
        rules.limits.check_summary(&self.summary)?;
        check_citations(&self.citations)?;
        let context = [
            ("repo", &self.repo),
            ("workspace", &self.workspace),
            ("worktree_path", &self.worktree_path),
            ("base_dir", &self.base_dir),
        ];
        for (field, value) in context {
            check_context(field, value)?;
        }
        Ok(StoreRequest { record: self })
    }
}

impl From<StoreMemoryArgs> for NewRecord {
    fn from(a: StoreMemoryArgs) -> Self {
        NewRecord {
            content: a.content,
            scope: a.scope,
            source: a.source,
            category: a.category,
            tags: a.tags.unwrap_or_default(),
            repo: a.repo.unwrap_or_default(),
            workspace: a.workspace.unwrap_or_default(),
            worktree_path: a.worktree_path.unwrap_or_default(),
            base_dir: a.base_dir.unwrap_or_default(),
            summary: a.summary.unwrap_or_default(),
            citations: a.citations.unwrap_or_default(),
        }
    }
}

/// store_memory's request: a [`NewRecord`] that passed its checks (built only by
/// [`NewRecord::check`] or [`StoreRequest::check`]).
#[derive(Debug, Clone)]
pub struct StoreRequest {
    pub(crate) record: NewRecord,
}

impl StoreRequest {
    /// store_memory's arguments, checked ([`NewRecord::check`]).
    pub fn check(a: StoreMemoryArgs, rules: &WriteRules) -> Result<Self, Error> {
        NewRecord::from(a).check(rules)
    }

    /// The checked fields.
    pub fn record(&self) -> &NewRecord {
        &self.record
    }
}

/// schedule_memory's request: a checked new memory and its validity window
/// `[not_before, not_after)`, at least one bound given, a non-empty window.
#[derive(Debug, Clone)]
pub struct ScheduleRequest {
    /// The memory.
    pub record: StoreRequest,
    /// Hidden from recall before it.
    pub not_before: Option<EpochSeconds>,
    /// Dropped from recall from it on.
    pub not_after: Option<EpochSeconds>,
}

impl ScheduleRequest {
    /// schedule_memory's checks: the window's, then store_memory's.
    pub fn check(mut a: ScheduleMemoryArgs, rules: &WriteRules) -> Result<Self, Error> {
        let (not_before, not_after) = (a.not_before.take(), a.not_after.take());
        if a.category == Category::Discovery {
            return Err(Error::invalid(
                "category",
                Hint::InvalidValue,
                "discovery records are not schedulable; use store_discovery",
            ));
        }
        if not_before.is_none() && not_after.is_none() {
            return Err(Error::invalid(
                "not_before",
                Hint::Required,
                "give not_before, not_after or both (use store_memory for a memory without a window)",
            ));
        }
        check_window(not_before, not_after)?;
        let record = StoreRequest::check(StoreMemoryArgs::from(a), rules)?;
        Ok(ScheduleRequest { record, not_before, not_after })
    }
}

/// set_visibility's request.
#[derive(Debug, Clone)]
pub struct VisibilityRequest {
    /// The caller's own record (not a rule: the operation checks).
    pub id: IdInput,
    /// What it becomes.
    pub visibility: Visibility,
}

impl From<SetVisibilityArgs> for VisibilityRequest {
    fn from(a: SetVisibilityArgs) -> Self {
        VisibilityRequest { id: a.id, visibility: visibility_of(a.shared) }
    }
}

/// Most bytes of an idempotency key (our choice; documented in docs/records.md).
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// A record a supersession replaces, as the caller wrote it.
#[derive(Debug, Clone)]
pub struct TargetRef {
    /// The caller's spelling, echoed in outcomes and errors.
    pub input: String,
    /// The id it names; `None` when it is not an id (then it is not found).
    pub id: Option<IdRef>,
}

/// supersede_memory's request: the correcting record, checked like store_memory's, and the
/// records it replaces.
#[derive(Debug, Clone)]
pub struct SupersedeRequest {
    /// The correcting record.
    pub record: StoreRequest,
    /// At least one, each non-blank and at most `MAX_ID_BYTES`, in the caller's order
    /// (duplicates kept: they collapse when resolved).
    pub supersedes: Vec<TargetRef>,
    /// Check and resolve the targets; write nothing.
    pub validate_only: bool,
    /// Non-blank, at most [`MAX_IDEMPOTENCY_KEY_BYTES`].
    pub idempotency_key: Option<String>,
}

impl SupersedeRequest {
    /// supersede_memory's checks: the targets' shape (SPEC: a long entry rejects the call,
    /// before anything is resolved), the idempotency key, then store_memory's.
    pub fn check(mut a: SupersedeMemoryArgs, rules: &WriteRules) -> Result<Self, Error> {
        let supersedes = std::mem::take(&mut a.supersedes);
        let (validate_only, key) = (a.validate_only, a.idempotency_key.take());
        if supersedes.is_empty() {
            return Err(Error::invalid(
                "supersedes",
                Hint::Required,
                "supersedes needs at least one id of the record being corrected",
            ));
        }
        check_id_entries("supersedes", &supersedes)?;
        let targets = supersedes
            .into_iter()
            .map(|s| TargetRef { id: IdRef::parse_lenient(&s), input: s })
            .collect();
        let idempotency_key = match key {
            Some(k) if k.trim().is_empty() => {
                return Err(Error::invalid(
                    "idempotency_key",
                    Hint::Blank,
                    "idempotency_key must not be blank (omit it instead)",
                ));
            }
            Some(k) if k.len() > MAX_IDEMPOTENCY_KEY_BYTES => {
                return Err(Error::invalid(
                    "idempotency_key",
                    Hint::TooLong,
                    format!(
                        "idempotency_key is {} bytes; at most {MAX_IDEMPOTENCY_KEY_BYTES}",
                        k.len()
                    ),
                ));
            }
            other => other,
        };
        // The correcting record is checked completely before anything is resolved.
        let record = StoreRequest::check(StoreMemoryArgs::from(a), rules)?;
        Ok(SupersedeRequest { record, supersedes: targets, validate_only, idempotency_key })
    }
}

/// update_memory's request. Its checks depend on the record it rewrites (its kind, whether
/// the content changes, who wrote the summary), so the operation runs them once the record
/// is found.
#[derive(Debug, Clone)]
pub struct UpdateRequest {
    /// The caller's own record.
    pub id: IdInput,
    /// The new content (the current one keeps it).
    pub content: String,
    /// The new visibility; `None` keeps it.
    pub visibility: Option<Visibility>,
    /// The new tags, each once; `None` keeps them, empty clears them.
    pub tags: Option<Vec<String>>,
    /// The new summary; `None` keeps it, empty clears it.
    pub summary: Option<String>,
}

impl From<UpdateMemoryArgs> for UpdateRequest {
    fn from(a: UpdateMemoryArgs) -> Self {
        UpdateRequest {
            id: a.id,
            content: a.content,
            visibility: a.shared.map(visibility_of),
            tags: a.tags.map(dedup_tags),
            summary: a.summary,
        }
    }
}

/// The checked client-written part of a discovery or a rule.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub(crate) content: String,
    pub(crate) scope: Scope,
    pub(crate) category: Category,
    pub(crate) source: Source,
    pub(crate) tags: Vec<String>,
    pub(crate) summary: String,
    pub(crate) kind: Option<DiscoveryKind>,
    pub(crate) citations: Vec<Citation>,
}

/// store_discovery's and store_rule's request: the checked fields of a discovery or a rule
/// (category and source set by the server), and which of the caller's records of that kind
/// it replaces in place, if any.
#[derive(Debug, Clone)]
pub struct KnowledgeRequest {
    pub(crate) written: Written,
    /// The caller's record it replaces; `None` creates one.
    pub replace: Option<IdInput>,
}

impl KnowledgeRequest {
    /// store_discovery's checks, in the order a call reports them.
    pub fn discovery(mut a: StoreDiscoveryArgs, rules: &WriteRules) -> Result<Self, Error> {
        check_content_bytes(&a.content, rules.content_limit(Category::Discovery))?;
        rules.screen_record(&mut a.content, a.summary.as_mut(), Some(&mut a.citations))?;
        // SPEC Errors 6: a discovery without evidence is rejected.
        if a.citations.is_empty() {
            return Err(Error::invalid(
                "citations",
                Hint::Required,
                "a discovery needs at least one citation (file, commit, url or repo) backing it",
            ));
        }
        check_citations(&a.citations)?;
        let scope = scope_of("scope", a.scope, ScopeKind::Discovery)?;
        let tags = dedup_tags(a.tags.unwrap_or_default());
        rules.limits.check_tags("tags", &tags)?;
        let summary = a.summary.unwrap_or_default();
        rules.limits.check_summary(&summary)?;
        let written = Written {
            content: a.content,
            scope,
            category: Category::Discovery,
            source: Source::AgentInferred,
            tags,
            summary,
            kind: Some(a.kind),
            citations: a.citations,
        };
        Ok(KnowledgeRequest { written, replace: a.id })
    }

    /// store_rule's checks, in the order a call reports them.
    pub fn rule(mut a: StoreRuleArgs, rules: &WriteRules) -> Result<Self, Error> {
        check_content_bytes(&a.content, rules.content_limit(Category::Rule))?;
        rules.screen_record(&mut a.content, Some(&mut a.summary), None)?;
        let scope = scope_of("scope", a.scope, ScopeKind::Rule)?;
        check_rule_summary(&a.summary)?;
        let tags = dedup_tags(a.tags.unwrap_or_default());
        rules.limits.check_tags("tags", &tags)?;
        let written = Written {
            content: a.content,
            scope,
            category: Category::Rule,
            source: Source::UserSaid,
            tags,
            summary: a.summary,
            kind: None,
            citations: vec![],
        };
        Ok(KnowledgeRequest { written, replace: a.id })
    }
}

#[cfg(test)]
mod tests;
