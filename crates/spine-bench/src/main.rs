//! `spine-bench`: latency, throughput and memory figures of the service layer, on the real
//! SQLite store and the real model, with nothing but the store and the model in the way.
//!
//! ```text
//! cargo run --release -p spine-bench -- search 10000 100000   # search latency at each size
//! cargo run --release -p spine-bench -- ingest 500            # store_memory rate, with embedding
//! cargo run --release -p spine-bench -- eval 2000             # retrieval quality (see eval.rs)
//! ```
//!
//! Search figures exclude the query embedding (SPEC targets do): the query vector is
//! computed once and then served from a memo. Record vectors are random unit vectors, so the
//! scan does the same work as with real ones; the store holds one scope of N records.

mod eval;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use spine_core::{
    Caller, Category, Limits, Memory, Scope, ShortId, Source, SystemClock, Timestamp,
};
use spine_embed::{BuiltinEmbedder, DIMS, EmbedError, Embedder};
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::{Embedding, SqliteStore, Store};

/// The real model, with a memo so a repeated query is embedded once.
struct Memo {
    inner: BuiltinEmbedder,
    seen: Mutex<HashMap<String, Vec<f32>>>,
}

impl Embedder for Memo {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dims(&self) -> usize {
        self.inner.dims()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if let [one] = texts
            && let Some(v) = self.seen.lock().unwrap().get(*one)
        {
            return Ok(vec![v.clone()]);
        }
        let out = self.inner.embed(texts)?;
        if let [one] = texts {
            self.seen.lock().unwrap().insert(one.to_string(), out[0].clone());
        }
        Ok(out)
    }
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn random_unit(rng: &mut StdRng) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIMS).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

fn record(i: usize, scope: &Scope, at: Timestamp) -> Memory {
    let mut m = Memory::new(
        ShortId::mint(),
        format!("Benchmark record {i}: module_{} handles request type {}.", i % 97, i % 13),
        scope.clone(),
        Source::AgentInferred,
        Category::Convention,
        &Caller::anonymous(),
        at,
    );
    m.tags = vec![format!("t{}", i % 50)];
    m
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn model() -> Result<BuiltinEmbedder> {
    BuiltinEmbedder::load(&spine_embed::default_model_dir())
        .context("the built-in model (run scripts/fetch-model.sh)")
}

fn search(sizes: &[usize]) -> Result<()> {
    let embedder = Arc::new(Memo { inner: model()?, seen: Mutex::default() });
    let scope = Scope::parse("scope", "bench:project:spine").map_err(|e| anyhow::anyhow!("{e}"))?;
    let query = "which module handles authentication requests";
    println!("| records | p50 ms | p95 ms | p99 ms | RSS MiB |");
    println!("|---|---|---|---|---|");
    for &n in sizes {
        let dir = tempfile::tempdir()?;
        let store = Arc::new(SqliteStore::open(dir.path())?);
        let mut rng = StdRng::seed_from_u64(7);
        let base = Timestamp::from_micros(1_800_000_000_000_000);
        for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
            let vectors: Vec<Vec<f32>> = chunk.iter().map(|_| random_unit(&mut rng)).collect();
            let items: Vec<(Memory, Embedding<'_>)> = chunk
                .iter()
                .zip(&vectors)
                .map(|(&i, v)| {
                    let at = Timestamp::from_micros(base.as_micros() + i as i64);
                    (record(i, &scope, at), Embedding { model: embedder.model_id(), vector: v })
                })
                .collect();
            store.insert_batch(&items)?;
        }
        let service =
            Service::new(store, embedder.clone(), Arc::new(SystemClock), Limits::default());
        let args = || {
            parse_args(
                json!({"query": query, "scope": scope.as_str()}).as_object().cloned().unwrap(),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))
        };
        let caller = Caller::anonymous();
        for _ in 0..3 {
            service.search_memory(&caller, args()?).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        let runs = if n >= 100_000 { 30 } else { 100 };
        let mut ms = Vec::with_capacity(runs);
        for _ in 0..runs {
            let a = args()?;
            let t = Instant::now();
            let r = service.search_memory(&caller, a).map_err(|e| anyhow::anyhow!("{e}"))?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(r.memories.len(), 8);
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "| {n} | {:.1} | {:.1} | {:.1} | {:.0} |",
            percentile(&ms, 0.5),
            percentile(&ms, 0.95),
            percentile(&ms, 0.99),
            rss_mib()
        );
    }
    Ok(())
}

fn ingest(n: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::open(dir.path())?);
    let embedder = Arc::new(model()?);
    let service = Service::new(store, embedder, Arc::new(SystemClock), Limits::default());
    let caller = Caller::anonymous();
    let t = Instant::now();
    for i in 0..n {
        let a = parse_args(
            json!({"content": format!("Ingest {i}: the build cache for crate {} lives in target/.", i % 31),
                   "scope": "bench:project:spine", "source": "agent-inferred", "category": "convention"})
            .as_object()
            .cloned()
            .unwrap(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        service.store_memory(&caller, a).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "store_memory with embedding: {n} records in {secs:.1} s = {:.1} records/s",
        n as f64 / secs
    );
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let numbers = |from: usize| -> Result<Vec<usize>> {
        args[from..].iter().map(|s| s.parse::<usize>().context("a record count")).collect()
    };
    match args.first().map(String::as_str) {
        Some("search") => search(&numbers(1)?),
        Some("ingest") => ingest(numbers(1)?.first().copied().unwrap_or(500)),
        Some("eval") => eval::eval(numbers(1)?.first().copied().unwrap_or(eval::DEFAULT_DOCS)),
        _ => {
            bail!("usage: spine-bench search N [N…] | spine-bench ingest N | spine-bench eval [N]")
        }
    }
}
