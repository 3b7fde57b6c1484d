//! Ranking (SPEC search rule 1): dense cosine, a lexical (BM25) adjustment, and a neighbour
//! step.
//!
//! 1. The store proposes the best-by-cosine pool ([`rerank_pool`]).
//! 2. The lexical adjustment rewards candidates that share the query's terms — identifiers,
//!    paths, version strings, names and the words of an answer that a sentence embedding
//!    blurs — by how much of the query they hold, in absolute terms ([`evidence`]): each
//!    candidate's BM25 over `spine_core::lexical` terms is divided by the BM25 a record would
//!    score holding every query term once (the sum of the query terms' IDF, terms no
//!    candidate holds included), so a record matching one word of a four-word question holds
//!    about a quarter of it however weak the rest of the pool is; that share is raised to
//!    [`COVERAGE_POWER`], so partial matches count for little and full ones for much; and one
//!    plain word alone, in a query of several terms, is no evidence at all — identifier-shaped
//!    terms excepted ([`spine_core::lexical::identifier_terms`]). It is added to the cosine
//!    times [`LEXICAL_WEIGHT`] ([`fuse`]).
//! 3. The neighbour step: the [`NEIGHBOUR_RADIUS`] records stored right before and after the
//!    best [`neighbour_anchors`] candidates in their scope join the pool, are fused the same way,
//!    and every candidate next to a leading one inherits part of that lead, never enough to
//!    pass the anchor it borrows from ([`neighbour_bonus`]). A conversation's answer is often
//!    the turn after the question that matched, and a note is often explained by the one
//!    written next to it.
//!
//! Why absolute: dividing by the best BM25 in the pool (the rule before) gave the full weight
//! to whatever matched best, so in a small store one shared word — however weak — earned more
//! than the cosine gap between a right and a wrong memory, and a question asked in other words
//! than its answer's lost the answer to a record sharing its most distinctive word
//! (`spine-bench eval paraphrase`; docs/performance.md, "Recall in small stores").
//!
//! `score` stays the dense similarity; only the order changes. [`Service::rank`] is the
//! recipe: these steps in order, the one ranking search_memory (and the prompt hook through
//! it) runs.

mod score;
mod terms;

use std::collections::HashMap;
use std::sync::Arc;

use spine_core::{Error, Memory, RecordId, Timestamp};
use spine_store::{Access, Body, Filter, Gate, NearestQuery, Selection};

pub use score::{Fused, bm25, evidence, fuse, neighbour_bonus};
pub use terms::{TERM_CACHE_BYTES, TermCache, TermCounts, term_hash};

use crate::views::GateHidden;
use crate::{Service, store_error};

/// Weight of the lexical evidence (0..=1, [`evidence`]) added to the cosine for ordering.
///
/// A record holding every query term once gains this much, one holding half of the query's
/// information gains `0.5^COVERAGE_POWER` of it (0.28), a quarter 0.05. Chosen with
/// [`COVERAGE_POWER`] by measurement (docs/performance.md, "Recall in small stores"): on
/// `spine-bench eval paraphrase` lighter curves (power 2) let a distractor sharing two of five
/// words pass a target 0.15 ahead by cosine, heavier weights (2 at power 2.5) lost R@1; on
/// `spine-bench locomo` lighter ones lost R@5 (1.5 at power 3).
pub const LEXICAL_WEIGHT: f32 = 1.6;

/// The power the lexical coverage is raised to ([`evidence`]).
pub const COVERAGE_POWER: f32 = 2.5;

/// How many dense-ranked candidates the lexical step may reorder, for `k` results.
///
/// Any candidate within [`LEXICAL_WEIGHT`] of the k-th cosine may climb into the results,
/// and a wider pool also steadies the normalisation (a one-word match is less often the
/// best in the pool). Widening costs linearly: every pool record is read back and its
/// content, summary and tags tokenised for [`bm25`] on each query.
pub fn rerank_pool(k: usize) -> usize {
    (k * 12).max(96)
}

/// How many of the best fused candidates, for `k` results, have the records stored next to
/// them fetched and can lend them part of their lead ([`neighbour_bonus`]): twice `k`, at
/// least 10, at most 50 (each anchor costs two short indexed range reads).
pub fn neighbour_anchors(k: usize) -> usize {
    (2 * k).clamp(10, 50)
}

