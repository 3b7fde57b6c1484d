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
//! spreads N records over 100 scopes and searches with `cross_spine`; `owners N` does the
//! same with the records owned by 10 owners (one in ten shared), searched by one of them:
//! the owner filter keeps about 19% of the records.
//!
//! Recall@10 is measured at the store level (`Store::nearest`, the 10 nearest active
//! records) against an exact f32 scan of the vectors read back from the store.
//!
//! `--writes R` times the searches while another thread stores R new records a second in
//! the searched scope (records of the same shapes, one insert each, paced), as sessions
//! storing beside the searching ones do: every commit leaves the index behind the database
//! and every reader's page cache stale, which a search on a quiet store never meets.
//!
//! With `SPINE_BENCH_DATABASE_URL` naming a PostgreSQL server (with pgvector), each size runs
//! on a fresh database there instead of SQLite. Records are loaded as `spine import` loads
//! them (a bulk load: on PostgreSQL the HNSW index is built once at the end, then
//! `ANALYZE`); "ingest" is the load, "build" the end of the bulk load.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use spine_core::{
    Caller, Category, Limits, Memory, Scope, ShortId, Source, SystemClock, Timestamp, Visibility,
};
use spine_embed::Embedder;
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::{
    Access, Embedding, Filter, NearestQuery, PgStore, RowidPage, ScopeFilter, SqliteStore, Store,
    TransferStore,
};
use spine_testkit::postgres::FreshDatabase;

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
    /// As `Cross`, the records owned by [`OWNERS`] owners (every tenth shared), searched by
    /// the first owner.
    CrossOwners,
}

/// Owners of the records of a `CrossOwners` layout.
const OWNERS: usize = 10;

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::OneScope => "one scope",
            Layout::Cross => "cross_spine, 100 scopes",
            Layout::CrossOwners => "cross_spine, 100 scopes, owner filter",
        }
    }

    /// Who owns record `i` and whether it is shared.
    fn owner(self, i: usize) -> Option<(String, bool)> {
        match self {
            // Every scope holds records of every owner, shared or not.
            Layout::CrossOwners => Some((
                format!("owner{}", (i / CROSS_SCOPES) % OWNERS),
                (i / (CROSS_SCOPES * OWNERS)) % 10 == 3,
            )),
            _ => None,
        }
    }

    /// Who searches.
    fn caller(self) -> Caller {
        match self {
            Layout::CrossOwners => Caller::authenticated("owner0", "owner0"),
            _ => Caller::anonymous(),
        }
    }
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
pub(crate) struct Shapes {
    pub(crate) base: Vec<Vec<f32>>,
}

