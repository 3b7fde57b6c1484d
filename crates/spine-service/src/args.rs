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

/// Parses tool arguments: unknown keys are rejected (hint `unknown_field`: a typo such as
/// `categoies` would otherwise silently widen a search), missing required keys get
/// `required`, wrong types `invalid_type`, bad enum values `invalid_value`.
pub fn parse_args<T: DeserializeOwned + JsonSchema>(args: Map<String, Value>) -> Result<T, Error> {
    let schema = schemars::schema_for!(T);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let mut unknown: Vec<&String> = args.keys().filter(|k| !props.contains_key(*k)).collect();
        unknown.sort();
        if let Some(first) = unknown.first() {
            let mut known: Vec<&String> = props.keys().collect();
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
            /// The memory text (also what is embedded for semantic search). One deliberate fact,
            /// decision, preference, convention or gotcha; never secrets or transient state.
            pub content: String,
            /// Scope `<run>:<tier>:<repo>`, e.g. `myteam:project:spine`.
            #[serde(deserialize_with = "edge::required")]
            #[schemars(with = "String")]
            pub scope: Scope,
            /// `user-said` (the user stated it) or `agent-inferred` (you derived it).
            #[serde(deserialize_with = "edge::required")]
            #[schemars(with = "String")]
            pub source: Source,
            /// `decision`, `preference`, `convention` or `gotcha`.
            #[serde(deserialize_with = "edge::required")]
            #[schemars(with = "String")]
            pub category: Category,
            /// Free-form labels, used as AND filters in search_memory / list_memory.
            #[serde(default)]
            pub tags: Option<Vec<String>>,
            /// Repository name or URL.
            #[serde(default)]
            pub repo: Option<String>,
            /// Workspace identifier.
            #[serde(default)]
            pub workspace: Option<String>,
            /// Path to the git worktree.
            #[serde(default)]
            pub worktree_path: Option<String>,
            /// Base directory of the project.
            #[serde(default)]
            pub base_dir: Option<String>,
            /// Short human-readable summary shown in recall results instead of the content.
            #[serde(default)]
            pub summary: Option<String>,
            /// Evidence backing the memory (at most 50). Never inferred by the server.
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
        /// RFC 3339 time: hidden from recall until now is at or past it.
        #[serde(default, deserialize_with = "edge::optional")]
        #[schemars(with = "Option<String>")]
        not_before: Option<EpochSeconds>,
        /// RFC 3339 time: dropped from recall once now is at or past it.
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
        #[derive(Debug, Clone, Deserialize, JsonSchema)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
            /// Scope to read; required unless cross_spine is true.
            #[serde(default)]
            pub scope: Option<String>,
            /// Only records carrying ALL of these tags.
            #[serde(default)]
            pub tags: Option<Vec<String>>,
            /// Only records in ANY of these categories (any stored category, `discovery` and
            /// `rule` included); omitted or empty: every category.
            #[serde(default)]
            pub categories: Option<Vec<String>>,
            /// RFC 3339: only records created at or after this time.
            #[serde(default, deserialize_with = "edge::optional")]
            #[schemars(with = "Option<String>")]
            pub created_after: Option<Timestamp>,
            /// RFC 3339: only records created strictly before this time.
            #[serde(default, deserialize_with = "edge::optional")]
            #[schemars(with = "Option<String>")]
            pub created_before: Option<Timestamp>,
            /// true returns every field including citations; default is the compact view.
            #[serde(default = "default_false")]
            pub full: bool,
            /// true reads every scope you can read (scope is ignored).
            #[serde(default = "default_false")]
            pub cross_spine: bool,
        }
    };
}

filter_args! {
    /// Arguments of search_memory.
    SearchMemoryArgs {
        /// Natural-language query.
        query: String,
        /// Number of results; 0 or omitted = 8; at most 1000.
        #[serde(default)]
        k: Option<u64>,
    }
}

filter_args! {
    /// Arguments of list_memory.
    ListMemoryArgs {
        /// Page size; 0 or omitted = 20; at most 1000.
        #[serde(default)]
        limit: Option<u64>,
        /// next_cursor of the previous page; omit for the first page. Not with offset.
        #[serde(default)]
        cursor: Option<String>,
        /// Number of records to skip; not with cursor.
        #[serde(default)]
        offset: Option<u64>,
    }
}

