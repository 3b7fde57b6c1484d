//! Ranking: dense cosine first, then a lexical-overlap adjustment (SPEC search rule 1).
//!
//! The adjustment rewards candidates that share the query's words — identifiers, paths and
//! error strings that a sentence embedding blurs. `score` stays the dense similarity; only
//! the order changes. The recall issue replaces this token overlap with BM25.

use std::collections::HashSet;

/// Weight of the lexical overlap (0..1) added to the cosine for ordering.
pub const LEXICAL_WEIGHT: f32 = 0.1;

/// How many dense-ranked candidates the lexical step may reorder, for `k` results.
pub fn rerank_pool(k: usize) -> usize {
    (k * 4).max(32)
}

/// Lower-cased word tokens; `snake_case`, `camelCase` and paths split into their parts,
/// and the whole identifier kept too.
pub fn tokens(text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')) {
        let word = word.trim_matches('.');
        if word.is_empty() {
            continue;
        }
        out.insert(word.to_lowercase());
        let mut part = String::new();
        let mut prev_lower = false;
        for c in word.chars() {
            if c == '_' || c == '.' || (c.is_uppercase() && prev_lower) {
                if !part.is_empty() {
                    out.insert(std::mem::take(&mut part).to_lowercase());
                }
                prev_lower = false;
                if c == '_' || c == '.' {
                    continue;
                }
            }
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
            part.push(c);
        }
        if !part.is_empty() {
            out.insert(part.to_lowercase());
        }
    }
    out.retain(|t| t.chars().count() > 1 && !STOP_WORDS.contains(&t.as_str()));
    out
}

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "in",
    "is", "it", "of", "on", "or", "that", "the", "this", "to", "was", "we", "what", "when",
    "where", "which", "who", "why", "with",
];

/// Fraction of the query's tokens present in the document (0 when the query has none).
pub fn overlap(query: &HashSet<String>, doc: &HashSet<String>) -> f32 {
    if query.is_empty() {
        return 0.0;
    }
    query.iter().filter(|t| doc.contains(*t)).count() as f32 / query.len() as f32
}

/// The ordering key: dense similarity plus the weighted overlap.
pub fn fused(dense: f32, overlap: f32) -> f32 {
    dense + LEXICAL_WEIGHT * overlap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_and_stay_whole() {
        let t = tokens("Call parseHttpRequest in src/net_util.rs");
        for w in
            ["parsehttprequest", "parse", "http", "request", "net_util.rs", "net", "util", "src"]
        {
            assert!(t.contains(w), "{w} in {t:?}");
        }
        assert!(!t.contains("in"));
    }

    #[test]
    fn overlap_is_a_fraction_of_query_tokens() {
        let q = tokens("sqlite busy timeout");
        assert_eq!(overlap(&q, &tokens("set the sqlite busy_timeout")), 1.0);
        assert_eq!(overlap(&q, &tokens("sqlite only")), 1.0 / 3.0);
        assert_eq!(overlap(&tokens(""), &tokens("x")), 0.0);
    }
}