impl Shapes {
    pub(crate) fn record(&self, rng: &mut StdRng) -> Vec<f32> {
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

fn record(i: usize, scope: &Scope, at: Timestamp, layout: Layout) -> Memory {
    let owner = layout.owner(i);
    let caller = match &owner {
        Some((o, _)) => Caller::authenticated(o.clone(), o.clone()),
        None => Caller::anonymous(),
    };
    let mut m = Memory::new(
        ShortId::mint(),
        format!("Benchmark record {i}: module_{} handles request type {}.", i % 97, i % 13),
        scope.clone(),
        Source::AgentInferred,
        Category::Convention,
        &caller,
        at,
    );
    if let Some((_, true)) = owner {
        m.visibility = Visibility::Shared;
    }
    m.tags = vec![format!("t{}", i % 50)];
    m
}

/// The exact top-10 of each query among every stored vector of `model` that `caller` may
/// read, read back through the export walk (one pass over the store, any backend).
fn exact_top10(
    store: &dyn BenchStore,
    model: &str,
    queries: &[Vec<f32>],
    caller: &Caller,
) -> Result<Vec<Vec<String>>> {
    let mut best: Vec<Vec<(f32, String)>> = vec![Vec::new(); queries.len()];
    let mut after = 0;
    loop {
        let page = store.export_page(RowidPage { scope: None, after, limit: 5000 }, true)?;
        let Some(last) = page.last() else { break };
        after = last.rowid;
        for r in page {
            let m: Memory = serde_json::from_str(&r.body)?;
            let readable = !caller.is_authenticated()
                || m.owner.as_deref() == Some(caller.owner())
                || m.visibility == Visibility::Shared;
            if !readable {
                continue;
            }
            let Some(v) = r.vector.filter(|v| v.model == model) else { continue };
            let v: Vec<f32> = v
                .data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            for (q, top) in queries.iter().zip(best.iter_mut()) {
                let s = spine_core::cosine(q, &v);
                if top.len() < 10 || s > top[9].0 {
                    top.push((s, r.id.clone()));
                    top.sort_by(|a, b| b.0.total_cmp(&a.0));
                    top.truncate(10);
                }
            }
        }
    }
    Ok(best.into_iter().map(|top| top.into_iter().map(|(_, id)| id).collect()).collect())
}

/// What the benchmark needs of a store: the service's contract and the export walk.
trait BenchStore: Store + TransferStore {}
impl<T: Store + TransferStore> BenchStore for T {}

/// A fresh store and what removes it when dropped.
struct Fresh {
    store: Arc<dyn BenchStore>,
    _guard: Box<dyn std::any::Any>,
}

/// A fresh store: SQLite in a temporary directory, or a fresh database on the PostgreSQL
/// server `SPINE_BENCH_DATABASE_URL` names.
fn fresh_store() -> Result<Fresh> {
    match std::env::var("SPINE_BENCH_DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        Some(server) => {
            let db: FreshDatabase = spine_testkit::postgres::fresh_database_on(&server);
            let store = Arc::new(PgStore::connect(&db.url)?);
            Ok(Fresh { store, _guard: Box::new(db) })
        }
        None => {
            let dir = tempfile::tempdir()?;
            let store = Arc::new(SqliteStore::open(dir.path())?);
            Ok(Fresh { store, _guard: Box::new(dir) })
        }
    }
}

/// Runs the layout at each size and prints one table row per size.
pub fn run(
    embedder: Arc<Memo>,
    base_texts: &[String],
    layout: Layout,
    sizes: &[usize],
    writes_per_s: u32,
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
        "| records | layout | p50 ms | p95 ms | p99 ms | index p50 ms | recall@10 | RSS MiB | index load s | ingest s | build s | writes/s | CPU ms | faults |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &n in sizes {
        let Fresh { store, _guard } = fresh_store()?;
        let mut rng = StdRng::seed_from_u64(7);
        let scopes: Vec<Scope> = match layout {
            Layout::OneScope => vec![Scope::parse("scope", "bench:project:spine")],
            Layout::Cross | Layout::CrossOwners => (0..CROSS_SCOPES)
                .map(|i| Scope::parse("scope", &format!("bench:project:p{i}")))
                .collect(),
        }
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("{e}"))?;
        let t = Instant::now();
        let at0 = 1_800_000_000_000_000i64;
        store.begin_bulk_load()?;
        for start in (0..n).step_by(5000) {
            let end = (start + 5000).min(n);
            let vectors: Vec<Vec<f32>> = (start..end).map(|_| shapes.record(&mut rng)).collect();
            let items: Vec<(Memory, Embedding<'_>)> = (start..end)
                .zip(&vectors)
                .map(|(i, v)| {
                    let scope = &scopes[i % scopes.len()];
                    let m = record(i, scope, Timestamp::from_micros(at0 + i as i64), layout);
                    (m, Embedding { model: embedder.model_id(), vector: v })
                })
                .collect();
            store.insert_batch(&items)?;
        }
        let ingest_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        store.finish_bulk_load()?;
        let build_s = t.elapsed().as_secs_f64();

        // The memo answers every timed query: the query vector is a shaped one.
        let queries: Vec<Vec<f32>> = (0..QUERIES).map(|_| shapes.query(&mut rng)).collect();
        let service =
            Service::new(store.clone(), embedder.clone(), Arc::new(SystemClock), Limits::default());
        let args = || {
            let a = match layout {
                Layout::OneScope => json!({"query": text, "scope": scopes[0].as_str()}),
                Layout::Cross | Layout::CrossOwners => json!({"query": text, "cross_spine": true}),
            };
            parse_args(a.as_object().cloned().unwrap_or_default()).map_err(|e| anyhow!("{e}"))
        };
        let caller = layout.caller();
        let t = Instant::now();
        embedder.remember(text, queries[0].clone());
        service.search_memory(&caller, args()?).map_err(|e| anyhow!("{e}"))?;
        let load_s = t.elapsed().as_secs_f64();
        let mut ms = Vec::with_capacity(QUERIES * 2);
        let stop = AtomicBool::new(false);
        let mut used = None;
        let (searched, written) = std::thread::scope(|s| -> Result<(f64, usize)> {
            let writer = (writes_per_s > 0).then(|| {
                let (store, shapes, scope, stop) = (&store, &shapes, &scopes[0], &stop);
                let model = embedder.model_id();
                s.spawn(move || {
                    write_paced(store.as_ref(), model, shapes, scope, n, writes_per_s, stop)
                })
            });
            let started = Instant::now();
            let searched = (|| -> Result<()> {
                for round in 0..2 {
                    if round == 1 {
                        used = Some(thread_usage());
                    }
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
                if let Some((cpu, faults)) = used {
                    let (cpu_now, faults_now) = thread_usage();
                    let n = ms.len().max(1) as f64;
                    used = Some(((cpu_now - cpu) / n, (faults_now - faults) / n));
                }
                Ok(())
            })();
            let secs = started.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            let written = match writer {
                Some(w) => w.join().expect("the writer panicked")?,
                None => 0,
            };
            searched.map(|()| (secs, written))
        })?;
        ms.sort_by(f64::total_cmp);
        let rss = rss_mib();

        let access = Access::read(&caller);
        let filter = match layout {
            Layout::OneScope => Filter::new(ScopeFilter::One(scopes[0].clone())),
            Layout::Cross | Layout::CrossOwners => Filter::new(ScopeFilter::All),
        };
        let exact = exact_top10(store.as_ref(), embedder.model_id(), &queries, &caller)?;
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
            "| {n} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {recall:.3} | {rss:.0} | {load_s:.1} | {ingest_s:.0} | {build_s:.0} | {:.0} | {:.2} | {:.0} |",
            layout.name(),
            percentile(&ms, 0.5),
            percentile(&ms, 0.95),
            percentile(&ms, 0.99),
            percentile(&index_ms, 0.5),
            written as f64 / searched,
            used.map_or(0.0, |u| u.0),
            used.map_or(0.0, |u| u.1),
        );
    }
    Ok(())
}

