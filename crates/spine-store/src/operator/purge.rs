//! The rules of `spine-review purge`, the same on every engine (SPEC "Operator commands"):
//! which records criteria select, the extract-before-delete gate's verdict on a record,
//! the chain rule, and what applying a plan does to each listed record, in that order.
//! Each engine supplies only its reads and deletes, in its own transactions.

use std::collections::{HashMap, HashSet};

use spine_core::{RecordId, Timestamp};

use crate::codec::decode;
use crate::predicate::{self, Cond, StateAt};
use crate::{
    Filter, PurgeCandidate, PurgeClass, PurgeCriteria, PurgeOutcome, PurgeRefusal, Result,
    ScopeFilter, record_digest,
};

/// How many records one gate read checks in a plan (and one progress step).
const GATE_CHUNK: usize = 500;

impl PurgeCriteria {
    /// The conditions on a record that `self` selects at `now`.
    pub(crate) fn conditions(&self, now: Timestamp) -> Vec<Cond> {
        let now = now.to_epoch_seconds().as_secs();
        let classes: Vec<StateAt> = dedup(&self.classes)
            .into_iter()
            .map(|class| match class {
                PurgeClass::Archived => StateAt::Archived,
                PurgeClass::Superseded => StateAt::Superseded,
                PurgeClass::Expired => StateAt::Expired(now),
            })
            .collect();
        let filter = Filter {
            tags_all: self.tags_all.clone(),
            categories_any: self.category.map(|c| vec![c]),
            created_before: self.created_before,
            ..Filter::new(match &self.scope {
                Some(s) => ScopeFilter::One(s.clone()),
                None => ScopeFilter::All,
            })
        };
        let classes = (!classes.is_empty()).then_some(Cond::AnyState(classes));
        classes.into_iter().chain(predicate::filtered(&filter)).collect()
    }
}

/// The gate's verdict on one record, from its payload as stored now, the digest and the
/// file of its last export (`None`: gone, or never exported): whether it passes (exported
/// as it is now), and the file.
pub(crate) fn export_gate_verdict(
    row: Option<(String, String, String)>,
) -> Result<(bool, Option<String>)> {
    match row {
        Some((body, digest, file)) => Ok((record_digest(&decode(&body)?)? == digest, Some(file))),
        None => Ok((false, None)),
    }
}

/// Successor → the records whose `superseded_by` names it, from `(id, superseded_by)`
/// pairs. Malformed ids are verify's business; they link nothing here.
pub(crate) fn predecessors(
    pairs: impl IntoIterator<Item = (String, String)>,
) -> HashMap<RecordId, Vec<RecordId>> {
    let mut out: HashMap<RecordId, Vec<RecordId>> = HashMap::new();
    for (id, succ) in pairs {
        if let (Some(id), Some(succ)) = (RecordId::parse(&id), RecordId::parse(&succ)) {
            out.entry(succ).or_default().push(id);
        }
    }
    out
}

