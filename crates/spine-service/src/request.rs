//! Typed requests: what the operations take once their wire arguments are checked.
//!
//! The wire structs of [`crate::args`] (serde, JSON Schema; the MCP tools' input schemas
//! are generated from them, and the Connect API's messages convert into them) hold what a
//! client sent; a request here holds what the operation acts on: a checked query, the
//! scope selection, a resolved page size, the store [`Filter`], the character budget.
//! `TryFrom` each wire struct is the one place its checks run, in the order a call reports
//! them; the service's own callers (the prompt hook, the digest) build requests directly.
//! This is ripgrep's `LowArgs` → `HiArgs`.

use spine_core::limits::{DEFAULT_K, DEFAULT_LIST_LIMIT, DEFAULT_TAGS_LIMIT, resolve_page};
use spine_core::{Error, Hint, Scope, ScopeKind};
use spine_store::{Cursor, Filter, ScopeFilter};

use crate::args::{
    IdInput, ListMemoryArgs, ListRulesArgs, ListTagsArgs, RelatedMemoriesArgs, SearchMemoryArgs,
};
use crate::budget;
use crate::knowledge::parse_scope_of;
use crate::memory::dedup_tags;
use crate::recall::{check_filter_tags, check_query, decode_cursor, scope_filter};

/// search_memory's request.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// Non-blank, at most `MAX_QUERY_BYTES`.
    pub query: String,
    /// Which records: scope selection (`All` = cross-spine), tags, categories, created range.
    pub filter: Filter,
    /// How many hits, 1..=1000.
    pub k: usize,
    /// Every field of each record (else compact).
    pub full: bool,
    /// Most characters of records in the result; `None`: no budget.
    pub budget: Option<usize>,
}

/// The store filter of the recall tools' shared arguments (tags checked, categories by
/// name: omitted or empty is no filter, unknown names match nothing).
fn recall_filter(
    scope: ScopeFilter,
    tags: Option<Vec<String>>,
    categories: Option<Vec<String>>,
) -> Result<Filter, Error> {
    let mut filter = Filter::new(scope);
    filter.tags_all = tags.unwrap_or_default();
    check_filter_tags(&filter.tags_all)?;
    filter.categories_any = Filter::categories_named(&categories.unwrap_or_default());
    Ok(filter)
}

impl TryFrom<SearchMemoryArgs> for SearchRequest {
    type Error = Error;

    fn try_from(a: SearchMemoryArgs) -> Result<Self, Error> {
        check_query(&a.query)?;
        let scope = scope_filter(a.scope.as_deref(), a.cross_spine)?;
        let k = resolve_page("k", a.k, DEFAULT_K)?;
        let budget = budget::resolve(a.max_chars)?;
        let mut filter = recall_filter(scope, a.tags, a.categories)?;
        filter.created_after = a.created_after;
        filter.created_before = a.created_before;
        Ok(SearchRequest { query: a.query, filter, k, full: a.full, budget })
    }
}

impl SearchRequest {
    /// The `k` nearest memories to `query` in `scope`, compact, with no other filter.
    pub fn in_scope(query: String, scope: Scope, k: usize) -> Self {
        SearchRequest {
            query,
            filter: Filter::new(ScopeFilter::One(scope)),
            k,
            full: false,
            budget: None,
        }
    }
}

/// Where a list page starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageStart {
    /// After the record of a previous page's `next_cursor`.
    pub cursor: Option<Cursor>,
    /// Records to skip (never with a cursor).
    pub offset: usize,
}

/// list_memory's request (and the Connect API's browsing by state).
#[derive(Debug, Clone)]
pub struct ListRequest {
    /// Which records: scope selection (`All` = cross-spine), tags, categories, created range.
    pub filter: Filter,
    /// Page size, 1..=1000.
    pub limit: usize,
    /// Where the page starts.
    pub start: PageStart,
    /// SPEC list_memory: a cross-spine list with an explicit limit counts every match.
    pub count_total: bool,
    /// Every field of each record (else compact).
    pub full: bool,
    /// Most characters of records in the result; `None`: no budget.
    pub budget: Option<usize>,
}

impl TryFrom<ListMemoryArgs> for ListRequest {
    type Error = Error;

