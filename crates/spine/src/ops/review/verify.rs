//! `spine-review verify`: the store's invariants, every violation listed.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use spine_core::Scope;
use spine_store::{SqliteStore, VectorExpectation, VectorStamp, Violation};

use super::scope_label;
use crate::embedder::{self, EmbedderArgs, EmbedderKind};
use crate::ops::{OutputArgs, Progress, count};

/// Records checked per read transaction.
const PAGE: usize = 500;

#[derive(Serialize)]
struct VerifyReport {
    scope: Option<String>,
    checked: u64,
    embedder: VectorExpectation,
    stamps: Vec<VectorStamp>,
    ok: bool,
    counts: BTreeMap<&'static str, u64>,
    violations: Vec<Violation>,
}

/// The configured embedder's identity and, when it knows it, its vector length: what
/// `spine serve` would use with the same flags. The built-in model's identity is fixed, so
/// it is not loaded (verify runs where its weights are not installed); an OpenAI-compatible
/// embedder is built from the flags (no request is made).
fn configured(model_dir: &Path, args: &EmbedderArgs) -> Result<(String, Option<usize>)> {
    if args.embedder == EmbedderKind::Builtin {
        return Ok((spine_embed::MODEL_ID.to_owned(), Some(spine_embed::DIMS)));
    }
    let e = embedder::build(args, model_dir)?;
    Ok((e.model_id().to_owned(), Some(e.dims()).filter(|d| *d > 0)))
}

/// Returns true when violations were found.
pub fn run(
    store: &SqliteStore,
    scope: Option<&Scope>,
    model_dir: &Path,
    args: &EmbedderArgs,
    output: OutputArgs,
) -> Result<bool> {
    let (model, dims) = configured(model_dir, args)?;
    let stamps = store.vector_stamps(scope)?;
    let expect = VectorExpectation::choose(Some((&model, dims)), &stamps);
    let mut progress = Progress::new("verifying", store.records_in(scope)?);
    let (mut checked, mut after, mut violations) = (0u64, 0i64, Vec::new());
    loop {
        let page = store.verify_page(scope, after, PAGE, &expect)?;
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
    let report = VerifyReport {
        scope: scope.map(|s| s.as_str().to_owned()),
        checked,
        embedder: expect,
        stamps,
        ok: violations.is_empty(),
        counts,
        violations,
    };
    output.print(&report, || {
        let dims =
            report.embedder.dims.map_or("length unknown".to_owned(), |d| format!("{d} dims"));
        println!(
            "checked {} in {} against {} ({dims})",
            count(report.checked, "record"),
            scope_label(scope),
            report.embedder.model.as_deref().unwrap_or("no embedder")
        );
        for v in &report.violations {
            println!(
                "{:<28} {} ({}, {}): {}",
                v.check.as_str(),
                v.id,
                v.short_id,
                v.scope,
                v.detail
            );
        }
        if report.ok {
            println!("no violations");
        } else {
            let by: Vec<String> = report.counts.iter().map(|(c, n)| format!("{c}: {n}")).collect();
            println!("{} ({})", count(report.violations.len() as u64, "violation"), by.join(", "));
        }
    })?;
    Ok(!report.ok)
}