/// A plan: the records selected with their chains (`selected`, read in one snapshot), gated
/// [`GATE_CHUNK`] at a time through `gate` (`gate_progress` after each chunk), then judged.
pub(crate) fn plan(
    selected: (Vec<PurgeCandidate>, HashMap<RecordId, Vec<RecordId>>),
    mut gate: impl FnMut(&[RecordId]) -> Result<Vec<bool>>,
    gate_progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<PurgeCandidate>> {
    let (mut candidates, predecessors) = selected;
    let ids: Vec<RecordId> = candidates.iter().map(|c| c.id).collect();
    let mut passed = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(GATE_CHUNK) {
        passed.extend(gate(chunk)?);
        gate_progress(chunk.len() as u64, ids.len() as u64);
    }
    purge_verdicts(&mut candidates, &passed, &predecessors);
    Ok(candidates)
}

/// What applying a plan does to each of `listed`, judged again inside the delete
/// transaction: `selected` is what the criteria select now among the listed records, `gate`
/// the gate's verdict on each of them, `predecessors` their chains. The engine deletes the
/// records whose outcome says deleted (each once, in order).
pub(crate) fn outcomes(
    listed: &[RecordId],
    mut selected: Vec<PurgeCandidate>,
    gate: Vec<(bool, Option<String>)>,
    predecessors: &HashMap<RecordId, Vec<RecordId>>,
) -> Vec<PurgeOutcome> {
    let mut passed = Vec::with_capacity(selected.len());
    for (cand, (ok, file)) in selected.iter_mut().zip(gate) {
        passed.push(ok);
        if file.is_some() {
            cand.exported_to = file;
        }
    }
    // Only the listed records may be deleted: a record that became eligible since the plan
    // counts as staying, so it also holds back its successors.
    purge_verdicts(&mut selected, &passed, predecessors);
    let verdicts: HashMap<RecordId, Option<PurgeRefusal>> =
        selected.into_iter().map(|c| (c.id, c.refused)).collect();
    let mut done = HashSet::new();
    listed
        .iter()
        .map(|id| {
            let skipped = match verdicts.get(id) {
                _ if done.contains(id) => Some("listed twice".to_owned()),
                None => Some("gone, or no longer matches the selection".to_owned()),
                Some(Some(refusal)) => Some(skip_reason(refusal)),
                Some(None) => {
                    done.insert(*id);
                    None
                }
            };
            PurgeOutcome { id: *id, deleted: skipped.is_none(), skipped }
        })
        .collect()
}

/// Why a listed record was not deleted.
fn skip_reason(refusal: &PurgeRefusal) -> String {
    match refusal {
        PurgeRefusal::NotExported => "no longer passes the export gate".to_owned(),
        PurgeRefusal::ChangedSinceExport => "changed since it was exported".to_owned(),
        PurgeRefusal::SupersedesRecordsThatStay { predecessors } => format!(
            "supersedes records that stay: {}",
            predecessors.iter().map(RecordId::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Removes from `deletable` every record that supersedes a record staying, until none
/// does (keeping one can keep its successor); returns those held back with the records
/// that stay. SPEC "Supersession rules": a purge never leaves a chain without a live head.
fn hold_back_successors(
    deletable: &mut HashSet<RecordId>,
    predecessors: &HashMap<RecordId, Vec<RecordId>>,
) -> HashMap<RecordId, Vec<RecordId>> {
    let mut held = HashMap::new();
    loop {
        let blocked: Vec<(RecordId, Vec<RecordId>)> = deletable
            .iter()
            .filter_map(|id| {
                let staying: Vec<RecordId> = predecessors
                    .get(id)?
                    .iter()
                    .filter(|p| !deletable.contains(p))
                    .copied()
                    .collect();
                (!staying.is_empty()).then_some((*id, staying))
            })
            .collect();
        if blocked.is_empty() {
            return held;
        }
        for (id, staying) in blocked {
            deletable.remove(&id);
            held.insert(id, staying);
        }
    }
}

/// `items` without repeats, in their first order.
pub(crate) fn dedup<T: PartialEq + Copy>(items: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for i in items {
        if !out.contains(i) {
            out.push(*i);
        }
    }
    out
}

/// Applies the gate verdicts (`passed[i]` for `candidates[i]`) and the chain rule.
pub fn purge_verdicts(
    candidates: &mut [PurgeCandidate],
    passed: &[bool],
    predecessors: &HashMap<RecordId, Vec<RecordId>>,
) {
    let mut deletable = HashSet::new();
    for (c, ok) in candidates.iter_mut().zip(passed) {
        c.refused = match (ok, &c.exported_to) {
            (true, _) => {
                deletable.insert(c.id);
                None
            }
            (false, None) => Some(PurgeRefusal::NotExported),
            (false, Some(_)) => Some(PurgeRefusal::ChangedSinceExport),
        };
    }
    let held = hold_back_successors(&mut deletable, predecessors);
    for c in candidates.iter_mut() {
        if let Some(staying) = held.get(&c.id) {
            c.refused =
                Some(PurgeRefusal::SupersedesRecordsThatStay { predecessors: staying.clone() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_successor_is_held_back_while_its_predecessors_stay() {
        let (a, b, c) = (RecordId::mint(), RecordId::mint(), RecordId::mint());
        // a -> b -> c (c is the head).
        let preds = HashMap::from([(b, vec![a]), (c, vec![b])]);
        let mut all = HashSet::from([a, b, c]);
        assert!(hold_back_successors(&mut all, &preds).is_empty());
        let mut without_a = HashSet::from([b, c]);
        let held = hold_back_successors(&mut without_a, &preds);
        assert!(without_a.is_empty(), "holding b back holds c back too");
        assert_eq!(held[&b], vec![a]);
        assert_eq!(held[&c], vec![b]);
    }
}
