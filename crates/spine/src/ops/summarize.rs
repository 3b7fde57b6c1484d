//! `spine summarize-missing`: the flags, the summarizer settings and the printed report;
//! the sweep itself is [`spine_ops::summarize`].

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use spine_core::{Clock, SystemClock, Timestamp};
use spine_ops::OperatorStore;
use spine_ops::summarize::{
    MissingSummaries, Provider, Report, Sweep, chat, extractive, summarize_missing,
};

use super::stop::Stop;
use super::{OutputArgs, Progress, ScopeArgs, count, parse_duration};

/// Bounds of `SPINE_SUMMARY_MAX_CHARS`: shorter is not a summary, longer is not short.
const MAX_CHARS_RANGE: std::ops::RangeInclusive<usize> = 20..=4096;

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
    #[arg(long, env = "SPINE_SUMMARY_MAX_CHARS", default_value_t = spine_core::limits::DEFAULT_SUMMARY_CHARS, value_parser = summary_max_chars)]
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
    /// Where summaries come from.
    pub provider: Provider,
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
            return Ok(Settings { model, provider: Provider::Extractive { max_chars } });
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
        Ok(Settings { model, provider: Provider::Chat(config) })
    }
}

fn print_human(r: &Report) {
    let scope = match &r.scope {
        Some(s) => format!("scope {s}"),
        None => "all scopes".to_owned(),
    };
    let age = match &r.older_than {
        Some(d) => {
            format!(", created at least {d} ago (at or before {})", r.created_at_or_before)
        }
        None => String::new(),
    };
    if r.dry_run {
        println!("dry run: {} without a summary in {scope}{age}", count(r.eligible, "record"));
        if r.selected < r.eligible {
            println!("with --limit, a run would summarize {} of them", r.selected);
        }
        println!("nothing was written or sent to a summarizer");
        return;
    }
    let via = r.endpoint.as_ref().map(|e| format!(" at {e}")).unwrap_or_default();
    if r.selected == 0 {
        println!("nothing to summarize: no record without a summary in {scope}{age}");
    } else {
        println!(
            "summarized {} of {} with {}{via} in {:.1} s",
            r.summarized,
            count(r.selected, "record"),
            r.model,
            r.seconds
        );
    }
    if r.changed_meanwhile > 0 {
        let n = r.changed_meanwhile;
        println!(
            "{n} record{} edited, summarized or deleted meanwhile by someone else, and left \
             as {}",
            if n == 1 { " was" } else { "s were" },
            if n == 1 { "it was" } else { "they were" }
        );
    }
    if r.failed > 0 {
        println!(
            "{} could not be summarized (nothing written for them):",
            count(r.failed, "record")
        );
        for f in &r.failures {
            println!("  {}: {}", f.id, f.error);
        }
        if r.failed > r.failures.len() as u64 {
            println!("  … and {} more", r.failed - r.failures.len() as u64);
        }
    }
}

/// Why the run ended early, on stderr (in both output modes).
fn print_stop(r: &Report, timeout: Duration) {
    match r.stopped {
        Some("timeout") => eprintln!(
            "stopped by --timeout {} with {} not reached (untouched); run again to continue",
            humantime::format_duration(timeout),
            count(r.not_reached, "record")
        ),
        Some(_) => eprintln!(
            "interrupted with {} not reached (untouched); run again to continue",
            count(r.not_reached, "record")
        ),
        None => {}
    }
    if let Some(e) = &r.error {
        eprintln!(
            "error: {e}\nstopped with {} not reached (untouched); run again to continue",
            count(r.not_reached, "record")
        );
    }
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
    pub fn run(self, store: &dyn OperatorStore, stop: &Stop) -> Result<i32> {
        let (summarizer, endpoint) = self.settings.provider.summarizer()?;
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
        let mut progress = Progress::default();
        let report = summarize_missing(store, &sweep, summarizer, endpoint, stop, &mut progress)?;
        self.args.output.print(&report, || print_human(&report))?;
        print_stop(&report, self.args.timeout);
        // The caller may exit the process with the status: nothing may stay buffered.
        std::io::Write::flush(&mut std::io::stdout())?;
        Ok(report.exit_code())
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(s.model, "builtin:extractive");
        assert!(matches!(s.provider, Provider::Extractive { max_chars: 280 }));
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
}
