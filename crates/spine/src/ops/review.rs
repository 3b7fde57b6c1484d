//! `spine spine-review`: the operator's review of a store (SPEC "Operator commands").
//!
//! - `scan`: records per scope by state, archived and expired in separate buckets;
//! - `verify`: the store's invariants, every violation named (exit 1 when any);
//! - `consolidate`: near-duplicates by stored vector, proposed as supersessions;
//! - `purge`: permanent deletion behind the extract-before-delete gate;
//! - `archive` / `restore`: archive_memory / restore_memory on any owner's record.
//!
//! Previews are the default: `consolidate` and `purge` write nothing without `--apply`, and
//! with it they apply what they list, re-checked inside one transaction (a record a running
//! server changed meanwhile is skipped, with the reason). The sweeps require `--scope` or
//! `--all-scopes` (SPEC Errors 9).

mod consolidate;
mod purge;
mod verify;

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use clap::{Args, Subcommand};
use spine_core::{Clock, Scope, SystemClock, Timestamp};
use spine_ops::OperatorStore;
use spine_ops::review::{Archival, StateCounts};

use crate::embedder::EmbedderArgs;
use crate::ops::{OutputArgs, ScopeArgs, count};

/// `spine spine-review <command>`.
#[derive(Debug, Args)]
pub struct ReviewArgs {
    #[command(subcommand)]
    command: ReviewCommand,
}

