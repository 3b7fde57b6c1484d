//! `spine summarize-missing`: fills the summary of records that have none (SPEC "Operator
//! commands"), in place, with summary_source=auto.
//!
//! - The summarizer is named by `SPINE_SUMMARY_MODEL`: `builtin:extractive` (offline,
//!   [`extractive`]) or a chat model on an OpenAI-compatible server at `SPINE_SUMMARY_URL`
//!   ([`chat`]).
//! - Records are taken oldest first; each summary is written by its own conditional update
//!   (`SqliteStore::set_auto_summary`): only while the record still has no summary and
//!   still has the content that was summarized. A client summary is never touched, a
//!   concurrent `update_memory` always wins, and a stop (Ctrl-C, `--timeout`) between two
//!   records leaves each one either summarized or untouched.
//! - The summarizer runs on its own thread, so a stop does not wait for a slow answer: the
//!   answer is abandoned and nothing is written for that record.

mod chat;
mod extractive;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Args;
use serde::Serialize;
use spine_core::{Clock, RecordId, SystemClock, Timestamp};
use spine_ops::Progress as _;
use spine_store::{AutoSummary, MissingSummaries, SqliteStore, SummaryStore};

pub use crate::ops::stop::Stop;
use crate::ops::stop::Stopped;

use super::{OutputArgs, Progress, ScopeArgs, count, parse_duration};

/// Bounds of `SPINE_SUMMARY_MAX_CHARS`: shorter is not a summary, longer is not short.
const MAX_CHARS_RANGE: std::ops::RangeInclusive<usize> = 20..=4096;
/// Records read per page.
const PAGE: usize = 64;
/// Consecutive failed records after which the run stops: the provider is failing, not
/// the records.
const MAX_FAILURES_IN_A_ROW: u32 = 10;
/// Failures listed in the report (all are counted).
const MAX_FAILURES_LISTED: usize = 100;

/// `spine summarize-missing` flags (SPEC "summarize-missing flags").
#[derive(Debug, Clone, Args)]
pub struct SummarizeArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Only records created at least this long ago, e.g. 7d (0 = any age).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    pub older_than: Duration,
    /// Most records to work through in this run (0 = no cap).
    #[arg(long, default_value_t = 0)]
    pub limit: u64,
    /// Count the records without a summary; write nothing and send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Stop after this long (between two records), e.g. 30m, 2h (0 = no limit).
    #[arg(long, value_parser = parse_duration, default_value = "30m")]
    pub timeout: Duration,
    #[command(flatten)]
    pub summary: SummaryArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Which summarizer writes the summaries, each setting a flag or its `SPINE_SUMMARY_*`
/// variable.
#[derive(Debug, Clone, Args)]
pub struct SummaryArgs {
    /// `builtin:extractive` (offline) or the name of a chat model served at --summary-url;
    /// stored as each summary's summary_model. Required.
    #[arg(long, env = "SPINE_SUMMARY_MODEL")]
    pub summary_model: Option<String>,
    /// Longest auto summary, in characters (20 to 4096; SPEC Limits: 280).
    #[arg(long, env = "SPINE_SUMMARY_MAX_CHARS", default_value = "280", value_parser = summary_max_chars)]
    pub summary_max_chars: usize,
    /// Base URL of the OpenAI-compatible server serving --summary-model (e.g.
    /// http://localhost:11434 for Ollama).
    #[arg(long, env = "SPINE_SUMMARY_URL")]
    pub summary_url: Option<String>,
    /// Bearer key for the summary server.
    #[arg(long, env = "SPINE_SUMMARY_API_KEY", hide_env_values = true)]
    pub summary_api_key: Option<String>,
    /// Longest one summary request may take, e.g. 90s or 5m [default: 2m].
    #[arg(long, env = "SPINE_SUMMARY_REQUEST_TIMEOUT", value_parser = summary_request_timeout)]
    pub summary_request_timeout: Option<Duration>,
}

fn summary_max_chars(v: &str) -> std::result::Result<usize, String> {
    v.trim().parse::<usize>().ok().filter(|n| MAX_CHARS_RANGE.contains(n)).ok_or_else(|| {
        format!(
            "must be a whole number from {} to {} (characters)",
            MAX_CHARS_RANGE.start(),
            MAX_CHARS_RANGE.end()
        )
    })
}

