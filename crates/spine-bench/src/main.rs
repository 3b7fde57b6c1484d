//! `spine-bench`: latency, throughput and memory figures of the service layer, on the real
//! SQLite store and the real model, with nothing but the store and the model in the way.
//!
//! ```text
//! cargo run --release -p spine-bench -- search 10000 100000   # one scope of N: latency, recall
//! cargo run --release -p spine-bench -- search 10000 --writes 500  # the same while storing
//! cargo run --release -p spine-bench -- cross 1000000         # cross_spine over 100 scopes
//! cargo run --release -p spine-bench -- stages 2000 100000   # where a new query's time goes
//! cargo run --release -p spine-bench -- ingest 500            # store_memory rate, with embedding
//! cargo run --release -p spine-bench -- writes 8 10           # 8 writers on the store, no model
//! cargo run --release -p spine-bench -- corpus 2000 prose     # the pairs as JSON lines
//! cargo run --release -p spine-bench -- eval 2000             # retrieval quality (see eval.rs)
//! cargo run --release -p spine-bench -- eval prose 2000       # the same on prose (see prose.rs)
//! cargo run --release -p spine-bench -- eval paraphrase       # small stores, other words
//! cargo run --release -p spine-bench -- devbench --data F.json  # DevBench (see devbench.rs)
//! cargo run --release -p spine-bench -- load --mode mix       # a running server over MCP HTTP
//! cargo run --release -p spine-bench -- soak --minutes 60     # an hour of it, a row a minute
//! cargo run --release -p spine-bench -- locomo --data F.json  # recall on LoCoMo (see locomo.rs)
//! ```
//!
//! Search figures exclude the query embedding (SPEC targets do): query vectors are served
//! from a memo. See `scale.rs` for how the benchmark vectors are made. `load` is the
//! exception: it drives a whole `spine serve` over streamable HTTP with fresh documents and
//! queries, embedding included (see `load.rs`).

mod corpus;
mod devbench;
mod eval;
mod load;
mod locomo;
mod paraphrase;
mod prose;
mod recall;
mod scale;
mod secrets;
mod stages;
mod writes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;
use spine_core::{Caller, Limits, SystemClock};
use spine_embed::{BuiltinEmbedder, EmbedError, Embedder};
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::SqliteStore;

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

impl Memo {
    fn new(inner: BuiltinEmbedder) -> Self {
        Memo { inner, seen: Mutex::default() }
    }

    /// Makes `text` embed to `vector` from now on.
    fn remember(&self, text: &str, vector: Vec<f32>) {
        self.seen.lock().unwrap().insert(text.to_owned(), vector);
    }
}

fn rss_mib() -> f64 {
    status_mib("self", "VmRSS:").unwrap_or(0.0)
}

