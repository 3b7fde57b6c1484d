//! What recall and get return: the compact and full views of a record, and result shapes.

use schemars::JsonSchema;
use serde::Serialize;
use spine_core::{
    Category, Citation, DiscoveryKind, EpochSeconds, Memory, RecordId, Scope, ShortId, Source,
    State, SummarySource, Timestamp, Visibility,
};

/// Characters of content a compact view carries when a record has no summary.
pub const COMPACT_CONTENT_CHARS: usize = 280;

/// A record as a tool returns it.
///
/// Compact (default): identity, scope, category, source, tags, created_at, the summary —
/// or, when there is none, the content cut to 280 characters (`content_truncated` says so)
/// — `states` and `score`. Full (`full=true`, get_memory): every stored field.
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Content (cut in the compact view when there is no summary; absent in the compact
    /// view when a summary stands in for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// true when `content` was cut; call get_memory for the whole text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_truncated: Option<bool>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Derived states in canonical order (archived, superseded, expired, scheduled);
    /// absent when the record is active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub states: Option<Vec<State>>,
    /// Dense cosine similarity to the query (search only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    /// Reranker's probability (0..1) that this record answers the query; only when reranking
    /// ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relevance: Option<f32>,
    /// Discovery records: `map` or `fact`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<DiscoveryKind>,
    /// Full view: repository.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Full view: workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Full view: git worktree path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree_path: Option<String>,
    /// Full view: project base directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_dir: Option<String>,
    /// Full view: `client`, `auto` or "" (no summary).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_source: Option<SummarySource>,
    /// Full view: model that wrote an auto summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_model: Option<String>,
    /// Full view: when content was sent to the summarizer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_egress_at: Option<Timestamp>,
    /// Full view: verified identity of the creator ("" without auth).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Full view: owner key ("" without auth).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Full view: "" (private) or `shared`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visibility: Option<Visibility>,
    /// Start of the validity window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_before: Option<EpochSeconds>,
    /// End (exclusive) of the validity window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_after: Option<EpochSeconds>,
    /// Full view: ids this record replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<Vec<RecordId>>,
    /// Full view: id of the record that replaced this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<RecordId>,
    /// Full view: when it was archived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<EpochSeconds>,
    /// Full view: strong-signal touches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_count: Option<u64>,
    /// Full view: last strong-signal touch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_accessed_at: Option<Timestamp>,
    /// Full view: schema version the record was written with (0 when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u32>,
    /// Full view: citations.
    #[serde(skip_serializing_if = "Option::is_none")]
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

/// Result of the tools that create a record.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Stored {
    /// UUID of the new record.
    pub id: RecordId,
    /// Its short handle.
    pub short_id: ShortId,
    /// store_memory / schedule_memory: live records of the same scope you can read that say
    /// nearly the same (at most 3, most similar first). The record was stored anyway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similar: Option<Vec<Similar>>,
    /// With `similar`: what to consider doing about them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Stored {
    /// The result for a new record `id` / `short_id`, without near-duplicates.
    pub fn new(id: RecordId, short_id: ShortId) -> Self {
        Stored { id, short_id, similar: None, note: None }
    }
}

/// A live record nearly the same as the one just written.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Similar {
    /// Its UUID.
    pub id: RecordId,
    /// Its short handle.
    pub short_id: ShortId,
    /// Dense cosine similarity to the new record's content.
    pub score: f32,
    /// Its summary, else the start of its content.
    pub summary: String,
}

