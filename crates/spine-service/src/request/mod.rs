//! Typed requests: what the operations take once their wire arguments are checked.
//!
//! The wire structs of [`crate::args`] (serde, JSON Schema; the MCP tools' input schemas
//! are generated from them, and the Connect API's messages convert into them) hold what a
//! client sent; a request here holds what the operation acts on: a checked query, the
//! scope selection, a resolved page size, the store [`Filter`], the character budget, a
//! checked new record. `TryFrom` each read's wire struct is the one place its checks run,
//! in the order a call reports them; a write's checks also read the configured limits and
//! secrets policy, so its request is built by a `check` taking [`WriteRules`] (see
//! `write.rs`). The service's own callers (the prompt hook, the digest, import-notes) build
//! requests directly. This is ripgrep's `LowArgs` → `HiArgs`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use spine_core::limits::{
    DEFAULT_K, DEFAULT_LIST_LIMIT, DEFAULT_TAGS_LIMIT, MAX_BATCH_IDS, MAX_QUERY_BYTES,
    check_id_text, resolve_page,
};
use spine_core::{Category, Error, Hint, RecordId, ScheduledState, Scope, ScopeKind, Timestamp};
use spine_store::{Cursor, Filter, ScopeFilter};

use crate::args::{
    BatchIdsArgs, IdInput, ListMemoryArgs, ListRulesArgs, ListScheduledArgs, ListTagsArgs,
    RelatedMemoriesArgs, SearchDiscoveryArgs, SearchMemoryArgs,
};
use crate::budget;

mod write;

pub use write::{
    KnowledgeRequest, MAX_IDEMPOTENCY_KEY_BYTES, NewRecord, ScheduleRequest, StoreRequest,
    SupersedeRequest, TargetRef, UpdateRequest, VisibilityRequest, WriteRules,
};
pub(crate) use write::{Written, check_rule_summary, dedup_tags};

/// `scope` is required unless `cross_spine` is true, in which case it is ignored.
pub(crate) fn scope_filter(scope: Option<&str>, cross_spine: bool) -> Result<ScopeFilter, Error> {
    scope_filter_with(scope, cross_spine, |s| Scope::parse("scope", s))
}

/// Like [`scope_filter`], validating the scope with `parse` (e.g. one record kind's scopes).
pub(crate) fn scope_filter_with(
    scope: Option<&str>,
    cross_spine: bool,
    parse: impl Fn(&str) -> Result<Scope, Error>,
) -> Result<ScopeFilter, Error> {
    if cross_spine {
        return Ok(ScopeFilter::All);
    }
    match scope {
        Some(s) if !s.is_empty() => Ok(ScopeFilter::One(parse(s)?)),
        _ => Err(Error::invalid(
            "scope",
            Hint::Required,
            "scope is required unless cross_spine is true",
        )),
    }
}

/// A search query: non-blank, at most [`MAX_QUERY_BYTES`].
pub(crate) fn check_query(query: &str) -> Result<(), Error> {
    spine_core::limits::check_text("query", query, MAX_QUERY_BYTES)
}

pub(crate) fn check_filter_tags(tags: &[String]) -> Result<(), Error> {
    for (i, t) in tags.iter().enumerate() {
        if t.trim().is_empty() {
            return Err(Error::invalid(
                format!("tags[{i}]"),
                Hint::Blank,
                "a tag filter must not be blank",
            ));
        }
    }
    Ok(())
}

/// The opaque list cursor of a position: the (created_at, id) of the last row returned.
pub(crate) fn encode_cursor(c: Cursor) -> String {
    URL_SAFE_NO_PAD.encode(format!("v1:{}:{}", c.created_at.as_micros(), c.id))
}

