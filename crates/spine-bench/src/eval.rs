//! `spine-bench eval [N]`: retrieval quality of `search_memory` on public, real text.
//!
//! ```text
//! cargo run --release -p spine-bench -- eval          # 2000 documents, 2000 queries
//! cargo run --release -p spine-bench -- eval 5000     # a larger haystack
//! ```
//!
//! # Method
//!
//! The corpus follows CodeSearchNet (Husain et al. 2019, "CodeSearchNet Challenge: Evaluating
//! the State of Semantic Code Search"): the query is the first sentence of a function's doc
//! comment, and the one relevant document is that function's code with its doc comment
//! removed. It is applied to the Rust sources of a fixed list of well-documented crates
//! ([`CRATES`]), at exactly the versions pinned in the workspace's `Cargo.lock`, read from
//! cargo's registry source cache (`$CARGO_HOME/registry/src/*/<crate>-<version>/src`; after
//! building the workspace they are there, `cargo fetch` brings them otherwise).
//!
//! Why this corpus: it is public, real text written by people (not generated), needs no
//! network, and is identical on every machine that built the workspace — the lock file pins
//! every byte of it. Its queries are short natural-language descriptions and its documents
//! are longer technical text with identifiers, which is how agents search their memories;
//! and, as in CodeSearchNet, the pairs are judged by construction, so no labelling is needed.
//! Every other document in the store is a distractor for a query, many of them close ones
//! (sibling methods of the same type, the same API in another crate).
//!
//! Extraction is line-based rather than a Rust parser: a run of `///` lines, optionally
//! followed by attributes, directly above a `pub fn` (also `const`/`async`/`unsafe`/`extern`)
//! signature outside a macro definition. The function runs from its signature to the brace
//! that closes its body; braces inside comments, strings, raw strings and character literals
//! are skipped. A function is kept when:
//! - the first sentence of its doc comment's first paragraph (markdown links, backticks and
//!   emphasis removed) has at least [`MIN_QUERY_WORDS`] words, and the doc does not start
//!   with a heading or a code block;
//! - its code, without doc comments and blank lines, has at least [`MIN_CODE_LINES`] lines
//!   (a signature, two body lines and the closing brace: CodeSearchNet drops functions
//!   shorter than three lines; a one-expression Rust body is the equivalent);
//! - its query (ignoring case and spacing) and its code were not already seen earlier in the
//!   walk — crates in [`CRATES`] order, files in sorted path order.
//!
//! Code is truncated to the content limit Spine accepts (`Limits::default()`); the built-in
//! model reads only its first 256 tokens, so long functions are judged by their beginning.
//! A seeded shuffle ([`SEED`]) picks N documents; every one of them contributes its query.
//!
//! Each document is one memory in one scope, its vector precomputed in batches with the
//! built-in model and written with `insert_batch` (which also indexes it lexically), so the
//! store is what `store_memory` would have built, without the per-record overhead. Each
//! query runs through `Service::search_memory` with `k` = 10, in each mode:
//! 1. dense only — `with_lexical_weight(0.0)`, cosine order;
//! 2. dense + lexical — the default service (SPEC search rule 1);
//! 3. reranked — the default service plus the reranker configured exactly as the `spine`
//!    binary reads it (`SPINE_SEARCH_RANKER=jev`, `SPINE_RERANK_*`); skipped when unset. It
//!    reorders only the 10 hits, so its recall@10 equals the hybrid's by construction.
//!
//! A query scores a hit at k when its own document is among the first k results; MRR is the
//! mean of 1/rank over the first 10 (0 when absent). Query vectors are computed once, before
//! the modes run, so the modes' times compare ranking alone.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde_json::json;
use spine_core::{
    Caller, Category, Limits, Memory, RecordId, Scope, ShortId, Source, SystemClock, Timestamp,
};
use spine_embed::{CachedEmbedder, Embedder};
use spine_service::Service;
use spine_service::args::parse_args;
use spine_service::rerank::{HttpReranker, RerankConfig};
use spine_store::{Embedding, SqliteStore, Store};

