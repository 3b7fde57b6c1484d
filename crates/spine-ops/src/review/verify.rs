//! `spine-review verify`: the store's invariants, every violation listed.

use std::collections::BTreeMap;

use serde::Serialize;
use spine_core::Scope;
use spine_store::{OperatorStore, RowidPage, VectorExpectation, VectorStamp, Violation};

use crate::{Progress, Result};

/// Records checked per read transaction.
const PAGE: usize = 500;

/// What verify found.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The scope checked; `None` for every scope.
    pub scope: Option<String>,
    /// Records checked.
    pub checked: u64,
    /// The embedder every vector must come from, and its length.
    pub embedder: VectorExpectation,
    /// The vectors found, by stamp and length.
    pub stamps: Vec<VectorStamp>,
    /// True when nothing is wrong.
    pub ok: bool,
    /// Violations by check.
    pub counts: BTreeMap<&'static str, u64>,
    /// Every violation.
    pub violations: Vec<Violation>,
}

/// Checks every record of `scope` (or the store) against the invariants; vectors against
/// `configured` (the embedder identity and length a server with the same flags would use).
pub fn verify(
    store: &dyn OperatorStore,
    scope: Option<&Scope>,
    configured: (&str, Option<usize>),
    progress: &mut dyn Progress,
) -> Result<VerifyReport> {
    let stamps = store.vector_stamps(scope)?;
    let expect = VectorExpectation::choose(Some(configured), &stamps);
    progress.start("verifying", store.count_records(scope)?);
    let (mut checked, mut after, mut violations) = (0u64, 0i64, Vec::new());
    loop {
        let page = store.verify_page(RowidPage { scope, after, limit: PAGE }, &expect)?;
        let Some(last) = page.last_rowid else { break };
        checked += page.checked;
        progress.advance(page.checked);
        violations.extend(page.violations);
        after = last;
    }
    progress.finish();
    violations.extend(store.duplicate_short_ids(scope)?);
    let mut counts = BTreeMap::new();
    for v in &violations {
        *counts.entry(v.check.as_str()).or_insert(0) += 1;
    }
    Ok(VerifyReport {
        scope: scope.map(|s| s.as_str().to_owned()),
        checked,
        embedder: expect,
        stamps,
        ok: violations.is_empty(),
        counts,
        violations,
    })
}
