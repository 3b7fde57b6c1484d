//! Lexical terms for code-heavy text: the one tokenizer both the store (at write time) and the
//! search (at query time) use, so a query term and an indexed term are equal exactly when they
//! came from the same spelling.
//!
//! Memories about code are full of identifiers, paths and error strings that a sentence
//! embedding blurs. A compound keeps its whole spelling as one term and also yields its parts,
//! split from the coarsest joiner to the finest: path separators (`/`, `\`, `:`), then `-`,
//! then `.`, then `_` and camelCase. `crates/spine-store/src/lib.rs` yields the whole path,
//! `crates`, `spine-store`, `spine`, `store`, `src`, `lib.rs`, `lib` and `rs`. Version strings
//! (`1.2.3`, `v0.11.1`, `2.0.0-rc.1`) stay whole instead of falling apart into numbers.
//! Terms are lower-cased; one-character terms and a few stop words are dropped. A term of
//! letters alone is reduced to its English stem (Snowball, as Lucene's and SQLite FTS5's
//! English analysers do), so `painting` answers to `paint` and `married` to `marry`;
//! compounds keep their whole spelling unstemmed and their parts are stemmed like any word.

/// Characters that join the parts of a compound term. Every other character that is not
/// alphanumeric separates terms. A term contains only alphanumerics and these characters,
/// which is what lets the store index terms with a tokenizer that splits on nothing else.
pub const JOINERS: &[char] = &['_', '-', '.', '/', '\\', ':'];

/// How a compound splits, coarsest first; camelCase comes after the last level.
const LEVELS: &[&[char]] = &[&['/', '\\', ':'], &['-'], &['.'], &['_']];

/// Words too common to say anything about a record.
const STOP_WORDS: &[&str] = &[
    "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from", "has",
    "have", "how", "if", "in", "into", "is", "it", "its", "of", "on", "or", "so", "that", "the",
    "then", "there", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who",
    "why", "will", "with",
];

/// Every term of `text`, in order of appearance, repeats kept (term frequency matters to
/// BM25).
pub fn terms(text: &str) -> Vec<String> {
    terms_without(text, &[])
}

/// [`terms`] without the words of `more_stop_words` either.
fn terms_without(text: &str, more_stop_words: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in text.split(|c: char| !(c.is_alphanumeric() || JOINERS.contains(&c))) {
        compound(chunk, more_stop_words, &mut out);
    }
    out
}

/// The terms of a record: those of its content, summary and tags (what its lexical score is
/// computed over).
pub fn record_terms(content: &str, summary: &str, tags: &[String]) -> Vec<String> {
    let mut out = terms(content);
    out.extend(terms(summary));
    for tag in tags {
        out.extend(terms(tag));
    }
    out
}

/// Words that say nothing about what a question asks for: auxiliaries and pronouns ("What
/// did she say to him?"). Dropped from queries only — records keep them, and a query that
/// consists of nothing else simply gets no lexical adjustment. Measured with `spine-bench
/// locomo` (R@5 +0.01) and `spine-bench eval` (code and prose unchanged or better).
const QUERY_STOP_WORDS: &[&str] = &[
    "would",
    "could",
    "should",
    "might",
    "may",
    "must",
    "been",
    "being",
    "did",
    "had",
    "having",
    "am",
    "she",
    "he",
    "her",
    "his",
    "hers",
    "him",
    "herself",
    "himself",
    "they",
    "them",
    "their",
    "theirs",
    "themselves",
    "you",
    "your",
    "yours",
    "yourself",
    "me",
    "my",
    "mine",
    "myself",
    "our",
    "ours",
    "us",
    "one",
    "also",
    "just",
];

/// The distinct terms of a query, in order of first appearance, without
/// [`QUERY_STOP_WORDS`].
pub fn query_terms(text: &str) -> Vec<String> {
    let mut out = terms_without(text, QUERY_STOP_WORDS);
    let mut seen = std::collections::HashSet::new();
    out.retain(|t| seen.insert(t.clone()));
    out
}