/// Arguments of list_scheduled.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ListScheduledArgs {
    /// Scope to list; required unless cross_spine is true.
    #[serde(default)]
    pub scope: Option<String>,
    /// `scheduled` (default: not yet active), `expired` (window has ended) or `all`.
    #[serde(default, deserialize_with = "blank_is_none")]
    pub state: Option<ScheduledState>,
    /// Page size; 0 or omitted = 20; at most 1000.
    #[serde(default)]
    pub limit: Option<u64>,
    /// RFC 3339: only records created at or after this time.
    #[serde(default, deserialize_with = "edge::optional")]
    #[schemars(with = "Option<String>")]
    pub created_after: Option<Timestamp>,
    /// RFC 3339: only records created strictly before this time.
    #[serde(default, deserialize_with = "edge::optional")]
    #[schemars(with = "Option<String>")]
    pub created_before: Option<Timestamp>,
    /// true lists your records across every scope (scope is ignored).
    #[serde(default = "default_false")]
    pub cross_spine: bool,
    /// next_cursor of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// Arguments of get_memory and delete_memory.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct IdArgs {
    /// Record UUID or short_id (case-insensitive).
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub id: IdInput,
}

/// Arguments of update_memory.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct UpdateMemoryArgs {
    /// Record UUID or short_id.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub id: IdInput,
    /// Replacement text (re-embedded when it changes). Send the current text to keep it.
    pub content: String,
    /// true = shared (readable by any authenticated caller), false = private; omit keeps.
    #[serde(default)]
    pub shared: Option<bool>,
    /// Replaces the whole tag set; [] clears; omit keeps.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Replaces the summary; "" clears; omit keeps. Required when content changes on a
    /// record whose summary you (the client) wrote.
    #[serde(default)]
    pub summary: Option<String>,
}

record_args! {
    /// Arguments of supersede_memory: store_memory's for the correcting record, plus the
    /// records it replaces.
    SupersedeMemoryArgs {
        /// Ids (UUID or short_id) of the records this one replaces: each must be yours, the
        /// live head of its chain, and not a rule. Duplicates collapse.
        supersedes: Vec<String>,
        /// true: run every check and report the resolved targets without writing anything.
        #[serde(default = "default_false")]
        validate_only: bool,
        /// Any string (1 to 256 bytes) identifying this correction: a retry with the same
        /// key, content and targets returns the original result instead of writing twice.
        #[serde(default)]
        idempotency_key: Option<String>,
    }
}

/// Arguments of archive_memory and restore_memory.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct BatchIdsArgs {
    /// 1 to 1000 record ids (UUID or short_id), each at most 256 bytes. Each gets its own
    /// outcome, in input order.
    pub ids: Vec<String>,
}

/// Arguments of delete_all.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct DeleteAllArgs {
    /// Scope to clear (only your own records in it are deleted).
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub scope: Scope,
}

/// Arguments of set_visibility.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SetVisibilityArgs {
    /// Record UUID or short_id.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub id: IdInput,
    /// true = readable by any authenticated caller; false = private.
    pub shared: bool,
}