/// A cursor as [`encode_cursor`] wrote it; anything else is `malformed_cursor`.
pub(crate) fn decode_cursor(s: &str) -> Result<Cursor, Error> {
    let bad = || {
        Error::invalid(
            "cursor",
            Hint::MalformedCursor,
            "cursor must be a next_cursor value returned by this tool",
        )
    };
    let raw = URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let mut parts = raw.splitn(3, ':');
    let (Some("v1"), Some(micros), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    Ok(Cursor {
        created_at: Timestamp::from_micros(micros.parse().map_err(|_| bad())?),
        id: RecordId::parse(id).ok_or_else(bad)?,
    })
}

/// Parses a scope that must hold records of kind `want`. Another kind's reserved run
/// (`discovery:` / `rule:`) is `reserved_scope`; an ordinary memory scope is `malformed_scope`
/// (it lacks the required prefix).
pub(crate) fn parse_scope_of(field: &str, input: &str, want: ScopeKind) -> Result<Scope, Error> {
    scope_of(field, Scope::parse(field, input)?, want)
}

/// `scope` when it holds records of kind `want`; the errors of [`parse_scope_of`].
pub(crate) fn scope_of(field: &str, scope: Scope, want: ScopeKind) -> Result<Scope, Error> {
    if scope.kind() == want {
        return Ok(scope);
    }
    let expected = match want {
        ScopeKind::Discovery => "a discovery scope starts with discovery: (discovery:repo:<repo>)",
        ScopeKind::Rule => "a rule scope is rule:repo:<repo> or rule:project:<project>",
        ScopeKind::Memory => "a memory scope is <run>:<tier>:<repo> outside discovery: and rule:",
    };
    let hint =
        if scope.kind() == ScopeKind::Memory { Hint::MalformedScope } else { Hint::ReservedScope };
    Err(Error::invalid(field, hint, format!("{field}: {expected}; got {:?}", scope.as_str())))
}

/// Checks the shape of a batch of ids (SPEC archive_memory): the only whole-call rejections.
pub(crate) fn check_batch(ids: &[String]) -> Result<(), Error> {
    if ids.is_empty() {
        return Err(Error::invalid("ids", Hint::Required, "ids needs at least one record id"));
    }
    if ids.len() > MAX_BATCH_IDS {
        return Err(Error::invalid(
            "ids",
            Hint::TooMany,
            format!("ids has {} entries; at most {MAX_BATCH_IDS} per call", ids.len()),
        ));
    }
    check_id_entries("ids", ids)
}

/// Each entry of the id list `field` within the id bound ([`check_id_text`], the entry named
/// `field[i]`). An entry that is not an id passes: it gets its own `not_found`.
pub(crate) fn check_id_entries(field: &str, ids: &[String]) -> Result<(), Error> {
    for (i, id) in ids.iter().enumerate() {
        check_id_text(&format!("{field}[{i}]"), id)?;
    }
    Ok(())
}

/// How the records of a result come back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Output {
    /// Every field of each record (else compact).
    pub full: bool,
    /// Most characters of records in the result; `None`: no budget.
    pub budget: Option<usize>,
}

impl Output {
    /// `full` and `max_chars` as given (`max_chars` 0 or omitted: no budget).
    fn resolve(full: bool, max_chars: Option<u64>) -> Result<Self, Error> {
        Ok(Output { full, budget: budget::resolve(max_chars)? })
    }
}

/// search_memory's request.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// Non-blank, at most `MAX_QUERY_BYTES`.
    pub query: String,
    /// Which records: scope selection (`All` = cross-spine), tags, categories, created range.
    pub filter: Filter,
    /// How many hits, 1..=1000.
    pub k: usize,
    /// Compact or full, and the character budget.
    pub output: Output,
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
        let output = Output::resolve(a.full, a.max_chars)?;
        let mut filter = recall_filter(scope, a.tags, a.categories)?;
        filter.created_after = a.created_after;
        filter.created_before = a.created_before;
        Ok(SearchRequest { query: a.query, filter, k, output })
    }
}

