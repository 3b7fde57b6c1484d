//! Persistence for Spine: the [`Store`] trait, its embedded SQLite backend and its
//! PostgreSQL + pgvector backend.
//!
//! The store keeps records, their tags and their vectors, and answers the filtered queries
//! the service needs. It makes no business decisions except one, by design: **authorization
//! is enforced inside every read query** (DESIGN "Authorization"). Every read takes an
//! [`Access`], and the owner predicate is part of the SQL, so nothing another owner keeps
//! privately can reach a count, a scope list or a result.
//!
//! Key design decision: the record's full JSON is stored as one payload column, with the
//! columns that queries filter on (owner, scope, category, created_at, the state markers)
//! copied beside it. The payload is the source of truth; the columns are rebuilt from it on
//! every write, in the same transaction.
#![deny(missing_docs)]

pub mod audit;
mod checks;
mod codec;
mod fields;
mod nearest;
mod operator;
mod postgres;
mod predicate;
mod selection;
mod sqlite;

use std::sync::Arc;

use spine_core::audit::Audit;
use spine_core::{
    Caller, Category, DiscoveryKind, EpochSeconds, IdRef, Memory, RecordId, Scope, ShortId,
    Timestamp,
};

pub use audit::{AuditEvent, AuditQuery};
pub use codec::Body;
pub use operator::{
    AutoSummary, Check, ConsolidationCandidate, ConsolidationGroup, ConsolidationLink,
    ExpiredRecord, ImportOutcome, ImportRecord, MigratePage, MissingSummaries, OperatorStore,
    PurgeCandidate, PurgeClass, PurgeCriteria, PurgeOutcome, PurgeRefusal, ReviewStore, RowidPage,
    StateCounts, StoredRecord, StoredVector, SummaryCandidate, SummaryStore, TransferStore,
    VectorExpectation, VectorStamp, VerifyPage, Violation, purge_verdicts, record_digest,
};
pub use postgres::PgStore;
pub use selection::{Order, Page, Selection, Shared};
pub use sqlite::{DB_FILE, Layout, SqliteStore};

/// A storage failure. Never caused by caller input: the service validates before writing.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database reported an error.
    #[error("database error: {0}")]
    Database(#[from] rusqlite::Error),
    /// A stored payload could not be decoded.
    #[error("corrupt record payload: {0}")]
    Corrupt(String),
    /// The data directory could not be prepared, or the database URL is unusable.
    #[error("{0}")]
    Io(String),
    /// PostgreSQL reported an error: its message and its SQLSTATE code.
    #[error("database error: {message} ({sqlstate})")]
    Postgres {
        /// The server's message.
        message: String,
        /// The five-character SQLSTATE, e.g. `53100` (disk_full).
        sqlstate: String,
    },
    /// The database cannot be reached right now (connection refused, lost or timed out);
    /// the call may be retried.
    #[error("{0}")]
    Unavailable(String),
    /// A write could not be made durable: flushing the log to disk failed, and the store
    /// refuses writes until it has made what it committed durable another way.
    #[error("{0}")]
    NotDurable(String),
}

