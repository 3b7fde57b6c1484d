//! Scoring a pool: BM25 over its records, each record's lexical evidence, the fusion with the
//! cosine, and the neighbour step's lend.

use std::collections::HashMap;

use spine_core::RecordId;

use super::COVERAGE_POWER;
use super::terms::{TermCounts, term_hash};

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
    Pool::score(query_terms, docs).scores
}

/// What [`bm25`] computes over a pool, kept for [`evidence`].
struct Pool {
    /// Each document's BM25.
    scores: Vec<f32>,
    /// The BM25 of a record of average length holding every query term once: the sum of
    /// the terms' IDF (a term no document holds has the highest).
    ideal: f32,
    /// `tf[d * terms + q]`: occurrences of query term q in document d (one allocation, not
    /// one per document).
    tf: Vec<f32>,
}

impl Pool {
    fn score(query_terms: &[String], docs: &[&TermCounts]) -> Pool {
        let n = docs.len() as f32;
        if docs.is_empty() || query_terms.is_empty() {
            return Pool { scores: vec![0.0; docs.len()], ideal: 0.0, tf: Vec::new() };
        }
        let avgdl = (docs.iter().map(|d| d.len).sum::<usize>() as f32 / n).max(1.0);
        let hashes: Vec<u64> = query_terms.iter().map(|q| term_hash(q)).collect();
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
        Pool { scores, ideal: idf.iter().sum(), tf }
    }
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
    let Pool { scores, ideal, tf } = Pool::score(query_terms, docs);
    if ideal <= 0.0 {
        return vec![0.0; docs.len()];
    }
    let identifier: Vec<bool> = query_terms.iter().map(|q| identifiers.contains(q)).collect();
    tf.chunks_exact(query_terms.len())
        .zip(scores)
        .map(|(tf, score)| {
            let mut held = tf.iter().zip(&identifier).filter(|(f, _)| **f > 0.0);
            let lone_word = match (held.next(), held.next()) {
                (Some((_, identifier)), None) => query_terms.len() > 1 && !identifier,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rank::{LEXICAL_WEIGHT, NEIGHBOUR_WEIGHT};

    fn terms(s: &str) -> TermCounts {
        TermCounts::new(&spine_core::lexical::terms(s))
    }

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
