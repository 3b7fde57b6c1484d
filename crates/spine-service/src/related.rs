//! related_memories: the records connected to one anchor by supersession, shared citations,
//! shared tags and meaning.
//!
//! Every read goes through the caller's read [`Access`], so another owner's private record
//! can never become a neighbour (SPEC Authentication 4). Supersession links are the one
//! place we follow ids stored inside a record; each is re-resolved with that access before
//! it is returned or walked through.

use std::collections::{BTreeSet, HashMap, HashSet};

use spine_core::{Caller, Error, IdRef, Memory, RecordId, Timestamp};
use spine_store::{Access, Filter, Gate, NearestQuery, ScopeFilter, Shared};

use crate::args::RelatedMemoriesArgs;
use crate::request::{Output, RelatedRequest};
use crate::views::{
    Direction, Edge, EdgeType, MemoryView, RelatedItem, RelatedResult, SharedCitation,
};
use crate::{Service, store_error};

/// Most supersession neighbours, both directions together.
const SUPERSESSION_CAP: usize = 50;
/// Deepest supersession link followed in each direction.
const SUPERSESSION_MAX_DEPTH: u32 = 16;
/// Most citation neighbours.
const CITATION_CAP: usize = 20;
/// Most tag neighbours.
const TAG_CAP: usize = 20;
/// Records sharing a tag that are ranked by tag_weight before the cut to [`TAG_CAP`].
const TAG_POOL: usize = 200;

/// The related records gathered so far: each record once, its edges merged.
struct Neighbours {
    items: Vec<RelatedItem>,
    index: HashMap<RecordId, usize>,
    now: Timestamp,
    full: bool,
}

impl Neighbours {
    fn new(anchor: RecordId, now: Timestamp, full: bool) -> Self {
        // The anchor is never its own neighbour; usize::MAX marks it.
        Neighbours { items: vec![], index: HashMap::from([(anchor, usize::MAX)]), now, full }
    }

    /// Adds `edge` to `m`'s item, creating the item on first sight.
    fn add(&mut self, m: Memory, edge: Edge) {
        match self.index.get(&m.id) {
            Some(&usize::MAX) => {}
            Some(&i) => self.items[i].edges.push(edge),
            None => {
                self.index.insert(m.id, self.items.len());
                let states = spine_core::derive_states(&m, self.now);
                let memory = MemoryView::new(m, states, self.full);
                self.items.push(RelatedItem { memory, edges: vec![edge] });
            }
        }
    }

    /// Supersession items first, nearest first; then the strongest edge first.
    fn into_sorted(mut self) -> Vec<RelatedItem> {
        for item in &mut self.items {
            item.edges.sort_by_key(|e| e.edge_type);
        }
        self.items.sort_by(|a, b| {
            chain_depth(a)
                .cmp(&chain_depth(b))
                .then_with(|| strength(b).total_cmp(&strength(a)))
                .then_with(|| b.edges.len().cmp(&a.edges.len()))
                .then_with(|| a.memory.id.cmp(&b.memory.id))
        });
        self.items
    }
}

/// The supersession depth of an item; u32::MAX when it is not on the anchor's chain.
fn chain_depth(item: &RelatedItem) -> u32 {
    item.edges.iter().find_map(|e| e.depth).unwrap_or(u32::MAX)
}

/// An item's strongest non-supersession edge: a shared citation counts 1 (shared evidence),
/// a tag edge its tag_weight, a vector edge its cosine.
fn strength(item: &RelatedItem) -> f32 {
    item.edges
        .iter()
        .filter_map(|e| match e.edge_type {
            EdgeType::Supersession => None,
            EdgeType::Citation => Some(1.0),
            EdgeType::Tag => e.tag_weight,
            EdgeType::Vector => e.score,
        })
        .fold(f32::MIN, f32::max)
}

