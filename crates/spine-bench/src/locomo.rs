//! `spine-bench locomo`: recall on LoCoMo, the public long-conversation memory benchmark.
//!
//! ```text
//! cargo run --release -p spine-bench -- locomo --data locomo10.json
//! cargo run --release -p spine-bench -- locomo --data locomo10.json --mode observations
//! cargo run --release -p spine-bench -- locomo --data locomo10.json --conversations 6-10
//! ```
//!
//! # The dataset
//!
//! LoCoMo (Maharana et al. 2024, "Evaluating Very Long-Term Conversational Memory of LLM
//! Agents"; `data/locomo10.json` of the public snap-research/LoCoMo repository) holds 10
//! conversations between two people over up to 35 dated sessions: 5,882 dialog turns,
//! 2,541 observations (facts extracted from the turns, each naming the turn it came from)
//! and 1,986 questions, each with the dialog ids (`D3:12`) of the turns that answer it. It is
//! licensed CC BY-NC 4.0, so it is read from a path and never copied into this repository.
//!
//! # Method
//!
//! The service is driven in-process the way an agent drives it over MCP: one scope per
//! conversation, every turn (or observation) stored through `store_memory` in the order it
//! was said, and every question asked through `search_memory` with `k` = 10 and default
//! settings. What is stored:
//! - `turns`: `"{speaker} ({session date}): {text}"`, and `" [shares a photo: {caption}]"`
//!   when the turn shared an image (the dataset's caption of it);
//! - `observations`: `"({session date}) {observation}"`.
//!
//! A question is scored by where its evidence ranks among the dialog ids of the records
//! returned (an observation carries the ids of the turns it came from; several records may
//! carry one id, which counts once, at its best rank):
//! - R@k: the share of its evidence ids among the first k results;
//! - MRR: 1 / the rank of the first result that carries an evidence id (0 past k = 10);
//! - any@k / all@k: at least one / every evidence id among the first k;
//! - the bound: the same figures if every evidence id that some stored record names were
//!   found (printed when below 1: a fifth of the evidence is named by no observation).
//!
//! Evidence ids are read leniently, as the dataset spells a few of them: `"D8:6; D9:17"` and
//! `"D9:1 D4:4"` are several ids, `D:11:26` is `D11:26`, `D30:05` is `D30:5`. A question none
//! of whose ids names a turn of its conversation (5 of 1,986) is left out and counted.
//! Category 5 questions are adversarial (their answer is not in the conversation, though
//! their evidence still names turns); the any/all columns of the summary line cover
//! categories 1–4, as peers report them.
//!
//! `--store DIR` keeps the store (and which record carries which dialog id) in DIR, so a
//! second run searches without storing again; without it the store lives in a temporary
//! directory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use spine_core::{Caller, Limits, SystemClock};
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::SqliteStore;

/// Results asked of each search.
const K: usize = 10;

/// What each record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Turns,
    Observations,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Turns => "turns",
            Mode::Observations => "observations",
        }
    }
}

/// The command line of `spine-bench locomo`.
struct Options {
    data: PathBuf,
    mode: Mode,
    /// 1-based conversation numbers, in file order.
    conversations: Vec<usize>,
    store: Option<PathBuf>,
    json: bool,
}

const USAGE: &str = "usage: spine-bench locomo --data PATH/locomo10.json [--mode turns|observations] \
     [--conversations 1-5|6-10|all|N|N-M] [--store DIR] [--json]";

