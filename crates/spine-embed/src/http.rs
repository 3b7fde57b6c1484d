//! What the HTTP clients share (the OpenAI-compatible embedder here, and the chat
//! summarizer of `spine summarize-missing`): the retry back-off and error diagnostics.

use std::time::Duration;

/// Longest wait between two attempts, whatever `Retry-After` asks.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// After transient failure number `attempt` (0-based) of a request allowed `retries`
/// retries: sleeps the back-off (`backoff` doubled per attempt, at least `retry_after`, at
/// most [`MAX_BACKOFF`]), counts the attempt and returns `Ok`; or, when the retries are
/// spent, returns the give-up message. `what` names the request in the log line.
pub fn retry_after_failure(
    what: &str,
    msg: String,
    retry_after: Option<Duration>,
    attempt: &mut u32,
    retries: u32,
    backoff: Duration,
) -> Result<(), String> {
    if *attempt >= retries {
        let tries = *attempt + 1;
        return Err(format!(
            "{msg} (gave up after {tries} attempt{})",
            if tries == 1 { "" } else { "s" }
        ));
    }
    let doubled = backoff.saturating_mul(1 << (*attempt).min(16));
    let wait = retry_after.map_or(doubled, |r| r.max(doubled)).min(MAX_BACKOFF);
    *attempt += 1;
    tracing::warn!(
        error = %msg,
        attempt = *attempt,
        wait_ms = wait.as_millis() as u64,
        "{what} request failed; retrying"
    );
    std::thread::sleep(wait);
    Ok(())
}

/// The first 300 characters of a body, on one line, for error messages.
pub fn snippet(body: &str) -> String {
    let one_line: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut s: String = one_line.chars().take(300).collect();
    if s.len() < one_line.len() {
        s.push('…');
    }
    if s.is_empty() { "(empty body)".into() } else { s }
}

/// An error with its sources ("error sending request: connection refused").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = inner.source();
    }
    s
}
