//! Every outbound model call goes through here: the OpenAI-compatible embedder, the
//! reranker of search (`spine-service`) and the chat summarizer of `spine
//! summarize-missing` (`spine-ops`). One endpoint rule for the URL an operator gives, one
//! blocking client builder, one JSON POST with the bearer key, one classification of
//! failures, one retry loop with back-off, and one API-key type that never reaches a log
//! line.
//!
//! Blocking on purpose: the callers run on blocking threads (SQLite and inference stay off
//! the async reactor), so the traits above stay synchronous.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// A provider's API key, sent as `Authorization: Bearer <key>`. `Debug` and `Display` show
/// `<redacted>`: a configuration printed in a log never leaks it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// The key, or `None` for an empty string (an unset variable is no key).
    pub fn new(key: impl Into<String>) -> Option<ApiKey> {
        let key = key.into();
        (!key.is_empty()).then_some(ApiKey(key))
    }

    /// The secret itself, for the request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where requests for `path` go under the base URL an operator gave: `{base}/{version}/{path}`
/// (`{base}/{path}` when `version` is empty), without doubling what the operator already
/// wrote — a trailing `/{version}`, the whole path, a trailing `/` — and over http or https
/// only.
///
/// `version` is `v1` for the OpenAI-compatible APIs (`embeddings`, `chat/completions`), so
/// `http://localhost:11434`, `…/v1` and `…/v1/embeddings` name the same endpoint; empty for
/// the rerank API, which TEI, Cohere and Jina serve under a prefix of their own. The error
/// reads after the setting's name: "must start with http:// or https:// (got …)" or "… is
/// not valid: …".
pub fn endpoint(base: &str, version: &str, path: &str) -> Result<reqwest::Url, String> {
    let base = base.trim().trim_end_matches('/');
    let url = if base.ends_with(&format!("/{path}")) {
        base.to_owned()
    } else if version.is_empty() || base.ends_with(&format!("/{version}")) {
        format!("{base}/{path}")
    } else {
        format!("{base}/{version}/{path}")
    };
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) {
        return Err(format!("must start with http:// or https:// (got {base})"));
    }
    reqwest::Url::parse(&url).map_err(|e| format!("{url} is not valid: {e}"))
}

/// A blocking client whose requests (connection included) take at most `timeout`, and
/// whose connection attempts at most 10 s of it.
/// reqwest's blocking client refuses to be built on a thread inside a tokio runtime (the
/// `spine` binary's main thread is one), so it is built on a thread of its own.
pub fn blocking_client(timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .connect_timeout(timeout.min(Duration::from_secs(10)))
                .build()
        })
        .join()
        .map_err(|_| "building the HTTP client panicked".to_owned())
    })?
    .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// A provider's answer: status, `Retry-After` (seconds), body.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: reqwest::StatusCode,
    /// The `Retry-After` header, when it holds seconds.
    pub retry_after: Option<Duration>,
    /// The body.
    pub body: Vec<u8>,
}

/// POSTs `body` as JSON to `url`, with `key` as bearer token when given, and reads the
/// whole answer.
pub fn post_json(
    client: &reqwest::blocking::Client,
    url: reqwest::Url,
    key: Option<&ApiKey>,
    body: &impl Serialize,
) -> Result<Answer, reqwest::Error> {
    let mut request = client.post(url).json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key.expose());
    }
    let response = request.send()?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body = response.bytes()?.to_vec();
    Ok(Answer { status, retry_after, body })
}

/// How one attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Worth another attempt, after at least this long (from `Retry-After`), if given.
    Transient(String, Option<Duration>),
    /// The same request would fail again.
    Permanent(String),
}

impl Failure {
    /// A non-success answer of `url`: 429 and 5xx are transient, other statuses permanent.
    pub fn of_status(url: &str, answer: &Answer) -> Failure {
        let msg = format!(
            "{url} answered HTTP {}: {}",
            answer.status,
            snippet(&String::from_utf8_lossy(&answer.body))
        );
        if answer.status.as_u16() == 429 || answer.status.is_server_error() {
            Failure::Transient(msg, answer.retry_after)
        } else {
            Failure::Permanent(msg)
        }
    }

