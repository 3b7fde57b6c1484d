//! What `spine-review consolidate` applies, decided the same on every engine: from each
//! record a batch of links involves, as the apply transaction reads it, which links are
//! applied (SPEC "Supersession rules": links both ways, never a rule, never a record changed
//! since it was compared, one successor per target) and what each record gets written.

use std::collections::{HashMap, HashSet};

use spine_core::{Category, Memory, RecordId};

use crate::codec::decode;
use crate::{ConsolidationLink, Result, StoreError, record_digest};

/// The writes that apply a batch of links, and what became of each link.
pub(crate) struct Applied {
    /// Entry i: `None` when link i is applied, else why it is skipped.
    pub(crate) outcomes: Vec<Option<String>>,
    /// `(target, successor)`: each target's new `superseded_by`, in link order.
    pub(crate) stamps: Vec<(RecordId, RecordId)>,
    /// Each successor's new `supersedes` (a JSON array of ids), in the order the successors
    /// first get a target.
    pub(crate) supersedes: Vec<(RecordId, String)>,
}

impl Applied {
    /// The records the links change: each stamped target, then each linked successor (the
    /// audit event's records).
    pub(crate) fn changed(&self) -> Vec<RecordId> {
        let targets = self.stamps.iter().map(|(target, _)| *target);
        targets.chain(self.supersedes.iter().map(|(successor, _)| *successor)).collect()
    }
}

/// Decides `links` from each involved record as it is now: `body_of(id)` is its stored
/// payload, `None` when it is gone (called once per record).
pub(crate) fn apply(
    links: &[ConsolidationLink],
    mut body_of: impl FnMut(&RecordId) -> Result<Option<String>>,
) -> Result<Applied> {
    // Each involved record, as it is now: Err(reason) when it may not be touched.
    let mut state: HashMap<RecordId, std::result::Result<Memory, String>> = HashMap::new();
    for l in links {
        for (id, digest) in [(l.target, &l.target_digest), (l.successor, &l.successor_digest)] {
            if state.contains_key(&id) {
                continue;
            }
            let verdict = match body_of(&id)?.map(|b| decode(&b)) {
                None => Err(format!("{id} no longer exists")),
                Some(Err(_)) => Err(format!("{id} has a corrupt payload")),
                Some(Ok(m)) if m.category == Category::Rule => {
                    Err(format!("{id} is a rule (rules are immutable)"))
                }
                Some(Ok(m)) if &record_digest(&m)? != digest => {
                    Err(format!("{id} changed since it was compared"))
                }
                Some(Ok(m)) => Ok(m),
            };
            state.insert(id, verdict);
        }
    }
    let mut applied =
        Applied { outcomes: Vec::with_capacity(links.len()), stamps: vec![], supersedes: vec![] };
    let mut stamped: HashSet<RecordId> = HashSet::new();
    let mut added: Vec<(RecordId, Vec<RecordId>)> = Vec::new();
    for l in links {
        let why = [l.target, l.successor].iter().find_map(|id| state[id].as_ref().err());
        if let Some(why) = why {
            applied.outcomes.push(Some(why.clone()));
            continue;
        }
        if l.target == l.successor || !stamped.insert(l.target) {
            applied.outcomes.push(Some(format!("{} already has a successor", l.target)));
            continue;
        }
        applied.stamps.push((l.target, l.successor));
        match added.iter_mut().find(|(s, _)| *s == l.successor) {
            Some((_, targets)) => targets.push(l.target),
            None => added.push((l.successor, vec![l.target])),
        }
        applied.outcomes.push(None);
    }
    for (successor, targets) in added {
        let Ok(m) = &state[&successor] else { continue };
        let mut supersedes = m.supersedes.clone();
        for t in targets {
            if !supersedes.contains(&t) {
                supersedes.push(t);
            }
        }
        let ids: Vec<String> = supersedes.iter().map(RecordId::to_string).collect();
        let json = serde_json::to_string(&ids).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        applied.supersedes.push((successor, json));
    }
    Ok(applied)
}
