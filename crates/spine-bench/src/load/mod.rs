//! A running server under load: `spine-bench load`.
//!
//! N MCP sessions against `spine serve` over streamable HTTP (a server at `--url`, or one
//! started here from `--binary` on a fresh data directory), each a task calling tools back to
//! back for S seconds, the way an agent's client calls them: JSON-RPC POSTed to `/mcp` by
//! hand (`initialize`, `notifications/initialized`, then `tools/call`), a reply read as JSON
//! or from the SSE stream, each session on its own kept-alive HTTP/1.1 connection. It
//! reports calls/s, records/s, each tool's latency percentiles and failures, the server's
//! CPU seconds, cores busy and peak RSS (from `/proc`, when the server's pid is known), and
//! this client's own CPU time, so a reader sees whether the client competed for the cores.
//! (Peak RSS is the server's since it started, which for `--url` may predate the run.) The
//! sessions are ended with DELETE afterwards.
//!
//! Key design decision: every `store_memory` is a document never stored before and every
//! `search_memory` a query never asked before (against `--url`, not in an earlier run
//! either: texts carry this run's start time), so the server embeds each one and its
//! query-embedding cache cannot answer; the figures are those of fresh agent calls. `mix`
//! weighs the tools like a working agent (search 30, store 15, get 20, list 20, update 10,
//! archive 5); `update_memory` sends the record's own content with new tags, so nothing is
//! embedded, and each record is archived at most once. `--corpus` picks the texts: Rust
//! code and its docstring sentences (the default), or Debian package descriptions and their
//! synopses (public prose, as issue 34 and the device kit measure).

use std::collections::BTreeMap;
use std::fmt::Display;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderMap, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::{corpus, percentile, status_mib};

mod server;
mod session;
pub(crate) mod soak;

use server::{cpu_seconds, listening_pid, start};
use session::{Session, drive, snippet};

const SCOPE: &str = "bench:project:load";
const PROTOCOL: &str = "2025-06-18";
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Corpus documents (and queries) cycled through, each use made unique by a counter (the
/// corpus makes about 2,500).
const DOCUMENTS: usize = 2000;
/// Records stored before the timed part (every mode): ids for get/update/archive, something
/// for a search to find, and the model loaded before the clock starts.
const SEED_RECORDS: usize = 20;
/// The errors kept to print.
const KEPT_ERRORS: usize = 3;

/// `spine-bench load`: a load generator for a running `spine serve`.
#[derive(Debug, Parser)]
#[command(name = "spine-bench load")]
struct Args {
    /// A running server's MCP endpoint (e.g. http://127.0.0.1:8080/mcp).
    #[arg(long, conflicts_with = "binary")]
    url: Option<Uri>,
    /// Start this `spine` binary on a fresh data directory and a free port [default:
    /// target/release/spine when --url is not given].
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Which calls to make.
    #[arg(long, value_enum, default_value_t = Mode::Mix)]
    mode: Mode,
    /// Which texts to store and search for.
    #[arg(long, value_enum, default_value_t = Texts::Code)]
    corpus: Texts,
    /// MCP sessions calling at once, each on its own connection.
    #[arg(long, default_value_t = 8)]
    sessions: usize,
    /// How long to call for.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Seed of the sessions' choices of tool and record.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON line instead of the table.
    #[arg(long)]
    json: bool,
    /// A new connection for every call instead of one kept alive per session (what a client
    /// without keep-alive meets; the two together show the cost of reusing a connection).
    #[arg(long)]
    fresh_connections: bool,
    /// With --binary: start a local OTLP/HTTP receiver that takes every export and keeps
    /// nothing, and point the server at it (OTEL_EXPORTER_OTLP_ENDPOINT): the cost of tracing
    /// on (docs/performance.md, "Tracing and audit overhead").
    #[arg(long, requires = "binary")]
    otlp_sink: bool,
    /// Extra `spine serve` arguments for --binary (e.g. -- --embed-precision f32).
    #[arg(last = true)]
    serve_args: Vec<String>,
}

/// The documents and queries of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Texts {
    /// 460 characters of Rust from crates' sources, with a docstring sentence of one of its
    /// functions as the query (`spine-bench corpus`; queries of 14 / 20 / 35 tokens at p10 /
    /// p50 / p95 with their "(case N)").
    Code,
    /// Debian package descriptions (200–2,000 bytes of English) with the package's synopsis
    /// as the query (`spine-bench eval prose`'s corpus; the public yardstick of issue 34 and
    /// of the device kit's `rawload.py`).
    Prose,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Every tool, weighted like a working agent.
    Mix,
    /// store_memory of new documents only.
    Store,
    /// search_memory of new queries only.
    Search,
    /// store_memory of a new document, then delete_memory of it, over and over: writes
    /// that leave the store's size as it was (the soak's writer storm).
    Churn,
}

