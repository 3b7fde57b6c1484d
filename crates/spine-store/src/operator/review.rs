//! The types `spine-review` exchanges with a backend (state counts, invariant checks,
//! consolidation, purge), and the export gate's record digest.

use std::collections::HashMap;

use serde::Serialize;
use sha2::{Digest, Sha256};
use spine_core::{Category, Memory, RecordId, Scope, State, Timestamp};

use crate::{Result, StoreError};

/// Records of one scope by state (SPEC "States and transitions").
///
/// The state buckets count markers independently, as the SPEC treats them ("each is cleared
/// independently"): a record both archived and expired is counted under `archived` and under
/// `expired`, exactly as `purge --class archived` and `--class expired` would each select it.
/// So the buckets may sum to more than `records`; `active + hidden == records` always.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    /// The scope (empty on a total).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub scope: String,
    /// Every record.
    pub records: u64,
    /// Recall-visible records (no state).
    pub active: u64,
    /// Records hidden from recall (at least one state).
    pub hidden: u64,
    /// `archived_at` present.
    pub archived: u64,
    /// `superseded_by` present.
    pub superseded: u64,
    /// now at or past `not_after`.
    pub expired: u64,
    /// now before `not_before`, not expired.
    pub scheduled: u64,
}

impl StateCounts {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &StateCounts) {
        self.records += other.records;
        self.active += other.active;
        self.hidden += other.hidden;
        self.archived += other.archived;
        self.superseded += other.superseded;
        self.expired += other.expired;
        self.scheduled += other.scheduled;
    }
}

/// Which invariant a record breaks (`spine-review verify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// The stored payload does not decode as a record.
    PayloadCorrupt,
    /// The indexed columns disagree with the payload (search and filters read the columns).
    ColumnsMismatch,
    /// Another record has the same short_id, so the handle resolves to neither.
    DuplicateShortId,
    /// The record has no vector: search can never find it.
    MissingVector,
    /// The vector's bytes are not a vector of its stated length, or hold non-finite values
    /// or only zeros.
    VectorCorrupt,
    /// The vector's length is not the embedder's.
    VectorDimension,
    /// The vector was made by another embedder than the configured one (or, when that is
    /// unknown, than most of the store's).
    EmbedderStamp,
    /// `superseded_by` names a record that does not exist: the record is hidden, and its
    /// chain has no live head.
    DanglingSuccessor,
    /// `superseded_by` names a record whose `supersedes` does not list this one.
    BacklinkMissing,
    /// `supersedes` lists a record that is not superseded: a second live head.
    PredecessorNotSuperseded,
    /// `supersedes` lists a record that names another successor.
    PredecessorOtherSuccessor,
    /// Following `superseded_by` never reaches a live head.
    ChainCycle,
    /// A rule is superseded (SPEC: rules are immutable).
    RuleSuperseded,
}

impl Check {
    /// The stable name (JSON and human output).
    pub fn as_str(self) -> &'static str {
        match self {
            Check::PayloadCorrupt => "payload_corrupt",
            Check::ColumnsMismatch => "columns_mismatch",
            Check::DuplicateShortId => "duplicate_short_id",
            Check::MissingVector => "missing_vector",
            Check::VectorCorrupt => "vector_corrupt",
            Check::VectorDimension => "vector_dimension",
            Check::EmbedderStamp => "embedder_stamp",
            Check::DanglingSuccessor => "dangling_successor",
            Check::BacklinkMissing => "backlink_missing",
            Check::PredecessorNotSuperseded => "predecessor_not_superseded",
            Check::PredecessorOtherSuccessor => "predecessor_other_successor",
            Check::ChainCycle => "chain_cycle",
            Check::RuleSuperseded => "rule_superseded",
        }
    }
}

/// One broken invariant on one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The record's id as stored (it may itself be malformed).
    pub id: String,
    /// Its short_id column.
    pub short_id: String,
    /// Its scope column.
    pub scope: String,
    /// What is wrong.
    pub check: Check,
    /// The particulars.
    pub detail: String,
}

/// The vectors stored with one embedder stamp and length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VectorStamp {
    /// The embedder identity stamped on the vectors.
    pub model: String,
    /// Their length (from the bytes, not the `dims` column).
    pub dims: usize,
    /// How many.
    pub vectors: u64,
}

/// What `verify` expects every vector to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VectorExpectation {
    /// The stamp every vector must carry; `None` when the store has no vectors to judge.
    pub model: Option<String>,
    /// Their length, when known.
    pub dims: Option<usize>,
    /// True when `model` is the configured embedder's, false when it was taken from the
    /// store (the configured embedder could not be built).
    pub configured: bool,
}

impl VectorExpectation {
    /// The expectation given the configured embedder (`model`, and its length when it
    /// knows it) or, without one, the store's most common stamp; a length the embedder
    /// does not know is the most common length among that embedder's vectors.
    pub fn choose(configured: Option<(&str, Option<usize>)>, stamps: &[VectorStamp]) -> Self {
        let most = |pick: &dyn Fn(&VectorStamp) -> bool| -> Option<&VectorStamp> {
            stamps.iter().filter(|s| pick(s)).max_by_key(|s| (s.vectors, std::cmp::Reverse(s.dims)))
        };
        match configured {
            Some((model, dims)) => VectorExpectation {
                model: Some(model.to_owned()),
                dims: dims.or_else(|| most(&|s| s.model == model).map(|s| s.dims)),
                configured: true,
            },
            None => {
                let mut by_model: HashMap<&str, u64> = HashMap::new();
                for s in stamps {
                    *by_model.entry(&s.model).or_default() += s.vectors;
                }
                let model = by_model
                    .into_iter()
                    .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
                    .map(|(m, _)| m.to_owned());
                let dims = model.as_deref().and_then(|m| most(&|s| s.model == m).map(|s| s.dims));
                VectorExpectation { model, dims, configured: false }
            }
        }
    }
}

