//! What recall and get return: the compact and full views of a record, and result shapes.
//!
//! An optional field that is absent is left out of the JSON, never written as `null`: every
//! view with optional fields carries `serde_with::skip_serializing_none` (the output schemas
//! list them as not required).

use schemars::JsonSchema;
use serde::Serialize;
use spine_core::{
    Category, Citation, DiscoveryKind, EpochSeconds, Memory, RecordId, Scope, ShortId, Source,
    State, SummarySource, Timestamp, Visibility,
};

mod related;
mod write;

pub use related::{Direction, Edge, EdgeType, RelatedItem, RelatedResult, SharedCitation};
pub use write::{
    BatchOutcome, BatchResult, ResolvedTarget, Similar, Status, Stored, SupersedeResult,
};

/// The records a result hands back, each with its scope, in the order returned: what the
/// audit event of a recall call names (`--audit-reads`). Results that return no records
/// (writes, tag counts) name none.
pub trait Returned {
    /// Each returned record's id and scope.
    fn returned(&self) -> Vec<(RecordId, String)> {
        Vec::new()
    }
}

impl Returned for MemoryView {
    fn returned(&self) -> Vec<(RecordId, String)> {
        vec![(self.id, self.scope.to_string())]
    }
}

/// Each record of a list of views.
fn each(views: &[MemoryView]) -> Vec<(RecordId, String)> {
    views.iter().flat_map(Returned::returned).collect()
}

impl Returned for SearchResult {
    fn returned(&self) -> Vec<(RecordId, String)> {
        each(&self.memories)
    }
}

impl Returned for ListResult {
    fn returned(&self) -> Vec<(RecordId, String)> {
        each(&self.memories)
    }
}

impl Returned for DiscoveryResult {
    fn returned(&self) -> Vec<(RecordId, String)> {
        each(&self.discoveries)
    }
}

impl Returned for RulesResult {
    fn returned(&self) -> Vec<(RecordId, String)> {
        let rule = |r: &RuleEntry| match r {
            RuleEntry::Compact(v) => (v.id, v.scope.to_string()),
            RuleEntry::Full(m) => (m.id, m.scope.to_string()),
        };
        self.rules.iter().map(rule).collect()
    }
}

impl Returned for RelatedResult {
    fn returned(&self) -> Vec<(RecordId, String)> {
        let mut out = self.anchor.returned();
        out.extend(self.related.iter().flat_map(|r| r.memory.returned()));
        out
    }
}

impl Returned for TagsResult {}
impl Returned for Stored {}
impl Returned for SupersedeResult {}
impl Returned for BatchResult {}
impl Returned for Status {}
/// The scopes and their counts (the Connect API's ListScopes).
impl Returned for (Vec<(String, u64)>, bool) {}

/// One entry of a record's history: an audit event without its owner, scope or other
/// records.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HistoryEvent {
    /// When it was written.
    pub at: Timestamp,
    /// Who made the call (empty: anonymous; an operator command: the login).
    pub actor: String,
    /// `mcp`, `connect` or `operator`.
    pub lane: String,
    /// The client as it named itself (`name/version`), empty when unknown.
    pub client: String,
    /// The tool or operator command.
    pub action: String,
    /// `ok`, or the error code the call answered.
    pub outcome: String,
    /// The call's trace id while traces were exported, else empty.
    pub trace_id: String,
}

impl From<spine_store::AuditEvent> for HistoryEvent {
    fn from(e: spine_store::AuditEvent) -> Self {
        HistoryEvent {
            at: e.at,
            actor: e.actor,
            lane: e.lane.as_str().to_owned(),
            client: e.client,
            action: e.action,
            outcome: e.outcome,
            trace_id: e.trace_id,
        }
    }
}

/// A record's history, newest first.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HistoryResult {
    /// The record.
    pub id: RecordId,
    /// The changes that name it, newest first.
    pub events: Vec<HistoryEvent>,
    /// true when older events were left out.
    pub truncated: bool,
}

impl Returned for HistoryResult {}

/// Characters of content a compact view carries when a record has no summary.
pub const COMPACT_CONTENT_CHARS: usize = 280;