fn parse_options(args: &[String]) -> Result<Options> {
    let mut data = None;
    let mut mode = Mode::Turns;
    let mut conversations = "all".to_owned();
    let mut store = None;
    let mut json = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value =
            |name: &str| it.next().cloned().ok_or_else(|| anyhow!("{name} needs a value\n{USAGE}"));
        match a.as_str() {
            "--data" => data = Some(PathBuf::from(value("--data")?)),
            "--mode" => {
                mode = match value("--mode")?.as_str() {
                    "turns" => Mode::Turns,
                    "observations" => Mode::Observations,
                    m => bail!("--mode is turns or observations, not {m:?}\n{USAGE}"),
                }
            }
            "--conversations" => conversations = value("--conversations")?,
            "--store" => store = Some(PathBuf::from(value("--store")?)),
            "--json" => json = true,
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let data = data.ok_or_else(|| {
        anyhow!(
            "--data is required: the path of data/locomo10.json from the public \
             snap-research/LoCoMo repository (CC BY-NC 4.0, not shipped with Spine)\n{USAGE}"
        )
    })?;
    Ok(Options { data, mode, conversations: parse_range(&conversations)?, store, json })
}

/// `all`, `N` or `N-M` (1-based, inclusive) as conversation numbers.
fn parse_range(s: &str) -> Result<Vec<usize>> {
    if s == "all" {
        return Ok((1..=10).collect());
    }
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let n = |x: &str| x.trim().parse::<usize>().ok().filter(|n| *n >= 1);
    match (n(a), n(b)) {
        (Some(a), Some(b)) if a <= b => Ok((a..=b).collect()),
        _ => bail!("--conversations is all, N or N-M with 1 <= N <= M, not {s:?}"),
    }
}

/// One conversation as the benchmark uses it.
struct Conversation {
    sample_id: String,
    /// `(dialog ids, content)` in the order said.
    records: Vec<(Vec<String>, String)>,
    /// Every dialog id of a turn.
    turn_ids: HashSet<String>,
    questions: Vec<Question>,
}

struct Question {
    text: String,
    category: u64,
    /// Evidence ids that name a turn of the conversation, deduplicated.
    evidence: Vec<String>,
}

/// `D:11:26` → `D11:26`, `D30:05` → `D30:5`; `None` when it is not a dialog id at all.
fn normalise_id(raw: &str) -> Option<String> {
    let rest = raw.trim().strip_prefix('D')?.trim_start_matches(':');
    let (session, turn) = rest.split_once(':')?;
    let session: u32 = session.parse().ok()?;
    let turn: u32 = turn.parse().ok()?;
    Some(format!("D{session}:{turn}"))
}

/// The session number of a key `session_N` (not `session_N_date_time`).
fn session_number(key: &str) -> Option<u32> {
    key.strip_prefix("session_")?.parse().ok()
}

fn load(path: &Path, mode: Mode) -> Result<Vec<Conversation>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {} (LoCoMo's data/locomo10.json)", path.display()))?;
    let samples: Vec<Value> = serde_json::from_str(&text).context("parsing the LoCoMo file")?;
    let mut out = Vec::new();
    for s in &samples {
        let sample_id = s["sample_id"].as_str().unwrap_or("?").to_owned();
        let conv = s["conversation"].as_object().context("a sample without `conversation`")?;
        let mut sessions: Vec<(u32, &Vec<Value>)> =
            conv.iter().filter_map(|(k, v)| Some((session_number(k)?, v.as_array()?))).collect();
        sessions.sort_by_key(|(n, _)| *n);
        let date = |n: u32| {
            conv.get(&format!("session_{n}_date_time")).and_then(Value::as_str).unwrap_or("")
        };
        let mut turn_ids = HashSet::new();
        let mut records = Vec::new();
        for (n, turns) in &sessions {
            for t in *turns {
                let Some(id) = t["dia_id"].as_str().and_then(normalise_id) else { continue };
                turn_ids.insert(id.clone());
                if mode == Mode::Turns {
                    let mut content = format!(
                        "{} ({}): {}",
                        t["speaker"].as_str().unwrap_or("?"),
                        date(*n),
                        t["text"].as_str().unwrap_or("")
                    );
                    if let Some(c) = t["blip_caption"].as_str() {
                        content.push_str(&format!(" [shares a photo: {c}]"));
                    }
                    records.push((vec![id], content));
                }
            }
        }
        if mode == Mode::Observations {
            let obs = s["observation"].as_object().context("a sample without `observation`")?;
            let mut by_session: Vec<(u32, &serde_json::Map<String, Value>)> = obs
                .iter()
                .filter_map(|(k, v)| {
                    let n = k.strip_prefix("session_")?.strip_suffix("_observation")?;
                    Some((n.parse().ok()?, v.as_object()?))
                })
                .collect();
            by_session.sort_by_key(|(n, _)| *n);
            for (n, speakers) in by_session {
                for facts in speakers.values() {
                    for f in facts.as_array().into_iter().flatten() {
                        let text = f[0].as_str().unwrap_or("");
                        let ids: Vec<String> = match &f[1] {
                            Value::String(s) => normalise_id(s).into_iter().collect(),
                            Value::Array(a) => {
                                a.iter().filter_map(|v| v.as_str().and_then(normalise_id)).collect()
                            }
                            _ => vec![],
                        };
                        if !text.trim().is_empty() {
                            records.push((ids, format!("({}) {text}", date(n))));
                        }
                    }
                }
            }
        }
        let questions = s["qa"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|q| {
                let mut evidence: Vec<String> = Vec::new();
                for e in q["evidence"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                    for part in e.split([';', ' ', ',']).filter(|p| !p.is_empty()) {
                        if let Some(id) = normalise_id(part)
                            && turn_ids.contains(&id)
                            && !evidence.contains(&id)
                        {
                            evidence.push(id);
                        }
                    }
                }
                Question {
                    text: q["question"].as_str().unwrap_or("").to_owned(),
                    category: q["category"].as_u64().unwrap_or(0),
                    evidence,
                }
            })
            .collect();
        out.push(Conversation { sample_id, records, turn_ids, questions });
    }
    Ok(out)
}

/// Sums of one group of questions.
#[derive(Default, Clone, Copy)]
struct Tally {
    questions: usize,
    r5: f64,
    r10: f64,
    rr: f64,
    any5: usize,
    all5: usize,
    any10: usize,
    all10: usize,
    /// The share of each question's evidence that some stored record names (summed), and
    /// the questions with at least one such id: what R@k and MRR / any@k could reach.
    reachable: f64,
    any_reachable: usize,
}

impl Tally {
    /// Adds a question whose results carry `ranked` dialog ids (one set per result);
    /// `named`: every dialog id that a record of its conversation names.
    fn add(&mut self, evidence: &[String], ranked: &[HashSet<String>], named: &HashSet<String>) {
        let found = |k: usize| {
            evidence.iter().filter(|e| ranked.iter().take(k).any(|ids| ids.contains(*e))).count()
        };
        let n = evidence.len();
        let (f5, f10) = (found(5), found(10));
        self.questions += 1;
        self.r5 += f5 as f64 / n as f64;
        self.r10 += f10 as f64 / n as f64;
        if let Some(p) =
            ranked.iter().take(K).position(|ids| evidence.iter().any(|e| ids.contains(e)))
        {
            self.rr += 1.0 / (p + 1) as f64;
        }
        self.any5 += usize::from(f5 > 0);
        self.all5 += usize::from(f5 == n);
        self.any10 += usize::from(f10 > 0);
        self.all10 += usize::from(f10 == n);
        let reachable = evidence.iter().filter(|e| named.contains(*e)).count();
        self.reachable += reachable as f64 / n as f64;
        self.any_reachable += usize::from(reachable > 0);
    }

    fn merge(&mut self, o: &Tally) {
        self.questions += o.questions;
        self.r5 += o.r5;
        self.r10 += o.r10;
        self.rr += o.rr;
        self.any5 += o.any5;
        self.all5 += o.all5;
        self.any10 += o.any10;
        self.all10 += o.all10;
        self.reachable += o.reachable;
        self.any_reachable += o.any_reachable;
    }

    fn figures(&self) -> Value {
        let q = self.questions.max(1) as f64;
        let r = |x: f64| (x / q * 1000.0).round() / 1000.0;
        json!({
            "questions": self.questions,
            "r5": r(self.r5), "r10": r(self.r10), "mrr": r(self.rr),
            "any5": r(self.any5 as f64), "all5": r(self.all5 as f64),
            "any10": r(self.any10 as f64), "all10": r(self.all10 as f64),
            "reachable": r(self.reachable), "any_reachable": r(self.any_reachable as f64),
        })
    }
}

/// The category names LoCoMo's paper gives.
fn category_name(c: u64) -> &'static str {
    match c {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        5 => "adversarial",
        _ => "other",
    }
}