/// One page of `verify`.
#[derive(Debug, Clone, Default)]
pub struct VerifyPage {
    /// Records checked.
    pub checked: u64,
    /// The last rowid checked; pass it back for the next page. `None` when the page was
    /// empty (done).
    pub last_rowid: Option<i64>,
    /// What was found.
    pub violations: Vec<Violation>,
}

/// A group of records consolidate compares with one another: one scope, owner, visibility
/// and embedder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsolidationGroup {
    /// The scope.
    pub scope: String,
    /// The owner.
    pub owner: String,
    /// `shared` or empty (private).
    pub visibility: String,
    /// The embedder stamp of the vectors.
    pub model: String,
    /// Records in the group.
    pub records: u64,
}

/// A record consolidate may propose to supersede or to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsolidationCandidate {
    /// The record.
    pub record: Memory,
    /// Its stored vector.
    pub vector: Vec<f32>,
    /// [`record_digest`] as read: applying re-checks it.
    pub digest: String,
}

/// One supersession consolidate applies: `successor` gets `target` in its `supersedes`,
/// `target` gets `superseded_by = successor`. The digests are the records as the plan read
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsolidationLink {
    /// The record superseded (the older).
    pub target: RecordId,
    /// Its digest when planned.
    pub target_digest: String,
    /// The record that supersedes it (the newer).
    pub successor: RecordId,
    /// Its digest when planned.
    pub successor_digest: String,
}

/// A structural purge class (SPEC "Operator commands": `--class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PurgeClass {
    /// `archived_at` present.
    Archived,
    /// `superseded_by` present.
    Superseded,
    /// now at or past `not_after`.
    Expired,
}

/// Which records a purge selects. With classes, a record in any of them; the other fields
/// narrow the selection further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeCriteria {
    /// Structural classes (any of them); empty = the free-form path, any state.
    pub classes: Vec<PurgeClass>,
    /// One scope, or every scope.
    pub scope: Option<Scope>,
    /// One category.
    pub category: Option<Category>,
    /// Records carrying all of these tags.
    pub tags_all: Vec<String>,
    /// Records created before this instant.
    pub created_before: Option<Timestamp>,
}

/// Why a selected record is not deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum PurgeRefusal {
    /// `spine export` never wrote it out.
    NotExported,
    /// Changed since `spine export` wrote it out (to the candidate's `exported_to`).
    ChangedSinceExport,
    /// It supersedes records that stay: deleting it would leave them hidden behind a
    /// successor that no longer exists (a chain without a live head).
    SupersedesRecordsThatStay {
        /// Those records.
        predecessors: Vec<RecordId>,
    },
}

/// A record a purge selected, with the verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PurgeCandidate {
    /// Record id.
    pub id: RecordId,
    /// Short id.
    pub short_id: String,
    /// Scope.
    pub scope: String,
    /// Category.
    pub category: String,
    /// Creation time.
    pub created_at: Timestamp,
    /// States at the purge's `now`.
    pub states: Vec<State>,
    /// The export file it was last written to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exported_to: Option<String>,
    /// `None` when eligible for deletion.
    #[serde(skip_serializing_if = "Option::is_none", flatten)]
    pub refused: Option<PurgeRefusal>,
}

/// What happened to one listed record when a purge was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PurgeOutcome {
    /// Record id.
    pub id: RecordId,
    /// Deleted for good.
    pub deleted: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// The gate's digest of `m`: SHA-256 (hex) of its JSON without the access statistics,
/// keys sorted.
pub fn record_digest(m: &Memory) -> Result<String> {
    let mut v = serde_json::to_value(m).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    if let Some(o) = v.as_object_mut() {
        o.remove("access_count");
        o.remove("last_accessed_at");
    }
    let canonical = serde_json::to_string(&v).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(Sha256::digest(canonical.as_bytes()).iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectation_prefers_the_configured_embedder_else_the_majority() {
        let stamps = [
            VectorStamp { model: "a".into(), dims: 3, vectors: 5 },
            VectorStamp { model: "a".into(), dims: 4, vectors: 1 },
            VectorStamp { model: "b".into(), dims: 8, vectors: 2 },
        ];
        let e = VectorExpectation::choose(Some(("b", Some(9))), &stamps);
        assert_eq!((e.model.as_deref(), e.dims, e.configured), (Some("b"), Some(9), true));
        let e = VectorExpectation::choose(Some(("b", None)), &stamps);
        assert_eq!(e.dims, Some(8));
        let e = VectorExpectation::choose(Some(("c", None)), &stamps);
        assert_eq!((e.model.as_deref(), e.dims), (Some("c"), None));
        let e = VectorExpectation::choose(None, &stamps);
        assert_eq!((e.model.as_deref(), e.dims, e.configured), (Some("a"), Some(3), false));
        assert_eq!(VectorExpectation::choose(None, &[]).model, None);
    }

    #[test]
    fn check_names_are_their_json_names() {
        let all = [
            Check::PayloadCorrupt,
            Check::ColumnsMismatch,
            Check::DuplicateShortId,
            Check::MissingVector,
            Check::VectorCorrupt,
            Check::VectorDimension,
            Check::EmbedderStamp,
            Check::DanglingSuccessor,
            Check::BacklinkMissing,
            Check::PredecessorNotSuperseded,
            Check::PredecessorOtherSuccessor,
            Check::ChainCycle,
            Check::RuleSuperseded,
        ];
        for c in all {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
    }
}
