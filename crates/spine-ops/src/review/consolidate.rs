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

use serde::Serialize;
use simsimd::SpatialSimilarity;
use spine_core::Scope;
use spine_store::{ConsolidationCandidate, ConsolidationLink, OperatorStore};

use super::RecordView;
use crate::{Error, Progress, Result};

/// The default similarity above which two records count as near-duplicates: paraphrases
/// score lower; copies differing in punctuation, case or a word score higher.
pub const DEFAULT_THRESHOLD: f32 = 0.95;

/// `v` scaled to unit length (a zero vector stays zero and matches nothing).
fn unit(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return vec![0.0; v.len()];
    }
    v.iter().map(|x| x / norm).collect()
}

/// The dot product, with SIMD kernels chosen at run time (`simsimd`, as the search index):
/// a group of n records costs n²/2 of these.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    f32::dot(a, b).unwrap_or(0.0) as f32
}

/// For records ordered oldest first, `successor[i]`: the newest later record at least
/// `threshold` similar to record i, with the similarity. `tick` runs once per record.
fn successors(
    vectors: &[Vec<f32>],
    threshold: f32,
    mut tick: impl FnMut(),
) -> Vec<Option<(usize, f32)>> {
    let units: Vec<Vec<f32>> = vectors.iter().map(|v| unit(v)).collect();
    let mut out = vec![None; units.len()];
    for i in 0..units.len() {
        // Newest first: the first match is the successor.
        for j in (i + 1..units.len()).rev() {
            if units[i].len() != units[j].len() {
                continue;
            }
            let s = dot(&units[i], &units[j]);
            if s >= threshold {
                out[i] = Some((j, s));
                break;
            }
        }
        tick();
    }
    out
}

/// What became of a proposed supersession (`status` in the report's JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Found, not applied (no `--apply`).
    Proposed,
    /// Applied: the successor now supersedes the record.
    Applied,
    /// Not applied: the record changed meanwhile (`skipped` says how).
    Skipped,
}

/// A record proposed for supersession.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// The record.
    #[serde(flatten)]
    pub record: RecordView,
    /// Its cosine similarity to the successor.
    pub similarity: f32,
    /// What became of it.
    pub status: Status,
    /// Why it was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// A successor and the records it would supersede.
#[derive(Debug, Clone, Serialize)]
pub struct Proposal {
    /// The owner of the group.
    pub owner: String,
    /// The visibility of the group (`shared` or empty).
    pub visibility: String,
    /// The record that stays.
    pub successor: RecordView,
    /// The records it supersedes, oldest first.
    pub supersedes: Vec<Target>,
}

/// Totals of a consolidate run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Records compared.
    pub compared: u64,
    /// Proposals made.
    pub proposals: usize,
    /// Records proposed for supersession.
    pub targets: usize,
    /// Supersessions applied.
    pub applied: usize,
    /// Supersessions skipped (the records changed meanwhile).
    pub skipped: usize,
}

/// What consolidate proposed, or did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scope; `None` for every scope.
    pub scope: Option<String>,
    /// The similarity threshold.
    pub threshold: f32,
    /// Whether the proposals were applied.
    pub applied: bool,
    /// Totals.
    pub summary: Summary,
    /// The proposals.
    pub proposals: Vec<Proposal>,
}

/// `threshold` when it is a usable cosine similarity (above 0, at most 1).
pub fn check_threshold(threshold: f32) -> Result<f32> {
    if threshold > 0.0 && threshold <= 1.0 {
        Ok(threshold)
    } else {
        Err(Error::Invalid(format!(
            "--threshold must be a cosine similarity above 0 and at most 1; got {threshold}"
        )))
    }
}

