//! `spine export`: the flags and the printed summary; the export itself (format, durable
//! write, purge-gate marks) is [`spine_ops::transfer`].

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use clap::Args;
use spine_core::{Clock, Scope, SystemClock};
use spine_ops::OperatorStore;
use spine_ops::transfer::{Exported, Target, export};

use super::stop::Stop;
use super::{OutputArgs, Progress, count};

/// `spine export`.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Only the records of this scope.
    #[arg(long)]
    pub scope: Option<String>,
    /// Every scope: what export does without --scope too (the flag is accepted for
    /// symmetry with the sweep commands).
    #[arg(long, conflicts_with = "scope")]
    pub all_scopes: bool,
    /// Write to this new file instead of stdout; an existing file is never overwritten.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Leave the vectors out (`spine import` embeds such records with the configured
    /// embedder).
    #[arg(long)]
    pub no_vectors: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `spine export` on `store`; returns the exit status.
pub fn run(store: &dyn OperatorStore, args: &ExportArgs, stop: &Stop) -> Result<i32> {
    if args.out.json && args.output.is_none() {
        bail!("--json needs --output FILE: without it, stdout carries the export itself");
    }
    let scope = args
        .scope
        .as_deref()
        .map(|s| Scope::parse("--scope", s).map_err(|e| anyhow!("{}", e.message)))
        .transpose()?;
    let mut stdout = std::io::stdout();
    let target = match &args.output {
        Some(path) => Target::File(path),
        None => Target::Stream { w: &mut stdout, label: "(stdout)" },
    };
    let now = SystemClock.now();
    let mut progress = Progress::default();
    let exported =
        export(store, scope.as_ref(), !args.no_vectors, target, now, stop, &mut progress)?;
    let report = match exported {
        Exported::Done(report) => report,
        Exported::Stopped(why) => {
            eprintln!("export {}: nothing was exported", why.as_str());
            return Ok(why.exit_code());
        }
    };
    args.out.print(&report, || {
        let to = report.output.as_deref().unwrap_or("stdout");
        let text = format!(
            "exported {} ({} with vectors) and {} to {to}\n\
             {} now pass the purge gate of `spine spine-review purge` until they change",
            count(report.records, "record"),
            report.with_vectors,
            count(report.audit_events, "audit event"),
            count(report.marked_exported, "record"),
        );
        // With stdout carrying the export, the summary goes to stderr.
        match args.output {
            Some(_) => println!("{text}"),
            None => eprintln!("{text}"),
        }
    })?;
    Ok(0)
}