/// The tools the load calls, in [`TOOLS`]' order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tool {
    Search,
    Store,
    Get,
    List,
    Update,
    Archive,
    Delete,
}

/// Each tool's MCP name and its weight in `mix`.
const TOOLS: [(Tool, &str, u32); 7] = [
    (Tool::Search, "search_memory", 30),
    (Tool::Store, "store_memory", 15),
    (Tool::Get, "get_memory", 20),
    (Tool::List, "list_memory", 20),
    (Tool::Update, "update_memory", 10),
    (Tool::Archive, "archive_memory", 5),
    (Tool::Delete, "delete_memory", 0),
];

impl Tool {
    fn name(self) -> &'static str {
        TOOLS[self as usize].1
    }
}

/// Outcomes per tool: successful calls' latencies in ms, and the failed calls.
type Tally = BTreeMap<Tool, (Vec<f64>, usize)>;

/// What the sessions share: the corpus, the counters that make documents and queries
/// unique, the records stored so far, and the outcomes.
struct Workload {
    mode: Mode,
    /// The most live records this workload keeps (`spine-bench soak --records`): beyond it
    /// each store is matched by a delete of the oldest. `None`: the store grows.
    cap: Option<usize>,
    corpus: Vec<(String, String)>,
    run: String,
    next_document: AtomicUsize,
    next_query: AtomicUsize,
    records: Mutex<Records>,
    /// The calls' outcomes, and the first [`KEPT_ERRORS`] errors.
    outcomes: Mutex<(Tally, Vec<String>)>,
}

/// Records this process stored. Invariants: `unarchived` holds indices into `stored` of
/// records not yet sent to archive_memory (nor deleted by churn), each once; the records
/// below `first_live` were deleted to hold the cap, oldest first (`unarchived` may still
/// name them: a pick drops such an entry when it draws it).
#[derive(Default)]
struct Records {
    /// (id, content) of each record stored.
    stored: Vec<(String, String)>,
    unarchived: Vec<usize>,
    first_live: usize,
}

impl Records {
    fn live(&self) -> usize {
        self.stored.len() - self.first_live
    }

    /// The oldest record a call may name: with a cap, the oldest fifth of the live records
    /// is left alone, so that no call in flight names a record the cap's delete removes
    /// under it (it would answer not found). Below the cap that fifth is never deleted.
    fn pickable_from(&self, cap: Option<usize>) -> usize {
        self.first_live + cap.map_or(0, |_| self.live() / 5)
    }

    /// A random unarchived record a call may name, taken out of `unarchived` when `take`;
    /// entries deleted by the cap are dropped as they are drawn.
    fn pick_unarchived(&mut self, rng: &mut StdRng, from: usize, take: bool) -> Option<usize> {
        for _ in 0..8 {
            if self.unarchived.is_empty() {
                return None;
            }
            let at = rng.random_range(0..self.unarchived.len());
            let i = self.unarchived[at];
            if i < self.first_live {
                self.unarchived.swap_remove(at);
            } else if i >= from {
                if take {
                    self.unarchived.swap_remove(at);
                }
                return Some(i);
            }
        }
        None
    }
}

impl Workload {
    /// `run` marks this run's documents and queries apart from an earlier run's on the same
    /// server; empty for a fresh server.
    fn new(mode: Mode, corpus: Vec<(String, String)>, run: String) -> Workload {
        let (next_document, next_query) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let (records, outcomes) = (Mutex::default(), Mutex::default());
        Workload { mode, cap: None, corpus, run, next_document, next_query, records, outcomes }
    }