impl SearchRequest {
    /// The `k` nearest memories to `query` in `scope`, compact, with no other filter.
    pub fn in_scope(query: String, scope: Scope, k: usize) -> Self {
        SearchRequest {
            query,
            filter: Filter::new(ScopeFilter::One(scope)),
            k,
            output: Output::default(),
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
    /// Compact or full, and the character budget.
    pub output: Output,
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
        let output = Output::resolve(a.full, a.max_chars)?;
        let mut filter = recall_filter(scope, a.tags, a.categories)?;
        filter.created_after = a.created_after;
        filter.created_before = a.created_before;
        let explicit_limit = a.limit.is_some_and(|l| l > 0);
        Ok(ListRequest {
            filter,
            limit,
            start: PageStart { cursor, offset },
            count_total: a.cross_spine && explicit_limit,
            output,
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
            output: Output::default(),
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
    /// The compact `ruleView` or every field, and the character budget.
    pub output: Output,
}

impl TryFrom<ListRulesArgs> for RulesRequest {
    type Error = Error;

    fn try_from(a: ListRulesArgs) -> Result<Self, Error> {
        let output = Output::resolve(a.full, a.max_chars)?;
        let mut scopes: Vec<Scope> = Vec::new();
        for (i, s) in a.scopes.unwrap_or_default().iter().enumerate() {
            let scope = parse_scope_of(&format!("scopes[{i}]"), s, ScopeKind::Rule)?;
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        let tags = dedup_tags(a.tags.unwrap_or_default());
        Ok(RulesRequest { scopes, tags, output })
    }
}

impl RulesRequest {
    /// Every rule of `scopes`, compact.
    pub fn of(scopes: Vec<Scope>) -> Self {
        RulesRequest { scopes, tags: vec![], output: Output::default() }
    }
}

/// related_memories' request.
#[derive(Debug, Clone)]
pub struct RelatedRequest {
    /// The anchor, as the caller wrote it.
    pub id: IdInput,
    /// Nearest-by-meaning neighbours, 1..=1000.
    pub k: usize,
    /// Compact or full, and the character budget.
    pub output: Output,
}

impl TryFrom<RelatedMemoriesArgs> for RelatedRequest {
    type Error = Error;

    fn try_from(a: RelatedMemoriesArgs) -> Result<Self, Error> {
        let k = resolve_page("k", a.k, DEFAULT_K)?;
        let output = Output::resolve(a.full, a.max_chars)?;
        Ok(RelatedRequest { id: a.id, k, output })
    }
}

/// search_discovery's request.
#[derive(Debug, Clone)]
pub struct DiscoveryRequest {
    /// Non-blank, at most `MAX_QUERY_BYTES`.
    pub query: String,
    /// Discovery records of the scope selection (`All` = cross-spine), of one kind or both.
    pub filter: Filter,
    /// How many hits, 1..=1000.
    pub k: usize,
    /// Most characters of records in the result; `None`: no budget.
    pub budget: Option<usize>,
}

impl TryFrom<SearchDiscoveryArgs> for DiscoveryRequest {
    type Error = Error;

    fn try_from(a: SearchDiscoveryArgs) -> Result<Self, Error> {
        check_query(&a.query)?;
        let scope = scope_filter_with(a.scope.as_deref(), a.cross_spine, |s| {
            parse_scope_of("scope", s, ScopeKind::Discovery)
        })?;
        let k = resolve_page("k", a.k, DEFAULT_K)?;
        let budget = budget::resolve(a.max_chars)?;
        let mut filter = Filter::new(scope);
        filter.categories_any = Some(vec![Category::Discovery]);
        filter.kind = a.kind;
        Ok(DiscoveryRequest { query: a.query, filter, k, budget })
    }
}

/// list_scheduled's request.
#[derive(Debug, Clone)]
pub struct ScheduledRequest {
    /// The caller's windowed records, neither archived nor superseded, of the scope selection
    /// (`All` = cross-spine) and created range.
    pub filter: Filter,
    /// Which of them: scheduled, expired or both.
    pub state: ScheduledState,
    /// Page size, 1..=1000.
    pub limit: usize,
    /// After the record of a previous page's `next_cursor`.
    pub cursor: Option<Cursor>,
}

impl TryFrom<ListScheduledArgs> for ScheduledRequest {
    type Error = Error;

    fn try_from(a: ListScheduledArgs) -> Result<Self, Error> {
        let scope = scope_filter(a.scope.as_deref(), a.cross_spine)?;
        let limit = resolve_page("limit", a.limit, DEFAULT_LIST_LIMIT)?;
        let state = a.state.unwrap_or(ScheduledState::Scheduled);
        let cursor =
            a.cursor.as_deref().filter(|c| !c.is_empty()).map(decode_cursor).transpose()?;
        let mut filter = Filter::new(scope);
        filter.windowed_only = true;
        filter.exclude_archived_superseded = true;
        filter.created_after = a.created_after;
        filter.created_before = a.created_before;
        Ok(ScheduledRequest { filter, state, limit, cursor })
    }
}

/// archive_memory's and restore_memory's request.
#[derive(Debug, Clone)]
pub struct BatchRequest {
    /// 1..=`MAX_BATCH_IDS` non-blank entries as the caller wrote them; each gets its own
    /// outcome (a malformed one `not_found`), so they stay strings.
    pub ids: Vec<String>,
}

impl TryFrom<BatchIdsArgs> for BatchRequest {
    type Error = Error;

    fn try_from(a: BatchIdsArgs) -> Result<Self, Error> {
        check_batch(&a.ids)?;
        Ok(BatchRequest { ids: a.ids })
    }
}
