//! `spine-bench eval paraphrase`: recall in small stores when the question is asked in other
//! words than the memory's.
//!
//! ```text
//! cargo run --release -p spine-bench -- eval paraphrase
//! ```
//!
//! # The corpus
//!
//! `data/paraphrase.json`, written for this project (not taken from anywhere): four
//! fictional software projects, one scope each, of 40 developer memories — decisions,
//! conventions, preferences, gotchas, environment facts, owners, deadlines, commands — and
//! two kinds of query:
//! - *paraphrase*: asks for its target in words the target does not hold (no query term of
//!   `spine_core::lexical::query_terms` is among the target's record terms), and names a
//!   *distractor* in the same scope that shares the query's most distinctive word but
//!   answers something else — what an agent asking in its own words meets every day;
//! - *control*: shares at least one term with its target, the ordinary keyword case.
//!
//! [`Corpus::load`] checks both rules with the service's own tokenizer, so the corpus cannot
//! drift from what it claims.
//!
//! # Method
//!
//! Each scope's memories are stored through `store_memory` into a fresh embedded store, in
//! file order and again, in another store, in a seeded shuffle (the neighbour step reads the
//! stored order); a third store holds every project's memories in one scope (160 of them,
//! more than the ranking's pool, and other projects' look-alike facts beside each answer).
//! Every query is asked through `search_memory` with k = 10, with the default
//! ranking and in dense order (lexical weight and neighbour weight 0). Per kind and mode:
//! - R@1, R@3: the target first / among the first three;
//! - MRR@5: 1 / the target's rank, 0 past 5;
//! - distractor above: the share of queries whose distractor ranks above the target (or is
//!   returned while the target is not);
//! - clear leads kept: of the queries where dense order has the target first by at least
//!   [`CLEAR_MARGIN`] of cosine over the second result, the share the ranking keeps first.
//!
//! Dense order is the reference: with no shared word the lexical leg cannot help a
//! paraphrase; it must only not hurt it.

use std::collections::HashMap;
use std::collections::HashSet;

use anyhow::{Result, bail};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::Deserialize;
use spine_core::RecordId;
use spine_core::lexical::{query_terms, record_terms};
use spine_service::Service;

use crate::recall::{Bench, Hit, rank_of};

/// Results asked of each search.
const K: usize = 10;

/// The cosine lead over the second result from which dense order's first is a clear answer.
pub const CLEAR_MARGIN: f32 = 0.05;

/// The shuffled store order's seed.
const SEED: u64 = 0x5041_5241;

/// The corpus file.
const CORPUS: &str = include_str!("../data/paraphrase.json");

/// The corpus: project scopes with their memories and queries.
#[derive(Debug, Deserialize)]
pub struct Corpus {
    /// One project each.
    pub scopes: Vec<Project>,
}

/// One project's scope.
#[derive(Debug, Deserialize)]
pub struct Project {
    /// The scope's repository part (`paraphrase:project:<name>`).
    pub name: String,
    /// Its memories, in file order.
    pub memories: Vec<Note>,
    /// Questions about them.
    pub queries: Vec<Question>,
}

/// One memory.
#[derive(Debug, Clone, Deserialize)]
pub struct Note {
    /// Its name in the file.
    pub key: String,
    /// `decision`, `preference`, `convention` or `gotcha`.
    pub category: String,
    /// The text stored.
    pub content: String,
    /// Its tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// The two kinds of query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// No term shared with the target; a distractor shares the most distinctive one.
    Paraphrase,
    /// Shares a term with its target.
    Control,
}

/// One question.
#[derive(Debug, Deserialize)]
pub struct Question {
    /// Paraphrase or control.
    pub kind: Kind,
    /// The text asked.
    pub query: String,
    /// The key of the memory that answers it.
    pub target: String,
    /// Paraphrase: the key of a memory sharing the query's most distinctive word.
    pub distractor: Option<String>,
}