/// Result of supersede_memory: `{id, short_id}` of the correcting record, or with
/// `validate_only` the preflight verdict `{validated, supersedes, targets}`.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct SupersedeResult {
    /// UUID of the correcting record (absent with validate_only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<RecordId>,
    /// Its short handle (absent with validate_only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short_id: Option<ShortId>,
    /// validate_only: true when a real call would succeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validated: Option<bool>,
    /// validate_only: the `supersedes` list the correcting record would carry (UUIDs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<Vec<RecordId>>,
    /// validate_only: each distinct target as resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<ResolvedTarget>>,
    /// Live records of the scope, other than the targets, that say nearly the same as the
    /// correcting record (at most 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similar: Option<Vec<Similar>>,
    /// With `similar`: what to consider doing about them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A supersession target as resolved from the caller's input.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResolvedTarget {
    /// The entry as the caller wrote it (the first spelling when several name one record).
    pub input: String,
    /// The record's UUID.
    pub id: RecordId,
    /// The record's short handle.
    pub short_id: ShortId,
}

/// Outcome of one entry of archive_memory / restore_memory.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BatchOutcome {
    /// The entry as the caller wrote it.
    pub input: String,
    /// The resolved record UUID; "" when not_found.
    pub id: String,
    /// `archived` / `already_archived` / `restored` / `not_archived` / `not_found`.
    pub outcome: String,
}

/// Result of archive_memory / restore_memory: one outcome per input entry, in order.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BatchResult {
    /// Outcomes in input order (a duplicate entry gets its own row).
    pub results: Vec<BatchOutcome>,
}

/// Result of the tools that change or delete records.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Status {
    /// `updated`, `deleted`, `scope cleared` or `visibility updated`.
    pub status: String,
    /// delete_all: how many of your records were deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<u64>,
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
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct Coverage {
    /// Every readable scope the call spanned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub searched_scopes: Option<Vec<String>>,
    /// true when the enumeration hit its ceiling (1000 scopes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes_truncated: Option<bool>,
    /// true when the scopes could not be enumerated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes_unknown: Option<bool>,
}

/// Result of search_memory.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchResult {
    /// Best first.
    pub memories: Vec<MemoryView>,
    /// Cross-spine coverage.
    #[serde(flatten)]
    pub coverage: Coverage,
    /// What the recall gate hid among the k nearest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall_gate_hidden: Option<GateHidden>,
    /// true when `max_chars` left records out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_by_budget: Option<bool>,
}

/// Result of list_memory and list_scheduled.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ListResult {
    /// Most recent first.
    pub memories: Vec<MemoryView>,
    /// Pass as `cursor` for the next page; empty on the last page.
    pub next_cursor: String,
    /// list_memory with cross_spine and an explicit limit: how many records match across
    /// every readable scope (exact; all pages, not this one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// Cross-spine coverage.
    #[serde(flatten)]
    pub coverage: Coverage,
    /// What the recall gate hid on this page (list_memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall_gate_hidden: Option<GateHidden>,
    /// true when `max_chars` left records out.
    #[serde(skip_serializing_if = "Option::is_none")]
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

/// Result of related_memories: the anchor and the records connected to it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RelatedResult {
    /// The anchor record, in any state (`states` says which).
    pub anchor: MemoryView,
    /// Each connected record once, with one edge per type connecting it: supersession
    /// records first (nearest first), then the rest strongest edge first.
    pub related: Vec<RelatedItem>,
    /// true when a supersession, citation or tag cap left connected records out. The vector
    /// neighbours are always capped at `k` and never set it.
    pub truncated: bool,
    /// true when `max_chars` left records out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_by_budget: Option<bool>,
}

/// A record related to the anchor, and how.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RelatedItem {
    /// The related record (compact unless `full`), with its `states`.
    pub memory: MemoryView,
    /// At most one edge per type, in the order supersession, citation, tag, vector.
    pub edges: Vec<Edge>,
}

/// How a related record connects to the anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EdgeType {
    /// Same supersession chain (either way).
    Supersession,
    /// Cites at least one of the anchor's citations (same kind and ref).
    Citation,
    /// Carries at least one of the anchor's tags.
    Tag,
    /// Near the anchor in meaning (cosine of the vectors).
    Vector,
}

/// Which way along a supersession chain a record lies from the anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Replaced, directly or transitively, by the anchor.
    Predecessor,
    /// Replaces the anchor, directly or transitively.
    Successor,
}

