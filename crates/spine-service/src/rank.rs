//! Ranking: dense cosine first, then a lexical (BM25) adjustment (SPEC search rule 1).
//!
//! The adjustment rewards candidates that share the query's rare terms — identifiers, paths,
//! version strings and error text that a sentence embedding blurs. The store scores the
//! best-by-cosine pool with BM25 over `spine_core::lexical` terms; each candidate's BM25 is
//! divided by the best in the pool, so the adjustment is in 0..=[`LEXICAL_WEIGHT`] whatever
//! the corpus. `score` stays the dense similarity; only the order changes.

use std::collections::HashMap;

use spine_core::RecordId;

/// Weight of the pool-normalised BM25 relevance (0..1) added to the cosine for ordering.
///
/// A record that shares no word with the query gets nothing, so a weaker record that shares
/// one overtakes it when its cosine is within this weight; records on one subject sit within
/// ~0.05–0.15 of each other, which is what the record carrying the query's identifier, path
/// or version must climb. Tuned on the cases in the service tests and variants of them: the
/// identifier case needs about 0.1 to beat a paraphrase of the query that is 0.08 closer by
/// cosine; from about 0.2, natural-language queries start losing their dense winner to a
/// record that merely repeats one of their words.
pub const LEXICAL_WEIGHT: f32 = 0.15;

/// How many dense-ranked candidates the lexical step may reorder, for `k` results.
///
/// Any candidate within [`LEXICAL_WEIGHT`] of the k-th cosine may climb into the results,
/// and a wider pool also steadies the normalisation (a one-word match is less often the
/// best in the pool). Widening is cheap: the BM25 query costs what the query terms' postings
/// cost, and only the `k` winners are decoded.
pub fn rerank_pool(k: usize) -> usize {
    (k * 8).max(64)
}

/// A pool candidate with its ordering key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fused {
    /// The record.
    pub id: RecordId,
    /// Cosine similarity to the query (the reported `score`).
    pub dense: f32,
    /// `dense + weight × bm25 / max bm25 in the pool` (0 for no lexical match).
    pub fused: f32,
}

/// Orders `pool` — `(cosine, id)`, best cosine first — by the fused key, given the BM25
/// relevance of the candidates that matched any query term and the `weight` of the
/// adjustment (normally [`LEXICAL_WEIGHT`]). Ties keep the dense order.
pub fn fuse(pool: &[(f32, RecordId)], lexical: &[(RecordId, f32)], weight: f32) -> Vec<Fused> {
    let best = lexical.iter().map(|(_, s)| *s).fold(0.0_f32, f32::max);
    let bm25: HashMap<RecordId, f32> = lexical.iter().copied().collect();
    let mut out: Vec<Fused> = pool
        .iter()
        .map(|&(dense, id)| {
            let bm25 = bm25.get(&id).copied().unwrap_or(0.0);
            let lexical = if best > 0.0 { bm25 / best } else { 0.0 };
            Fused { id, dense, fused: dense + weight * lexical }
        })
        .collect();
    out.sort_by(|a, b| b.fused.total_cmp(&a.fused));
    out
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
    fn bm25_is_normalised_by_the_best_in_the_pool() {
        let id = ids(3);
        let w = LEXICAL_WEIGHT;
        let pool = [(0.6, id[0]), (0.6 - w / 8.0, id[1]), (0.6 - w / 2.0, id[2])];
        let f = fuse(&pool, &[(id[2], 8.0), (id[1], 2.0)], LEXICAL_WEIGHT);
        assert_eq!(order(&f), vec![id[2], id[1], id[0]]);
        assert!((f[0].fused - (0.6 + w / 2.0)).abs() < 1e-6, "best match: full weight");
        assert!((f[1].fused - (0.6 + w / 8.0)).abs() < 1e-6, "a quarter of the best: a quarter");
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
        assert_eq!(order(&fuse(&pool, &[(id[0], 3.0), (id[1], 3.0)], LEXICAL_WEIGHT)), id);
    }

    #[test]
    fn weight_zero_keeps_the_dense_order() {
        let id = ids(2);
        let pool = [(0.9, id[0]), (0.89, id[1])];
        assert_eq!(order(&fuse(&pool, &[(id[1], 5.0)], 0.0)), id);
        assert_eq!(order(&fuse(&pool, &[(id[1], 5.0)], LEXICAL_WEIGHT)), vec![id[1], id[0]]);
    }
}