/// The reranker the eval adds a row for: `SPINE_RERANK_URL` (and `SPINE_RERANK_MODEL`,
/// `SPINE_RERANK_API_KEY`), as `spine --search-ranker jev` takes them.
fn rerank_from_env() -> Result<Option<RerankConfig>> {
    let var =
        |k: &str| std::env::var(k).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let Some(url) = var("SPINE_RERANK_URL") else { return Ok(None) };
    let config = RerankConfig {
        model: var("SPINE_RERANK_MODEL"),
        api_key: var("SPINE_RERANK_API_KEY").and_then(spine_embed::http::ApiKey::new),
        ..RerankConfig::new(url.trim_end_matches('/'))
    };
    config.check().map_err(|e| anyhow!("SPINE_RERANK_URL: {e}"))?;
    Ok(Some(config))
}

/// The crates the corpus is drawn from, each at its version in `Cargo.lock`: well-documented
/// libraries of different domains (parsing, regular expressions, SQL, async I/O, HTTP, CLI,
/// dates, URLs, collections, tracing, bytes, TLS, UUIDs, iterators).
pub const CRATES: &[&str] = &[
    "serde_json",
    "regex-syntax",
    "regex-automata",
    "aho-corasick",
    "memchr",
    "rusqlite",
    "tokio",
    "hyper",
    "http",
    "reqwest",
    "clap_builder",
    "chrono",
    "url",
    "indexmap",
    "itertools",
    "tracing-core",
    "bytes",
    "rustls",
    "uuid",
];

/// Seed of the document sample.
pub const SEED: u64 = 2019;
/// Documents (and queries) when N is not given.
pub const DEFAULT_DOCS: usize = 2000;
/// Fewest words in a query.
pub const MIN_QUERY_WORDS: usize = 4;
/// Fewest non-blank lines of a document.
pub const MIN_CODE_LINES: usize = 4;
/// Results asked of each search.
const K: usize = 10;
/// Documents per `insert_batch` call.
const INSERT_CHUNK: usize = 500;

/// One query and its relevant document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// First sentence of the doc comment.
    pub query: String,
    /// The function without its doc comment.
    pub code: String,
    /// 1-based line of the signature.
    pub line: usize,
}

/// One crate of the corpus.
struct CrateSource {
    name: &'static str,
    version: String,
    /// Functions kept from it (after de-duplication).
    kept: usize,
    /// Of those, sampled.
    sampled: usize,
}

/// The registry packages of a `Cargo.lock`: name → versions.
fn locked_versions(lock: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.trim().strip_prefix('='))
                    .map(|v| v.trim().trim_matches('"').to_owned())
            })
        };
        let (Some(name), Some(version), Some(source)) =
            (field("name "), field("version "), field("source "))
        else {
            continue;
        };
        if source.starts_with("registry+") || source.starts_with("sparse+") {
            out.entry(name).or_default().push(version);
        }
    }
    out
}

/// Numeric ordering key of a version (`1.10.0` after `1.9.3`).
fn version_key(v: &str) -> Vec<u64> {
    v.split(['.', '-', '+']).map(|p| p.parse().unwrap_or(0)).collect()
}