impl StoreError {
    /// When the failure is the machine's rather than the request's — a full disk, a
    /// read-only data directory or database, a failing device — what it is, in words: the
    /// call may succeed once the operator has fixed it.
    pub fn resource_fault(&self) -> Option<&'static str> {
        use rusqlite::ErrorCode as C;
        match self {
            StoreError::Database(rusqlite::Error::SqliteFailure(e, _)) => match e.code {
                C::DiskFull => Some("the disk holding the data directory is full"),
                C::ReadOnly => Some("the data directory or database is read-only"),
                C::SystemIoFailure => Some(
                    "writing to the data directory failed (a full disk, a file-size limit or a \
                     failing device)",
                ),
                C::CannotOpen => Some("the database file cannot be opened"),
                C::PermissionDenied => Some("the database file may not be written"),
                _ => None,
            },
            // SQLSTATE class 53: insufficient resources (53100 disk_full, 53200 out of
            // memory); 25006: a read-only transaction (a standby, a read-only database).
            StoreError::Postgres { sqlstate, .. } => match sqlstate.as_str() {
                "53100" => Some("the database server's disk is full"),
                "25006" => Some("the database is read-only"),
                s if s.starts_with("53") => Some("the database server is out of resources"),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Who is reading, as the read predicate needs it (SPEC Authentication 4).
///
/// - authenticated: own records plus `shared` records;
/// - anonymous: only ownerless (empty-owner) records;
/// - `owner_only`: own records alone (writes, list_scheduled).
///
/// Records with no owner key (legacy) match none of these.
///
/// The operator (`spine` operator commands, run by whoever holds the data directory or the
/// database URL) is one more kind of reader: [`Access::operator`] reads and changes every
/// owner's records, legacy ones included, through the same trait methods.
///
/// An access may also carry the attribution of the call it serves ([`audit`]): the store
/// then writes the call's audit event with each change it makes through this access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    owner: String,
    include_shared: bool,
    every_owner: bool,
    by: Option<By>,
}

/// Who a change is recorded as made by: the caller's actor and the call's attribution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct By {
    pub(crate) actor: String,
    pub(crate) audit: Arc<Audit>,
}

impl By {
    fn of(caller: &Caller) -> Option<By> {
        caller.audit().map(|a| By { actor: caller.actor().to_owned(), audit: a.clone() })
    }
}

impl Access {
    /// The read access of `caller`.
    pub fn read(caller: &Caller) -> Self {
        Access {
            owner: caller.owner().to_owned(),
            include_shared: caller.is_authenticated(),
            every_owner: false,
            by: By::of(caller),
        }
    }

    /// Only the records `caller` owns.
    pub fn owned(caller: &Caller) -> Self {
        Access {
            owner: caller.owner().to_owned(),
            include_shared: false,
            every_owner: false,
            by: By::of(caller),
        }
    }

    /// The operator: every record of every owner, legacy records (no owner key) included.
    pub fn operator() -> Self {
        Access { owner: String::new(), include_shared: true, every_owner: true, by: None }
    }

    /// This access, its changes recorded in the audit log under `audit` as made by `actor`
    /// (an operator command: its own name, the operator's login).
    pub fn audited(mut self, actor: impl Into<String>, audit: Audit) -> Self {
        self.by = Some(By { actor: actor.into(), audit: Arc::new(audit) });
        self
    }

    /// The attribution changes through this access are recorded under, if any.
    pub(crate) fn attribution(&self) -> Option<&By> {
        self.by.as_ref()
    }

    /// Notes that the audit event of this access's call was committed with its change.
    pub(crate) fn recorded(&self) {
        if let Some(by) = &self.by {
            by.audit.mark_recorded();
        }
    }

    /// The audit attribution this access carries, if any (an operator command reads it back
    /// to append the event of a run that changed nothing).
    pub fn audit(&self) -> Option<&Audit> {
        self.by.as_ref().map(|b| &*b.audit)
    }

    /// The owner key this access matches (empty for the operator).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether this is the operator's access (no owner predicate at all).
    pub fn is_operator(&self) -> bool {
        self.every_owner
    }
}

/// Which scopes a query spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeFilter {
    /// One scope.
    One(Scope),
    /// Every readable scope (cross_spine).
    All,
}

/// The hard pre-filters shared by search and list (SPEC search_memory arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Which scopes.
    pub scope: ScopeFilter,
    /// Records carrying ALL of these tags.
    pub tags_all: Vec<String>,
    /// Records in ANY of these categories; `None` = no filter, `Some(empty)` = nothing
    /// passes (every category asked for is unknown: SPEC search_memory, an unknown category
    /// simply matches nothing). [`Filter::categories_named`] builds it from wire names.
    pub categories_any: Option<Vec<Category>>,
    /// Records in none of these categories.
    pub categories_none: Vec<Category>,
    /// created_at >= this (inclusive).
    pub created_after: Option<Timestamp>,
    /// created_at < this (exclusive).
    pub created_before: Option<Timestamp>,
    /// Only records with a validity window (list_scheduled).
    pub windowed_only: bool,
    /// Exclude archived and superseded records (list_scheduled).
    pub exclude_archived_superseded: bool,
    /// Discovery records of this kind only (`map` / `fact`).
    pub kind: Option<DiscoveryKind>,
}

