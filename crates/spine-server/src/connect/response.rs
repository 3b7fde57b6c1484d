//! Service results as Connect responses: `From` each view into its message, field by field
//! (what a view leaves out stays unset in the message, as the tool's JSON result leaves it
//! out). Cross-spine coverage, flattened into a tool's result, is the `coverage` message
//! here, always set.

use buffa::MessageField;
use spine_service::views;

use super::proto::spine::v1::*;

fn strings<T: ToString>(items: impl IntoIterator<Item = T>) -> Vec<String> {
    items.into_iter().map(|t| t.to_string()).collect()
}

impl From<spine_core::Citation> for Citation {
    fn from(c: spine_core::Citation) -> Self {
        Citation {
            kind: c.kind.as_str().to_owned(),
            r#ref: c.reference,
            locator: c.locator,
            pin: c.pin,
            excerpt: c.excerpt,
            ..Default::default()
        }
    }
}

impl From<views::MemoryView> for Memory {
    fn from(v: views::MemoryView) -> Self {
        Memory {
            id: v.id.to_string(),
            short_id: v.short_id.to_string(),
            scope: v.scope.to_string(),
            category: v.category.to_string(),
            source: v.source.to_string(),
            tags: v.tags,
            summary: v.summary,
            content: v.content,
            content_truncated: v.content_truncated,
            created_at: v.created_at.to_rfc3339(),
            states: strings(v.states.unwrap_or_default().into_iter().map(|s| s.as_str())),
            score: v.score,
            relevance: v.relevance,
            kind: v.kind.map(|k| k.to_string()),
            repo: v.repo,
            workspace: v.workspace,
            worktree_path: v.worktree_path,
            base_dir: v.base_dir,
            summary_source: v.summary_source.map(|s| s.to_string()),
            summary_model: v.summary_model,
            summary_egress_at: v.summary_egress_at.map(|t| t.to_rfc3339()),
            actor: v.actor,
            owner: v.owner,
            visibility: v.visibility.map(|s| s.to_string()),
            not_before: v.not_before.map(|t| t.to_rfc3339()),
            not_after: v.not_after.map(|t| t.to_rfc3339()),
            supersedes: strings(v.supersedes.unwrap_or_default()),
            superseded_by: v.superseded_by.map(|id| id.to_string()),
            archived_at: v.archived_at.map(|t| t.to_rfc3339()),
            access_count: v.access_count,
            last_accessed_at: v.last_accessed_at.map(|t| t.to_rfc3339()),
            schema_version: v.schema_version,
            citations: v.citations.unwrap_or_default().into_iter().map(Citation::from).collect(),
            ..Default::default()
        }
    }
}

impl From<views::Coverage> for Coverage {
    fn from(c: views::Coverage) -> Self {
        Coverage {
            searched_scopes: c.searched_scopes.unwrap_or_default(),
            scopes_truncated: c.scopes_truncated,
            scopes_unknown: c.scopes_unknown,
            ..Default::default()
        }
    }
}

impl From<views::GateHidden> for GateHidden {
    fn from(g: views::GateHidden) -> Self {
        GateHidden {
            archived: g.archived,
            superseded: g.superseded,
            expired: g.expired,
            scheduled: g.scheduled,
            total: g.total,
            ..Default::default()
        }
    }
}

fn memories(views: Vec<views::MemoryView>) -> Vec<Memory> {
    views.into_iter().map(Memory::from).collect()
}

impl From<views::SearchResult> for SearchMemoriesResponse {
    fn from(r: views::SearchResult) -> Self {
        SearchMemoriesResponse {
            memories: memories(r.memories),
            coverage: MessageField::some(r.coverage.into()),
            recall_gate_hidden: r.recall_gate_hidden.map(GateHidden::from).into(),
            truncated_by_budget: r.truncated_by_budget,
            ..Default::default()
        }
    }
}

impl From<views::ListResult> for ListMemoriesResponse {
    fn from(r: views::ListResult) -> Self {
        ListMemoriesResponse {
            memories: memories(r.memories),
            next_cursor: r.next_cursor,
            total: r.total,
            coverage: MessageField::some(r.coverage.into()),
            recall_gate_hidden: r.recall_gate_hidden.map(GateHidden::from).into(),
            truncated_by_budget: r.truncated_by_budget,
            ..Default::default()
        }
    }
}

