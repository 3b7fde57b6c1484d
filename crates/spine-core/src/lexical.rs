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

/// Defines [`is_stop_word`] and, for the tests, the same words as a list.
macro_rules! stop_words {
    ($($w:literal),* $(,)?) => {
        /// Whether `t` is a word too common to say anything about a record. A `match`
        /// compiles to a switch on length and bytes; searching a list compared strings one
        /// by one, a large share of the tokenizer's time (docs/performance.md, "The lexical
        /// step on a store larger than the term cache").
        fn is_stop_word(t: &str) -> bool {
            matches!(t, $($w)|*)
        }

        #[cfg(test)]
        const STOP_WORDS: &[&str] = &[$($w),*];
    };
}

stop_words! {
    "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from", "has",
    "have", "how", "if", "in", "into", "is", "it", "its", "of", "on", "or", "so", "that", "the",
    "then", "there", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who",
    "why", "will", "with",
}

/// Every term of `text`, in order of appearance, repeats kept (term frequency matters to
/// BM25).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_owned()));
    out
}

/// Calls `f` with each of [`terms`] of `text`, in the same order, without allocating a string
/// per term: what a caller that only hashes or counts terms wants (a search tokenises a
/// pool of a hundred records).
pub fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    Tokenizer::new(&[], &mut f).text(text);
}

/// The terms of a record: those of its content, summary and tags (what its lexical score is
/// computed over).
pub fn record_terms(content: &str, summary: &str, tags: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for_each_record_term(content, summary, tags, |t| out.push(t.to_owned()));
    out
}

/// Calls `f` with each of [`record_terms`], in the same order, without allocating a string
/// per term.
pub fn for_each_record_term(
    content: &str,
    summary: &str,
    tags: &[String],
    mut f: impl FnMut(&str),
) {
    let mut tokenizer = Tokenizer::new(&[], &mut f);
    tokenizer.text(content);
    tokenizer.text(summary);
    for tag in tags {
        tokenizer.text(tag);
    }
}

/// Words that say nothing about what a question asks for: auxiliaries and pronouns ("What
/// did she say to him?"). Dropped from queries only — records keep them, and a query that
/// consists of nothing else simply gets no lexical adjustment. Measured with `spine-bench
/// locomo` (R@5 up) and `spine-bench eval` (code and prose unchanged or better;
/// docs/performance.md, "Recall on LoCoMo").
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
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    Tokenizer::new(QUERY_STOP_WORDS, &mut |t: &str| {
        if seen.insert(t.to_owned()) {
            out.push(t.to_owned());
        }
    })
    .text(text);
    out
}

/// The terms of `text`'s words that are shaped like code rather than prose: a word holding
/// a digit, one of the joiners `_ . / \ :`, or upper-case letters after its first among
/// lower-case ones (`load_config_from_env`, `v0.11.1`, `crates/spine-store`, `HTTPRequest`,
/// `E0502`, `GitHub`), and every term such a word yields. A sentence embedding blurs exactly
/// these; the ranking lets one of them alone count as lexical evidence, where one plain word
/// does not. A hyphen alone (`on-call`) and an acronym (`API`) are prose.
pub fn identifier_terms(text: &str) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    for word in text.split(separates).map(trim_joiners) {
        let coded = word.bytes().any(|b| b.is_ascii_digit() || (is_joiner(b) && b != b'-'));
        let mixed = has_inner_upper(word) && word.chars().any(char::is_lowercase);
        if coded || mixed {
            for_each_term(word, |t| {
                out.insert(t.to_owned());
            });
        }
    }
    out
}

/// Whether `c` separates terms: anything but alphanumerics and [`JOINERS`].
fn separates(c: char) -> bool {
    !(c.is_alphanumeric() || JOINERS.contains(&c))
}

/// Whether the byte `b` is one of [`JOINERS`] (all of them ASCII).
fn is_joiner(b: u8) -> bool {
    matches!(b, b'_' | b'-' | b'.' | b'/' | b'\\' | b':')
}

/// Whether `word` contains a joiner.
fn has_joiner(word: &str) -> bool {
    word.bytes().any(is_joiner)
}