impl Filter {
    /// A filter that matches everything in `scope`.
    pub fn new(scope: ScopeFilter) -> Self {
        Filter {
            scope,
            tags_all: vec![],
            categories_any: None,
            categories_none: vec![],
            created_after: None,
            created_before: None,
            windowed_only: false,
            exclude_archived_superseded: false,
            kind: None,
        }
    }

    /// `categories_any` from the names a caller gave: none = no filter; otherwise the known
    /// ones, an unknown name matching nothing (SPEC search_memory).
    pub fn categories_named(names: &[String]) -> Option<Vec<Category>> {
        if names.is_empty() {
            return None;
        }
        Some(names.iter().filter_map(|n| Category::parse("categories", n).ok()).collect())
    }
}

/// The recall gate as a query condition: only records active at `now` pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Every state passes (used to count what the gate hid).
    Off,
    /// Only active records pass.
    ActiveAt(Timestamp),
    /// Only scheduled records (not expired, not_before in the future) pass.
    ScheduledAt(Timestamp),
    /// Only expired records pass.
    ExpiredAt(Timestamp),
    /// Scheduled or expired records pass.
    ScheduledOrExpiredAt(Timestamp),
    /// Only archived records pass (whatever else they are).
    Archived,
    /// Only superseded records pass (whatever else they are).
    Superseded,
}

/// Position in a listing: the last row of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// created_at of the last row seen.
    pub created_at: Timestamp,
    /// id of the last row seen (tie-break).
    pub id: RecordId,
}

/// A vector to store beside a record, with the embedder that produced it.
#[derive(Debug, Clone, Copy)]
pub struct Embedding<'a> {
    /// Embedder identity (e.g. `builtin:all-MiniLM-L6-v2`).
    pub model: &'a str,
    /// The vector.
    pub vector: &'a [f32],
}

/// A nearest-neighbour request: the records `access` may read that match `filter` and have
/// a vector from `model`, nearest `vector` by cosine.
#[derive(Debug, Clone, Copy)]
pub struct NearestQuery<'a> {
    /// Who reads (the owner predicate).
    pub access: &'a Access,
    /// The hard pre-filters.
    pub filter: &'a Filter,
    /// Embedder id the vectors must come from.
    pub model: &'a str,
    /// The query vector.
    pub vector: &'a [f32],
    /// The time the recall gate is evaluated at.
    pub now: Timestamp,
    /// How many nearest records of any state to return (0 = none).
    pub any: usize,
    /// How many nearest active (recall-visible) records to return.
    pub active: usize,
    /// A record never to return (related_memories' anchor).
    pub exclude: Option<RecordId>,
}

/// A record stored next to an anchor ([`Store::adjacent`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Adjacent {
    /// The anchor it is next to.
    pub anchor: RecordId,
    /// The record's id.
    pub id: RecordId,
    /// The record with its vector; `None` for one the caller holds already (`known`).
    pub record: Option<(Body, Vec<f32>)>,
}

/// A record near the query.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbour {
    /// Record id.
    pub id: RecordId,
    /// Exact cosine similarity to the query vector.
    pub score: f32,
    /// Its states at the query's `now`; empty means active.
    pub states: Vec<spine_core::State>,
    /// The record itself when it is active (recall-visible), read in the same snapshot as
    /// the scan that proposed it; `None` for a record the gate hides (only its states are
    /// needed, SPEC search rule 4).
    pub record: Option<Body>,
}

/// A tag and how many records carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagCount {
    /// The tag.
    pub tag: String,
    /// Number of records.
    pub count: u64,
}

/// Why a supersession could not stamp its targets (SPEC supersede_memory rejections), each
/// list in the order the targets were given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SupersedeRejection {
    /// Targets not owned by the caller or gone.
    pub not_found: Vec<RecordId>,
    /// Targets that already have a successor.
    pub already_superseded: Vec<RecordId>,
    /// Targets that are rules.
    pub rules: Vec<RecordId>,
}

