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

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use lru::LruCache;

use spine_core::{Error, Memory, RecordId, Timestamp};
use spine_store::{Access, Body, Filter, Gate, NearestQuery, Selection};

use crate::views::GateHidden;
use crate::{Service, store_error};

/// Weight of the lexical evidence (0..=1, [`evidence`]) added to the cosine for ordering.
///
/// A record holding every query term once gains this much, one holding half of the query's
/// information gains `0.5^COVERAGE_POWER` of it (0.28), a quarter 0.05. Chosen with
/// [`COVERAGE_POWER`] by measurement (docs/performance.md, "Recall in small stores"): on
/// `spine-bench eval paraphrase` lighter curves (power 2) let a distractor sharing two of five
/// words pass a target 0.15 ahead by cosine, heavier weights (2 at power 2.5) lost R@1; on
/// `spine-bench locomo` lighter ones lost R@5 (1.5 at power 3: turns 0.626).
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
/// (turns) a radius of 2 added 0.02 to R@5 over 1, 3 nothing more; `spine-bench eval`
/// (unrelated neighbours) was unchanged.
pub const NEIGHBOUR_RADIUS: usize = 2;

/// Share of an anchor's lead over the last anchor that the records next to it inherit.
///
/// On `spine-bench locomo` conversations 1–5, 0.8 was best (0.5, 0.8 and 1.2 tried; from 1.2
/// the neighbours crowd out the hits they hang on). In a store whose neighbours are unrelated
/// (`spine-bench eval`, documents stored in random order) lending costs MRR: 0.8 took code
/// MRR from 0.531 to 0.511, 0.5 keeps it at the figure before the step (0.533).
pub const NEIGHBOUR_WEIGHT: f32 = 0.5;

/// The memory a [`TermCache`] may hold ([`TermCounts::cached_bytes`]: 12 bytes a distinct
/// term and ~130 a record): ~30,000 records of 2,000-character notes (~150 distinct terms
/// each), ~100,000 short ones.
///
/// Bounded by bytes, not records: at 8,192 records, a store of 10,000 Debian descriptions
/// tokenised a fifth of each search's pool again (a seventh of the server's CPU outside the
/// embedder, `perf`), while 8,192 long notes and 8,192 one-liners differ tenfold in memory.
pub const TERM_CACHE_BYTES: usize = 64 << 20;

/// A record's lexical terms as BM25 reads them: how many there are, and how often each
/// distinct one occurs, by the term's 64-bit hash ([`term_hash`]).
///
/// Hashes in one flat sorted array are what makes BM25 cheap: a pool of ~200 records is
/// looked up for every query term, and comparing strings meant a cache miss per comparison
/// (each `String` on the heap). Two distinct terms share a 64-bit hash with a chance of
/// about 2⁻⁶⁴ per pair; such a pair would count as one term.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TermCounts {
    /// The number of terms (the document length).
    len: usize,
    /// Each distinct term's hash, sorted.
    hashes: Box<[u64]>,
    /// The count of the term at the same place in `hashes`.
    counts: Box<[u32]>,
}

/// The hash [`TermCounts`] keys a term by: foldhash with a fixed seed (the counts live in
/// memory only, so the seed need not be secret; nothing is gained by colliding on purpose
/// that writing the other term would not give).
pub fn term_hash(term: &str) -> u64 {
    const TERM_HASH: foldhash::fast::FixedState =
        foldhash::fast::FixedState::with_seed(0x5350_494e_455f_4c58);
    TERM_HASH.hash_one(term)
}

impl TermCounts {
    /// The counts of `terms`.
    pub fn new(terms: &[String]) -> Self {
        Self::of_hashes(terms.iter().map(|t| term_hash(t)).collect())
    }

    /// The counts of a record's terms: those of `spine_core::lexical::record_terms` of its
    /// content, summary and tags, hashed as they are found (no string per term).
    pub fn of_record(content: &str, summary: &str, tags: &[String]) -> Self {
        let mut hashes = Vec::with_capacity(content.len() / 6);
        spine_core::lexical::for_each_record_term(content, summary, tags, |t| {
            hashes.push(term_hash(t));
        });
        Self::of_hashes(hashes)
    }

