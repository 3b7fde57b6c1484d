//! The operator's contract with a backend: what the operator commands (`spine export`,
//! `import`, `prune-expired`, `migrate`, `summarize-missing`, `spine-review …`) need from a
//! store beyond [`Store`], and the types they exchange.
//!
//! A backend implements [`Store`] and [`OperatorStore`]; nothing else. The operator acts on
//! every owner's records: these methods are not access-checked, and record lookups and
//! archive / restore go through [`Store`] with [`crate::Access::operator`].
//!
//! Paged walks take `after`, the position (row number in insertion order: SQLite's
//! `rowid`, a sequence on a server database) of the last row of the previous page, so memory
//! stays bounded and an interrupted run continues where it stopped. Every write re-checks,
//! inside its own transaction, what the caller saw before writing, so a command running
//! beside a server either applies a change to the record as it was listed or skips it and
//! says why.
//!
//! What the operator commands decide is backend-neutral code every backend calls with what
//! it read, inside its own transactions: the purge's rules ([`purge_verdicts`] and the rest
//! of `purge.rs`), what a consolidation applies (`consolidation.rs`), a record's migration
//! ([`MigratePage::consider`]).

pub(crate) mod consolidation;
pub(crate) mod purge;
mod review;

use spine_core::{EpochSeconds, Memory, RecordId, SCHEMA_VERSION, Scope, Timestamp};

use crate::AuditEvent;

pub use purge::purge_verdicts;
pub(crate) use purge::{dedup, export_gate_verdict};
pub use review::{
    Check, ConsolidationCandidate, ConsolidationGroup, ConsolidationLink, PurgeCandidate,
    PurgeClass, PurgeCriteria, PurgeOutcome, PurgeRefusal, StateCounts, VectorExpectation,
    VectorStamp, VerifyPage, Violation, record_digest,
};

use crate::{Access, Embedding, Result, Store};

/// One page of a walk in insertion order: the records of `scope` (or of every scope) after
/// position `after` (the last row of the previous page; 0 to start), at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowidPage<'a> {
    /// Only this scope's records; `None`: every scope.
    pub scope: Option<&'a Scope>,
    /// The position of the previous page's last row.
    pub after: i64,
    /// The most rows the page holds.
    pub limit: usize,
}

/// Everything the operator commands need from a backend (see the module documentation).
pub trait OperatorStore: TransferStore + SummaryStore + ReviewStore {}

impl<T: TransferStore + SummaryStore + ReviewStore> OperatorStore for T {}

/// Bulk reads and writes: `spine export`, `import`, `prune-expired`, `migrate`, and the
/// extract-before-delete gate's bookkeeping.
pub trait TransferStore: Store {
    /// Records every change this store handle makes from now on under `access`'s
    /// attribution (an operator command: [`Access::operator`]`.audited(..)`): each write
    /// method below, and [`Store::set_vector`], writes one audit event per transaction it
    /// commits, in that transaction. Set once per handle; a second call is ignored.
    fn audit_as(&self, access: Access);

    /// How many records there are, in `scope` or in all.
    fn count_records(&self, scope: Option<&Scope>) -> Result<u64>;

