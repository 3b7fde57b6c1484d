//! The record model of SPEC "Memory record" and "Citation", and the closed value sets.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{EpochSeconds, Error, Hint, RecordId, Scope, ShortId, Timestamp};

/// The schema version this binary writes (SPEC Versioning 2; the value is ours).
pub const SCHEMA_VERSION: u32 = 1;

/// The version a write stores: never lower than the record's own (SPEC Versioning 4).
pub fn stamp_schema_version(record_version: u32) -> u32 {
    record_version.max(SCHEMA_VERSION)
}

/// Declares a closed vocabulary: an enum with its wire spellings, `as_str`, a `parse` that
/// names the offending field, serde and a JSON Schema `enum`.
macro_rules! vocabulary {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vdoc])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),+ }
            }

            /// Parses the wire spelling exactly; anything else is an invalid `field`.
            pub fn parse(field: &str, s: &str) -> Result<Self, Error> {
                match s {
                    $($wire => Ok($name::$variant),)+
                    _ => Err(Error::invalid(
                        field,
                        Hint::InvalidValue,
                        format!(
                            "{field} must be one of {}; got {s:?}",
                            [$($wire),+].map(|w| format!("{w:?}")).join(", ")
                        ),
                    )),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::parse(stringify!($name), &s).map_err(|e| serde::de::Error::custom(e.message))
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string", "enum": [$($wire),+] })
            }
        }
    };
}

vocabulary! {
    /// Who the knowledge came from.
    Source {
        /// The user stated it.
        UserSaid = "user-said",
        /// The agent derived it.
        AgentInferred = "agent-inferred",
    }
}

vocabulary! {
    /// The stored category of a record.
    Category {
        /// A choice that was made.
        Decision = "decision",
        /// How the user likes things.
        Preference = "preference",
        /// How things are done here.
        Convention = "convention",
        /// A trap to avoid.
        Gotcha = "gotcha",
        /// Server-set on store_discovery records.
        Discovery = "discovery",
        /// Server-set on store_rule records.
        Rule = "rule",
    }
}

impl Category {
    /// The categories store_memory / schedule_memory accept from a client.
    pub fn is_client_writable(self) -> bool {
        !matches!(self, Category::Discovery | Category::Rule)
    }
}

vocabulary! {
    /// Who may read a record. Private is the empty string on the wire.
    Visibility {
        /// Only the owner reads and writes.
        Private = "",
        /// Any authenticated caller reads; only the owner writes.
        Shared = "shared",
    }
}

vocabulary! {
    /// Where a record's summary came from.
    SummarySource {
        /// No summary.
        None = "",
        /// Written by the caller.
        Client = "client",
        /// Generated offline by the operator sweep.
        Auto = "auto",
    }
}

vocabulary! {
    /// What a citation points at.
    CitationKind {
        /// A file path.
        File = "file",
        /// A commit.
        Commit = "commit",
        /// A URL.
        Url = "url",
        /// A repository.
        Repo = "repo",
    }
}

vocabulary! {
    /// The kind of a discovery record.
    DiscoveryKind {
        /// Orientation / structure.
        Map = "map",
        /// A pinned, checkable claim.
        Fact = "fact",
    }
}

vocabulary! {
    /// Which windowed records list_scheduled lists (SPEC list_scheduled `state`).
    ScheduledState {
        /// Not yet active: not_before is in the future (the default).
        Scheduled = "scheduled",
        /// The window has ended: now is at or past not_after.
        Expired = "expired",
        /// Both.
        All = "all",
    }
}

vocabulary! {
    /// Which records a browsing list shows (the Connect API's `ListMemories.state`, what the
    /// console filters by): the recall gate's view, or the records in one hidden state.
    ListState {
        /// Records the recall gate shows (what list_memory lists).
        Live = "live",
        /// Archived records.
        Archived = "archived",
        /// Superseded records.
        Superseded = "superseded",
        /// The caller's own scheduled records (owner-only, as list_scheduled).
        Scheduled = "scheduled",
        /// The caller's own expired records (owner-only, as list_scheduled).
        Expired = "expired",
        /// Every state.
        All = "all",
    }
}

/// Evidence for a record (SPEC "Citation"). The tool schemas carry only the descriptions
/// the field names do not say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(description = "")]
pub struct Citation {
    /// `file`, `commit`, `url` or `repo`.
    #[schemars(description = "")]
    pub kind: CitationKind,
    /// Path or URL.
    #[serde(rename = "ref")]
    pub reference: String,
    /// E.g. a line range.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(description = "")]
    pub locator: String,
    /// Commit SHA, content hash or revision.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pin: String,
    /// Quoted text, at most 16 KiB.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub excerpt: String,
}