/// `word` without joiners at either end.
fn trim_joiners(word: &str) -> &str {
    let b = word.as_bytes();
    let Some(first) = b.iter().position(|&c| !is_joiner(c)) else {
        return "";
    };
    let last = b.iter().rposition(|&c| !is_joiner(c)).unwrap_or(first);
    // Each end is the end of `word` or next to a joiner (one ASCII byte): a character
    // boundary.
    &word[first..=last]
}

/// The Snowball English stemmer (`rust-stemmers`), built once.
static STEMMER: std::sync::LazyLock<rust_stemmers::Stemmer> =
    std::sync::LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));

/// Words already stemmed, so a search that tokenises a hundred records stems each distinct
/// word once, not once per occurrence: a Snowball pass costs more than twice what the rest
/// of tokenising a word does (this repository's sources in 2,000-character chunks: 29 µs a
/// chunk with these caches, 75 without).
///
/// Two levels, so that memory does not grow with the number of threads: the server
/// searches on Tokio's blocking pool, a thread per concurrent call (up to hundreds), and a
/// cache of 8,192 words a thread had grown with the pool — under the soak's 50 sessions the
/// threads' caches were 12.6 of the 18.5 MB the heap gained between minutes 5 and 14
/// (jemalloc's heap profile; docs/reliability.md, "Soak"). [`STEMS`] is the process's
/// cache, bounded at [`STEM_CACHE_WORDS`]; each thread keeps the [`RECENT_STEMS`] words it
/// met last in front of it, since every lookup in the shared cache takes a shard's read
/// lock and the words all texts share would have threads contend for the same few (two
/// threads on two cores: 46 µs a chunk with the shared cache alone, 37 with both levels,
/// 34 with 8,192 words a thread).
static STEMS: std::sync::LazyLock<StemCache> =
    std::sync::LazyLock::new(|| StemCache::new(STEM_CACHE_WORDS));

/// How many words [`STEMS`] holds: ~100 bytes each, ~3 MiB in all. `quick_cache` evicts by
/// its CLOCK-Pro policy, so the words most texts use stay.
const STEM_CACHE_WORDS: usize = 32_768;

/// Word to stem; the stems are shared (`Arc`), so a thread's copy costs no allocation.
type StemCache = quick_cache::sync::Cache<Box<str>, std::sync::Arc<str>>;

/// How many words a thread keeps in front of [`STEMS`] (~80 KiB): emptied when full.
const RECENT_STEMS: usize = 1_024;

thread_local! {
    /// The words this thread stemmed last, hashed with foldhash (seeded per thread: the
    /// words are anyone's text).
    static RECENT: std::cell::RefCell<
        std::collections::HashMap<Box<str>, std::sync::Arc<str>, foldhash::fast::RandomState>,
    > = std::cell::RefCell::default();
}

/// Writes the stem of `word` (lower-case ASCII letters) into `out`.
fn stem_into(word: &str, out: &mut String) {
    out.clear();
    RECENT.with_borrow_mut(|recent| {
        if let Some(s) = recent.get(word) {
            out.push_str(s);
            return;
        }
        let s = STEMS.get(word).unwrap_or_else(|| {
            let s: std::sync::Arc<str> = STEMMER.stem(word).into();
            STEMS.insert(word.into(), s.clone());
            s
        });
        out.push_str(&s);
        if recent.len() >= RECENT_STEMS {
            recent.clear();
        }
        recent.insert(word.into(), s);
    });
}

/// Splits text into terms and hands each to `emit`, reusing two buffers for the term being
/// lower-cased and stemmed: a term allocates only when it lower-cases non-ASCII letters or
/// is the first of its word on this thread to be stemmed.
struct Tokenizer<'a> {
    /// Words dropped on top of the stop words ([`is_stop_word`]).
    stop: &'a [&'a str],
    /// The term being lower-cased.
    lower: String,
    /// Its stem.
    stemmed: String,
    emit: &'a mut dyn FnMut(&str),
}