/// How many records on each side of an anchor are its neighbours: the turn right after a
/// question is often a one-word reaction and the answer comes next. On `spine-bench locomo`
/// (turns) a radius of 2 raised R@5 over 1, 3 nothing more; `spine-bench eval` (unrelated
/// neighbours) was unchanged (docs/performance.md, "Recall on LoCoMo").
pub const NEIGHBOUR_RADIUS: usize = 2;

/// Share of an anchor's lead over the last anchor that the records next to it inherit.
///
/// On `spine-bench locomo` conversations 1–5, 0.8 was best (0.5, 0.8 and 1.2 tried; from 1.2
/// the neighbours crowd out the hits they hang on). In a store whose neighbours are unrelated
/// (`spine-bench eval`, documents stored in random order) lending costs MRR: 0.8 lowered
/// code MRR, 0.5 keeps it at the figure before the step (docs/performance.md, "Recall on
/// LoCoMo").
pub const NEIGHBOUR_WEIGHT: f32 = 0.5;

/// A query's lexical side: its terms and which of them are identifier-shaped.
struct Query {
    terms: Vec<String>,
    identifiers: std::collections::HashSet<String>,
}

/// What one ranking reads.
pub(crate) struct RankQuery<'a> {
    /// The query's text (for the lexical step).
    pub(crate) query: &'a str,
    /// Its embedding.
    pub(crate) vector: &'a [f32],
    /// Who reads.
    pub(crate) access: &'a Access,
    /// The hard pre-filters.
    pub(crate) filter: &'a Filter,
    /// The time the recall gate is evaluated at.
    pub(crate) now: Timestamp,
    /// How many records to return.
    pub(crate) k: usize,
}

/// A ranking: the best `k` recall-visible records, best first, as `(fused, dense, record)`,
/// and what the recall gate hid among the `k` nearest of any state.
pub(crate) struct Ranking {
    pub(crate) ranked: Vec<(f32, f32, Memory)>,
    pub(crate) hidden: GateHidden,
}

/// What [`Service::retrieve`] found.
pub(crate) struct Retrieved<R = Memory> {
    /// Recall-visible records with their exact cosine to the query, best first.
    pub(crate) hits: Vec<(f32, R)>,
    /// What the gate hid among the nearest of any state.
    pub(crate) hidden: GateHidden,
}

impl Service {
    /// The one retrieval path of search_memory, search_discovery and related_memories: the
    /// `q.active` nearest recall-visible records with their exact cosines, best first, read
    /// from one snapshot, and what the gate hid among the `q.any` nearest of any state
    /// (SPEC search rule 4).
    pub(crate) fn retrieve(&self, q: &NearestQuery<'_>) -> Result<Retrieved, Error> {
        let Retrieved { hits, hidden } = self.retrieve_bodies(q)?;
        let hits = hits
            .into_iter()
            .map(|(score, (_, body))| Ok((score, body.into_memory().map_err(store_error)?)))
            .collect::<Result<_, Error>>()?;
        Ok(Retrieved { hits, hidden })
    }

    /// [`Self::retrieve`] with each record as its id and stored payload, decoded when needed.
    fn retrieve_bodies(&self, q: &NearestQuery<'_>) -> Result<Retrieved<(RecordId, Body)>, Error> {
        let nearest = self.store.nearest(q).map_err(store_error)?;
        let mut hidden = GateHidden::default();
        for n in nearest.iter().take(q.any) {
            hidden.count(&n.states);
        }
        let hits = nearest
            .into_iter()
            .filter_map(|n| n.record.filter(|_| n.states.is_empty()).map(|b| (n.score, (n.id, b))))
            .take(q.active)
            .collect();
        Ok(Retrieved { hits, hidden })
    }