fn summary_request_timeout(v: &str) -> std::result::Result<Duration, String> {
    parse_duration(v.trim())
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| "must be a duration above zero, such as 90s or 5m".to_owned())
}

/// The summarizer settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `SPINE_SUMMARY_MODEL`, stored as summary_model.
    pub model: String,
    /// `SPINE_SUMMARY_MAX_CHARS`.
    pub max_chars: usize,
    /// Where summaries come from.
    pub provider: Provider,
}

/// Where summaries come from.
#[derive(Debug, Clone)]
pub enum Provider {
    /// `builtin:extractive`.
    Extractive,
    /// An OpenAI-compatible chat-completions server.
    Chat(chat::ChatConfig),
}

impl Settings {
    /// Checks the summarizer flags together: a model is required, and a chat model needs a
    /// server URL.
    pub fn new(a: &SummaryArgs) -> Result<Self> {
        fn set(v: &Option<String>) -> Option<String> {
            v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
        }
        // SPEC Errors 9: summarize-missing errors when the model is unset.
        let Some(model) = set(&a.summary_model) else {
            bail!(
                "--summary-model (SPINE_SUMMARY_MODEL) is not set: name the summarizer, either \
                 `{}` (built in, offline) or a chat model served by an OpenAI-compatible server \
                 at --summary-url (e.g. SPINE_SUMMARY_MODEL=llama3.2 \
                 SPINE_SUMMARY_URL=http://localhost:11434 for Ollama)",
                extractive::MODEL
            );
        };
        let max_chars = a.summary_max_chars;
        if model == extractive::MODEL {
            return Ok(Settings { model, max_chars, provider: Provider::Extractive });
        }
        if model.starts_with("builtin:") {
            bail!(
                "--summary-model {model}: there is no such built-in summarizer; the built-in \
                 one is `{}`",
                extractive::MODEL
            );
        }
        let Some(url) = set(&a.summary_url) else {
            bail!(
                "--summary-model {model} is a chat model, so --summary-url (SPINE_SUMMARY_URL) \
                 must name the OpenAI-compatible server that serves it (e.g. \
                 http://localhost:11434 for Ollama, http://localhost:8000 for vLLM, \
                 https://api.openai.com); or use `{}` offline",
                extractive::MODEL
            );
        };
        chat::check_url(&url)?;
        let mut config = chat::ChatConfig {
            api_key: set(&a.summary_api_key).and_then(spine_embed::http::ApiKey::new),
            max_chars,
            ..chat::ChatConfig::new(url, model.clone())
        };
        if let Some(t) = a.summary_request_timeout {
            config.timeout = t;
        }
        Ok(Settings { model, max_chars, provider: Provider::Chat(config) })
    }
}

/// A summary as a summarizer produced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Cleaned, non-empty and within the length bound.
    pub text: String,
    /// When the content was sent out of the process (`None` for the built-in summarizer).
    pub egress_at: Option<Timestamp>,
}

/// Why a record got no summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// This record only (an empty answer, a note the model refused): the run goes on.
    Record(String),
    /// The provider is unusable (unreachable, authentication, unknown model): the run stops.
    Provider(String),
}

/// Turns a record's content into a summary. Blocking; `Send + Sync` so it can run on the
/// summarizer thread.
pub trait Summarizer: Send + Sync {
    /// The model name stored as summary_model.
    fn model(&self) -> &str;
    /// The summary of `content`.
    fn summarize(&self, content: &str) -> Result<Summary, Failure>;
}

/// The built-in extractive summarizer.
struct Extractive {
    max_chars: usize,
}

impl Summarizer for Extractive {
    fn model(&self) -> &str {
        extractive::MODEL
    }

    fn summarize(&self, content: &str) -> Result<Summary, Failure> {
        let lead = extractive::summarize(content, self.max_chars);
        let text = finish(&lead, self.max_chars)
            .ok_or_else(|| Failure::Record("the content has no text to summarize".into()))?;
        // The content never left the process: no egress stamp (SPEC: zero if never sent).
        Ok(Summary { text, egress_at: None })
    }
}