/// Jaccard weight of two tag sets: shared / distinct in both; and the shared tags, sorted.
fn tag_overlap(anchor: &[String], other: &[String]) -> (Vec<String>, f32) {
    let a: BTreeSet<&String> = anchor.iter().collect();
    let b: BTreeSet<&String> = other.iter().collect();
    let shared: Vec<String> = a.intersection(&b).map(|t| (*t).clone()).collect();
    let union = a.union(&b).count();
    let weight = if union == 0 { 0.0 } else { shared.len() as f32 / union as f32 };
    (shared, weight)
}

/// The anchor's citations that `other` also cites (same kind and ref), once each, in the
/// anchor's order.
fn shared_citations(anchor: &Memory, other: &Memory) -> Vec<SharedCitation> {
    let mut out: Vec<SharedCitation> = Vec::new();
    for c in &anchor.citations {
        let cited = other.citations.iter().any(|o| o.kind == c.kind && o.reference == c.reference);
        let shared = SharedCitation { kind: c.kind, reference: c.reference.clone() };
        if cited && !out.contains(&shared) {
            out.push(shared);
        }
    }
    out
}

impl Service {
    /// related_memories: the records connected to the anchor, each once with its edges.
    /// Not a strong-signal touch.
    pub fn related_memories(
        &self,
        caller: &Caller,
        a: RelatedMemoriesArgs,
    ) -> Result<RelatedResult, Error> {
        self.related(caller, a.try_into()?)
    }

    /// related_memories' operation on a checked request.
    pub fn related(&self, caller: &Caller, r: RelatedRequest) -> Result<RelatedResult, Error> {
        let RelatedRequest { id, k, output: Output { full, budget } } = r;
        let access = Access::read(caller);
        let anchor = self.find(&access, &id)?;
        let now = self.clock.now();

        let mut out = Neighbours::new(anchor.id, now, full);
        let mut truncated = self.supersession_edges(&access, &anchor, &mut out)?;
        truncated |= self.citation_edges(&access, &anchor, now, &mut out)?;
        truncated |= self.tag_edges(&access, &anchor, now, &mut out)?;
        // The vector neighbours are capped at k by design; that cap is not a truncation.
        self.vector_edges(&access, &anchor, k, now, &mut out)?;

        let states = spine_core::derive_states(&anchor, now);
        let anchor = MemoryView::new(anchor, states, full);
        // The anchor is always returned; the budget counts it first.
        let budget = budget.map(|b| b.saturating_sub(crate::budget::chars(&anchor)));
        let mut related = out.into_sorted();
        let truncated_by_budget = crate::budget::cut(&mut related, budget);
        Ok(RelatedResult { anchor, related, truncated, truncated_by_budget })
    }

    /// `id` when the caller can read it; ids stored in links are not access-checked yet.
    fn readable(&self, access: &Access, id: RecordId) -> Result<Option<Memory>, Error> {
        self.store.resolve(access, &IdRef::Id(id)).map_err(store_error)
    }

    /// SPEC Supersession rules: the anchor's chain in both directions, breadth first, in any
    /// state (superseded records are the point). A record the caller cannot read ends the
    /// walk on its side, so nothing beyond it — not even its existence, through a depth gap —
    /// is revealed. Returns true when the cap or the depth bound left readable records out.
    fn supersession_edges(
        &self,
        access: &Access,
        anchor: &Memory,
        out: &mut Neighbours,
    ) -> Result<bool, Error> {
        let mut seen: HashSet<RecordId> = HashSet::from([anchor.id]);
        let mut predecessors: Vec<RecordId> = anchor.supersedes.clone();
        let mut successors: Vec<RecordId> = anchor.superseded_by.into_iter().collect();
        let mut found = 0;
        // One level past the bound, only to learn whether the bound cut anything.
        for depth in 1..=SUPERSESSION_MAX_DEPTH + 1 {
            let mut next_predecessors = Vec::new();
            let mut next_successors = Vec::new();
            let levels = [
                (Direction::Predecessor, &predecessors, &mut next_predecessors),
                (Direction::Successor, &successors, &mut next_successors),
            ];
            for (direction, level, next) in levels {
                for &id in level {
                    if !seen.insert(id) {
                        continue;
                    }
                    let Some(m) = self.readable(access, id)? else { continue };
                    if found == SUPERSESSION_CAP || depth > SUPERSESSION_MAX_DEPTH {
                        return Ok(true);
                    }
                    match direction {
                        Direction::Predecessor => next.extend(m.supersedes.iter().copied()),
                        Direction::Successor => next.extend(m.superseded_by),
                    }
                    out.add(m, Edge::supersession(direction, depth));
                    found += 1;
                }
            }
            if next_predecessors.is_empty() && next_successors.is_empty() {
                break;
            }
            predecessors = next_predecessors;
            successors = next_successors;
        }
        Ok(false)
    }