impl SupersedeRejection {
    /// True when nothing stands in the way.
    pub fn is_empty(&self) -> bool {
        self.not_found.is_empty() && self.already_superseded.is_empty() && self.rules.is_empty()
    }

    /// What stands in the way of stamping each of `targets`, given `now(t)`: `t` as the
    /// transaction reads it — `None` when not owned or gone, else its category and whether
    /// it has a successor.
    pub(crate) fn of(
        targets: &[RecordId],
        mut now: impl FnMut(&RecordId) -> Result<Option<(String, bool)>>,
    ) -> Result<Self> {
        let mut rejection = SupersedeRejection::default();
        for t in targets {
            match now(t)? {
                None => rejection.not_found.push(*t),
                Some((category, _)) if category == Category::Rule.as_str() => {
                    rejection.rules.push(*t)
                }
                Some((_, true)) => rejection.already_superseded.push(*t),
                Some(_) => {}
            }
        }
        Ok(rejection)
    }
}

/// A remembered supersede_memory call, keyed by (owner, key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyEntry {
    /// The client's idempotency key.
    pub key: String,
    /// Hash of the new content and the sorted target set.
    pub fingerprint: String,
    /// The record the original call created.
    pub id: RecordId,
    /// Its short id.
    pub short_id: ShortId,
}

/// The persistence operations the service needs.
pub trait Store: Send + Sync {
    /// The engine, as OpenTelemetry's `db.system.name` names it: `sqlite`, `postgresql`.
    fn db_system(&self) -> &'static str;