/// A citation two records share: the same `kind` and `ref` (locator, pin and excerpt may
/// differ and are not repeated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct SharedCitation {
    /// `file`, `commit`, `url` or `repo`.
    pub kind: spine_core::CitationKind,
    /// Path, repo URL, or doc URL.
    #[serde(rename = "ref")]
    pub reference: String,
}

/// One edge between the anchor and a related record.
///
/// Invariant (kept by the constructors): only the fields of the edge's `type` are present —
/// `direction` and `depth` on supersession, `shared_citations` on citation, `shared_tags` and
/// `tag_weight` on tag, `score` on vector.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Edge {
    /// `supersession`, `citation`, `tag` or `vector`.
    #[serde(rename = "type")]
    pub edge_type: EdgeType,
    /// vector: cosine similarity of the two records' vectors (higher = closer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
    /// tag: the tags both records carry, sorted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_tags: Option<Vec<String>>,
    /// tag: shared tags / distinct tags of both records together (0..1; 1 = same tag set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag_weight: Option<f32>,
    /// citation: the citations both records carry, in the anchor's order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_citations: Option<Vec<SharedCitation>>,
    /// supersession: `predecessor` (the anchor replaced it) or `successor` (it replaced the
    /// anchor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// supersession: links between it and the anchor (1 = direct).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
}

impl Edge {
    fn of(edge_type: EdgeType) -> Self {
        Edge {
            edge_type,
            score: None,
            shared_tags: None,
            tag_weight: None,
            shared_citations: None,
            direction: None,
            depth: None,
        }
    }

    /// A supersession edge `depth` links away in `direction`.
    pub fn supersession(direction: Direction, depth: u32) -> Self {
        Edge { direction: Some(direction), depth: Some(depth), ..Edge::of(EdgeType::Supersession) }
    }

    /// A citation edge over the `shared` citations.
    pub fn citation(shared: Vec<SharedCitation>) -> Self {
        Edge { shared_citations: Some(shared), ..Edge::of(EdgeType::Citation) }
    }

    /// A tag edge over the `shared` tags (sorted) with their `weight`.
    pub fn tag(shared: Vec<String>, weight: f32) -> Self {
        Edge { shared_tags: Some(shared), tag_weight: Some(weight), ..Edge::of(EdgeType::Tag) }
    }

    /// A vector edge with cosine `score`.
    pub fn vector(score: f32) -> Self {
        Edge { score: Some(score), ..Edge::of(EdgeType::Vector) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_is_on_char_boundaries() {
        let (t, cut) = truncate_chars(&"é".repeat(300), 280);
        assert!(cut);
        assert_eq!(t.chars().count(), 281);
        assert_eq!(truncate_chars("short", 280), ("short".into(), false));
        assert!(!truncate_chars(&"x".repeat(280), 280).1);
    }

    #[test]
    fn gate_hidden_counts_once_in_total_and_once_per_state() {
        let mut g = GateHidden::default();
        g.count(&[State::Archived, State::Superseded, State::Expired]);
        g.count(&[]);
        g.count(&[State::Scheduled]);
        assert_eq!(
            g,
            GateHidden { total: 2, archived: 1, superseded: 1, expired: 1, scheduled: 1 }
        );
    }
}

/// Result of search_discovery.
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
    #[serde(skip_serializing_if = "Option::is_none")]
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
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RulesResult {
    /// Oldest first: with `scopes`, scope by scope in the order given; without, across every
    /// readable rule scope.
    pub rules: Vec<RuleEntry>,
    /// Present only when some scope holds more than 50 rules matching the call: a volume
    /// signal (the rules are still all valid), naming each such scope and its count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advisory: Option<String>,
    /// true when a cap (1000 per scope, or 1000 in total without `scopes`) left the newest
    /// matching rules out.
    pub truncated: bool,
    /// Without `scopes`: the rule scopes the read spanned.
    #[serde(flatten)]
    pub coverage: Coverage,
    /// true when `max_chars` left records out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_by_budget: Option<bool>,
}