/// Pushes `word` (outer joiners trimmed) and, when it is a compound, its parts.
fn compound(word: &str, stop: &[&str], out: &mut Vec<String>) {
    let word = word.trim_matches(JOINERS);
    if word.is_empty() {
        return;
    }
    push(word, stop, out);
    if let Some(core) = version_core(word) {
        // `v0.11.1` also answers to `0.11.1`, and `2.0.0-rc.1` to `2.0.0`.
        if core != word {
            push(core, stop, out);
        }
        if let Some(bare) = word.strip_prefix(['v', 'V']).filter(|b| *b != core) {
            push(bare, stop, out);
        }
        return;
    }
    for level in LEVELS {
        if word.contains(*level) {
            for part in word.split(*level) {
                compound(part, stop, out);
            }
            return;
        }
    }
    let parts = camel_parts(word);
    if parts.len() > 1 {
        for part in parts {
            push(part, stop, out);
        }
    }
}

/// The Snowball English stemmer (`rust-stemmers`), built once.
static STEMMER: std::sync::LazyLock<rust_stemmers::Stemmer> =
    std::sync::LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));

/// Words stemmed on this thread, so a search that tokenises a hundred records stems each
/// distinct word once, not once per occurrence (a Snowball pass costs about a microsecond; a
/// lookup a tenth of that). Emptied when it reaches [`STEM_CACHE_WORDS`].
const STEM_CACHE_WORDS: usize = 50_000;

thread_local! {
    static STEMS: std::cell::RefCell<std::collections::HashMap<String, String>> =
        std::cell::RefCell::default();
}

fn stem(word: String) -> String {
    STEMS.with_borrow_mut(|cache| {
        if let Some(s) = cache.get(&word) {
            return s.clone();
        }
        if cache.len() >= STEM_CACHE_WORDS {
            cache.clear();
        }
        let s = STEMMER.stem(&word).into_owned();
        cache.insert(word, s.clone());
        s
    })
}

fn push(term: &str, stop: &[&str], out: &mut Vec<String>) {
    let term = term.to_lowercase();
    let t = term.as_str();
    if term.chars().nth(1).is_some() && !STOP_WORDS.contains(&t) && !stop.contains(&t) {
        if term.chars().all(|c| c.is_ascii_lowercase()) {
            out.push(stem(term));
        } else {
            out.push(term);
        }
    }
}

/// When `word` is a version string — `v`? digits (`.` digits)+, then optionally `-` and a
/// pre-release label — its dotted numeric core (without `v` or label).
fn version_core(word: &str) -> Option<&str> {
    let body = word.strip_prefix(['v', 'V']).unwrap_or(word);
    let (core, label) = match body.split_once('-') {
        Some((core, label)) => (core, Some(label)),
        None => (body, None),
    };
    let mut groups = core.split('.');
    let numeric = |g: &str| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit());
    let all_numeric = groups.clone().all(numeric);
    let at_least_two = groups.nth(1).is_some();
    let label_ok = label.is_none_or(|l| {
        !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    });
    (all_numeric && at_least_two && label_ok).then_some(core)
}

