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

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use spine_core::{Clock, IdRef, Memory, RecordId, Scope, SystemClock, Timestamp};
use spine_store::{Access, ReviewStore, SqliteStore, StateCounts, Store};

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

/// Most ids per archive / restore, as archive_memory (SPEC Limits).
const MAX_IDS: usize = 1000;
/// Records named in an `ambiguous` outcome, at most.
const MAX_CANDIDATES: usize = 50;

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

    /// Runs the command on `store`; `model_dir` and `embedder` are the configured embedder
    /// (verify checks the vectors' stamps against it). Returns true when the command found
    /// problems it exits 1 for (verify's violations). Blocking.
    pub fn run(
        self,
        store: &SqliteStore,
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
            Plan::Archive(a, archive) => set_archived(store, a, archive).map(|()| false),
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

/// A record's content on one line, at most `max` characters.
fn preview(content: &str, max: usize) -> String {
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
struct RecordView {
    id: RecordId,
    short_id: String,
    scope: String,
    category: String,
    created_at: Timestamp,
    content: String,
}

impl RecordView {
    fn of(m: &Memory) -> Self {
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

/// Prints stdout now (before an early exit).
pub fn flush() {
    let _ = std::io::stdout().flush();
}

#[derive(Serialize)]
struct ScanReport {
    now: Timestamp,
    scope: Option<String>,
    total: StateCounts,
    scopes: Vec<StateCounts>,
}

fn scan(store: &SqliteStore, scope: Option<&Scope>, output: OutputArgs) -> Result<()> {
    let now = now();
    let scopes = store.state_counts(scope, now)?;
    let mut total = StateCounts::default();
    for s in &scopes {
        total.add(s);
    }
    let report = ScanReport { now, scope: scope.map(|s| s.as_str().to_owned()), total, scopes };
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

#[derive(Serialize)]
struct ArchiveOutcome {
    input: String,
    /// The resolved record's id; empty when the input named none.
    id: String,
    short_id: String,
    scope: String,
    outcome: &'static str,
    /// On `ambiguous`: every record whose short_id the input matched.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    candidates: Vec<String>,
}

#[derive(Serialize)]
struct ArchiveReport {
    results: Vec<ArchiveOutcome>,
}

/// archive (`archive` = true) or restore, like archive_memory / restore_memory for any
/// owner's record: one outcome per `--id` in input order (`archived` / `already_archived`,
/// `restored` / `not_archived`, `not_found`, or `ambiguous` for a short_id several records
/// share), every found record flipped in one transaction. A malformed id refuses the call.
fn set_archived(store: &SqliteStore, a: ArchiveArgs, archive: bool) -> Result<()> {
    if a.ids.len() > MAX_IDS {
        bail!("--id given {} times; at most {MAX_IDS} per call", a.ids.len());
    }
    let refs: Vec<IdRef> = a
        .ids
        .iter()
        .map(|input| IdRef::parse("--id", input).map_err(|e| anyhow::anyhow!("{}", e.message)))
        .collect::<Result<_>>()?;
    let mut results = Vec::with_capacity(a.ids.len());
    let mut found = Vec::new();
    for (input, r) in a.ids.into_iter().zip(&refs) {
        let mut outcome = ArchiveOutcome {
            input,
            id: String::new(),
            short_id: String::new(),
            scope: String::new(),
            outcome: "not_found",
            candidates: Vec::new(),
        };
        match store.matching(&Access::operator(), r, MAX_CANDIDATES)?.as_slice() {
            [] => {}
            [m] => {
                outcome.id = m.id.to_string();
                outcome.short_id = m.short_id.to_string();
                outcome.scope = m.scope.as_str().to_owned();
                found.push((results.len(), m.id));
            }
            many => {
                outcome.outcome = "ambiguous";
                outcome.candidates = many.iter().map(|m| m.id.to_string()).collect();
            }
        }
        results.push(outcome);
    }
    let ids: Vec<RecordId> = found.iter().map(|(_, id)| *id).collect();
    let at = archive.then(|| now().to_epoch_seconds());
    let flips = store.set_archived(&Access::operator(), &ids, at)?;
    let (changed, unchanged) =
        if archive { ("archived", "already_archived") } else { ("restored", "not_archived") };
    for ((row, _), flipped) in found.into_iter().zip(flips) {
        results[row].outcome = if flipped { changed } else { unchanged };
    }
    let report = ArchiveReport { results };
    a.output.print(&report, || {
        for r in &report.results {
            match r.outcome {
                "not_found" => println!("not_found: {}", r.input),
                "ambiguous" => println!(
                    "ambiguous: {} is the short_id of {}; use the full id",
                    r.input,
                    r.candidates.join(", ")
                ),
                _ => println!("{}: {} ({}, {})", r.outcome, r.short_id, r.id, r.scope),
            }
        }
    })
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
