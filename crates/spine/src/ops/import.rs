//! `spine import FILE`: the flags and the printed summary; the import itself (streaming,
//! batched, resumable, byte for byte) is [`spine_ops::transfer`].

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::Args;
use spine_ops::OperatorStore;
use spine_ops::transfer::{ImportReport, import};

use super::{OutputArgs, Progress, count};
use crate::embedder::{self, EmbedderArgs};

/// `spine import`.
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// A file written by `spine export`.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Records written per transaction.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch: u64,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `spine import` into the store `open` opens (once the file's header has been read, so a
/// file that is no export creates no store), embedding vector-less records with the
/// embedder `embedder` selects (the built-in model's files in `model_dir`).
pub fn run(
    open: impl FnOnce() -> Result<Box<dyn OperatorStore>>,
    embedder: &EmbedderArgs,
    model_dir: &Path,
    args: &ImportArgs,
) -> Result<()> {
    let open = || open().map_err(|e| spine_ops::Error::Invalid(format!("{e:#}")));
    let mut build = || {
        embedder::build(embedder, model_dir).map_err(|e| spine_ops::Error::Embed(format!("{e:#}")))
    };
    let report = import(&args.file, args.batch, open, &mut build, &mut Progress::default())?;
    args.out.print(&report, || print_human(&report))?;
    if report.embedders.len() > 1 {
        let stamps: Vec<String> =
            report.embedders.iter().map(|(m, n)| format!("{m} ({n})")).collect();
        eprintln!(
            "warning: the store now holds vectors of several embedders: {}. A server starts \
             with one only: run `spine reindex` with the embedder it will serve with.",
            stamps.join(", ")
        );
    }
    if let Some(problem) = report.problem() {
        bail!("{problem}");
    }
    Ok(())
}

fn print_human(s: &ImportReport) {
    println!(
        "imported {} from {} (exported {}){}",
        count(s.imported, "record"),
        s.file,
        s.exported_at,
        match s.embedded {
            0 => String::new(),
            n => format!("; embedded {} that had no vector", count(n, "record")),
        }
    );
    if s.already_present > 0 {
        println!("skipped {} already present (same id)", count(s.already_present, "record"));
    }
    if s.audit_events > 0 {
        println!(
            "imported {} into the audit log ({} already there)",
            count(s.audit_imported, "audit event"),
            s.audit_already_present
        );
    }
    for c in &s.short_id_taken {
        println!(
            "not imported: line {}, record {}: short_id {} is held by record {}",
            c.line, c.id, c.short_id, c.held_by
        );
    }
    let stamps: Vec<String> = s.embedders.iter().map(|(m, n)| format!("{m}: {n}")).collect();
    if !stamps.is_empty() {
        println!("vectors in the store by embedder: {}", stamps.join(", "));
    }
}
