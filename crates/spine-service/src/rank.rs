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
/// best in the pool). Widening costs linearly: every pool record is read back and its
/// content, summary and tags tokenised for [`bm25`] on each query.
pub fn rerank_pool(k: usize) -> usize {
    (k * 8).max(64)
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
pub fn bm25(query_terms: &[String], docs: &[Vec<String>]) -> Vec<f32> {
    let n = docs.len() as f32;
    if docs.is_empty() || query_terms.is_empty() {
        return vec![0.0; docs.len()];
    }
    let avgdl = (docs.iter().map(Vec::len).sum::<usize>() as f32 / n).max(1.0);
    // tf[d][q]: occurrences of query term q in document d.
    let tf: Vec<Vec<f32>> = docs
        .iter()
        .map(|d| query_terms.iter().map(|q| d.iter().filter(|t| *t == q).count() as f32).collect())
        .collect();
    let idf: Vec<f32> = (0..query_terms.len())
        .map(|q| {
            let df = tf.iter().filter(|d| d[q] > 0.0).count() as f32;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    docs.iter()
        .zip(&tf)
        .map(|(d, tf)| {
            let norm = K1 * (1.0 - B + B * d.len() as f32 / avgdl);
            tf.iter().zip(&idf).map(|(f, idf)| idf * f * (K1 + 1.0) / (f + norm)).sum()
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

    fn terms(s: &str) -> Vec<String> {
        spine_core::lexical::terms(s)
    }

    #[test]
    fn bm25_rewards_rare_terms_and_repeats_and_ignores_absent_ones() {
        let docs = vec![
            terms("retry the upload with backoff"),
            terms("the upload failed"),
            terms("parse_config reads the config file"),
            terms("parse_config parse_config twice"),
        ];
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
        let docs = vec![
            terms("shared alpha"),
            terms("shared beta"),
            terms("shared gamma"),
            terms("rare delta"),
        ];
        let s = bm25(&spine_core::lexical::query_terms("shared rare"), &docs);
        assert!(s[3] > s[0] && s[0] == s[1] && s[1] == s[2], "{s:?}");
    }
}