/// A tool's arguments from their JSON, as the MCP layer parses them.
fn call<T: serde::de::DeserializeOwned + schemars::JsonSchema>(args: &Value) -> Result<T> {
    parse_args(args.as_object().cloned().unwrap_or_default()).map_err(|e| anyhow!("{e}"))
}

/// Which dialog ids each stored record carries, kept beside a reused store.
type IdMap = HashMap<String, Vec<String>>;

fn map_path(dir: &Path, mode: Mode) -> PathBuf {
    dir.join(format!("locomo-{}.json", mode.name()))
}

/// Runs `spine-bench locomo` with `args` (after the subcommand).
pub fn run(args: &[String]) -> Result<()> {
    let o = parse_options(args)?;
    let all = load(&o.data, o.mode)?;
    let mut picked = Vec::new();
    for &n in &o.conversations {
        let c = all.get(n - 1).ok_or_else(|| {
            anyhow!("--conversations {n}: the file holds {} conversations", all.len())
        })?;
        picked.push((n, c));
    }

    let temp;
    let dir = match &o.store {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_owned()
        }
    };
    let store = Arc::new(SqliteStore::open(&dir)?);
    let embedder = Arc::new(super::model()?);
    let service = Service::new(store, embedder, Arc::new(SystemClock), Limits::default());
    let caller = Caller::anonymous();

    // 1. Store what is not stored yet, one store_memory per record.
    let mut ids: IdMap = std::fs::read(map_path(&dir, o.mode))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let scope_of = |c: &Conversation| format!("locomo:{}:{}", o.mode.name(), c.sample_id);
    let t = Instant::now();
    let (mut stored, mut refused) = (0usize, 0usize);
    for (_, c) in &picked {
        let scope = scope_of(c);
        if ids.contains_key(&format!("{scope}#done")) {
            continue;
        }
        for (i, (dia, content)) in c.records.iter().enumerate() {
            let a = call(&json!({"content": content, "scope": scope, "source": "user-said",
                                "category": "preference"}))?;
            match service.store_memory(&caller, a) {
                Ok(s) => {
                    ids.entry(s.id.to_string()).or_default().extend(dia.iter().cloned());
                    stored += 1;
                }
                Err(e) => {
                    refused += 1;
                    eprintln!("\n{}: record {i} refused: {e}", c.sample_id);
                }
            }
            if i % 50 == 0 {
                eprint!("\rstoring {}: {i}/{}", c.sample_id, c.records.len());
            }
        }
        ids.insert(format!("{scope}#done"), vec![]);
        if o.store.is_some() {
            std::fs::write(map_path(&dir, o.mode), serde_json::to_vec(&ids)?)?;
        }
    }
    let store_secs = t.elapsed().as_secs_f64();
    if stored > 0 {
        eprintln!(
            "\rstored {stored} records in {store_secs:.1} s ({:.1}/s){}",
            stored as f64 / store_secs,
            if refused > 0 { format!(", {refused} refused") } else { String::new() }
        );
    }

    // 2. Ask every question.
    let mut by_category: BTreeMap<u64, Tally> = BTreeMap::new();
    let mut latencies = Vec::new();
    let (mut chars, mut skipped) = (0usize, 0usize);
    let t = Instant::now();
    for (_, c) in &picked {
        let scope = scope_of(c);
        let named: HashSet<String> = c.records.iter().flat_map(|(dia, _)| dia.clone()).collect();
        for (i, q) in c.questions.iter().enumerate() {
            if q.evidence.is_empty() || q.text.trim().is_empty() {
                skipped += 1;
                continue;
            }
            let a = call(&json!({"query": q.text, "scope": scope, "k": K}))?;
            let started = Instant::now();
            let r = service.search_memory(&caller, a).map_err(|e| anyhow!("{}: {e}", q.text))?;
            latencies.push(started.elapsed().as_secs_f64() * 1e3);
            let ranked: Vec<HashSet<String>> = r
                .memories
                .iter()
                .map(|m| {
                    chars += m.content.as_deref().map_or(0, |s| s.chars().count())
                        + m.summary.as_deref().map_or(0, |s| s.chars().count());
                    ids.get(&m.id.to_string()).into_iter().flatten().cloned().collect()
                })
                .collect();
            by_category.entry(q.category).or_default().add(&q.evidence, &ranked, &named);
            if i % 50 == 0 {
                eprint!("\rasking {}: {i}/{}", c.sample_id, c.questions.len());
            }
        }
    }
    eprintln!("\r{:60}", "");
    let search_secs = t.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        if latencies.is_empty() { 0.0 } else { super::percentile(&latencies, p) }
    };

    let mut overall = Tally::default();
    let mut answerable = Tally::default();
    for (cat, t) in &by_category {
        overall.merge(t);
        if (1..=4).contains(cat) {
            answerable.merge(t);
        }
    }
    let records: usize = picked.iter().map(|(_, c)| c.records.len()).sum();
    let turns: usize = picked.iter().map(|(_, c)| c.turn_ids.len()).sum();
    let numbers: Vec<String> = picked.iter().map(|(n, _)| n.to_string()).collect();
    let report = json!({
        "mode": o.mode.name(),
        "conversations": numbers,
        "records": records,
        "turns": turns,
        "k": K,
        "overall": overall.figures(),
        "categories_1_4": answerable.figures(),
        "by_category": by_category.iter().map(|(c, t)| {
            let mut f = t.figures();
            f["category"] = json!(c);
            f["name"] = json!(category_name(*c));
            f
        }).collect::<Vec<_>>(),
        "skipped_questions": skipped,
        "search_ms": {"p50": pct(0.5), "p95": pct(0.95), "p99": pct(0.99)},
        "chars_per_question": chars as f64 / overall.questions.max(1) as f64,
        "store_secs": store_secs,
        "search_secs": search_secs,
    });
    if o.json {
        println!("{report}");
        return Ok(());
    }
    println!(
        "LoCoMo, {} of conversations {} ({} records, {} turns); search_memory k = {K}, default \
         settings\n",
        o.mode.name(),
        numbers.join(","),
        records,
        turns
    );
    println!("| questions | n | R@5 | R@10 | MRR | any@5 | all@5 | any@10 | all@10 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let row = |label: String, f: &Value| {
        let x = |k: &str| f[k].as_f64().unwrap_or(0.0);
        println!(
            "| {label} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            f["questions"],
            x("r5"),
            x("r10"),
            x("mrr"),
            x("any5"),
            x("all5"),
            x("any10"),
            x("all10")
        );
    };
    for (c, t) in &by_category {
        row(format!("{c} {}", category_name(*c)), &t.figures());
    }
    row("categories 1–4".into(), &answerable.figures());
    row("**all**".into(), &overall.figures());
    println!(
        "\nsearch_memory (query embedding included): p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms; \
         {:.0} characters returned per question; {skipped} questions without a usable \
         evidence id left out",
        pct(0.5),
        pct(0.95),
        pct(0.99),
        chars as f64 / overall.questions.max(1) as f64
    );
    let all = &report["overall"];
    let (r, a) =
        (all["reachable"].as_f64().unwrap_or(1.0), all["any_reachable"].as_f64().unwrap_or(1.0));
    if r < 1.0 || a < 1.0 {
        println!(
            "Some evidence ids are named by no stored record: R@k can reach at most {r:.3}, \
             MRR and any@k at most {a:.3}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