    fn of_hashes(mut all: Vec<u64>) -> Self {
        all.sort_unstable();
        let runs = || all.chunk_by(|a, b| a == b);
        // Cached for many searches: no spare capacity (collected straight into boxes).
        TermCounts {
            len: all.len(),
            hashes: runs().map(|run| run[0]).collect(),
            counts: runs().map(|run| run.len() as u32).collect(),
        }
    }

    /// How often the term whose [`term_hash`] is `hash` occurs.
    pub fn count(&self, hash: u64) -> u32 {
        self.hashes.binary_search(&hash).map_or(0, |i| self.counts[i])
    }

    /// What these counts cost a [`TermCache`]: their arrays, and a fixed share for the
    /// struct, its `Arc` and the cache's entry (key, links, table slot).
    pub fn cached_bytes(&self) -> usize {
        const ENTRY: usize = 128;
        ENTRY + self.hashes.len() * (size_of::<u64>() + size_of::<u32>())
    }
}

/// An LRU cache of records' lexical term counts, keyed by record id and a hash of the
/// record's stored payload, shared by the searches of one service.
///
/// Tokenising a pool of a hundred records (splitting, lower-casing, stemming) is most of what
/// the lexical step costs, and a scope that is searched is searched again; keyed by the
/// payload as stored, a cached record is not even decoded. Invariant: cached counts are
/// exactly those of `spine_core::lexical::record_terms` of the record's content, summary and
/// tags — an edited record has another payload and is tokenised afresh (so is one whose
/// access count a `get_memory` bumped, once) — so the cache never changes a result.
///
/// A search takes the lock twice for its whole pool (look up, then add what was missing),
/// not once per record: under 50 concurrent searches, one lock taken per pool record was
/// ~200 hand-overs of the same cache lines per search.
pub struct TermCache {
    cache: Mutex<Lru>,
    /// Hashes payloads: foldhash, seeded per process (not a fixed seed, so that nobody can
    /// write a payload that collides with another on purpose).
    payload: foldhash::fast::RandomState,
}

/// A record's id and the hash of its stored payload.
type TermKey = (RecordId, u64);

/// The least recently used entries go first, until the rest fits `budget` bytes
/// ([`TermCounts::cached_bytes`]).
struct Lru {
    entries: LruCache<TermKey, Arc<TermCounts>>,
    bytes: usize,
    budget: usize,
}

impl Lru {
    fn new(budget: usize) -> Self {
        Lru { entries: LruCache::unbounded(), bytes: 0, budget }
    }

    fn insert(&mut self, key: TermKey, counts: Arc<TermCounts>) {
        self.bytes += counts.cached_bytes();
        // Two searches can miss the same record at once: the second replaces the first.
        if let Some(old) = self.entries.put(key, counts) {
            self.bytes -= old.cached_bytes();
        }
        while self.bytes > self.budget {
            let Some((_, old)) = self.entries.pop_lru() else { break };
            self.bytes -= old.cached_bytes();
        }
    }
}

impl Default for TermCache {
    fn default() -> Self {
        TermCache::with_budget(TERM_CACHE_BYTES)
    }
}

impl TermCache {
    /// A cache that holds at most `budget` bytes of term counts.
    pub fn with_budget(budget: usize) -> Self {
        TermCache {
            cache: Mutex::new(Lru::new(budget)),
            payload: foldhash::fast::RandomState::default(),
        }
    }

    /// The term counts of each record `(id, stored payload)`, in order: from the cache, or
    /// tokenised now (decoding the body) and added to it.
    pub fn terms(&self, records: &[(RecordId, &Body)]) -> Result<Vec<Arc<TermCounts>>, Error> {
        let keys: Vec<TermKey> =
            records.iter().map(|(id, body)| (*id, self.payload.hash_one(body.raw()))).collect();
        let lock = || self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let cached: Vec<Option<Arc<TermCounts>>> = {
            let mut cache = lock();
            keys.iter().map(|k| cache.entries.get(k).cloned()).collect()
        };
        let mut added = Vec::new();
        let counts = cached
            .into_iter()
            .zip(records.iter().zip(&keys))
            .map(|(hit, ((_, body), key))| match hit {
                Some(t) => Ok(t),
                None => {
                    let m = body.memory().map_err(store_error)?;
                    let t = Arc::new(TermCounts::of_record(&m.content, &m.summary, &m.tags));
                    added.push((*key, t.clone()));
                    Ok(t)
                }
            })
            .collect::<Result<Vec<_>, Error>>()?;
        if !added.is_empty() {
            let mut cache = lock();
            for (key, t) in added {
                cache.insert(key, t);
            }
        }
        Ok(counts)
    }
}