/// A summarizer's answer as stored: a reasoning model's leading `<think>…</think>` block
/// dropped, whitespace collapsed to single spaces, a `Summary:` label and one pair of
/// enclosing quotes removed, then bounded to `max_chars`. `None` when nothing is left.
pub fn finish(answer: &str, max_chars: usize) -> Option<String> {
    let mut s = answer.trim();
    if let Some(rest) = s.strip_prefix("<think>") {
        s = rest.split_once("</think>").map_or("", |(_, after)| after);
    }
    let mut s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    for label in ["summary:", "**summary:**", "summary -"] {
        if s.len() >= label.len()
            && s.is_char_boundary(label.len())
            && s[..label.len()].eq_ignore_ascii_case(label)
        {
            s = s[label.len()..].trim_start().to_owned();
        }
    }
    for (open, close) in [('"', '"'), ('“', '”'), ('\'', '\''), ('`', '`')] {
        if s.chars().count() >= 2 && s.starts_with(open) && s.ends_with(close) {
            let inner = &s[open.len_utf8()..s.len() - close.len_utf8()];
            if !inner.contains(open) && !inner.contains(close) {
                s = inner.trim().to_owned();
            }
            break;
        }
    }
    let s = bound_chars(&s, max_chars);
    (!s.is_empty()).then_some(s)
}

/// `text` in at most `max_chars` characters (Unicode scalar values): unchanged when it
/// fits, else cut on the last word boundary in the budget (or mid-word when the last one is
/// less than half way) and ended with `…`, counted in the bound. SPEC Limits: auto summary
/// length.
pub fn bound_chars(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    if max_chars == 0 {
        return String::new();
    }
    let budget = max_chars.saturating_sub(1);
    let cut_at = text.char_indices().nth(budget).map_or(text.len(), |(i, _)| i);
    let cut = &text[..cut_at];
    let at_boundary = text[cut_at..].starts_with(char::is_whitespace);
    let kept = match cut.rfind(char::is_whitespace) {
        _ if at_boundary => cut,
        Some(i) if cut[..i].chars().count() >= budget / 2 => &cut[..i],
        _ => cut,
    };
    let kept = kept.trim_end_matches(|c: char| c.is_whitespace() || ",;:-–—(".contains(c));
    format!("{kept}…")
}

/// `text` cut (as [`bound_chars`] cuts) until it takes at most `max_bytes` bytes of UTF-8:
/// `SPINE_SUMMARY_MAX_CHARS` counts characters, and 280 CJK characters are ~840 bytes, more
/// than a client may write (`SPINE_MEMORY_MAX_SUMMARY_BYTES`, 512 by default).
pub fn bound_bytes(text: &str, max_bytes: usize) -> String {
    let mut chars = text.chars().count();
    let mut s = text.to_owned();
    while s.len() > max_bytes && chars > 0 {
        chars -= 1;
        s = bound_chars(text, chars);
    }
    s
}

/// One record that got no summary.
#[derive(Debug, Clone, Serialize)]
pub struct FailedRecord {
    /// Record id.
    pub id: String,
    /// Why.
    pub error: String,
}

/// What a run did: printed as text, or as one JSON document with `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `SPINE_SUMMARY_MODEL`.
    pub model: String,
    /// The chat-completions URL content is sent to; `null` for the built-in summarizer.
    pub endpoint: Option<String>,
    /// The scope swept; `null` for every scope.
    pub scope: Option<String>,
    /// `--older-than` as a duration (e.g. `7days`); `null` for any age.
    pub older_than: Option<String>,
    /// Only records created at or before this instant were considered: the start of the
    /// run, less `--older-than`.
    pub created_at_or_before: String,
    /// True when nothing was written (`--dry-run`).
    pub dry_run: bool,
    /// Records without a summary at the start, in the scope and age range.
    pub eligible: u64,
    /// Of those, how many this run works through (`--limit`).
    pub selected: u64,
    /// Records summarized and written.
    pub summarized: u64,
    /// Records left alone because they were edited, summarized or deleted by someone else
    /// while their summary was being made.
    pub changed_meanwhile: u64,
    /// Records the summarizer failed on (nothing written for them).
    pub failed: u64,
    /// The failures, at most 100.
    pub failures: Vec<FailedRecord>,
    /// Selected records this run did not reach (stopped early); untouched.
    pub not_reached: u64,
    /// `timeout` or `interrupted` when the run stopped early; `null` otherwise.
    pub stopped: Option<&'static str>,
    /// The error that ended the run early, if any.
    pub error: Option<String>,
    /// Wall-clock seconds.
    pub seconds: f64,
    #[serde(skip)]
    exit_code: i32,
}