/// Stores `per_s` new records a second in `scope` until `stop`, one insert each, paced by
/// the clock (a late insert is not made up for in a burst); returns how many it stored.
fn write_paced(
    store: &dyn BenchStore,
    model: &str,
    shapes: &Shapes,
    scope: &Scope,
    first: usize,
    per_s: u32,
    stop: &AtomicBool,
) -> Result<usize> {
    let mut rng = StdRng::seed_from_u64(11);
    let every = Duration::from_secs(1) / per_s;
    let mut next = Instant::now();
    let mut written = 0;
    while !stop.load(Ordering::Relaxed) {
        let i = first + written;
        let at = Timestamp::from_micros(1_800_000_000_000_000 + i as i64);
        let vector = shapes.record(&mut rng);
        store.insert(
            &spine_store::Access::operator(),
            &record(i, scope, at, Layout::OneScope),
            Embedding { model, vector: &vector },
        )?;
        written += 1;
        next = (next + every).max(Instant::now() - every);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    Ok(written)
}

/// The calling thread's CPU time in milliseconds and its page faults (minor and major)
/// so far.
fn thread_usage() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct it is given.
    let ru = unsafe {
        let mut ru = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    (ms(ru.ru_utime) + ms(ru.ru_stime), (ru.ru_minflt + ru.ru_majflt) as f64)
}