    /// The same, keeping at most `cap` live records.
    fn capped(mut self, cap: usize) -> Workload {
        self.cap = Some(cap);
        self
    }

    /// The live records (stored and not deleted by the cap).
    fn live(&self) -> usize {
        self.records.lock().expect("no session panics holding the records").live()
    }

    fn document(&self) -> String {
        let i = self.next_document.fetch_add(1, Ordering::Relaxed);
        format!("{}\n(note {}{i})", self.corpus[i % self.corpus.len()].0, self.run)
    }

    fn query(&self) -> String {
        let i = self.next_query.fetch_add(1, Ordering::Relaxed);
        let q = &self.corpus[i % self.corpus.len()].1;
        if i < self.corpus.len() && self.run.is_empty() {
            q.clone()
        } else {
            format!("{q} (case {}{i})", self.run)
        }
    }

    /// The next call: a tool and its arguments. A tool that needs a stored record falls
    /// back to store_memory when there is none (for archive: none left unarchived). Over
    /// the cap, the next call deletes the oldest live record instead of drawing one.
    fn next_call(&self, rng: &mut StdRng) -> (Tool, Value) {
        let mut records = self.records.lock().expect("no session panics holding the records");
        let r = &mut *records;
        if self.cap.is_some_and(|cap| r.live() > cap) {
            let oldest = r.first_live;
            r.first_live += 1;
            return (Tool::Delete, json!({"id": r.stored[oldest].0}));
        }
        let tool = match self.mode {
            Mode::Store => Tool::Store,
            Mode::Search => Tool::Search,
            Mode::Mix => mix_pick(rng),
            Mode::Churn => Tool::Delete,
        };
        let from = r.pickable_from(self.cap);
        let args = match tool {
            Tool::Search => json!({"query": self.query(), "scope": SCOPE}),
            Tool::List => json!({"scope": SCOPE}),
            Tool::Get if from < r.stored.len() => {
                json!({"id": r.stored[rng.random_range(from..r.stored.len())].0})
            }
            Tool::Update => match r.pick_unarchived(rng, from, false) {
                Some(i) => {
                    let (id, content) = &r.stored[i];
                    let tag = format!("v{}", rng.random::<u32>());
                    json!({"id": id, "content": content, "tags": ["load", tag]})
                }
                None => return (Tool::Store, store_args(self.document())),
            },
            Tool::Archive => match r.pick_unarchived(rng, from, true) {
                Some(i) => json!({"ids": [r.stored[i].0]}),
                None => return (Tool::Store, store_args(self.document())),
            },
            Tool::Delete => match r.pick_unarchived(rng, from, true) {
                Some(i) => json!({"id": r.stored[i].0}),
                None => return (Tool::Store, store_args(self.document())),
            },
            _ => return (Tool::Store, store_args(self.document())),
        };
        (tool, args)
    }

    fn record(&self, tool: Tool, ms: f64, outcome: Result<()>) {
        let mut outcomes = self.outcomes.lock().expect("no session panics holding the outcomes");
        let (tally, errors) = &mut *outcomes;
        let (latencies, failed) = tally.entry(tool).or_default();
        match outcome {
            Ok(()) => latencies.push(ms),
            Err(e) => {
                *failed += 1;
                if errors.len() < KEPT_ERRORS {
                    errors.push(format!("{e:#}"));
                }
            }
        }
    }

    /// Notes a successful store_memory: its id from the result's structuredContent.
    fn stored(&self, args: &Value, result: &Value) -> Result<()> {
        let Some(id) = result.pointer("/structuredContent/id").and_then(Value::as_str) else {
            bail!("store_memory: no structuredContent.id in {}", snippet(&result.to_string()));
        };
        let content = args["content"].as_str().unwrap_or_default().to_owned();
        let mut r = self.records.lock().expect("no session panics holding the records");
        let next = r.stored.len();
        r.unarchived.push(next);
        r.stored.push((id.to_owned(), content));
        Ok(())
    }
}