/// A memory figure of `/proc/{pid}/status` (`field` with its colon, e.g. `VmHWM:`) in MiB;
/// `pid` may be `self`.
fn status_mib(pid: impl std::fmt::Display, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = status.lines().find_map(|l| l.strip_prefix(field))?;
    Some(kb.trim().trim_end_matches("kB").trim().parse::<f64>().ok()? / 1024.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// `corpus [N] [prose]`'s arguments: how many pairs (2,000 by default), and whether of
/// the Debian descriptions rather than the code corpus.
fn corpus_args(args: &[String]) -> Result<(usize, bool)> {
    match args {
        [] => Ok((2000, false)),
        [n] | [n, _] => {
            let n =
                n.parse().with_context(|| format!("corpus N [prose]: N is a count, not {n:?}"))?;
            match args.get(1).map(String::as_str) {
                None => Ok((n, false)),
                Some("prose") => Ok((n, true)),
                Some(other) => {
                    bail!("corpus N [prose]: the corpus is code or prose, not {other:?}")
                }
            }
        }
        _ => bail!("corpus N [prose]: at most two arguments"),
    }
}

fn model() -> Result<BuiltinEmbedder> {
    BuiltinEmbedder::load(&spine_embed::default_model_dir())
        .context("the built-in model (run scripts/fetch-model.sh)")
}

/// `store_memory` of `n` documents of 460 characters (`spine-bench corpus`) through the
/// service, one at a time, and the same documents embedded alone: what a store costs
/// besides its embedding.
fn ingest(n: usize) -> Result<()> {
    let docs: Vec<String> = corpus::documents(n)?.into_iter().map(|(doc, _)| doc).collect();
    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::open(dir.path())?);
    let embedder = Arc::new(model()?);
    embedder.embed(&[&docs[0]])?; // warm up
    let t = Instant::now();
    for d in &docs {
        embedder.embed(&[d])?;
    }
    let embed_ms = t.elapsed().as_secs_f64() * 1e3 / n as f64;
    let service = Service::new(store, embedder, Arc::new(SystemClock), Limits::default());
    let caller = Caller::anonymous();
    let t = Instant::now();
    for d in &docs {
        let args = json!({"content": d, "scope": "bench:project:spine",
                          "source": "agent-inferred", "category": "convention"});
        let a = parse_args(args.as_object().cloned().unwrap_or_default())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        service.store_memory(&caller, a).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let secs = t.elapsed().as_secs_f64();
    let store_ms = secs * 1e3 / n as f64;
    println!(
        "store_memory with embedding: {n} records of 460 characters in {secs:.1} s = {:.1} \
         records/s, {store_ms:.1} ms each: embedding {embed_ms:.1} ms, the rest {:.1} ms",
        n as f64 / secs,
        store_ms - embed_ms
    );
    Ok(())
}

fn main() -> Result<()> {
    spine_embed::configure_threads();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let counts = |args: &[String]| -> Result<Vec<usize>> {
        args.iter().map(|s| s.parse::<usize>().context("a record count")).collect()
    };
    let numbers = |from: usize| counts(&args[from..]);
    match args.first().map(String::as_str) {
        Some(cmd @ ("search" | "cross" | "owners")) => {
            let layout = match cmd {
                "cross" => scale::Layout::Cross,
                "owners" => scale::Layout::CrossOwners,
                _ => scale::Layout::OneScope,
            };
            let (writes, sizes) = match args.iter().position(|a| a == "--writes") {
                Some(at) => {
                    let rate = args.get(at + 1).and_then(|r| r.parse().ok());
                    let rate = rate.context("--writes takes records a second")?;
                    (rate, counts(&[&args[1..at], &args[at + 2..]].concat())?)
                }
                None => (0, numbers(1)?),
            };
            let embedder = Arc::new(Memo::new(model()?));
            scale::run(embedder, &corpus::real_texts(2000)?, layout, &sizes, writes)
        }
        Some("stages") => {
            let sizes = numbers(1)?;
            stages::run(if sizes.is_empty() { &[2000, 100_000] } else { &sizes })
        }
        Some("corpus") => {
            let (n, prose) = corpus_args(&args[1..])?;
            let pairs = if prose {
                prose::pairs(n)?.0.into_iter().map(|p| (p.code, p.query)).collect()
            } else {
                corpus::documents(n)?
            };
            for (doc, query) in pairs {
                println!("{}", json!({"doc": doc, "query": query}));
            }
            Ok(())
        }
        Some("secrets") => secrets::run(),
        Some("load") => load::run(&args[1..]),
        Some("soak") => load::soak::run(&args[1..]),
        Some("locomo") => locomo::run(&args[1..]),
        Some("ingest") => ingest(numbers(1)?.first().copied().unwrap_or(500)),
        Some("writes") => {
            let n = numbers(1)?;
            writes::run(n.first().copied().unwrap_or(8), n.get(1).copied().unwrap_or(10) as u64)
        }
        Some("eval") if args.get(1).is_some_and(|a| a == "paraphrase") => {
            if args.len() > 2 {
                bail!("eval paraphrase takes no further arguments");
            }
            paraphrase::run()
        }
        Some("devbench") => devbench::run(&args[1..]),
        Some("eval") => {
            let prose = args.get(1).is_some_and(|a| a == "prose");
            let which = if prose { eval::Which::Prose } else { eval::Which::Code };
            let n = numbers(1 + usize::from(prose))?.first().copied();
            eval::eval(which, n.unwrap_or(eval::DEFAULT_DOCS))
        }
        _ => {
            bail!(
                "usage: spine-bench search N [N…] [--writes R] | spine-bench cross N [N…] | spine-bench owners N [N…] | spine-bench stages [N…] | spine-bench corpus N [prose] | spine-bench ingest N | spine-bench writes [WRITERS] [SECONDS] | spine-bench eval [prose] [N] | spine-bench eval paraphrase | spine-bench devbench --data PATH | spine-bench secrets | spine-bench locomo --data PATH [--mode turns|observations] [--conversations 1-5|6-10|all] [--store DIR] [--json] | spine-bench load [--url URL | --binary PATH] [--mode mix|store|search] [--corpus code|prose] [--sessions N] [--seconds S] [--seed N] [--json] [-- serve args] | spine-bench soak [--minutes N] [--binary PATH] [--sessions N] [--writers N] [--export-every MIN] [--window S] [--warmup MIN] [--json] [-- serve args]"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::corpus_args;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn corpus_takes_a_count_and_optionally_prose() {
        assert_eq!(corpus_args(&args(&[])).unwrap(), (2000, false));
        assert_eq!(corpus_args(&args(&["3"])).unwrap(), (3, false));
        assert_eq!(corpus_args(&args(&["3", "prose"])).unwrap(), (3, true));
        for bad in [&["x"][..], &["3", "poetry"], &["3", "prose", "4"]] {
            assert!(corpus_args(&args(bad)).is_err(), "{bad:?}");
        }
    }
}
