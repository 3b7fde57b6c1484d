//! Search at scale: latency of `search_memory` and recall of the vector index against an
//! exact scan, at N records.
//!
//! Record vectors are shaped like real embeddings rather than drawn uniformly (uniform
//! random vectors in 384 dimensions are all nearly orthogonal, which no index sees in
//! practice and which makes any quantisation look worse than it is): the real model embeds
//! a few thousand real texts (the evaluation corpus, see `eval.rs`), and each record is a
//! mixture of two of those embeddings plus Gaussian noise, normalised. Queries are other
//! real embeddings with noise. The store is the real SQLite store, and search goes through
//! the real service (dense + lexical ranking, records decoded), with the query embedding
//! served from a memo: the SPEC targets exclude it.
//!
//! Layouts: `search N` puts N records in one scope and searches that scope; `cross N`
//! spreads N records over 100 scopes and searches with `cross_spine`.
//!
//! Recall@10 is measured at the store level (`Store::nearest`, the 10 nearest active
//! records) against an exact f32 scan of the vectors read back from SQLite.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, anyhow};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use spine_core::{
    Caller, Category, Limits, Memory, Scope, ShortId, Source, SystemClock, Timestamp,
};
use spine_embed::Embedder;
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::{Access, Embedding, Filter, NearestQuery, ScopeFilter, SqliteStore, Store};

use crate::{Memo, percentile, rss_mib};

/// Scopes a `cross` layout spreads its records over.
const CROSS_SCOPES: usize = 100;
/// Queries timed per size, and queries whose recall is measured.
const QUERIES: usize = 50;

/// How records are laid out and searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// N records in one scope; search that scope.
    OneScope,
    /// N records over [`CROSS_SCOPES`] scopes; search across all of them.
    Cross,
}