/// Splits a joiner-free word at camelCase boundaries: before an upper-case letter that
/// follows a lower-case letter or a digit (`parseHttp`, `Http2Client`), and before the last
/// letter of an upper-case run followed by a lower-case letter (`HTTPRequest`).
fn camel_parts(word: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        let (at, c) = chars[i];
        let prev = chars[i - 1].1;
        let next_lower = chars.get(i + 1).is_some_and(|(_, n)| n.is_lowercase());
        let boundary = c.is_uppercase()
            && (prev.is_lowercase() || prev.is_numeric() || (prev.is_uppercase() && next_lower));
        if boundary {
            parts.push(&word[start..at]);
            start = at;
        }
    }
    parts.push(&word[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_all(text: &str, want: &[&str]) {
        let t = terms(text);
        for w in want {
            assert!(t.iter().any(|x| x == w), "{w:?} not in {t:?}");
        }
    }

    #[test]
    fn snake_case_splits_and_stays_whole() {
        has_all("load_config_from_env", &["load_config_from_env", "load", "config", "env"]);
        assert!(!terms("load_config_from_env").contains(&"from".to_owned()), "stop word");
    }

    #[test]
    fn camel_case_splits_including_acronyms_and_digits() {
        has_all("parseHTTPRequest", &["parsehttprequest", "pars", "http", "request"]);
        has_all("Http2Client", &["http2client", "http2", "client"]);
        has_all("IOError", &["ioerror", "io", "error"]);
        assert_eq!(terms("sha256"), vec!["sha256"]);
    }

    #[test]
    fn kebab_case_splits_and_stays_whole() {
        has_all("spine-store", &["spine-store", "spine", "store"]);
        has_all("--allowed-host", &["allowed-host", "allow", "host"]);
    }

    #[test]
    fn paths_yield_every_segment_and_the_whole_path() {
        assert_eq!(
            terms("crates/spine-store/src/lib.rs"),
            vec![
                "crates/spine-store/src/lib.rs",
                "crate",
                "spine-store",
                "spine",
                "store",
                "src",
                "lib.rs",
                "lib",
                "rs"
            ]
        );
        has_all(r"C:\Users\dev\app.toml", &[r"c:\users\dev\app.toml", "user", "dev", "app"]);
        has_all("spine_core::lexical::terms", &["spine_core::lexical::terms", "spine", "core"]);
    }

    #[test]
    fn version_strings_stay_whole() {
        assert_eq!(terms("1.2.3"), vec!["1.2.3"]);
        assert_eq!(terms("v0.11.1"), vec!["v0.11.1", "0.11.1"]);
        assert_eq!(terms("2.0.0-rc.1"), vec!["2.0.0-rc.1", "2.0.0"]);
        has_all("upgrade to tokio-1.35.0 now", &["tokio-1.35.0", "tokio", "1.35.0"]);
        has_all("listen on 127.0.0.1:8080", &["127.0.0.1:8080", "127.0.0.1", "8080"]);
    }

    #[test]
    fn lower_cases_and_drops_stop_words_and_single_characters() {
        assert_eq!(terms("The Config is in a FILE"), vec!["config", "file"]);
        assert!(terms("a b c . - _ / ::").is_empty());
    }

    #[test]
    fn sentence_punctuation_is_not_part_of_a_term() {
        assert_eq!(
            terms("Error: \"missing key\" (see lib.rs)."),
            vec!["error", "miss", "key", "see", "lib.rs", "lib", "rs"]
        );
    }

    #[test]
    fn terms_contain_only_alphanumerics_and_joiners() {
        let text = "a*b \"q\" (x) NEAR/2 ^col: {c} [d] +e -f é_ü 💥 tab\tnew\nline";
        for t in terms(text) {
            assert!(t.chars().all(|c| c.is_alphanumeric() || JOINERS.contains(&c)), "{t:?}");
        }
    }

    #[test]
    fn words_are_stemmed_and_compounds_kept_whole() {
        assert_eq!(terms("painting paints painted"), vec!["paint", "paint", "paint"]);
        assert_eq!(terms("married"), terms("marry"));
        // A compound's whole spelling is an identifier: only its parts are stemmed.
        has_all("parsing_options", &["parsing_options", "pars", "option"]);
        // Digits and non-ASCII letters are left as they are.
        assert_eq!(terms("http2 café"), vec!["http2", "café"]);
    }

    #[test]
    fn queries_drop_pronouns_and_auxiliaries_that_records_keep() {
        assert_eq!(
            query_terms("What did she say to him about Rust?"),
            vec!["say", "about", "rust"]
        );
        assert!(terms("she did").contains(&"she".to_owned()));
        assert!(query_terms("would you").is_empty());
    }

    #[test]
    fn query_terms_are_distinct() {
        assert_eq!(query_terms("cache cache_size Cache"), vec!["cach", "cache_size", "size"]);
    }
}
