//! Connect requests as the service's arguments: `TryFrom` each message, with the checks
//! and envelopes the MCP path gives the same value (the `args::edge` parsers, the NUL
//! rule), in the order the tool's arguments are checked.
//!
//! What the JSON arguments of a tool call leave out, a message leaves unset: an absent
//! optional field, an empty repeated field and `false` are "not given"; an empty string is
//! given, and judged by the service as the tool's `""` is.

use spine_core::limits::CONNECT_LIST_LIMIT;
use spine_core::{Error, Timestamp};
use spine_service::args::edge::{FromArg, nul_free, parse_optional};
use spine_service::args::{
    BatchIdsArgs, IdArgs, IdInput, ListMemoryArgs, ListRulesArgs, ListTagsArgs,
    RelatedMemoriesArgs, SearchMemoryArgs,
};

use super::proto::spine::v1::*;

/// The NUL rule over an optional string field.
fn nul_free_opt(field: &str, input: Option<&String>) -> Result<(), Error> {
    input.map_or(Ok(()), |s| nul_free(field, s))
}

/// The NUL rule over a repeated string field, naming the entry (`tags[1]`).
fn nul_free_each(field: &str, input: &[String]) -> Result<(), Error> {
    input.iter().enumerate().try_for_each(|(i, s)| nul_free(&format!("{field}[{i}]"), s))
}

/// A repeated field as an optional list: empty is not given.
fn given(list: Vec<String>) -> Option<Vec<String>> {
    (!list.is_empty()).then_some(list)
}

/// An optional RFC 3339 field, `""` absent (`args::edge`).
fn time(field: &str, input: Option<&String>) -> Result<Option<Timestamp>, Error> {
    parse_optional(field, input.map(String::as_str))
}

/// The arguments of a search or list message: its own fields as given, then the filter
/// fields both share (declared once in `args::filter_args!`), NUL-checked and with their
/// times parsed.
macro_rules! recall_args {
    ($r:ident => $args:ident { $($own:ident: $value:expr,)* }) => {{
        nul_free_opt("scope", $r.scope.as_ref())?;
        nul_free_each("tags", &$r.tags)?;
        nul_free_each("categories", &$r.categories)?;
        nul_free_opt("created_after", $r.created_after.as_ref())?;
        nul_free_opt("created_before", $r.created_before.as_ref())?;
        Ok($args {
            $($own: $value,)*
            created_after: time("created_after", $r.created_after.as_ref())?,
            created_before: time("created_before", $r.created_before.as_ref())?,
            scope: $r.scope,
            tags: given($r.tags),
            categories: given($r.categories),
            full: $r.full,
            cross_spine: $r.cross_spine,
            max_chars: $r.max_chars,
        })
    }};
}

impl TryFrom<SearchMemoriesRequest> for SearchMemoryArgs {
    type Error = Error;

    fn try_from(r: SearchMemoriesRequest) -> Result<Self, Error> {
        nul_free("query", &r.query)?;
        recall_args!(r => SearchMemoryArgs { query: r.query, k: r.k, })
    }
}

impl TryFrom<ListMemoriesRequest> for ListMemoryArgs {
    type Error = Error;

    /// `state` is not an argument of list_memory; the method reads it beside these.
    fn try_from(r: ListMemoriesRequest) -> Result<Self, Error> {
        nul_free_opt("cursor", r.cursor.as_ref())?;
        recall_args!(r => ListMemoryArgs {
            limit: Some(r.limit.filter(|l| *l > 0).unwrap_or(CONNECT_LIST_LIMIT)),
            cursor: r.cursor,
            offset: r.offset,
        })
    }
}

/// A record id, as get_memory and related_memories take it.
fn id(input: &str) -> Result<IdInput, Error> {
    nul_free("id", input)?;
    IdInput::from_arg("id", input)
}

impl TryFrom<GetMemoryRequest> for IdArgs {
    type Error = Error;

    fn try_from(r: GetMemoryRequest) -> Result<Self, Error> {
        Ok(IdArgs { id: id(&r.id)? })
    }
}

impl TryFrom<GetMemoryHistoryRequest> for IdArgs {
    type Error = Error;

    fn try_from(r: GetMemoryHistoryRequest) -> Result<Self, Error> {
        Ok(IdArgs { id: id(&r.id)? })
    }
}

/// The ids of archive_memory / restore_memory.
fn batch(ids: Vec<String>) -> Result<BatchIdsArgs, Error> {
    nul_free_each("ids", &ids)?;
    Ok(BatchIdsArgs { ids })
}

impl TryFrom<ArchiveMemoryRequest> for BatchIdsArgs {
    type Error = Error;

    fn try_from(r: ArchiveMemoryRequest) -> Result<Self, Error> {
        batch(r.ids)
    }
}

impl TryFrom<RestoreMemoryRequest> for BatchIdsArgs {
    type Error = Error;

    fn try_from(r: RestoreMemoryRequest) -> Result<Self, Error> {
        batch(r.ids)
    }
}

impl TryFrom<ListTagsRequest> for ListTagsArgs {
    type Error = Error;

    fn try_from(r: ListTagsRequest) -> Result<Self, Error> {
        nul_free_opt("scope", r.scope.as_ref())?;
        Ok(ListTagsArgs { scope: r.scope, limit: r.limit })
    }
}

impl TryFrom<RelatedMemoriesRequest> for RelatedMemoriesArgs {
    type Error = Error;

    fn try_from(r: RelatedMemoriesRequest) -> Result<Self, Error> {
        Ok(RelatedMemoriesArgs { id: id(&r.id)?, k: r.k, full: r.full, max_chars: r.max_chars })
    }
}

impl TryFrom<ListRulesRequest> for ListRulesArgs {
    type Error = Error;

    fn try_from(r: ListRulesRequest) -> Result<Self, Error> {
        nul_free_each("scopes", &r.scopes)?;
        nul_free_each("tags", &r.tags)?;
        Ok(ListRulesArgs {
            scopes: given(r.scopes),
            tags: given(r.tags),
            full: r.full,
            max_chars: r.max_chars,
        })
    }
}