impl Corpus {
    /// The corpus, checked: every key it names exists in its scope and is unique, every
    /// paraphrase shares no query term with its target and at least one with its
    /// distractor, every control at least one with its target.
    pub fn load() -> Result<Corpus> {
        let corpus: Corpus = serde_json::from_str(CORPUS)?;
        let mut problems = Vec::new();
        for p in &corpus.scopes {
            let mut terms: HashMap<&str, HashSet<String>> = HashMap::new();
            for m in &p.memories {
                let t = record_terms(&m.content, "", &m.tags).into_iter().collect();
                if terms.insert(&m.key, t).is_some() {
                    problems.push(format!("{}: key {} twice", p.name, m.key));
                }
            }
            for q in &p.queries {
                let shared = |key: &str| -> Option<Vec<String>> {
                    let t = terms.get(key)?;
                    Some(query_terms(&q.query).into_iter().filter(|w| t.contains(w)).collect())
                };
                let Some(with_target) = shared(&q.target) else {
                    problems.push(format!("{}: {:?}: no memory {}", p.name, q.query, q.target));
                    continue;
                };
                match (q.kind, &q.distractor) {
                    (Kind::Paraphrase, Some(d)) => {
                        if !with_target.is_empty() {
                            problems.push(format!(
                                "{}: {:?} shares {with_target:?} with its target",
                                p.name, q.query
                            ));
                        }
                        match shared(d) {
                            None => problems.push(format!("{}: no memory {d}", p.name)),
                            Some(s) if s.is_empty() => problems.push(format!(
                                "{}: {:?} shares nothing with its distractor",
                                p.name, q.query
                            )),
                            Some(_) if *d == q.target => problems
                                .push(format!("{}: {:?}: distractor is target", p.name, q.query)),
                            Some(_) => {}
                        }
                    }
                    (Kind::Paraphrase, None) => {
                        problems.push(format!("{}: {:?} has no distractor", p.name, q.query))
                    }
                    (Kind::Control, _) if with_target.is_empty() => {
                        problems.push(format!("{}: control {:?} shares nothing", p.name, q.query))
                    }
                    (Kind::Control, _) => {}
                }
            }
        }
        if !problems.is_empty() {
            bail!("data/paraphrase.json:\n  {}", problems.join("\n  "));
        }
        Ok(corpus)
    }
}

/// The figures of one kind of query in one mode.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    queries: usize,
    at1: usize,
    at3: usize,
    rr5: f64,
    /// Queries with a distractor, and those whose distractor ranked above the target.
    distracted: (usize, usize),
    /// Queries dense order answers first by a clear margin, and those still first here.
    clear: (usize, usize),
}

impl Tally {
    fn add(&mut self, hits: &[Hit], target: RecordId, distractor: Option<RecordId>, clear: bool) {
        let rank = rank_of(hits, target);
        self.queries += 1;
        self.at1 += usize::from(rank == Some(1));
        self.at3 += usize::from(rank.is_some_and(|r| r <= 3));
        self.rr5 += rank.filter(|r| *r <= 5).map_or(0.0, |r| 1.0 / r as f64);
        if let Some(d) = distractor {
            self.distracted.0 += 1;
            let above = match (rank_of(hits, d), rank) {
                (Some(d), Some(t)) => d < t,
                (Some(_), None) => true,
                (None, _) => false,
            };
            self.distracted.1 += usize::from(above);
        }
        if clear {
            self.clear.0 += 1;
            self.clear.1 += usize::from(rank == Some(1));
        }
    }

    fn share(n: usize, of: usize) -> f64 {
        n as f64 / of.max(1) as f64
    }

    /// R@1.
    pub fn r1(&self) -> f64 {
        Self::share(self.at1, self.queries)
    }

    /// The share of queries whose distractor ranked above their target.
    pub fn distractor_above(&self) -> f64 {
        Self::share(self.distracted.1, self.distracted.0)
    }

    /// The share of dense order's clear firsts kept first.
    pub fn clear_kept(&self) -> f64 {
        Self::share(self.clear.1, self.clear.0)
    }

    fn row(&self, label: &str) -> String {
        let distracted = if self.distracted.0 > 0 {
            format!("{:.3}", self.distractor_above())
        } else {
            "—".to_owned()
        };
        let clear = if self.clear.0 > 0 {
            format!("{:.3} ({}/{})", self.clear_kept(), self.clear.1, self.clear.0)
        } else {
            "—".to_owned()
        };
        format!(
            "| {label} | {} | {:.3} | {:.3} | {:.3} | {distracted} | {clear} |",
            self.queries,
            self.r1(),
            Self::share(self.at3, self.queries),
            self.rr5 / self.queries.max(1) as f64,
        )
    }
}

