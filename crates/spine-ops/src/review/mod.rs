//! `spine spine-review`: state counts, invariants, consolidation, purge and archive /
//! restore of any owner's record, over the store contract.

pub mod consolidate;
pub mod purge;
pub mod verify;

use serde::Serialize;
use spine_core::{IdRef, Memory, RecordId, Scope, Timestamp};
use spine_store::{Access, OperatorStore};

pub use spine_service::Archival;

pub use spine_store::StateCounts;

use crate::{Error, Result};

/// Most ids per archive / restore call, as archive_memory (SPEC Limits).
pub use spine_core::limits::MAX_BATCH_IDS as MAX_IDS;
/// Records named in an `ambiguous` outcome, at most.
const MAX_CANDIDATES: usize = 50;

/// A record's content on one line, at most `max` characters.
pub fn preview(content: &str, max: usize) -> String {
    let line = content.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A record as listed by consolidate and archive / restore.
#[derive(Debug, Clone, Serialize)]
pub struct RecordView {
    /// Record id.
    pub id: RecordId,
    /// Its short id.
    pub short_id: String,
    /// Its scope.
    pub scope: String,
    /// Its category.
    pub category: String,
    /// When it was created.
    pub created_at: Timestamp,
    /// Its content on one line, at most 120 characters.
    pub content: String,
}

impl RecordView {
    /// The view of `m`.
    pub fn of(m: &Memory) -> Self {
        RecordView {
            id: m.id,
            short_id: m.short_id.to_string(),
            scope: m.scope.as_str().to_owned(),
            category: m.category.as_str().to_owned(),
            created_at: m.created_at,
            content: preview(&m.content, 120),
        }
    }
}

/// What `scan` counted.
#[derive(Debug, Clone, Serialize)]
pub struct ScanReport {
    /// The instant states were derived at.
    pub now: Timestamp,
    /// The scope counted; `None` for every scope.
    pub scope: Option<String>,
    /// All scopes together.
    pub total: StateCounts,
    /// Each scope.
    pub scopes: Vec<StateCounts>,
}

/// Records per scope by state at `now`.
pub fn scan(
    store: &dyn OperatorStore,
    scope: Option<&Scope>,
    now: Timestamp,
) -> Result<ScanReport> {
    let scopes = store.state_counts(scope, now)?;
    let mut total = StateCounts::default();
    for s in &scopes {
        total.add(s);
    }
    Ok(ScanReport { now, scope: scope.map(|s| s.as_str().to_owned()), total, scopes })
}

/// One `--id` of archive / restore.
#[derive(Debug, Clone, Serialize)]
pub struct ArchiveOutcome {
    /// The id as given.
    pub input: String,
    /// The resolved record's id; empty when the input named none.
    pub id: String,
    /// Its short id.
    pub short_id: String,
    /// Its scope.
    pub scope: String,
    /// `archived` / `already_archived`, `restored` / `not_archived`, `not_found`, `ambiguous`.
    pub outcome: Archival,
    /// On `ambiguous`: every record whose short_id the input matched.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<String>,
}

/// What archive / restore did, one outcome per `--id` in input order.
#[derive(Debug, Clone, Serialize)]
pub struct ArchiveReport {
    /// The outcomes.
    pub results: Vec<ArchiveOutcome>,
}

/// archive (`archive` = true, at `now`) or restore, like archive_memory / restore_memory for
/// any owner's record: one outcome per id in input order (`archived` / `already_archived`,
/// `restored` / `not_archived`, `not_found`, or `ambiguous` for a short_id several records
/// share), every found record flipped in one transaction. A malformed id refuses the call.
/// `operator` is [`Access::operator`], audited when the run is recorded (`spine-review
/// archive` / `restore`: the transaction that flips records writes its audit event).
pub fn set_archived(
    store: &dyn OperatorStore,
    operator: &Access,
    inputs: Vec<String>,
    archive: bool,
    now: Timestamp,
) -> Result<ArchiveReport> {
    if inputs.len() > MAX_IDS {
        return Err(Error::Invalid(format!(
            "--id given {} times; at most {MAX_IDS} per call",
            inputs.len()
        )));
    }
    let refs: Vec<IdRef> = inputs
        .iter()
        .map(|input| IdRef::parse("--id", input).map_err(|e| Error::Invalid(e.message)))
        .collect::<Result<_>>()?;
    let mut results = Vec::with_capacity(inputs.len());
    let mut found = Vec::new();
    for (input, r) in inputs.into_iter().zip(&refs) {
        let mut outcome = ArchiveOutcome {
            input,
            id: String::new(),
            short_id: String::new(),
            scope: String::new(),
            outcome: Archival::NotFound,
            candidates: Vec::new(),
        };
        match store.matching(operator, r, MAX_CANDIDATES)?.as_slice() {
            [] => {}
            [m] => {
                outcome.id = m.id.to_string();
                outcome.short_id = m.short_id.to_string();
                outcome.scope = m.scope.as_str().to_owned();
                found.push((results.len(), m.id));
            }
            many => {
                outcome.outcome = Archival::Ambiguous;
                outcome.candidates = many.iter().map(|m| m.id.to_string()).collect();
            }
        }
        results.push(outcome);
    }
    let ids: Vec<RecordId> = found.iter().map(|(_, id)| *id).collect();
    let at = archive.then(|| now.to_epoch_seconds());
    let outcomes = spine_service::flip_archived(store, operator, &ids, at)?;
    for ((row, _), outcome) in found.into_iter().zip(outcomes) {
        results[row].outcome = outcome;
    }
    Ok(ArchiveReport { results })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_one_line_and_bounded() {
        assert_eq!(preview("a\n  b\tc", 10), "a b c");
        assert_eq!(preview("abcdefghij", 5), "abcd…");
        assert_eq!(preview("ééééé", 5), "ééééé");
    }
}