    fn try_from(a: ListMemoryArgs) -> Result<Self, Error> {
        let scope = scope_filter(a.scope.as_deref(), a.cross_spine)?;
        let limit = resolve_page("limit", a.limit, DEFAULT_LIST_LIMIT)?;
        let cursor = a.cursor.as_deref().filter(|c| !c.is_empty());
        if cursor.is_some() && a.offset.unwrap_or(0) > 0 {
            return Err(Error::invalid(
                "cursor",
                Hint::MutuallyExclusive,
                "give either cursor or offset, not both",
            ));
        }
        let cursor = cursor.map(decode_cursor).transpose()?;
        let offset = usize::try_from(a.offset.unwrap_or(0)).unwrap_or(usize::MAX);
        let budget = budget::resolve(a.max_chars)?;
        let mut filter = recall_filter(scope, a.tags, a.categories)?;
        filter.created_after = a.created_after;
        filter.created_before = a.created_before;
        let explicit_limit = a.limit.is_some_and(|l| l > 0);
        Ok(ListRequest {
            filter,
            limit,
            start: PageStart { cursor, offset },
            count_total: a.cross_spine && explicit_limit,
            full: a.full,
            budget,
        })
    }
}

impl ListRequest {
    /// The newest `limit` memories of `scope`, compact, with no other filter.
    pub fn newest(scope: Scope, limit: usize) -> Self {
        ListRequest {
            filter: Filter::new(ScopeFilter::One(scope)),
            limit,
            start: PageStart::default(),
            count_total: false,
            full: false,
            budget: None,
        }
    }
}

/// list_tags' request.
#[derive(Debug, Clone)]
pub struct TagsRequest {
    /// One scope, or every readable scope.
    pub scope: Option<Scope>,
    /// Most tags listed, 1..=1000.
    pub limit: usize,
}

impl TryFrom<ListTagsArgs> for TagsRequest {
    type Error = Error;

    fn try_from(a: ListTagsArgs) -> Result<Self, Error> {
        let scope = a
            .scope
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|s| Scope::parse("scope", s))
            .transpose()?;
        let limit = resolve_page("limit", a.limit, DEFAULT_TAGS_LIMIT)?;
        Ok(TagsRequest { scope, limit })
    }
}

/// list_rules' request.
#[derive(Debug, Clone)]
pub struct RulesRequest {
    /// Rule scopes, each once, listed in this order; empty: every readable rule scope.
    pub scopes: Vec<Scope>,
    /// Rules with all of these tags, each once (their count is checked against the
    /// configured limit by the operation).
    pub tags: Vec<String>,
    /// Every field of each rule (else the compact `ruleView`).
    pub full: bool,
    /// Most characters of records in the result; `None`: no budget.
    pub budget: Option<usize>,
}

impl TryFrom<ListRulesArgs> for RulesRequest {
    type Error = Error;

    fn try_from(a: ListRulesArgs) -> Result<Self, Error> {
        let budget = budget::resolve(a.max_chars)?;
        let mut scopes: Vec<Scope> = Vec::new();
        for (i, s) in a.scopes.unwrap_or_default().iter().enumerate() {
            let scope = parse_scope_of(&format!("scopes[{i}]"), s, ScopeKind::Rule)?;
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        let tags = dedup_tags(a.tags.unwrap_or_default());
        Ok(RulesRequest { scopes, tags, full: a.full, budget })
    }
}

impl RulesRequest {
    /// Every rule of `scopes`, compact.
    pub fn of(scopes: Vec<Scope>) -> Self {
        RulesRequest { scopes, tags: vec![], full: false, budget: None }
    }
}

/// related_memories' request.
#[derive(Debug, Clone)]
pub struct RelatedRequest {
    /// The anchor, as the caller wrote it.
    pub id: IdInput,
    /// Nearest-by-meaning neighbours, 1..=1000.
    pub k: usize,
    /// Every field of each record (else compact).
    pub full: bool,
    /// Most characters of records in the result; `None`: no budget.
    pub budget: Option<usize>,
}

impl TryFrom<RelatedMemoriesArgs> for RelatedRequest {
    type Error = Error;

    fn try_from(a: RelatedMemoriesArgs) -> Result<Self, Error> {
        let k = resolve_page("k", a.k, DEFAULT_K)?;
        let budget = budget::resolve(a.max_chars)?;
        Ok(RelatedRequest { id: a.id, k, full: a.full, budget })
    }
}