    /// The ranking recipe (SPEC search rule 1), the steps of this module in order: the pool
    /// ([`rerank_pool`]) from the store, the lexical fusion ([`fuse`]), the neighbour step
    /// ([`neighbour_anchors`], `Store::adjacent`, a second fusion, [`neighbour_bonus`]), then
    /// the best `k`. search_memory runs it (and through it the prompt hook's context).
    pub(crate) fn rank(&self, q: &RankQuery<'_>) -> Result<Ranking, Error> {
        let (k, now) = (q.k, q.now);
        let pool_size = rerank_pool(k);
        let span = tracing::trace_span!("search.retrieve").entered();
        let Retrieved { hits, hidden } = self.retrieve_bodies(&NearestQuery {
            access: q.access,
            filter: q.filter,
            model: self.embedder.model_id(),
            vector: q.vector,
            now,
            any: k,
            active: pool_size,
            exclude: None,
        })?;
        drop(span);
        let span = tracing::trace_span!("search.lexical").entered();
        let fusion =
            spine_core::otel_span!("fusion", otel.name = "lexical fusion", spine.pool = hits.len())
                .entered();
        let query = Query {
            terms: spine_core::lexical::query_terms(q.query),
            identifiers: spine_core::lexical::identifier_terms(q.query),
        };
        let mut pool: Vec<(f32, RecordId)> =
            hits.iter().map(|(score, (id, _))| (*score, *id)).collect();
        let mut records: HashMap<RecordId, Body> = hits.into_iter().map(|(_, r)| r).collect();
        let mut terms = HashMap::new();
        let mut fused = self.fuse_pool(&pool, &records, &mut terms, &query)?;
        drop((fusion, span));
        let anchors = neighbour_anchors(k).min(fused.len());
        if self.neighbour_weight > 0.0 && anchors > 0 {
            let _span = tracing::trace_span!("search.neighbours").entered();
            let _fusion =
                spine_core::otel_span!("neighbours", otel.name = "neighbour step").entered();
            let lead: Vec<&spine_core::Memory> = fused[..anchors]
                .iter()
                .map(|f| records[&f.id].memory())
                .collect::<Result<_, _>>()
                .map_err(store_error)?;
            let adjacent = self
                .store
                .adjacent(
                    Selection { access: q.access, filter: q.filter, gate: Gate::ActiveAt(now) },
                    &lead,
                    self.embedder.model_id(),
                    NEIGHBOUR_RADIUS,
                    &|id| records.contains_key(id),
                )
                .map_err(store_error)?;
            let mut pairs = Vec::with_capacity(adjacent.len());
            for n in adjacent {
                pairs.push((n.anchor, n.id));
                // Two anchors can share a neighbour the pool lacked: it joins once.
                if let (Some((record, vector)), std::collections::hash_map::Entry::Vacant(e)) =
                    (n.record, records.entry(n.id))
                {
                    pool.push((spine_core::cosine(q.vector, &vector), n.id));
                    e.insert(record);
                }
            }
            if !pairs.is_empty() {
                pool.sort_by(|a, b| b.0.total_cmp(&a.0));
                fused = self.fuse_pool(&pool, &records, &mut terms, &query)?;
                neighbour_bonus(&mut fused, &pairs, anchors, self.neighbour_weight);
            }
        }
        fused.truncate(k);
        // Only the records the answer keeps are decoded here (the anchors were above).
        let ranked: Vec<(f32, f32, spine_core::Memory)> = fused
            .iter()
            .filter_map(|f| records.remove(&f.id).map(|b| (f.fused, f.dense, b)))
            .map(|(fused, dense, b)| Ok((fused, dense, b.into_memory().map_err(store_error)?)))
            .collect::<Result<_, Error>>()?;
        Ok(Ranking { ranked, hidden })
    }

    /// The lexical step over `pool` (`(cosine, id)`, best first): each record's terms (from
    /// the service's term cache, kept in `terms` for the search), BM25 over the pool, fused
    /// with the cosine (SPEC search rule 1).
    fn fuse_pool(
        &self,
        pool: &[(f32, RecordId)],
        records: &HashMap<RecordId, Body>,
        terms: &mut HashMap<RecordId, Arc<TermCounts>>,
        query: &Query,
    ) -> Result<Vec<Fused>, Error> {
        let missing: Vec<(RecordId, &Body)> = pool
            .iter()
            .filter(|(_, id)| !terms.contains_key(id))
            .map(|(_, id)| (*id, &records[id]))
            .collect();
        let counted = self.terms.terms(&missing)?;
        terms.extend(missing.iter().map(|(id, _)| *id).zip(counted));
        let docs: Vec<&TermCounts> = pool.iter().map(|(_, id)| &*terms[id]).collect();
        let evidence = evidence(&query.terms, &query.identifiers, &docs);
        let lexical: Vec<(RecordId, f32)> = pool
            .iter()
            .zip(evidence)
            .filter(|(_, s)| *s > 0.0)
            .map(|((_, id), s)| (*id, s))
            .collect();
        Ok(fuse(pool, &lexical, self.lexical_weight))
    }
}