    /// Recall-visible records citing one of the anchor's citations (same kind and ref), most
    /// recent first. Returns true when more than the cap exist.
    fn citation_edges(
        &self,
        access: &Access,
        anchor: &Memory,
        now: Timestamp,
        out: &mut Neighbours,
    ) -> Result<bool, Error> {
        let mut hits = self
            .store
            .sharing(
                access,
                Gate::ActiveAt(now),
                &anchor.id,
                Shared::Citations(&anchor.citations),
                CITATION_CAP + 1,
            )
            .map_err(store_error)?;
        let truncated = hits.len() > CITATION_CAP;
        hits.truncate(CITATION_CAP);
        for m in hits {
            let shared = shared_citations(anchor, &m);
            out.add(m, Edge::citation(shared));
        }
        Ok(truncated)
    }

    /// Recall-visible records sharing a tag with the anchor, highest tag_weight first (ties:
    /// most recent first), from a pool of the most recent [`TAG_POOL`]. Returns true when
    /// more than the cap exist.
    fn tag_edges(
        &self,
        access: &Access,
        anchor: &Memory,
        now: Timestamp,
        out: &mut Neighbours,
    ) -> Result<bool, Error> {
        let pool = self
            .store
            .sharing(access, Gate::ActiveAt(now), &anchor.id, Shared::Tags(&anchor.tags), TAG_POOL)
            .map_err(store_error)?;
        let mut ranked: Vec<(Vec<String>, f32, Memory)> = pool
            .into_iter()
            .map(|m| {
                let (shared, weight) = tag_overlap(&anchor.tags, &m.tags);
                (shared, weight, m)
            })
            .collect();
        // Stable: equal weights keep the store's most-recent-first order.
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        let truncated = ranked.len() > TAG_CAP;
        ranked.truncate(TAG_CAP);
        for (shared, weight, m) in ranked {
            out.add(m, Edge::tag(shared, weight));
        }
        Ok(truncated)
    }

    /// The `k` recall-visible records of the anchor's scope nearest it by cosine, every
    /// category included. Uses the anchor's stored vector, or embeds its content when the
    /// stored one came from another model.
    fn vector_edges(
        &self,
        access: &Access,
        anchor: &Memory,
        k: usize,
        now: Timestamp,
        out: &mut Neighbours,
    ) -> Result<(), Error> {
        let model = self.embedder.model_id();
        let anchor_vec = match self.store.vector(&anchor.id, model).map_err(store_error)? {
            Some(v) => v,
            None => self.embed_one(&anchor.content)?,
        };
        let filter = Filter::new(ScopeFilter::One(anchor.scope.clone()));
        let found = self.retrieve(&NearestQuery {
            access,
            filter: &filter,
            model,
            vector: &anchor_vec,
            now,
            any: 0,
            active: k,
            exclude: Some(anchor.id),
        })?;
        for (score, m) in found.hits {
            out.add(m, Edge::vector(score));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn tag_weight_is_shared_over_distinct_tags() {
        let (shared, w) = tag_overlap(&tags(&["db", "ops", "api"]), &tags(&["ops", "db", "ui"]));
        assert_eq!(shared, tags(&["db", "ops"]));
        assert_eq!(w, 0.5);
        assert_eq!(tag_overlap(&tags(&["a"]), &tags(&["a"])).1, 1.0);
        assert_eq!(tag_overlap(&tags(&["a"]), &tags(&["b"])), (vec![], 0.0));
        assert_eq!(tag_overlap(&[], &[]), (vec![], 0.0));
    }
}
