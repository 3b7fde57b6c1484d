//! `spine-review verify`: the store's invariants, every violation listed.

use std::path::Path;

use anyhow::Result;
use spine_core::Scope;
use spine_ops::OperatorStore;
use spine_ops::review::verify::verify;

use super::scope_label;
use crate::embedder::{self, EmbedderArgs, EmbedderKind};
use crate::ops::{OutputArgs, Progress, count};

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
    store: &dyn OperatorStore,
    scope: Option<&Scope>,
    model_dir: &Path,
    args: &EmbedderArgs,
    output: OutputArgs,
) -> Result<bool> {
    let (model, dims) = configured(model_dir, args)?;
    let report = verify(store, scope, (&model, dims), &mut Progress::default())?;
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
