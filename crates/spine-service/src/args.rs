//! Tool arguments as typed structs, and the one function that turns a JSON object into
//! them with errors naming the offending `field` (SPEC Errors 1).
//!
//! The doc comments on fields become the descriptions in each tool's input schema.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde::de::IntoDeserializer;
use serde_json::{Map, Value};
pub mod edge;

use spine_core::{
    Category, Citation, DiscoveryKind, EpochSeconds, Error, Hint, ScheduledState, Scope, Source,
    Timestamp,
};

pub use edge::IdInput;

/// The argument names `T` takes (its schema's `properties`), worked out once per type: a
/// schema is generated on the first call only, not on every tool call.
fn properties<T: JsonSchema>() -> Option<std::sync::Arc<std::collections::BTreeSet<String>>> {
    use std::collections::{BTreeSet, HashMap};
    use std::sync::{Arc, LazyLock, Mutex};
    type Known = HashMap<&'static str, Option<Arc<BTreeSet<String>>>>;
    static KNOWN: LazyLock<Mutex<Known>> = LazyLock::new(Default::default);
    let name = std::any::type_name::<T>();
    if let Some(p) = KNOWN.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
        return p.clone();
    }
    let schema = schemars::schema_for!(T);
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| Arc::new(p.keys().cloned().collect::<BTreeSet<String>>()));
    KNOWN.lock().unwrap_or_else(|e| e.into_inner()).insert(name, props.clone());
    props
}

/// Refuses the first string under `value` (keys included) holding U+0000, naming its path
/// ([`edge::nul_free`]).
fn nul_free_in(value: &Value, path: &str) -> Result<(), Error> {
    match value {
        Value::String(s) => edge::nul_free(path, s),
        Value::Array(items) => {
            items.iter().enumerate().try_for_each(|(i, v)| nul_free_in(v, &format!("{path}[{i}]")))
        }
        Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            let here = format!("{path}.{k}");
            edge::nul_free(&here, k)?;
            nul_free_in(v, &here)
        }),
        _ => Ok(()),
    }
}