impl Report {
    /// The exit status: 0 when every selected record was summarized (or changed meanwhile),
    /// 124 after `--timeout`, 130 after Ctrl-C (143 after SIGTERM), 1 after an error or
    /// when some records failed.
    pub fn exit_code(&self) -> i32 {
        self.exit_code
    }

    fn print_human(&self) {
        let scope = match &self.scope {
            Some(s) => format!("scope {s}"),
            None => "all scopes".to_owned(),
        };
        let age = match &self.older_than {
            Some(d) => {
                format!(", created at least {d} ago (at or before {})", self.created_at_or_before)
            }
            None => String::new(),
        };
        if self.dry_run {
            println!(
                "dry run: {} without a summary in {scope}{age}",
                count(self.eligible, "record")
            );
            if self.selected < self.eligible {
                println!("with --limit, a run would summarize {} of them", self.selected);
            }
            println!("nothing was written or sent to a summarizer");
            return;
        }
        let via = self.endpoint.as_ref().map(|e| format!(" at {e}")).unwrap_or_default();
        if self.selected == 0 {
            println!("nothing to summarize: no record without a summary in {scope}{age}");
        } else {
            println!(
                "summarized {} of {} with {}{via} in {:.1} s",
                self.summarized,
                count(self.selected, "record"),
                self.model,
                self.seconds
            );
        }
        if self.changed_meanwhile > 0 {
            let n = self.changed_meanwhile;
            println!(
                "{n} record{} edited, summarized or deleted meanwhile by someone else, and left \
                 as {}",
                if n == 1 { " was" } else { "s were" },
                if n == 1 { "it was" } else { "they were" }
            );
        }
        if self.failed > 0 {
            println!(
                "{} could not be summarized (nothing written for them):",
                count(self.failed, "record")
            );
            for f in &self.failures {
                println!("  {}: {}", f.id, f.error);
            }
            if self.failed > self.failures.len() as u64 {
                println!("  … and {} more", self.failed - self.failures.len() as u64);
            }
        }
    }

    /// Why the run ended early, on stderr (in both output modes).
    fn print_stop(&self, timeout: Duration) {
        match self.stopped {
            Some("timeout") => eprintln!(
                "stopped by --timeout {} with {} not reached (untouched); run again to continue",
                humantime::format_duration(timeout),
                count(self.not_reached, "record")
            ),
            Some(_) => eprintln!(
                "interrupted with {} not reached (untouched); run again to continue",
                count(self.not_reached, "record")
            ),
            None => {}
        }
        if let Some(e) = &self.error {
            eprintln!(
                "error: {e}\nstopped with {} not reached (untouched); run again to continue",
                count(self.not_reached, "record")
            );
        }
    }
}

/// Runs the summarizer on its own thread, so that waiting for an answer can be abandoned
/// when the run must stop.
struct Worker {
    jobs: mpsc::Sender<String>,
    answers: mpsc::Receiver<Result<Summary, Failure>>,
}

impl Worker {
    fn start(summarizer: Arc<dyn Summarizer>) -> Result<Worker> {
        let (jobs, job_rx) = mpsc::channel::<String>();
        let (answer_tx, answers) = mpsc::channel();
        std::thread::Builder::new().name("summarizer".into()).spawn(move || {
            for content in job_rx {
                if answer_tx.send(summarizer.summarize(&content)).is_err() {
                    break;
                }
            }
        })?;
        Ok(Worker { jobs, answers })
    }

