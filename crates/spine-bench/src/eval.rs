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
//! 1. dense only — `with_lexical_weight(0.0)` and `with_neighbour_weight(0.0)`, cosine order;
//! 2. dense + lexical — the default service (SPEC search rule 1);
//! 3. reranked — the default service plus the reranker configured exactly as the `spine`
//!    binary reads it (`SPINE_SEARCH_RANKER=jev`, `SPINE_RERANK_*`); skipped when unset. It
//!    reorders only the 10 hits, so its recall@10 equals the hybrid's by construction.
//!
//! A query scores a hit at k when its own document is among the first k results; MRR is the
//! mean of 1/rank over the first 10 (0 when absent). Query vectors are computed once, before
//! the modes run, so the modes' times compare ranking alone.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::json;
use spine_core::{
    Caller, Category, Limits, Memory, RecordId, Scope, ShortId, Source, SystemClock, Timestamp,
};
use spine_embed::{CachedEmbedder, Embedder};
use spine_service::Service;
use spine_service::args::parse_args;
use spine_service::rerank::{HttpReranker, RerankConfig};
use spine_store::{Embedding, SqliteStore, Store};

use crate::corpus::{Corpus, Pair, SEED, corpus};

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

/// Documents (and queries) when N is not given.
pub const DEFAULT_DOCS: usize = 2000;
/// Results asked of each search.
const K: usize = 10;
/// Documents per `insert_batch` call.
const INSERT_CHUNK: usize = 500;

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

/// The corpora `spine-bench eval` measures on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// CodeSearchNet-style pairs from Rust crates (the default).
    Code,
    /// Debian package synopses and their long descriptions ([`crate::prose`]).
    Prose,
}

/// Runs the evaluation with `n` documents of corpus `which`.
pub fn eval(which: Which, n: usize) -> Result<()> {
    let total = Instant::now();
    if n == 0 {
        bail!("eval needs at least one document");
    }
    let limits = Limits::default();
    let t = Instant::now();
    let (sample, title, about) = match which {
        Which::Code => {
            let Corpus { sources, sample, extracted, available } = corpus(n, &limits)?;
            let crates: Vec<String> = sources
                .iter()
                .map(|s| format!("{} {} ({}/{})", s.name, s.version, s.sampled, s.kept))
                .collect();
            let title = format!(
                "CodeSearchNet-style pairs from the Rust sources of {} crates pinned in Cargo.lock",
                sources.len()
            );
            let about = format!(
                "crates (sampled/kept): {}\ncorpus: {extracted} documented pub fns extracted, \
                 {available} after de-duplication",
                crates.join(", ")
            );
            (sample, title, about)
        }
        Which::Prose => {
            let (sample, read, available) = crate::prose::pairs(n)?;
            let title = "Debian package synopses and their long descriptions (Debian main, \
                         English)"
                .to_owned();
            let about = format!(
                "corpus: {read} package descriptions read, {available} of {}..={} bytes with \
                 a synopsis and first paragraph of their own",
                crate::prose::MIN_BYTES,
                crate::prose::MAX_BYTES
            );
            (sample, title, about)
        }
    };
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
    let dense = hybrid.clone().with_lexical_weight(0.0).with_neighbour_weight(0.0);
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
    println!("Retrieval quality of search_memory (k = {K}): {title}.\n");
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
    println!("\n{about}");
    let mut lengths: Vec<usize> = docs.iter().map(|(_, p)| p.code.len()).collect();
    lengths.sort_unstable();
    let words: usize = docs.iter().map(|(_, p)| p.query.split_whitespace().count()).sum();
    println!(
        "{n} sampled (seed {SEED}) as documents, each one's query asked: {} queries",
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