/// Parses tool arguments: unknown keys are rejected (hint `unknown_field`: a typo such as
/// `categoies` would otherwise silently widen a search), missing required keys get
/// `required`, wrong types `invalid_type`, bad enum values `invalid_value`.
pub fn parse_args<T: DeserializeOwned + JsonSchema>(args: Map<String, Value>) -> Result<T, Error> {
    let props = properties::<T>();
    if let Some(props) = props.as_deref() {
        let mut unknown: Vec<&String> = args.keys().filter(|k| !props.contains(*k)).collect();
        unknown.sort();
        if let Some(first) = unknown.first() {
            let mut known: Vec<&String> = props.iter().collect();
            known.sort();
            return Err(Error::invalid(
                first.as_str(),
                Hint::UnknownField,
                format!(
                    "unknown argument {first:?}; this tool takes {}",
                    known.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    for (k, v) in &args {
        nul_free_in(v, k)?;
    }
    let value = Value::Object(args);
    edge::clear();
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if let Some(parsed) = edge::take(&inner, &path) {
            return parsed;
        }
        if let Some(name) = inner.strip_prefix("missing field `").and_then(|r| r.split('`').next())
        {
            let field = if path == "." { name.to_owned() } else { format!("{path}.{name}") };
            return Error::invalid(field.clone(), Hint::Required, format!("{field} is required"));
        }
        let hint =
            if inner.contains("must be one of") { Hint::InvalidValue } else { Hint::InvalidType };
        let field = if path == "." { String::from("arguments") } else { path };
        Error::invalid(field.clone(), hint, format!("{field}: {inner}"))
    })
}

/// An optional closed-set value where `""` means "not given" as absence does (clients fill
/// optional fields with empty strings): parsed at the edge into its enum, errors naming the
/// field like any other bad value.
fn blank_is_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => T::deserialize(s.into_deserializer()).map(Some),
    }
}

/// serde default for optional booleans.
fn default_false() -> bool {
    false
}

/// Declares a tool's argument struct with the record fields store_memory, schedule_memory
/// and supersede_memory share (declared once, here), followed by the tool's own fields,
/// and the conversion to [`StoreMemoryArgs`] that keeps only the shared ones. Plain fields
/// rather than `#[serde(flatten)]`, which would lose the path of a bad nested value
/// (`citations[1].kind`) in error envelopes.
macro_rules! record_args {
    (@struct $(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Deserialize, JsonSchema)]
        pub struct $name {
            /// A decision, preference, convention or gotcha; never secrets or transient state.
            pub content: String,
            /// `<run>:<tier>:<repo>`, e.g. `myteam:project:spine`.
            #[serde(deserialize_with = "edge::required")]
            #[schemars(with = "String")]
            pub scope: Scope,
            /// `user-said` or `agent-inferred`.
            #[serde(deserialize_with = "edge::required")]
            #[schemars(with = "String")]
            pub source: Source,
            /// `decision`, `preference`, `convention` or `gotcha`.
            #[serde(deserialize_with = "edge::required")]
            #[schemars(with = "String")]
            pub category: Category,
            /// Labels (AND filters when searching).
            #[serde(default)]
            #[schemars(description = "")]
            pub tags: Option<Vec<String>>,
            /// Repository name or URL.
            #[serde(default)]
            #[schemars(description = "")]
            pub repo: Option<String>,
            /// Workspace id.
            #[serde(default)]
            #[schemars(description = "")]
            pub workspace: Option<String>,
            /// Git worktree path.
            #[serde(default)]
            #[schemars(description = "")]
            pub worktree_path: Option<String>,
            /// Project base directory.
            #[serde(default)]
            #[schemars(description = "")]
            pub base_dir: Option<String>,
            /// Shown in recall instead of the content.
            #[serde(default)]
            pub summary: Option<String>,
            /// Evidence, at most 50.
            #[serde(default)]
            pub citations: Option<Vec<Citation>>,
            $($(#[$fmeta])* pub $field: $ty,)*
        }
    };
    (StoreMemoryArgs) => {
        record_args!(@struct
            /// Arguments of store_memory: the record fields alone.
            StoreMemoryArgs {}
        );
    };
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        record_args!(@struct $(#[$meta])* $name { $($(#[$fmeta])* $field: $ty,)* });

        impl From<$name> for StoreMemoryArgs {
            fn from(a: $name) -> Self {
                StoreMemoryArgs {
                    content: a.content,
                    scope: a.scope,
                    source: a.source,
                    category: a.category,
                    tags: a.tags,
                    repo: a.repo,
                    workspace: a.workspace,
                    worktree_path: a.worktree_path,
                    base_dir: a.base_dir,
                    summary: a.summary,
                    citations: a.citations,
                }
            }
        }
    };
}

record_args!(StoreMemoryArgs);

record_args! {
    /// Arguments of schedule_memory: store_memory's plus a validity window.
    ScheduleMemoryArgs {
        /// RFC 3339; hidden from recall before it.
        #[serde(default, deserialize_with = "edge::optional")]
        #[schemars(with = "Option<String>")]
        not_before: Option<EpochSeconds>,
        /// RFC 3339; dropped from recall from it on.
        #[serde(default, deserialize_with = "edge::optional")]
        #[schemars(with = "Option<String>")]
        not_after: Option<EpochSeconds>,
    }
}

/// Declares a recall tool's argument struct: the tool's own fields, then the filter fields
/// search_memory and list_memory share (declared once, here).
macro_rules! filter_args {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
            /// Required unless cross_spine.
            #[serde(default)]
            #[schemars(description = "")]
            pub scope: Option<String>,
            /// Records with all of these tags.
            #[serde(default)]
            #[schemars(description = "")]
            pub tags: Option<Vec<String>>,
            /// Records in any of these categories; omitted: every category.
            #[schemars(description = "")]
            #[serde(default)]
            pub categories: Option<Vec<String>>,
            /// RFC 3339, inclusive.
            #[serde(default, deserialize_with = "edge::optional")]
            #[schemars(with = "Option<String>")]
            #[schemars(description = "")]
            pub created_after: Option<Timestamp>,
            /// RFC 3339, exclusive.
            #[serde(default, deserialize_with = "edge::optional")]
            #[schemars(with = "Option<String>")]
            #[schemars(description = "")]
            pub created_before: Option<Timestamp>,
            /// Every field (default: compact).
            #[serde(default = "default_false")]
            #[schemars(description = "")]
            pub full: bool,
            /// Every readable scope; scope is ignored.
            #[serde(default = "default_false")]
            #[schemars(description = "")]
            pub cross_spine: bool,
            /// Most characters of records in the result; 0 or omitted: no budget.
            #[schemars(description = "")]
            #[serde(default)]
            pub max_chars: Option<u64>,
        }
    };
}

filter_args! {
    /// Arguments of search_memory.
    SearchMemoryArgs {
        /// Natural-language query.
        #[schemars(description = "")]
        query: String,
        /// Default 8, at most 1000.
        #[serde(default)]
        #[schemars(description = "")]
        k: Option<u64>,
    }
}

filter_args! {
    /// Arguments of list_memory.
    ListMemoryArgs {
        /// Default 20, at most 1000.
        #[serde(default)]
        #[schemars(description = "")]
        limit: Option<u64>,
        /// next_cursor of the previous page (not with offset).
        #[serde(default)]
        #[schemars(description = "")]
        cursor: Option<String>,
        /// Records to skip (not with cursor).
        #[serde(default)]
        #[schemars(description = "")]
        offset: Option<u64>,
    }
}

/// Arguments of list_scheduled.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ListScheduledArgs {
    /// Required unless cross_spine.
    #[serde(default)]
    #[schemars(description = "")]
    pub scope: Option<String>,
    /// `scheduled` (default), `expired` or `all`.
    #[serde(default, deserialize_with = "blank_is_none")]
    pub state: Option<ScheduledState>,
    /// Default 20, at most 1000.
    #[serde(default)]
    #[schemars(description = "")]
    pub limit: Option<u64>,
    /// RFC 3339, inclusive.
    #[serde(default, deserialize_with = "edge::optional")]
    #[schemars(with = "Option<String>")]
    #[schemars(description = "")]
    pub created_after: Option<Timestamp>,
    /// RFC 3339, exclusive.
    #[serde(default, deserialize_with = "edge::optional")]
    #[schemars(with = "Option<String>")]
    #[schemars(description = "")]
    pub created_before: Option<Timestamp>,
    /// Every scope (still only your records); scope is ignored.
    #[serde(default = "default_false")]
    pub cross_spine: bool,
    /// next_cursor of the previous page.
    #[serde(default)]
    #[schemars(description = "")]
    pub cursor: Option<String>,
}

