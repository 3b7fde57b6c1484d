//! `spine-review purge`: permanent deletion, preview by default, behind the
//! extract-before-delete gate (SPEC "Operator commands").
//!
//! Selection: the structural classes (`--class archived|superseded|expired`, any of them)
//! need only the gate; the free-form path (`--category`, `--tags`, `--older-than` without
//! `--class`) also needs `--scope` or `--all-scopes`. With `--class`, the other filters and
//! `--scope` narrow the selection further.
//!
//! A selected record is eligible when `spine export` wrote it out as it is now, and when
//! deleting it leaves no chain without a live head (it supersedes no record that stays).
//! `--apply` deletes exactly the eligible records the listing shows, re-checked in the
//! delete transaction; one that changed meanwhile is skipped and named.

use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};
use spine_core::Timestamp;
use spine_ops::OperatorStore;
use spine_ops::review::purge::{PurgeCandidate, PurgeClass, PurgeCriteria};
use spine_ops::review::purge::{Report, Request, criteria, purge};

use crate::ops::{OutputArgs, Progress, ScopeArgs, count, parse_duration};

/// A structural purge class on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ClassArg {
    /// Archived records.
    Archived,
    /// Superseded records.
    Superseded,
    /// Expired records (now at or past not_after).
    Expired,
}

impl From<ClassArg> for PurgeClass {
    fn from(c: ClassArg) -> Self {
        match c {
            ClassArg::Archived => PurgeClass::Archived,
            ClassArg::Superseded => PurgeClass::Superseded,
            ClassArg::Expired => PurgeClass::Expired,
        }
    }
}

/// `spine-review purge` flags.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Structural class(es) to purge: archived, superseded, expired (comma-separated or
    /// repeated; a record in any of them is selected).
    #[arg(long, value_enum, value_delimiter = ',')]
    class: Vec<ClassArg>,
    /// Required by the free-form path (no --class); with --class, narrows to one scope.
    #[command(flatten)]
    scope: ScopeArgs,
    /// Only records of this category (decision, preference, convention, gotcha, discovery,
    /// rule).
    #[arg(long)]
    category: Option<String>,
    /// Only records carrying all of these tags (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    tags: Vec<String>,
    /// Only records created at least this long ago (e.g. 90d, 12h).
    #[arg(long, value_parser = parse_duration)]
    older_than: Option<Duration>,
    /// Delete the eligible records for good; without it nothing is deleted.
    #[arg(long)]
    apply: bool,
    #[command(flatten)]
    output: OutputArgs,
}

/// Validated flags.
pub struct Plan {
    criteria: PurgeCriteria,
    now: Timestamp,
    pub(super) apply: bool,
    output: OutputArgs,
}

impl PurgeArgs {
    /// Checks the flags before anything is opened; `now` is the instant the classes and
    /// `--older-than` are evaluated at.
    pub fn validate(self, now: Timestamp) -> Result<Plan> {
        let request = Request {
            classes: self.class.into_iter().map(PurgeClass::from).collect(),
            scope: self.scope.scope,
            all_scopes: self.scope.all_scopes,
            category: self.category,
            tags: self.tags,
            older_than: self.older_than,
        };
        Ok(Plan { criteria: criteria(request, now)?, now, apply: self.apply, output: self.output })
    }
}

/// `spine-review purge` on `store`.
pub fn run(store: &dyn OperatorStore, plan: Plan) -> Result<()> {
    let report = purge(store, &plan.criteria, plan.now, plan.apply, &mut Progress::default())?;
    plan.output.print(&report, || print_human(&report))
}

fn states(c: &PurgeCandidate) -> String {
    if c.states.is_empty() {
        "active".to_owned()
    } else {
        c.states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
    }
}

fn print_human(r: &Report) {
    let line = |c: &PurgeCandidate| {
        format!("{} {} {} {} [{}]", c.short_id, c.id, c.scope, c.category, states(c))
    };
    match &r.outcomes {
        None => {
            println!("would delete {}:", count(r.eligible.len() as u64, "record"));
            for c in &r.eligible {
                println!("  {} exported to {}", line(c), c.exported_to.as_deref().unwrap_or("?"));
            }
        }
        Some(outcomes) => {
            println!("deleted {}:", count(r.summary.deleted as u64, "record"));
            for (c, o) in r.eligible.iter().zip(outcomes) {
                match &o.skipped {
                    None => println!(
                        "  {} (kept in {})",
                        line(c),
                        c.exported_to.as_deref().unwrap_or("?")
                    ),
                    Some(why) => println!("  skipped {}: {why}", line(c)),
                }
            }
        }
    }
    if !r.refused.is_empty() {
        println!("refused {}:", count(r.refused.len() as u64, "record"));
        for x in &r.refused {
            println!("  {}: {}", line(&x.candidate), x.hint);
        }
    }
    let s = &r.summary;
    if r.applied {
        println!(
            "{} selected: {} deleted, {} skipped (changed since listed), {} refused",
            s.selected, s.deleted, s.skipped, s.refused
        );
    } else {
        println!(
            "{} selected: {} eligible, {} refused; nothing deleted (run again with --apply to \
             delete the eligible ones)",
            s.selected, s.eligible, s.refused
        );
    }
}
