//! `spine migrate`: advances every record's schema_version to this binary's (SPEC
//! Versioning 2–7).
//!
//! Migration steps are additive only: a later version only adds keys, each with a default.
//! So one step covers every older version: decode the payload with the current record type
//! (which fills each key added since with its default), re-encode it, stamp the current
//! version. A record stamped with the current version or a newer one is never rewritten (a
//! newer record keeps keys this binary does not know, and its stamp). A record whose
//! re-encoding would drop a key that holds a value is left as it is and reported: migration
//! never loses data.
//!
//! Batched by rowid, one transaction per batch: an interrupted run keeps what it did and the
//! next run finishes the rest; a run with nothing left to do changes nothing and says so.
//! Only payloads change (no indexed column), so running servers need no index update.

use std::collections::BTreeMap;

use serde::Serialize;
use spine_core::SCHEMA_VERSION;
use spine_store::OperatorStore;

use crate::{Progress, Result};

/// A record migrate could not rewrite.
#[derive(Debug, Clone, Serialize)]
pub struct Kept {
    /// Record id.
    pub id: String,
    /// Why.
    pub reason: String,
}

/// What `spine migrate` did.
#[derive(Debug, Clone, Serialize)]
pub struct MigrateReport {
    /// The version records were brought to (this binary's).
    pub schema_version: u32,
    /// Records re-encoded and stamped by this run.
    pub migrated: u64,
    /// Records already at `schema_version`.
    pub already_current: u64,
    /// Records stamped newer, left exactly as they were.
    pub newer: u64,
    /// Records below `schema_version` that could not be rewritten without losing data.
    pub kept: Vec<Kept>,
    /// Records by stamped version before the run (absent counts as 0).
    pub versions_before: BTreeMap<u32, u64>,
    /// The same after.
    pub versions_after: BTreeMap<u32, u64>,
}

/// Brings every record to [`SCHEMA_VERSION`], `batch` per transaction.
pub fn migrate(
    store: &dyn OperatorStore,
    batch: usize,
    progress: &mut dyn Progress,
) -> Result<MigrateReport> {
    let versions_before: BTreeMap<u32, u64> = store.schema_versions()?.into_iter().collect();
    let mut report = MigrateReport {
        schema_version: SCHEMA_VERSION,
        migrated: 0,
        already_current: 0,
        newer: 0,
        kept: Vec::new(),
        versions_before,
        versions_after: BTreeMap::new(),
    };
    progress.start("migrating", report.versions_before.values().sum());
    let mut after = 0i64;
    loop {
        let page = store.migrate_page(after, batch.max(1))?;
        let Some(last) = page.last_rowid else { break };
        after = last;
        let seen = page.migrated.len() as u64 + page.current + page.newer + page.kept.len() as u64;
        report.migrated += page.migrated.len() as u64;
        report.already_current += page.current;
        report.newer += page.newer;
        report.kept.extend(page.kept.into_iter().map(|(id, reason)| Kept { id, reason }));
        progress.advance(seen);
    }
    progress.finish();
    report.versions_after = store.schema_versions()?.into_iter().collect();
    Ok(report)
}