/// The store orders measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// As the file lists them.
    File,
    /// A seeded shuffle of each scope.
    Shuffled,
    /// Every project's memories in one scope, in file order: a store of hundreds, which the
    /// ranking's pool ([`spine_service::rank::rerank_pool`]) no longer covers, where a
    /// question also meets other projects' owners, ports and deadlines.
    OneScope,
}

/// Stores the corpus in `order` into a fresh store and asks every question in both modes:
/// `(default, dense)` tallies of each kind.
pub fn measure(corpus: &Corpus, order: Order) -> Result<HashMap<Kind, (Tally, Tally)>> {
    let queries: usize = corpus.scopes.iter().map(|p| p.queries.len()).sum();
    let bench = Bench::new(Bench::model(queries + 16)?)?;
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut out: HashMap<Kind, (Tally, Tally)> = HashMap::new();
    let scope_of = |p: &Project| match order {
        Order::OneScope => "paraphrase:project:all".to_owned(),
        _ => format!("paraphrase:project:{}", p.name),
    };
    // Keys are unique within a project, not across them.
    let mut ids: HashMap<(&str, &str), RecordId> = HashMap::new();
    for p in &corpus.scopes {
        let mut notes: Vec<&Note> = p.memories.iter().collect();
        if order == Order::Shuffled {
            notes.shuffle(&mut rng);
        }
        for m in notes {
            let id = bench.store(&scope_of(p), &m.content, &m.tags, &m.category)?;
            ids.insert((&p.name, &m.key), id);
        }
    }
    for p in &corpus.scopes {
        let scope = scope_of(p);
        let id_of = |key: &str| ids[&(p.name.as_str(), key)];
        for q in &p.queries {
            let target = id_of(&q.target);
            let distractor = q.distractor.as_deref().map(id_of);
            let ask = |s: &Service| bench.search(s, &scope, &q.query, K);
            let dense = ask(&bench.dense)?;
            let clear = matches!(&dense[..], [(first, a), (_, b), ..]
                if *first == target && a - b >= CLEAR_MARGIN);
            let ranked = ask(&bench.ranked)?;
            let (r, d) = out.entry(q.kind).or_default();
            r.add(&ranked, target, distractor, clear);
            d.add(&dense, target, distractor, clear);
        }
    }
    Ok(out)
}

/// Runs `spine-bench eval paraphrase`.
pub fn run() -> Result<()> {
    let corpus = Corpus::load()?;
    let memories: usize = corpus.scopes.iter().map(|p| p.memories.len()).sum();
    let count =
        |k: Kind| corpus.scopes.iter().flat_map(|p| &p.queries).filter(|q| q.kind == k).count();
    println!(
        "Recall in small stores, questions in other words (data/paraphrase.json): {} scopes, \
         {memories} memories, {} paraphrase and {} control queries; search_memory k = {K}.\n",
        corpus.scopes.len(),
        count(Kind::Paraphrase),
        count(Kind::Control)
    );
    println!(
        "| store order, queries, mode | n | R@1 | R@3 | MRR@5 | distractor above | clear \
         leads kept (≥ {CLEAR_MARGIN} cosine) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let orders = [
        (Order::File, "file order".to_owned()),
        (Order::Shuffled, "shuffled".to_owned()),
        (Order::OneScope, format!("one scope of {memories}")),
    ];
    for (order, name) in orders {
        let tallies = measure(&corpus, order)?;
        for (kind, label) in [(Kind::Paraphrase, "paraphrase"), (Kind::Control, "control")] {
            if let Some((ranked, dense)) = tallies.get(&kind) {
                println!("{}", ranked.row(&format!("{name}, {label}, default")));
                println!("{}", dense.row(&format!("{name}, {label}, dense order")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_keeps_its_own_rules() {
        let corpus = Corpus::load().unwrap();
        assert!(corpus.scopes.len() >= 4);
        for p in &corpus.scopes {
            assert!(p.memories.len() >= 30, "{}", p.name);
            assert!(p.queries.iter().any(|q| q.kind == Kind::Control), "{}", p.name);
        }
    }
}
