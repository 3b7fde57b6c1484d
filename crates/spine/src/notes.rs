//! `spine import-notes`: the flags and the printed report; splitting the files into notes,
//! choosing the scope, the source and the category, and storing each note once is
//! [`spine_ops::notes`].

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use spine_core::Caller;
use spine_ops::notes::{Report, Request, import_notes};
use spine_service::Service;

use crate::ops::{OutputArgs, count};

/// `spine import-notes` flags.
#[derive(Debug, Clone, Args)]
pub struct ImportNotesArgs {
    /// Files to import [default: CLAUDE.md and AGENTS.md at the repository's top, and
    /// Claude Code's memory files of the repository].
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The directory whose repository is imported [default: the current directory].
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// The memory scope to store into [default: the repository's `.spine.toml` scope, else
    /// its one existing scope].
    #[arg(long)]
    pub scope: Option<String>,
    /// `user-said` or `agent-inferred` for every record [default: by file, see above].
    #[arg(long)]
    pub source: Option<String>,
    /// The category of every record [default: `convention`; Claude Code memory files by
    /// their `type`].
    #[arg(long)]
    pub category: Option<String>,
    /// Leave Claude Code's memory files out of the default set.
    #[arg(long)]
    pub no_claude_memory: bool,
    /// Show what would be stored; store nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `spine import-notes`, storing through `service` as `caller`.
pub fn run(service: &Service, caller: &Caller, args: &ImportNotesArgs) -> Result<()> {
    let cwd = match &args.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let request = Request {
        files: args.files.clone(),
        cwd,
        home: std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from),
        scope: args.scope.clone(),
        source: args.source.clone(),
        category: args.category.clone(),
        claude_memory: !args.no_claude_memory,
        dry_run: args.dry_run,
    };
    let report = import_notes(service, caller, &request).map_err(|e| match e {
        // As before: the file in the message, the reason under it.
        spine_ops::Error::Io { context, source } => anyhow::Error::new(source).context(context),
        e => e.into(),
    })?;
    args.out.print(&report, || print_human(&report))
}

fn print_human(report: &Report) {
    let dry = report.dry_run;
    for r in &report.files {
        let what = if dry { "would import" } else { "imported" };
        println!(
            "{}: {what} {} ({} found, {} already present) as {} {} into {}",
            r.file,
            count((if dry { r.would_import.len() } else { r.imported }) as u64, "record"),
            r.found,
            r.already_present,
            r.source,
            r.category,
            report.scope,
        );
        for n in &r.would_import {
            let shown: String = n.content.chars().take(100).collect();
            println!("  line {}: {}", n.line, shown.replace('\n', " "));
        }
    }
}