/// The directories cargo unpacks registry sources into, sorted.
fn registry_roots() -> Result<Vec<PathBuf>> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME").context("neither CARGO_HOME nor HOME")?)
            .join(".cargo"),
    };
    let src = home.join("registry").join("src");
    let mut roots: Vec<PathBuf> = std::fs::read_dir(&src)
        .with_context(|| format!("reading {}", src.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    roots.sort();
    Ok(roots)
}

/// Every `.rs` file under `dir`, in sorted path order.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// Whether `line` (trimmed) starts a public function: `pub` then optional `const`, `async`,
/// `unsafe`, `extern "…"`, then `fn name`.
fn is_pub_fn(line: &str) -> bool {
    let Some(mut rest) = line.strip_prefix("pub ") else {
        return false;
    };
    loop {
        rest = rest.trim_start();
        if let Some(r) = ["const ", "async ", "unsafe "].iter().find_map(|q| rest.strip_prefix(q)) {
            rest = r;
        } else if let Some(r) = rest.strip_prefix("extern ") {
            let r = r.trim_start();
            rest = match r.strip_prefix('"').and_then(|r| r.split_once('"')) {
                Some((_, after)) => after,
                None => r,
            };
        } else {
            break;
        }
    }
    rest.strip_prefix("fn ")
        .is_some_and(|r| r.trim_start().starts_with(|c: char| c.is_alphabetic() || c == '_'))
}

/// Byte length of the UTF-8 character starting with `b`.
fn utf8_len(b: u8) -> usize {
    match b {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// If a comment, string, raw string or character literal starts at `i`, the offset just past
/// it; `None` otherwise.
fn skip_literal(s: &[u8], i: usize) -> Option<usize> {
    let at = |j: usize| s.get(j).copied().unwrap_or(0);
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    match at(i) {
        b'/' if at(i + 1) == b'/' => {
            Some(s[i..].iter().position(|&b| b == b'\n').map_or(s.len(), |p| i + p))
        }
        b'/' if at(i + 1) == b'*' => {
            let (mut j, mut depth) = (i + 2, 1);
            while j < s.len() && depth > 0 {
                if at(j) == b'/' && at(j + 1) == b'*' {
                    depth += 1;
                    j += 2;
                } else if at(j) == b'*' && at(j + 1) == b'/' {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            Some(j)
        }
        b'"' => {
            let mut j = i + 1;
            while j < s.len() && at(j) != b'"' {
                j += if at(j) == b'\\' { 2 } else { 1 };
            }
            Some(j + 1)
        }
        b'r' if (i == 0
            || !ident(at(i - 1))
            || (at(i - 1) == b'b' && (i < 2 || !ident(at(i - 2)))))
            && matches!(at(i + 1), b'"' | b'#') =>
        {
            let hashes = s[i + 1..].iter().take_while(|&&b| b == b'#').count();
            if at(i + 1 + hashes) != b'"' {
                return None;
            }
            let mut j = i + 2 + hashes;
            while j < s.len() {
                if at(j) == b'"'
                    && s[j + 1..].iter().take(hashes).filter(|&&b| b == b'#').count() == hashes
                {
                    return Some(j + 1 + hashes);
                }
                j += 1;
            }
            Some(s.len())
        }
        b'\'' => {
            if at(i + 1) == b'\\' {
                // '\n', '\'', '\u{…}'
                let mut j = i + 3;
                while j < s.len() && at(j) != b'\'' && j < i + 12 {
                    j += 1;
                }
                Some(j + 1)
            } else if at(i + 1) != 0 && at(i + 1 + utf8_len(at(i + 1))) == b'\'' {
                Some(i + 2 + utf8_len(at(i + 1)))
            } else {
                None // a lifetime or a label
            }
        }
        _ => None,
    }
}

/// The end (exclusive) of the function whose signature starts at `start`: just past the
/// brace closing its body. `None` for a signature without a body (`;`) or unbalanced text.
fn function_end(s: &[u8], start: usize) -> Option<usize> {
    let (mut i, mut nest, mut body) = (start, 0i32, 0i32);
    let mut in_body = false;
    while i < s.len() {
        if let Some(next) = skip_literal(s, i) {
            i = next;
            continue;
        }
        match s[i] {
            b'(' | b'[' if !in_body => nest += 1,
            b')' | b']' if !in_body => nest -= 1,
            b';' if !in_body && nest == 0 => return None,
            b'{' if in_body || nest == 0 => {
                in_body = true;
                body += 1;
            }
            b'}' if in_body => {
                body -= 1;
                if body == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Markdown to plain text: `[text](url)` and `[text][ref]` become `text`; backticks and `*`
/// go; spacing collapses.
fn plain(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut chars = md.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' | '*' | '[' => {}
            ']' => match chars.peek() {
                Some('(') => {
                    for d in chars.by_ref() {
                        if d == ')' {
                            break;
                        }
                    }
                }
                Some('[') => {
                    for d in chars.by_ref() {
                        if d == ']' {
                            break;
                        }
                    }
                }
                _ => {}
            },
            c => out.push(c),
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first sentence of a doc comment's first paragraph, without its final period, when it
/// has at least [`MIN_QUERY_WORDS`] words.
pub fn first_sentence(doc: &[String]) -> Option<String> {
    let first = doc.iter().map(|l| l.trim()).skip_while(|l| l.is_empty());
    let paragraph: Vec<&str> = first.take_while(|l| !l.is_empty()).collect();
    let head = paragraph.first()?;
    if head.starts_with('#') || head.starts_with("```") || head.starts_with('|') {
        return None;
    }
    let text = plain(&paragraph.join(" "));
    let words: Vec<&str> = text.split(' ').collect();
    let mut sentence = Vec::new();
    for w in words {
        sentence.push(w);
        let abbreviation = ["e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "resp."]
            .iter()
            .any(|a| w.eq_ignore_ascii_case(a) || w.ends_with(&format!("({a}")));
        if !abbreviation && (w.ends_with('.') || w.ends_with('?') || w.ends_with('!')) {
            break;
        }
    }
    let s = sentence.join(" ");
    let s = s.trim_end_matches('.').trim();
    (s.split_whitespace().count() >= MIN_QUERY_WORDS).then(|| s.to_owned())
}

/// Whether a trimmed line is a doc comment (`///` or `//!`, but not a `////` rule).
fn is_doc_line(t: &str) -> bool {
    (t.starts_with("///") && !t.starts_with("////")) || t.starts_with("//!")
}

/// The documented public functions of one source file.
pub fn extract(text: &str) -> Vec<Pair> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut doc: Vec<String> = Vec::new();
    let mut attr_depth = 0i32; // open brackets of an attribute spanning lines
    let mut macro_depth: Option<i32> = None; // brace depth inside a macro_rules! body
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let start = offset;
        offset += line.len();
        let t = line.trim();
        if let Some(d) = macro_depth.as_mut() {
            *d += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if *d <= 0 {
                macro_depth = None;
            }
            continue;
        }
        if t.starts_with("macro_rules!") {
            let d = line.matches('{').count() as i32 - line.matches('}').count() as i32;
            macro_depth = (d > 0 || !t.contains('}')).then_some(d);
            doc.clear();
            continue;
        }
        if attr_depth > 0 {
            attr_depth += t.matches('[').count() as i32 - t.matches(']').count() as i32;
            continue;
        }
        if let Some(d) = t.strip_prefix("///").filter(|_| is_doc_line(t)) {
            doc.push(d.strip_prefix(' ').unwrap_or(d).to_owned());
            continue;
        }
        if doc.is_empty() {
            continue;
        }
        if t.starts_with("#[") {
            attr_depth = t.matches('[').count() as i32 - t.matches(']').count() as i32;
            continue;
        }
        if is_pub_fn(t) && !line.contains('$') {
            let indent = line.len() - line.trim_start().len();
            if let Some(end) = function_end(bytes, start + indent)
                && let Some(query) = first_sentence(&doc)
            {
                let end = text[end..].find('\n').map_or(text.len(), |p| end + p);
                let code = text[start..end]
                    .lines()
                    .filter(|l| !is_doc_line(l.trim_start()))
                    .map(|l| {
                        let ws = l.len() - l.trim_start().len();
                        &l[ws.min(indent)..]
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                if code.lines().filter(|l| !l.trim().is_empty()).count() >= MIN_CODE_LINES {
                    out.push(Pair { query, code, line: index + 1 });
                }
            }
        }
        doc.clear();
    }
    out
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Recall@1/5/10 and MRR@10 of one mode.
#[derive(Default)]
struct Score {
    at1: usize,
    at5: usize,
    at10: usize,
    rr: f64,
    queries: usize,
    /// Reranked mode: queries whose hits came back without a relevance (provider failure).
    fallbacks: usize,
    secs: f64,
}

impl Score {
    fn add(&mut self, rank: Option<usize>) {
        self.queries += 1;
        if let Some(r) = rank {
            self.at1 += usize::from(r == 1);
            self.at5 += usize::from(r <= 5);
            self.at10 += usize::from(r <= 10);
            self.rr += 1.0 / r as f64;
        }
    }
    fn pct(&self, n: usize) -> f64 {
        100.0 * n as f64 / self.queries.max(1) as f64
    }
}

fn run_mode(
    service: &Service,
    scope: &Scope,
    docs: &[(RecordId, Pair)],
    reranked: bool,
) -> Result<Score> {
    let caller = Caller::anonymous();
    let mut score = Score::default();
    let t = Instant::now();
    for (id, pair) in docs {
        let args = parse_args(
            json!({"query": pair.query, "scope": scope.as_str(), "k": K})
                .as_object()
                .cloned()
                .unwrap(),
        )
        .map_err(|e| anyhow!("{e}"))?;
        let r = service.search_memory(&caller, args).map_err(|e| anyhow!("{e}"))?;
        if reranked && r.memories.first().is_some_and(|m| m.relevance.is_none()) {
            score.fallbacks += 1;
        }
        score.add(r.memories.iter().position(|m| m.id == *id).map(|p| p + 1));
    }
    score.secs = t.elapsed().as_secs_f64();
    Ok(score)
}

/// The corpus: its crates and `n` pairs sampled from them (seeded), in walk order.
struct Corpus {
    sources: Vec<CrateSource>,
    sample: Vec<Pair>,
    /// Documented functions found.
    extracted: usize,
    /// Left after de-duplication.
    available: usize,
}

/// Builds the corpus and samples `n` pairs.
fn corpus(n: usize, limits: &Limits) -> Result<Corpus> {
    let lock_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
    let lock = std::fs::read_to_string(&lock_path)
        .with_context(|| format!("reading {}", lock_path.display()))?;
    let locked = locked_versions(&lock);
    let roots = registry_roots()?;
    let mut sources = Vec::new();
    let mut pairs: Vec<(usize, Pair)> = Vec::new(); // (index in sources, pair)
    let (mut seen_queries, mut seen_code) = (HashSet::new(), HashSet::new());
    let mut extracted = 0;
    for &name in CRATES {
        let mut versions = locked.get(name).cloned().unwrap_or_default();
        versions.sort_by_key(|v| version_key(v));
        let Some(version) = versions.pop() else {
            bail!(
                "{name} is not a registry package in Cargo.lock; the eval's crate list needs updating"
            );
        };
        let dir_name = format!("{name}-{version}");
        let Some(src) = roots.iter().map(|r| r.join(&dir_name).join("src")).find(|p| p.is_dir())
        else {
            bail!("the sources of {dir_name} are not in cargo's registry cache; run `cargo fetch`");
        };
        let mut files = Vec::new();
        rust_files(&src, &mut files)?;
        let mut kept = 0;
        for f in files {
            let text =
                std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
            for mut p in extract(&text) {
                extracted += 1;
                let key = p.query.to_lowercase();
                p.code = truncate(p.code, limits.max_content_bytes);
                if seen_queries.contains(&key) || seen_code.contains(&p.code) {
                    continue;
                }
                seen_queries.insert(key);
                seen_code.insert(p.code.clone());
                pairs.push((sources.len(), p));
                kept += 1;
            }
        }
        sources.push(CrateSource { name, version, kept, sampled: 0 });
    }
    let available = pairs.len();
    if n > available {
        bail!("asked for {n} documents; the corpus has {available}");
    }
    let mut order: Vec<usize> = (0..available).collect();
    order.shuffle(&mut StdRng::seed_from_u64(SEED));
    order.truncate(n);
    order.sort_unstable(); // walk order: crate, file, line
    let sample: Vec<Pair> = order
        .iter()
        .map(|&i| {
            sources[pairs[i].0].sampled += 1;
            pairs[i].1.clone()
        })
        .collect();
    Ok(Corpus { sources, sample, extracted, available })
}

/// `n` real texts of the corpus (the queries: short sentences, quick to embed) for
/// `scale.rs`, which shapes benchmark vectors after their embeddings.
pub fn real_texts(n: usize) -> Result<Vec<String>> {
    Ok(corpus(n, &Limits::default())?.sample.into_iter().map(|p| p.query).collect())
}

/// Runs the evaluation with `n` documents.
pub fn eval(n: usize) -> Result<()> {
    let total = Instant::now();
    if n == 0 {
        bail!("eval needs at least one document");
    }
    let limits = Limits::default();

    // 1. The corpus.
    let t = Instant::now();
    let Corpus { sources, sample, extracted, available } = corpus(n, &limits)?;
    let corpus_secs = t.elapsed().as_secs_f64();

    // 2. The store: one scope, vectors computed in batches.
    let model = super::model()?;
    let embedder = Arc::new(CachedEmbedder::with_capacity(model, n + 16));
    let model_id = embedder.model_id().to_owned();
    let t = Instant::now();
    let mut by_length: Vec<usize> = (0..n).collect();
    by_length.sort_by_key(|&i| sample[i].code.len()); // less padding per batch
    let mut vectors: Vec<Vec<f32>> = vec![Vec::new(); n];
    for (done, chunk) in by_length.chunks(64).enumerate() {
        let texts: Vec<&str> = chunk.iter().map(|&i| sample[i].code.as_str()).collect();
        let out = embedder.inner().embed(&texts).map_err(|e| anyhow!("{e}"))?;
        for (&i, v) in chunk.iter().zip(out) {
            vectors[i] = v;
        }
        eprint!("\rembedding documents: {}/{n}", ((done + 1) * 64).min(n));
    }
    eprintln!();
    let embed_secs = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::open(dir.path())?);
    let scope = Scope::parse("scope", "eval:project:codesearchnet").map_err(|e| anyhow!("{e}"))?;
    let base = Timestamp::from_micros(1_800_000_000_000_000);
    let caller = Caller::anonymous();
    let mut docs: Vec<(RecordId, Pair)> = Vec::with_capacity(n);
    for (c, chunk) in sample.chunks(INSERT_CHUNK).enumerate() {
        let items: Vec<(Memory, Embedding<'_>)> = chunk
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let i = c * INSERT_CHUNK + j;
                let at = Timestamp::from_micros(base.as_micros() + i as i64);
                let m = Memory::new(
                    ShortId::mint(),
                    p.code.clone(),
                    scope.clone(),
                    Source::AgentInferred,
                    Category::Convention,
                    &caller,
                    at,
                );
                (m, Embedding { model: &model_id, vector: &vectors[i] })
            })
            .collect();
        for ((m, _), p) in items.iter().zip(chunk) {
            limits.check_content(&m.content).map_err(|e| anyhow!("{e}"))?;
            docs.push((m.id, p.clone()));
        }
        store.insert_batch(&items)?;
    }
    drop(vectors);
    let ingest_secs = t.elapsed().as_secs_f64();

    // 3. Query vectors, once for every mode (single-text calls, as the service makes them).
    let t = Instant::now();
    for (_, p) in &docs {
        embedder.embed(&[p.query.as_str()]).map_err(|e| anyhow!("{e}"))?;
    }
    let query_secs = t.elapsed().as_secs_f64();

    // 4. The modes.
    let hybrid = Service::new(store, embedder.clone(), Arc::new(SystemClock), limits);
    let mut modes: Vec<(&str, Score)> = Vec::new();
    let dense = hybrid.clone().with_lexical_weight(0.0);
    modes.push(("dense only", run_mode(&dense, &scope, &docs, false)?));
    modes.push(("dense + lexical (default)", run_mode(&hybrid, &scope, &docs, false)?));
    let rerank = match rerank_from_env()? {
        Some(config) => {
            let label = format!(
                "{}{}",
                config.url,
                config.model.as_deref().map(|m| format!(", model {m}")).unwrap_or_default()
            );
            let reranker = HttpReranker::new(config).context("setting up the reranker")?;
            let reranked = hybrid.clone().with_reranker(Arc::new(reranker));
            modes.push(("dense + lexical + reranker", run_mode(&reranked, &scope, &docs, true)?));
            Some(label)
        }
        None => None,
    };
    let stats = embedder.stats();

    // 5. Report.
    println!(
        "Retrieval quality of search_memory (k = {K}): CodeSearchNet-style pairs from the Rust \
         sources of {} crates pinned in Cargo.lock.\n",
        sources.len()
    );
    println!("| mode | recall@1 | recall@5 | recall@10 | MRR@10 | queries | ms/query |");
    println!("|---|---|---|---|---|---|---|");
    for (name, s) in &modes {
        println!(
            "| {name} | {:.1}% | {:.1}% | {:.1}% | {:.3} | {} | {:.1} |",
            s.pct(s.at1),
            s.pct(s.at5),
            s.pct(s.at10),
            s.rr / s.queries.max(1) as f64,
            s.queries,
            1000.0 * s.secs / s.queries.max(1) as f64
        );
    }
    match (&rerank, modes.get(2)) {
        (Some(label), Some((_, s))) => println!(
            "\nreranker: {label}; {} of {} queries fell back to the default order (provider failure)",
            s.fallbacks, s.queries
        ),
        _ => println!(
            "\nreranked mode skipped: no reranker configured (set SPINE_SEARCH_RANKER=jev and \
             SPINE_RERANK_URL, as for the spine binary)"
        ),
    }
    let crates: Vec<String> = sources
        .iter()
        .map(|s| format!("{} {} ({}/{})", s.name, s.version, s.sampled, s.kept))
        .collect();
    println!("\ncrates (sampled/kept): {}", crates.join(", "));
    let mut lengths: Vec<usize> = docs.iter().map(|(_, p)| p.code.len()).collect();
    lengths.sort_unstable();
    let words: usize = docs.iter().map(|(_, p)| p.query.split_whitespace().count()).sum();
    println!(
        "corpus: {extracted} documented pub fns extracted, {available} after de-duplication; \
         {n} sampled (seed {SEED}) as documents, each one's query asked: {} queries",
        docs.len()
    );
    println!(
        "documents: median {} bytes, p90 {} bytes, max {} bytes; queries: mean {:.1} words",
        lengths[lengths.len() / 2],
        lengths[lengths.len() * 9 / 10],
        lengths[lengths.len() - 1],
        words as f64 / docs.len() as f64
    );
    println!(
        "time: corpus {corpus_secs:.1} s, document embedding {embed_secs:.1} s, ingest \
         {ingest_secs:.1} s, query embedding {query_secs:.1} s, searches {:.1} s; total {:.1} s \
         (query vector cache: {} hits, {} misses)",
        modes.iter().map(|(_, s)| s.secs).sum::<f64>(),
        total.elapsed().as_secs_f64(),
        stats.hits,
        stats.misses
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_documented_pub_fns_without_their_docs() {
        let src = r#####"
/// Returns the number of elements in the map, counting duplicates.
///
/// More text here.
#[inline]
#[cfg_attr(
    docsrs,
    doc(cfg(feature = "std"))
)]
pub const fn len(&self) -> usize {
    /// Inner doc.
    let s = "}"; // a } in a comment
    let c = '}';
    let r = r#"}"#;
    self.n + s.len() + r.len()
}

/// Too short to keep, but a good sentence here.
pub fn short(&self) -> usize {
    self.n
}

/// A trait method without a body is skipped too.
pub fn no_body(&self);

/// Ends with a lifetime 'a and e.g. an abbreviation. Second sentence.
    pub fn with_lifetime<'a>(x: &'a [u8; 4]) -> &'a str {
        let y = x;
        let z = y;
        todo!()
    }
"#####;
        let pairs = extract(src);
        assert_eq!(pairs.len(), 2, "{pairs:#?}");
        assert_eq!(
            pairs[0].query,
            "Returns the number of elements in the map, counting duplicates"
        );
        assert!(pairs[0].code.starts_with("pub const fn len"));
        assert!(pairs[0].code.ends_with("self.n + s.len() + r.len()\n}"));
        assert!(!pairs[0].code.contains("Inner doc"));
        assert_eq!(pairs[1].query, "Ends with a lifetime 'a and e.g. an abbreviation");
        assert!(pairs[1].code.starts_with("pub fn with_lifetime<'a>"));
        assert!(pairs[1].code.ends_with("todo!()\n}"));
    }

    #[test]
    fn first_sentence_strips_markdown_and_needs_four_words() {
        let doc = |s: &str| s.lines().map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            first_sentence(&doc("Parses a [`Url`](crate::Url) from `input`, see [`Foo`][foo].")),
            Some("Parses a Url from input, see Foo".into())
        );
        assert_eq!(first_sentence(&doc("Returns the length.")), None);
        assert_eq!(first_sentence(&doc("# Examples\nfoo bar baz qux")), None);
        assert_eq!(
            first_sentence(&doc("Splits the input\nat every comma. Then more.")),
            Some("Splits the input at every comma".into())
        );
    }

    #[test]
    fn is_pub_fn_accepts_qualifiers_only_after_pub() {
        assert!(is_pub_fn("pub fn a() {"));
        assert!(is_pub_fn("pub const unsafe fn a() {"));
        assert!(is_pub_fn("pub extern \"C\" fn a() {"));
        assert!(!is_pub_fn("pub(crate) fn a() {"));
        assert!(!is_pub_fn("fn a() {"));
        assert!(!is_pub_fn("pub struct A;"));
    }

    #[test]
    fn lock_file_versions_are_read_for_registry_packages_only() {
        let lock = "[[package]]\nname = \"a\"\nversion = \"1.2.0\"\nsource = \"registry+x\"\n\n\
                    [[package]]\nname = \"b\"\nversion = \"0.1.0\"\n";
        let v = locked_versions(lock);
        assert_eq!(v.get("a"), Some(&vec!["1.2.0".to_owned()]));
        assert!(!v.contains_key("b"));
        assert!(version_key("1.10.0") > version_key("1.9.3"));
    }
}