/// A stored record, with exactly the JSON keys of SPEC "Memory record".
///
/// This is both the stored payload and the full view. Invariants kept by the service:
/// `id`/`short_id`/`created_at`/`owner` never change after creation; `summary_source` is
/// `None` exactly when `summary` is empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Memory {
    /// Server-minted UUID.
    pub id: RecordId,
    /// Server-minted short handle.
    pub short_id: ShortId,
    /// The memory text; also the embedded text.
    pub content: String,
    /// `<run>:<tier>:<repo>`.
    pub scope: Scope,
    /// Repository name or URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub repo: String,
    /// Workspace identifier.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub workspace: String,
    /// Path to the git worktree.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub worktree_path: String,
    /// Base directory of the project.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_dir: String,
    /// `user-said` or `agent-inferred`.
    pub source: Source,
    /// The record's category.
    pub category: Category,
    /// Free-form labels.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Short human-readable summary; empty means none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    /// `client`, `auto` or empty.
    #[serde(default = "no_summary")]
    pub summary_source: SummarySource,
    /// Model name when summary_source=auto.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary_model: String,
    /// When content was sent to the summarizer (auto path only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_egress_at: Option<Timestamp>,
    /// Verified caller identity; empty when auth is disabled.
    #[serde(default)]
    pub actor: String,
    /// Authorization key; `None` only on records written before ownership existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Empty = private; `shared`.
    #[serde(default = "private")]
    pub visibility: Visibility,
    /// Creation time.
    pub created_at: Timestamp,
    /// Hidden from recall until now is at or past this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<EpochSeconds>,
    /// Drops out of recall once now is at or past this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<EpochSeconds>,
    /// On a correcting record: the ids it replaced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supersedes: Vec<RecordId>,
    /// On a corrected record: the id that replaced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<RecordId>,
    /// When the record was archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<EpochSeconds>,
    /// Strong-signal touches (get_memory, update_memory).
    #[serde(default)]
    pub access_count: u64,
    /// Time of the most recent strong-signal touch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_accessed_at: Option<Timestamp>,
    /// Absent on old records, reads as 0.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub schema_version: u32,
    /// Discovery records only: `map` or `fact`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<DiscoveryKind>,
    /// Citations backing the record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub citations: Vec<Citation>,
}

impl Memory {
    /// A new record as created by `caller` at `created_at`: private, no summary, no window,
    /// no links, never accessed, stamped with the current schema version. Callers fill in the
    /// optional client fields.
    pub fn new(
        short_id: ShortId,
        content: String,
        scope: Scope,
        source: Source,
        category: Category,
        caller: &crate::Caller,
        created_at: Timestamp,
    ) -> Self {
        Memory {
            id: RecordId::mint(),
            short_id,
            content,
            scope,
            repo: String::new(),
            workspace: String::new(),
            worktree_path: String::new(),
            base_dir: String::new(),
            source,
            category,
            tags: vec![],
            summary: String::new(),
            summary_source: SummarySource::None,
            summary_model: String::new(),
            summary_egress_at: None,
            actor: caller.actor().to_owned(),
            owner: Some(caller.owner().to_owned()),
            visibility: Visibility::Private,
            created_at,
            not_before: None,
            not_after: None,
            supersedes: vec![],
            superseded_by: None,
            archived_at: None,
            access_count: 0,
            last_accessed_at: None,
            schema_version: SCHEMA_VERSION,
            kind: None,
            citations: vec![],
        }
    }
}

fn no_summary() -> SummarySource {
    SummarySource::None
}

fn private() -> Visibility {
    Visibility::Private
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_parses_exact_spellings_only() {
        assert_eq!(Source::parse("source", "user-said").unwrap(), Source::UserSaid);
        let e = Source::parse("source", "User-Said").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("source"));
        assert_eq!(e.hint, Some(Hint::InvalidValue));
        assert_eq!(Visibility::parse("v", "").unwrap(), Visibility::Private);
    }

    #[test]
    fn schema_version_never_lowers() {
        assert_eq!(stamp_schema_version(0), SCHEMA_VERSION);
        assert_eq!(stamp_schema_version(SCHEMA_VERSION + 5), SCHEMA_VERSION + 5);
    }

    #[test]
    fn absent_schema_version_reads_as_zero_and_unknown_keys_are_tolerated() {
        let json = serde_json::json!({
            "id": "0190c3a0-0000-7000-8000-000000000000",
            "short_id": "0123456789",
            "content": "c", "scope": "a:b:c", "source": "user-said",
            "category": "decision", "created_at": "2026-01-01T00:00:00Z",
            "future_key": {"x": 1}
        });
        let m: Memory = serde_json::from_value(json).unwrap();
        assert_eq!(m.schema_version, 0);
        assert_eq!(m.owner, None, "no owner key is distinct from an empty owner");
    }
}
