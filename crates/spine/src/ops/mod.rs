//! What the operator commands share: scope selection, durations, progress and output.
//!
//! Every operator command works on the same data directory as a running `spine serve` or
//! `spine mcp` (SQLite serialises writers; the servers' search index follows every change
//! through the store's change log), shows a progress bar on a terminal and plain lines
//! otherwise, and prints either human text or, with `--json`, one JSON document on stdout.

pub mod audit;
pub mod export;
pub mod import;
pub mod migrate;
pub mod prune;
pub mod reindex;
pub mod review;
pub mod stop;
pub mod summarize;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use spine_core::Scope;

/// `--scope S | --all-scopes`: sweep commands require one of them (SPEC Errors 9).
#[derive(Debug, Clone, Default, Args)]
pub struct ScopeArgs {
    /// Only this scope.
    #[arg(long)]
    pub scope: Option<String>,
    /// Every scope (required when --scope is not given).
    #[arg(long, conflicts_with = "scope")]
    pub all_scopes: bool,
}

impl ScopeArgs {
    /// The scope to work on, `None` for every scope; an error when neither flag was given or
    /// the scope is malformed.
    pub fn resolve(&self) -> Result<Option<Scope>> {
        match (self.scope.as_deref().filter(|s| !s.is_empty()), self.all_scopes) {
            (Some(s), _) => {
                Ok(Some(Scope::parse("--scope", s).map_err(|e| anyhow::anyhow!("{}", e.message))?))
            }
            (None, true) => Ok(None),
            (None, false) => bail!("give --scope <scope> or --all-scopes"),
        }
    }
}

/// `--json`: one JSON document on stdout instead of human text.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct OutputArgs {
    /// Print the result as JSON (for scripts).
    #[arg(long)]
    pub json: bool,
}

impl OutputArgs {
    /// Prints `value` as pretty JSON when `--json` was given, else runs `human`.
    pub fn print<T: serde::Serialize>(&self, value: &T, human: impl FnOnce()) -> Result<()> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(value)?);
        } else {
            human();
        }
        Ok(())
    }
}

/// Parses a duration such as `30m`, `7d`, `1h 30m` or `0` (humantime syntax).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e}; use a duration such as 90s, 30m, 12h or 7d"))
}

/// `n` with the singular or plural of `noun`.
pub fn count(n: u64, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Progress of a long command: a bar on a terminal, plain lines (at most one a second) on
/// stderr otherwise. The label names the work ("re-embedding", "exporting").
#[derive(Default)]
pub struct Progress {
    shown: Option<Shown>,
}

enum Shown {
    /// On a terminal.
    Bar(ProgressBar),
    /// Anywhere else.
    Lines {
        /// What is being done.
        label: String,
        /// When the last line was printed.
        last: Instant,
        /// Expected items (grows if more are done).
        total: u64,
        /// Items done.
        done: u64,
    },
}

impl spine_ops::Progress for Progress {
    fn start(&mut self, label: &str, total: u64) {
        self.finish();
        self.shown = Some(if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(&format!(
                "{label} {{wide_bar}} {{pos}}/{{len}} ({{rate}}, eta {{eta}})"
            )) {
                bar.set_style(style.with_key(
                    "rate",
                    |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.0}/s", s.per_sec());
                    },
                ));
            }
            Shown::Bar(bar)
        } else {
            eprintln!("{label}: {total} to do");
            Shown::Lines { label: label.to_owned(), last: Instant::now(), total, done: 0 }
        });
    }

    fn advance(&mut self, n: u64) {
        match &mut self.shown {
            Some(Shown::Bar(bar)) => {
                bar.inc(n);
                if bar.position() > bar.length().unwrap_or(0) {
                    bar.set_length(bar.position());
                }
            }
            Some(Shown::Lines { label, last, total, done }) => {
                *done += n;
                *total = (*total).max(*done);
                if last.elapsed() >= Duration::from_secs(1) {
                    eprintln!("{label}: {done}/{total}");
                    *last = Instant::now();
                }
            }
            None => {}
        }
    }

    fn finish(&mut self) {
        match self.shown.take() {
            Some(Shown::Bar(bar)) => bar.finish_and_clear(),
            Some(Shown::Lines { label, done, total, .. }) => eprintln!("{label}: {done}/{total}"),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_zero() {
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("7d").unwrap(), Duration::from_secs(7 * 86400));
        assert!(parse_duration("soon").unwrap_err().contains("such as"));
    }

    #[test]
    fn a_sweep_needs_a_scope_or_all_scopes() {
        let none = ScopeArgs::default();
        assert!(none.resolve().unwrap_err().to_string().contains("--all-scopes"));
        let all = ScopeArgs { all_scopes: true, ..ScopeArgs::default() };
        assert_eq!(all.resolve().unwrap(), None);
        let one = ScopeArgs { scope: Some("acme:project:x".into()), all_scopes: false };
        assert_eq!(one.resolve().unwrap().unwrap().as_str(), "acme:project:x");
        let bad = ScopeArgs { scope: Some("nope".into()), all_scopes: false };
        assert!(bad.resolve().is_err());
    }
}