fn gaussian(rng: &mut StdRng) -> f32 {
    let (u, v): (f32, f32) = (rng.random_range(1e-7..1.0), rng.random());
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// Vectors shaped like the model's: mixtures of real embeddings plus noise.
struct Shapes {
    base: Vec<Vec<f32>>,
}

impl Shapes {
    fn record(&self, rng: &mut StdRng) -> Vec<f32> {
        let a = &self.base[rng.random_range(0..self.base.len())];
        let b = &self.base[rng.random_range(0..self.base.len())];
        let w: f32 = rng.random_range(0.0..0.6);
        let noise = 0.5 / (a.len() as f32).sqrt();
        unit(a.iter().zip(b).map(|(x, y)| x + w * y + gaussian(rng) * noise).collect())
    }

    fn query(&self, rng: &mut StdRng) -> Vec<f32> {
        let a = &self.base[rng.random_range(0..self.base.len())];
        let noise = 0.3 / (a.len() as f32).sqrt();
        unit(a.iter().map(|x| x + gaussian(rng) * noise).collect())
    }
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

/// The exact top-10 of each query among every stored vector of `model`, read from SQLite
/// in one sequential scan of the vectors table (ids are looked up for the winners only).
fn exact_top10(store: &SqliteStore, model: &str, queries: &[Vec<f32>]) -> Result<Vec<Vec<String>>> {
    let conn = rusqlite::Connection::open(store.path())?;
    let mut stmt = conn.prepare("SELECT memory, model, vec FROM vectors ORDER BY memory")?;
    let mut rows = stmt.query([])?;
    let mut best: Vec<Vec<(f32, i64)>> = vec![Vec::new(); queries.len()];
    while let Some(r) = rows.next()? {
        if r.get_ref(1)?.as_str()? != model {
            continue;
        }
        let rowid: i64 = r.get(0)?;
        let blob = r.get_ref(2)?.as_blob()?;
        let v: Vec<f32> =
            blob.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        for (q, top) in queries.iter().zip(best.iter_mut()) {
            let s = spine_core::cosine(q, &v);
            if top.len() < 10 || s > top[9].0 {
                top.push((s, rowid));
                top.sort_by(|a, b| b.0.total_cmp(&a.0));
                top.truncate(10);
            }
        }
    }
    let mut id_of = conn.prepare("SELECT id FROM memories WHERE rowid = ?1")?;
    best.into_iter()
        .map(|top| {
            top.into_iter()
                .map(|(_, rowid)| Ok(id_of.query_row([rowid], |r| r.get::<_, String>(0))?))
                .collect()
        })
        .collect()
}

/// Runs the layout at each size and prints one table row per size.
pub fn run(
    embedder: Arc<Memo>,
    base_texts: &[String],
    layout: Layout,
    sizes: &[usize],
) -> Result<()> {
    let t = Instant::now();
    let refs: Vec<&str> = base_texts.iter().map(String::as_str).collect();
    let mut base = Vec::with_capacity(refs.len());
    for chunk in refs.chunks(64) {
        base.extend(embedder.embed(chunk).map_err(|e| anyhow!("{e}"))?);
    }
    eprintln!("embedded {} real texts in {:.1} s", base.len(), t.elapsed().as_secs_f64());
    let shapes = Shapes { base };
    let text = "which module handles authentication requests";
    println!(
        "| records | layout | p50 ms | p95 ms | p99 ms | index p50 ms | recall@10 | RSS MiB | index load s | ingest s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &n in sizes {
        let dir = tempfile::tempdir()?;
        let store = Arc::new(SqliteStore::open(dir.path())?);
        let mut rng = StdRng::seed_from_u64(7);
        let scopes: Vec<Scope> = match layout {
            Layout::OneScope => vec![Scope::parse("scope", "bench:project:spine")],
            Layout::Cross => (0..CROSS_SCOPES)
                .map(|i| Scope::parse("scope", &format!("bench:project:p{i}")))
                .collect(),
        }
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("{e}"))?;
        let t = Instant::now();
        let at0 = 1_800_000_000_000_000i64;
        for start in (0..n).step_by(5000) {
            let end = (start + 5000).min(n);
            let vectors: Vec<Vec<f32>> = (start..end).map(|_| shapes.record(&mut rng)).collect();
            let items: Vec<(Memory, Embedding<'_>)> = (start..end)
                .zip(&vectors)
                .map(|(i, v)| {
                    let scope = &scopes[i % scopes.len()];
                    let m = record(i, scope, Timestamp::from_micros(at0 + i as i64));
                    (m, Embedding { model: embedder.model_id(), vector: v })
                })
                .collect();
            store.insert_batch(&items)?;
        }
        let ingest_s = t.elapsed().as_secs_f64();

        // The memo answers every timed query: the query vector is a shaped one.
        let queries: Vec<Vec<f32>> = (0..QUERIES).map(|_| shapes.query(&mut rng)).collect();
        let service =
            Service::new(store.clone(), embedder.clone(), Arc::new(SystemClock), Limits::default());
        let args = || {
            let a = match layout {
                Layout::OneScope => json!({"query": text, "scope": scopes[0].as_str()}),
                Layout::Cross => json!({"query": text, "cross_spine": true}),
            };
            parse_args(a.as_object().cloned().unwrap_or_default()).map_err(|e| anyhow!("{e}"))
        };
        let caller = Caller::anonymous();
        let t = Instant::now();
        embedder.remember(text, queries[0].clone());
        service.search_memory(&caller, args()?).map_err(|e| anyhow!("{e}"))?;
        let load_s = t.elapsed().as_secs_f64();
        let mut ms = Vec::with_capacity(QUERIES * 2);
        for round in 0..2 {
            for q in &queries {
                embedder.remember(text, q.clone());
                let a = args()?;
                let t = Instant::now();
                let r = service.search_memory(&caller, a).map_err(|e| anyhow!("{e}"))?;
                if round == 1 {
                    ms.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                assert_eq!(r.memories.len(), 8);
            }
        }
        ms.sort_by(f64::total_cmp);
        let rss = rss_mib();

        let access = Access::read(&caller);
        let filter = match layout {
            Layout::OneScope => Filter::new(ScopeFilter::One(scopes[0].clone())),
            Layout::Cross => Filter::new(ScopeFilter::All),
        };
        let exact = exact_top10(&store, embedder.model_id(), &queries)?;
        let mut hits = 0;
        let mut index_ms = Vec::with_capacity(queries.len());
        for (q, want) in queries.iter().zip(&exact) {
            let want: HashSet<&String> = want.iter().collect();
            let t = Instant::now();
            let got = store.nearest(&NearestQuery {
                access: &access,
                filter: &filter,
                model: embedder.model_id(),
                vector: q,
                now: Timestamp::from_micros(at0 + n as i64 + 1),
                any: 0,
                active: 10,
                exclude: None,
            })?;
            index_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            hits += got.iter().filter(|g| want.contains(&g.id.to_string())).count();
        }
        let recall = hits as f64 / (10 * queries.len()) as f64;
        index_ms.sort_by(f64::total_cmp);
        println!(
            "| {n} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {recall:.3} | {rss:.0} | {load_s:.1} | {ingest_s:.0} |",
            match layout {
                Layout::OneScope => "one scope",
                Layout::Cross => "cross_spine, 100 scopes",
            },
            percentile(&ms, 0.5),
            percentile(&ms, 0.95),
            percentile(&ms, 0.99),
            percentile(&index_ms, 0.5),
        );
    }
    Ok(())
}