/// A record as a tool returns it.
///
/// Compact (default): identity, scope, category, source, tags, created_at, the summary —
/// or, when there is none, the content cut to 280 characters (`content_truncated` says so)
/// — `states` and `score`. Full (`full=true`, get_memory): every stored field.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MemoryView {
    /// Record UUID.
    pub id: RecordId,
    /// Short handle, accepted anywhere an id is.
    pub short_id: ShortId,
    /// `<run>:<tier>:<repo>`.
    pub scope: Scope,
    /// Category.
    pub category: Category,
    /// `user-said` or `agent-inferred`.
    pub source: Source,
    /// Labels.
    pub tags: Vec<String>,
    /// Summary, when the record has one.
    pub summary: Option<String>,
    /// Content (cut in the compact view when there is no summary; absent in the compact
    /// view when a summary stands in for it).
    pub content: Option<String>,
    /// true when `content` was cut; call get_memory for the whole text.
    pub content_truncated: Option<bool>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Derived states in canonical order (archived, superseded, expired, scheduled);
    /// absent when the record is active.
    pub states: Option<Vec<State>>,
    /// Dense cosine similarity to the query (search only).
    pub score: Option<f32>,
    /// Reranker's probability (0..1) that this record answers the query; only when reranking
    /// ran.
    pub relevance: Option<f32>,
    /// Discovery records: `map` or `fact`.
    pub kind: Option<DiscoveryKind>,
    /// Full view: repository.
    pub repo: Option<String>,
    /// Full view: workspace.
    pub workspace: Option<String>,
    /// Full view: git worktree path.
    pub worktree_path: Option<String>,
    /// Full view: project base directory.
    pub base_dir: Option<String>,
    /// Full view: `client`, `auto` or "" (no summary).
    pub summary_source: Option<SummarySource>,
    /// Full view: model that wrote an auto summary.
    pub summary_model: Option<String>,
    /// Full view: when content was sent to the summarizer.
    pub summary_egress_at: Option<Timestamp>,
    /// Full view: verified identity of the creator ("" without auth).
    pub actor: Option<String>,
    /// Full view: owner key ("" without auth).
    pub owner: Option<String>,
    /// Full view: "" (private) or `shared`.
    pub visibility: Option<Visibility>,
    /// Start of the validity window.
    pub not_before: Option<EpochSeconds>,
    /// End (exclusive) of the validity window.
    pub not_after: Option<EpochSeconds>,
    /// Full view: ids this record replaced.
    pub supersedes: Option<Vec<RecordId>>,
    /// Full view: id of the record that replaced this one.
    pub superseded_by: Option<RecordId>,
    /// Full view: when it was archived.
    pub archived_at: Option<EpochSeconds>,
    /// Full view: strong-signal touches.
    pub access_count: Option<u64>,
    /// Full view: last strong-signal touch.
    pub last_accessed_at: Option<Timestamp>,
    /// Full view: schema version the record was written with (0 when absent).
    pub schema_version: Option<u32>,
    /// Full view: citations.
    pub citations: Option<Vec<Citation>>,
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

impl MemoryView {
    /// The view of `m` with `states` (empty = active).
    pub fn new(m: Memory, states: Vec<State>, full: bool) -> Self {
        let states = (!states.is_empty()).then_some(states);
        let mut v = MemoryView {
            id: m.id,
            short_id: m.short_id,
            scope: m.scope,
            category: m.category,
            source: m.source,
            tags: m.tags,
            summary: non_empty(&m.summary),
            content: None,
            content_truncated: None,
            created_at: m.created_at,
            states,
            score: None,
            relevance: None,
            kind: m.kind,
            repo: None,
            workspace: None,
            worktree_path: None,
            base_dir: None,
            summary_source: None,
            summary_model: None,
            summary_egress_at: None,
            actor: None,
            owner: None,
            visibility: None,
            not_before: m.not_before,
            not_after: m.not_after,
            supersedes: None,
            superseded_by: None,
            archived_at: None,
            access_count: None,
            last_accessed_at: None,
            schema_version: None,
            citations: None,
        };
        if full {
            v.content = Some(m.content);
            v.repo = non_empty(&m.repo);
            v.workspace = non_empty(&m.workspace);
            v.worktree_path = non_empty(&m.worktree_path);
            v.base_dir = non_empty(&m.base_dir);
            v.summary_source = Some(m.summary_source);
            v.summary_model = non_empty(&m.summary_model);
            v.summary_egress_at = m.summary_egress_at;
            v.actor = Some(m.actor);
            v.owner = Some(m.owner.unwrap_or_default());
            v.visibility = Some(m.visibility);
            v.supersedes = (!m.supersedes.is_empty()).then_some(m.supersedes);
            v.superseded_by = m.superseded_by;
            v.archived_at = m.archived_at;
            v.access_count = Some(m.access_count);
            v.last_accessed_at = m.last_accessed_at;
            v.schema_version = Some(m.schema_version);
            v.citations = Some(m.citations);
        } else if v.summary.is_none() {
            let (text, cut) = truncate_chars(&m.content, COMPACT_CONTENT_CHARS);
            v.content = Some(text);
            v.content_truncated = cut.then_some(true);
        }
        v
    }
}

/// The first `max` characters of `s` (on a char boundary), and whether anything was cut.
fn truncate_chars(s: &str, max: usize) -> (String, bool) {
    match s.char_indices().nth(max) {
        Some((i, _)) => (format!("{}…", &s[..i]), true),
        None => (s.to_owned(), false),
    }
}

