//! `spine prune-expired`: reclaims lapsed records (SPEC "Operator commands").
//!
//! Lapsed means expired: the validity window has closed, `not_after` at or before now
//! minus `--older-than` (SPEC States: a record whose `not_after` equals the instant is
//! expired). Nothing else is lapsed: archived and superseded records were hidden on purpose
//! and are kept until `spine spine-review purge` deletes them behind the export gate; a
//! scheduled record has yet to start. An expired record is deleted whatever its other
//! states, for every owner.
//!
//! Without `--apply` nothing changes: the preview lists, by scope, every record that would
//! go. With it, the same walk deletes them page by page, each record re-checked inside the
//! delete transaction (one whose window was changed meanwhile stays, and is reported).
//! "Now" is taken once, when the command starts.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use spine_core::{EpochSeconds, Timestamp};
use spine_store::{ExpiredRecord, OperatorStore};

use crate::{Error, Progress, Result};

/// Records listed (and deleted) per page.
const PAGE: usize = 500;

/// One expired record.
#[derive(Debug, Clone, Serialize)]
pub struct Expired {
    /// Record id.
    pub id: String,
    /// Its short id.
    pub short_id: String,
    /// Its scope.
    pub scope: String,
    /// When it expired (RFC 3339).
    pub not_after: String,
}

impl From<&ExpiredRecord> for Expired {
    fn from(r: &ExpiredRecord) -> Self {
        Expired {
            id: r.id.to_string(),
            short_id: r.short_id.clone(),
            scope: r.scope.clone(),
            not_after: r.not_after.to_rfc3339(),
        }
    }
}

/// What `spine prune-expired` found, or did.
#[derive(Debug, Clone, Serialize)]
pub struct PruneReport {
    /// Whether records were deleted (`--apply`).
    pub applied: bool,
    /// Records whose `not_after` is at or before this instant are expired (RFC 3339).
    pub cutoff: String,
    /// The grace period, in seconds.
    pub older_than_secs: u64,
    /// Records that would be deleted (preview) or were deleted (apply).
    pub total: u64,
    /// `total` by scope.
    pub by_scope: BTreeMap<String, u64>,
    /// Those records, in table order.
    pub records: Vec<Expired>,
    /// Apply only: records listed but not deleted, because their window changed or they
    /// were deleted meanwhile.
    pub changed_meanwhile: Vec<Expired>,
}

/// The records expired at `now - older_than`, deleted when `apply`.
pub fn prune(
    store: &dyn OperatorStore,
    apply: bool,
    older_than: Duration,
    now: Timestamp,
    progress: &mut dyn Progress,
) -> Result<PruneReport> {
    let grace = i64::try_from(older_than.as_micros())
        .map_err(|_| Error::Invalid("--older-than is too long".into()))?;
    let cutoff: EpochSeconds =
        Timestamp::from_micros(now.as_micros().saturating_sub(grace)).to_epoch_seconds();
    let mut report = PruneReport {
        applied: apply,
        cutoff: cutoff.to_rfc3339(),
        older_than_secs: older_than.as_secs(),
        total: 0,
        by_scope: BTreeMap::new(),
        records: Vec::new(),
        changed_meanwhile: Vec::new(),
    };
    let label = if apply { "pruning expired records" } else { "listing expired records" };
    progress.start(label, store.count_expired(cutoff)?);
    let mut after = 0i64;
    loop {
        let page = store.expired_page(cutoff, after, PAGE)?;
        let Some(last) = page.last() else { break };
        after = last.rowid;
        let done = if apply {
            let ids: Vec<_> = page.iter().map(|r| r.id).collect();
            store.delete_expired(&ids, cutoff)?
        } else {
            vec![true; page.len()]
        };
        for (r, done) in page.iter().zip(done) {
            if done {
                report.total += 1;
                *report.by_scope.entry(r.scope.clone()).or_default() += 1;
                report.records.push(r.into());
            } else {
                report.changed_meanwhile.push(r.into());
            }
        }
        progress.advance(page.len() as u64);
    }
    progress.finish();
    Ok(report)
}
