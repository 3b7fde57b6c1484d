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

use serde::Serialize;
use spine_core::{Category, Scope, Timestamp};
use spine_store::{OperatorStore, PurgeOutcome, PurgeRefusal};
pub use spine_store::{PurgeCandidate, PurgeClass, PurgeCriteria};

use crate::{Error, Progress, Result};

/// What the operator asked to purge, as given on the command line.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Structural classes (`--class`).
    pub classes: Vec<PurgeClass>,
    /// `--scope`, as given.
    pub scope: Option<String>,
    /// `--all-scopes`.
    pub all_scopes: bool,
    /// `--category`, as given.
    pub category: Option<String>,
    /// `--tags`.
    pub tags: Vec<String>,
    /// `--older-than`.
    pub older_than: Option<Duration>,
}

/// The selection rule: structural classes need only the gate; the free-form path
/// (category, tags, age without a class) also needs a scope or every scope, and an empty
/// scope never widens to every scope. `now` is the instant `older_than` counts back from.
pub fn criteria(req: Request, now: Timestamp) -> Result<PurgeCriteria> {
    let invalid = |m: &str| Err(Error::Invalid(m.to_owned()));
    if req.scope.as_deref().is_some_and(|s| s.trim().is_empty()) {
        // An empty scope (an unset script variable) must never widen to every scope.
        return invalid("--scope must not be empty; give a scope, or --all-scopes for every scope");
    }
    let free_form = req.category.is_some() || !req.tags.is_empty() || req.older_than.is_some();
    let scoped = req.scope.is_some() || req.all_scopes;
    if req.classes.is_empty() && !free_form {
        return invalid(
            "say what to purge: --class archived|superseded|expired, or filters (--category, \
             --tags, --older-than) with --scope <scope> or --all-scopes",
        );
    }
    if req.classes.is_empty() && !scoped {
        return invalid(
            "purging by --category, --tags or --older-than without --class needs \
             --scope <scope> or --all-scopes",
        );
    }
    let scope = match &req.scope {
        Some(s) => Some(Scope::parse("--scope", s).map_err(|e| Error::Invalid(e.message))?),
        None => None,
    };
    let category = req
        .category
        .map(|c| Category::parse("--category", c.trim()).map_err(|e| Error::Invalid(e.message)))
        .transpose()?;
    if req.tags.iter().any(|t| t.trim().is_empty()) {
        return invalid("--tags must not contain a blank tag");
    }
    let created_before = req.older_than.map(|d| {
        let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        Timestamp::from_micros(now.as_micros().saturating_sub(micros))
    });
    Ok(PurgeCriteria { classes: req.classes, scope, category, tags_all: req.tags, created_before })
}

/// The selection as applied.
#[derive(Debug, Clone, Serialize)]
pub struct Selection {
    /// Structural classes (any).
    pub classes: Vec<PurgeClass>,
    /// One scope, or `None` for every scope.
    pub scope: Option<String>,
    /// One category.
    pub category: Option<String>,
    /// Tags a record must all carry.
    pub tags: Vec<String>,
    /// Only records created before this instant.
    pub created_before: Option<Timestamp>,
}

/// A selected record that may not be deleted, and what to do about it.
#[derive(Debug, Clone, Serialize)]
pub struct Refused {
    /// The record and why.
    #[serde(flatten)]
    pub candidate: PurgeCandidate,
    /// What the operator can do.
    pub hint: String,
}

/// Totals of a purge run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Records the selection matched.
    pub selected: usize,
    /// Of those, eligible for deletion.
    pub eligible: usize,
    /// Of those, refused.
    pub refused: usize,
    /// Deleted (apply).
    pub deleted: usize,
    /// Eligible but skipped in the delete transaction (changed meanwhile).
    pub skipped: usize,
}

/// What purge found, or did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The instant the selection was evaluated at.
    pub now: Timestamp,
    /// Whether eligible records were deleted.
    pub applied: bool,
    /// The selection.
    pub selection: Selection,
    /// Totals.
    pub summary: Summary,
    /// Records eligible for deletion.
    pub eligible: Vec<PurgeCandidate>,
    /// Records selected but refused.
    pub refused: Vec<Refused>,
    /// Apply only: one outcome per eligible record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcomes: Option<Vec<PurgeOutcome>>,
}

/// What the operator can do about a refusal of `c`.
pub fn hint(c: &PurgeCandidate) -> String {
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
            "supersedes {} record{} that would stay hidden behind a deleted successor: purge {} \
             with it",
            predecessors.len(),
            if predecessors.len() == 1 { "" } else { "s" },
            if predecessors.len() == 1 { "that record" } else { "them" }
        ),
    }
}

/// Selects the records `criteria` names at `now`, judges each (the export gate, the chain
/// rule) and, with `apply`, deletes the eligible ones, re-checked in the delete transaction.
pub fn purge(
    store: &dyn OperatorStore,
    criteria: &PurgeCriteria,
    now: Timestamp,
    apply: bool,
    progress: &mut dyn Progress,
) -> Result<Report> {
    let mut started = false;
    let candidates = store.purge_plan(criteria, now, &mut |done, total| {
        if !started {
            progress.start("checking the export gate", total);
            started = true;
        }
        progress.advance(done)
    })?;
    if started {
        progress.finish();
    }
    let selected = candidates.len();
    let (eligible, refused): (Vec<PurgeCandidate>, Vec<PurgeCandidate>) =
        candidates.into_iter().partition(|c| c.refused.is_none());
    let refused: Vec<Refused> =
        refused.into_iter().map(|c| Refused { hint: hint(&c), candidate: c }).collect();
    let outcomes = if apply && !eligible.is_empty() {
        let ids: Vec<_> = eligible.iter().map(|c| c.id).collect();
        Some(store.purge_apply(&ids, criteria, now)?)
    } else if apply {
        Some(Vec::new())
    } else {
        None
    };
    let deleted = outcomes.iter().flatten().filter(|o| o.deleted).count();
    let skipped = outcomes.iter().flatten().filter(|o| !o.deleted).count();
    let c = criteria;
    let report = Report {
        now,
        applied: apply,
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
    Ok(report)
}