    /// The summary of `content`, or why the run must stop first.
    fn summarize(&self, content: String, stop: &Stop) -> Result<Result<Summary, Failure>, Stopped> {
        if self.jobs.send(content).is_err() {
            return Ok(Err(Failure::Provider("the summarizer thread ended".into())));
        }
        loop {
            match self.answers.recv_timeout(Duration::from_millis(25)) {
                Ok(answer) => return Ok(answer),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(why) = stop.check() {
                        return Err(why);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Ok(Err(Failure::Provider("the summarizer thread panicked".into())));
                }
            }
        }
    }
}

/// What to sweep.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// Scope and age.
    pub which: MissingSummaries,
    /// Most records to work through (0 = all).
    pub limit: u64,
    /// `--older-than` as given, for the report.
    pub older_than: Option<String>,
    /// Count only.
    pub dry_run: bool,
    /// The client summary bound (`--memory-max-summary-bytes`): an auto summary fits it too.
    pub max_summary_bytes: usize,
}

/// Sweeps `store`: counts what `sweep` selects and, unless it is a dry run, summarizes it
/// with `summarizer` until done or `stop` says so. Blocking.
pub fn summarize_missing(
    store: &SqliteStore,
    sweep: &Sweep,
    summarizer: Arc<dyn Summarizer>,
    endpoint: Option<String>,
    stop: &Stop,
) -> Result<Report> {
    let started = Instant::now();
    let max_summary_bytes = sweep.max_summary_bytes;
    let eligible = store.count_missing_summaries(&sweep.which)?;
    let selected = if sweep.limit == 0 { eligible } else { eligible.min(sweep.limit) };
    let mut report = Report {
        model: summarizer.model().to_owned(),
        endpoint,
        scope: sweep.which.scope.as_ref().map(|s| s.as_str().to_owned()),
        older_than: sweep.older_than.clone(),
        created_at_or_before: sweep.which.created_at_or_before.to_rfc3339(),
        dry_run: sweep.dry_run,
        eligible,
        selected,
        summarized: 0,
        changed_meanwhile: 0,
        failed: 0,
        failures: vec![],
        not_reached: 0,
        stopped: None,
        error: None,
        seconds: 0.0,
        exit_code: 0,
    };
    if sweep.dry_run {
        report.seconds = started.elapsed().as_secs_f64();
        return Ok(report);
    }
    if selected == 0 {
        report.seconds = started.elapsed().as_secs_f64();
        return Ok(report);
    }
    let worker = Worker::start(summarizer.clone())?;
    let mut progress = Progress::new("summarizing", selected);
    let cap = if sweep.limit == 0 { u64::MAX } else { sweep.limit };
    let (mut taken, mut failures_in_a_row) = (0u64, 0u32);
    let mut after: Option<(Timestamp, RecordId)> = None;
    'pages: while taken < cap {
        let want = (cap - taken).min(PAGE as u64) as usize;
        let page = store.missing_summaries(&sweep.which, after, want)?;
        let Some(last) = page.last() else { break };
        after = Some((last.created_at, last.id));
        for record in page {
            if let Some(why) = stop.check() {
                report.stopped = Some(why.as_str());
                report.exit_code = why.exit_code();
                break 'pages;
            }
            let answer = match worker.summarize(record.content.clone(), stop) {
                Ok(answer) => answer,
                Err(why) => {
                    report.stopped = Some(why.as_str());
                    report.exit_code = why.exit_code();
                    break 'pages;
                }
            };
            taken += 1;
            match answer {
                Ok(summary) => {
                    failures_in_a_row = 0;
                    // Within the client summary bound too, so a client can send it back.
                    let text = bound_bytes(&summary.text, max_summary_bytes);
                    let written = AutoSummary {
                        summary: &text,
                        model: summarizer.model(),
                        egress_at: summary.egress_at,
                    };
                    match store.set_auto_summary(&record.id, &record.content, written) {
                        Ok(true) => report.summarized += 1,
                        Ok(false) => report.changed_meanwhile += 1,
                        Err(e) => {
                            report.error =
                                Some(format!("writing the summary of {}: {e}", record.id));
                            break 'pages;
                        }
                    }
                }
                Err(Failure::Record(why)) => {
                    tracing::warn!(id = %record.id, error = %why, "no summary for this record");
                    report.failed += 1;
                    if report.failures.len() < MAX_FAILURES_LISTED {
                        report
                            .failures
                            .push(FailedRecord { id: record.id.to_string(), error: why.clone() });
                    }
                    failures_in_a_row += 1;
                    if failures_in_a_row >= MAX_FAILURES_IN_A_ROW {
                        report.error = Some(format!(
                            "the summarizer failed on {MAX_FAILURES_IN_A_ROW} records in a row; \
                             the last error: {why}"
                        ));
                        break 'pages;
                    }
                }
                Err(Failure::Provider(why)) => {
                    report.error = Some(why);
                    break 'pages;
                }
            }
            progress.advance(1);
        }
    }
    progress.finish();
    let done = report.summarized + report.changed_meanwhile + report.failed;
    report.not_reached = selected.saturating_sub(done);
    if report.exit_code == 0 && (report.error.is_some() || report.failed > 0) {
        report.exit_code = 1;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A checked `spine summarize-missing` invocation: flags and settings are valid.
#[derive(Debug)]
pub struct Plan {
    args: SummarizeArgs,
    scope: Option<spine_core::Scope>,
    settings: Settings,
    max_summary_bytes: usize,
}

impl Plan {
    /// Checks the flags and the `SPINE_SUMMARY_*` settings (no I/O): misuse is reported
    /// before anything is opened.
    pub fn new(args: &SummarizeArgs, max_summary_bytes: usize) -> Result<Plan> {
        let scope = args.scope.resolve()?;
        let settings = Settings::new(&args.summary)?;
        Ok(Plan { args: args.clone(), scope, settings, max_summary_bytes })
    }

    /// Sweeps `store` and prints the report; returns the exit status. Blocking: call from a
    /// blocking thread, with `stop` installed on the runtime.
    pub fn run(self, store: &SqliteStore, stop: &Stop) -> Result<i32> {
        let (summarizer, endpoint): (Arc<dyn Summarizer>, Option<String>) =
            match &self.settings.provider {
                Provider::Extractive => {
                    (Arc::new(Extractive { max_chars: self.settings.max_chars }), None)
                }
                Provider::Chat(config) => {
                    let chat = chat::ChatSummarizer::new(config.clone())?;
                    let url = chat.endpoint().to_owned();
                    (Arc::new(chat), Some(url))
                }
            };
        let now = SystemClock.now();
        let age = i64::try_from(self.args.older_than.as_micros()).unwrap_or(i64::MAX);
        let sweep = Sweep {
            which: MissingSummaries {
                scope: self.scope,
                created_at_or_before: Timestamp::from_micros(now.as_micros().saturating_sub(age)),
            },
            limit: self.args.limit,
            older_than: (!self.args.older_than.is_zero())
                .then(|| humantime::format_duration(self.args.older_than).to_string()),
            dry_run: self.args.dry_run,
            max_summary_bytes: self.max_summary_bytes,
        };
        if let Some(url) = &endpoint
            && !self.args.dry_run
        {
            tracing::info!(endpoint = %url, model = %self.settings.model, "summarizing with a chat model");
        }
        let report = summarize_missing(store, &sweep, summarizer, endpoint, stop)?;
        self.args.output.print(&report, || report.print_human())?;
        report.print_stop(self.args.timeout);
        // The caller may exit the process with the status: nothing may stay buffered.
        std::io::Write::flush(&mut std::io::stdout())?;
        Ok(report.exit_code())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn summaries_fit_the_client_summary_bound_in_bytes() {
        let cjk = "記憶".repeat(140); // 280 characters, 840 bytes
        let cut = super::bound_bytes(&cjk, 512);
        assert!(cut.len() <= 512 && cut.ends_with('…'), "{} bytes", cut.len());
        assert!(cut.len() > 500, "cut no more than needed: {} bytes", cut.len());
        assert_eq!(super::bound_bytes("short", 512), "short");
    }

    use super::*;

    fn settings(args: &[&str]) -> Result<Settings> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            summary: SummaryArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(
            std::iter::once("spine").chain(args.iter().copied()),
        )?;
        Settings::new(&cli.summary)
    }

    #[test]
    fn the_model_is_required() {
        for args in [&[][..], &["--summary-model", "  "][..]] {
            let e = settings(args).unwrap_err().to_string();
            assert!(
                e.contains("(SPINE_SUMMARY_MODEL) is not set") && e.contains("builtin:extractive"),
                "{e}"
            );
        }
    }

    #[test]
    fn builtin_extractive_needs_no_url() {
        let s = settings(&["--summary-model", "builtin:extractive"]).unwrap();
        assert_eq!((s.model.as_str(), s.max_chars), ("builtin:extractive", 280));
        assert!(matches!(s.provider, Provider::Extractive));
        let e = settings(&["--summary-model", "builtin:abstractive"]).unwrap_err().to_string();
        assert!(e.contains("no such built-in summarizer"), "{e}");
    }

    #[test]
    fn a_chat_model_needs_a_url() {
        let e = settings(&["--summary-model", "llama3.2"]).unwrap_err().to_string();
        assert!(e.contains("SPINE_SUMMARY_URL"), "{e}");
        let s = settings(&[
            "--summary-model=llama3.2",
            "--summary-url=http://localhost:11434",
            "--summary-api-key=k",
            "--summary-max-chars=100",
            "--summary-request-timeout=5m",
        ])
        .unwrap();
        let Provider::Chat(c) = s.provider else { panic!("chat") };
        assert_eq!(
            (c.model.as_str(), c.api_key.as_ref().map(|k| k.expose()), c.max_chars),
            ("llama3.2", Some("k"), 100)
        );
        assert_eq!(c.timeout, Duration::from_secs(300));
    }

    #[test]
    fn max_chars_and_timeout_are_validated() {
        for bad in ["0", "19", "4097", "-5", "many", "2.5"] {
            let arg = format!("--summary-max-chars={bad}");
            let e = settings(&["--summary-model=builtin:extractive", &arg]).unwrap_err();
            assert!(e.to_string().contains("must be a whole number from 20 to 4096"), "{bad}: {e}");
        }
        for bad in ["0", "soon"] {
            let arg = format!("--summary-request-timeout={bad}");
            let e = settings(&["--summary-model=builtin:extractive", &arg]).unwrap_err();
            assert!(e.to_string().contains("such as 90s"), "{bad}: {e}");
        }
    }

    #[test]
    fn bound_cuts_on_a_word_boundary_within_the_limit() {
        assert_eq!(bound_chars("short enough", 20), "short enough");
        assert_eq!(bound_chars("alpha beta gamma delta", 12), "alpha beta…");
        assert_eq!(bound_chars("alpha beta, gamma", 13), "alpha beta…");
        // No boundary in the second half of the budget: cut mid-word.
        assert_eq!(bound_chars("supercalifragilistic word", 10), "supercali…");
        // Characters, not bytes.
        let s = bound_chars("日本語のテキストはとても長いです", 8);
        assert_eq!(s, "日本語のテキス…");
        for n in 1..40 {
            assert!(
                bound_chars("The quick brown fox jumps over the lazy dog again", n).chars().count()
                    <= n
            );
        }
    }

    #[test]
    fn answers_are_cleaned_before_they_are_stored() {
        assert_eq!(finish("  Use rustls.\n\n", 280).unwrap(), "Use rustls.");
        assert_eq!(finish("\"Use rustls.\"", 280).unwrap(), "Use rustls.");
        assert_eq!(finish("Summary: Use  rustls\nfor TLS.", 280).unwrap(), "Use rustls for TLS.");
        assert_eq!(finish("<think>hmm, tls</think>\nUse rustls.", 280).unwrap(), "Use rustls.");
        assert_eq!(finish("<think>never finished", 280), None);
        assert_eq!(finish(" \n ", 280), None);
        assert_eq!(finish("\"\"", 280), None);
        assert_eq!(finish("\"a\" and \"b\"", 280).unwrap(), "\"a\" and \"b\"");
    }
}