/// Arguments of list_tags.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ListTagsArgs {
    /// Scope; omit for every scope you can read.
    #[serde(default)]
    pub scope: Option<String>,
    /// Number of tags; 0 or omitted = 100; at most 1000.
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Arguments of related_memories.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct RelatedMemoriesArgs {
    /// Anchor record: UUID or short_id (case-insensitive). Any state; must be readable by you.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub id: IdInput,
    /// Most vector (meaning) neighbours; 0 or omitted = 8; at most 1000. Does not change
    /// the other edge types' caps.
    #[serde(default)]
    pub k: Option<u64>,
    /// true returns every field (including citations) on the anchor and each related record;
    /// default is the compact view.
    #[serde(default = "default_false")]
    pub full: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn core_types_are_parsed_at_the_edge_with_the_operations_envelopes() {
        let record = |scope: &str, when: &str| {
            obj(json!({"content": "c", "scope": scope, "source": "user-said",
                       "category": "gotcha", "not_after": when}))
        };
        let a = parse_args::<ScheduleMemoryArgs>(record("a:project:x", "")).unwrap();
        assert_eq!(
            (a.scope.as_str(), a.category, a.not_after),
            ("a:project:x", Category::Gotcha, None)
        );
        let e = parse_args::<ScheduleMemoryArgs>(record("nope", "")).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("scope"), Some(Hint::MalformedScope)));
        assert!(e.message.starts_with("scope must look like <run>:<tier>:<repo>"), "{}", e.message);
        let e = parse_args::<ScheduleMemoryArgs>(record("", "")).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("scope"), Some(Hint::Required)));
        let e = parse_args::<ScheduleMemoryArgs>(record("a:project:x", "soon")).unwrap_err();
        assert_eq!(
            (e.field.as_deref(), e.hint),
            (Some("not_after"), Some(Hint::MalformedTimestamp))
        );
        assert!(e.message.starts_with("not_after must be an RFC 3339 time"), "{}", e.message);
        let mut bad_source = record("a:project:x", "");
        bad_source.insert("source".into(), json!("hearsay"));
        let e = parse_args::<ScheduleMemoryArgs>(bad_source).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("source"), Some(Hint::InvalidValue)));
        // A wrong JSON type is still serde's invalid_type, not a stale edge envelope.
        let e = parse_args::<ScheduleMemoryArgs>(record("x:y", "")).unwrap_err();
        assert_eq!(e.hint, Some(Hint::MalformedScope));
        let mut typed = record("a:project:x", "");
        typed.insert("scope".into(), json!(5));
        let e = parse_args::<ScheduleMemoryArgs>(typed).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("scope"), Some(Hint::InvalidType)));

        let e = parse_args::<IdArgs>(obj(json!({"id": " "}))).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("id"), Some(Hint::Blank)));
        let a = parse_args::<IdArgs>(obj(json!({"id": "abcdefghjk"}))).unwrap();
        assert_eq!(a.id.input, "abcdefghjk", "the caller's spelling is kept for messages");
        let a = parse_args::<ListMemoryArgs>(obj(json!({"scope": "a:b:c", "created_after": ""})));
        assert_eq!(a.unwrap().created_after, None, "blank is absent");
    }

    #[test]
    fn unknown_argument_is_named() {
        let e = parse_args::<ListTagsArgs>(obj(json!({"limt": 3}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("limt"));
        assert_eq!(e.hint, Some(Hint::UnknownField));
    }

    #[test]
    fn missing_required_argument_is_named() {
        let e = parse_args::<IdArgs>(obj(json!({}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("id"));
        assert_eq!(e.hint, Some(Hint::Required));
    }

    #[test]
    fn wrong_type_names_the_path() {
        let e =
            parse_args::<SearchMemoryArgs>(obj(json!({"query": "q", "k": "eight"}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("k"));
        assert_eq!(e.hint, Some(Hint::InvalidType));
        let e = parse_args::<SearchMemoryArgs>(obj(json!({"query": "q", "k": -1}))).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("k"));
    }

    #[test]
    fn shared_record_fields_keep_their_names_in_every_tool() {
        let record = json!({
            "content": "c", "scope": "a:b:c", "source": "user-said", "category": "decision",
            "citations": [{"kind": "file", "ref": "a"}, {"kind": "blog", "ref": "b"}]
        });
        let mut schedule = obj(record.clone());
        schedule.insert("not_after".into(), json!("2030-01-01T00:00:00Z"));
        let e = parse_args::<ScheduleMemoryArgs>(schedule).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("citations[1].kind"));
        assert_eq!(e.hint, Some(Hint::InvalidValue));
        let mut supersede = obj(record);
        supersede.insert("supersedes".into(), json!(["x"]));
        let e = parse_args::<SupersedeMemoryArgs>(supersede.clone()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("citations[1].kind"));
        supersede.remove("citations");
        supersede.remove("content");
        let e = parse_args::<SupersedeMemoryArgs>(supersede.clone()).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("content"), Some(Hint::Required)));
        supersede.insert("content".into(), json!("c"));
        supersede.insert("tgas".into(), json!([]));
        let e = parse_args::<SupersedeMemoryArgs>(supersede.clone()).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("tgas"), Some(Hint::UnknownField)));
        supersede.remove("tgas");
        let a = parse_args::<SupersedeMemoryArgs>(supersede).unwrap();
        assert_eq!((a.supersedes.len(), StoreMemoryArgs::from(a).content.as_str()), (1, "c"));
    }

    #[test]
    fn closed_sets_are_parsed_here_and_blank_optional_ones_are_absent() {
        let a = parse_args::<SearchDiscoveryArgs>(obj(json!({"query": "q", "kind": ""}))).unwrap();
        assert_eq!(a.kind, None);
        let a = parse_args::<SearchDiscoveryArgs>(obj(json!({"query": "q", "kind": "fact"})));
        assert_eq!(a.unwrap().kind, Some(DiscoveryKind::Fact));
        let e = parse_args::<SearchDiscoveryArgs>(obj(json!({"query": "q", "kind": "blog"})));
        let e = e.unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("kind"), Some(Hint::InvalidValue)));
        let e = parse_args::<SearchDiscoveryArgs>(obj(json!({"query": "q", "kind": 3})));
        assert_eq!(e.unwrap_err().hint, Some(Hint::InvalidType));
        let e = parse_args::<StoreDiscoveryArgs>(obj(json!({
            "content": "c", "kind": "", "citations": [], "scope": "discovery:a:b"
        })))
        .unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("kind"), Some(Hint::InvalidValue)));
        let a = parse_args::<ListScheduledArgs>(obj(json!({"state": "expired"}))).unwrap();
        assert_eq!(a.state, Some(ScheduledState::Expired));
    }

    #[test]
    fn bad_citation_kind_names_the_entry() {
        let e = parse_args::<StoreMemoryArgs>(obj(json!({
            "content": "c", "scope": "a:b:c", "source": "user-said", "category": "decision",
            "citations": [{"kind": "file", "ref": "a"}, {"kind": "blog", "ref": "b"}]
        })))
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("citations[1].kind"));
        assert_eq!(e.hint, Some(Hint::InvalidValue));
    }
}

