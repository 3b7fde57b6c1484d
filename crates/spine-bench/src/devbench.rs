//! `spine-bench devbench --data PATH`: DevBench, mcp-memory-service's public developer-memory
//! set, through Spine.
//!
//! ```text
//! # scripts/benchmarks/devbench_dataset.json of the mcp-memory-service repository (or a
//! # fork): 30 memories, 20 queries; read from a path, never copied into this repository
//! target/release/spine-bench devbench --data devbench_dataset.json
//! ```
//!
//! # Method
//!
//! Its authors' harness (`benchmark_devbench.py`) stores the 30 memories in a fresh store
//! and asks each query for 5 results; a result counts when it carries one of the query's
//! expected `bench:` tags. Here every memory is stored through `store_memory` in file order
//! into one scope, with its topic tags (the set's labels `devbench` and `bench:…` are left
//! out, so they can neither match a query nor leak the answer), and every query is asked
//! through `search_memory` with k = 5, with the default ranking and in dense order. Per
//! query, as that harness computes them: recall@5 is the share of its expected memories
//! among the 5 results, MRR the reciprocal rank of the first expected one (0 when none is
//! among them). The overall figures average the 15 queries that expect something (the
//! categories `exact`, `semantic` and `cross_type`); the 5 `negative` queries expect
//! nothing and are not scored (every store returns its 5 nearest), as in the published
//! table (`PUBLISHED`).

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use spine_core::RecordId;

use crate::recall::{Bench, Hit, rank_of};

/// Results asked of each search, as the authors' harness asks.
const K: usize = 5;

/// The figures its authors publish for mcp-memory-service: recall@5 and MRR.
const PUBLISHED: (f64, f64) = (0.911, 0.861);

#[derive(Debug, Deserialize)]
struct Dataset {
    memories: Vec<Entry>,
    queries: Vec<Query>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    content: String,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    memory_type: String,
}

#[derive(Debug, Deserialize)]
struct Query {
    category: String,
    question: String,
    #[serde(default)]
    expected_tags: Vec<String>,
}

/// The set's label tags: which memory is which, not what it is about.
fn is_label(tag: &str) -> bool {
    tag == "devbench" || tag.starts_with("bench:")
}

/// The Spine category nearest each of the set's memory types.
fn category(memory_type: &str) -> &'static str {
    match memory_type {
        "decision" | "architecture" => "decision",
        "bug-fix" => "gotcha",
        _ => "convention",
    }
}

/// Recall@k and MRR summed over queries.
#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    queries: usize,
    recall: f64,
    rr: f64,
}

impl Sums {
    fn add(&mut self, hits: &[Hit], expected: &[RecordId]) {
        let ranks: Vec<usize> = expected.iter().filter_map(|id| rank_of(hits, *id)).collect();
        self.queries += 1;
        self.recall += ranks.len() as f64 / expected.len() as f64;
        self.rr += ranks.iter().min().map_or(0.0, |r| 1.0 / *r as f64);
    }

    fn figures(&self) -> (f64, f64) {
        let n = self.queries.max(1) as f64;
        (self.recall / n, self.rr / n)
    }
}

/// Runs `spine-bench devbench` with `args` (after the subcommand).
pub fn run(args: &[String]) -> Result<()> {
    let path = match args {
        [flag, path] if flag == "--data" => PathBuf::from(path),
        _ => bail!("usage: spine-bench devbench --data PATH (devbench_dataset.json)"),
    };
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let set: Dataset =
        serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let bench = Bench::new(Bench::model(set.queries.len() + 16)?)?;
    let scope = "devbench:project:mcp-memory-service";
    let mut by_label: HashMap<String, RecordId> = HashMap::new();
    for m in &set.memories {
        let topics: Vec<String> = m.tags.iter().filter(|t| !is_label(t)).cloned().collect();
        let id = bench.store(scope, &m.content, &topics, category(&m.memory_type))?;
        for label in m.tags.iter().filter(|t| t.starts_with("bench:")) {
            by_label.insert(label.clone(), id);
        }
    }
    let mut sums: BTreeMap<&str, (Sums, Sums)> = BTreeMap::new();
    let (mut overall, mut negatives) = ((Sums::default(), Sums::default()), 0);
    for q in &set.queries {
        if q.expected_tags.is_empty() {
            negatives += 1;
            continue;
        }
        let expected: Vec<RecordId> = q
            .expected_tags
            .iter()
            .map(|t| by_label.get(t).copied().with_context(|| format!("no memory tagged {t}")))
            .collect::<Result<_>>()?;
        let ranked = bench.search(&bench.ranked, scope, &q.question, K)?;
        let dense = bench.search(&bench.dense, scope, &q.question, K)?;
        let c = sums.entry(&q.category).or_default();
        c.0.add(&ranked, &expected);
        c.1.add(&dense, &expected);
        overall.0.add(&ranked, &expected);
        overall.1.add(&dense, &expected);
    }
    println!(
        "DevBench ({}): {} memories stored through store_memory in one scope, {} queries \
         scored ({negatives} negative ones not), search_memory k = {K}.\n",
        path.display(),
        set.memories.len(),
        overall.0.queries
    );
    println!("| queries | n | R@5 default | MRR default | R@5 dense order | MRR dense order |");
    println!("|---|---|---|---|---|---|");
    let row = |label: &str, (r, d): &(Sums, Sums)| {
        let ((r5, rmrr), (d5, dmrr)) = (r.figures(), d.figures());
        println!("| {label} | {} | {r5:.3} | {rmrr:.3} | {d5:.3} | {dmrr:.3} |", r.queries);
    };
    for (category, s) in &sums {
        row(category, s);
    }
    row("**all**", &overall);
    println!(
        "\nmcp-memory-service, as its authors publish it: R@5 {:.3}, MRR {:.3}",
        PUBLISHED.0, PUBLISHED.1
    );
    Ok(())
}