/// SPEC search rule 4: what the recall gate hid, once in total and once per state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct GateHidden {
    /// Records hidden (each once).
    pub total: u64,
    /// Hidden because archived.
    pub archived: u64,
    /// Hidden because superseded.
    pub superseded: u64,
    /// Hidden because expired.
    pub expired: u64,
    /// Hidden because scheduled.
    pub scheduled: u64,
}

impl GateHidden {
    /// Counts one hidden record with its states.
    pub fn count(&mut self, states: &[State]) {
        if states.is_empty() {
            return;
        }
        self.total += 1;
        for s in states {
            match s {
                State::Archived => self.archived += 1,
                State::Superseded => self.superseded += 1,
                State::Expired => self.expired += 1,
                State::Scheduled => self.scheduled += 1,
            }
        }
    }
}

/// Cross-spine coverage keys (SPEC search rules 2–3); all absent on scope-confined calls.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Coverage {
    /// Every readable scope the call spanned.
    pub searched_scopes: Option<Vec<String>>,
    /// true when the enumeration hit its ceiling (1000 scopes).
    pub scopes_truncated: Option<bool>,
    /// true when the scopes could not be enumerated.
    pub scopes_unknown: Option<bool>,
}

/// Result of search_memory.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchResult {
    /// Best first.
    pub memories: Vec<MemoryView>,
    /// Cross-spine coverage.
    #[serde(flatten)]
    pub coverage: Coverage,
    /// What the recall gate hid among the k nearest.
    pub recall_gate_hidden: Option<GateHidden>,
    /// true when `max_chars` left records out.
    pub truncated_by_budget: Option<bool>,
}

/// Result of list_memory and list_scheduled.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ListResult {
    /// Most recent first.
    pub memories: Vec<MemoryView>,
    /// Pass as `cursor` for the next page; empty on the last page.
    pub next_cursor: String,
    /// list_memory with cross_spine and an explicit limit: how many records match across
    /// every readable scope (exact; all pages, not this one).
    pub total: Option<u64>,
    /// Cross-spine coverage.
    #[serde(flatten)]
    pub coverage: Coverage,
    /// What the recall gate hid on this page (list_memory).
    pub recall_gate_hidden: Option<GateHidden>,
    /// true when `max_chars` left records out.
    pub truncated_by_budget: Option<bool>,
}

/// One tag and how many recall-visible records carry it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TagCountView {
    /// The tag.
    pub tag: String,
    /// Recall-visible records carrying it.
    pub count: u64,
}

/// Result of list_tags.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TagsResult {
    /// Count descending (ties by tag).
    pub tags: Vec<TagCountView>,
    /// true when more tags exist than `limit`.
    pub more: bool,
}

/// Result of search_discovery.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DiscoveryResult {
    /// Nearest first (dense cosine, no lexical step), then reordered by the reranker when
    /// one is set. Each is the compact view plus its `citations`; `score` is the cosine
    /// similarity to the query.
    pub discoveries: Vec<MemoryView>,
    /// Cross-spine coverage: discovery scopes only.
    #[serde(flatten)]
    pub coverage: Coverage,
    /// true when `max_chars` left records out.
    pub truncated_by_budget: Option<bool>,
}

/// The compact view of a rule (SPEC "Rule records": `ruleView`); no content.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RuleView {
    /// Short handle, accepted anywhere an id is.
    pub short_id: ShortId,
    /// Record UUID.
    pub id: RecordId,
    /// The rule's one-line summary.
    pub summary: String,
    /// Concern-area labels.
    pub tags: Vec<String>,
    /// `rule:repo:<repo>` or `rule:project:<project>`.
    pub scope: Scope,
    /// Creation time.
    pub created_at: Timestamp,
}

impl RuleView {
    /// The compact view of rule `m`.
    pub fn new(m: Memory) -> Self {
        RuleView {
            short_id: m.short_id,
            id: m.id,
            summary: m.summary,
            tags: m.tags,
            scope: m.scope,
            created_at: m.created_at,
        }
    }
}

/// One rule in list_rules: the compact `ruleView`, or with `full=true` every field.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RuleEntry {
    /// short_id, id, summary, tags, scope, created_at.
    Compact(RuleView),
    /// Every stored field, content included.
    Full(Box<MemoryView>),
}

/// Result of list_rules.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RulesResult {
    /// Oldest first: with `scopes`, scope by scope in the order given; without, across every
    /// readable rule scope.
    pub rules: Vec<RuleEntry>,
    /// Present only when some scope holds more than 50 rules matching the call: a volume
    /// signal (the rules are still all valid), naming each such scope and its count.
    pub advisory: Option<String>,
    /// true when a cap (1000 per scope, or 1000 in total without `scopes`) left the newest
    /// matching rules out.
    pub truncated: bool,
    /// Without `scopes`: the rule scopes the read spanned.
    #[serde(flatten)]
    pub coverage: Coverage,
    /// true when `max_chars` left records out.
    pub truncated_by_budget: Option<bool>,
}

#[cfg(test)]
mod tests;