    /// A request to `url` (limited to `timeout`) that failed on the wire: a connection
    /// error, a timeout or an answer cut short may pass on another attempt; a request that
    /// could not even be built will not.
    pub fn of_transport(url: &str, timeout: Duration, e: &reqwest::Error) -> Failure {
        let what = if e.is_timeout() {
            format!("timed out after {timeout:?}")
        } else if e.is_connect() {
            "could not connect".to_owned()
        } else {
            "the request failed".to_owned()
        };
        let msg = format!("{url}: {what}: {}", error_chain(e));
        if e.is_builder() { Failure::Permanent(msg) } else { Failure::Transient(msg, None) }
    }
}

/// How often and how patiently to retry transient failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Extra attempts after the first.
    pub retries: u32,
    /// Wait before the first retry, doubled at each further one.
    pub backoff: Duration,
}

/// Runs `attempt` until it succeeds, fails permanently, or the retries are spent (see
/// [`retry_after_failure`] for the waits); the error is the last failure's message. `what`
/// names the request in log lines.
pub fn with_retries<T>(
    what: &str,
    policy: Retry,
    mut attempt: impl FnMut() -> Result<T, Failure>,
) -> Result<T, String> {
    let mut n = 0u32;
    loop {
        match attempt() {
            Ok(v) => return Ok(v),
            Err(Failure::Permanent(msg)) => return Err(msg),
            Err(Failure::Transient(msg, retry_after)) => {
                retry_after_failure(what, msg, retry_after, &mut n, policy.retries, policy.backoff)?
            }
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_never_doubled_and_only_http() {
        let at = |base, version, path| endpoint(base, version, path).map(|u| u.to_string());
        for base in
            ["http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/", " http://h:1/v1 "]
        {
            assert_eq!(at(base, "v1", "embeddings").unwrap(), "http://h:1/v1/embeddings", "{base}");
        }
        assert_eq!(
            at("http://h:1/v1/embeddings", "v1", "embeddings").unwrap(),
            "http://h:1/v1/embeddings"
        );
        assert_eq!(
            at("https://g/openai", "v1", "embeddings").unwrap(),
            "https://g/openai/v1/embeddings"
        );
        assert_eq!(
            at("https://g/x/chat/completions", "v1", "chat/completions").unwrap(),
            "https://g/x/chat/completions"
        );
        assert_eq!(at("http://h:8080", "", "rerank").unwrap(), "http://h:8080/rerank");
        assert_eq!(at("https://h/v1/", "", "rerank").unwrap(), "https://h/v1/rerank");
        assert_eq!(at("HTTPS://h/rerank", "", "rerank").unwrap(), "https://h/rerank");
        for bad in ["ftp://h", "not a url", "", "h:1/v1"] {
            let e = at(bad, "v1", "embeddings").unwrap_err();
            assert!(e.starts_with("must start with http:// or https://"), "{bad}: {e}");
        }
        let e = at("http://h:99999", "v1", "embeddings").unwrap_err();
        assert!(e.contains("is not valid"), "{e}");
    }

    #[test]
    fn keys_never_show_and_empty_is_none() {
        let key = ApiKey::new("sk-secret").unwrap();
        assert_eq!(format!("{key:?} {key}"), "<redacted> <redacted>");
        assert_eq!(key.expose(), "sk-secret");
        assert_eq!(ApiKey::new(""), None);
    }

    #[test]
    fn retries_stop_at_success_permanent_failure_or_the_limit() {
        let quick = Retry { retries: 2, backoff: Duration::ZERO };
        let mut calls = 0;
        let r = with_retries("t", quick, || {
            calls += 1;
            if calls < 3 { Err(Failure::Transient("busy".into(), None)) } else { Ok(calls) }
        });
        assert_eq!(r, Ok(3));
        let mut calls = 0;
        let r: Result<(), String> = with_retries("t", quick, || {
            calls += 1;
            Err(Failure::Transient("busy".into(), None))
        });
        assert_eq!((calls, r.unwrap_err().contains("gave up after 3 attempts")), (3, true));
        let mut calls = 0;
        let r: Result<(), String> = with_retries("t", quick, || {
            calls += 1;
            Err(Failure::Permanent("bad request".into()))
        });
        assert_eq!((calls, r), (1, Err("bad request".into())));
    }
}
