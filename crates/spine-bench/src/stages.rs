//! Where a search's time goes: `spine-bench stages [N…]`.
//!
//! A scope of N records (the first 2,000 real documents of the evaluation corpus, cut to
//! about 460 characters and embedded by the real model; beyond 2,000, records of the same
//! texts with shaped vectors, see `scale.rs`), then 100 distinct queries never seen before
//! (the query cache cannot answer them) through the service's `search_memory`, as the MCP
//! tool runs it: arguments parsed, the call, the result encoded as JSON. Each stage is a
//! tracing span (`embed.tokenize`, `embed.forward`, `search.retrieve`…); a layer records the
//! span durations, and the table gives each stage's median, 95th percentile and mean.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Result, anyhow};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::json;
use spine_core::{
    Caller, Category, Limits, Memory, Scope, ShortId, Source, SystemClock, Timestamp,
};
use spine_embed::{CachedEmbedder, Embedder};
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::{Embedding, SqliteStore, Store};
use tracing::span;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::percentile;

/// Span durations by name, in milliseconds.
#[derive(Clone, Default)]
struct Timings(Arc<Mutex<BTreeMap<&'static str, Vec<f64>>>>);

impl Timings {
    fn take(&self) -> BTreeMap<&'static str, Vec<f64>> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Timings {
    fn on_new_span(&self, _: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Instant::now());
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(started) = span.extensions().get::<Instant>()
        {
            let ms = started.elapsed().as_secs_f64() * 1e3;
            self.0.lock().unwrap().entry(span.metadata().name()).or_default().push(ms);
        }
    }
}

/// About 460 characters of `text`, cut at a character boundary.
fn cut(text: &str) -> String {
    text.chars().take(460).collect()
}

pub fn run(sizes: &[usize]) -> Result<()> {
    let timings = Timings::default();
    let subscriber = tracing_subscriber::registry().with(timings.clone().with_filter(
        tracing_subscriber::filter::filter_fn(|m| {
            m.is_span() && ["embed.", "search.", "store."].iter().any(|p| m.name().starts_with(p))
        }),
    ));
    tracing::subscriber::set_global_default(subscriber)?;

    let t = Instant::now();
    let model = crate::model()?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let load_stages: Vec<String> = timings
        .take()
        .into_iter()
        .map(|(name, ms)| format!("{name} {:.0} ms", ms.iter().sum::<f64>()))
        .collect();
    let corpus = crate::corpus::corpus(2100, &Limits::default())?;
    let (docs, queries) = corpus.sample.split_at(2000);
    let docs: Vec<String> = docs.iter().map(|p| cut(&p.code)).collect();
    // The queries' own documents were never stored: the notes the store stage writes.
    let notes: Vec<String> = queries.iter().map(|p| cut(&p.code)).collect();
    let queries: Vec<String> = queries.iter().map(|p| p.query.clone()).collect();
    let t = Instant::now();
    let mut doc_vectors = Vec::with_capacity(docs.len());
    for chunk in docs.chunks(32) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        doc_vectors.extend(model.embed(&refs).map_err(|e| anyhow!("{e}"))?);
    }
    let embed_s = t.elapsed().as_secs_f64();
    timings.take();
    println!(
        "model load {load_ms:.0} ms ({}); {} documents of ~460 characters embedded in {embed_s:.1} s \
         ({:.0}/s, batches of 32)",
        load_stages.join(", "),
        docs.len(),
        docs.len() as f64 / embed_s
    );
    let model = Arc::new(model);
    println!();
    println!("| records | stage | p50 ms | p95 ms | mean ms |");
    println!("|---|---|---|---|---|");
    for &n in sizes {
        // A cache of its own per size: every timed query is new to it.
        let embedder: Arc<dyn Embedder> = Arc::new(CachedEmbedder::new(model.clone()));
        let dir = tempfile::tempdir()?;
        let store = Arc::new(SqliteStore::open(dir.path())?);
        let scope = Scope::parse("scope", "bench:project:stages").map_err(|e| anyhow!("{e}"))?;
        let mut rng = StdRng::seed_from_u64(5);
        let shapes = crate::scale::Shapes { base: doc_vectors.clone() };
        for start in (0..n).step_by(5000) {
            let end = (start + 5000).min(n);
            let vectors: Vec<Vec<f32>> = (start..end)
                .map(|i| match doc_vectors.get(i) {
                    Some(v) => v.clone(),
                    None => shapes.record(&mut rng),
                })
                .collect();
            let items: Vec<(Memory, Embedding<'_>)> = (start..end)
                .zip(&vectors)
                .map(|(i, v)| {
                    let m = Memory::new(
                        ShortId::mint(),
                        docs[i % docs.len()].clone(),
                        scope.clone(),
                        Source::AgentInferred,
                        Category::Convention,
                        &Caller::anonymous(),
                        Timestamp::from_micros(1_800_000_000_000_000 + i as i64),
                    );
                    (m, Embedding { model: embedder.model_id(), vector: v })
                })
                .collect();
            store.insert_batch(&items)?;
        }
        let service =
            Service::new(store, embedder.clone(), Arc::new(SystemClock), Limits::default());
        let caller = Caller::anonymous();
        // Warm: the index loaded, the model's first call paid.
        let warm = json!({"query": "warm up the index", "scope": scope.as_str()});
        service
            .search_memory(&caller, parse_args(warm.as_object().cloned().unwrap_or_default())?)
            .map_err(|e| anyhow!("{e}"))?;
        timings.take();
        let mut extra: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
        for q in &queries {
            let args = json!({"query": q, "scope": scope.as_str()});
            let total = Instant::now();
            let t = Instant::now();
            let a = parse_args(args.as_object().cloned().unwrap_or_default())
                .map_err(|e| anyhow!("{e}"))?;
            extra.entry("tool.parse_args").or_default().push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let r = service.search_memory(&caller, a).map_err(|e| anyhow!("{e}"))?;
            extra.entry("search (service)").or_default().push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let text = serde_json::to_string(&serde_json::to_value(&r)?)?;
            extra.entry("tool.encode").or_default().push(t.elapsed().as_secs_f64() * 1e3);
            extra.entry("total").or_default().push(total.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(text);
        }
        // Then new notes through `store_memory`: validation, embedding, the durable write
        // and the near-duplicate check (which brings the index up to date).
        for note in &notes {
            let args = json!({"content": note, "scope": scope.as_str(),
                "source": "agent-inferred", "category": "convention"});
            let total = Instant::now();
            let a = parse_args(args.as_object().cloned().unwrap_or_default())
                .map_err(|e| anyhow!("{e}"))?;
            let r = service.store_memory(&caller, a).map_err(|e| anyhow!("{e}"))?;
            std::hint::black_box(serde_json::to_string(&serde_json::to_value(&r)?)?);
            extra.entry("store total").or_default().push(total.elapsed().as_secs_f64() * 1e3);
        }
        let mut all = timings.take();
        all.extend(extra);
        for (name, mut ms) in all {
            ms.sort_by(f64::total_cmp);
            let mean = ms.iter().sum::<f64>() / ms.len() as f64;
            let (p50, p95) = (percentile(&ms, 0.5), percentile(&ms, 0.95));
            println!("| {n} | {name} | {p50:.2} | {p95:.2} | {mean:.2} |");
        }
    }
    Ok(())
}