/// Arguments of get_memory and delete_memory.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct IdArgs {
    /// UUID or short_id.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    #[schemars(description = "")]
    pub id: IdInput,
}

/// Arguments of update_memory.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct UpdateMemoryArgs {
    /// UUID or short_id.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    #[schemars(description = "")]
    pub id: IdInput,
    /// New text; send the current text to keep it.
    pub content: String,
    /// true shared, false private; omit keeps.
    #[serde(default)]
    pub shared: Option<bool>,
    /// Replaces the tags; [] clears; omit keeps.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Replaces the summary; "" clears; omit keeps. Required when changing the content of
    /// a record whose summary you wrote.
    #[serde(default)]
    pub summary: Option<String>,
}

record_args! {
    /// Arguments of supersede_memory: store_memory's for the correcting record, plus the
    /// records it replaces.
    SupersedeMemoryArgs {
        /// Ids of the records this one replaces: yours, live heads of their chains, not
        /// rules.
        supersedes: Vec<String>,
        /// Check and resolve the targets; write nothing.
        #[serde(default = "default_false")]
        validate_only: bool,
        /// 1-256 bytes; a retry with the same key, content and targets returns the first
        /// result.
        #[serde(default)]
        idempotency_key: Option<String>,
    }
}

/// Arguments of archive_memory and restore_memory.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct BatchIdsArgs {
    /// 1-1000 ids; one outcome each, in order.
    pub ids: Vec<String>,
}

/// Arguments of delete_all.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct DeleteAllArgs {
    /// Scope to clear (your records only).
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub scope: Scope,
}

/// Arguments of set_visibility.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SetVisibilityArgs {
    /// UUID or short_id.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    #[schemars(description = "")]
    pub id: IdInput,
    /// true shared (read-only for others), false private.
    pub shared: bool,
}