    /// Inserts a new record with its vector. The record's id and short_id must be new.
    /// `access` is who writes it: its audit attribution, if any, is recorded with it (the
    /// record's owner is `m.owner`).
    fn insert(&self, access: &Access, m: &Memory, embedding: Embedding<'_>) -> Result<()>;

    /// Inserts many new records in one transaction (imports and benchmarks).
    fn insert_batch(&self, items: &[(Memory, Embedding<'_>)]) -> Result<()>;

    /// Whether any record (readable or not) already uses this short id.
    fn short_id_taken(&self, short: &ShortId) -> Result<bool>;

    /// A cheap read of the records table: `Ok` when the store answers now (a server's
    /// `/readyz`); PostgreSQL's within its call timeout.
    fn ping(&self) -> Result<()>;

    /// Every record `access` can read that `id` names, at most `limit`, ordered by id: one
    /// for a full id, possibly several for a short id (the operator lists them; a caller
    /// treats several as none, see [`Store::resolve`]).
    fn matching(&self, access: &Access, id: &IdRef, limit: usize) -> Result<Vec<Memory>>;

    /// Resolves an id among the records `access` can read. An ambiguous short id (several
    /// readable matches) resolves to nothing, exactly like a missing one (SPEC Errors 2).
    fn resolve(&self, access: &Access, id: &IdRef) -> Result<Option<Memory>> {
        let mut found = self.matching(access, id, 2)?;
        Ok(if found.len() == 1 { found.pop() } else { None })
    }

    /// [`Store::resolve`] of each id, in order. A server database reads them all in one
    /// round trip.
    fn resolve_each(&self, access: &Access, ids: &[IdRef]) -> Result<Vec<Option<Memory>>> {
        ids.iter().map(|id| self.resolve(access, id)).collect()
    }

    /// Replaces a record's payload (same id), and its vector when given. Only when the
    /// stored owner still equals `access`'s owner; returns false when no row matched.
    fn replace(
        &self,
        access: &Access,
        m: &Memory,
        embedding: Option<Embedding<'_>>,
    ) -> Result<bool>;

    /// Counts a strong-signal touch on a record: access_count + 1, last_accessed_at = `at`.
    /// Edits only those two keys of the payload, so a touch never rewrites a record written
    /// by a newer binary from this binary's structure (SPEC Versioning 5). The embedded
    /// engine commits it without waiting for the disk (`sqlite` module docs).
    fn touch(&self, id: &RecordId, at: Timestamp) -> Result<()>;

    /// A read that counts: [`Store::resolve`], then [`Store::touch`] of what it found. The
    /// record comes back as it was before the touch, with the touch's resource fault when the
    /// store cannot write (a full disk, a read-only database): the read stays a read, the
    /// access count just misses it. A server database does both in one round trip.
    fn resolve_touching(
        &self,
        access: &Access,
        id: &IdRef,
        at: Timestamp,
    ) -> Result<Option<(Memory, Option<StoreError>)>> {
        let Some(m) = self.resolve(access, id)? else { return Ok(None) };
        match self.touch(&m.id, at) {
            Ok(()) => Ok(Some((m, None))),
            Err(e) if e.resource_fault().is_some() => Ok(Some((m, Some(e)))),
            Err(e) => Err(e),
        }
    }

    /// Deletes one record owned by `access`; false when none matched. Every write method
    /// that changes a record writes the audit event of `access`'s attribution with it.
    fn delete(&self, access: &Access, id: &RecordId) -> Result<bool>;

    /// Deletes every record in `scope` owned by `access`; returns how many.
    fn delete_scope(&self, access: &Access, scope: &Scope) -> Result<u64>;

    /// The union of the `q.any` nearest records of any state and the `q.active` nearest
    /// active ones, best first (score descending, then id descending). The filters are exact;
    /// the nearest are found through the in-memory index (see `index.rs`), whose quantised
    /// stages come close to an exact scan (recall@10 against one: docs/performance.md,
    /// "Search at scale"); scores are exact cosines.
    /// Active neighbours carry their record, read in the same read transaction as the scan,
    /// so a search never sees a record half-way through a concurrent change.
    fn nearest(&self, q: &NearestQuery<'_>) -> Result<Vec<Neighbour>>;

    /// Records by id, in the order given; ids that no longer exist are skipped. Callers
    /// pass only ids that an access-checked query returned.
    fn get_many(&self, ids: &[RecordId]) -> Result<Vec<Memory>>;

    /// One page of the records of `sel`.
    fn list(&self, sel: Selection<'_>, page: Page) -> Result<Vec<Memory>>;

    /// Two pages at once, [`Store::list`] of each. A server database gets both statements
    /// before it answers either (one round trip instead of two).
    fn list_two(
        &self,
        first: (Selection<'_>, Page),
        second: (Selection<'_>, Page),
    ) -> Result<(Vec<Memory>, Vec<Memory>)> {
        Ok((self.list(first.0, first.1)?, self.list(second.0, second.1)?))
    }

    /// How many records `sel` takes, exactly.
    fn count(&self, sel: Selection<'_>) -> Result<u64>;

    /// Distinct readable scopes holding records matching `filter` (gate ignored), sorted,
    /// at most `limit`.
    fn scopes(&self, access: &Access, filter: &Filter, limit: usize) -> Result<Vec<String>>;

    /// Tag counts over the records of `sel`; count descending then tag ascending, at most
    /// `limit`.
    fn tag_counts(&self, sel: Selection<'_>, limit: usize) -> Result<Vec<TagCount>>;

    /// Stores `new` and stamps `superseded_by = new.id` on every target, in one transaction,
    /// recording `idempotency` (when given) in the same transaction. The targets are
    /// re-checked inside the transaction: each must be owned by `access`, have no successor
    /// and not be a rule; otherwise nothing is written and the rejection names every
    /// offending target.
    fn supersede(
        &self,
        access: &Access,
        new: &Memory,
        embedding: Embedding<'_>,
        targets: &[RecordId],
        idempotency: Option<&IdempotencyEntry>,
    ) -> Result<std::result::Result<(), SupersedeRejection>>;

    /// The supersede_memory call `access`'s owner made earlier with `key`, if any.
    fn idempotency(&self, access: &Access, key: &str) -> Result<Option<IdempotencyEntry>>;

    /// Archives (`at` = Some) or restores (`at` = None) each record owned by `access`, in
    /// one transaction, in order. Entry i is true when record i changed (it was not archived
    /// / was archived); false when it was already in the wanted state or is not owned.
    fn set_archived(
        &self,
        access: &Access,
        ids: &[RecordId],
        at: Option<EpochSeconds>,
    ) -> Result<Vec<bool>>;

    /// Readable records passing `gate`, other than `exclude`, that have something of
    /// `shared` (a tag, or a citation of the same `kind` and `ref`), most recent first, at
    /// most `limit`.
    fn sharing(
        &self,
        access: &Access,
        gate: Gate,
        exclude: &RecordId,
        shared: Shared<'_>,
        limit: usize,
    ) -> Result<Vec<Memory>>;

    /// The `radius` records stored right before and the `radius` right after each of
    /// `anchors` in the anchor's own scope, by `created_at` then id, among the records of
    /// `sel` (its scope filter ignored: each anchor's scope is used) that carry a vector
    /// from `model`: at most `2 × radius` per anchor, each with its vector unless `known`
    /// says the caller holds it already (the search's pool: neighbours are often in it, and
    /// decoding them again was most of this read), all from one snapshot. Search's neighbour step
    /// (`spine_service::rank`): a turn of a conversation is often answered, or explained, by
    /// the records stored next to it.
    fn adjacent(
        &self,
        sel: Selection<'_>,
        anchors: &[&Memory],
        model: &str,
        radius: usize,
        known: &dyn Fn(&RecordId) -> bool,
    ) -> Result<Vec<Adjacent>>;

    /// The stored vector of a record, when it was produced by `model`. Callers pass only ids
    /// that an access-checked query returned.
    fn vector(&self, id: &RecordId, model: &str) -> Result<Option<Vec<f32>>>;

    /// The embedder identities stamped on stored vectors, each with how many vectors carry
    /// it, sorted by identity. The server compares them with its configured embedder at
    /// start-up (docs/embeddings.md). Not access-checked: an operator view of the store.
    fn embedder_models(&self) -> Result<Vec<(String, u64)>>;

    /// Up to `limit` records, of every owner, whose vector is missing or was produced by an
    /// embedder other than `model`: `(id, content)`, ordered by id, strictly after `after`.
    /// Passing the last id of one page as `after` walks the store once; `spine reindex`
    /// resumes by simply asking again (re-embedded records no longer match).
    fn needing_embedding(
        &self,
        model: &str,
        after: Option<RecordId>,
        limit: usize,
    ) -> Result<Vec<(RecordId, String)>>;

    /// Replaces (or adds) the vector of record `id` and its embedder stamp, leaving the
    /// record itself untouched; false when no such record exists (deleted meanwhile).
    fn set_vector(&self, id: &RecordId, embedding: Embedding<'_>) -> Result<bool>;

    /// Appends `event` to the audit log on its own: the event of a call that changed nothing
    /// (refused, not found, nothing to do). A change's event is written with the change
    /// ([`audit`]).
    fn append_audit(&self, event: &AuditEvent) -> Result<()>;

    /// The audit events `q` selects, newest first, at most `q.limit`. Not access-checked: an
    /// operator view of the store.
    fn audit_events(&self, q: &AuditQuery) -> Result<Vec<AuditEvent>>;

    /// Removes the audit events written before `before`, the only way events go: how many.
    fn prune_audit(&self, before: Timestamp) -> Result<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(sqlstate: &str) -> StoreError {
        StoreError::Postgres { message: "could not extend file".into(), sqlstate: sqlstate.into() }
    }

    /// PostgreSQL's errors are classified by their SQLSTATE, not by their text.
    #[test]
    fn postgres_resource_faults_are_read_from_the_sqlstate() {
        assert_eq!(pg("53100").resource_fault(), Some("the database server's disk is full"));
        assert_eq!(pg("53200").resource_fault(), Some("the database server is out of resources"));
        assert_eq!(pg("25006").resource_fault(), Some("the database is read-only"));
        assert_eq!(pg("23505").resource_fault(), None);
        assert_eq!(pg("42P01").resource_fault(), None);
        // A message that merely mentions a class-53 code is not one.
        let e = StoreError::Postgres {
            message: "value (53100) too long".into(),
            sqlstate: "22001".into(),
        };
        assert_eq!(e.resource_fault(), None);
        assert_eq!(pg("53100").to_string(), "database error: could not extend file (53100)");
    }
}