impl From<views::HistoryResult> for GetMemoryHistoryResponse {
    fn from(r: views::HistoryResult) -> Self {
        let events = r
            .events
            .into_iter()
            .map(|e| HistoryEvent {
                at: e.at.to_rfc3339(),
                actor: e.actor,
                lane: e.lane,
                client: e.client,
                action: e.action,
                outcome: e.outcome,
                trace_id: e.trace_id,
                ..Default::default()
            })
            .collect();
        GetMemoryHistoryResponse {
            id: r.id.to_string(),
            events,
            truncated: r.truncated,
            ..Default::default()
        }
    }
}

impl From<views::MemoryView> for GetMemoryResponse {
    fn from(v: views::MemoryView) -> Self {
        GetMemoryResponse { memory: MessageField::some(v.into()), ..Default::default() }
    }
}

impl From<views::BatchResult> for BatchResponse {
    fn from(r: views::BatchResult) -> Self {
        let results = r
            .results
            .into_iter()
            .map(|o| batch_response::Result {
                input: o.input,
                id: o.id,
                outcome: o.outcome,
                ..Default::default()
            })
            .collect();
        BatchResponse { results, ..Default::default() }
    }
}

impl From<views::TagsResult> for ListTagsResponse {
    fn from(r: views::TagsResult) -> Self {
        let tags = r
            .tags
            .into_iter()
            .map(|t| list_tags_response::TagCount {
                tag: t.tag,
                count: t.count,
                ..Default::default()
            })
            .collect();
        ListTagsResponse { tags, more: r.more, ..Default::default() }
    }
}

impl From<views::Edge> for related_memories_response::Edge {
    fn from(e: views::Edge) -> Self {
        let shared_citations = e
            .shared_citations
            .unwrap_or_default()
            .into_iter()
            .map(|c| related_memories_response::SharedCitation {
                kind: c.kind.as_str().to_owned(),
                r#ref: c.reference,
                ..Default::default()
            })
            .collect();
        related_memories_response::Edge {
            r#type: e.edge_type.as_str().to_owned(),
            score: e.score,
            shared_tags: e.shared_tags.unwrap_or_default(),
            tag_weight: e.tag_weight,
            shared_citations,
            direction: e.direction.map(|d| d.as_str().to_owned()),
            depth: e.depth,
            ..Default::default()
        }
    }
}

impl From<views::RelatedResult> for RelatedMemoriesResponse {
    fn from(r: views::RelatedResult) -> Self {
        let related = r
            .related
            .into_iter()
            .map(|item| related_memories_response::Item {
                memory: MessageField::some(item.memory.into()),
                edges: item.edges.into_iter().map(Into::into).collect(),
                ..Default::default()
            })
            .collect();
        RelatedMemoriesResponse {
            anchor: MessageField::some(r.anchor.into()),
            related,
            truncated: r.truncated,
            truncated_by_budget: r.truncated_by_budget,
            ..Default::default()
        }
    }
}

impl From<views::RuleEntry> for Memory {
    /// A compact rule carries only the fields of `ruleView`; a full one every field.
    fn from(entry: views::RuleEntry) -> Self {
        match entry {
            views::RuleEntry::Full(v) => (*v).into(),
            views::RuleEntry::Compact(r) => Memory {
                short_id: r.short_id.to_string(),
                id: r.id.to_string(),
                summary: Some(r.summary),
                tags: r.tags,
                scope: r.scope.to_string(),
                created_at: r.created_at.to_rfc3339(),
                ..Default::default()
            },
        }
    }
}

impl From<views::RulesResult> for ListRulesResponse {
    fn from(r: views::RulesResult) -> Self {
        ListRulesResponse {
            rules: r.rules.into_iter().map(Memory::from).collect(),
            advisory: r.advisory,
            truncated: r.truncated,
            coverage: MessageField::some(r.coverage.into()),
            truncated_by_budget: r.truncated_by_budget,
            ..Default::default()
        }
    }
}

impl From<(Vec<(String, u64)>, bool)> for ListScopesResponse {
    /// The scopes the caller can read with their counts, and whether the list was cut.
    fn from((scopes, truncated): (Vec<(String, u64)>, bool)) -> Self {
        let scopes = scopes
            .into_iter()
            .map(|(scope, records)| list_scopes_response::ScopeCount {
                scope,
                records,
                ..Default::default()
            })
            .collect();
        ListScopesResponse { scopes, truncated: Some(truncated), ..Default::default() }
    }
}
