//! `spine-review consolidate`: near-duplicate records, proposed as supersessions.
//!
//! Candidates are the records recall shows whatever the time (no archived / superseded
//! marker, no validity window) that are not rules, grouped by scope, owner, visibility and
//! embedder stamp: only records in one group are compared, by the cosine of their stored
//! vectors (every pair of the group, so a group of n records costs n²/2 comparisons).
//!
//! The rule: a record is superseded by the newest record of its group that is at least
//! `threshold` similar to it and newer (created later; ties by id). So every proposed
//! successor is newer than its targets, chains cannot loop, a record gets at most one
//! successor, and several near-copies collapse onto the newest one.

use anyhow::Result;
use clap::Args;
use spine_core::Scope;
use spine_ops::OperatorStore;
use spine_ops::review::consolidate::{
    DEFAULT_THRESHOLD, Report, Status, check_threshold, consolidate,
};

use super::scope_label;
use crate::ops::{OutputArgs, Progress, ScopeArgs, count};

/// `spine-review consolidate` flags.
#[derive(Debug, Args)]
pub struct ConsolidateArgs {
    #[command(flatten)]
    scope: ScopeArgs,
    /// Cosine similarity (0 < T <= 1) at or above which two records are near-duplicates.
    #[arg(long, default_value_t = DEFAULT_THRESHOLD)]
    threshold: f32,
    /// Apply the proposed supersessions (atomically, links both ways); without it nothing
    /// is written.
    #[arg(long)]
    apply: bool,
    #[command(flatten)]
    output: OutputArgs,
}

/// Validated flags.
pub struct Plan {
    scope: Option<Scope>,
    threshold: f32,
    pub(super) apply: bool,
    output: OutputArgs,
}

impl ConsolidateArgs {
    /// Checks the flags before anything is opened.
    pub fn validate(self) -> Result<Plan> {
        let scope = self.scope.resolve()?;
        let threshold = check_threshold(self.threshold)?;
        Ok(Plan { scope, threshold, apply: self.apply, output: self.output })
    }
}

/// `spine-review consolidate` on `store`.
pub fn run(store: &dyn OperatorStore, plan: Plan) -> Result<()> {
    let scope = plan.scope.as_ref();
    let report = consolidate(store, scope, plan.threshold, plan.apply, &mut Progress::default())?;
    plan.output.print(&report, || print_human(&report, scope))
}

fn print_human(report: &Report, scope: Option<&Scope>) {
    for p in &report.proposals {
        let s = &p.successor;
        let vis = if p.visibility.is_empty() { "private" } else { p.visibility.as_str() };
        println!(
            "{} (owner {:?}, {vis}): {} {} {:?}",
            s.scope, p.owner, s.short_id, s.created_at, s.content
        );
        for t in &p.supersedes {
            let r = &t.record;
            let verb = match t.status {
                Status::Applied => "now supersedes".to_owned(),
                Status::Skipped => format!("skipped ({})", t.skipped.as_deref().unwrap_or("")),
                Status::Proposed => "would supersede".to_owned(),
            };
            println!(
                "    {verb} {} {} {:?} (similarity {:.3})",
                r.short_id, r.created_at, r.content, t.similarity
            );
        }
    }
    let n = &report.summary;
    let what = format!(
        "{} superseding {} (threshold {}, {} compared in {})",
        count(n.proposals as u64, "proposal"),
        count(n.targets as u64, "record"),
        report.threshold,
        count(n.compared, "record"),
        scope_label(scope)
    );
    if report.applied {
        println!("{what}: {} applied, {} skipped", n.applied, n.skipped);
    } else if n.targets > 0 {
        println!("{what}; nothing written (run again with --apply to apply them)");
    } else {
        println!("{what}; nothing to consolidate");
    }
}
