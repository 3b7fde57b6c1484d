//! What related_memories returns: the anchor, and each connected record with the edges
//! that connect it.

use schemars::JsonSchema;
use serde::Serialize;

use super::MemoryView;

/// Result of related_memories: the anchor and the records connected to it.
#[serde_with::skip_serializing_none]
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

impl EdgeType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeType::Supersession => "supersession",
            EdgeType::Citation => "citation",
            EdgeType::Tag => "tag",
            EdgeType::Vector => "vector",
        }
    }
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

impl Direction {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Predecessor => "predecessor",
            Direction::Successor => "successor",
        }
    }
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
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Edge {
    /// `supersession`, `citation`, `tag` or `vector`.
    #[serde(rename = "type")]
    pub edge_type: EdgeType,
    /// vector: cosine similarity of the two records' vectors (higher = closer).
    pub score: Option<f32>,
    /// tag: the tags both records carry, sorted.
    pub shared_tags: Option<Vec<String>>,
    /// tag: shared tags / distinct tags of both records together (0..1; 1 = same tag set).
    pub tag_weight: Option<f32>,
    /// citation: the citations both records carry, in the anchor's order.
    pub shared_citations: Option<Vec<SharedCitation>>,
    /// supersession: `predecessor` (the anchor replaced it) or `successor` (it replaced the
    /// anchor).
    pub direction: Option<Direction>,
    /// supersession: links between it and the anchor (1 = direct).
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
