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

use anyhow::{Result, anyhow, bail};
use clap::{Args, ValueEnum};
use serde::Serialize;
use spine_core::{Category, Timestamp};
use spine_ops::Progress as _;
use spine_store::{
    PurgeCandidate, PurgeClass, PurgeCriteria, PurgeOutcome, PurgeRefusal, ReviewStore, SqliteStore,
};

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
    apply: bool,
    output: OutputArgs,
}

impl PurgeArgs {
    /// Checks the flags before anything is opened; `now` is the instant the classes and
    /// `--older-than` are evaluated at.
    pub fn validate(self, now: Timestamp) -> Result<Plan> {
        if self.scope.scope.as_deref().is_some_and(|s| s.trim().is_empty()) {
            // An empty scope (an unset script variable) must never widen to every scope.
            bail!("--scope must not be empty; give a scope, or --all-scopes for every scope");
        }
        let free_form =
            self.category.is_some() || !self.tags.is_empty() || self.older_than.is_some();
        let scoped =
            self.scope.scope.as_deref().is_some_and(|s| !s.is_empty()) || self.scope.all_scopes;
        if self.class.is_empty() && !free_form {
            bail!(
                "say what to purge: --class archived|superseded|expired, or filters (--category, \
                 --tags, --older-than) with --scope <scope> or --all-scopes"
            );
        }
        if self.class.is_empty() && !scoped {
            bail!(
                "purging by --category, --tags or --older-than without --class needs \
                 --scope <scope> or --all-scopes"
            );
        }
        let scope = if scoped { self.scope.resolve()? } else { None };
        let category = self
            .category
            .map(|c| Category::parse("--category", c.trim()).map_err(|e| anyhow!("{}", e.message)))
            .transpose()?;
        let mut tags = Vec::new();
        for t in self.tags {
            if t.trim().is_empty() {
                bail!("--tags must not contain a blank tag");
            }
            tags.push(t);
        }
        let created_before = match self.older_than {
            None => None,
            Some(d) => {
                let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
                Some(Timestamp::from_micros(now.as_micros().saturating_sub(micros)))
            }
        };
        let classes = self.class.into_iter().map(PurgeClass::from).collect();
        Ok(Plan {
            criteria: PurgeCriteria { classes, scope, category, tags_all: tags, created_before },
            now,
            apply: self.apply,
            output: self.output,
        })
    }
}

#[derive(Serialize)]
struct Selection {
    classes: Vec<PurgeClass>,
    scope: Option<String>,
    category: Option<String>,
    tags: Vec<String>,
    created_before: Option<Timestamp>,
}

#[derive(Serialize)]
struct Refused {
    #[serde(flatten)]
    candidate: PurgeCandidate,
    hint: String,
}

#[derive(Serialize)]
struct Summary {
    selected: usize,
    eligible: usize,
    refused: usize,
    deleted: usize,
    skipped: usize,
}

#[derive(Serialize)]
struct Report {
    now: Timestamp,
    applied: bool,
    selection: Selection,
    summary: Summary,
    eligible: Vec<PurgeCandidate>,
    refused: Vec<Refused>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcomes: Option<Vec<PurgeOutcome>>,
}

/// What the operator can do about a refusal of `c`.
fn hint(c: &PurgeCandidate) -> String {
    match &c.refused {
        None => String::new(),
        Some(PurgeRefusal::NotExported) => {
            "never exported: run `spine export` over it first, then purge again".to_owned()
        }
        Some(PurgeRefusal::ChangedSinceExport) => format!(
            "changed since it was exported to {}: run `spine export` again",
            c.exported_to.as_deref().unwrap_or("a file")
        ),
        Some(PurgeRefusal::SupersedesRecordsThatStay { predecessors }) => format!(
            "supersedes {} that would stay hidden behind a deleted successor: purge {} with it",
            count(predecessors.len() as u64, "record"),
            if predecessors.len() == 1 { "that record" } else { "them" }
        ),
    }
}

pub fn run(store: &SqliteStore, plan: Plan) -> Result<()> {
    let mut progress: Option<Progress> = None;
    let candidates = store.purge_plan(&plan.criteria, plan.now, &mut |done, total| {
        progress
            .get_or_insert_with(|| Progress::new("checking the export gate", total))
            .advance(done)
    })?;
    if let Some(mut p) = progress {
        p.finish();
    }
    let selected = candidates.len();
    let (eligible, refused): (Vec<PurgeCandidate>, Vec<PurgeCandidate>) =
        candidates.into_iter().partition(|c| c.refused.is_none());
    let refused: Vec<Refused> =
        refused.into_iter().map(|c| Refused { hint: hint(&c), candidate: c }).collect();
    let outcomes = if plan.apply && !eligible.is_empty() {
        let ids: Vec<_> = eligible.iter().map(|c| c.id).collect();
        Some(store.purge_apply(&ids, &plan.criteria, plan.now)?)
    } else if plan.apply {
        Some(Vec::new())
    } else {
        None
    };
    let deleted = outcomes.iter().flatten().filter(|o| o.deleted).count();
    let skipped = outcomes.iter().flatten().filter(|o| !o.deleted).count();
    let c = &plan.criteria;
    let report = Report {
        now: plan.now,
        applied: plan.apply,
        selection: Selection {
            classes: c.classes.clone(),
            scope: c.scope.as_ref().map(|s| s.as_str().to_owned()),
            category: c.category.map(|c| c.as_str().to_owned()),
            tags: c.tags_all.clone(),
            created_before: c.created_before,
        },
        summary: Summary {
            selected,
            eligible: eligible.len(),
            refused: refused.len(),
            deleted,
            skipped,
        },
        eligible,
        refused,
        outcomes,
    };
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
