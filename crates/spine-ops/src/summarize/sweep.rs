//! The sweep: counts what a run selects and summarizes it, record by record, until done,
//! stopped, or the provider fails.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;
use spine_core::{RecordId, Timestamp};
use spine_store::{AutoSummary, MissingSummaries, SummaryStore};

use super::{Failure, Summarizer, Summary, bound_bytes};
use crate::stop::{Interrupt, Stopped};
use crate::{Progress, Result};

/// Records read per page.
const PAGE: usize = 64;
/// Consecutive failed records after which the run stops: the provider is failing, not
/// the records.
const MAX_FAILURES_IN_A_ROW: u32 = 10;
/// Failures listed in the report (all are counted).
pub const MAX_FAILURES_LISTED: usize = 100;

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
    /// 124 after a timeout, 130 after Ctrl-C (143 after SIGTERM), 1 after an error or when
    /// some records failed.
    pub fn exit_code(&self) -> i32 {
        self.exit_code
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
        let spawn_failed = |e: std::io::Error| crate::Error::Io {
            context: "starting the summarizer thread".into(),
            source: e,
        };
        let (jobs, job_rx) = mpsc::channel::<String>();
        let (answer_tx, answers) = mpsc::channel();
        std::thread::Builder::new()
            .name("summarizer".into())
            .spawn(move || {
                for content in job_rx {
                    if answer_tx.send(summarizer.summarize(&content)).is_err() {
                        break;
                    }
                }
            })
            .map_err(spawn_failed)?;
        Ok(Worker { jobs, answers })
    }

    /// The summary of `content`, or why the run must stop first.
    fn summarize(
        &self,
        content: String,
        stop: &dyn Interrupt,
    ) -> Result<Result<Summary, Failure>, Stopped> {
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
    store: &dyn SummaryStore,
    sweep: &Sweep,
    summarizer: Arc<dyn Summarizer>,
    endpoint: Option<String>,
    stop: &dyn Interrupt,
    progress: &mut dyn Progress,
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
    progress.start("summarizing", selected);
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