impl<'a> Tokenizer<'a> {
    fn new(stop: &'a [&'a str], emit: &'a mut dyn FnMut(&str)) -> Self {
        Tokenizer { stop, lower: String::new(), stemmed: String::new(), emit }
    }

    /// What `text.split(separates)` yields, each piece tokenised; ASCII is classified a
    /// byte at a time.
    fn text(&mut self, text: &str) {
        let bytes = text.as_bytes();
        let (mut start, mut i) = (0, 0);
        while i < bytes.len() {
            let b = bytes[i];
            let (width, sep) = if b.is_ascii() {
                (1, !(b.is_ascii_alphanumeric() || is_joiner(b)))
            } else {
                let c = text[i..].chars().next().expect("a character starts here");
                (c.len_utf8(), separates(c))
            };
            if sep {
                self.compound(&text[start..i]);
                start = i + width;
            }
            i += width;
        }
        self.compound(&text[start..]);
    }

    /// Emits `word` (outer joiners trimmed) and, when it is a compound, its parts.
    fn compound(&mut self, word: &str) {
        let word = trim_joiners(word);
        if word.is_empty() {
            return;
        }
        self.push(word);
        if has_joiner(word) {
            if let Some(core) = version_core(word) {
                // `v0.11.1` also answers to `0.11.1`, and `2.0.0-rc.1` to `2.0.0`.
                if core != word {
                    self.push(core);
                }
                if let Some(bare) = word.strip_prefix(['v', 'V']).filter(|b| *b != core) {
                    self.push(bare);
                }
                return;
            }
            for level in LEVELS {
                if word.contains(*level) {
                    for part in word.split(*level) {
                        self.compound(part);
                    }
                    return;
                }
            }
        }
        if has_inner_upper(word) {
            let parts = camel_parts(word);
            if parts.len() > 1 {
                for part in parts {
                    self.push(part);
                }
            }
        }
    }

    /// Emits `term` lower-cased, stemmed when it is a word of ASCII letters, unless it is a
    /// single character or a stop word.
    fn push(&mut self, term: &str) {
        self.lower.clear();
        if term.is_ascii() {
            self.lower.push_str(term);
            self.lower.make_ascii_lowercase();
        } else {
            // `str::to_lowercase`, not per character: a final sigma lower-cases to `ς`.
            self.lower.push_str(&term.to_lowercase());
        }
        let t = self.lower.as_str();
        if t.chars().nth(1).is_none() || is_stop_word(t) || self.stop.contains(&t) {
            return;
        }
        if t.bytes().all(|b| b.is_ascii_lowercase()) {
            stem_into(t, &mut self.stemmed);
            (self.emit)(&self.stemmed);
        } else {
            (self.emit)(t);
        }
    }
}

