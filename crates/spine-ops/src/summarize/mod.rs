//! `spine summarize-missing`: fills the summary of records that have none (SPEC "Operator
//! commands"), in place, with summary_source=auto.
//!
//! - The summarizer is a [`Provider`]: `builtin:extractive` (offline, [`extractive`]) or a
//!   chat model on an OpenAI-compatible server ([`chat`]).
//! - Records are taken oldest first; each summary is written by its own conditional update
//!   ([`spine_store::SummaryStore::set_auto_summary`]): only while the record still has no
//!   summary and still has the content that was summarized. A client summary is never
//!   touched, a concurrent `update_memory` always wins, and a stop between two records
//!   leaves each one either summarized or untouched ([`summarize_missing`]).
//! - The summarizer runs on its own thread, so a stop does not wait for a slow answer: the
//!   answer is abandoned and nothing is written for that record.

pub mod chat;
pub mod extractive;
mod sweep;

use std::sync::Arc;

use spine_core::Timestamp;

pub use spine_store::MissingSummaries;
pub use sweep::{FailedRecord, Report, Sweep, summarize_missing};

/// Where summaries come from.
#[derive(Debug, Clone)]
pub enum Provider {
    /// `builtin:extractive`, with this longest summary in characters.
    Extractive {
        /// `SPINE_SUMMARY_MAX_CHARS`.
        max_chars: usize,
    },
    /// An OpenAI-compatible chat-completions server.
    Chat(chat::ChatConfig),
}

impl Provider {
    /// The summarizer, and the URL content is sent to (`None` for the built-in one). Makes
    /// no request.
    pub fn summarizer(&self) -> crate::Result<(Arc<dyn Summarizer>, Option<String>)> {
        Ok(match self {
            Provider::Extractive { max_chars } => {
                (Arc::new(Extractive { max_chars: *max_chars }), None)
            }
            Provider::Chat(config) => {
                let chat = chat::ChatSummarizer::new(config.clone())?;
                let url = chat.endpoint().to_owned();
                (Arc::new(chat), Some(url))
            }
        })
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
pub struct Extractive {
    /// Longest summary, in characters.
    pub max_chars: usize,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_fit_the_client_summary_bound_in_bytes() {
        let cjk = "記憶".repeat(140); // 280 characters, 840 bytes
        let cut = super::bound_bytes(&cjk, 512);
        assert!(cut.len() <= 512 && cut.ends_with('…'), "{} bytes", cut.len());
        assert!(cut.len() > 500, "cut no more than needed: {} bytes", cut.len());
        assert_eq!(super::bound_bytes("short", 512), "short");
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