/// Arguments of store_discovery. `source` (`agent-inferred`) and `category` (`discovery`) are
/// set by the server and are not arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct StoreDiscoveryArgs {
    /// What you learned about the codebase, in your own words (also what is embedded for
    /// search_discovery); at most 64 KiB.
    pub content: String,
    /// `map` (orientation: how the code is laid out and where things live) or `fact` (one
    /// pinned, checkable claim).
    pub kind: DiscoveryKind,
    /// The evidence, 1 to 50 citations: each `{kind: file|commit|url|repo, ref, locator?,
    /// pin?, excerpt?}`; pin a commit SHA or content hash so the claim can be re-checked;
    /// an excerpt is at most 16 KiB.
    pub citations: Vec<Citation>,
    /// Scope starting with `discovery:`, typically `discovery:repo:<repo>`.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub scope: Scope,
    /// Free-form labels.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Short summary shown in search results instead of the content (at most 512 bytes by
    /// default).
    #[serde(default)]
    pub summary: Option<String>,
    /// Omit to create a record. The UUID or short_id of one of your own discovery records
    /// replaces it in place: content, kind, citations, scope, tags and summary become this
    /// call's (an omitted tags or summary clears it); id, short_id and created_at are kept.
    #[serde(default, deserialize_with = "edge::optional")]
    #[schemars(with = "Option<String>")]
    pub id: Option<IdInput>,
}

/// Arguments of search_discovery.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SearchDiscoveryArgs {
    /// Natural-language question about the codebase.
    pub query: String,
    /// A `discovery:` scope, e.g. `discovery:repo:spine`; required unless cross_spine is true.
    #[serde(default)]
    pub scope: Option<String>,
    /// Only discoveries of this kind: `map` or `fact`. Omit for both.
    #[serde(default, deserialize_with = "blank_is_none")]
    pub kind: Option<DiscoveryKind>,
    /// Number of results; 0 or omitted = 8; at most 1000.
    #[serde(default)]
    pub k: Option<u64>,
    /// true searches every discovery scope you can read (scope is ignored).
    #[serde(default = "default_false")]
    pub cross_spine: bool,
}

/// Arguments of store_rule. Call only after the user has approved the rule. `category`
/// (`rule`), `source` (`user-said`) and `visibility` (`shared`) are set by the server.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct StoreRuleArgs {
    /// The rule as the user approved it (also what is embedded); at most 8 KiB.
    pub content: String,
    /// `rule:repo:<repo>` or `rule:project:<project>`.
    #[serde(deserialize_with = "edge::required")]
    #[schemars(with = "String")]
    pub scope: Scope,
    /// One physical line (no line breaks) of at most 256 bytes, shown by list_rules.
    pub summary: String,
    /// Concern-area labels (e.g. `testing`, `security`), usable as list_rules filters.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Omit to create a rule. The UUID or short_id of one of your own rules replaces it in
    /// place: content, scope, summary and tags become this call's (omitted tags clear them);
    /// id, short_id and created_at are kept.
    #[serde(default, deserialize_with = "edge::optional")]
    #[schemars(with = "Option<String>")]
    pub id: Option<IdInput>,
}

/// Arguments of list_rules.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ListRulesArgs {
    /// `rule:repo:<repo>` / `rule:project:<project>` scopes to list, each oldest first, in
    /// the order given (up to 1000 rules per scope). Omit for every rule scope you can read
    /// in one oldest-first read (up to 1000 rules in total).
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Only rules carrying ALL of these tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// true returns every field including the rule's content; default is the compact view
    /// (short_id, id, summary, tags, scope, created_at).
    #[serde(default = "default_false")]
    pub full: bool,
}