#[derive(Debug, Subcommand)]
enum ReviewCommand {
    /// Count records per state (active, archived, superseded, expired, scheduled), per scope.
    ///
    /// A record carrying several states counts in each of them (as `purge --class` selects
    /// it), so the state columns may add up to more than `records`; `active + hidden =
    /// records`.
    Scan {
        #[command(flatten)]
        scope: ScopeArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Check the store's invariants and list every violation; exits 1 when there are any.
    ///
    /// One live head per supersession chain, links both ways, a vector of the embedder's
    /// length and stamp on every record (the embedder the --embedder flags configure),
    /// unique short_ids, payloads that decode and agree with their indexed columns.
    Verify {
        #[command(flatten)]
        scope: ScopeArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Find near-duplicate records and propose supersessions (the newer supersedes the
    /// older); writes only with --apply.
    Consolidate(consolidate::ConsolidateArgs),
    /// Delete purge-eligible records for good, only those `spine export` wrote out as they
    /// are now; a preview without --apply.
    Purge(purge::PurgeArgs),
    /// Archive records (archive_memory for any owner's record).
    Archive(ArchiveArgs),
    /// Restore archived records (restore_memory for any owner's record).
    Restore(ArchiveArgs),
}

/// `--id` for archive and restore.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Record id or short_id (repeat for several); each gets its own outcome.
    #[arg(long = "id", required = true, value_name = "ID")]
    ids: Vec<String>,
    #[command(flatten)]
    output: OutputArgs,
}

/// A `spine-review` command whose flags were checked (before the store is opened, so
/// misuse changes nothing).
pub enum Plan {
    /// `scan`.
    Scan(Option<Scope>, OutputArgs),
    /// `verify`.
    Verify(Option<Scope>, OutputArgs),
    /// `consolidate`.
    Consolidate(consolidate::Plan),
    /// `purge`.
    Purge(purge::Plan),
    /// `archive` (true) or `restore` (false).
    Archive(ArchiveArgs, bool),
}

impl Plan {
    /// Checks the flags.
    pub fn new(args: ReviewArgs) -> Result<Self> {
        Ok(match args.command {
            ReviewCommand::Scan { scope, output } => Plan::Scan(scope.resolve()?, output),
            ReviewCommand::Verify { scope, output } => Plan::Verify(scope.resolve()?, output),
            ReviewCommand::Consolidate(a) => Plan::Consolidate(a.validate()?),
            ReviewCommand::Purge(a) => Plan::Purge(a.validate(now())?),
            ReviewCommand::Archive(a) => Plan::Archive(a, true),
            ReviewCommand::Restore(a) => Plan::Archive(a, false),
        })
    }

    /// The audit log's name for this run when it changes records (`consolidate --apply`,
    /// `purge --apply`, `archive`, `restore`), else `None`.
    pub fn audited_action(&self) -> Option<&'static str> {
        match self {
            Plan::Consolidate(p) if p.apply => Some("consolidate"),
            Plan::Purge(p) if p.apply => Some("purge"),
            Plan::Archive(_, true) => Some("archive"),
            Plan::Archive(_, false) => Some("restore"),
            _ => None,
        }
    }

    /// Runs the command on `store` as `operator` ([`spine_store::Access::operator`], audited
    /// when the run is: [`Self::audited_action`]); `model_dir` and `embedder` are the
    /// configured embedder (verify checks the vectors' stamps against it). Returns true when
    /// the command found problems it exits 1 for (verify's violations). Blocking.
    pub fn run(
        self,
        store: &dyn OperatorStore,
        operator: &spine_store::Access,
        model_dir: &Path,
        embedder: &EmbedderArgs,
    ) -> Result<bool> {
        match self {
            Plan::Scan(scope, output) => scan(store, scope.as_ref(), output).map(|()| false),
            Plan::Verify(scope, output) => {
                verify::run(store, scope.as_ref(), model_dir, embedder, output)
            }
            Plan::Consolidate(plan) => consolidate::run(store, plan).map(|()| false),
            Plan::Purge(plan) => purge::run(store, plan).map(|()| false),
            Plan::Archive(a, archive) => set_archived(store, operator, a, archive).map(|()| false),
        }
    }
}

fn now() -> Timestamp {
    SystemClock.now()
}

/// "every scope" or the scope, for messages.
fn scope_label(scope: Option<&Scope>) -> String {
    scope.map_or_else(|| "every scope".to_owned(), |s| s.as_str().to_owned())
}

/// Prints stdout now (before an early exit).
pub fn flush() {
    let _ = std::io::stdout().flush();
}

fn scan(store: &dyn OperatorStore, scope: Option<&Scope>, output: OutputArgs) -> Result<()> {
    let report = spine_ops::review::scan(store, scope, now())?;
    output.print(&report, || {
        let width = report.scopes.iter().map(|s| s.scope.chars().count()).max().unwrap_or(0).max(5);
        println!(
            "{:width$}  {:>8} {:>8} {:>8} {:>9} {:>11} {:>8} {:>10}",
            "scope",
            "records",
            "active",
            "hidden",
            "archived",
            "superseded",
            "expired",
            "scheduled"
        );
        let row = |name: &str, c: &StateCounts| {
            println!(
                "{name:width$}  {:>8} {:>8} {:>8} {:>9} {:>11} {:>8} {:>10}",
                c.records, c.active, c.hidden, c.archived, c.superseded, c.expired, c.scheduled
            )
        };
        for s in &report.scopes {
            row(&s.scope, s);
        }
        if report.scopes.len() != 1 {
            row("total", &report.total);
        }
        println!(
            "{} in {} at {}; a record with several states counts in each state's column",
            count(report.total.records, "record"),
            scope_label(scope),
            report.now
        );
    })
}

/// archive (`archive` = true) or restore any owner's records, one outcome per `--id`.
fn set_archived(
    store: &dyn OperatorStore,
    operator: &spine_store::Access,
    a: ArchiveArgs,
    archive: bool,
) -> Result<()> {
    let report = spine_ops::review::set_archived(store, operator, a.ids, archive, now())?;
    a.output.print(&report, || {
        for r in &report.results {
            match r.outcome {
                Archival::NotFound => println!("not_found: {}", r.input),
                Archival::Ambiguous => println!(
                    "ambiguous: {} is the short_id of {}; use the full id",
                    r.input,
                    r.candidates.join(", ")
                ),
                flipped => {
                    println!("{}: {} ({}, {})", flipped.as_str(), r.short_id, r.id, r.scope)
                }
            }
        }
    })
}