    /// The records of `page`, in rowid order, with their vectors when `vectors`. One read
    /// transaction: a record and its vector are read together.
    fn export_page(&self, page: RowidPage<'_>, vectors: bool) -> Result<Vec<StoredRecord>>;

    /// For each id, whether a record with it exists.
    fn ids_present(&self, ids: &[RecordId]) -> Result<Vec<bool>>;

    /// Imports `records` in one transaction, in order: each is written with its payload
    /// verbatim unless its id is present already or its short id belongs to another record.
    /// Either every record of the batch is dealt with or, on an error, none is written.
    fn import_batch(&self, records: &[ImportRecord<'_>]) -> Result<Vec<ImportOutcome>>;

    /// Replaces (or adds) the vector of each record of `items` and its embedder stamp, in
    /// one transaction, leaving the records themselves untouched (`spine reindex`'s page):
    /// entry i is false when record i no longer exists (deleted meanwhile). Like
    /// [`Store::set_vector`], with one audit event for the transaction.
    fn set_vectors(&self, items: &[(RecordId, Embedding<'_>)]) -> Result<Vec<bool>>;

    /// Up to `limit` audit events written after position `after` (0: from the first), in the
    /// order they were written, only those of `scope` when given: each with its position,
    /// to pass as `after` for the next page (`spine export`).
    fn audit_page(
        &self,
        scope: Option<&Scope>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, AuditEvent)>>;

    /// Appends `events` in one transaction, in order, each unless an identical event (every
    /// field equal) is in the log already, so importing the same file again adds nothing:
    /// how many were appended (`spine import`).
    fn import_audit(&self, events: &[AuditEvent]) -> Result<u64>;

    /// Up to `limit` records after rowid `after`, in rowid order, whose `not_after` is at or
    /// before `cutoff` (expired at `cutoff`, SPEC States: half-open window).
    fn expired_page(
        &self,
        cutoff: EpochSeconds,
        after: i64,
        limit: usize,
    ) -> Result<Vec<ExpiredRecord>>;

    /// How many records are expired at `cutoff` (what [`OperatorStore::expired_page`] walks).
    fn count_expired(&self, cutoff: EpochSeconds) -> Result<u64>;

    /// Deletes each of `ids` that is still expired at `cutoff`, re-checked inside one
    /// transaction; entry i is true when record i was deleted (false: gone already, or its
    /// window was changed meanwhile). Tags and vector go with the record (cascade).
    fn delete_expired(&self, ids: &[RecordId], cutoff: EpochSeconds) -> Result<Vec<bool>>;

    /// The schema versions stamped on records, each with how many carry it (absent reads as
    /// 0), ascending.
    fn schema_versions(&self) -> Result<Vec<(u32, u64)>>;

    /// Brings up to `limit` records after rowid `after` to this binary's schema version, in
    /// one transaction (SPEC Versioning 2–7). A record below it is decoded with the current
    /// record type — which gives every key added since its version its default: the steps
    /// are additive only — re-encoded and stamped. A record at or above it is not
    /// touched, so a newer record keeps its payload and stamp. A record whose re-encoding
    /// would drop a key holding a value (written by a binary that knew more than this one)
    /// is kept as it is and reported. Only the payload changes: no indexed column, so no
    /// entry in the change log.
    fn migrate_page(&self, after: i64, limit: usize) -> Result<MigratePage>;

    /// A bulk load (`spine import`) begins: the store may defer work that is cheaper done
    /// once at the end (PostgreSQL: into an empty table, the HNSW index is built after the
    /// load instead of row by row). Searches stay exact meanwhile; nothing else changes.
    fn begin_bulk_load(&self) -> Result<()> {
        Ok(())
    }

    /// The bulk load ended (finished or stopped): whatever was deferred is done now, and the
    /// planner's statistics are refreshed where the backend has one.
    fn finish_bulk_load(&self) -> Result<()> {
        Ok(())
    }

    /// Records that `records` were written to `file` at `at`, as they are now.
    fn mark_exported(&self, records: &[Memory], file: &str, at: EpochSeconds) -> Result<()>;

    /// For each of `ids`, whether the record exists and was exported as it is now.
    fn exported_unchanged(&self, ids: &[RecordId]) -> Result<Vec<bool>>;
}

/// Records without a summary, and filling one in: `spine summarize-missing`.
pub trait SummaryStore: Store {
    /// How many records of every owner match `which` (the dry run's answer and the
    /// progress total).
    fn count_missing_summaries(&self, which: &MissingSummaries) -> Result<u64>;

    /// Up to `limit` records matching `which`, oldest first (created_at, then id), strictly
    /// after `after` in that order. Passing the last candidate of one page as `after` walks
    /// the matching records once, skipping those a previous page left without a summary.
    fn missing_summaries(
        &self,
        which: &MissingSummaries,
        after: Option<(Timestamp, RecordId)>,
        limit: usize,
    ) -> Result<Vec<SummaryCandidate>>;

    /// Stores `summary` on record `id` with summary_source=auto, stamping the schema
    /// version, only if the record still has no summary and its content is still
    /// `summarized_content`. False when it does not match (edited, summarized by someone
    /// else, or deleted meanwhile): nothing was written.
    fn set_auto_summary(
        &self,
        id: &RecordId,
        summarized_content: &str,
        summary: AutoSummary<'_>,
    ) -> Result<bool>;
}

/// `spine spine-review`: state counts, invariant checks, consolidation and purge.
pub trait ReviewStore: Store {
    /// Records per scope by state at `now`, in scope order; only `scope` when given.
    fn state_counts(&self, scope: Option<&Scope>, now: Timestamp) -> Result<Vec<StateCounts>>;

    /// The vectors of the records in `scope` (or the whole store) by stamp and length.
    fn vector_stamps(&self, scope: Option<&Scope>) -> Result<Vec<VectorStamp>>;

    /// Checks the records of `page`, in rowid order, each against one snapshot (a page is one
    /// read transaction, so a supersession committed meanwhile is seen whole or not at all).
    ///
    /// Short_id uniqueness is checked by [`OperatorStore::duplicate_short_ids`]. A
    /// `supersedes` entry naming a record that no longer exists is not a violation: deleting
    /// or purging a chain's old records is allowed and leaves the head valid.
    fn verify_page(&self, page: RowidPage<'_>, expect: &VectorExpectation) -> Result<VerifyPage>;

    /// Records of `scope` (or every scope) whose short_id another record (anywhere) shares.
    fn duplicate_short_ids(&self, scope: Option<&Scope>) -> Result<Vec<Violation>>;

    /// The groups consolidate compares, with their sizes: recall-visible, unwindowed,
    /// non-rule records with a vector, by scope, owner, visibility and embedder stamp.
    fn consolidation_groups(&self, scope: Option<&Scope>) -> Result<Vec<ConsolidationGroup>>;

    /// The records of group `g`, oldest first (created_at, then id). Records whose payload
    /// does not decode are left out (verify reports them).
    fn consolidation_candidates(
        &self,
        g: &ConsolidationGroup,
    ) -> Result<Vec<ConsolidationCandidate>>;

    /// Applies `links` in one transaction: each target gets `superseded_by`, each successor
    /// lists its targets in `supersedes` (links both ways, SPEC "Supersession rules").
    ///
    /// Every record involved is re-read first: a link is skipped (with the reason) when
    /// either record is gone, changed since it was planned (digest), or is a rule, or when
    /// its target already got a successor earlier in `links`. Entry i is `None` when link i
    /// was applied.
    fn apply_consolidation(&self, links: &[ConsolidationLink]) -> Result<Vec<Option<String>>>;

    /// The records `c` selects at `now`, each with its verdict: eligible (`refused` is
    /// `None`) only when it passes the extract-before-delete gate
    /// ([`OperatorStore::exported_unchanged`]) and deleting it leaves no chain without a
    /// live head. `gate_progress(n, total)` is called after each `n` of the `total` selected
    /// records are gate-checked.
    fn purge_plan(
        &self,
        c: &PurgeCriteria,
        now: Timestamp,
        gate_progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Vec<PurgeCandidate>>;

    /// Deletes for good those of `listed` (a plan's eligible records) that are still
    /// eligible, re-checking everything [`OperatorStore::purge_plan`] checked inside the
    /// delete transaction (selection by `c` at `now`, the gate, the chain rule). Deleting a
    /// record deletes its tags and vector with it (foreign keys). One outcome per listed
    /// record, in order.
    fn purge_apply(
        &self,
        listed: &[RecordId],
        c: &PurgeCriteria,
        now: Timestamp,
    ) -> Result<Vec<PurgeOutcome>>;
}

/// A record as stored: its payload byte for byte, and its vector as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRecord {
    /// Position in the table; pages continue after the last one seen.
    pub rowid: i64,
    /// The record's id column.
    pub id: String,
    /// The stored payload (the record's JSON), exactly as stored.
    pub body: String,
    /// The stored vector, when one exists and was asked for.
    pub vector: Option<StoredVector>,
}

/// A vector as stored: embedder identity, length and little-endian f32 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredVector {
    /// Embedder identity stamped on the vector.
    pub model: String,
    /// Number of components.
    pub dims: usize,
    /// `dims` little-endian f32 values.
    pub data: Vec<u8>,
}

/// One record to import: the payload to store verbatim, the same payload decoded (for the
/// indexed columns), and its vector.
#[derive(Debug, Clone)]
pub struct ImportRecord<'a> {
    /// The payload decoded; must be what `body` says.
    pub memory: Memory,
    /// The payload, stored exactly as given (keys this binary does not know survive).
    pub body: &'a str,
    /// Its vector; `None` stores the record without one (`spine reindex` adds it).
    pub vector: Option<Embedding<'a>>,
}

/// What importing one record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportOutcome {
    /// Written.
    Imported,
    /// A record with this id exists already; left alone.
    Present,
    /// Another record already uses this short id; not written (it would make the short id
    /// ambiguous, and a short id is never changed).
    ShortIdTaken(RecordId),
}

/// A record whose validity window has closed (SPEC States: expired).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredRecord {
    /// Position in the table.
    pub rowid: i64,
    /// Record id.
    pub id: RecordId,
    /// Its short id (as stored).
    pub short_id: String,
    /// Its scope.
    pub scope: String,
    /// When it expired.
    pub not_after: EpochSeconds,
}

/// What one page of `migrate_page` found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigratePage {
    /// Rowid of the last record looked at; `None` when there were no more.
    pub last_rowid: Option<i64>,
    /// Records re-encoded and stamped with this binary's version.
    pub migrated: Vec<RecordId>,
    /// Records already at this binary's version.
    pub current: u64,
    /// Records stamped newer than this binary's version, left exactly as they are (SPEC Versioning 3).
    pub newer: u64,
    /// Records left alone because re-encoding would drop data: id and the reason.
    pub kept: Vec<(String, String)>,
}

impl MigratePage {
    /// Looks at the record `id` stored as `body` (SPEC Versioning 2–7): counts it, or
    /// reports it kept, and returns the payload to store instead when it is to be migrated.
    pub(crate) fn consider(&mut self, id: String, body: &str) -> Result<Option<String>> {
        let mut m: Memory = match serde_json::from_str(body) {
            Ok(m) => m,
            Err(e) => {
                self.kept.push((id, format!("payload does not decode: {e}")));
                return Ok(None);
            }
        };
        if m.schema_version > SCHEMA_VERSION {
            self.newer += 1;
            return Ok(None);
        }
        if m.schema_version == SCHEMA_VERSION {
            self.current += 1;
            return Ok(None);
        }
        m.schema_version = SCHEMA_VERSION;
        let migrated = crate::codec::encode(&m)?;
        let dropped = dropped_keys(body, &migrated);
        if !dropped.is_empty() {
            self.kept.push((id, format!("re-encoding would drop {}", dropped.join(", "))));
            return Ok(None);
        }
        self.migrated.push(m.id);
        Ok(Some(migrated))
    }
}

/// Top-level keys of `before` that hold a value (anything but null, "", [], {}, 0 or
/// false) and are missing from `after`.
fn dropped_keys(before: &str, after: &str) -> Vec<String> {
    use serde_json::{Map, Value};
    let parse = |s: &str| serde_json::from_str::<Map<String, Value>>(s).unwrap_or_default();
    let (before, after) = (parse(before), parse(after));
    let holds_value = |v: &Value| match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    };
    before
        .iter()
        .filter(|(k, v)| holds_value(v) && !after.contains_key(*k))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Which records lack a summary: in one scope or all, created at or before an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingSummaries {
    /// One scope, or `None` for every scope.
    pub scope: Option<Scope>,
    /// Only records created at or before this instant (`--older-than`, and the start of the
    /// run, so records written while it runs are left to the next run).
    pub created_at_or_before: Timestamp,
}

/// A record to summarize, as read: its content is what the conditional write checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryCandidate {
    /// Record id.
    pub id: RecordId,
    /// Creation time (the sweep's order, with the id).
    pub created_at: Timestamp,
    /// The content to summarize.
    pub content: String,
}

/// A generated summary to store with summary_source=auto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoSummary<'a> {
    /// The summary text (non-empty; the caller bounds its length).
    pub summary: &'a str,
    /// The summarizer's model name (summary_model).
    pub model: &'a str,
    /// When the content was sent to an outside summarizer (summary_egress_at); `None` when
    /// it never left the process.
    pub egress_at: Option<Timestamp>,
}