/// A tool drawn by the `mix` weights of [`TOOLS`].
fn mix_pick(rng: &mut StdRng) -> Tool {
    let mut roll = rng.random_range(0..TOOLS.iter().map(|(.., w)| w).sum::<u32>());
    for (tool, _, weight) in TOOLS {
        if roll < weight {
            return tool;
        }
        roll -= weight;
    }
    unreachable!("roll is below the sum of the weights")
}

fn store_args(content: String) -> Value {
    json!({"content": content, "scope": SCOPE, "source": "agent-inferred", "category": "convention"})
}

/// `spine-bench load [flags] [-- serve args]`.
pub fn run(args: &[String]) -> Result<()> {
    let args = Args::parse_from(
        std::iter::once("spine-bench load".to_owned()).chain(args.iter().cloned()),
    );
    if !(args.seconds > 0.0 && args.seconds.is_finite()) || args.sessions == 0 {
        bail!("--seconds and --sessions must be positive");
    }
    let corpus = match args.corpus {
        Texts::Code => corpus::documents(DOCUMENTS)?,
        Texts::Prose => {
            crate::prose::pairs(DOCUMENTS)?.0.into_iter().map(|p| (p.code, p.query)).collect()
        }
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(measure(args, corpus))
}

async fn measure(args: Args, corpus: Vec<(String, String)>) -> Result<()> {
    let mut otlp: Option<Arc<AtomicUsize>> = None;
    let (server, url) = match (&args.url, &args.binary) {
        (Some(_), _) if !args.serve_args.is_empty() => bail!("-- serve arguments need --binary"),
        (Some(url), _) => (None, url.clone()),
        (None, binary) => {
            let binary = binary.clone().unwrap_or_else(|| "target/release/spine".into());
            let mut env = Vec::new();
            if args.otlp_sink {
                let (endpoint, received) = server::otlp_sink().await?;
                otlp = Some(received);
                env.push(("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), endpoint));
            }
            let (server, url) = start(&binary, &args.serve_args, &env).await?;
            (Some(server), url)
        }
    };
    let pid = match &server {
        Some(s) => Some(s.child.id()),
        None => listening_pid(url.port_u16().unwrap_or(80)),
    };
    // A server at --url may have seen an earlier run's texts (its query cache would answer).
    let run = match &server {
        Some(_) => String::new(),
        None => format!("{}-", SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis()),
    };
    let work = Arc::new(Workload::new(args.mode, corpus, run));
    let mut sessions = Vec::with_capacity(args.sessions);
    for i in 0..args.sessions {
        sessions.push(
            Session::open(&url, args.fresh_connections)
                .await
                .with_context(|| format!("session {i} at {url}"))?,
        );
    }
    // In every mode (as the device machine's rawload.py): records for get, update and
    // archive to read, for a search to find, and the model loaded before the clock starts.
    for _ in 0..SEED_RECORDS {
        let store = store_args(work.document());
        let result = sessions[0].call(Tool::Store, &store).await.context("seed records")?;
        work.stored(&store, &result).context("seed records")?;
    }

    let (server_cpu, client_cpu) = (pid.and_then(cpu_seconds), cpu_seconds("self"));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.seconds);
    let tasks: Vec<_> = (0..)
        .zip(sessions)
        .map(|(i, s)| tokio::spawn(drive(s, work.clone(), deadline, args.seed.wrapping_add(i))))
        .collect();
    let mut sessions = Vec::with_capacity(tasks.len());
    for task in tasks {
        sessions.push(task.await.context("a session task")?);
    }
    let secs = started.elapsed().as_secs_f64();
    let since = |before: Option<f64>, now: Option<f64>| Some(now? - before?);
    let server_cpu_s = since(server_cpu, pid.and_then(cpu_seconds));
    let client_cpu_s = since(client_cpu, cpu_seconds("self"));
    let server_peak_rss_mib = pid.and_then(|p| status_mib(p, "VmHWM:"));
    for session in sessions {
        session.close().await;
    }
    drop(server);
    let otlp_requests = otlp.map(|n| n.load(Ordering::Relaxed));

    let (tally, errors) = std::mem::take(&mut *work.outcomes.lock().expect("the sessions ended"));
    let mut tools = BTreeMap::new();
    for (tool, (mut ms, failed)) in tally {
        ms.sort_by(f64::total_cmp);
        let p = |q| (!ms.is_empty()).then(|| (percentile(&ms, q) * 10.0).round() / 10.0);
        let (p50, p95, p99) = (p(0.50), p(0.95), p(0.99));
        tools.insert(tool.name(), ToolSummary { n: ms.len(), failed, p50, p95, p99 });
    }
    let succeeded = |name| tools.get(name).map_or(0, |t: &ToolSummary| t.n) as f64;
    let summary = Summary {
        mode: format!("{:?}", args.mode).to_lowercase(),
        fresh_connections: args.fresh_connections,
        sessions: args.sessions,
        seconds: secs,
        calls_per_s: tools.values().map(|t| t.n as f64).sum::<f64>() / secs,
        records_per_s: succeeded(Tool::Store.name()) / secs,
        server_cpu_s,
        server_cores: server_cpu_s.map(|c| c / secs),
        server_peak_rss_mib,
        client_cpu_s,
        otlp_requests,
        errors,
        tools,
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        summary.print_table(&url, pid);
    }
    Ok(())
}

/// What a run measured; `--json` prints it as is.
#[derive(Serialize)]
struct Summary {
    mode: String,
    /// A new connection per call (else one kept alive per session).
    fresh_connections: bool,
    sessions: usize,
    /// Wall seconds from the first call to the last reply.
    seconds: f64,
    /// Successful calls of every tool.
    calls_per_s: f64,
    /// Successful store_memory calls.
    records_per_s: f64,
    tools: BTreeMap<&'static str, ToolSummary>,
    server_cpu_s: Option<f64>,
    /// Server CPU seconds per wall second.
    server_cores: Option<f64>,
    server_peak_rss_mib: Option<f64>,
    client_cpu_s: Option<f64>,
    /// With --otlp-sink: the export requests the receiver took.
    otlp_requests: Option<usize>,
    /// The first errors, at most [`KEPT_ERRORS`].
    errors: Vec<String>,
}

/// One tool's calls: successful (`n`, and their latency percentiles in ms) and failed.
#[derive(Serialize)]
struct ToolSummary {
    n: usize,
    failed: usize,
    p50: Option<f64>,
    p95: Option<f64>,
    p99: Option<f64>,
}

impl Summary {
    fn print_table(&self, url: &Uri, pid: Option<u32>) {
        let (mode, sessions, secs) = (&self.mode, self.sessions, self.seconds);
        let connections = if self.fresh_connections {
            "a new connection per call"
        } else {
            "kept-alive connections"
        };
        println!(
            "spine-bench load: mode {mode}, {sessions} sessions ({connections}), {secs:.1} s, {url}"
        );
        print!("{:.1} calls/s", self.calls_per_s);
        if self.records_per_s > 0.0 {
            print!(", {:.1} records/s stored", self.records_per_s);
        }
        println!(
            "\n\n{:<16}{:>8}{:>8}{:>9}{:>9}{:>9}",
            "tool", "calls", "failed", "p50 ms", "p95 ms", "p99 ms"
        );
        let ms = |p: Option<f64>| p.map_or("-".to_owned(), |p| format!("{p:.1}"));
        for (name, t) in &self.tools {
            let (n, failed, p50, p95, p99) = (t.n, t.failed, ms(t.p50), ms(t.p95), ms(t.p99));
            println!("{name:<16}{n:>8}{failed:>8}{p50:>9}{p95:>9}{p99:>9}");
        }
        println!();
        match (pid, self.server_cpu_s, self.server_cores) {
            (Some(pid), Some(cpu), Some(cores)) => println!(
                "server (pid {pid}): {cpu:.1} CPU s, {cores:.2} cores busy, peak RSS {}",
                self.server_peak_rss_mib.map_or("unknown".into(), |m| format!("{m:.0} MiB")),
            ),
            _ => println!("server: pid not found, no CPU or RSS figures"),
        }
        if let Some(cpu) = self.client_cpu_s {
            println!("client (this process): {cpu:.1} CPU s, {:.2} cores busy", cpu / secs);
        }
        if let Some(n) = self.otlp_requests {
            println!("OTLP receiver: {n} export requests taken");
        }
        for e in &self.errors {
            println!("error: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_is_code_unless_prose_is_asked_for() {
        let parse = |extra: &[&str]| {
            Args::parse_from(["spine-bench load"].iter().chain(extra).copied()).corpus
        };
        assert_eq!(parse(&[]), Texts::Code);
        assert_eq!(parse(&["--corpus", "prose"]), Texts::Prose);
        assert!(Args::try_parse_from(["spine-bench load", "--corpus", "poetry"]).is_err());
    }

    #[test]
    fn tools_table_is_in_enum_order() {
        for (i, (tool, ..)) in TOOLS.iter().enumerate() {
            assert_eq!(*tool as usize, i);
        }
        assert_eq!(Tool::Archive.name(), "archive_memory");
    }

    #[test]
    fn mix_weights_sum_to_100_and_every_tool_is_drawn() {
        assert_eq!(TOOLS.iter().map(|(.., w)| w).sum::<u32>(), 100);
        let mut rng = StdRng::seed_from_u64(7);
        let drawn: std::collections::BTreeSet<Tool> =
            (0..1000).map(|_| mix_pick(&mut rng)).collect();
        assert_eq!(drawn.len(), TOOLS.iter().filter(|(.., w)| *w > 0).count());
        assert!(!drawn.contains(&Tool::Delete), "the mix deletes nothing; churn does");
    }

    #[test]
    fn queries_never_repeat_within_a_run_or_across_runs() {
        let corpus = vec![("d".to_owned(), "q".to_owned()); 2];
        let work = Workload::new(Mode::Search, corpus.clone(), String::new());
        let queries: Vec<String> = (0..4).map(|_| work.query()).collect();
        assert_eq!(queries, ["q", "q", "q (case 2)", "q (case 3)"]);
        assert_eq!(work.document(), "d\n(note 0)");
        let again = Workload::new(Mode::Search, corpus, "7-".to_owned());
        assert_eq!(again.query(), "q (case 7-0)");
        assert_eq!(again.document(), "d\n(note 7-0)");
    }

    #[test]
    fn a_capped_workload_deletes_its_oldest_records_and_never_names_them_first() {
        let corpus = vec![("d".to_owned(), "q".to_owned())];
        let work = Workload::new(Mode::Mix, corpus, String::new()).capped(10);
        for i in 0..11 {
            let store = store_args(work.document());
            work.stored(&store, &json!({"structuredContent": {"id": format!("r{i}")}})).unwrap();
        }
        assert_eq!(work.live(), 11);
        let mut rng = StdRng::seed_from_u64(3);
        // Over the cap: the next call deletes the oldest record, whatever the mix draws.
        assert_eq!(work.next_call(&mut rng), (Tool::Delete, json!({"id": "r0"})));
        assert_eq!(work.live(), 10);
        // The oldest fifth of the live records (r1, r2) is never named: the cap deletes them
        // next, and a call in flight must not find its record gone.
        for _ in 0..2000 {
            let (tool, args) = work.next_call(&mut rng);
            let named = args.get("id").or_else(|| args["ids"].get(0));
            if let Some(id) = named.and_then(Value::as_str) {
                assert!(!["r0", "r1", "r2"].contains(&id), "{tool:?} named {id}");
            }
            assert_ne!(tool, Tool::Delete, "the mix itself deletes nothing");
            if tool == Tool::Store {
                break;
            }
        }
        // Without a cap every record may be named, and nothing is deleted.
        let free = Workload::new(Mode::Mix, vec![("d".into(), "q".into())], String::new());
        let store = store_args(free.document());
        free.stored(&store, &json!({"structuredContent": {"id": "only"}})).unwrap();
        let (_, args) =
            (0..).map(|_| free.next_call(&mut rng)).find(|(tool, _)| *tool == Tool::Get).unwrap();
        assert_eq!(args, json!({"id": "only"}));
    }

    #[test]
    fn the_listening_socket_leads_to_this_process() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(listening_pid(port), Some(std::process::id()));
        assert!(cpu_seconds("self").is_some());
        assert!(status_mib(std::process::id(), "VmHWM:").is_some_and(|m| m > 0.0));
    }
}
