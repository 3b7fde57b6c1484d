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

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use spine_core::{Clock, EpochSeconds, SystemClock, Timestamp};
use spine_store::{ExpiredRecord, SqliteStore};

use super::{OutputArgs, Progress, count, parse_duration};

/// Records listed (and deleted) per page.
const PAGE: usize = 500;
/// Records listed per scope in the human preview (`--json` lists all).
const SHOWN_PER_SCOPE: usize = 20;

/// `spine prune-expired`.
#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Delete the records the preview lists (without it, nothing changes).
    #[arg(long)]
    pub apply: bool,
    /// Grace period: only records expired at least this long ago (e.g. 7d, 12h; 0 = every
    /// expired record).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "0")]
    pub older_than: Duration,
    #[command(flatten)]
    pub out: OutputArgs,
}

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

/// `spine prune-expired` on `store`.
pub fn run(store: &SqliteStore, args: &PruneArgs) -> Result<()> {
    let report = prune(store, args.apply, args.older_than, SystemClock.now())?;
    args.out.print(&report, || print_human(&report))
}

/// The records expired at `now - older_than`, deleted when `apply`.
pub fn prune(
    store: &SqliteStore,
    apply: bool,
    older_than: Duration,
    now: Timestamp,
) -> Result<PruneReport> {
    let grace = i64::try_from(older_than.as_micros()).context("--older-than is too long")?;
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
    let mut progress = Progress::new(label, store.count_expired(cutoff)?);
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

fn print_human(r: &PruneReport) {
    let grace = match r.older_than_secs {
        0 => String::new(),
        _ => format!(
            ", {} ago or more",
            humantime::format_duration(Duration::from_secs(r.older_than_secs))
        ),
    };
    let what = format!(
        "{} (not_after at or before {}{grace})",
        count(r.total, "expired record"),
        r.cutoff
    );
    if r.applied {
        println!("deleted {what}");
    } else if r.total == 0 {
        println!(
            "nothing to prune: no expired records (not_after at or before {}{grace})",
            r.cutoff
        );
    } else {
        println!(
            "preview: {what} would be deleted; nothing changed. Run again with --apply to delete them."
        );
    }
    for (scope, n) in &r.by_scope {
        println!("  {scope}: {n}");
        let mut shown = r.records.iter().filter(|e| &e.scope == scope).take(SHOWN_PER_SCOPE);
        for e in shown.by_ref() {
            println!("    {} {} expired {}", e.id, e.short_id, e.not_after);
        }
        if *n as usize > SHOWN_PER_SCOPE {
            println!(
                "    … and {} more (--json lists every record)",
                *n as usize - SHOWN_PER_SCOPE
            );
        }
    }
    if !r.changed_meanwhile.is_empty() {
        println!(
            "kept {}: changed or deleted since it was listed",
            count(r.changed_meanwhile.len() as u64, "record")
        );
        for e in &r.changed_meanwhile {
            println!("    {} {}", e.id, e.scope);
        }
    }
}