/// Whether a character after the first of `word` is upper-case: the only words
/// [`camel_parts`] can split.
fn has_inner_upper(word: &str) -> bool {
    word.chars().skip(1).any(char::is_uppercase)
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

    /// The stem caches hold at most [`STEM_CACHE_WORDS`] words in all and [`RECENT_STEMS`]
    /// a thread, however many distinct words are stemmed on however many threads, and
    /// still stem each one right.
    #[test]
    fn the_stem_caches_are_bounded() {
        let word = |i: usize| {
            let mut w: String =
                (0..4).map(|d| (b'a' + (i / 26usize.pow(d) % 26) as u8) as char).collect();
            w.push_str("ings");
            w
        };
        let stems = |w: &str| assert_eq!(record_terms(w, "", &[]), [STEMMER.stem(w)]);
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    for i in (t..3 * STEM_CACHE_WORDS).step_by(4) {
                        let w = word(i);
                        stems(&w);
                        // Again: from this thread's recent words.
                        stems(&w);
                        assert!(STEMS.len() <= STEM_CACHE_WORDS, "{} words held", STEMS.len());
                        let held = RECENT.with_borrow(|c| (c.len(), c.capacity()));
                        assert!(held.0 <= RECENT_STEMS, "{} words held", held.0);
                        assert!(held.1 < 4 * RECENT_STEMS, "room for {} words kept", held.1);
                    }
                });
            }
        });
        // From the process's cache on a thread that has not met the word.
        stems("refreezings");
        assert!(STEMS.get("refreezings").is_some());
        std::thread::spawn(move || {
            assert!(RECENT.with_borrow(|c| c.is_empty()));
            stems("refreezings");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn identifier_terms_are_the_terms_of_words_shaped_like_code() {
        let ids = identifier_terms("why does load_config_from_env fail on v0.11.1 for HTTPRequest");
        for t in ["load_config_from_env", "load", "config", "env", "v0.11.1", "0.11.1"] {
            assert!(ids.contains(t), "{t}: {ids:?}");
        }
        assert!(ids.contains("httprequest") && ids.contains("request"), "{ids:?}");
        for plain in ["why", "fail", "on"] {
            assert!(!ids.iter().any(|t| t == plain), "{plain}");
        }
        assert!(identifier_terms("which weekday do we ship releases").is_empty());
        assert!(identifier_terms("Deploys happen on Thursdays").is_empty(), "capitals first");
        assert!(identifier_terms("the on-call API rota").is_empty(), "hyphens and acronyms");
        assert!(identifier_terms("oldest iPhone we support").contains("phone"));
        assert!(identifier_terms("").is_empty());
    }

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

    /// The tokenizer as it was before it reused buffers (one `String` per term, a stop-word
    /// scan, camelCase split attempted on every word): the reference the visitor must match.
    mod reference {
        use super::super::*;

        pub fn terms_without(text: &str, stop: &[&str]) -> Vec<String> {
            let mut out = Vec::new();
            for chunk in text.split(|c: char| !(c.is_alphanumeric() || JOINERS.contains(&c))) {
                compound(chunk, stop, &mut out);
            }
            out
        }

        fn compound(word: &str, stop: &[&str], out: &mut Vec<String>) {
            let word = word.trim_matches(JOINERS);
            if word.is_empty() {
                return;
            }
            push(word, stop, out);
            if let Some(core) = version_core(word) {
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

        fn push(term: &str, stop: &[&str], out: &mut Vec<String>) {
            let term = term.to_lowercase();
            let t = term.as_str();
            if term.chars().nth(1).is_some() && !STOP_WORDS.contains(&t) && !stop.contains(&t) {
                if term.chars().all(|c| c.is_ascii_lowercase()) {
                    out.push(STEMMER.stem(&term).into_owned());
                } else {
                    out.push(term);
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn terms_match_the_reference_tokenizer(
            text in "([a-zA-Z0-9_./:\\\\-]{1,12}|[ ,;()\"'\t\n]|[ΣσςéÉİßǅ💥]|[A-Z][a-z]+|the|The|with|there|in|a|did|She|v[0-9]\\.[0-9]{1,2}\\.[0-9]){0,40}"
        ) {
            proptest::prop_assert_eq!(terms(&text), reference::terms_without(&text, &[]));
            let mut want = reference::terms_without(&text, QUERY_STOP_WORDS);
            let mut seen = std::collections::HashSet::new();
            want.retain(|t| seen.insert(t.clone()));
            proptest::prop_assert_eq!(query_terms(&text), want);
        }
    }

    #[test]
    fn the_stop_word_match_is_the_list() {
        assert!(STOP_WORDS.iter().all(|w| is_stop_word(w)));
        for w in ["a", "ann", "the_", "thes", "wit", "withs", "The", ""] {
            assert!(!is_stop_word(w), "{w}");
        }
    }

    #[test]
    fn the_visitors_see_exactly_the_terms_in_order() {
        let text = "Parsing HTTPRequest in crates/spine-store/src/lib.rs at v0.11.1, ΣΑΣ naïve";
        let mut seen = Vec::new();
        for_each_term(text, |t| seen.push(t.to_owned()));
        assert_eq!(seen, terms(text));
        let tags = ["tag_one".to_owned(), "TagTwo".to_owned()];
        let mut seen = Vec::new();
        for_each_record_term(text, "a summary", &tags, |t| seen.push(t.to_owned()));
        assert_eq!(seen, record_terms(text, "a summary", &tags));
        let mut whole = terms(text);
        whole.extend(terms("a summary"));
        whole.extend(tags.iter().flat_map(|t| terms(t)));
        assert_eq!(seen, whole);
    }

    #[test]
    fn query_terms_are_distinct() {
        assert_eq!(query_terms("cache cache_size Cache"), vec!["cach", "cache_size", "size"]);
    }
}
