//! What the writing tools return: the new record's ids, near-duplicates, the supersession
//! preflight, batch outcomes and statuses.

use schemars::JsonSchema;
use serde::Serialize;
use spine_core::{RecordId, ShortId};

/// Result of the tools that create a record.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Stored {
    /// UUID of the new record.
    pub id: RecordId,
    /// Its short handle.
    pub short_id: ShortId,
    /// store_memory / schedule_memory: live records of the same scope you can read that say
    /// nearly the same (at most 3, most similar first). The record was stored anyway.
    pub similar: Option<Vec<Similar>>,
    /// With `similar`: what to consider doing about them.
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
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct SupersedeResult {
    /// UUID of the correcting record (absent with validate_only).
    pub id: Option<RecordId>,
    /// Its short handle (absent with validate_only).
    pub short_id: Option<ShortId>,
    /// validate_only: true when a real call would succeed.
    pub validated: Option<bool>,
    /// validate_only: the `supersedes` list the correcting record would carry (UUIDs).
    pub supersedes: Option<Vec<RecordId>>,
    /// validate_only: each distinct target as resolved.
    pub targets: Option<Vec<ResolvedTarget>>,
    /// Live records of the scope, other than the targets, that say nearly the same as the
    /// correcting record (at most 3).
    pub similar: Option<Vec<Similar>>,
    /// With `similar`: what to consider doing about them.
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
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Status {
    /// `updated`, `deleted`, `scope cleared` or `visibility updated`.
    pub status: String,
    /// delete_all: how many of your records were deleted.
    pub deleted: Option<u64>,
}