/// BM25 parameters (the usual defaults: Lucene, Elasticsearch, SQLite FTS5).
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// The BM25 relevance of each document (its `spine_core::lexical` terms) to the query terms,
/// with document frequencies and the average length taken over `docs` themselves — the
/// pool being re-ordered — rather than the whole store.
///
/// Pool statistics cost nothing to gather (the pool is read anyway), involve only records
/// the caller may read (nothing about other owners' records can sway the order), and
/// weight terms by how well they separate the candidates being ordered: a term every
/// candidate shares moves none of them. IDF is the non-negative Lucene form
/// `ln(1 + (N − df + 0.5) / (df + 0.5))`.
pub fn bm25(query_terms: &[String], docs: &[&TermCounts]) -> Vec<f32> {
    bm25_and_ideal(query_terms, docs).0
}

/// [`bm25`] and the BM25 of a record of average length holding every query term once: the
/// sum of the terms' IDF (a term no document holds has the highest).
fn bm25_and_ideal(query_terms: &[String], docs: &[&TermCounts]) -> (Vec<f32>, f32) {
    let n = docs.len() as f32;
    if docs.is_empty() || query_terms.is_empty() {
        return (vec![0.0; docs.len()], 0.0);
    }
    let avgdl = (docs.iter().map(|d| d.len).sum::<usize>() as f32 / n).max(1.0);
    let hashes: Vec<u64> = query_terms.iter().map(|q| term_hash(q)).collect();
    // tf[d * terms + q]: occurrences of query term q in document d (one allocation, not one
    // per document).
    let terms = hashes.len();
    let tf: Vec<f32> =
        docs.iter().flat_map(|d| hashes.iter().map(|&q| d.count(q) as f32)).collect();
    let idf: Vec<f32> = (0..terms)
        .map(|q| {
            let df = tf.chunks_exact(terms).filter(|d| d[q] > 0.0).count() as f32;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let scores = docs
        .iter()
        .zip(tf.chunks_exact(terms))
        .map(|(d, tf)| {
            let norm = K1 * (1.0 - B + B * d.len as f32 / avgdl);
            tf.iter().zip(&idf).map(|(f, idf)| idf * f * (K1 + 1.0) / (f + norm)).sum()
        })
        .collect();
    (scores, idf.iter().sum())
}

/// Each document's lexical evidence for the query, in 0..=1: its [`bm25`] over `docs` (the
/// pool) divided by the BM25 of a record holding every query term once (capped at 1), raised
/// to [`COVERAGE_POWER`]; 0 for a document that holds only one of several query terms and
/// that term is a plain word (not among `identifiers`, the query's
/// [`spine_core::lexical::identifier_terms`]).
///
/// The share is the part of the query's information the document holds — what a reader
/// means by "it matches the question" — and does not depend on how well the rest of the pool
/// matches: a record sharing one weak word stays weak in a store of seven. One plain word is
/// what a record about something else most often shares with a question asked in other words;
/// an identifier, path, version or number alone still counts (a sentence embedding blurs
/// those, and one is often the whole question).
pub fn evidence(
    query_terms: &[String],
    identifiers: &std::collections::HashSet<String>,
    docs: &[&TermCounts],
) -> Vec<f32> {
    let (scores, ideal) = bm25_and_ideal(query_terms, docs);
    if ideal <= 0.0 {
        return vec![0.0; docs.len()];
    }
    let hashes: Vec<(u64, bool)> =
        query_terms.iter().map(|q| (term_hash(q), identifiers.contains(q))).collect();
    docs.iter()
        .zip(scores)
        .map(|(d, score)| {
            let mut held = hashes.iter().filter(|(h, _)| d.count(*h) > 0);
            let lone_word = match (held.next(), held.next()) {
                (Some((_, identifier)), None) => hashes.len() > 1 && !identifier,
                _ => false,
            };
            if lone_word { 0.0 } else { (score / ideal).min(1.0).powf(COVERAGE_POWER) }
        })
        .collect()
}

/// A pool candidate with its ordering key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fused {
    /// The record.
    pub id: RecordId,
    /// Cosine similarity to the query (the reported `score`).
    pub dense: f32,
    /// `dense + weight × lexical evidence` ([`evidence`]; 0 without a lexical match).
    pub fused: f32,
}

/// Orders `pool` — `(cosine, id)`, best cosine first — by the fused key, given the lexical
/// evidence (0..=1, [`evidence`]) of the candidates that have some and the `weight` of the
/// adjustment (normally [`LEXICAL_WEIGHT`]). Ties keep the dense order.
pub fn fuse(pool: &[(f32, RecordId)], lexical: &[(RecordId, f32)], weight: f32) -> Vec<Fused> {
    let evidence: HashMap<RecordId, f32> = lexical.iter().copied().collect();
    let mut out: Vec<Fused> = pool
        .iter()
        .map(|&(dense, id)| {
            let lexical = evidence.get(&id).copied().unwrap_or(0.0);
            Fused { id, dense, fused: dense + weight * lexical }
        })
        .collect();
    out.sort_by(|a, b| b.fused.total_cmp(&a.fused));
    out
}

/// The neighbour step: every candidate next to one of the first `anchors` of `fused` (best
/// first) gains `weight` × that anchor's lead over the `anchors`-th candidate, but never so
/// much that it passes that anchor, the largest such gain when it is next to several; then
/// the order is made again. In a small store the `anchors`-th candidate is far below the best,
/// so a lead can be large: without the bound, a record stored next to the second hit passed a
/// first that led by a clear margin. `pairs` are
/// `(anchor, record stored next to it)`; adjacency counts both ways, so two anchors next to
/// each other lend to each other. Outside the leading group nothing is lent: in a store whose
/// neighbours are unrelated (notes written in any order) the order barely moves.
pub fn neighbour_bonus(
    fused: &mut [Fused],
    pairs: &[(RecordId, RecordId)],
    anchors: usize,
    weight: f32,
) {
    let anchors = anchors.min(fused.len());
    if anchors == 0 || pairs.is_empty() || weight <= 0.0 {
        return;
    }
    let cut = fused[anchors - 1].fused;
    // Each anchor's key and lead.
    let lead: HashMap<RecordId, (f32, f32)> = fused[..anchors]
        .iter()
        .map(|f| (f.id, (f.fused, f.fused - cut)))
        .filter(|(_, (_, l))| *l > 0.0)
        .collect();
    let key: HashMap<RecordId, f32> = fused.iter().map(|f| (f.id, f.fused)).collect();
    let mut gain: HashMap<RecordId, f32> = HashMap::new();
    for &(a, b) in pairs {
        for (from, to) in [(a, b), (b, a)] {
            if let (Some(&(anchor, l)), Some(&own)) = (lead.get(&from), key.get(&to)) {
                // Up to the anchor's own key, not past it (ties keep the anchor first: the
                // sort is stable and the anchor comes first).
                let g = gain.entry(to).or_insert(0.0);
                *g = g.max((weight * l).min((anchor - own).max(0.0)));
            }
        }
    }
    for f in fused.iter_mut() {
        f.fused += gain.get(&f.id).copied().unwrap_or(0.0);
    }
    fused.sort_by(|a, b| b.fused.total_cmp(&a.fused));
}

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
        let query = Query {
            terms: spine_core::lexical::query_terms(q.query),
            identifiers: spine_core::lexical::identifier_terms(q.query),
        };
        let mut pool: Vec<(f32, RecordId)> =
            hits.iter().map(|(score, (id, _))| (*score, *id)).collect();
        let mut records: HashMap<RecordId, Body> = hits.into_iter().map(|(_, r)| r).collect();
        let mut terms = HashMap::new();
        let mut fused = self.fuse_pool(&pool, &records, &mut terms, &query)?;
        drop(span);
        let anchors = neighbour_anchors(k).min(fused.len());
        if self.neighbour_weight > 0.0 && anchors > 0 {
            let _span = tracing::trace_span!("search.neighbours").entered();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<RecordId> {
        (0..n).map(|_| RecordId::mint()).collect()
    }

    fn order(f: &[Fused]) -> Vec<RecordId> {
        f.iter().map(|x| x.id).collect()
    }

    #[test]
    fn without_lexical_matches_the_dense_order_stands() {
        let id = ids(3);
        let pool = [(0.9, id[0]), (0.5, id[1]), (0.5, id[2])];
        let f = fuse(&pool, &[], LEXICAL_WEIGHT);
        assert_eq!(order(&f), id);
        assert!(f.iter().all(|x| x.fused == x.dense));
    }

    #[test]
    fn the_weighted_evidence_is_added_to_the_cosine() {
        let id = ids(3);
        let w = LEXICAL_WEIGHT;
        let pool = [(0.6, id[0]), (0.6 - w / 8.0, id[1]), (0.6 - w / 2.0, id[2])];
        let f = fuse(&pool, &[(id[2], 1.0), (id[1], 0.25)], LEXICAL_WEIGHT);
        assert_eq!(order(&f), vec![id[2], id[1], id[0]]);
        assert!((f[0].fused - (0.6 + w / 2.0)).abs() < 1e-5, "all of the query: full weight");
        assert!((f[1].fused - (0.6 + w / 8.0)).abs() < 1e-5, "a quarter: a quarter");
        assert_eq!(f[0].dense, 0.6 - w / 2.0, "dense score kept");
    }

    #[test]
    fn a_lexical_match_overtakes_only_a_dense_lead_below_the_weight() {
        let id = ids(3);
        let w = LEXICAL_WEIGHT;
        let pool = [(0.9, id[0]), (0.9 - w / 2.0, id[1]), (0.9 - 2.0 * w, id[2])];
        let f = fuse(&pool, &[(id[1], 1.0), (id[2], 1.0)], LEXICAL_WEIGHT);
        assert_eq!(order(&f), vec![id[1], id[0], id[2]]);
    }

    #[test]
    fn ties_keep_the_dense_order() {
        let id = ids(2);
        let pool = [(0.5, id[0]), (0.5, id[1])];
        assert_eq!(order(&fuse(&pool, &[(id[0], 0.5), (id[1], 0.5)], LEXICAL_WEIGHT)), id);
    }

    #[test]
    fn weight_zero_keeps_the_dense_order() {
        let id = ids(2);
        let pool = [(0.9, id[0]), (0.89, id[1])];
        assert_eq!(order(&fuse(&pool, &[(id[1], 0.5)], 0.0)), id);
        assert_eq!(order(&fuse(&pool, &[(id[1], 0.5)], LEXICAL_WEIGHT)), vec![id[1], id[0]]);
    }

    fn terms(s: &str) -> TermCounts {
        TermCounts::new(&spine_core::lexical::terms(s))
    }

    #[test]
    fn term_counts_are_the_occurrences_of_each_term() {
        let text = "parse_config reads the config file; the config file is parse_config's input";
        let all = spine_core::lexical::terms(text);
        let c = TermCounts::new(&all);
        assert_eq!(c.len, all.len());
        for t in &all {
            let n = all.iter().filter(|x| *x == t).count();
            assert_eq!(c.count(term_hash(t)) as usize, n, "{t}");
        }
        assert!(c.count(term_hash("config")) >= 2);
        assert_eq!(c.count(term_hash("absent")), 0);
        assert_eq!(TermCounts::new(&[]).count(term_hash("x")), 0);
    }

    #[test]
    fn the_cache_drops_the_least_recently_used_counts_beyond_its_budget() {
        let counts = |text: &str| Arc::new(terms(text));
        let (a, b, c) = (counts("alpha beta"), counts("gamma delta"), counts("epsilon zeta"));
        let each = a.cached_bytes();
        assert_eq!(b.cached_bytes(), each);
        // Room for two entries, not three.
        let mut lru = Lru::new(2 * each + each / 2);
        let key = |n: u64| (RecordId::mint(), n);
        let (ka, kb, kc) = (key(1), key(2), key(3));
        lru.insert(ka, a.clone());
        lru.insert(kb, b);
        assert_eq!(lru.bytes, 2 * each);
        assert!(lru.entries.get(&ka).is_some(), "a is now the most recently used");
        lru.insert(kc, c);
        assert_eq!(lru.bytes, 2 * each);
        assert!(lru.entries.get(&kb).is_none(), "b was the least recently used");
        assert!(lru.entries.get(&ka).is_some() && lru.entries.get(&kc).is_some());
        // The same key again replaces its entry; the bytes are counted once.
        lru.insert(ka, a);
        assert_eq!((lru.entries.len(), lru.bytes), (2, 2 * each));
        // A budget of nothing holds nothing.
        let mut none = Lru::new(0);
        none.insert(key(4), counts("one"));
        assert_eq!((none.entries.len(), none.bytes), (0, 0));
    }

    #[test]
    fn cached_bytes_grow_with_the_distinct_terms() {
        let one = terms("alpha alpha alpha");
        let two = terms("alpha beta");
        assert_eq!(two.cached_bytes() - one.cached_bytes(), 12);
    }

    #[test]
    fn a_record_is_counted_as_its_record_terms() {
        let (content, summary) = ("Parsing HTTPRequest in lib.rs, v0.11.1 ", "The parser");
        let tags = ["http".to_owned(), "parser_v2".to_owned()];
        assert_eq!(
            TermCounts::of_record(content, summary, &tags),
            TermCounts::new(&spine_core::lexical::record_terms(content, summary, &tags))
        );
    }

    #[test]
    fn bm25_rewards_rare_terms_and_repeats_and_ignores_absent_ones() {
        let docs = [
            terms("retry the upload with backoff"),
            terms("the upload failed"),
            terms("parse_config reads the config file"),
            terms("parse_config parse_config twice"),
        ];
        let docs: Vec<&TermCounts> = docs.iter().collect();
        let s = bm25(&spine_core::lexical::query_terms("parse_config upload"), &docs);
        assert!(s.iter().all(|x| *x > 0.0));
        assert!(s[3] > s[2], "a repeated term scores higher: {s:?}");
        let none = bm25(&spine_core::lexical::query_terms("nothing matches"), &docs);
        assert!(none.iter().all(|x| *x == 0.0));
        assert!(bm25(&[], &docs).iter().all(|x| *x == 0.0));
        assert!(bm25(&spine_core::lexical::query_terms("x"), &[]).is_empty());
    }

    #[test]
    fn bm25_weights_a_term_by_how_few_pool_documents_share_it() {
        // "shared" is in three of four documents, "rare" in one.
        let docs = [
            terms("shared alpha"),
            terms("shared beta"),
            terms("shared gamma"),
            terms("rare delta"),
        ];
        let docs: Vec<&TermCounts> = docs.iter().collect();
        let s = bm25(&spine_core::lexical::query_terms("shared rare"), &docs);
        assert!(s[3] > s[0] && s[0] == s[1] && s[1] == s[2], "{s:?}");
    }

    /// [`evidence`] of `docs` for `query`, with the query's own identifier terms.
    fn evidence_of(query: &str, docs: &[&str]) -> Vec<f32> {
        let docs: Vec<TermCounts> = docs.iter().map(|d| terms(d)).collect();
        let docs: Vec<&TermCounts> = docs.iter().collect();
        let q = spine_core::lexical::query_terms(query);
        evidence(&q, &spine_core::lexical::identifier_terms(query), &docs)
    }

    const OTHERS: [&str; 4] = [
        "Run cargo fmt before every commit.",
        "The staging database is reset every Sunday night.",
        "Alice owns the billing service.",
        "Feature flags live in a TOML file.",
    ];

    #[test]
    fn evidence_is_the_share_of_the_query_held_whatever_the_pool() {
        // Two of the query's four terms, alone in a pool of strangers: the best match there,
        // which pool normalisation gave the full weight, holds under half of the question.
        let partial = "The retry budget is set in the gateway.";
        let e =
            evidence_of("retry budget for webhook deliveries", &[&[partial][..], &OTHERS].concat());
        assert!(e[0] > 0.0 && e[0] < 0.5f32.powf(COVERAGE_POWER), "{e:?}");
        assert!(e[1..].iter().all(|x| *x == 0.0), "{e:?}");
        // A record holding every term holds all of it (at most 1).
        let full = "Webhook deliveries have their own retry budget.";
        let e = evidence_of(
            "retry budget for webhook deliveries",
            &[&[full, partial][..], &OTHERS].concat(),
        );
        assert!((e[0] - 1.0).abs() < 0.2 && e[0] <= 1.0, "{e:?}");
        assert!(e[1] < e[0] / 2.0, "{e:?}");
    }

    #[test]
    fn one_plain_word_alone_is_no_evidence_but_one_identifier_is() {
        let distractor = "Release notes are written in Markdown under docs/releases.";
        let docs = [&[distractor][..], &OTHERS].concat();
        let e = evidence_of("which weekday do we ship releases", &docs);
        assert_eq!(e[0], 0.0, "one plain word of three: {e:?}");
        // The same word as the whole query, or beside another the record holds, counts.
        assert!(evidence_of("releases", &docs)[0] > 0.0);
        assert!(evidence_of("where are release notes kept", &docs)[0] > 0.0);
        // An identifier alone counts: what the lexical leg is for.
        let e = evidence_of(
            "why does load_config_from_env crash at startup",
            &["Known crash in load_config_from_env when SPINE_HOME is blank.", OTHERS[0]],
        );
        assert!(e[0] > 0.0 && e[1] == 0.0, "{e:?}");
        let e = evidence_of(
            "what changed in v0.11.1 for us",
            &["candle v0.11.1 fixed the layer norm.", OTHERS[1]],
        );
        assert!(e[0] > 0.0, "{e:?}");
    }

    fn fused(scores: &[f32]) -> (Vec<RecordId>, Vec<Fused>) {
        let id = ids(scores.len());
        let f = id.iter().zip(scores).map(|(&id, &s)| Fused { id, dense: s, fused: s }).collect();
        (id, f)
    }

    #[test]
    fn a_record_next_to_a_leading_anchor_inherits_part_of_its_lead() {
        // Anchors: the first three; the cut is the third (0.6). The question (0.9) leads by
        // 0.3; the answer stored after it (0.5) gains 0.8 × 0.3 = 0.24 and passes 0.7.
        let (id, mut f) = fused(&[0.9, 0.7, 0.6, 0.5, 0.45]);
        neighbour_bonus(&mut f, &[(id[0], id[3])], 3, 0.8);
        assert_eq!(order(&f), vec![id[0], id[3], id[1], id[2], id[4]]);
        assert!((f[1].fused - (0.5 + 0.8 * 0.3)).abs() < 1e-6);
        assert_eq!(f[1].dense, 0.5, "score stays the cosine");
    }

    #[test]
    fn adjacency_counts_both_ways_and_the_largest_gain_wins() {
        // Anchors: the first three, cut 0.5; leads 0.4 (id[0]) and 0.3 (id[1]).
        let (id, mut f) = fused(&[0.9, 0.8, 0.5, 0.4]);
        neighbour_bonus(&mut f, &[(id[3], id[0]), (id[1], id[3]), (id[0], id[1])], 3, 1.0);
        let get = |i: usize| f.iter().find(|x| x.id == id[i]).unwrap().fused;
        assert!((get(3) - 0.8).abs() < 1e-6, "the larger lead, not the sum: {}", get(3));
        assert!((get(1) - 0.9).abs() < 1e-6, "an anchor gains from its neighbour: {}", get(1));
        assert!((get(0) - 0.9).abs() < 1e-6, "nothing past its own key: {}", get(0));
        assert!((get(2) - 0.5).abs() < 1e-6, "next to nothing: unchanged");
        assert_eq!(f[0].id, id[0], "a tie keeps the anchor first");
    }

    #[test]
    fn a_neighbour_never_passes_the_anchor_it_borrows_from() {
        // A small store: the cut (the last anchor) is far below the best, so half the lead of
        // the second (0.6 - 0.1) would carry its neighbour (0.55) past the first (0.75).
        let (id, mut f) = fused(&[0.75, 0.6, 0.55, 0.3, 0.1]);
        neighbour_bonus(&mut f, &[(id[1], id[2])], 5, NEIGHBOUR_WEIGHT);
        assert_eq!(order(&f)[0], id[0], "{f:?}");
        assert_eq!(order(&f)[..3], [id[0], id[1], id[2]], "up to its anchor: {f:?}");
        assert!((f[2].fused - 0.6).abs() < 1e-6, "{f:?}");
    }

    #[test]
    fn nothing_is_lent_from_outside_the_anchors_or_at_weight_zero() {
        let (id, mut f) = fused(&[0.9, 0.8, 0.7, 0.1]);
        let before = order(&f);
        neighbour_bonus(&mut f, &[(id[2], id[3])], 2, NEIGHBOUR_WEIGHT);
        assert_eq!(order(&f), before, "id[2] is not an anchor");
        neighbour_bonus(&mut f, &[(id[0], id[3])], 2, 0.0);
        assert_eq!(order(&f), before);
        neighbour_bonus(&mut f, &[(id[0], id[3])], 0, NEIGHBOUR_WEIGHT);
        assert_eq!(order(&f), before);
    }
}