/// Arguments of list_tags.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ListTagsArgs {
    /// Omit for every readable scope.
    #[serde(default)]
    #[schemars(description = "")]
    pub scope: Option<String>,
    /// Default 100, at most 1000.
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Arguments of related_memories.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct RelatedMemoriesArgs {
    /// Anchor: UUID or short_id, any state.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    #[schemars(description = "")]
    pub id: IdInput,
    /// Nearest-by-meaning neighbours: default 8, at most 1000.
    #[serde(default)]
    pub k: Option<u64>,
    /// Every field (default: compact).
    #[serde(default = "default_false")]
    #[schemars(description = "")]
    pub full: bool,
    /// Most characters of records in the result; 0 or omitted: no budget.
    #[schemars(description = "")]
    #[serde(default)]
    pub max_chars: Option<u64>,
}

/// Arguments of store_discovery. `source` (`agent-inferred`) and `category` (`discovery`) are
/// set by the server and are not arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct StoreDiscoveryArgs {
    /// What you learned about the code, in your words (embedded; at most 64 KiB).
    pub content: String,
    /// `map` (layout, where things live) or `fact` (one pinned, checkable claim).
    pub kind: DiscoveryKind,
    /// 1-50 citations; pin a commit SHA or content hash so the claim can be re-checked.
    pub citations: Vec<Citation>,
    /// `discovery:<name>`, typically `discovery:repo:<repo>`.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub scope: Scope,
    /// Labels.
    #[serde(default)]
    #[schemars(description = "")]
    pub tags: Option<Vec<String>>,
    /// Shown in results instead of the content.
    #[serde(default)]
    pub summary: Option<String>,
    /// Omit to create; the id of your discovery replaces it in place (omitted tags or
    /// summary clear).
    #[serde(default, deserialize_with = "edge::optional")]
    #[schemars(with = "Option<String>")]
    pub id: Option<IdInput>,
}

/// Arguments of search_discovery.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SearchDiscoveryArgs {
    /// Question about the code.
    #[schemars(description = "")]
    pub query: String,
    /// A `discovery:` scope; required unless cross_spine.
    #[serde(default)]
    pub scope: Option<String>,
    /// `map` or `fact`; omit for both.
    #[serde(default, deserialize_with = "blank_is_none")]
    pub kind: Option<DiscoveryKind>,
    /// Default 8, at most 1000.
    #[serde(default)]
    #[schemars(description = "")]
    pub k: Option<u64>,
    /// Every readable discovery scope.
    #[serde(default = "default_false")]
    #[schemars(description = "")]
    pub cross_spine: bool,
    /// Most characters of records in the result; 0 or omitted: no budget.
    #[schemars(description = "")]
    #[serde(default)]
    pub max_chars: Option<u64>,
}

/// Arguments of store_rule. Call only after the user has approved the rule. `category`
/// (`rule`), `source` (`user-said`) and `visibility` (`shared`) are set by the server.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct StoreRuleArgs {
    /// The rule as the user approved it (at most 8 KiB).
    pub content: String,
    /// `rule:repo:<repo>` or `rule:project:<project>`.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub scope: Scope,
    /// One line, at most 256 bytes, shown by list_rules.
    pub summary: String,
    /// Concern labels (list_rules filters).
    #[serde(default)]
    #[schemars(description = "")]
    pub tags: Option<Vec<String>>,
    /// Omit to create; the id of your rule replaces it in place (omitted tags clear).
    #[serde(default, deserialize_with = "edge::optional")]
    #[schemars(with = "Option<String>")]
    pub id: Option<IdInput>,
}

/// Arguments of list_rules.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ListRulesArgs {
    /// Rule scopes, listed in this order; omit for every readable rule scope.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Rules with all of these tags.
    #[serde(default)]
    #[schemars(description = "")]
    pub tags: Option<Vec<String>>,
    /// Include the content (default: compact).
    #[serde(default = "default_false")]
    #[schemars(description = "")]
    pub full: bool,
    /// Most characters of records in the result; 0 or omitted: no budget.
    #[schemars(description = "")]
    #[serde(default)]
    pub max_chars: Option<u64>,
}

#[cfg(test)]
mod tests;