/// Proposes (and with `apply`, applies) the supersessions of the rule above, over the
/// records of `scope` (or every scope).
pub fn consolidate(
    store: &dyn OperatorStore,
    scope: Option<&Scope>,
    threshold: f32,
    apply: bool,
    progress: &mut dyn Progress,
) -> Result<Report> {
    let threshold = check_threshold(threshold)?;
    let groups = store.consolidation_groups(scope)?;
    let total: u64 = groups.iter().filter(|g| g.records > 1).map(|g| g.records).sum();
    progress.start("comparing", total);
    let mut proposals: Vec<Proposal> = Vec::new();
    let mut links: Vec<ConsolidationLink> = Vec::new();
    let mut compared = 0u64;
    for g in groups.iter().filter(|g| g.records > 1) {
        let records: Vec<ConsolidationCandidate> = store.consolidation_candidates(g)?;
        let vectors: Vec<Vec<f32>> = records.iter().map(|r| r.vector.clone()).collect();
        let found = successors(&vectors, threshold, || progress.advance(1));
        compared += records.len() as u64;
        // One proposal per successor, targets oldest first, successors in creation order.
        let mut by_successor: Vec<(usize, Vec<(usize, f32)>)> = Vec::new();
        for (i, s) in found.iter().enumerate() {
            let Some((j, sim)) = *s else { continue };
            match by_successor.iter_mut().find(|(s, _)| *s == j) {
                Some((_, targets)) => targets.push((i, sim)),
                None => by_successor.push((j, vec![(i, sim)])),
            }
        }
        by_successor.sort_by_key(|(j, _)| *j);
        for (j, targets) in by_successor {
            let successor = &records[j];
            for (i, _) in &targets {
                links.push(ConsolidationLink {
                    target: records[*i].record.id,
                    target_digest: records[*i].digest.clone(),
                    successor: successor.record.id,
                    successor_digest: successor.digest.clone(),
                });
            }
            proposals.push(Proposal {
                owner: g.owner.clone(),
                visibility: g.visibility.clone(),
                successor: RecordView::of(&successor.record),
                supersedes: targets
                    .into_iter()
                    .map(|(i, similarity)| Target {
                        record: RecordView::of(&records[i].record),
                        similarity,
                        status: Status::Proposed,
                        skipped: None,
                    })
                    .collect(),
            });
        }
    }
    progress.finish();

    let (mut applied, mut skipped) = (0, 0);
    if apply && !links.is_empty() {
        // Links were pushed in the order proposals list their targets.
        let mut outcomes = store.apply_consolidation(&links)?.into_iter();
        for t in proposals.iter_mut().flat_map(|p| p.supersedes.iter_mut()) {
            match outcomes.next().flatten() {
                None => {
                    t.status = Status::Applied;
                    applied += 1;
                }
                Some(why) => {
                    t.status = Status::Skipped;
                    t.skipped = Some(why);
                    skipped += 1;
                }
            }
        }
    }
    let report = Report {
        scope: scope.map(|s| s.as_str().to_owned()),
        threshold,
        applied: apply,
        summary: Summary {
            compared,
            proposals: proposals.len(),
            targets: links.len(),
            applied,
            skipped,
        },
        proposals,
    };
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_goes_to_the_newest_similar_newer_record() {
        let a = vec![1.0, 0.0, 0.0];
        let near_a = vec![0.99, 0.05, 0.0];
        let b = vec![0.0, 1.0, 0.0];
        let near_both = vec![0.7, 0.7, 0.0];
        // Oldest first: a, b, near_a, near_both.
        let found = successors(&[a, b, near_a, near_both], 0.95, || {});
        assert_eq!(
            found.iter().map(|f| f.map(|(j, _)| j)).collect::<Vec<_>>(),
            [Some(2), None, None, None]
        );
        assert!(found[0].unwrap().1 > 0.99);
    }

    #[test]
    fn copies_collapse_onto_the_newest_and_never_point_backwards() {
        let v = vec![0.3, 0.4, 0.5, 0.1, 0.2, 0.7, 0.1, 0.9, 0.3];
        let found = successors(&[v.clone(), v.clone(), v.clone()], 0.95, || {});
        assert_eq!(
            found.iter().map(|f| f.map(|(j, _)| j)).collect::<Vec<_>>(),
            [Some(2), Some(2), None]
        );
    }

    #[test]
    fn zero_and_mismatched_vectors_match_nothing() {
        let found = successors(&[vec![0.0, 0.0], vec![0.0, 0.0], vec![1.0, 0.0, 0.0]], 0.5, || {});
        assert!(found.iter().all(Option::is_none));
    }

    #[test]
    fn dot_of_unit_vectors_is_the_cosine() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.3 - 2.0).collect();
        let b: Vec<f32> = (0..19).map(|i| (i as f32).sin()).collect();
        let d = dot(&unit(&a), &unit(&b));
        assert!((d - spine_core::cosine(&a, &b)).abs() < 1e-5);
    }
}
